/**
 * The engine client's single error type (architecture.md "Rules of thumb": one error type per layer).
 * The kinds follow SMG's error catalogue (dp-routing.md section 6, "Error kinds the client reports").
 */

/**
 * Every engine-client error kind, declared once: `EngineClientErrorKind`, the HTTP status table (server/errors.ts
 * `ENGINE_ERROR_STATUS`, a `Record` over this union, so a new kind does not compile until it has a status) and the
 * channel codec's check of a kind read from another process (fronts/channel/wire-error.ts) derive from it.
 * gateway.md 11.3 maps `engine-dead` to "service unavailable"; this gateway also maps `invalid-dp-rank` to 400
 * (gateway.md 14), and `engine-fault` and `decode`, the engine's faults, to 502 (issue 26).
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
 * - `engine-fault`: the rank holding the request sent output no engine may send (a token id outside the tokenizer's
 *   vocabulary; output-contract.ts, issue 26 part 4): the request fails and is ABORTed on the rank, which stays in
 *   rotation. The message names the rank, the request and the offending value; the gateway is not at fault.
 * - `overloaded`: flow control (flow-control.ts) did not let the request reach a rank: the group stayed saturated past
 *   the request's queue deadline, the queue (or its tenant's share) was full, or a more urgent request took its
 *   place. Retrying later can succeed.
 * - `rate-limited`: the request's tenant has used its budget (budgets.ts: requests or tokens per minute); fields
 *   `retryAfterMs` (absent when waiting cannot help: a prompt larger than the whole budget) and `rateLimits` (the
 *   tenant's budget, budgets.ts `snapshotNumbers`).
 * A failed handshake is not a request's error: the handshake service logs and counts it (transport/).
 */
export const ENGINE_CLIENT_ERROR_KINDS = [
  'engine-dead',
  'rank-stalled',
  'unavailable',
  'transport',
  'decode',
  'encode',
  'client-closed',
  'duplicate-request-id',
  'invalid-dp-rank',
  'stream-closed',
  'engine-fault',
  'overloaded',
  'rate-limited',
] as const;

/** What went wrong, as the HTTP layer needs it (see `ENGINE_CLIENT_ERROR_KINDS`). */
export type EngineClientErrorKind = (typeof ENGINE_CLIENT_ERROR_KINDS)[number];

const KINDS: ReadonlySet<string> = new Set(ENGINE_CLIENT_ERROR_KINDS);

/** Whether `v` is one of `ENGINE_CLIENT_ERROR_KINDS` (for a kind read from another process). */
export function isEngineClientErrorKind(v: unknown): v is EngineClientErrorKind {
  return typeof v === 'string' && KINDS.has(v);
}

/**
 * The structured fields an error may carry next to its message, with their value type, declared once: the
 * `EngineClientError` fields, its constructor, and the channel codec's copy and check of an error crossing processes
 * (fronts/channel/wire-error.ts `toWireError` / `fromWireError`) all derive from this table.
 * - `requestId`: the engine request id the error is about (duplicate-request-id, stream-closed, engine-fault).
 * - `dpRank`: the DP rank concerned: the pinned rank refused (invalid-dp-rank), the rank at fault (engine-fault,
 *   engine-dead).
 * - `engineCount`: invalid-dp-rank only: the number of rank slots of the group.
 * - `validRanks`: invalid-dp-rank only: engine indices of the connected ranks, ascending (gateway.md section 14).
 * - `retryAfterMs`: rate-limited only: ms until the budget can take the request.
 * - `rateLimits`: rate-limited only: the tenant's budget as six numbers (budgets.ts `snapshotNumbers`).
 */
export const ENGINE_CLIENT_ERROR_FIELDS = {
  requestId: 'string',
  dpRank: 'number',
  engineCount: 'number',
  validRanks: 'numbers',
  retryAfterMs: 'number',
  rateLimits: 'numbers',
} as const;

type FieldValue<T> = T extends 'string' ? string : T extends 'number' ? number : readonly number[];

/** The structured fields of `ENGINE_CLIENT_ERROR_FIELDS`, each optional. */
export type EngineClientErrorFields = {
  -readonly [K in keyof typeof ENGINE_CLIENT_ERROR_FIELDS]?: FieldValue<(typeof ENGINE_CLIENT_ERROR_FIELDS)[K]>;
};

/** The names of `ENGINE_CLIENT_ERROR_FIELDS`. */
export const ENGINE_CLIENT_ERROR_FIELD_NAMES = Object.keys(ENGINE_CLIENT_ERROR_FIELDS) as Array<
  keyof EngineClientErrorFields
>;

/**
 * Whether `v` has the value type `ENGINE_CLIENT_ERROR_FIELDS` declares for `field` (a list of numbers for
 * `validRanks`), for a field read from another process.
 */
export function isEngineClientErrorField(field: keyof EngineClientErrorFields, v: unknown): boolean {
  switch (ENGINE_CLIENT_ERROR_FIELDS[field]) {
    case 'string':
      return typeof v === 'string';
    case 'number':
      return typeof v === 'number';
    case 'numbers':
      return Array.isArray(v) && v.every((x) => typeof x === 'number');
  }
}

/** What an error carries next to its message: the original error, kept as the standard `cause`, and the fields. */
export type EngineClientErrorDetails = EngineClientErrorFields & { cause?: unknown };

// The fields of `EngineClientErrorFields` are the class's own (declaration merging: declared once, in the table).
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging, @typescript-eslint/no-empty-object-type
export interface EngineClientError extends Readonly<EngineClientErrorFields> {}

/**
 * An engine-client failure. `kind` is stable for programmatic handling; `message` is meant for an operator (it
 * names the rank, request id or field involved). The original error, if any, is `cause`; the structured fields of
 * `ENGINE_CLIENT_ERROR_FIELDS` are set when given.
 */
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging
export class EngineClientError extends Error {
  /** The failure class (see `ENGINE_CLIENT_ERROR_KINDS`). */
  readonly kind: EngineClientErrorKind;

  /** @param kind the failure class; @param message operator-facing text; @param details cause and structured fields. */
  constructor(kind: EngineClientErrorKind, message: string, details: EngineClientErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = 'EngineClientError';
    this.kind = kind;
    const fields = this as EngineClientErrorFields;
    for (const f of ENGINE_CLIENT_ERROR_FIELD_NAMES) {
      const v = details[f];
      if (v !== undefined) (fields as Record<string, unknown>)[f] = v;
    }
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
