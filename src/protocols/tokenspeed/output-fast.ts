/**
 * The per-token fast path of TokenSpeed output decoding (issue 9: the routing process's CPU per streamed token):
 * reads a `BatchTokenIDOutSlim` frame (engine-wire.md 4.8-4.9) straight into an `EngineBatch` in one pass, without
 * the schema-driven reader's per-element path strings, the intermediate column struct, or the `output_token_logprobs_idx`
 * lists the gateway never reads (they are still checked to be lists of integers).
 *
 * It handles the shape every sender produces: the tag as a fixstr, integers in at most 32 bits.
 * Anything else — 64-bit integer formats, invalid UTF-8, any malformed or truncated frame — returns null, and the
 * caller decodes with the schema-driven decoder (`batchToEngineBatch(decodeBatchTokenIDOutSlim(…))`), which either
 * throws its precise `WireDecodeError` or returns the batch. So this function never accepts a frame that decoder
 * refuses, and returns exactly what it returns (test/protocols/tokenspeed-fast.test.ts checks both over the golden
 * vectors and mutated frames).
 */
import type { EngineBatch, EngineOutputRow } from '../types.js';
import { MsgpackReader } from '../../wire/reader.js';
import { BATCH_TOKEN_ID_OUT_SLIM_TAG, toFinishReason } from './output.js';

/** The value of every empty token-id or logprob list (read-only: nothing writes a row's lists). */
const NO_NUMBERS: number[] = Object.freeze([]) as unknown as number[];

/** Thrown inside the fast path for any frame it does not handle; caught in `decodeBatchFast` (never escapes). */
const BAIL = new Error('fast path declined');

const TAG_BYTES = new TextEncoder().encode(BATCH_TOKEN_ID_OUT_SLIM_TAG);

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** `Buffer.prototype.utf8Slice` (native, replaces invalid bytes by U+FFFD; not in @types/node). */
interface Utf8Slicer {
  utf8Slice(start: number, end: number): string;
}

/** Longest request id the rid cache holds, in bytes (one slot); a longer one is decoded every time. */
const RID_SLOT_BYTES = 64;

/**
 * Request ids decoded recently, by a key of their bytes (`Cursor.rid`): a rank names the same running requests in
 * every batch, so nearly every row's rid was decoded one step before. A two-way set-associative table of `2 × sets`
 * entries (a fixed bound): the key picks a set; a hit makes its way the set's most recently used; a new entry replaces
 * the other way (so each set keeps its two most recently used ids). An entry answers only when its bytes equal the
 * row's (a key collision just decodes).
 *
 * Every entry's bytes live in one slab of fixed 64-byte slots, compared a 32-bit word at a time, beside a parallel
 * array of strings: no object, view or buffer per entry, so a lookup touches one slot and one string (issue 9: per-row
 * objects made the lookup the routing process's largest self time at 2000 streams).
 */
export class RidCache {
  private readonly slab: Uint8Array;
  private readonly slabView: DataView;
  /** Byte length of each way's id; 0 = empty (an empty rid is never cached). */
  private readonly lengths: Uint8Array;
  private readonly strs: string[];
  /** Per set: the way (0/1) used most recently. */
  private readonly recent: Uint8Array;
  private readonly mask: number;

  /** `sets`: a power of two. */
  constructor(sets: number) {
    this.mask = sets - 1;
    this.slab = new Uint8Array(2 * sets * RID_SLOT_BYTES);
    this.slabView = new DataView(this.slab.buffer);
    this.lengths = new Uint8Array(2 * sets);
    this.strs = new Array<string>(2 * sets).fill('');
    this.recent = new Uint8Array(sets);
  }

  /** The string of the `n` bytes of `buf` at `start`, if remembered under `key`. */
  get(key: number, buf: DataView, start: number, n: number): string | undefined {
    const set = key & this.mask;
    const first = (set << 1) | this.recent[set]!;
    if (this.lengths[first] === n && this.same(first, buf, start, n)) return this.strs[first];
    const other = first ^ 1;
    if (this.lengths[other] !== n || !this.same(other, buf, start, n)) return undefined;
    this.recent[set] = other & 1;
    return this.strs[other];
  }

  /** Remember `str`, whose UTF-8 bytes are `bytes`, under `key` (ids over 64 bytes or empty are not remembered). */
  set(key: number, bytes: Uint8Array, str: string): void {
    const n = bytes.length;
    if (n === 0 || n > RID_SLOT_BYTES) return;
    const set = key & this.mask;
    const way = (set << 1) | (this.recent[set]! ^ 1);
    this.slab.set(bytes, way * RID_SLOT_BYTES);
    this.lengths[way] = n;
    this.strs[way] = str;
    this.recent[set] = way & 1;
  }

