/**
 * The gateway build bench:throughput measures. `dist` (the default) is what ships: the sources compiled by
 * `tsconfig.build.json` (the `npm run build` config the Dockerfile's runtime stage runs as `node dist/cli.js`), here
 * into `.build-bench/` at the package root (a sibling of src/ and dashboard/, as dist/ is) so the compiled code finds
 * node_modules, package.json, the dashboard and the tokenizer files as dist/ does. `tsx` runs src/ through tsx's loader (`npm start`): closures there pay for esbuild's
 * `__name` wrapper, which is dev-only cost. The event-loop probe and the load generator (which shares the cores with
 * the gateway) are compiled beside the build into `.build-bench/_bench/`, so no measured process loads tsx.
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
  /** The load generator's entry point (./load-generator.ts or its compiled copy) and the node options it needs. */
  loadGenerator: { path: string; execArgv: string[] };
}

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const TSC = fileURLToPath(new URL('../../node_modules/typescript/bin/tsc', import.meta.url));
const SRC_PROBE = fileURLToPath(new URL('./loop-probe.ts', import.meta.url));
const SRC_LOAD_GENERATOR = fileURLToPath(new URL('./load-generator.ts', import.meta.url));
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
 * checked), the loop probe and the load generator into {@link BENCH_BUILD_DIR}, replacing an earlier build; ~10–20 s. Throws when tsc fails.
 */
export async function prepareGatewayBuild(runtime: GatewayRuntime): Promise<GatewayBuild> {
  if (runtime === 'tsx') {
    return {
      runtime,
      nodeArgs: ['--import', 'tsx', '--import', SRC_PROBE],
      cliPath: `${ROOT}src/cli.ts`,
      loadGenerator: { path: SRC_LOAD_GENERATOR, execArgv: ['--import', 'tsx'] },
    };
  }
  await rm(BENCH_BUILD_DIR, { recursive: true, force: true });
  await tsc(['-p', 'tsconfig.build.json', '--noCheck', '--outDir', BENCH_BUILD_DIR]);
  await tsc([
    '--noCheck', '--target', 'ES2022', '--module', 'NodeNext', '--moduleResolution', 'NodeNext', '--types', 'node',
    '--skipLibCheck', '--rootDir', BENCH_DIR, '--outDir', `${BENCH_BUILD_DIR}/_bench`, SRC_PROBE, SRC_LOAD_GENERATOR,
  ]);
  return {
    runtime,
    nodeArgs: ['--import', `${BENCH_BUILD_DIR}/_bench/throughput/loop-probe.js`],
    cliPath: `${BENCH_BUILD_DIR}/cli.js`,
    loadGenerator: { path: `${BENCH_BUILD_DIR}/_bench/throughput/load-generator.js`, execArgv: [] },
  };
}
