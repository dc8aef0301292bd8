/**
 * The gateway build bench:throughput measures. `dist` (the default) is what ships: the sources compiled by
 * `tsconfig.build.json` (the `npm run build` config the Dockerfile's runtime stage runs as `node dist/cli.js`), here
 * into `.build-bench/` at the package root (a sibling of src/ and dashboard/, as dist/ is) so the compiled code finds
 * node_modules, package.json, the dashboard and the tokenizer files as dist/ does. `tsx` runs src/ through tsx's loader (`npm start`): closures there pay for esbuild's
 * `__name` wrapper, which is dev-only cost. The event-loop probe, the load generator and the SSE floor server (they share the
 * cores with the gateway) are compiled beside the build into `.build-bench/_bench/`, so no measured process loads tsx.
 */
import { execFile } from 'node:child_process';
import { rm } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

/** Which build of the gateway runs under the bench. */
export type GatewayRuntime = 'dist' | 'tsx';

/** How to start one build: node options before the entry point, and the entry point. */
export interface GatewayBuild {
  runtime: GatewayRuntime;
  /** Node options (`--import ...`) that come before the CLI path. */
  nodeArgs: string[];
  /** The CLI entry point (`src/cli.ts` or `.build-bench/cli.js`). */
  cliPath: string;
  /**
   * How to fork a bench process that shares the cores with the gateway (./load-generator.ts, the SSE floor's
   * ./sse-floor-server.ts): its entry point (the .ts, or its compiled copy) and the node options it needs.
   */
  benchScript(name: BenchScript): { path: string; execArgv: string[] };
}

/** The bench processes compiled with the `dist` build. */
export type BenchScript = 'load-generator' | 'sse-floor-server';
const BENCH_SCRIPTS: readonly BenchScript[] = ['load-generator', 'sse-floor-server'];

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const TSC = fileURLToPath(new URL('../../node_modules/typescript/bin/tsc', import.meta.url));
const SRC_PROBE = fileURLToPath(new URL('./loop-probe.ts', import.meta.url));
const BENCH_DIR = fileURLToPath(new URL('../', import.meta.url));
/** Where the `dist` build goes (gitignored). */
export const BENCH_BUILD_DIR = `${ROOT}.build-bench`;

function tsc(args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [TSC, ...args], { cwd: ROOT, timeout: 180_000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`tsc ${args.join(' ')} failed: ${stdout}${stderr}`)) : resolve(),
    );
  });
}

/**
 * Prepares `runtime`: for `dist`, compiles src/ (emit only, `--noCheck`: `npm run typecheck` is where types are
 * checked), the loop probe and the bench processes into {@link BENCH_BUILD_DIR}, replacing an earlier build; ~10–20 s. Throws when tsc fails.
 */
export async function prepareGatewayBuild(runtime: GatewayRuntime): Promise<GatewayBuild> {
  if (runtime === 'tsx') {
    return {
      runtime,
      nodeArgs: ['--import', 'tsx', '--import', SRC_PROBE],
      cliPath: `${ROOT}src/cli.ts`,
      benchScript: (name) => ({
        path: fileURLToPath(new URL(`./${name}.ts`, import.meta.url)),
        execArgv: ['--import', 'tsx'],
      }),
    };
  }
  await rm(BENCH_BUILD_DIR, { recursive: true, force: true });
  await tsc(['-p', 'tsconfig.build.json', '--noCheck', '--outDir', BENCH_BUILD_DIR]);
  await tsc([
    '--noCheck',
    '--target',
    'ES2022',
    '--module',
    'NodeNext',
    '--moduleResolution',
    'NodeNext',
    '--types',
    'node',
    '--skipLibCheck',
    '--rootDir',
    BENCH_DIR,
    '--outDir',
    `${BENCH_BUILD_DIR}/_bench`,
    SRC_PROBE,
    ...BENCH_SCRIPTS.map((name) => fileURLToPath(new URL(`./${name}.ts`, import.meta.url))),
  ]);
  return {
    runtime,
    nodeArgs: ['--import', `${BENCH_BUILD_DIR}/_bench/throughput/loop-probe.js`],
    cliPath: `${BENCH_BUILD_DIR}/cli.js`,
    benchScript: (name) => ({ path: `${BENCH_BUILD_DIR}/_bench/throughput/${name}.js`, execArgv: [] }),
  };
}
