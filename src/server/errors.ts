/**
 * OpenAI-style HTTP errors of the gateway and the mapping of engine-client errors to HTTP statuses
 * (gateway.md section 11.3; dp-routing.md section 6).
 *
 * Body shape (OpenAI, also vLLM's `ErrorResponse`): `{ error: { message, type, param, code } }`.
 */
import { InvalidTokenIdError, OffLoopError, type OffLoopErrorKind } from '../tokenizer/errors.js';
import { EngineClientError, type EngineClientErrorKind } from '../engine-client/errors.js';
import { snapshotFromNumbers } from '../engine-client/budgets.js';
import { rateLimitHeaders } from './rate-limits.js';

/** OpenAI error `type` values the gateway uses. */
export type ApiErrorType =
  | 'invalid_request_error'
  | 'not_found_error'
  | 'permission_error'
  | 'requests'
  | 'tokens'
  | 'server_error'
  | 'service_unavailable_error';

/** The JSON body of every error response (and of a mid-stream SSE error event). */
export interface OpenAIErrorBody {
  error: { message: string; type: ApiErrorType; param: string | null; code: string | number | null };
}

/**
 * Seconds a client is told to wait (`Retry-After`) when no engine can take its request right now: a group starting
 * (engines load weights for minutes), and a rank or group that is not ready, rebuilding, or a gateway draining.
 */
export const RETRY_AFTER_STARTING_SECONDS = 5;
export const RETRY_AFTER_UNAVAILABLE_SECONDS = 1;

/**
 * An error with an HTTP status that the app's error handler renders as an OpenAI error body.
 * `param` names the offending request parameter (or null); `code` is a short machine-readable code;
 * `retryAfterSeconds`, when set, becomes a `Retry-After` header (a 503 that a later retry can get past).
 */
export class ApiError extends Error {
  readonly statusCode: number;
  readonly type: ApiErrorType;
  readonly param: string | null;
  readonly code: string | null;
  readonly retryAfterSeconds: number | null;
  /** Further response headers (a rate limit's `x-ratelimit-*`), or null. */
  readonly headers: Readonly<Record<string, string>> | null;
  /** The body's `code`, kept apart because fastify overwrites `code` on validation errors (FST_ERR_VALIDATION). */
  readonly #bodyCode: string | null;

  constructor(
    statusCode: number,
    message: string,
    opts: {
      type?: ApiErrorType;
      param?: string | null;
      code?: string | null;
      cause?: unknown;
      retryAfterSeconds?: number;
      headers?: Readonly<Record<string, string>>;
    } = {},
  ) {
    super(capMessage(message), opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'ApiError';
    this.statusCode = statusCode;
    this.type = opts.type ?? defaultType(statusCode);
    this.param = opts.param ?? null;
    this.code = opts.code ?? null;
    this.retryAfterSeconds = opts.retryAfterSeconds ?? null;
    this.headers = opts.headers ?? null;
    this.#bodyCode = this.code;
  }

  /** The OpenAI-style body for this error. */
  toBody(): OpenAIErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.#bodyCode } };
  }
}

/** Characters of a rejected value quoted in an error message (`quoteValue`). */
export const QUOTE_CHARS = 100;

/** Longest error message kept (characters); a longer one is cut (a safety net behind `quoteValue`). */
export const MAX_ERROR_MESSAGE_CHARS = 1000;

function capMessage(message: string): string {
  if (message.length <= MAX_ERROR_MESSAGE_CHARS) return message;
  return `${message.slice(0, MAX_ERROR_MESSAGE_CHARS)}… (message cut, ${Buffer.byteLength(message)} bytes)`;
}

/**
 * A rejected value as error messages and logs quote it (issue #10 part 4: never echo a whole value): its JSON text
 * (a string quoted, so `'x'` reads `"x"`), or, when that is longer than `QUOTE_CHARS` characters, its first
 * `QUOTE_CHARS` characters followed by `… (N bytes)` with N the UTF-8 size of the whole JSON text. A value JSON cannot
 * render (a cycle, a BigInt; request bodies have neither) reads `<unprintable value>`. Never throws.
 */
