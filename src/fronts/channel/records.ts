/**
 * The records of the data plane between the HTTP fronts and the router of `--workers N` (docs/workers.md
 * sections 4-5): every message is one frame on the front's unix socket (frames.ts), a msgpack list of records, so a
 * tick's worth of submits, aborts and token rows crosses the process boundary as one message. A record is a list whose
 * first element is its type tag. This module is the schema (tags, record shapes, finish codes); messages.ts encodes,
 * decode.ts decodes, wire-error.ts carries errors. (The front's hello is not a record: it is the socket's first frame,
 * frames.ts.)
 *
 * Front → router: SUBMIT (one engine request, n = 1; fan-out stays in the front), ABORT, PERMIT / RELEASE
 * (the global `--max-concurrent-requests` count lives in the router), CALL (the Responses store, rank-state refresh).
 * Router → front: SUBMITTED / REJECTED (the answer to a SUBMIT), OUT (one output row of a request), FAILED (the
 * request's stream failed), GRANT (the answer to a PERMIT), REPLY (to a CALL), SNAPSHOT (every group's serving state
 * and rank states), JOINED (a rank joined: the app drops a rejoined rank's latency samples).
 */
import type { EngineClientErrorFields } from '../../engine-client/errors.js';
import type { ClientStats } from '../../engine-client/reports.js';
import type { FlowTicket } from '../../engine-client/flow-control.js';
import type {
  EngineOutput,
  EngineOutputBase,
  FinishReason,
  GenerateRequest,
  OutputRowField,
} from '../../protocols/types.js';
import type { BackendRankState, BackendStatus, EngineTask } from '../../server/backend.js';
import type { LoraTarget } from '../../protocols/types.js';

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
  /** The group's worker URL, its name (`--group-name`) and engine family. */
  worker: string;
  name: string;
  engine: 'tokenspeed' | 'vllm';
  /** What the group serves (`--tasks`). */
  tasks: EngineTask[];
  dpSize: number;
  maxModelLen: number | null;
  contextTokenLimit: number;
  alive: boolean;
  canServe: boolean;
  status: BackendStatus;
  ranks: BackendRankState[];
  stats: WireStats;
  /** Whether an unpinned request would go to a rank without waiting in flow control's queue (`hasRoom`). */
  hasRoom: boolean;
  /** The LoRA adapters the group serves, or null when it cannot serve any (TokenSpeed). */
  adapters: LoraTarget[] | null;
}

/**
 * One output row as the router forwards it (an OUT record): the request's stream output with every count filled
 * (tokens), without the request id (the record's handle names the request).
 */
export type WireOutput = Omit<EngineOutput, 'requestId'>;

/** The per-row fields of an OUT record (an engine row has them; the counts are the request stream's). */
export type WireRow = Omit<EngineOutputBase, 'requestId'>;

/**
 * Where each output-row field (protocols/types.ts `OUTPUT_ROW_FIELDS`) sits in an OUT record, the list [tag, handle,
 * newTokenIds, finish code (`FINISH_CODES`), promptTokens, completionTokens, cachedTokens, logprobs, stopReason,
 * whether the stop reason was set, topLogprobs, pooled]: elements up to `logprobs` always; the stop reason (nil when
 * absent) and its flag (absent and nil differ) when any optional field is set; top logprobs when they or the pooled
 * vector are set (nil when absent); the pooled vector (bin: float32 little-endian) only when set (`OUT_LENGTH`).
 * `requestId` is not sent (null): the handle names the request, the front fills the id in. A `Record` over the
 * fields, so one added there does not compile until it has a place here. messages.ts `DownMessage.outRow` writes
 * the elements in this order, decode.ts reads them in this order in place (`readOut`) and by these indices from a
 * generic tuple (`outRecord`).
 */
export const OUT_ELEMENT = {
  requestId: null,
  newTokenIds: 2,
  finishReason: 3,
  promptTokens: 4,
  completionTokens: 5,
  cachedTokens: 6,
  logprobs: 7,
  stopReason: 8,
  topLogprobs: 10,
  pooled: 11,
} as const satisfies Record<OutputRowField, number | null>;

/** The element of an OUT record that says whether the stop reason (`OUT_ELEMENT.stopReason`) was set. */
export const OUT_STOP_REASON_SET = OUT_ELEMENT.stopReason + 1;

/**
 * The lengths of an OUT record (elements): `fixed` without the optional fields, `stopReason` with the stop reason and
 * its flag (a stop reason or top logprobs set), `topLogprobs` with top logprobs as well, `pooled` with the pooled
 * vector as well.
 */
export const OUT_LENGTH = {
  fixed: OUT_ELEMENT.logprobs + 1,
  stopReason: OUT_STOP_REASON_SET + 1,
  topLogprobs: OUT_ELEMENT.topLogprobs + 1,
  pooled: OUT_ELEMENT.pooled + 1,
} as const;

/** Records a front sends. `handle` is front-local (an integer ≥ 0), one per engine request. */
export type UpRecord =
  | {
      tag: typeof Tag.SUBMIT;
      handle: number;
      group: number;
      request: GenerateRequest;
      dpRank: number | null;
      /** The request's tenant and band for the router's flow control (engine-client/flow-control.ts); null: none. */
      flow: FlowTicket | null;
    }
  | { tag: typeof Tag.ABORT; handle: number }
  | { tag: typeof Tag.PERMIT; ticket: number }
  | { tag: typeof Tag.RELEASE; ticket: number }
  | { tag: typeof Tag.CALL; callId: number; method: string; args: unknown };

/**
 * An OUT row as a front decodes it: the row the front's request stream takes (`RequestStreamImpl.deliver`), with
 * `requestId` '' — the router does not send it (the handle names the request); the receiver fills it in.
 */
export type DecodedOutput = EngineOutput;

/** Records the router sends. */
export type DownRecord =
  | {
      tag: typeof Tag.SUBMITTED;
      handle: number;
      engineIndex: number | null;
      /** The tenant's budget after the admission (engine-client/budgets.ts `snapshotNumbers`), or null. */
      budget: number[] | null;
    }
  | { tag: typeof Tag.REJECTED; handle: number; error: WireError }
  | { tag: typeof Tag.OUT; handle: number; output: WireOutput }
  | { tag: typeof Tag.FAILED; handle: number; error: WireError }
  | { tag: typeof Tag.GRANT; ticket: number; granted: boolean; max: number }
  | { tag: typeof Tag.REPLY; callId: number; ok: boolean; value: unknown }
  | { tag: typeof Tag.SNAPSHOT; groups: GroupSnapshot[] }
  | { tag: typeof Tag.JOINED; group: number; engineIndex: number; rejoin: boolean };

/** A router record as `decodeDown` returns it: an OUT record carries a `DecodedOutput`. */
export type ReceivedRecord =
  | Exclude<DownRecord, { tag: typeof Tag.OUT }>
  | { tag: typeof Tag.OUT; handle: number; output: DecodedOutput };

/** A channel message that is not a list of well-formed records. */
export class ChannelDecodeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ChannelDecodeError';
  }
}

/** The finish reason of each wire code (the code is the index). */
export const FINISH_CODES: readonly (FinishReason | null)[] = [null, 'stop', 'length', 'abort', 'error'];

/** The wire code of a finish reason (0 running, 1 stop, 2 length, 3 abort, 4 error). */
export function finishCode(reason: FinishReason | null): number {
  return FINISH_CODES.indexOf(reason);
}
