/**
 * The options of the gateway's HTTP edge (issue #10): API keys, CORS, the concurrency cap, bounded stream buffering,
 * the request-receive timeout and the bounds of the off-loop tokenizer queue (issue 26 part 5), with their defaults
 * and checks. Each one's behaviour lives in its own module (auth.ts, cors.ts, concurrency.ts, sse.ts, app.ts for the
 * timeouts, tokenizer/off-loop.ts for the queue).
 */
import { atMostTimerMs, positiveInteger } from '../option-checks.js';
import { DEFAULT_OFF_LOOP_LIMITS, type OffLoopLimits } from '../tokenizer/off-loop.js';
import { DEFAULT_MAX_CONCURRENT_REQUESTS } from './concurrency.js';
import type { CorsOptions } from './cors.js';
import { DEFAULT_CLIENT_STALL_TIMEOUT_MS, DEFAULT_STREAM_BUFFER_BYTES, type StreamBackpressure } from './sse.js';

/** Default bound on receiving one whole request (headers and body): 60 s, then 408 and the connection closed. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 60_000;
/**
 * The HTTP listen socket's accept backlog (connections). Node's default of 511 overflowed when 2000 clients connected
 * at once (bench:throughput, issue 9: ECONNRESET); the kernel caps it at net.core.somaxconn (4096 on current Linux).
 */
export const LISTEN_BACKLOG = 4096;
/** Node's own bound on receiving the headers (ms); kept unless the request bound is shorter. */
export const NODE_HEADERS_TIMEOUT_MS = 60_000;

/**
 * Options of the HTTP edge; every field is optional and defaults as documented here.
 * - `apiKeys`: accepted bearer keys; none (default) → no authentication (auth.ts).
 * - `apiKeysFile`: a keys file of tenants with their keys and priority bands (keys-file.ts); its keys are accepted
 *   too, and it is read again on SIGHUP.
 * - `metricsRequireKey`: `/metrics` also needs a key (default false).
 * - `cors`: CORS policy; absent (default) → no CORS headers (cors.ts).
 * - `maxConcurrentRequests`: concurrent generation requests before 429 (default 512; 0 = no cap; concurrency.ts).
 * - `streamBufferBytes`: bytes buffered per stream for a client that does not read (default 1 MiB; sse.ts).
 * - `clientStallTimeoutMs`: how long such a client may stay stalled before its engine request is aborted and its
 *   stream closed (default 30 000 ms; sse.ts).
 * - `requestTimeoutMs`: bound on receiving a whole request, headers and body (default 60 000 ms); a request not
 *   received by then gets 408 and its connection is closed. Once received, a request (and its stream) has no total
 *   time bound (gateway.md 12 "Timeouts").
 * - `tokenizerQueueJobs`, `tokenizerQueueChars`: bounds of each process's off-loop tokenizer queue (large prompts,
 *   `/tokenize`, `/detokenize`, large chats), in jobs and characters (defaults 256 and 8 Mi; tokenizer/off-loop.ts
 *   `DEFAULT_OFF_LOOP_LIMITS` says why); a job past them is refused with 429 and `Retry-After`.
 * - `tokenizeBodyLimitBytes`: the largest body `/tokenize` and `/detokenize` take (default 1 MiB,
 *   `DEFAULT_TOKENIZE_BODY_LIMIT_BYTES`; never more than the app's body limit); a larger one gets 413 naming it.
 */
export interface HttpEdgeOptions {
  apiKeys?: readonly string[];
  apiKeysFile?: string;
  metricsRequireKey?: boolean;
  cors?: CorsOptions;
  maxConcurrentRequests?: number;
  streamBufferBytes?: number;
  clientStallTimeoutMs?: number;
  requestTimeoutMs?: number;
  tokenizerQueueJobs?: number;
  tokenizerQueueChars?: number;
  tokenizeBodyLimitBytes?: number;
}