  private same(way: number, buf: DataView, start: number, n: number): boolean {
    const slab = this.slabView;
    const base = way * RID_SLOT_BYTES;
    let i = 0;
    for (; i + 4 <= n; i += 4) if (slab.getInt32(base + i, true) !== buf.getInt32(start + i, true)) return false;
    for (; i < n; i++) if (slab.getUint8(base + i) !== buf.getUint8(start + i)) return false;
    return true;
  }
}

/** Sets of the request-id cache: 16 384 entries (1 MiB of slots), several times the requests a gateway has in flight. */
const RID_CACHE = new RidCache(8192);

/** A cursor over one frame (fields, not module-level bindings: V8 keeps these in registers and inline caches). */
class Cursor {
  readonly buf: Uint8Array;
  readonly view: DataView;
  readonly slicer: Utf8Slicer;
  readonly end: number;
  pos = 0;

  constructor(bytes: Uint8Array) {
    this.buf = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.slicer = (Buffer.isBuffer(bytes)
      ? bytes
      : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)) as unknown as Utf8Slicer;
    this.end = bytes.length;
  }

  need(n: number): void {
    if (this.end - this.pos < n) throw BAIL;
  }

  arrayHeader(): number {
    this.need(1);
    const pos = this.pos;
    const h = this.buf[pos]!;
    if (h >= 0x90 && h <= 0x9f) {
      this.pos = pos + 1;
      return h & 0x0f;
    }
    if (h === 0xdc) {
      this.need(3);
      this.pos = pos + 3;
      return this.view.getUint16(pos + 1);
    }
    if (h === 0xdd) {
      this.need(5);
      this.pos = pos + 5;
      return this.view.getUint32(pos + 1);
    }
    throw BAIL;
  }

  /** An integer in a format of at most 32 bits (the 64-bit formats go to the schema-driven decoder). */
  int(): number {
    this.need(1);
    const pos = this.pos;
    const h = this.buf[pos]!;
    if (h <= 0x7f) {
      this.pos = pos + 1;
      return h;
    }
    if (h >= 0xe0) {
      this.pos = pos + 1;
      return h - 0x100;
    }
    return this.wideInt(h, pos);
  }

  private wideInt(h: number, pos: number): number {
    switch (h) {
      case 0xcc:
        this.need(2);
        this.pos = pos + 2;
        return this.buf[pos + 1]!;
      case 0xcd:
        this.need(3);
        this.pos = pos + 3;
        return this.view.getUint16(pos + 1);
      case 0xce:
        this.need(5);
        this.pos = pos + 5;
        return this.view.getUint32(pos + 1);
      case 0xd0:
        this.need(2);
        this.pos = pos + 2;
        return this.view.getInt8(pos + 1);
      case 0xd1:
        this.need(3);
        this.pos = pos + 3;
        return this.view.getInt16(pos + 1);
      case 0xd2:
        this.need(5);
        this.pos = pos + 5;
        return this.view.getInt32(pos + 1);
      default:
        throw BAIL;
    }
  }

  /** A float as `MsgpackReader.readFloat` reads it: float64, float32 (widened) or an integer. */
  float(): number {
    this.need(1);
    const pos = this.pos;
    const h = this.buf[pos]!;
    if (h === 0xcb) {
      this.need(9);
      this.pos = pos + 9;
      return this.view.getFloat64(pos + 1);
    }
    if (h === 0xca) {
      this.need(5);
      this.pos = pos + 5;
      return this.view.getFloat32(pos + 1);
    }
    return this.int();
  }

  /** A str header's payload length; the cursor is left at the payload. */
  strLength(): number {
    this.need(1);
    const pos = this.pos;
    const h = this.buf[pos]!;
    if (h >= 0xa0 && h <= 0xbf) {
      this.pos = pos + 1;
      return h & 0x1f;
    }
    switch (h) {
      case 0xd9:
        this.need(2);
        this.pos = pos + 2;
        return this.buf[pos + 1]!;
      case 0xda:
        this.need(3);
        this.pos = pos + 3;
        return this.view.getUint16(pos + 1);
      case 0xdb:
        this.need(5);
        this.pos = pos + 5;
        return this.view.getUint32(pos + 1);
      default:
        throw BAIL;
    }
  }

  /**
   * A UTF-8 str, as the schema-driven reader's fatal `TextDecoder` reads it: through the Buffer's native UTF-8 slice,
   * which turns invalid bytes into U+FFFD; a string holding U+FFFD, or starting with a BOM's first byte (which the
   * TextDecoder strips), is decoded again by that same fatal decoder.
   */
  str(): string {
    const n = this.strLength();
    this.need(n);
    const start = this.pos;
    const stop = start + n;
    this.pos = stop;
    const s = this.slicer.utf8Slice(start, stop);
    if (s.indexOf('\ufffd') === -1 && this.buf[start] !== 0xef) return s;
    try {
      return utf8.decode(this.buf.subarray(start, stop));
    } catch {
      throw BAIL;
    }
  }

  /**
   * A request id: `str()`, but a rid whose exact bytes were decoded recently is the string decoded then
   * (`RID_CACHE`), so the per-row path builds no string and the registry lookup reuses its cached hash.
   */
  rid(): string {
    const headerAt = this.pos;
    const n = this.strLength();
    this.need(n);
    const buf = this.buf;
    const start = this.pos;
    const stop = start + n;
    // The key: the length and the last 8 bytes (the random hex of every id the gateway mints, also of its n > 1
    // sub-request ids `<id>-<i>`); FNV-1a over the bytes of a shorter id. Ids alike in those bytes only share a set.
    const view = this.view;
    let h: number;
    if (n >= 8) {
      h = Math.imul(view.getInt32(stop - 8, true) ^ n, 0x9e3779b1);
      h = Math.imul(h ^ (h >>> 15) ^ view.getInt32(stop - 4, true), 0x85ebca77);
      h ^= h >>> 13;
    } else {
      h = 0x811c9dc5 ^ n;
      for (let i = start; i < stop; i++) h = Math.imul(h ^ buf[i]!, 0x01000193);
    }
    const key = h & 0x3fffffff;
    const hit = RID_CACHE.get(key, view, start, n);
    if (hit !== undefined) {
      this.pos = stop;
      return hit;
    }
    this.pos = headerAt;
    const s = this.str();
    RID_CACHE.set(key, buf.subarray(start, stop), s);
    return s;
  }

  /** A finish string as one of the shared literals when it is one of them (no string built), else decoded. */
  finishStr(): string {
    const headerAt = this.pos;
    const n = this.strLength();
    this.need(n);
    const buf = this.buf;
    const p = this.pos;
    if (n === 0) return '';
    if (n === 4 && buf[p] === 0x73 && buf[p + 1] === 0x74 && buf[p + 2] === 0x6f && buf[p + 3] === 0x70) {
      this.pos = p + 4;
      return 'stop';
    }
    if (
      n === 6 &&
      buf[p] === 0x6c &&
      buf[p + 1] === 0x65 &&
      buf[p + 2] === 0x6e &&
      buf[p + 3] === 0x67 &&
      buf[p + 4] === 0x74 &&
      buf[p + 5] === 0x68
    ) {
      this.pos = p + 6;
      return 'length';
    }
    if (
      n === 5 &&
      buf[p] === 0x61 &&
      buf[p + 1] === 0x62 &&
      buf[p + 2] === 0x6f &&
      buf[p + 3] === 0x72 &&
      buf[p + 4] === 0x74
    ) {
      this.pos = p + 5;
      return 'abort';
    }
    // Rare ('error', an unknown reason): build the string.
    this.pos = headerAt;
    return this.str();
  }

  /** The tag element: exactly fixstr(19) 'BatchTokenIDOutSlim'. */
  tag(): void {
    this.need(1 + TAG_BYTES.length);
    const pos = this.pos;
    if (this.buf[pos] !== (0xa0 | TAG_BYTES.length)) throw BAIL;
    for (let i = 0; i < TAG_BYTES.length; i++) if (this.buf[pos + 1 + i] !== TAG_BYTES[i]) throw BAIL;
    this.pos = pos + 1 + TAG_BYTES.length;
  }
}

