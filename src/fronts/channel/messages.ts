/**
 * Encoding the channel's messages (records.ts): a front's records as one `UpMessage`, the router's for one front as
 * one `DownMessage`, each encoded as the records are appended. Pure: no sockets.
 */
import { Encoder } from '@msgpack/msgpack';
import { WireEncodeError } from '../../wire/errors.js';
import { float32LeBytes } from '../../wire/float32.js';
import { grownBuffer } from '../../wire/writer.js';
import type { MessageSlab } from './message-slab.js';
import {
  OUT_LENGTH,
  Tag,
  finishCode,
  type DownRecord,
  type UpRecord,
  type WireOutput,
  type WireRow,
} from './records.js';

// Undefined object fields are left out (so an absent optional stays absent instead of becoming null).
const encoder = new Encoder({ ignoreUndefined: true });

/** One record as its msgpack list. */
function upTuple(r: UpRecord): unknown[] {
  switch (r.tag) {
    case Tag.SUBMIT:
      return submitTuple(r);
    case Tag.ABORT:
      return [r.tag, r.handle];
    case Tag.PERMIT:
    case Tag.RELEASE:
      return [r.tag, r.ticket];
    case Tag.CALL:
      return [r.tag, r.callId, r.method, r.args];
  }
}

/**
 * A SUBMIT as its list: [tag, handle, group, request, dpRank], then with a flow ticket its tenant and band, then
 * when the ticket has a budget, a deadline of its own or is not its request's lead: requests and tokens per minute
 * (nil: no limit), lead, and the deadline in ms (nil: the group's); then the prompt tokens the lead charges when the
 * ticket names them (an embeddings request).
 */
function submitTuple(r: Extract<UpRecord, { tag: typeof Tag.SUBMIT }>): unknown[] {
  const head = [r.tag, r.handle, r.group, r.request, r.dpRank];
  const f = r.flow;
  if (f === null) return head;
  if (f.budget === undefined && f.lead !== false && f.timeoutMs === undefined && f.promptTokens === undefined)
    return [...head, f.tenant, f.band];
  const b = f.budget;
  const tail = [
    ...head,
    f.tenant,
    f.band,
    b?.requestsPerMinute ?? null,
    b?.tokensPerMinute ?? null,
    f.lead !== false,
    f.timeoutMs ?? null,
  ];
  return f.promptTokens === undefined ? tail : [...tail, f.promptTokens];
}

function downTuple(r: Exclude<DownRecord, { tag: typeof Tag.OUT }>): unknown[] {
  switch (r.tag) {
    case Tag.SUBMITTED:
      return r.budget === null ? [r.tag, r.handle, r.engineIndex] : [r.tag, r.handle, r.engineIndex, r.budget];
    case Tag.REJECTED:
    case Tag.FAILED:
      return [r.tag, r.handle, r.error];
    case Tag.GRANT:
      return [r.tag, r.ticket, r.granted, r.max];
    case Tag.REPLY:
      return [r.tag, r.callId, r.ok, r.value];
    case Tag.SNAPSHOT:
      return [r.tag, r.groups];
    case Tag.JOINED:
      return [r.tag, r.group, r.engineIndex, r.rejoin];
  }
}

/**
 * A message being built: a msgpack list of records whose header is written by `finish` into 5 bytes kept free at
 * the start (an array32 header: any decoder reads a non-minimal list header), so records are appended as bytes with
 * no list of them kept. The buffer grows by doubling.
 */
abstract class RecordList {
  protected buf: Uint8Array;
  protected view: DataView;
  protected pos = 5; // room for the list header, written by `finish`
  protected n = 0;

  /**
   * `capacity`: the initial buffer size in bytes; `slab`: where to carve it from (message-slab.ts; else Node's
   * `allocUnsafe`), which gets back the unused tail at `finish`.
   */
  constructor(
    capacity: number,
    private readonly slab: MessageSlab | null = null,
  ) {
    // Not zeroed, and slices of a shared pool or slab: every byte sent is written first (`finish` sends only the
    // bytes up to the end of the last record), and nothing is written after `finish`.
    const size = Math.max(64, capacity);
    this.buf = slab !== null ? slab.take(size) : Buffer.allocUnsafe(size);
    this.view = viewOf(this.buf);
  }

