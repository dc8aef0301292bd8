/**
 * The data plane between the HTTP fronts and the router of `--workers N` (docs/architecture.md sections 4-5): every
 * message is one frame on the front's unix socket (frames.ts), a msgpack list of records, so a tick's worth of
 * submits, aborts and token rows crosses the process boundary as one message. A record is a list whose first element
 * is its type tag. Pure: no sockets. (The front's hello is not a record: it is the socket's first frame, frames.ts.)
 *
 * Front → router: SUBMIT (one engine request, n = 1; fan-out stays in the front), ABORT, PERMIT / RELEASE
 * (the global `--max-concurrent-requests` count lives in the router), CALL (the Responses store, rank-state refresh).
 * Router → front: SUBMITTED / REJECTED (the answer to a SUBMIT), OUT (one output row of a request), FAILED (the
 * request's stream failed), GRANT (the answer to a PERMIT), REPLY (to a CALL), SNAPSHOT (every group's serving state
 * and rank states), JOINED (a rank joined: the app drops a rejoined rank's latency samples).
 *
 * `decodeUp` / `decodeDown` validate every record's shape and throw `ChannelDecodeError` for anything else (the caller logs
 * and counts it, the process keeps running).
 */
import { Decoder, Encoder } from '@msgpack/msgpack';
import {
  ENGINE_CLIENT_ERROR_FIELD_NAMES,
  EngineClientError,
  isEngineClientErrorField,
  isEngineClientErrorKind,
  type EngineClientErrorFields,
} from '../../engine-client/errors.js';
import type { ClientStats } from '../../engine-client/reports.js';
import type { EngineOutputRow, FinishReason, GenerateRequest, TokenCandidate } from '../../protocols/types.js';
import type { BackendRankState, BackendStatus } from '../../server/backend.js';
import { MsgpackReader } from '../../wire/reader.js';
import { WireEncodeError } from '../../wire/errors.js';
import { grownBuffer } from '../../wire/writer.js';
import type { MessageSlab } from './message-slab.js';

/** Record type tags (the first element of every record). 1 was HELLO, now the socket's hello frame (frames.ts). */
export const Tag = {
  SUBMIT: 2,
  ABORT: 3,
  PERMIT: 4,
  RELEASE: 5,
  CALL: 6,
  SUBMITTED: 101,
  REJECTED: 102,
  OUT: 103,
  FAILED: 104,
  GRANT: 105,
  REPLY: 106,
  SNAPSHOT: 107,
  JOINED: 108,
} as const;

/**
 * An error as it crosses the channel: enough to rebuild what the HTTP layer reads (`kind` → HTTP status): an
 * `EngineClientError`'s kind and structured fields (engine-client/errors.ts `ENGINE_CLIENT_ERROR_FIELDS`), or any
 * other error's name and message.
 */
export type WireError = { name: string; message: string; kind?: string } & EngineClientErrorFields;

/** Client-wide counters of one group (the engine client's `ClientStats`, copied). */
export type WireStats = Omit<ClientStats, 'handshakeRejected'> & { handshakeRejected: Record<string, number> };

/** One group's state as the router last saw it (what a front's `RemoteBackend` answers from). */
export interface GroupSnapshot {
  /** The group's worker URL (its name in /health and its `worker` metrics label) and engine family. */
  worker: string;
  engine: 'tokenspeed' | 'vllm';
  dpSize: number;
  maxModelLen: number | null;
  contextTokenLimit: number;
  alive: boolean;
  canServe: boolean;
  status: BackendStatus;
  ranks: BackendRankState[];
  stats: WireStats;
}

/**
 * One output row as the router forwards it: the request's stream output with every count filled (tokens).
 * `finish` is the finish reason (null while running).
 */
export interface WireOutput {
  newTokenIds: number[];
  finishReason: FinishReason | null;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  logprobs: number[];
  stopReason?: number | string | null;
  topLogprobs?: TokenCandidate[][];
}

/** The per-row fields of an OUT record (an engine row has them; the counts are the request stream's). */
export type WireRow = Pick<WireOutput, 'newTokenIds' | 'finishReason' | 'logprobs' | 'stopReason' | 'topLogprobs'>;

