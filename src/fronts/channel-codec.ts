/**
 * The data plane between the HTTP fronts and the router of `--workers N` (docs/architecture.md sections 4-5): every
 * ZeroMQ message is one frame, a msgpack list of records, so a tick's worth of submits, aborts and token rows crosses
 * the process boundary as one message. A record is a list whose first element is its type tag. Pure: no sockets.
 *
 * Front → router: HELLO, SUBMIT (one engine request, n = 1; fan-out stays in the front), ABORT, PERMIT / RELEASE
 * (the global `--max-concurrent-requests` count lives in the router), CALL (the Responses store, rank-state refresh).
 * Router → front: SUBMITTED / REJECTED (the answer to a SUBMIT), OUT (one output row of a request), FAILED (the
 * request's stream failed), GRANT (the answer to a PERMIT), REPLY (to a CALL), SNAPSHOT (every group's serving state
 * and rank states), JOINED (a rank joined: the app drops a rejoined rank's latency samples).
 *
 * `decodeRecords` validates every record's shape and throws `ChannelDecodeError` for anything else (the caller logs
 * and counts it, the process keeps running).
 */
import { Decoder, Encoder } from '@msgpack/msgpack';
import { EngineClientError, type EngineClientErrorKind } from '../engine-client/errors.js';
import type { ClientStats } from '../engine-client/reports.js';
import type { FinishReason, GenerateRequest, TokenCandidate } from '../protocols/types.js';
import type { BackendRankState, BackendStatus } from '../server/backend.js';

