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
 * vectors and mutated frames). Not reentrant (module-level cursor); synchronous.
 */
import type { EngineBatch, EngineOutputRow } from '../types.js';
import { MsgpackReader } from '../../wire/reader.js';
import { BATCH_TOKEN_ID_OUT_SLIM_TAG, toFinishReason } from './output.js';

/** Thrown inside the fast path for any frame it does not handle; caught in `decodeBatchFast` (never escapes). */
const BAIL = new Error('fast path declined');

const TAG_BYTES = new TextEncoder().encode(BATCH_TOKEN_ID_OUT_SLIM_TAG);

const EMPTY = new Uint8Array(0);
const utf8 = new TextDecoder('utf-8', { fatal: true });

/** `Buffer.prototype.latin1Slice` (native; not in @types/node): bytes 0..0x7f are the same in latin1 and UTF-8. */
interface Latin1Slicer {
  latin1Slice(start: number, end: number): string;
}

let buf: Uint8Array = EMPTY;
let latin1: Latin1Slicer = Buffer.from(EMPTY.buffer) as unknown as Latin1Slicer;
let view: DataView = new DataView(buf.buffer);
const EMPTY_VIEW = view;
const EMPTY_SLICER = latin1;
let pos = 0;
let end = 0;

function need(n: number): void {
  if (end - pos < n) throw BAIL;
}

function arrayHeader(): number {
  need(1);
  const h = buf[pos]!;
  if (h >= 0x90 && h <= 0x9f) {
    pos++;
    return h & 0x0f;
  }
  if (h === 0xdc) {
    need(3);
    const n = view.getUint16(pos + 1);
    pos += 3;
    return n;
  }
  if (h === 0xdd) {
    need(5);
    const n = view.getUint32(pos + 1);
    pos += 5;
    return n;
  }
  throw BAIL;
}

/** An integer in a format of at most 32 bits (the 64-bit formats go to the schema-driven decoder). */
function int(): number {
  need(1);
  const h = buf[pos]!;
  if (h <= 0x7f) {
    pos++;
    return h;
  }
  if (h >= 0xe0) {
    pos++;
    return h - 0x100;
  }
  let v: number;
  switch (h) {
    case 0xcc: need(2); v = buf[pos + 1]!; pos += 2; return v;
    case 0xcd: need(3); v = view.getUint16(pos + 1); pos += 3; return v;
    case 0xce: need(5); v = view.getUint32(pos + 1); pos += 5; return v;
    case 0xd0: need(2); v = view.getInt8(pos + 1); pos += 2; return v;
    case 0xd1: need(3); v = view.getInt16(pos + 1); pos += 3; return v;
    case 0xd2: need(5); v = view.getInt32(pos + 1); pos += 5; return v;
    default: throw BAIL;
  }
}

/** A float as `MsgpackReader.readFloat` reads it: float64, float32 (widened) or an integer. */
function float(): number {
  need(1);
  const h = buf[pos]!;
  if (h === 0xcb) {
    need(9);
    const v = view.getFloat64(pos + 1);
    pos += 9;
    return v;
  }
  if (h === 0xca) {
    need(5);
    const v = view.getFloat32(pos + 1);
    pos += 5;
    return v;
  }
  return int();
}

/** A str header's payload length; the cursor is left at the payload. */
function strLength(): number {
  need(1);
  const h = buf[pos]!;
  if (h >= 0xa0 && h <= 0xbf) {
    pos++;
    return h & 0x1f;
  }
  let n: number;
  switch (h) {
    case 0xd9: need(2); n = buf[pos + 1]!; pos += 2; break;
    case 0xda: need(3); n = view.getUint16(pos + 1); pos += 3; break;
    case 0xdb: need(5); n = view.getUint32(pos + 1); pos += 5; break;
    default: throw BAIL;
  }
  return n;
}

/** A UTF-8 str: ASCII through the Buffer's native latin1 slice, anything else through the same fatal UTF-8 decoder. */
function str(): string {
  const n = strLength();
  need(n);
  const start = pos;
  const stop = pos + n;
  pos = stop;
  for (let i = start; i < stop; i++) {
    if (buf[i]! >= 0x80) {
      try {
        return utf8.decode(buf.subarray(start, stop));
      } catch {
        throw BAIL;
      }
    }
  }
  return latin1.latin1Slice(start, stop);
}

/** A finish string as one of the shared literals when it is one of them (no string built), else decoded. */
function finishStr(): string {
  const n = strLength();
  need(n);
  const c = buf[pos]!;
  if (n === 0) return '';
  if (n === 4 && c === 0x73 && buf[pos + 1] === 0x74 && buf[pos + 2] === 0x6f && buf[pos + 3] === 0x70) {
    pos += 4;
    return 'stop';
  }
  if (n === 6 && c === 0x6c && buf[pos + 1] === 0x65 && buf[pos + 2] === 0x6e && buf[pos + 3] === 0x67 && buf[pos + 4] === 0x74 && buf[pos + 5] === 0x68) {
    pos += 6;
    return 'length';
  }
  if (n === 5 && c === 0x61 && buf[pos + 1] === 0x62 && buf[pos + 2] === 0x6f && buf[pos + 3] === 0x72 && buf[pos + 4] === 0x74) {
    pos += 5;
    return 'abort';
  }
  // Rare ('error', an unknown reason): rewind over the header and build the string.
  pos -= n <= 31 ? 1 : n <= 0xff ? 2 : n <= 0xffff ? 3 : 5;
  return str();
}

