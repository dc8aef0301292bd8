/**
 * A cache of the costly part of loading a BPE tokenizer, shared by every process of this user on the host.
 *
 * Why: loading Qwen3's 11 MB tokenizer.json took ~1.4 CPU-s per process on the 2-core dev box (JSON.parse of the
 * file, `@huggingface/tokenizers`' BPE constructor turning a 151k-key vocabulary object and 151k merge strings into
 * Maps, and the garbage both leave), and every gateway, `--workers` front, off-loop tokenizer thread and simulated
 * rank pays it; the test suite starts hundreds of them (issue 27). From the cache a load takes ~0.15 CPU-s.
 *
 * What is kept: tokenizer.json with the model's `vocab` and `merges` emptied (everything else the library and the
 * gateway read: normalizer, pre-tokenizer, decoder, added tokens), the model's id → token array after construction
 * (added tokens written in), the BPE merge-rank keys in rank order, and the token byte bound (./token-bytes.ts,
 * which reads the full vocabulary). A load from the cache builds the library's `Tokenizer` from the emptied JSON and
 * installs, in place of the two Maps the BPE constructor would have built, two `StringList`s (./string-list.ts: no
 * Map and no string per entry; their hash index is in the file too, so a load neither hashes an item nor fills an
 * index), plus the id → token array built on first read (`fillBpeModel`).
 *
 * Exact by construction: a cache file is written only when rebuilding from it gives the same `tokens_to_ids` and
 * `bpe_ranks` as the library built from the real file (`cacheableParts` checks every entry), else the tokenizer is
 * simply not cached. The file name is a sha256 over the format version, the library's version and tokenizer.json's
 * bytes, so an edited tokenizer.json or an upgraded library never reads a stale entry. Files live in
 * `<runtime dir>/tokenizers` (../runtime-dir.ts, mode 0700, used only when owned by this user and closed to others);
 * writes go to a temporary name and are renamed into place, so concurrent processes never read half a file. At most
 * `MAX_CACHE_FILES` are kept (the least recently written go). Every failure to read or write the cache is silent: the
 * load takes the slow path. The header's content hash catches a damaged file (cut, appended to, altered); it does not
 * stop a deliberate edit with the hash recomputed, which only this user can make (the directory is theirs alone), as
 * they could edit the tokenizer files themselves.
 *
 * Key notes: computing the key reads and hashes the 11 MB tokenizer.json (~65 ms of CPU per load, a tenth of a load
 * from the cache). After a load, a small note `<identity>.key` records the key of the file as it was on disk, named by
 * a sha256 over `CODE_KEY`, the file's path and its identity (device, inode, size, and the modification and change
 * times in nanoseconds). A later load of the same unchanged file reads the note instead. A write to the file changes
 * its change time (which no user can set), so an edited tokenizer.json does not match an old note; a note is written
 * only when the identity was the same before and after the file was read and the last change is `NOTE_SETTLE_MS` old.
 * Not noticed: bytes changed through a shared memory map whose pages were already dirty (Linux moves the times only
 * when a clean page is first written); after such an edit, delete the notes. At most `MAX_KEY_NOTES` are kept.
 *
 * File layout: a JSON header line (UTF-8: format, key, counts, the emptied tokenizer.json, the bound), then the body:
 * the texts of the id → token list and of the rank keys, each joined by NUL (no entry may contain one;
 * `cacheableParts` checks), in UTF-16LE (JavaScript's own code units, so every string, lone surrogates included, reads
 * back as it was); then each list's index arrays (`StringListIndex`: starts, hashes, slots) in the host's byte order,
 * which is part of the key.
 */
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { lstat, mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { endianness } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gatewayRuntimeDir, safeDirectory } from '../runtime-dir.js';
import { isJsonObject, readRequiredBytes, type JsonObject } from './model-files.js';
import { STRING_LIST_MODULE_URL, StringList, slotCount, type StringListIndex } from './string-list.js';
import { TOKEN_BYTES_MODULE_URL, isNormalForm, type NormalForm, type TokenByteBound } from './token-bytes.js';