/** Record type tags (the first element of every record). */
export const Tag = {
  HELLO: 1,
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

/** An error as it crosses the channel: enough to rebuild what the HTTP layer reads (`kind` → HTTP status). */
export interface WireError {
  name: string;
  message: string;
  kind?: string;
  requestId?: string;
  dpRank?: number;
  engineCount?: number;
  validRanks?: number[];
}

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

/** Records a front sends. `handle` is front-local (an integer ≥ 0), one per engine request. */
export type UpRecord =
  | { tag: typeof Tag.HELLO; frontId: number }
  | { tag: typeof Tag.SUBMIT; handle: number; group: number; request: GenerateRequest; dpRank: number | null }
  | { tag: typeof Tag.ABORT; handle: number }
  | { tag: typeof Tag.PERMIT; ticket: number }
  | { tag: typeof Tag.RELEASE; ticket: number }
  | { tag: typeof Tag.CALL; callId: number; method: string; args: unknown };

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
    case Tag.HELLO:
      return [r.tag, r.frontId];
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

function downTuple(r: DownRecord): unknown[] {
  switch (r.tag) {
    case Tag.SUBMITTED:
      return [r.tag, r.handle, r.engineIndex];
    case Tag.REJECTED:
    case Tag.FAILED:
      return [r.tag, r.handle, r.error];
    case Tag.OUT: {
      const o = r.output;
      const t: unknown[] = [r.tag, r.handle, o.newTokenIds, finishCode(o.finishReason), o.promptTokens, o.completionTokens, o.cachedTokens, o.logprobs];
      if (o.stopReason !== undefined || o.topLogprobs !== undefined) t.push(o.stopReason === undefined ? null : o.stopReason, o.stopReason !== undefined);
      if (o.topLogprobs !== undefined) t.push(o.topLogprobs);
      return t;
    }
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

/** Encode a front's records as one message. */
export function encodeUp(records: readonly UpRecord[]): Uint8Array {
  return encoder.encode(records.map(upTuple));
}

/** Encode the router's records for one front as one message. */
export function encodeDown(records: readonly DownRecord[]): Uint8Array {
  return encoder.encode(records.map(downTuple));
}

function tuples(bytes: Uint8Array): unknown[][] {
  let value: unknown;
  try {
    value = decoder.decode(bytes);
  } catch (err) {
    throw new ChannelDecodeError(`undecodable channel message (${bytes.length} bytes): ${err instanceof Error ? err.message : String(err)}`);
  }
  if (!Array.isArray(value)) throw new ChannelDecodeError('a channel message must be a list of records');
  for (const [i, t] of value.entries()) {
    if (!Array.isArray(t) || typeof t[0] !== 'number') throw new ChannelDecodeError(`record ${i} is not a tagged list`);
  }
  return value as unknown[][];
}

function int(t: unknown[], i: number, what: string): number {
  const v = t[i];
  if (typeof v !== 'number' || !Number.isSafeInteger(v)) throw new ChannelDecodeError(`record tag ${String(t[0])}: ${what} must be an integer, got ${typeof v}`);
  return v;
}

function intOrNull(t: unknown[], i: number, what: string): number | null {
  return t[i] === null || t[i] === undefined ? null : int(t, i, what);
}

function object<T>(t: unknown[], i: number, what: string): T {
  const v = t[i];
  if (typeof v !== 'object' || v === null) throw new ChannelDecodeError(`record tag ${String(t[0])}: ${what} must be a map`);
  return v as T;
}

function wireError(t: unknown[], i: number): WireError {
  const e = object<WireError>(t, i, 'error');
  if (typeof e.message !== 'string' || typeof e.name !== 'string') throw new ChannelDecodeError(`record tag ${String(t[0])}: error needs a name and a message`);
  return e;
}

function numbers(t: unknown[], i: number, what: string): number[] {
  const v = t[i];
  if (!Array.isArray(v)) throw new ChannelDecodeError(`record tag ${String(t[0])}: ${what} must be a list`);
  for (const x of v) if (typeof x !== 'number') throw new ChannelDecodeError(`record tag ${String(t[0])}: ${what} must hold numbers`);
  return v as number[];
}

/** Decode a front's message. Throws `ChannelDecodeError` for a malformed message or record. */
export function decodeUp(bytes: Uint8Array): UpRecord[] {
  return tuples(bytes).map((t): UpRecord => {
    switch (t[0]) {
      case Tag.HELLO:
        return { tag: Tag.HELLO, frontId: int(t, 1, 'front id') };
      case Tag.SUBMIT: {
        const request = object<GenerateRequest>(t, 3, 'request');
        if (typeof request.requestId !== 'string') throw new ChannelDecodeError('SUBMIT: request id must be a string');
        return { tag: Tag.SUBMIT, handle: int(t, 1, 'handle'), group: int(t, 2, 'group'), request, dpRank: intOrNull(t, 4, 'dp rank') };
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

/** Decode the router's message. Throws `ChannelDecodeError` for a malformed message or record. */
export function decodeDown(bytes: Uint8Array): DownRecord[] {
  return tuples(bytes).map((t): DownRecord => {
    switch (t[0]) {
      case Tag.SUBMITTED:
        return { tag: Tag.SUBMITTED, handle: int(t, 1, 'handle'), engineIndex: intOrNull(t, 2, 'engine index') };
      case Tag.REJECTED:
      case Tag.FAILED:
        return { tag: t[0], handle: int(t, 1, 'handle'), error: wireError(t, 2) };
      case Tag.OUT: {
        const code = int(t, 3, 'finish code');
        if (code < 0 || code >= FINISH_CODES.length) throw new ChannelDecodeError(`OUT: unknown finish code ${code}`);
        const output: WireOutput = {
          newTokenIds: numbers(t, 2, 'token ids'),
          finishReason: FINISH_CODES[code]!,
          promptTokens: int(t, 4, 'prompt tokens'),
          completionTokens: int(t, 5, 'completion tokens'),
          cachedTokens: int(t, 6, 'cached tokens'),
          logprobs: numbers(t, 7, 'logprobs'),
        };
        if (t[9] === true) {
          const s = t[8];
          if (s !== null && typeof s !== 'number' && typeof s !== 'string') throw new ChannelDecodeError('OUT: stop reason must be a number, a string or nil');
          output.stopReason = s;
        }
        if (t.length > 10) {
          if (!Array.isArray(t[10])) throw new ChannelDecodeError('OUT: top logprobs must be a list');
          output.topLogprobs = t[10] as TokenCandidate[][];
        }
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
        return { tag: Tag.JOINED, group: int(t, 1, 'group'), engineIndex: int(t, 2, 'engine index'), rejoin: t[3] === true };
      default:
        throw new ChannelDecodeError(`unknown router record tag ${String(t[0])}`);
    }
  });
}

/** An error as `WireError` (the fields the HTTP layer and logs read; `EngineClientError`'s structured ones kept). */
export function toWireError(err: unknown): WireError {
  if (!(err instanceof Error)) return { name: 'Error', message: String(err) };
  const e = err as Error & Partial<Omit<WireError, 'validRanks'>> & { validRanks?: readonly number[] };
  const w: WireError = { name: e.name, message: e.message };
  if (typeof e.kind === 'string') w.kind = e.kind;
  if (typeof e.requestId === 'string') w.requestId = e.requestId;
  if (typeof e.dpRank === 'number') w.dpRank = e.dpRank;
  if (typeof e.engineCount === 'number') w.engineCount = e.engineCount;
  if (e.validRanks !== undefined) w.validRanks = [...e.validRanks];
  return w;
}

/** The error a `WireError` stands for: an `EngineClientError` when it has a kind, else an `Error` of that name. */
export function fromWireError(w: WireError): Error {
  if (w.kind !== undefined) {
    return new EngineClientError(w.kind as EngineClientErrorKind, w.message, {
      ...(w.requestId !== undefined ? { requestId: w.requestId } : {}),
      ...(w.dpRank !== undefined ? { dpRank: w.dpRank } : {}),
      ...(w.engineCount !== undefined ? { engineCount: w.engineCount } : {}),
      ...(w.validRanks !== undefined ? { validRanks: w.validRanks } : {}),
    });
  }
  const err = new Error(w.message);
  err.name = w.name;
  return err;
}
