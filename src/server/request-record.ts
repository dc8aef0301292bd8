/**
 * The record of one generation request (issue 28 part 3): its per-choice latency trackers and outcomes, counted once
 * at the terminal outcome into the metrics (`countRequest`, the vLLM engine-request counters) and the one access-log
 * line (issue #13 part 3), and the two ways a request ends because of its client (a disconnect, a client that stopped
 * reading: 499 `cancelled`, the connection closed). Used by serve-generation.ts and the two responses
 * (respond-buffered.ts, respond-streamed.ts).
 */
import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify';
import type { BackendStream } from './backend.js';
import { EngineClientError } from '../engine-client/errors.js';
import type { ApiError } from './errors.js';
import type { GatewayEvents } from './gateway-events.js';
import type { RequestTrace } from './request-trace.js';
import type { LatencyTracker } from './generation.js';
import type { GatewayMetrics, RequestOutcome } from './metrics.js';
import type { VllmFinishedReason } from './metrics-vllm.js';
import type { ClientStalledError } from './sse.js';

/** What a record is about: the request, its endpoint and engine group, and its size. */
export interface RequestFacts {
  request: FastifyRequest;
  requestId: string;
  endpoint: string;
  /** The engine group's name (`--group-name`). */
  group: string;
  promptTokens: number;
  /** Number of choices (engine sub-requests). */
  n: number;
  stream: boolean;
  /** The request's start on `now`'s clock (ms). */
  startedAt: number;
  /** The request's tenant (tenant.ts), for the per-tenant accounting. */
  tenant: string;
  /** The request's span while tracing is on (request-trace.ts): the record ends it with the outcome. */
  trace?: RequestTrace | null;
}

/** What a record writes to. */
export interface RecordSinks {
  metrics: GatewayMetrics;
  /** Requests whose outcome was already counted (the app's error handler counts the rest). */
  counted: WeakSet<object>;
  /** Monotonic clock in ms. */
  now: () => number;
  /** The gateway's event list (gateway-events.ts): a request an engine failed is counted there. */
  events?: Pick<GatewayEvents, 'engineFailed'>;
}

/**
 * Whether `log` writes lines of `level` (pino's `isLevelEnabled`; a logger without it is taken to write them), so a
 * line's fields are only gathered when it is written.
 */
function levelEnabled(log: FastifyBaseLogger, level: 'debug' | 'info' | 'warn'): boolean {
  const check = (log as { isLevelEnabled?: (level: string) => boolean }).isLevelEnabled;
  return typeof check !== 'function' || check.call(log, level);
}

/** A duration in ms rounded to 0.1 ms for the access log; null stays null. */
function roundMs(ms: number | null): number | null {
  return ms === null ? null : Math.round(ms * 10) / 10;
}

/** Past this many choices (or embedding inputs), a log line counts ranks and finish reasons instead of listing them. */
const LISTED_CHOICES = 16;

/** How many times each value occurs in `values` (keys as strings). */
function tally(values: readonly (string | number | null)[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const v of values) out[String(v)] = (out[String(v)] ?? 0) + 1;
  return out;
}

/** One request's accounting (see the module comment). */
export class RequestRecord {
  /** Per choice: its latency tracker (choice 0 feeds the histograms, every choice its rank's statistics). */
  readonly trackers: LatencyTracker[] = [];
  /** Per choice: the engine index it was routed to (null when unknown), once submitted. */
  engineIndexes: (number | null)[] = [];
  /** Per choice: the reported finish reason (tool_calls included) once it finished. */
  private readonly reasons: (RequestOutcome | null)[] = [];
  private completionTokens = 0;
  private cachedTokens = 0;

  constructor(
    readonly facts: RequestFacts,
    private readonly sinks: RecordSinks,
  ) {
    for (let i = 0; i < facts.n; i++) this.reasons.push(null);
    if (facts.trace) facts.trace.owned = true;
  }

  /** Count the request's terminal outcome (HTTP `status`, `error` for a failure) and write its access-log line. */
  count(status: number, outcome: RequestOutcome, error?: string): void {
    this.sinks.counted.add(this.facts.request);
    this.sinks.metrics.countRequest(this.facts.endpoint, status, outcome);
    // The usage an answered request reported: the prompt once, every choice's completion, the cached prompt tokens.
    const usage =
      status === 200
        ? { prompt: this.facts.promptTokens, completion: this.completionTokens, cached: this.cachedTokens }
        : null;
    this.sinks.metrics.countTenant(this.facts.tenant, status, usage);
    this.accessLog(status, outcome, error);
    if (this.facts.trace) this.endSpan(this.facts.trace, status, outcome, error);
  }

  /**
   * Count the request as failed with `apiErr`, answered with HTTP `status`: the error's own, or 200 when it came
   * mid-stream (an SSE error event; the log line says so). A failure that is an engine's (gateway-events.ts
   * `ENGINE_FAILURE_CODES`) also goes to the event list, on the DP rank the error names, else the one every choice
   * went to.
   */
  countFailure(status: number, apiErr: ApiError): void {
    const midStream = status !== apiErr.statusCode;
    this.count(status, 'error', midStream ? `mid-stream (${apiErr.statusCode}): ${apiErr.message}` : apiErr.message);
    if (apiErr.code === null || this.sinks.events === undefined) return;
    const cause = apiErr.cause;
    const named = cause instanceof EngineClientError ? cause.dpRank : undefined;
    const ranks = new Set(this.engineIndexes);
    const only = ranks.size === 1 ? [...ranks][0]! : null;
    this.sinks.events.engineFailed(this.facts.group, named ?? only, apiErr.code);
  }