function decodeFrame(c: Cursor, onUnknownFinish: ((raw: string) => void) | undefined): EngineBatch {
  const n = c.arrayHeader();
  if (n < 9) throw BAIL;
  c.tag();
  const rows = c.arrayHeader();
  // The rows are built as the rids are read and filled column by column (no column arrays). Empty lists share one
  // frozen array (most rows carry no logprobs). Finish strings are turned into reasons only once the whole frame has
  // been read, so `onUnknownFinish` hears only of frames this returns.
  const outputs: EngineOutputRow[] = [];
  for (let i = 0; i < rows; i++) {
    outputs.push({
      requestId: c.rid(),
      newTokenIds: NO_NUMBERS,
      finishReason: null,
      promptTokens: 0,
      completionTokens: 0,
      cachedTokens: 0,
      logprobs: NO_NUMBERS,
    });
  }
  if (c.arrayHeader() !== rows) throw BAIL;
  for (let i = 0; i < rows; i++) {
    const m = c.arrayHeader();
    if (m === 0) continue;
    const ids: number[] = [];
    for (let j = 0; j < m; j++) ids.push(c.int());
    outputs[i]!.newTokenIds = ids;
  }
  if (c.arrayHeader() !== rows) throw BAIL;
  let finishedAt: number[] | null = null;
  let finishRaw: string[] | null = null;
  for (let i = 0; i < rows; i++) {
    const f = c.finishStr();
    if (f === '') continue;
    (finishedAt ??= []).push(i);
    (finishRaw ??= []).push(f);
  }
  if (c.arrayHeader() !== rows) throw BAIL;
  for (let i = 0; i < rows; i++) outputs[i]!.promptTokens = c.int();
  if (c.arrayHeader() !== rows) throw BAIL;
  for (let i = 0; i < rows; i++) outputs[i]!.completionTokens = c.int();
  if (c.arrayHeader() !== rows) throw BAIL;
  for (let i = 0; i < rows; i++) outputs[i]!.cachedTokens = c.int();
  if (c.arrayHeader() !== rows) throw BAIL;
  for (let i = 0; i < rows; i++) {
    const m = c.arrayHeader();
    if (m === 0) continue;
    const lp: number[] = [];
    for (let j = 0; j < m; j++) lp.push(c.float());
    outputs[i]!.logprobs = lp;
  }
  // output_token_logprobs_idx: checked, not kept (nothing reads it).
  if (c.arrayHeader() !== rows) throw BAIL;
  for (let i = 0; i < rows; i++) {
    const m = c.arrayHeader();
    for (let j = 0; j < m; j++) c.int();
  }
  return finishBatch(c, n, outputs, finishedAt, finishRaw, onUnknownFinish);
}