/** Records a front sends. `handle` is front-local (an integer ≥ 0), one per engine request. */
export type UpRecord =
  | { tag: typeof Tag.SUBMIT; handle: number; group: number; request: GenerateRequest; dpRank: number | null }
  | { tag: typeof Tag.ABORT; handle: number }
  | { tag: typeof Tag.PERMIT; ticket: number }
  | { tag: typeof Tag.RELEASE; ticket: number }
  | { tag: typeof Tag.CALL; callId: number; method: string; args: unknown };

/**
 * An OUT row as a front decodes it: the row the front's request stream takes (`RequestStreamImpl.deliver`), with
 * `requestId` '' — the router does not send it (the handle names the request); the receiver fills it in.
 */
export type DecodedOutput = WireOutput & Pick<EngineOutputRow, 'requestId'>;

/** Records the router sends. */
export type DownRecord =
  | { tag: typeof Tag.SUBMITTED; handle: number; engineIndex: number | null }
  | { tag: typeof Tag.REJECTED; handle: number; error: WireError }
  | { tag: typeof Tag.OUT; handle: number; output: WireOutput }
  | { tag: typeof Tag.FAILED; handle: number; error: WireError }
  | { tag: typeof Tag.GRANT; ticket: number; granted: boolean; max: number }
  | { tag: typeof Tag.REPLY; callId: number; ok: boolean; value: unknown }
  | { tag: typeof Tag.SNAPSHOT; groups: GroupSnapshot[] }
  | { tag: typeof Tag.JOINED; group: number; engineIndex: number; rejoin: boolean };

/** A router record as `decodeDown` returns it: an OUT record carries a `DecodedOutput`. */
export type ReceivedRecord =
  Exclude<DownRecord, { tag: typeof Tag.OUT }> | { tag: typeof Tag.OUT; handle: number; output: DecodedOutput };

/** A channel message that is not a list of well-formed records. */
export class ChannelDecodeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ChannelDecodeError';
  }
}

const FINISH_CODES: readonly (FinishReason | null)[] = [null, 'stop', 'length', 'abort', 'error'];

/** The wire code of a finish reason (0 running, 1 stop, 2 length, 3 abort, 4 error). */
export function finishCode(reason: FinishReason | null): number {
  return FINISH_CODES.indexOf(reason);
}

// Undefined object fields are left out (so an absent optional stays absent instead of becoming null).
const encoder = new Encoder({ ignoreUndefined: true });
const decoder = new Decoder();

/** One record as its msgpack list. */
function upTuple(r: UpRecord): unknown[] {
  switch (r.tag) {
    case Tag.SUBMIT:
      return [r.tag, r.handle, r.group, r.request, r.dpRank];
    case Tag.ABORT:
      return [r.tag, r.handle];
    case Tag.PERMIT:
    case Tag.RELEASE:
      return [r.tag, r.ticket];
    case Tag.CALL:
      return [r.tag, r.callId, r.method, r.args];
  }
}