  /** End the request's span: when the first token came, the usage, the ranks and finish reasons, the status. */
  private endSpan(trace: RequestTrace, status: number, outcome: RequestOutcome, error: string | undefined): void {
    if (!trace.recording) return;
    const f = this.facts;
    const ttft = this.trackers[0]?.ttftMs ?? null;
    if (ttft !== null) trace.event('first_token', { 'model_gateway.ttft_ms': ttft }, f.startedAt + ttft);
    trace.set({
      'model_gateway.response_id': f.requestId,
      'model_gateway.group': f.group,
      'model_gateway.tenant': f.tenant,
      'model_gateway.dp_ranks': this.engineIndexes.map((r) => r ?? -1),
      'gen_ai.usage.input_tokens': f.promptTokens,
      'gen_ai.usage.output_tokens': this.completionTokens + this.unfinishedTokens(),
      'model_gateway.cached_tokens': this.cachedTokens,
      'gen_ai.response.finish_reasons': this.reasons.map((r) => r ?? outcome),
    });
    if (error !== undefined) trace.fail(new Error(error));
    trace.end(status);
  }

  /** Choice `index` finished: count it as a finished engine request (vLLM counters). Units: tokens. */
  choiceFinished(
    index: number,
    engineReason: 'stop' | 'length',
    reported: RequestOutcome,
    generated: number,
    cached: number,
  ): void {
    this.reasons[index] = reported;
    this.completionTokens += generated;
    this.cachedTokens = Math.max(this.cachedTokens, cached);
    this.sinks.metrics.countEngineRequest(engineReason, this.facts.promptTokens, generated, cached);
  }

  /** Count every choice that did not finish as an aborted engine request. */
  countAborted(): void {
    for (let i = 0; i < this.trackers.length; i++) {
      if (this.reasons[i] === null)
        this.sinks.metrics.countEngineRequest(
          'abort' satisfies VllmFinishedReason,
          this.facts.promptTokens,
          this.trackers[i]!.tokensSeen,
        );
    }
  }

  /** Whether `level` is logged for this request (lines are built only then). */
  logs(level: 'debug' | 'info' | 'warn'): boolean {
    return levelEnabled(this.facts.request.log, level);
  }

  /** Tokens the choices that did not finish (aborted, stalled, failed) had received: they count in the access log. */
  private unfinishedTokens(): number {
    let sum = 0;
    for (let i = 0; i < this.trackers.length; i++) if (this.reasons[i] === null) sum += this.trackers[i]!.tokensSeen;
    return sum;
  }

  private accessLog(status: number, outcome: RequestOutcome, error?: string): void {
    // The line is built only for a level that is logged (the default `info` logs it; `--log-level warn` only failures).
    if (!this.logs(error !== undefined ? 'warn' : 'info')) return;
    const f = this.facts;
    const line = {
      responseId: f.requestId,
      endpoint: f.endpoint,
      group: f.group,
      rank:
        f.n === 1
          ? (this.engineIndexes[0] ?? null)
          : f.n <= LISTED_CHOICES
            ? this.engineIndexes
            : tally(this.engineIndexes),
      status,
      promptTokens: f.promptTokens,
      completionTokens: this.completionTokens + this.unfinishedTokens(),
      cachedTokens: this.cachedTokens,
      ttftMs: roundMs(this.trackers[0]?.ttftMs ?? null),
      durationMs: roundMs(this.sinks.now() - f.startedAt),
      finishReason:
        f.n === 1
          ? outcome
          : f.n <= LISTED_CHOICES
            ? this.reasons.map((r) => r ?? outcome)
            : tally(this.reasons.map((r) => r ?? outcome)),
      ...(f.n > 1 ? { n: f.n } : {}),
      ...(f.stream ? { stream: true } : {}),
      ...(error !== undefined ? { error } : {}),
    };
    if (error !== undefined) f.request.log.warn(line, 'request failed');
    else f.request.log.info(line, 'request finished');
  }
}

/** The client went away: its unfinished choices count as aborts, the request as 499 `cancelled`; the socket closes. */
export function endDisconnected(record: RequestRecord, reply: FastifyReply): FastifyReply {
  record.countAborted();
  record.count(499, 'cancelled');
  if (!reply.sent) reply.hijack();
  if (!reply.raw.destroyed) reply.raw.destroy();
  return reply;
}

/**
 * A client that kept its stream's buffer full past the stall timeout (sse.ts): ABORT its engine requests, count them
 * as aborts and the request as 499 `cancelled`, close the connection.
 */
export function endStalled(
  record: RequestRecord,
  reply: FastifyReply,
  streams: readonly BackendStream[],
  err: ClientStalledError,
): FastifyReply {
  for (const s of streams) s.cancel();
  record.countAborted();
  record.count(499, 'cancelled');
  record.facts.request.log.info(
    { responseId: record.facts.requestId, stalledMs: err.stalledMs, bufferedBytes: err.bufferedBytes },
    'client stopped reading; engine request aborted and connection closed',
  );
  if (!reply.raw.destroyed) reply.raw.destroy();
  return reply;
}
