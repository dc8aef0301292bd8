/**
 * Decoding the channel's messages (records.ts): `decodeUp` / `decodeDown` validate every record's shape and throw
 * `ChannelDecodeError` for anything else (the caller logs and counts it, the process keeps running). Pure: no sockets.
 */
import { Decoder } from '@msgpack/msgpack';
import type { FlowTicket } from '../../engine-client/flow-control.js';
import { isBudgetLimit, snapshotFromNumbers } from '../../engine-client/budgets.js';
import type { GenerateRequest, TokenCandidate } from '../../protocols/types.js';
import { float32sFromLe } from '../../wire/float32.js';
import { MsgpackReader } from '../../wire/reader.js';
import { isTraceCarrier } from '../../tracing.js';
import {
  ChannelDecodeError,
  FINISH_CODES,
  OUT_ELEMENT,
  OUT_LENGTH,
  OUT_STOP_REASON_SET,
  Tag,
  type DecodedOutput,
  type GroupSnapshot,
  type ReceivedRecord,
  type UpRecord,
} from './records.js';
import { checkedWireError } from './wire-error.js';

const decoder = new Decoder();

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

/**
 * A SUBMIT's flow ticket (messages.ts `submitTuple`): elements 5 (tenant, a string) and 6 (band, an integer ≥ 0),
 * then optionally 7 and 8 (requests and tokens per minute: nil or an integer ≥ 1), 9 (lead, a boolean), 10 (the
 * queue deadline: nil or ms > 0) and 11 (the prompt tokens the lead charges: an integer ≥ 0); null when absent.
 */
function flowTicket(t: unknown[]): FlowTicket | null {
  if (t.length <= 5) return null;
  if (typeof t[5] !== 'string') throw new ChannelDecodeError('SUBMIT: the flow tenant must be a string');
  const ticket = { tenant: t[5], band: int(t, 6, 'flow band') };
  if (t.length <= 7) return ticket;
  const limit = (i: number): number | null => {
    if (t[i] === null || isBudgetLimit(t[i])) return t[i] as number | null;
    throw new ChannelDecodeError('SUBMIT: a budget limit must be nil or an integer ≥ 1');
  };
  const requestsPerMinute = limit(7);
  const tokensPerMinute = limit(8);
  if (typeof t[9] !== 'boolean') throw new ChannelDecodeError("SUBMIT: the ticket's lead flag must be a boolean");
  const timeoutMs = t[10] ?? null;
  if (timeoutMs !== null && !(typeof timeoutMs === 'number' && timeoutMs > 0 && Number.isFinite(timeoutMs)))
    throw new ChannelDecodeError("SUBMIT: the ticket's queue deadline must be nil or ms > 0");
  const promptTokens = t[11] ?? null;
  if (promptTokens !== null && !(Number.isSafeInteger(promptTokens) && (promptTokens as number) >= 0))
    throw new ChannelDecodeError("SUBMIT: the ticket's prompt tokens must be nil or an integer ≥ 0");
  return {
    ...ticket,
    ...(timeoutMs === null ? {} : { timeoutMs: timeoutMs as number }),
    ...(promptTokens === null ? {} : { promptTokens: promptTokens as number }),
    ...(requestsPerMinute === null && tokensPerMinute === null
      ? {}
      : { budget: { requestsPerMinute, tokensPerMinute } }),
    ...(t[9] ? {} : { lead: false }),
  };
}