/** Bumped whenever the file layout or what it holds changes. */
const FORMAT = 3;
/** How many cache files the directory keeps (one per distinct tokenizer.json and library version). */
export const MAX_CACHE_FILES = 8;
const SUFFIX = '.tokenizer-cache';
/** How many key notes the directory keeps (one per tokenizer.json path and version seen). */
export const MAX_KEY_NOTES = 64;
const NOTE_SUFFIX = '.key';
const KEY_FORM = /^[0-9a-f]{64}$/;

/** The library whose internals the cache fills, with its version (package.json pins it). */
const LIBRARY = ((): string => {
  try {
    const entry = createRequire(import.meta.url).resolve('@huggingface/tokenizers');
    const pkg = JSON.parse(readFileSync(join(dirname(entry), '..', 'package.json'), 'utf8')) as { version?: unknown };
    return `@huggingface/tokenizers@${String(pkg.version)}`;
  } catch {
    return '@huggingface/tokenizers@unknown';
  }
})();

/** What a load needs from the cache instead of tokenizer.json and the BPE constructor. */
export interface CachedTokenizerParts {
  /** tokenizer.json with `model.vocab` = {} and `model.merges` = []. */
  stub: JsonObject;
  /** The token byte bound of the full tokenizer.json (./token-bytes.ts). */
  bound: TokenByteBound;
  /** The model's id → token list after construction (added tokens included); dense, position = token id. */
  vocab: StringList;
  /** `bpe_ranks`' keys (JSON pairs of the merged strings) in rank order: key i has rank i. */
  rankKeys: StringList;
  /** The model's `unk_token_id` as the library set it (looked up before the added tokens joined), or null. */
  unkTokenId: number | null;
}

/**
 * The BPE model fields the library's constructor builds (`@huggingface/tokenizers` 0.2.0, dist BPE class); after
 * `fillBpeModel` the two Maps are `StringList`s, which answer the `get` and `has` the library reads them with.
 */
interface BpeModelInternals {
  tokens_to_ids: Map<string, number> | StringList;
  vocab: Array<string | undefined>;
  bpe_ranks: Map<string, number> | StringList;
  merges: unknown;
  unk_token?: string;
  unk_token_id?: number | null;
}

/** The default cache directory, `<runtime dir>/tokenizers`. */
export function defaultTokenizerCacheDir(): string {
  return join(gatewayRuntimeDir(), 'tokenizers');
}

/**
 * What besides tokenizer.json decides an entry's content: the format, the library version, the host's byte order (the
 * index arrays are stored in it), and the source of this module, ./token-bytes.ts (whose byte bound is cached) and
 * ./string-list.ts (whose index is stored), so a change to that code never reads an old entry.
 */
const CODE_KEY = ((): string => {
  const hash = createHash('sha256').update(`${FORMAT}\0${LIBRARY}\0${endianness()}\0`);
  for (const url of [import.meta.url, TOKEN_BYTES_MODULE_URL, STRING_LIST_MODULE_URL]) {
    try {
      hash.update(readFileSync(fileURLToPath(url)));
    } catch {
      hash.update(url);
    }
  }
  return hash.digest('hex');
})();

/** The cache key of a tokenizer.json: sha256 (hex) over `CODE_KEY` and its bytes. */
export function tokenizerCacheKey(tokenizerJsonBytes: Uint8Array): string {
  return createHash('sha256').update(CODE_KEY).update(tokenizerJsonBytes).digest('hex');
}

/**
 * The identity of the file at `path` as the key notes name it: sha256 (hex) over `CODE_KEY`, the path, and the
 * file's device, inode, size, modification and change times (ns). Null when it cannot be read with `stat`.
 */
export async function fileIdentity(path: string): Promise<string | null> {
  return (await statIdentity(path))?.identity ?? null;
}

/**
 * A file may be noted only once its last change is this old (ms): a kernel with coarse timestamps (before Linux 6.13)
 * gives two writes within one clock tick the same change time, so a file noted in the tick it was written could be
 * written again, same size, without its identity moving (git's "racily clean" entries are the same problem).
 */
export const NOTE_SETTLE_MS = 1000;