export function quoteValue(value: unknown): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch {
    text = undefined;
  }
  if (text === undefined) return value === undefined ? 'undefined' : '<unprintable value>';
  if (text.length <= QUOTE_CHARS) return text;
  return `${text.slice(0, QUOTE_CHARS)}… (${Buffer.byteLength(text)} bytes)`;
}

/** A 400 `invalid_request_error` naming `param`; `code` defaults to `invalid_parameter` (or `invalid_request`). */
export function badRequest(message: string, param: string | null = null, code: string | null = null): ApiError {
  return new ApiError(400, message, {
    type: 'invalid_request_error',
    param,
    code: code ?? (param !== null ? 'invalid_parameter' : 'invalid_request'),
  });
}

function defaultType(status: number): ApiErrorType {
  if (status === 403) return 'permission_error';
  if (status === 404) return 'not_found_error';
  if (status === 429) return 'requests';
  if (status === 503) return 'service_unavailable_error';
  if (status >= 500) return 'server_error';
  return 'invalid_request_error';
}

/** The engine-client error kind of `err`, or null when `err` is not an `EngineClientError` (fronts rebuild them too). */
export function engineErrorKind(err: unknown): EngineClientErrorKind | null {
  return err instanceof EngineClientError ? err.kind : null;
}

/**
 * HTTP status of each engine-client error kind (gateway.md 11.3, choosing 503 for every "the engine is gone" case, as
 * that section allows). A `Record` over the kinds, so a new kind does not compile until it has a status here.
 */
export const ENGINE_ERROR_STATUS: Readonly<Record<EngineClientErrorKind, 400 | 429 | 500 | 502 | 503>> = {
  'engine-dead': 503,
  'rank-stalled': 503,
  unavailable: 503,
  'client-closed': 503,
  'stream-closed': 503,
  transport: 503,
  // The engine sent impossible output (issue 26 part 4) or output that does not decode (part 3): the upstream's fault.
  'engine-fault': 502,
  decode: 502,
  'invalid-dp-rank': 400,
  // Flow control held the request until its deadline, or had no room to queue it (issue 30): retry later.
  overloaded: 429,
  // The tenant used its budget (issue 30 part 4): OpenAI's 429 `rate_limit_exceeded`.
  'rate-limited': 429,
  // The gateway could not encode its own request, or reused a live request id: its own fault.
  encode: 500,
  'duplicate-request-id': 500,
};

/** HTTP status for an engine-client error kind (`ENGINE_ERROR_STATUS`). */
export function statusForEngineError(kind: EngineClientErrorKind): number {
  return ENGINE_ERROR_STATUS[kind];
}

/** Seconds a client refused by a full tokenizer queue is told to wait (`Retry-After`). */
export const RETRY_AFTER_TOKENIZER_SECONDS = 1;

/**
 * HTTP status for an off-loop tokenizer error (tokenizer/errors.ts, issue 26 part 5): `queue-full` → 429 (the
 * process has as much tokenizer work queued as it takes; retry), `cancelled` → 499 (the client left; nothing is
 * written, the status is what the metrics and access log count), `worker-failed` → 500 (the gateway's own fault).
 */
export function statusForOffLoopError(kind: OffLoopErrorKind): number {
  switch (kind) {
    case 'queue-full':
      return 429;
    case 'cancelled':
      return 499;
    case 'worker-failed':
      return 500;
  }
}

