/**
 * Locates `../shared` (the spec and the golden vectors) beside the repository root, as CI lays it out.
 * Tests load vectors from there by path; they are never copied into the repo.
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Absolute path of the repository root (the folder holding package.json). */
export const repoRoot: string = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Absolute path of `../shared` beside the repository root. Throws if it is missing. */
export function sharedDir(): string {
  const dir = resolve(repoRoot, '..', 'shared');
  if (!existsSync(dir)) throw new Error(`shared/ not found beside the repo root (looked at ${dir})`);
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
