/**
 * What the bench:throughput orchestrator (bench/throughput.ts) and its load-generator process
 * (bench/throughput/load-generator.ts) say to each other over the node IPC channel. Units: ms, tokens, µs of CPU.
 */

/** One closed-loop load phase against an OpenAI-compatible HTTP endpoint. */
export interface LoadScenario {
  /** Base URL, e.g. http://127.0.0.1:30001. */
  url: string;
  /** `/v1/chat/completions` or `/v1/completions`. */
  path: string;
  /** Concurrent streams; each sends its next request as soon as the previous one ended. */
  streams: number;
  /** `stream: true` (SSE) or a whole JSON response. */
  stream: boolean;
  /**
   * `max_tokens` of every request (sent with `ignore_eos: true`, so each yields exactly this many). The first request
   * of each stream draws 1..maxTokens instead (seeded), so completions are spread out from the start: the load is in
   * steady state after the first prefill burst instead of advancing in lockstep rounds.
   */
  maxTokens: number;
  /** Ms before the measured window opens (covers the first burst of prefills). */
  warmupMs: number;
  /** Length of the measured window in ms. */
  windowMs: number;
  seed: number;
}

/** Summary of a latency sample, in ms (NaN percentiles when there are no samples). */
export interface Percentiles {
  p50: number;
  p99: number;
  samples: number;
}

/** What the load generator measured inside the window. */
export interface LoadResult {
  /** Actual window length, ms. */
  windowMs: number;
  /**
   * Tokens delivered inside the window. Streaming: content events received in the window × the tokens per content
   * event of the completed requests (`usage.completion_tokens` / content events; 1.0 when each event is one token).
   * Not streaming: `usage.completion_tokens` of the responses completed in the window.
   */
  tokens: number;
  /** Requests that completed (HTTP 200, terminal event seen) inside the window. */
  requests: number;
  /** Requests answered with an HTTP error, a mid-stream error event or a broken body (whole phase). */
  errors: number;
  /** First error message seen, for the report. */
  firstError: string | null;
  /** Streaming: request sent → first content event, for requests sent in the window. */
  ttftMs: Percentiles;
  /** Streaming: gap between consecutive content events of one request, both in the window. */
  itlMs: Percentiles;
  /** Request sent → response complete, for requests completed in the window. */
  e2eMs: Percentiles;
  /** Tokens per content event (streaming; NaN otherwise). */
  tokensPerEvent: number;
  /** CPU µs the load generator itself spent in the window (process.cpuUsage: user + system). */
  clientCpuMicros: number;
}

/** Orchestrator → load generator. */
export type ToLoadGenerator = { type: 'run'; scenario: LoadScenario };

/** Load generator → orchestrator. `window-start`/`window-end` are sent at the instants the window opens/closes. */
export type FromLoadGenerator =
  | { type: 'window-start' }
  | { type: 'window-end' }
  | { type: 'result'; result: LoadResult }
  | { type: 'failed'; message: string };
