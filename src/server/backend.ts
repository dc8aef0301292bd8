/**
 * The narrow view of the engine client that the HTTP layer needs (architecture.md "The seams": server/ knows no wire
 * details). `EngineClient` (src/engine-client/client.ts) satisfies it structurally; the route tests use an in-memory
 * fake. Every shape here mirrors the agreed engine-client API (notes/apis.md, dp-routing.md sections 2-6 and 10).
 */
import type { ConnectedEngine } from '../engine-client/link.js';
import type { EngineLoad, EngineOutput, GenerateRequest } from '../protocols/types.js';

/**
 * One submitted request's result stream (dp-routing.md section 4): yields the request's outputs in order and ends
 * after the terminal one (`finishReason !== null`). It throws the engine client's error (an `Error` with a `kind`,
 * see `engineErrorKind` in errors.ts) when the client fails (dp-routing.md section 6).
 * `cancel()` abandons an unfinished stream, which makes the client send ABORT to the owning rank and release its
 * in-flight slot at once (dp-routing.md section 5); idempotent; a no-op after the terminal output.
 */
export interface BackendStream extends AsyncIterable<EngineOutput> {
  /** The engine request id the gateway minted. */
  readonly requestId: string;
  /** The DP rank (engine index) the request was routed to, or null for a non-2-byte identity. */
  readonly engineIndex: number | null;
  cancel(): void;
}

/** Per-rank routing state read at scrape time (dp-routing.md sections 10-11; counts in requests, KV usage 0..1). */
export interface BackendRankState {
  engineIndex: number;
  /** Size of the rank's in-flight set (requests routed there and not yet retired). */
  inFlight: number;
  /** The rank's last stored load report, or null when it never sent one. */
  load: EngineLoad | null;
  /** Cumulative dispatches that arrived with an `X-data-parallel-rank` pin (dp-routing.md 9.1). */
  dispatchedPinned: number;
  /** Cumulative dispatches chosen by the DP policy (dp-routing.md 9.2). */
  dispatchedUnpinned: number;
  /** Cumulative release-clamp (zero-on-empty) events (dp-routing.md 10.3). */
  clampEvents: number;
}

/** Cumulative client-wide wire-health counters (gateway.md section 15.3). */
export interface BackendStats {
  decodeErrors: number;
  abortsSent: number;
  rankMismatches: number;
  /** Fail-all events by cause (e.g. `engine-dead`, `transport`, `decode`). */
  failures: Record<string, number>;
}

/**
 * What the routes, health and metrics need from the engine client.
 * - `submit` rejects with the engine client's error: kind `engine-dead` / `client-closed` (HTTP 503),
 *   `invalid-dp-rank` (HTTP 400), anything else (HTTP 500); see `statusForEngineError` in errors.ts.
 * - `maxModelLen`: tokens, from the first engine's ready response (gateway.md 9.1).
 * - `isAlive()`: the client's local `closed` flag, negated (gateway.md 4.2); sends nothing.
 */
export interface GenerationBackend {
  readonly engines: readonly ConnectedEngine[];
  readonly maxModelLen: number;
  isAlive(): boolean;
  submit(request: GenerateRequest, options?: { dpRank?: number; signal?: AbortSignal }): Promise<BackendStream>;
  rankStates(): BackendRankState[];
  readonly stats: BackendStats;
}