  /** Records appended so far. */
  get count(): number {
    return this.n;
  }

  /** Bytes of the records appended so far (the finished message is 5 bytes longer). */
  get byteLength(): number {
    return this.pos - 5;
  }

  /** The message: a msgpack list of the records appended. Call once. */
  finish(): Uint8Array {
    this.buf[0] = 0xdd;
    this.view.setUint32(1, this.n);
    this.slab?.trim(this.buf, this.pos);
    return this.buf.subarray(0, this.pos);
  }

  protected ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    this.buf = grownBuffer(this.buf, this.pos, n);
    this.view = viewOf(this.buf);
  }

  /** Append `bytes` (one whole record, or part of the one being written). */
  protected raw(bytes: Uint8Array): void {
    this.ensure(bytes.length);
    this.buf.set(bytes, this.pos);
    this.pos += bytes.length;
  }
}

/** A record too large for a front → router message (`UpMessage.push`); the front fails what it was for. */
export class ChannelRecordTooLarge extends RangeError {
  constructor(
    readonly tag: number,
    readonly bytes: number,
    readonly maxBytes: number,
  ) {
    super(`a channel record (tag ${tag}) of ${bytes} bytes does not fit a front message of at most ${maxBytes} bytes`);
    this.name = 'ChannelRecordTooLarge';
  }
}

/** A front's records for the router as one message, encoded as they are appended (the same list `decodeUp` reads). */
export class UpMessage extends RecordList {
  constructor(capacity = 1024) {
    super(capacity);
  }

  /**
   * Append `r` unless the finished message would then be longer than `maxBytes`; returns whether it was appended.
   * Throws `ChannelRecordTooLarge` when `r` alone would be (no message can carry it).
   */
  push(r: UpRecord, maxBytes = Number.POSITIVE_INFINITY): boolean {
    // The encoder's own buffer, copied at once below.
    const bytes = encoder.encodeSharedRef(upTuple(r));
    if (5 + bytes.length > maxBytes) throw new ChannelRecordTooLarge(r.tag, bytes.length, maxBytes);
    if (this.pos + bytes.length > maxBytes) return false;
    this.raw(bytes);
    this.n++;
    return true;
  }
}

/** Encode a front's records as one message (see `UpMessage`). */
export function encodeUp(records: readonly UpRecord[]): Uint8Array {
  const m = new UpMessage();
  for (const r of records) m.push(r);
  return m.finish();
}

/**
 * The router's records for one front, encoded as they are appended (issue 9, the router's per-token cost): an OUT
 * row goes straight into the message's bytes (no record object, no tuple, no generic encoder); the other records,
 * a few per request, through the generic encoder. `finish` gives the message: the same msgpack list of records
 * `decodeDown` reads (and any msgpack decoder). Token ids and counts are integers ≥ 0 (the engine decoders guarantee
 * it); logprobs are always float64 (so −0, NaN and ±∞ cross as they are).
 */
export class DownMessage extends RecordList {
  /** `capacity`: the initial buffer size in bytes (grows by doubling); `slab`: see `RecordList`. */
  constructor(capacity = 1024, slab: MessageSlab | null = null) {
    super(capacity, slab);
  }

  /**
   * Append one OUT record for request `handle`. Throws WireEncodeError (and appends nothing) for a handle, count or
   * token id that is not an integer in 0..2^32−1.
   */
  out(handle: number, o: WireOutput): void {
    this.outRow(handle, o, o.promptTokens, o.completionTokens, o.cachedTokens);
  }

