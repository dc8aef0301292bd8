/**
 * Reading a Hugging Face model/tokenizer directory: the required tokenizer files, the optional model configs, and
 * the end-of-sequence ids they declare (gateway.md section 7, after SMG `zmq_client.rs`).
 */
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { TokenizerLoadError } from './errors.js';

/** Receives one human-readable warning (a broken optional file, an unusable field). Never throws. */
export type WarningSink = (message: string) => void;

/** A parsed JSON object (the top level of every HF config file is an object). */
export type JsonObject = Record<string, unknown>;

export function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function errorCode(error: unknown): string | undefined {
  return typeof error === 'object' && error !== null && 'code' in error
    ? String((error as { code: unknown }).code)
    : undefined;
}

/**
 * Checks that `dir` exists and is a directory.
 * @throws TokenizerLoadError naming `dir` when it is missing, unreadable or not a directory.
 */
export async function assertDirectory(dir: string): Promise<void> {
  let info;
  try {
    info = await stat(dir);
  } catch (error) {
    const reason = errorCode(error) === 'ENOENT' ? 'does not exist' : `cannot be read (${String(error)})`;
    throw new TokenizerLoadError(`tokenizer directory ${dir} ${reason}`, dir, { cause: error });
  }
  if (!info.isDirectory()) throw new TokenizerLoadError(`tokenizer path ${dir} is not a directory`, dir);
}

/**
 * Reads a required file `dir/name` as bytes.
 * @throws TokenizerLoadError naming the file when it is missing or unreadable.
 */
export async function readRequiredBytes(dir: string, name: string): Promise<Buffer> {
  const path = join(dir, name);
  try {
    return await readFile(path);
  } catch (error) {
    const reason = errorCode(error) === 'ENOENT' ? 'is missing' : `cannot be read (${String(error)})`;
    throw new TokenizerLoadError(`required tokenizer file ${path} ${reason}`, path, { cause: error });
  }
}

/**
 * Parses the bytes of a required JSON file (named by `path` in errors) whose top level must be an object.
 * @throws TokenizerLoadError naming the file when it is not JSON or not a JSON object.
 */
export function parseRequiredJson(path: string, bytes: Buffer): JsonObject {
  let parsed: unknown;
  try {
    parsed = JSON.parse(bytes.toString('utf8'));
  } catch (error) {
    throw new TokenizerLoadError(
      `required tokenizer file ${path} is not valid JSON: ${(error as Error).message}`,
      path,
      {
        cause: error,
      },
    );
  }
  if (!isJsonObject(parsed)) throw new TokenizerLoadError(`required tokenizer file ${path} is not a JSON object`, path);
  return parsed;
}

/**
 * Reads and parses a required JSON file `dir/name` whose top level must be an object.
 * @throws TokenizerLoadError naming the file when it is missing, unreadable, not JSON, or not a JSON object.
 */
export async function readRequiredJson(dir: string, name: string): Promise<JsonObject> {
  return parseRequiredJson(join(dir, name), await readRequiredBytes(dir, name));
}

/**
 * Reads an optional text file `dir/name`. Returns null when it does not exist; any other read failure is reported to
 * `warn` and also yields null (an optional file never fails a load).
 */
export async function readOptionalText(dir: string, name: string, warn: WarningSink): Promise<string | null> {
  const path = join(dir, name);
  try {
    return await readFile(path, 'utf8');
  } catch (error) {
    if (errorCode(error) !== 'ENOENT') warn(`ignoring ${path}: cannot be read (${String(error)})`);
    return null;
  }
}

/**
 * Reads an optional JSON file `dir/name` (`config.json`, `generation_config.json`, `chat_template.json`).
 * Returns null when it is absent. Unparseable JSON, or a top level that is not an object, is a warning and yields
 * null (gateway.md section 7: "Unparseable JSON: a warning, no ids from that file").
 */
export async function readOptionalJson(dir: string, name: string, warn: WarningSink): Promise<JsonObject | null> {
  const text = await readOptionalText(dir, name, warn);
  if (text === null) return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    warn(`ignoring ${join(dir, name)}: not valid JSON (${(error as Error).message})`);
    return null;
  }
  if (!isJsonObject(parsed)) {
    warn(`ignoring ${join(dir, name)}: top level is not a JSON object`);
    return null;
  }
  return parsed;
}

function isTokenId(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

/**
 * Parses an `eos_token_id` field (an integer or a list of integers, gateway.md section 7) from `source`
 * (a file name used in warnings). Absent/null yields []. A wrong type, or a list entry that is not a non-negative
 * integer, is a warning; valid entries of a list are kept. Duplicates are removed, first occurrence wins.
 */
export function parseEosTokenIds(value: unknown, source: string, warn: WarningSink): number[] {
  if (value === undefined || value === null) return [];
  const raw = Array.isArray(value) ? value : [value];
  const ids: number[] = [];
  for (const entry of raw) {
    if (!isTokenId(entry)) {
      warn(`${source}: ignoring eos_token_id entry ${JSON.stringify(entry)} (expected a non-negative integer)`);
      continue;
    }
    if (!ids.includes(entry)) ids.push(entry);
  }
  return ids;
}

/**
 * The model's EOS ids per gateway.md section 7 step 1: `primary` = the first id of `config.json`, else the first of
 * `generation_config.json` (null when neither has one); `extras` = every other distinct id, in order
 * (config.json first). Example: config 5, generation_config [5, 7, 9] → primary 5, extras [7, 9].
 */
export interface ModelEos {
  primary: number | null;
  extras: number[];
}

/** Combines the two files' EOS ids into a {@link ModelEos} (gateway.md section 7 step 1). */
export function resolveModelEos(configIds: readonly number[], generationConfigIds: readonly number[]): ModelEos {
  const all: number[] = [];
  for (const id of [...configIds, ...generationConfigIds]) if (!all.includes(id)) all.push(id);
  return all.length === 0 ? { primary: null, extras: [] } : { primary: all[0], extras: all.slice(1) };
}

/**
 * The text of a special-token field of `tokenizer_config.json` (`eos_token`, `bos_token`, ...), which HF writes
 * either as a plain string or as an AddedToken object `{ content, ... }`. Returns null when absent or unusable.
 */
export function specialTokenText(value: unknown): string | null {
  if (typeof value === 'string') return value;
  if (isJsonObject(value) && typeof value.content === 'string') return value.content;
  return null;
}
