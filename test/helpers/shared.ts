/**
 * Locates `../shared` (the spec and the golden vectors) beside the repository root, as CI lays it out, and the
 * golden vectors copied into the repository (`test/vectors/<set>`, each with a README naming its source). The
 * TokenSpeed vectors are still read from `../shared`; the vLLM output-layout vectors are read from the repository,
 * and checked against `../shared` only when it is present.
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Absolute path of the repository root (the folder holding package.json). */
export const repoRoot: string = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/**
 * Absolute path of `../shared` beside the repository root (or of the folder `GATEWAY_SHARED_DIR` names, see
 * `sharedDirIfPresent`). Throws if it is missing.
 */
export function sharedDir(): string {
  const dir = sharedDirIfPresent();
  if (dir === null) {
    throw new Error(`shared/ not found beside the repo root (looked at ${resolve(repoRoot, '..', 'shared')}; GATEWAY_SHARED_DIR unset or missing)`);
  }
  return dir;
}

/** One golden vector file, parsed (see shared/vectors/tokenspeed/README.md for its keys). */
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

/** Every TokenSpeed vector (all `*.json` except `index.json`), sorted by name. */
export function loadTokenSpeedVectors(): Vector[] {
  const dir = join(sharedDir(), 'vectors', 'tokenspeed');
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json') && f !== 'index.json')
    .sort()
    .map((f) => JSON.parse(readFileSync(join(dir, f), 'utf8')) as Vector);
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

/** Every `*.json` vector of the repository's copy of `set`, sorted by file name. */
export function loadRepoVectors(set: string): Vector[] {
  const dir = repoVectorsDir(set);
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((f) => JSON.parse(readFileSync(join(dir, f), 'utf8')) as Vector);
}