async function statIdentity(path: string): Promise<{ identity: string; changedMs: number } | null> {
  try {
    const s = await stat(path, { bigint: true });
    const fields = [path, s.dev, s.ino, s.size, s.mtimeNs, s.ctimeNs].map(String).join('\0');
    const identity = createHash('sha256').update(CODE_KEY).update('\0').update(fields).digest('hex');
    return { identity, changedMs: Number(s.ctimeNs / 1_000_000n) };
  } catch {
    return null;
  }
}

/**
 * The cache key the note for `identity` in `dir` records, or null when there is none, it is not a regular file
 * holding one key, or `dir` is not safe. Never rejects.
 */
export async function readKeyNote(dir: string, identity: string): Promise<string | null> {
  if (!safeDirectory(dir)) return null;
  const path = join(dir, identity + NOTE_SUFFIX);
  try {
    // A regular file of one key and a newline: anything larger is not a note, and is not read.
    const st = await lstat(path);
    if (!st.isFile() || st.size > 128) return null;
    const key = (await readFile(path, 'utf8')).trim();
    return KEY_FORM.test(key) ? key : null;
  } catch {
    return null;
  }
}

/**
 * Records that the file of `identity` has the cache key `key` (temporary file renamed into place), then removes the
 * oldest notes beyond `MAX_KEY_NOTES`. Resolves to whether the note was written; never rejects.
 */