function downTuple(r: Exclude<DownRecord, { tag: typeof Tag.OUT }>): unknown[] {
  switch (r.tag) {
    case Tag.SUBMITTED:
      return [r.tag, r.handle, r.engineIndex];
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
   * `RowSink`): the same record, with no output object built for it.
   */
  outRow(handle: number, o: WireRow, promptTokens: number, completionTokens: number, cachedTokens: number): void {
    const start = this.pos;
    try {
      const ids = o.newTokenIds;
      const lp = o.logprobs;
      // Every fixed part at its widest: 1 + 5 × 6 ints + 2 × 5 list headers; 5 per id, 9 per logprob.
      this.ensure(41 + 5 * ids.length + 9 * lp.length);
      const extra = o.stopReason !== undefined || o.topLogprobs !== undefined;
      this.buf[this.pos++] = 0x90 | (o.topLogprobs !== undefined ? 11 : extra ? 10 : 8);
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
      if (extra) {
        this.raw(encoder.encode(o.stopReason ?? null));
        this.raw(Uint8Array.of(o.stopReason !== undefined ? 0xc3 : 0xc2));
      }
      if (o.topLogprobs !== undefined) this.raw(encoder.encode(o.topLogprobs));
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

function tuples(bytes: Uint8Array): unknown[][] {
  let value: unknown;
  try {
    value = decoder.decode(bytes);
  } catch (err) {
    throw new ChannelDecodeError(
      `undecodable channel message (${bytes.length} bytes): ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  if (!Array.isArray(value)) throw new ChannelDecodeError('a channel message must be a list of records');
  for (const [i, t] of value.entries()) {
    if (!Array.isArray(t) || typeof t[0] !== 'number') throw new ChannelDecodeError(`record ${i} is not a tagged list`);
  }
  return value as unknown[][];
}

function int(t: unknown[], i: number, what: string): number {
  const v = t[i];
  if (typeof v !== 'number' || !Number.isSafeInteger(v))
    throw new ChannelDecodeError(`record tag ${String(t[0])}: ${what} must be an integer, got ${typeof v}`);
  return v;
}

function intOrNull(t: unknown[], i: number, what: string): number | null {
  return t[i] === null || t[i] === undefined ? null : int(t, i, what);
}

function object<T>(t: unknown[], i: number, what: string): T {
  const v = t[i];
  if (typeof v !== 'object' || v === null)
    throw new ChannelDecodeError(`record tag ${String(t[0])}: ${what} must be a map`);
  return v as T;
}

function wireError(t: unknown[], i: number): WireError {
  const e = object<Record<string, unknown>>(t, i, 'error');
  if (typeof e.message !== 'string' || typeof e.name !== 'string')
    throw new ChannelDecodeError(`record tag ${String(t[0])}: error needs a name and a message`);
  if (e.kind !== undefined && !isEngineClientErrorKind(e.kind))
    throw new ChannelDecodeError(
      `record tag ${String(t[0])}: error kind ${JSON.stringify(e.kind)} is not an engine-client kind`,
    );
  for (const f of ENGINE_CLIENT_ERROR_FIELD_NAMES) {
    if (e[f] !== undefined && !isEngineClientErrorField(f, e[f]))
      throw new ChannelDecodeError(`record tag ${String(t[0])}: error field ${f} has the wrong type`);
  }
  return e as WireError;
}

function numbers(t: unknown[], i: number, what: string): number[] {
  const v = t[i];
  if (!Array.isArray(v)) throw new ChannelDecodeError(`record tag ${String(t[0])}: ${what} must be a list`);
  for (const x of v)
    if (typeof x !== 'number') throw new ChannelDecodeError(`record tag ${String(t[0])}: ${what} must hold numbers`);
  return v as number[];
}

function integers(t: unknown[], i: number, what: string): number[] {
  const v = numbers(t, i, what);
  for (const x of v)
    if (!Number.isSafeInteger(x))
      throw new ChannelDecodeError(`record tag ${String(t[0])}: ${what} must hold integers`);
  return v;
}

/** Decode a front's message. Throws `ChannelDecodeError` for a malformed message or record. */
export function decodeUp(bytes: Uint8Array): UpRecord[] {
  return tuples(bytes).map((t): UpRecord => {
    switch (t[0]) {
      case Tag.SUBMIT: {
        const request = object<GenerateRequest>(t, 3, 'request');
        if (typeof request.requestId !== 'string') throw new ChannelDecodeError('SUBMIT: request id must be a string');
        // A front message's shape is checked at the boundary, so a malformed one is counted as such (O(1) checks; the
        // encoder checks the elements). The engine client refuses a missing prompt list too (client.ts `submit`).
        if (!Array.isArray(request.promptTokenIds))
          throw new ChannelDecodeError('SUBMIT: prompt token ids must be a list');
        if (typeof request.sampling !== 'object' || request.sampling === null)
          throw new ChannelDecodeError('SUBMIT: sampling parameters must be a map');
        return {
          tag: Tag.SUBMIT,
          handle: int(t, 1, 'handle'),
          group: int(t, 2, 'group'),
          request,
          dpRank: intOrNull(t, 4, 'dp rank'),
        };
      }
      case Tag.ABORT:
        return { tag: Tag.ABORT, handle: int(t, 1, 'handle') };
      case Tag.PERMIT:
      case Tag.RELEASE:
        return { tag: t[0], ticket: int(t, 1, 'ticket') };
      case Tag.CALL:
        if (typeof t[2] !== 'string') throw new ChannelDecodeError('CALL: method must be a string');
        return { tag: Tag.CALL, callId: int(t, 1, 'call id'), method: t[2], args: t[3] ?? null };
      default:
        throw new ChannelDecodeError(`unknown front record tag ${String(t[0])}`);
    }
  });
}

const OUT_HEAD = Tag.OUT; // a positive fixint: the byte itself

/** The optional tail of an OUT record (elements 8.., `len` elements in all), as the generic decoder reads it. */
function outTail(output: DecodedOutput, t: unknown[]): void {
  if (t[9] === true) {
    const s = t[8];
    if (s !== null && typeof s !== 'number' && typeof s !== 'string')
      throw new ChannelDecodeError('OUT: stop reason must be a number, a string or nil');
    output.stopReason = s;
  }
  if (t.length > 10) {
    if (!Array.isArray(t[10])) throw new ChannelDecodeError('OUT: top logprobs must be a list');
    output.topLogprobs = t[10] as TokenCandidate[][];
  }
}

function safe(r: MsgpackReader, what: string): number {
  const v = r.readInt(what);
  if (typeof v === 'bigint') throw new ChannelDecodeError(`OUT: ${what} ${v} is beyond ±(2^53−1)`);
  return v;
}

/**
 * One OUT record of `len` elements (`len` ≥ 8) read in place, its tag already consumed: the per-token path of a
 * front, with no intermediate tuple. Types are checked as they are read (integers for ids and counts, numbers for
 * logprobs). Throws WireDecodeError or ChannelDecodeError.
 */
function readOut(r: MsgpackReader, len: number): ReceivedRecord {
  const handle = safe(r, 'handle');
  const n = r.readArrayHeader('token ids');
  const newTokenIds: number[] = [];
  for (let i = 0; i < n; i++) newTokenIds.push(safe(r, 'token id'));
  const code = safe(r, 'finish code');
  if (code < 0 || code >= FINISH_CODES.length) throw new ChannelDecodeError(`OUT: unknown finish code ${code}`);
  const promptTokens = safe(r, 'prompt tokens');
  const completionTokens = safe(r, 'completion tokens');
  const cachedTokens = safe(r, 'cached tokens');
  const m = r.readArrayHeader('logprobs');
  const logprobs: number[] = [];
  for (let i = 0; i < m; i++) logprobs.push(r.readFloat('logprob'));
  const output: DecodedOutput = {
    requestId: '',
    newTokenIds,
    finishReason: FINISH_CODES[code]!,
    promptTokens,
    completionTokens,
    cachedTokens,
    logprobs,
  };
  if (len > 8) {
    const tail: unknown[] = [];
    for (let i = 8; i < len; i++) tail[i] = r.readAny('OUT tail');
    outTail(output, tail);
  }
  return { tag: Tag.OUT, handle, output };
}

/** One router record from its generic tuple. */
function downRecord(t: unknown[]): ReceivedRecord {
  switch (t[0]) {
    case Tag.SUBMITTED:
      return { tag: Tag.SUBMITTED, handle: int(t, 1, 'handle'), engineIndex: intOrNull(t, 2, 'engine index') };
    case Tag.REJECTED:
    case Tag.FAILED:
      return { tag: t[0], handle: int(t, 1, 'handle'), error: wireError(t, 2) };
    case Tag.OUT: {
      // An OUT record the in-place reader did not take (a non-minimal tag, fewer than 8 elements).
      const code = int(t, 3, 'finish code');
      if (code < 0 || code >= FINISH_CODES.length) throw new ChannelDecodeError(`OUT: unknown finish code ${code}`);
      const output: DecodedOutput = {
        requestId: '',
        newTokenIds: integers(t, 2, 'token ids'),
        finishReason: FINISH_CODES[code]!,
        promptTokens: int(t, 4, 'prompt tokens'),
        completionTokens: int(t, 5, 'completion tokens'),
        cachedTokens: int(t, 6, 'cached tokens'),
        logprobs: numbers(t, 7, 'logprobs'),
      };
      outTail(output, t);
      return { tag: Tag.OUT, handle: int(t, 1, 'handle'), output };
    }
    case Tag.GRANT:
      return { tag: Tag.GRANT, ticket: int(t, 1, 'ticket'), granted: t[2] === true, max: int(t, 3, 'max') };
    case Tag.REPLY:
      return { tag: Tag.REPLY, callId: int(t, 1, 'call id'), ok: t[2] === true, value: t[3] ?? null };
    case Tag.SNAPSHOT:
      if (!Array.isArray(t[1])) throw new ChannelDecodeError('SNAPSHOT: groups must be a list');
      return { tag: Tag.SNAPSHOT, groups: t[1] as GroupSnapshot[] };
    case Tag.JOINED:
      return {
        tag: Tag.JOINED,
        group: int(t, 1, 'group'),
        engineIndex: int(t, 2, 'engine index'),
        rejoin: t[3] === true,
      };
    default:
      throw new ChannelDecodeError(`unknown router record tag ${String(t[0])}`);
  }
}

/**
 * Decode the router's message. OUT records are read in place (`readOut`); every other record through the generic
 * decoder. The whole message is checked before anything is returned: a malformed message or record throws
 * `ChannelDecodeError` (and nothing of it is applied).
 */
export function decodeDown(bytes: Uint8Array): ReceivedRecord[] {
  const r = new MsgpackReader(bytes);
  const out: ReceivedRecord[] = [];
  try {
    if (bytes.length === 0 || r.peekKind('message') !== 'array')
      throw new ChannelDecodeError('a channel message must be a list of records');
    const n = r.readArrayHeader('message');
    for (let i = 0; i < n; i++) {
      const start = r.pos;
      if (r.peekKind('record') !== 'array') throw new ChannelDecodeError(`record ${i} is not a tagged list`);
      const len = r.readArrayHeader('record');
      if (len >= 8 && bytes[r.pos] === OUT_HEAD) {
        r.pos++;
        out.push(readOut(r, len));
        continue;
      }
      r.pos = start;
      r.skip('record');
      const t = decoder.decode(bytes.subarray(start, r.pos));
      if (!Array.isArray(t) || typeof t[0] !== 'number')
        throw new ChannelDecodeError(`record ${i} is not a tagged list`);
      out.push(downRecord(t as unknown[]));
    }
    r.expectEnd('message');
  } catch (err) {
    if (err instanceof ChannelDecodeError) throw err;
    throw new ChannelDecodeError(
      `undecodable channel message (${bytes.length} bytes): ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  return out;
}

/** An error as `WireError` (the fields the HTTP layer and logs read; `EngineClientError`'s structured ones kept). */
export function toWireError(err: unknown): WireError {
  if (!(err instanceof Error)) return { name: 'Error', message: String(err) };
  const w: WireError = { name: err.name, message: err.message };
  if (!(err instanceof EngineClientError)) return w;
  w.kind = err.kind;
  for (const f of ENGINE_CLIENT_ERROR_FIELD_NAMES) {
    const v = err[f];
    if (v !== undefined) (w as Record<string, unknown>)[f] = Array.isArray(v) ? [...(v as number[])] : v;
  }
  return w;
}

/**
 * The error a `WireError` stands for: an `EngineClientError` when it has an engine-client kind (decoded records are
 * checked by `wireError`), else an `Error` of that name.
 */
export function fromWireError(w: WireError): Error {
  if (isEngineClientErrorKind(w.kind)) {
    const fields: EngineClientErrorFields = {};
    for (const f of ENGINE_CLIENT_ERROR_FIELD_NAMES)
      if (w[f] !== undefined) (fields as Record<string, unknown>)[f] = w[f];
    return new EngineClientError(w.kind, w.message, fields);
  }
  const err = new Error(w.message);
  err.name = w.name;
  return err;
}