/** A SUBMITTED's element 3: the budget's six numbers (budgets.ts `snapshotNumbers`). */
function budgetNumbers(t: unknown[]): number[] {
  const v = numbers(t, 3, 'budget');
  if (snapshotFromNumbers(v) === null) throw new ChannelDecodeError('SUBMITTED: the budget must be six finite numbers');
  return v;
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
        if (request.trace !== undefined && !isTraceCarrier(request.trace))
          throw new ChannelDecodeError('SUBMIT: trace headers must be a map of at most 8 strings');
        return {
          tag: Tag.SUBMIT,
          handle: int(t, 1, 'handle'),
          group: int(t, 2, 'group'),
          request,
          dpRank: intOrNull(t, 4, 'dp rank'),
          flow: flowTicket(t),
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

/**
 * The optional tail of an OUT record (the fields of kind `optional`, from `OUT_ELEMENT.stopReason` on; records.ts),
 * as the generic decoder reads it: each set only when the record carries it, so an absent one stays absent.
 */
function outTail(output: DecodedOutput, t: unknown[]): void {
  if (t[OUT_STOP_REASON_SET] === true) {
    const s = t[OUT_ELEMENT.stopReason];
    if (s !== null && typeof s !== 'number' && typeof s !== 'string')
      throw new ChannelDecodeError('OUT: stop reason must be a number, a string or nil');
    output.stopReason = s;
  }
  if (t.length > OUT_ELEMENT.topLogprobs && t[OUT_ELEMENT.topLogprobs] !== null) {
    const top = t[OUT_ELEMENT.topLogprobs];
    if (!Array.isArray(top)) throw new ChannelDecodeError('OUT: top logprobs must be a list or nil');
    output.topLogprobs = top as TokenCandidate[][];
  }
  if (t.length > OUT_ELEMENT.pooled) {
    const bytes = t[OUT_ELEMENT.pooled];
    if (!(bytes instanceof Uint8Array) || bytes.length % 4 !== 0)
      throw new ChannelDecodeError('OUT: the pooled vector must be bytes of float32 values');
    output.pooled = float32sFromLe(bytes);
  }
}

function safe(r: MsgpackReader, what: string): number {
  const v = r.readInt(what);
  if (typeof v === 'bigint') throw new ChannelDecodeError(`OUT: ${what} ${v} is beyond ±(2^53−1)`);
  return v;
}

/**
 * One OUT record of `len` elements (`len` ≥ `OUT_LENGTH.fixed`) read in place, its tag already consumed: the
 * per-token path of a front, with no intermediate tuple. The elements are read in records.ts `OUT_ELEMENT` order.
 * Types are checked as they are read (integers for ids and counts, numbers for logprobs). Throws WireDecodeError or
 * ChannelDecodeError.
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
  if (len > OUT_LENGTH.fixed) {
    const tail: unknown[] = [];
    for (let i = OUT_LENGTH.fixed; i < len; i++) tail[i] = r.readAny('OUT tail');
    outTail(output, tail);
  }
  return { tag: Tag.OUT, handle, output };
}

/**
 * An OUT record from its generic tuple, each field at its records.ts `OUT_ELEMENT` index: one the in-place reader
 * did not take (a non-minimal tag, fewer than `OUT_LENGTH.fixed` elements).
 */
function outRecord(t: unknown[]): ReceivedRecord {
  const code = int(t, OUT_ELEMENT.finishReason, 'finish code');
  if (code < 0 || code >= FINISH_CODES.length) throw new ChannelDecodeError(`OUT: unknown finish code ${code}`);
  const output: DecodedOutput = {
    requestId: '',
    newTokenIds: integers(t, OUT_ELEMENT.newTokenIds, 'token ids'),
    finishReason: FINISH_CODES[code]!,
    promptTokens: int(t, OUT_ELEMENT.promptTokens, 'prompt tokens'),
    completionTokens: int(t, OUT_ELEMENT.completionTokens, 'completion tokens'),
    cachedTokens: int(t, OUT_ELEMENT.cachedTokens, 'cached tokens'),
    logprobs: numbers(t, OUT_ELEMENT.logprobs, 'logprobs'),
  };
  outTail(output, t);
  return { tag: Tag.OUT, handle: int(t, 1, 'handle'), output };
}

/** One router record from its generic tuple. */
function downRecord(t: unknown[]): ReceivedRecord {
  switch (t[0]) {
    case Tag.SUBMITTED:
      return {
        tag: Tag.SUBMITTED,
        handle: int(t, 1, 'handle'),
        engineIndex: intOrNull(t, 2, 'engine index'),
        budget: t.length > 3 ? budgetNumbers(t) : null,
      };
    case Tag.REJECTED:
    case Tag.FAILED:
      return { tag: t[0], handle: int(t, 1, 'handle'), error: checkedWireError(t[2], `record tag ${String(t[0])}`) };
    case Tag.OUT:
      return outRecord(t);
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
      if (len >= OUT_LENGTH.fixed && bytes[r.pos] === OUT_HEAD) {
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