/**
 * The frame's trailing elements after the row columns (engine_index and the load snapshot when present, a newer
 * sender's extra elements drained; `n` elements in all), the end-of-frame check, and the finish reasons applied to
 * the rows (`finishedAt[k]` is the row of raw reason `finishRaw[k]`). Throws BAIL on anything else.
 */
function finishBatch(
  c: Cursor,
  n: number,
  outputs: EngineOutputRow[],
  finishedAt: number[] | null,
  finishRaw: string[] | null,
  onUnknownFinish: ((raw: string) => void) | undefined,
): EngineBatch {
  const engineIndex = n > 9 ? c.int() : 0;
  const numRunning = n > 10 ? c.int() : 0;
  const numWaiting = n > 11 ? c.int() : 0;
  const kvActive = n > 12 ? c.int() : 0;
  const kvTotal = n > 13 ? c.int() : 0;
  if (n > 14) {
    // Trailing elements of a newer sender are drained (out_slim15_extra_trailing).
    const r = new MsgpackReader(c.buf);
    r.pos = c.pos;
    try {
      for (let i = 14; i < n; i++) r.skip('BatchTokenIDOutSlim');
    } catch {
      throw BAIL;
    }
    c.pos = r.pos;
  }
  if (c.pos !== c.end) throw BAIL;

  const finishedRequestIds: string[] = [];
  if (finishedAt !== null) {
    for (let k = 0; k < finishedAt.length; k++) {
      const row = outputs[finishedAt[k]!]!;
      const finishReason = toFinishReason(finishRaw![k]!, onUnknownFinish);
      row.finishReason = finishReason;
      if (finishReason !== null) finishedRequestIds.push(row.requestId);
    }
  }
  const batch: EngineBatch = { engineIndex, outputs, finishedRequestIds };
  if (kvTotal !== 0)
    batch.load = { numRunning, numWaiting, kvCacheUsage: kvActive / kvTotal, runningIncludesWaiting: true };
  return batch;
}

/**
 * Decode one `BatchTokenIDOutSlim` frame into an `EngineBatch` (what `batchToEngineBatch(decodeBatchTokenIDOutSlim(
 * bytes), onUnknownFinish)` returns), or null when the frame is not of the common shape (see the module docs): the
 * caller then decodes it with the schema-driven decoder. Never throws; `onUnknownFinish` is called only for a frame
 * it returns.
 */
export function decodeBatchFast(bytes: Uint8Array, onUnknownFinish?: (raw: string) => void): EngineBatch | null {
  try {
    return decodeFrame(new Cursor(bytes), onUnknownFinish);
  } catch (err) {
    if (err === BAIL) return null;
    throw err;
  }
}