/** `HttpEdgeOptions` with every default applied. */
export interface ResolvedEdgeOptions {
  apiKeys: readonly string[];
  apiKeysFile: string | null;
  metricsRequireKey: boolean;
  cors: CorsOptions | undefined;
  maxConcurrentRequests: number;
  streamBackpressure: StreamBackpressure;
  requestTimeoutMs: number;
  offLoop: OffLoopLimits;
  tokenizeBodyLimitBytes: number;
}

/**
 * Apply the defaults and check `opts`. Throws RangeError for an empty API key, a negative or non-integer
 * `maxConcurrentRequests`, and any other count or duration that is not an integer ≥ 1.
 */
export function resolveEdgeOptions(opts: HttpEdgeOptions = {}): ResolvedEdgeOptions {
  const apiKeys = [...new Set(opts.apiKeys ?? [])];
  if (apiKeys.some((k) => k.length === 0)) throw new RangeError('an API key must not be empty');
  const max = opts.maxConcurrentRequests ?? DEFAULT_MAX_CONCURRENT_REQUESTS;
  if (!Number.isSafeInteger(max) || max < 0)
    throw new RangeError(`maxConcurrentRequests must be an integer ≥ 0, got ${max}`);
  return {
    apiKeys,
    apiKeysFile: opts.apiKeysFile ?? null,
    metricsRequireKey: opts.metricsRequireKey === true,
    cors: opts.cors,
    maxConcurrentRequests: max,
    streamBackpressure: {
      maxBufferedBytes: positiveInteger('streamBufferBytes', opts.streamBufferBytes ?? DEFAULT_STREAM_BUFFER_BYTES),
      stallTimeoutMs: atMostTimerMs(
        'clientStallTimeoutMs',
        positiveInteger('clientStallTimeoutMs', opts.clientStallTimeoutMs ?? DEFAULT_CLIENT_STALL_TIMEOUT_MS),
      ),
    },
    requestTimeoutMs: atMostTimerMs(
      'requestTimeoutMs',
      positiveInteger('requestTimeoutMs', opts.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS),
    ),
    offLoop: {
      maxJobs: positiveInteger('tokenizerQueueJobs', opts.tokenizerQueueJobs ?? DEFAULT_OFF_LOOP_LIMITS.maxJobs),
      maxChars: positiveInteger('tokenizerQueueChars', opts.tokenizerQueueChars ?? DEFAULT_OFF_LOOP_LIMITS.maxChars),
    },
    tokenizeBodyLimitBytes: positiveInteger(
      'tokenizeBodyLimitBytes',
      opts.tokenizeBodyLimitBytes ?? DEFAULT_TOKENIZE_BODY_LIMIT_BYTES,
    ),
  };
}

/**
 * Default largest body of `/tokenize` and `/detokenize`, in bytes (1 MiB; issue 26 part 5). Those bodies are parsed on
 * the event loop before their work goes to the tokenizer worker, and parsing 1 MiB takes ~4–12 ms on the dev box
 * (a list of ids costs most per byte: 130 k ids), against 50–170 ms for the 7 MB texts and 1.3 M ids that stalled every
 * stream before. 1 MiB holds a 128 k-token prompt's text or its ids; raise it for longer contexts.
 */
export const DEFAULT_TOKENIZE_BODY_LIMIT_BYTES = 1024 * 1024;

/**
 * Node HTTP server timing options for a request bound of `requestTimeoutMs`: the same `requestTimeout`, a
 * `headersTimeout` no longer than it (Node requires that), and a `connectionsCheckingInterval` (how often Node looks
 * for expired requests) of a tenth of the bound, between 50 ms and Node's default 30 s, so a 408 comes at most ~10 %
 * late.
 */
export function serverTimeouts(requestTimeoutMs: number): {
  requestTimeout: number;
  headersTimeout: number;
  connectionsCheckingInterval: number;
} {
  return {
    requestTimeout: requestTimeoutMs,
    headersTimeout: Math.min(NODE_HEADERS_TIMEOUT_MS, requestTimeoutMs),
    connectionsCheckingInterval: Math.min(30_000, Math.max(50, Math.floor(requestTimeoutMs / 10))),
  };
}
