/**
 * The engine client's single error type (architecture.md "Rules of thumb": one error type per layer).
 * The kinds follow SMG's error catalogue (dp-routing.md section 6, "Error kinds the client reports").
 */

/**
 * What went wrong, as the HTTP layer needs it (gateway.md 11.3 maps `engine-dead` to "service unavailable"; this
 * gateway also maps `invalid-dp-rank` to 400 (gateway.md 14), and `engine-fault` and `decode`, the engine's faults,
 * to 502 (issue 26); server/errors.ts `statusForEngineError`):
 * - `engine-dead`: the rank holding the request died (ENGINE_CORE_DEAD, an unreachable identity, a send timeout,
 *   per-rank silence), or its group failed as a unit (dp-routing.md section 6; issue #8). The message names the rank.
 * - `rank-stalled`: the rank holding the request sent nothing for the stall timeout (issue #8 part 3); it is out of
 *   rotation until it speaks again. Names the rank.
 * - `unavailable`: no rank can take the request right now: the group is starting, rebuilding, or every rank is
 *   dead or stalled, or the pinned rank is not ready (names the ranks' states). Retrying later can succeed.
 * - `transport`: a socket operation failed (output receive error, a failed send).
 * - `decode` / `encode`: the protocol codec refused a message (the message names the struct and field); `decode` on a
 *   request: its rank sent nothing decodable while undecodable output arrived (issue 26), the rank is named.
 * - `client-closed`: the client is shut down ("shutting down"), has no engines ("no engines connected"), or its
 *   output stream ended ("engine output stream ended").
 * - `duplicate-request-id`: the id is already live (dp-routing.md section 7).
 * - `invalid-dp-rank`: a pinned rank that is not connected (names the rank and the engine count; section 9.1).
 * - `stream-closed`: a stream ended without a terminal output (names the request id; SMG PR #2170, section 4).
 * - `handshake`: reserved for the handshake driver (engine-wire.md section 2); the client itself never raises it.
 * - `engine-fault`: the rank holding the request sent output no engine may send (a token id outside the tokenizer's
 *   vocabulary; output-contract.ts, issue 26 part 4): the request fails and is ABORTed on the rank, which stays in
 *   rotation. The message names the rank, the request and the offending value; the gateway is not at fault.
 */
export type EngineClientErrorKind =
  | 'engine-dead'
  | 'rank-stalled'
  | 'unavailable'
  | 'transport'
  | 'decode'
  | 'encode'
  | 'client-closed'
  | 'duplicate-request-id'
  | 'invalid-dp-rank'
  | 'stream-closed'
  | 'handshake'
  | 'engine-fault';

/** Optional structured details an error carries next to its message. */
export interface EngineClientErrorDetails {
  /** The original error (codec, transport), kept as the standard `cause`. */
  cause?: unknown;
  /** The engine request id the error is about (duplicate-request-id, stream-closed). */
  requestId?: string;
  /** The DP rank concerned: the pinned rank refused (invalid-dp-rank), the rank at fault (engine-fault, engine-dead). */
  dpRank?: number;
  /** Number of rank slots of the group (invalid-dp-rank). */
  engineCount?: number;
  /** Engine indices of the connected ranks, ascending by identity (invalid-dp-rank; gateway.md section 14). */
  validRanks?: readonly number[];
}

/**
 * An engine-client failure. `kind` is stable for programmatic handling; `message` is meant for an operator (it
 * names the rank, request id or field involved). The original error, if any, is `cause`.
 */
export class EngineClientError extends Error {
  /** The failure class (see `EngineClientErrorKind`). */
  readonly kind: EngineClientErrorKind;
  /** The request id the error is about, when there is one. */
  readonly requestId?: string;
  /** The DP rank concerned (invalid-dp-rank: the refused rank; engine-fault, engine-dead: the rank at fault). */
  readonly dpRank?: number;
  /** invalid-dp-rank only: the number of connected engines. */
  readonly engineCount?: number;
  /** invalid-dp-rank only: the engine indices that would have been accepted. */
  readonly validRanks?: readonly number[];

  /** @param kind the failure class; @param message operator-facing text; @param details cause and structured fields. */
  constructor(kind: EngineClientErrorKind, message: string, details: EngineClientErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = 'EngineClientError';
    this.kind = kind;
    if (details.requestId !== undefined) this.requestId = details.requestId;
    if (details.dpRank !== undefined) this.dpRank = details.dpRank;
    if (details.engineCount !== undefined) this.engineCount = details.engineCount;
    if (details.validRanks !== undefined) this.validRanks = details.validRanks;
  }
}

/** The stream-closed error for `requestId` (dp-routing.md section 4; SMG PR #2170). */
export function streamClosedError(requestId: string): EngineClientError {
  return new EngineClientError(
    'stream-closed',
    `stream for request ${JSON.stringify(requestId)} closed without a terminal output`,
    { requestId },
  );
}

/** Text of any thrown value, for wrapping messages. */
export function describeError(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}
