/**
 * GET /v1/gateway/ranks: the live state of every DP rank of every engine group as JSON (issue #13 part 2), read
 * locally at the call (no engine round trip), like SMG's cached-load view (gateway.md 15.2) with the gateway's own
 * routing inputs and per-rank latency added. The dashboard polls it; it is useful by itself (`curl | jq`). Under
 * `/v1/`, so an API key, when one is configured, covers it (COORDINATION G).
 */
import type { RouteContext } from '../route-context.js';
import type { FastifyInstance } from 'fastify';
import { refreshBackends, type BackendGroup, type BackendRankState, type BackendStatus } from '../backend.js';
import type { LatencyPercentiles, RankStatsBook, RankStatsSource } from '../rank-stats.js';
import { vllmAggregate } from '../vllm-aggregate.js';
import { PRIORITY_BANDS, type FlowControlStats, type PriorityBand } from '../../engine-client/flow-control.js';

/** One DP rank in the answer. Counts in requests, `kv_cache_usage` a ratio 0..1, rates per second, latencies ms. */
export interface RankAnswer {
  dp_rank: number;
  /** The rank's liveness state (joining / ready / stalled / dead; rank-liveness.ts). */
  state: BackendRankState['state'];
  in_flight: number;
  /** The stored load (release-clamped, dp-routing.md 10); null before the rank's first report. */
  num_running_reqs: number | null;
  num_waiting_reqs: number | null;
  kv_cache_usage: number | null;
  dispatched_pinned: number;
  dispatched_unpinned: number;
  clamp_events: number;
  /**
   * True while the rank's reports show work this gateway cannot account for (another client), so zero-on-empty is
   * suspended there (dp-routing.md 14.3); null when the source does not say.
   */
  sole_client_guard: boolean | null;
  /** Requests this gateway ABORTed there that the rank's reports may still count (null when the source does not say). */
  aborting: number | null;
  /** ABORT messages sent to this rank (request aborts: disconnects, stop strings, orphan rows). */
  aborts_sent: number;
  /** Output messages received from the rank (null when the source does not say). */
  batches: number | null;
  /** Handshakes the rank completed after its first (a restarted engine joining again). */
  rejoins: number;
  /** Requests dispatched per second over the last 10 s. */
  dispatch_rate: number;
  /** Tokens generated per second over the last 10 s. */
  generation_tokens_per_second: number;
  ttft_ms: LatencyPercentiles;
  itl_ms: LatencyPercentiles;
}

/**
 * A group's flow-control queue now (issue 30 part 5; null when flow control is off): requests waiting per band and
 * per tenant (the tenants with the most waiting, at most `QUEUED_TENANTS_SHOWN`), and how queued requests ended so far.
 */
export interface FlowControlView {
  queued_by_band: Record<PriorityBand, number>;
  queued_by_tenant: Record<string, number>;
  outcomes: Record<string, number>;
}

/** One engine group in the answer. */
export interface GroupView {
  /** The group's name (`--group-name`): what the dashboard titles it. */
  name: string;
  worker: string;
  engine: string;
  alive: boolean;
  /** As /health reports the group: `ok` | `degraded` (some rank not ready) | `starting` | `unavailable`. */
  status: BackendStatus;
  flow_control: FlowControlView | null;
  ranks: RankAnswer[];
}

function flowControlView(f: Readonly<FlowControlStats> | null | undefined): FlowControlView | null {
  if (f === null || f === undefined) return null;
  return {
    queued_by_band: Object.fromEntries(PRIORITY_BANDS.map((b, i) => [b, f.queuedByBand[i] ?? 0])) as Record<
      PriorityBand,
      number
    >,
    queued_by_tenant: { ...f.queuedByTenant },
    outcomes: { ...f.outcomes },
  };
}

/** The whole answer: `server` is the aggregate the `vllm:*` gauges report (vllm-aggregate.ts). */
export interface RanksAnswer {
  object: 'gateway.ranks';
  model: string;
  served_model_names: string[];
  /** Unix time of the snapshot, seconds. */
  timestamp: number;
  server: {
    num_requests_running: number;
    num_requests_waiting: number;
    kv_cache_usage_perc: number;
    in_flight: number;
    ranks: number;
  };
  /** How this process chooses between groups: the load report ageing horizon it scores with (ms). */
  routing: { load_horizon_ms: number };
  groups: GroupView[];
}

/** The ranks view of `groups` at `nowMs` (the app's clock, for the rates). Pure apart from reading the clients. */
export function ranksView(
  groups: readonly BackendGroup[],
  stats: RankStatsSource,
  nowMs: number,
  names: readonly string[],
  loadHorizonMs: number,
): RanksAnswer {
  const agg = vllmAggregate(groups);
  return {
    object: 'gateway.ranks',
    model: names[0] ?? '',
    served_model_names: [...names],
    timestamp: Date.now() / 1000,
    server: {
      num_requests_running: agg.running,
      num_requests_waiting: agg.waiting,
      kv_cache_usage_perc: agg.kvCacheUsage,
      in_flight: agg.inFlight,
      ranks: agg.ranks,
    },
    routing: { load_horizon_ms: loadHorizonMs },
    groups: groups.map((g) => ({
      name: g.name,
      worker: g.worker,
      engine: g.engine,
      alive: g.backend.isAlive(),
      status: g.backend.status(),
      flow_control: flowControlView(g.backend.stats.flowControl),
      ranks: g.backend.rankStates().map((r): RankAnswer => {
        const s = stats.snapshot(g.worker, r.engineIndex, nowMs);
        return {
          dp_rank: r.engineIndex,
          state: r.state,
          in_flight: r.inFlight,
          num_running_reqs: r.load?.numRunning ?? null,
          num_waiting_reqs: r.load?.numWaiting ?? null,
          kv_cache_usage: r.load?.kvCacheUsage ?? null,
          dispatched_pinned: r.dispatchedPinned,
          dispatched_unpinned: r.dispatchedUnpinned,
          clamp_events: r.clampEvents,
          sole_client_guard: r.soleClientGuard ?? null,
          aborting: r.aborting ?? null,
          aborts_sent: r.abortsSent,
          rejoins: r.rejoins,
          batches: r.batches ?? null,
          dispatch_rate: s.dispatchRate,
          generation_tokens_per_second: s.tokenRate,
          ttft_ms: s.ttftMs,
          itl_ms: s.itlMs,
        };
      }),
    })),
  };
}

/**
 * The per-rank statistics of every front of `--workers N` merged (src/fronts/router/cluster.ts), given this front's book;
 * rejects when they cannot be had (the route then answers from this front's book).
 */
export type SharedRankStats = (local: RankStatsBook) => Promise<RankStatsSource>;

/**
 * Register GET /v1/gateway/ranks (answers `RanksAnswer`; never fails while the app runs). With `shared`, the per-rank
 * rates and latencies are every front's, merged.
 */
export function registerRanksRoute(app: FastifyInstance, ctx: RouteContext, shared?: SharedRankStats): void {
  app.get('/v1/gateway/ranks', async (request, reply) => {
    reply.header('cache-control', 'no-store');
    await refreshBackends(ctx.chooser.groups);
    let stats: RankStatsSource = ctx.rankStats;
    if (shared !== undefined) {
      try {
        stats = await shared(ctx.rankStats);
      } catch (err) {
        request.log.warn({ err }, "per-rank statistics of the other fronts unavailable: answering with this front's");
      }
    }
    return ranksView(ctx.chooser.groups, stats, ctx.now(), ctx.servedModelNames, ctx.chooser.loadHorizonMs);
  });
}