/** The `ApiError` of an off-loop tokenizer error (status by `statusForOffLoopError`; a 429 has `Retry-After`). */
export function offLoopApiError(err: OffLoopError): ApiError {
  const status = statusForOffLoopError(err.kind);
  if (status === 429) {
    return new ApiError(429, `${err.message}; retry after ${RETRY_AFTER_TOKENIZER_SECONDS} s`, {
      type: 'requests',
      code: 'tokenizer_queue_full',
      retryAfterSeconds: RETRY_AFTER_TOKENIZER_SECONDS,
      cause: err,
    });
  }
  return new ApiError(status, `prompt tokenization failed: ${err.message}`, {
    code: status === 499 ? 'client_closed_request' : 'tokenizer_error',
    cause: err,
  });
}

/**
 * What a failure while rendering engine `requestId`'s output from DP rank `engineIndex` (null when unknown) reports: a
 * token id the tokenizer refused (`InvalidTokenIdError`, from the detokenizer or a logprob's token text) came from the
 * engine, so it is a 502 `engine_fault` naming the rank, like the engine client's `engine-fault` (issue 26 part 4; the
 * engine client normally refuses the sampled ids first, engine-client/output-contract.ts), never a 500. Anything else
 * is returned as it is.
 */
export function blameEngineForTokenId(err: unknown, requestId: string, engineIndex: number | null): unknown {
  if (!(err instanceof InvalidTokenIdError)) return err;
  const rank = engineIndex === null ? 'the engine' : `DP rank ${engineIndex}`;
  return new ApiError(
    502,
    `engine engine-fault: ${rank} sent output for request ${requestId} that the gateway's tokenizer refuses: ${err.message}`,
    {
      code: 'engine_fault',
      cause: err,
    },
  );
}

/**
 * The 429 of a request refused by its tenant's budget, as OpenAI answers one: `code` `rate_limit_exceeded`, `type`
 * the limit that refused it (`requests` or `tokens`), `Retry-After` (whole seconds, at least 1) unless waiting cannot
 * help, and the tenant's `x-ratelimit-*` headers.
 */
function rateLimitedApiError(err: EngineClientError): ApiError {
  const snapshot = err.rateLimits === undefined ? null : snapshotFromNumbers(err.rateLimits);
  // The ledger checks requests first: a refusal with no request left was the request limit's.
  const type = snapshot?.requests?.remaining === 0 ? 'requests' : 'tokens';
  return new ApiError(429, err.message, {
    type,
    code: 'rate_limit_exceeded',
    cause: err,
    ...(err.retryAfterMs === undefined ? {} : { retryAfterSeconds: Math.max(1, Math.ceil(err.retryAfterMs / 1000)) }),
    ...(snapshot === null ? {} : { headers: rateLimitHeaders(snapshot) }),
  });
}

/**
 * Turn anything thrown while serving a request into an `ApiError`: an `ApiError` passes through; an engine-client
 * error maps by kind (its message is kept, prefixed with the kind; `unavailable` and `overloaded` add a `Retry-After`); an off-loop
 * tokenizer error by `offLoopApiError`; anything else becomes a 500 with its message.
 */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof OffLoopError) return offLoopApiError(err);
  const kind = engineErrorKind(err);
  if (kind === 'rate-limited') return rateLimitedApiError(err as EngineClientError);
  if (kind !== null) {
    const status = statusForEngineError(kind);
    const message = (err as Error).message;
    return new ApiError(status, `engine ${kind}: ${message}`, {
      // OpenAI error codes are snake_case (`engine_dead`, `invalid_dp_rank`), the same spelling the gateway's own
      // refusals use, so clients can match on one code whichever path reported the condition.
      code: kind.replace(/-/g, '_'),
      param: kind === 'invalid-dp-rank' ? 'X-data-parallel-rank' : null,
      cause: err,
      ...(kind === 'unavailable' || kind === 'overloaded'
        ? { retryAfterSeconds: RETRY_AFTER_UNAVAILABLE_SECONDS }
        : {}),
    });
  }
  const message = err instanceof Error ? err.message : String(err);
  return new ApiError(500, `internal error: ${message}`, { code: 'internal_error', cause: err });
}