  /**
   * `out` from an engine row and the request's counts after it (tokens; the router's row sink, request-stream.ts
   * `RowSink`): the same record, with no output object built for it. The fields go in records.ts `OUT_ELEMENT`
   * order (the row's own counts, kind `count`, are not read: the request stream's are sent).
   */
  outRow(handle: number, o: WireRow, promptTokens: number, completionTokens: number, cachedTokens: number): void {
    const start = this.pos;
    try {
      const ids = o.newTokenIds;
      const lp = o.logprobs;
      // Every fixed part at its widest: 1 + 5 × 6 ints + 2 × 5 list headers; 5 per id, 9 per logprob.
      this.ensure(41 + 5 * ids.length + 9 * lp.length);
      const pooled = o.pooled;
      const extra = o.stopReason !== undefined || o.topLogprobs !== undefined || pooled !== undefined;
      this.buf[this.pos++] =
        0x90 |
        (pooled !== undefined
          ? OUT_LENGTH.pooled
          : o.topLogprobs !== undefined
            ? OUT_LENGTH.topLogprobs
            : extra
              ? OUT_LENGTH.stopReason
              : OUT_LENGTH.fixed);
      this.buf[this.pos++] = Tag.OUT;
      this.uint(handle);
      this.listHeader(ids.length);
      for (let i = 0; i < ids.length; i++) this.uint(ids[i]!);
      this.uint(finishCode(o.finishReason));
      this.uint(promptTokens);
      this.uint(completionTokens);
      this.uint(cachedTokens);
      this.listHeader(lp.length);
      const view = this.view;
      for (let i = 0; i < lp.length; i++) {
        this.buf[this.pos] = 0xcb;
        view.setFloat64(this.pos + 1, lp[i]!);
        this.pos += 9;
      }
      // The kind `optional` fields: absent ones stay absent (the flag tells an absent stop reason from a nil one).
      if (extra) {
        this.raw(encoder.encode(o.stopReason ?? null));
        this.raw(Uint8Array.of(o.stopReason !== undefined ? 0xc3 : 0xc2));
      }
      if (o.topLogprobs !== undefined || pooled !== undefined) this.raw(encoder.encode(o.topLogprobs ?? null));
      if (pooled !== undefined) this.raw(encoder.encode(float32LeBytes(pooled)));
    } catch (err) {
      this.pos = start;
      throw err;
    }
    this.n++;
  }

  /** Append any record. */
  push(r: DownRecord): void {
    if (r.tag === Tag.OUT) return this.out(r.handle, r.output);
    this.raw(encoder.encode(downTuple(r)));
    this.n++;
  }

  /** An integer 0..2^32−1 in its shortest msgpack form (room ensured by the caller). */
  private uint(v: number): void {
    const buf = this.buf;
    if (v >>> 0 !== v) throw new WireEncodeError('OUT', `expected an integer in 0..2^32−1, got ${String(v)}`);
    if (v < 0x80) buf[this.pos++] = v;
    else if (v < 0x100) {
      buf[this.pos] = 0xcc;
      buf[this.pos + 1] = v;
      this.pos += 2;
    } else if (v < 0x10000) {
      buf[this.pos] = 0xcd;
      this.view.setUint16(this.pos + 1, v);
      this.pos += 3;
    } else {
      buf[this.pos] = 0xce;
      this.view.setUint32(this.pos + 1, v);
      this.pos += 5;
    }
  }

  private listHeader(n: number): void {
    if (n < 16) this.buf[this.pos++] = 0x90 | n;
    else if (n < 0x10000) {
      this.buf[this.pos] = 0xdc;
      this.view.setUint16(this.pos + 1, n);
      this.pos += 3;
    } else {
      this.buf[this.pos] = 0xdd;
      this.view.setUint32(this.pos + 1, n);
      this.pos += 5;
    }
  }
}

/** A DataView over exactly `buf`'s bytes (a pooled Buffer starts at an offset of its ArrayBuffer). */
function viewOf(buf: Uint8Array): DataView {
  return new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
}

/** Encode the router's records for one front as one message (see `DownMessage`). */
export function encodeDown(records: readonly DownRecord[]): Uint8Array {
  const m = new DownMessage();
  for (const r of records) m.push(r);
  return m.finish();
}
