/**
 * The engine client's spans of a traced request (issue 32 part 1; src/tracing.ts): `queue` for the time it waited in
 * flow control's queue, and `route` for the rank choice with the inputs it scored. Both are children of the
 * gateway's request span, whose W3C headers the request carries (`GenerateRequest.trace`), so with `--workers N` the
 * router's decision joins the trace of the front that took the request. A request without headers makes no span.
 */
import { SpanStatusCode, type Attributes, type Tracer } from '@opentelemetry/api';
import type { GenerateRequest } from '../protocols/types.js';
import { contextOf, isSampled } from '../tracing.js';
import type { RankView } from './policy.js';

/** What a client traces with: the tracer and the group's name for the spans' attributes. */
export interface ClientTracing {
  readonly tracer: Tracer;
  /** The engine group's name (`--group-name`). */
  readonly group: string;
}

/** One rank choice as the route span records it. */
export interface RouteFacts {
  /** The DP rank chosen (its engine index). */
  dpRank: number;
  /** Whether the client pinned the rank (`X-data-parallel-rank`): no scoring happened. */
  pinned: boolean;
  /** The policy's name (`load`, `cache_aware`, ...). */
  policy: string;
  /** How many ready ranks were offered to the policy (0 when pinned). */
  candidates: number;
  /** The chosen rank as the policy saw it, or null when pinned. */
  view: RankView | null;
  /** Prompt tokens the policy expected the rank to hold in its prefix cache (cache-aware policies), else null. */
  predictedCachedTokens: number | null;
  /** Which placement attempt this is (0 first; more when an ADD reached no engine and was placed again). */
  attempt: number;
}

/** The attributes of a route span: the choice and the scored inputs of the chosen rank. */
function routeAttributes(group: string, f: RouteFacts): Attributes {
  const a: Attributes = {
    'model_gateway.group': group,
    'model_gateway.dp_rank': f.dpRank,
    'model_gateway.pinned': f.pinned,
    'model_gateway.policy': f.policy,
    'model_gateway.candidates': f.candidates,
  };
  if (f.attempt > 0) a['model_gateway.attempt'] = f.attempt;
  const v = f.view;
  if (v !== null) {
    a['model_gateway.rank.in_flight'] = v.inFlight;
    if (v.load !== null) {
      a['model_gateway.rank.num_running'] = v.load.numRunning;
      a['model_gateway.rank.num_waiting'] = v.load.numWaiting;
      a['model_gateway.rank.kv_cache_usage'] = v.load.kvCacheUsage;
    }
    if (v.loadAgeMs !== undefined && v.loadAgeMs !== null) a['model_gateway.rank.load_age_ms'] = v.loadAgeMs;
  }
  if (f.predictedCachedTokens !== null) a['model_gateway.predicted_cached_tokens'] = f.predictedCachedTokens;
  return a;
}

/**
 * Record the `route` span of `request` (a child of its trace headers) at `atMs` (the client's `now` clock, ms: a
 * `performance.now()` value or epoch ms). Nothing when the request carries no headers or its trace is not sampled.
 * Never throws.
 */
export function recordRoute(t: ClientTracing, request: GenerateRequest, facts: RouteFacts, atMs: number): void {
  if (request.trace === undefined || !isSampled(request.trace)) return;
  const span = t.tracer.startSpan(
    'route',
    { startTime: atMs, attributes: routeAttributes(t.group, facts) },
    contextOf(request.trace),
  );
  span.end(atMs);
}

/**
 * Record the `queue` span of `request`: it waited in flow control's queue from `fromMs` to `toMs` (the client's clock),
 * and left it admitted (`error` null) or refused (`error` is why: full, timed out, cancelled). Never throws.
 */
export function recordQueue(
  t: ClientTracing,
  request: GenerateRequest,
  fromMs: number,
  toMs: number,
  error: unknown,
): void {
  if (request.trace === undefined || !isSampled(request.trace)) return;
  const span = t.tracer.startSpan(
    'queue',
    { startTime: fromMs, attributes: { 'model_gateway.group': t.group, 'model_gateway.queue_ms': toMs - fromMs } },
    contextOf(request.trace),
  );
  if (error !== null) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
  }
  span.end(toMs);
}
