/**
 * How a test starts one of this repository's TypeScript entry files (the CLI, a simulated rank, a fixture) in a child
 * process. `npm test` runs the suite from a transpiled copy of the repository (scripts/test-build.mjs → .test-build/),
 * where every `.ts` file has its `.js` beside it: there a child runs the `.js` directly, which saves the ~1.2 CPU-s per
 * process that loading TypeScript through tsx costs (issue 27). Run from source (`node --import tsx --test file.ts`),
 * the child goes through tsx as before.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** True when this module runs transpiled (from .test-build/), false when it runs from source through tsx. */
export const RUNS_TRANSPILED: boolean = import.meta.url.endsWith('.js');

/**
 * The path of an entry file: transpiled, its bundle (`.bundle.js`, made for the CLI and the simulated rank by
 * scripts/test-build.mjs) when there is one, else its `.js`; from source, the `.ts`.
 * @param url the entry's `.ts` file, e.g. `new URL('../../src/cli.ts', import.meta.url)`.
 * @throws TypeError when `url` does not name a `.ts` file.
 */
export function entryPath(url: URL): string {
  const path = fileURLToPath(url);
  if (!path.endsWith('.ts')) throw new TypeError(`entryPath: ${path} is not a .ts file`);
  if (!RUNS_TRANSPILED) return path;
  const bundle = `${path.slice(0, -3)}.bundle.js`;
  return existsSync(bundle) ? bundle : `${path.slice(0, -3)}.js`;
}

/**
 * The `node` arguments that run an entry file: `[file.js]` transpiled, `['--import', 'tsx', file.ts]` from source.
 * @param url the entry's `.ts` file; `nodeArgs` go before the file (e.g. another `--import`).
 */
export function nodeEntry(url: URL, nodeArgs: readonly string[] = []): string[] {
  return RUNS_TRANSPILED ? [...nodeArgs, entryPath(url)] : ['--import', 'tsx', ...nodeArgs, entryPath(url)];
}

/** Matches the command line of a process running `src/<name>.ts`, its `.js` or its `.bundle.js` (e.g. `sim/main`). */
export function entryPattern(name: string): RegExp {
  return new RegExp(`${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?:\\.bundle)?\\.[jt]s(?:\\0|$)`);
}
