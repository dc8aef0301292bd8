/**
 * The golden vectors copied into the repository (`test/vectors/<set>`, each with a README naming its source), which
 * every test reads, and `../shared` beside the repository root (the originals), which only
 * test/vectors/vectors-match-shared.test.ts reads, when it is present.
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Absolute path of the repository root (the folder holding package.json). */
export const repoRoot: string = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** One golden vector file, parsed (see test/vectors/tokenspeed/README.md for its keys). */
export interface Vector {
  name: string;
  kind: string;
  direction?: string;
  form?: string;
  description?: string;
  hex?: string;
  frames_hex?: string[];
  decoded?: unknown;
  error?: string;
  gateway_must_reject?: boolean;
  accepted_by_msgspec?: boolean;
  [key: string]: unknown;
}

/** Every TokenSpeed vector of the repository's copy (all `*.json` except `index.json`), sorted by name. */
export function loadTokenSpeedVectors(): Vector[] {
  return loadRepoVectors('tokenspeed').filter((v) => v.name !== undefined);
}

/**
 * `../shared` beside the repository root when it exists (or the folder `GATEWAY_SHARED_DIR` names, for a git worktree
 * whose parent has no `shared/`), else null. For checks that the repository's copies of the golden vectors still
 * equal the originals: they are skipped when neither exists.
 */
export function sharedDirIfPresent(env: NodeJS.ProcessEnv = process.env): string | null {
  const override = env['GATEWAY_SHARED_DIR'];
  if (override !== undefined && override !== '') return existsSync(override) ? resolve(override) : null;
  const dir = resolve(repoRoot, '..', 'shared');
  return existsSync(dir) ? dir : null;
}

/** `test/vectors/<set>`: golden vectors copied into the repository (README.md there says where they came from). */
export function repoVectorsDir(set: string): string {
  return join(repoRoot, 'test', 'vectors', set);
}

/** Every `*.json` vector of the repository's copy of `set` (`index.json` excepted), sorted by file name. */
export function loadRepoVectors(set: string): Vector[] {
  const dir = repoVectorsDir(set);
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json') && f !== 'index.json')
    .sort()
    .map((f) => JSON.parse(readFileSync(join(dir, f), 'utf8')) as Vector);
}