/** The tag element: exactly fixstr(19) 'BatchTokenIDOutSlim'. */
function tag(): void {
  need(1 + TAG_BYTES.length);
  if (buf[pos] !== (0xa0 | TAG_BYTES.length)) throw BAIL;
  for (let i = 0; i < TAG_BYTES.length; i++) if (buf[pos + 1 + i] !== TAG_BYTES[i]) throw BAIL;
  pos += 1 + TAG_BYTES.length;
}

function intColumn(rows: number): number[] {
  if (arrayHeader() !== rows) throw BAIL;
  const out: number[] = [];
  for (let i = 0; i < rows; i++) out.push(int());
  return out;
}

function decodeFrame(onUnknownFinish: ((raw: string) => void) | undefined): EngineBatch {
  const n = arrayHeader();
  if (n < 9) throw BAIL;
  tag();
  const rows = arrayHeader();
  const rids: string[] = [];
  for (let i = 0; i < rows; i++) rids.push(str());
  if (arrayHeader() !== rows) throw BAIL;
  const ids: number[][] = [];
  for (let i = 0; i < rows; i++) {
    const m = arrayHeader();
    const row: number[] = [];
    for (let j = 0; j < m; j++) row.push(int());
    ids.push(row);
  }
  if (arrayHeader() !== rows) throw BAIL;
  const finish: string[] = [];
  for (let i = 0; i < rows; i++) finish.push(finishStr());
  const prompt = intColumn(rows);
  const completion = intColumn(rows);
  const cached = intColumn(rows);
  if (arrayHeader() !== rows) throw BAIL;
  const logprobs: number[][] = [];
  for (let i = 0; i < rows; i++) {
    const m = arrayHeader();
    const row: number[] = [];
    for (let j = 0; j < m; j++) row.push(float());
    logprobs.push(row);
  }
  // output_token_logprobs_idx: checked, not kept (nothing reads it).
  if (arrayHeader() !== rows) throw BAIL;
  for (let i = 0; i < rows; i++) {
    const m = arrayHeader();
    for (let j = 0; j < m; j++) int();
  }
  const engineIndex = n > 9 ? int() : 0;
  const numRunning = n > 10 ? int() : 0;
  const numWaiting = n > 11 ? int() : 0;
  const kvActive = n > 12 ? int() : 0;
  const kvTotal = n > 13 ? int() : 0;
  if (n > 14) {
    // Trailing elements of a newer sender are drained (out_slim15_extra_trailing).
    const r = new MsgpackReader(buf.subarray(0, end));
    r.pos = pos;
    try {
      for (let i = 14; i < n; i++) r.skip('BatchTokenIDOutSlim');
    } catch {
      throw BAIL;
    }
    pos = r.pos;
  }
  if (pos !== end) throw BAIL;

  const outputs: EngineOutputRow[] = [];
  const finishedRequestIds: string[] = [];
  for (let i = 0; i < rows; i++) {
    const finishReason = toFinishReason(finish[i]!, onUnknownFinish);
    outputs.push({
      requestId: rids[i]!,
      newTokenIds: ids[i]!,
      finishReason,
      promptTokens: prompt[i]!,
      completionTokens: completion[i]!,
      cachedTokens: cached[i]!,
      logprobs: logprobs[i]!,
    });
    if (finishReason !== null) finishedRequestIds.push(rids[i]!);
  }
  const batch: EngineBatch = { engineIndex, outputs, finishedRequestIds };
  if (kvTotal !== 0) batch.load = { numRunning, numWaiting, kvCacheUsage: kvActive / kvTotal, runningIncludesWaiting: true };
  return batch;
}

/**
 * Decode one `BatchTokenIDOutSlim` frame into an `EngineBatch` (what `batchToEngineBatch(decodeBatchTokenIDOutSlim(
 * bytes), onUnknownFinish)` returns), or null when the frame is not of the common shape (see the module docs): the
 * caller then decodes it with the schema-driven decoder. Never throws; `onUnknownFinish` is called only for a frame
 * it returns.
 */
export function decodeBatchFast(bytes: Uint8Array, onUnknownFinish?: (raw: string) => void): EngineBatch | null {
  buf = bytes;
  view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  latin1 = (Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)) as unknown as Latin1Slicer;
  pos = 0;
  end = bytes.length;
  try {
    return decodeFrame(onUnknownFinish);
  } catch (err) {
    if (err === BAIL) return null;
    throw err;
  } finally {
    // Do not keep the frame alive.
    buf = EMPTY;
    view = EMPTY_VIEW;
    latin1 = EMPTY_SLICER;
  }
}