export async function writeKeyNote(dir: string, identity: string, key: string): Promise<boolean> {
  if (!KEY_FORM.test(key) || !safeDirectory(dir)) return false;
  const tmp = join(dir, `.${identity}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
  try {
    await writeFile(tmp, key + '\n', { mode: 0o600 });
    await rename(tmp, join(dir, identity + NOTE_SUFFIX));
  } catch {
    await rm(tmp, { force: true }).catch(() => undefined);
    return false;
  }
  await pruneOldest(dir, NOTE_SUFFIX, identity + NOTE_SUFFIX, MAX_KEY_NOTES).catch(() => undefined);
  return true;
}

/** What `findCachedParts` found for a tokenizer.json. */
export interface CacheLookup {
  /** The file's cache key: from its note, or from its bytes. */
  key: string;
  /** The cache entry, or null when there is no usable one. */
  parts: CachedTokenizerParts | null;
  /** The file's bytes when they were read (no usable note), else null. */
  bytes: Buffer | null;
  /**
   * The identity to note `key` under once an entry is written: null when the file changed while read or too recently
   * (`NOTE_SETTLE_MS`), and when the entry came from a note (`bytes` null: the file was not read).
   */
  identity: string | null;
}

/**
 * Looks up the cache entry of the tokenizer.json at `tokenizerPath` in `dir`: through the key note of the file's
 * identity when there is one and its entry is usable (the file is not read), else by the key of the file's bytes
 * (noting that key when its entry exists and the file did not change while read).
 * @throws TokenizerLoadError when the file has no usable note and cannot be read.
 */
export async function findCachedParts(dir: string, tokenizerPath: string): Promise<CacheLookup> {
  const before = await statIdentity(tokenizerPath);
  if (before !== null) {
    const noted = await readKeyNote(dir, before.identity);
    const parts = noted === null ? null : await readTokenizerCache(dir, noted);
    if (noted !== null && parts !== null) return { key: noted, parts, bytes: null, identity: before.identity };
  }
  const bytes = await readRequiredBytes(dirname(tokenizerPath), basename(tokenizerPath));
  const key = tokenizerCacheKey(bytes);
  // Noted only when the file did not change while it was read, and its last change is settled (`NOTE_SETTLE_MS`).
  const after = before === null ? null : await statIdentity(tokenizerPath);
  const stable =
    after !== null && after.identity === before?.identity && Date.now() - after.changedMs >= NOTE_SETTLE_MS
      ? after.identity
      : null;
  const parts = await readTokenizerCache(dir, key);
  if (parts !== null && stable !== null) await writeKeyNote(dir, stable, key);
  return { key, parts, bytes, identity: stable };
}

const modelOf = (inner: object): BpeModelInternals => (inner as { model: BpeModelInternals }).model;

/**
 * The parts to cache for a tokenizer the library built from `tokenizerJson`, or null when it cannot be cached
 * exactly: the model is not BPE, the id → token array has holes or an entry with NUL, or rebuilding `tokens_to_ids`
 * (each token at its index, in id order) or `bpe_ranks` (key i at rank i) from the arrays would differ from what
 * the library built (e.g. two ids spelling one token, or a merge listed twice). Linear in the vocabulary.
 */
export function cacheableParts(
  inner: object,
  tokenizerJson: JsonObject,
  bound: TokenByteBound,
): CachedTokenizerParts | null {
  const spec = tokenizerJson.model as JsonObject | undefined;
  if (spec?.type !== 'BPE') return null;
  const model = modelOf(inner);
  const { tokens_to_ids: tokensToIds, bpe_ranks: bpeRanks } = model;
  if (!(tokensToIds instanceof Map) || !(bpeRanks instanceof Map)) return null;
  const tokens: string[] = [];
  for (let id = 0; id < model.vocab.length; id++) {
    const token = model.vocab[id];
    if (typeof token !== 'string' || token.includes('\0')) return null;
    tokens.push(token);
  }
  // The list answers as a Map set in id order would; where the library's Map says otherwise (two ids spelling one
  // token, the earlier one kept), the entry cannot be rebuilt and is not written.
  const vocab = StringList.fromStrings(tokens);
  if (vocab.size !== tokensToIds.size) return null;
  for (const [token, id] of tokensToIds) if (vocab.get(token) !== id) return null;
  const keys: string[] = [];
  for (const [key, rank] of bpeRanks) {
    if (rank !== keys.length || key.includes('\0')) return null;
    keys.push(key);
  }
  const rankKeys = StringList.fromStrings(keys);
  const unk = model.unk_token_id;
  if (unk !== undefined && unk !== null && !Number.isSafeInteger(unk)) return null;
  return {
    stub: { ...tokenizerJson, model: { ...spec, vocab: {}, merges: [] } },
    bound,
    vocab,
    rankKeys,
    unkTokenId: unk ?? null,
  };
}

/**
 * Installs cached parts into a tokenizer the library built from `parts.stub`: `tokens_to_ids` and `bpe_ranks` (the
 * two lists, which the library reads only with `get` and `has`), the unknown token's id, and the id → token array and
 * `merges`, each built on first read (the gateway decodes through its own table, ./token-text-table.ts, and the
 * library reads `merges` only in its constructor). Call before anything encodes with `inner`.
 */
export function fillBpeModel(inner: object, parts: CachedTokenizerParts): void {
  const model = modelOf(inner);
  model.tokens_to_ids = parts.vocab;
  model.bpe_ranks = parts.rankKeys;
  model.unk_token_id = parts.unkTokenId ?? undefined;
  lazyProperty(model, 'vocab', () => parts.vocab.toArray());
  lazyProperty(model, 'merges', () => parts.rankKeys.toArray().map((k) => JSON.parse(k) as unknown));
}

/** Defines `object[name]` as `make()`'s value, computed on first read; a write replaces it. */
function lazyProperty(object: object, name: string, make: () => unknown): void {
  let value: unknown;
  let made = false;
  Object.defineProperty(object, name, {
    configurable: true,
    enumerable: true,
    get: () => {
      if (!made) [value, made] = [make(), true];
      return value;
    },
    set: (v: unknown) => {
      [value, made] = [v, true];
    },
  });
}

interface Header {
  format: number;
  key: string;
  /** Items of each list. */
  vocab: number;
  rankKeys: number;
  /** UTF-16 code units of each list's text. */
  vocabChars: number;
  rankKeysChars: number;
  /** Distinct items of each list (`StringListIndex.size`). */
  vocabDistinct: number;
  rankKeysDistinct: number;
  unkTokenId: number | null;
  /**
   * sha256 (hex) over the other header fields and the body (everything after the header line), so a truncated or
   * altered file, a header edited, or counts that split the body elsewhere are refused (`contentHash`).
   */
  body: string;
  stub: JsonObject;
  bound: { maxTokenBytes: number | null; forms: NormalForm[]; reason: string | null };
}

const count = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;

/** Whether `h` is a header this module wrote (every field of the right type and range). */
function validHeader(h: unknown, key: string): h is Header {
  if (!isJsonObject(h) || h.format !== FORMAT || h.key !== key || typeof h.body !== 'string') return false;
  if (!count(h.vocab) || !count(h.rankKeys) || !(h.unkTokenId === null || count(h.unkTokenId))) return false;
  if (![h.vocabChars, h.rankKeysChars, h.vocabDistinct, h.rankKeysDistinct].every(count)) return false;
  if (!isJsonObject(h.stub) || !isJsonObject(h.stub.model) || !Array.isArray(h.stub.added_tokens)) return false;
  // Only BPE models are cached (`cacheableParts`): the lists stand in for a BPE model's tables, no other model's.
  if (h.stub.model.type !== 'BPE') return false;
  const b = h.bound;
  if (!isJsonObject(b) || !(b.reason === null || typeof b.reason === 'string')) return false;
  if (!(b.maxTokenBytes === null || (Number.isSafeInteger(b.maxTokenBytes) && (b.maxTokenBytes as number) > 0)))
    return false;
  return Array.isArray(b.forms) && b.forms.every(isNormalForm);
}

/** The hash a header's `body` field holds: over its content fields (not `body` itself) and the body's bytes. */
function contentHash(h: Omit<Header, 'body'>, body: Uint8Array): string {
  const fields = [
    h.format,
    h.key,
    h.vocab,
    h.rankKeys,
    h.vocabChars,
    h.rankKeysChars,
    h.vocabDistinct,
    h.rankKeysDistinct,
    h.unkTokenId,
    h.stub,
    h.bound,
  ];
  return createHash('sha256').update(JSON.stringify(fields)).update('\n').update(body).digest('hex');
}

/**
 * Reads the cache entry `key` from `dir`. Resolves to null when there is none, or it is unreadable, malformed, for
 * another key or format, or `dir` is not a directory this user owns and others cannot write. Never rejects.
 */
export async function readTokenizerCache(dir: string, key: string): Promise<CachedTokenizerParts | null> {
  if (!safeDirectory(dir)) return null;
  const path = join(dir, key + SUFFIX);
  let bytes: Buffer;
  try {
    // A regular file only: a FIFO or device in its place would block or never end.
    if (!(await lstat(path)).isFile()) return null;
    bytes = await readFile(path);
  } catch {
    return null;
  }
  try {
    const nl = bytes.indexOf(0x0a);
    if (nl < 0) return null;
    const h: unknown = JSON.parse(bytes.toString('utf8', 0, nl));
    if (!validHeader(h, key)) return null;
    const body = bytes.subarray(nl + 1);
    const textBytes = 2 * (h.vocabChars + h.rankKeysChars);
    const indexBytes = indexByteLength(h.vocab) + indexByteLength(h.rankKeys);
    if (body.length !== textBytes + indexBytes || h.vocab === 0 || contentHash(h, body) !== h.body) return null;
    const text = body.toString('utf16le', 0, textBytes);
    const vocabEnd = textBytes + indexByteLength(h.vocab);
    const vocab = StringList.fromIndex(
      text.slice(0, h.vocabChars),
      readIndex(body.subarray(textBytes, vocabEnd), h.vocab, h.vocabDistinct),
    );
    const rankKeys = StringList.fromIndex(
      text.slice(h.vocabChars),
      readIndex(body.subarray(vocabEnd), h.rankKeys, h.rankKeysDistinct),
    );
    if (vocab === null || rankKeys === null) return null;
    const { maxTokenBytes, forms, reason } = h.bound;
    return {
      stub: h.stub,
      bound: { maxTokenBytes: maxTokenBytes ?? Infinity, forms, reason },
      vocab,
      rankKeys,
      unkTokenId: h.unkTokenId,
    };
  } catch {
    return null;
  }
}

/** Bytes of a `length`-item list's index arrays in the file: starts (length + 1), hashes (length), slots; 4 each. */
function indexByteLength(length: number): number {
  return 4 * (2 * length + 1 + slotCount(length));
}

/** A list's index arrays as the file stores them (`indexByteLength(length)` bytes of `bytes`), copied out. */
function readIndex(bytes: Uint8Array, length: number, size: number): StringListIndex {
  // Copied: a typed array over the file's buffer would need the section 4-byte aligned.
  const starts = new Uint32Array(length + 1);
  const hashes = new Int32Array(length);
  const slots = new Int32Array(slotCount(length));
  let at = 0;
  for (const array of [starts, hashes, slots]) {
    new Uint8Array(array.buffer).set(bytes.subarray(at, at + array.byteLength));
    at += array.byteLength;
  }
  return { starts, hashes, slots, size };
}

/** A list's index arrays as the file stores them. */
function indexBytes(index: StringListIndex): Buffer[] {
  return [index.starts, index.hashes, index.slots].map((a) => Buffer.from(a.buffer, a.byteOffset, a.byteLength));
}

/**
 * Writes `parts` as the cache entry `key` in `dir` (made with mode 0700 when missing), through a temporary file
 * renamed into place, then removes the oldest entries beyond `MAX_CACHE_FILES`. Resolves to true when the entry was
 * written; false (and nothing left behind) when `dir` is not safe or any step fails. Never rejects.
 */
export async function writeTokenizerCache(dir: string, key: string, parts: CachedTokenizerParts): Promise<boolean> {
  const tmp = join(dir, `.${key}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
  try {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    if (!safeDirectory(dir)) return false;
    const { maxTokenBytes, forms, reason } = parts.bound;
    const [vocabText, rankKeysText] = [parts.vocab.joined(), parts.rankKeys.joined()];
    const [vocabIndex, rankKeysIndex] = [parts.vocab.indexArrays(), parts.rankKeys.indexArrays()];
    const body = Buffer.concat([
      Buffer.from(vocabText + rankKeysText, 'utf16le'),
      ...indexBytes(vocabIndex),
      ...indexBytes(rankKeysIndex),
    ]);
    const fields: Omit<Header, 'body'> = {
      format: FORMAT,
      key,
      vocab: parts.vocab.length,
      rankKeys: parts.rankKeys.length,
      vocabChars: vocabText.length,
      rankKeysChars: rankKeysText.length,
      vocabDistinct: vocabIndex.size,
      rankKeysDistinct: rankKeysIndex.size,
      unkTokenId: parts.unkTokenId,
      stub: parts.stub,
      bound: { maxTokenBytes: Number.isFinite(maxTokenBytes) ? maxTokenBytes : null, forms, reason },
    };
    const header: Header = { ...fields, body: contentHash(fields, body) };
    await writeFile(tmp, Buffer.concat([Buffer.from(JSON.stringify(header) + '\n'), body]), { mode: 0o600 });
    await rename(tmp, join(dir, key + SUFFIX));
  } catch {
    await rm(tmp, { force: true }).catch(() => undefined);
    return false;
  }
  await pruneCache(dir, key + SUFFIX).catch(() => undefined);
  return true;
}

/** A temporary file older than this (ms) was left by a writer that died before its rename. */
const STALE_TMP_MS = 10 * 60_000;

/**
 * Removes the least recently written cache files beyond `MAX_CACHE_FILES`, never `keep` (the one just written), and
 * temporary files writers that died left behind.
 */
async function pruneCache(dir: string, keep: string): Promise<void> {
  const all = await readdir(dir);
  for (const n of all.filter((f) => f.startsWith('.') && f.endsWith('.tmp'))) {
    const t = await stat(join(dir, n)).then(
      (st) => st.mtimeMs,
      () => Date.now(),
    );
    if (Date.now() - t > STALE_TMP_MS) await rm(join(dir, n), { force: true });
  }
  await pruneOldest(dir, SUFFIX, keep, MAX_CACHE_FILES, all);
}

/**
 * Removes the least recently written files of `dir` ending in `suffix` so that at most `limit` remain, never `keep`
 * (the one just written). `names`: the directory's listing when the caller has it.
 */
async function pruneOldest(dir: string, suffix: string, keep: string, limit: number, names?: string[]): Promise<void> {
  const own = (names ?? (await readdir(dir))).filter((n) => n.endsWith(suffix) && !n.startsWith('.') && n !== keep);
  if (own.length < limit) return;
  const dated = await Promise.all(
    own.map(async (n) => ({
      n,
      t: await stat(join(dir, n)).then(
        (s) => s.mtimeMs,
        () => 0,
      ),
    })),
  );
  dated.sort((a, b) => b.t - a.t);
  for (const { n } of dated.slice(limit - 1)) await rm(join(dir, n), { force: true });
}
