/**
 * GET /v1/gateway/ranks: the live state of every DP rank of every engine group as JSON (issue #13 part 2), read
 * locally at the call (no engine round trip), like SMG's cached-load view (gateway.md 15.2) with the gateway's own
 * routing inputs and per-rank latency added. The dashboard polls it; it is useful by itself (`curl | jq`). Under
 * `/v1/`, so an API key, when one is configured, covers it (COORDINATION G).
 */
import type { RouteContext } from '../route-context.js';
import type { FastifyInstance } from 'fastify';
import { refreshBackends, type BackendGroup, type BackendRankState, type BackendStatus } from '../backend.js';
import type { GatewayEvent, GatewayEvents } from '../gateway-events.js';
import { RATE_WINDOW_S, type LatencyPercentiles, type RankStatsBook, type RankStatsSource } from '../rank-stats.js';
import { vllmAggregate } from '../vllm-aggregate.js';
import { PRIORITY_BANDS, type FlowControlStats, type PriorityBand } from '../../engine-client/flow-control.js';

/** One DP rank in the answer. Counts in requests, `kv_cache_usage` a ratio 0..1, rates per second, latencies ms. */
export interface RankAnswer {
  dp_rank: number;
  /** The rank's liveness state (joining / ready / stalled / dead; rank-liveness.ts). */
  state: BackendRankState['state'];
  /** Why it is dead (rank-liveness.ts `DeathCause`) or `stall` while stalled; else null. */
  cause: string | null;
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
  /**
   * The whole gateway's latency lately (the dashboard's charts): TTFT and ITL percentiles (ms) over every rank's
   * samples of the last `window_s` seconds (rank-stats.ts `RecentLatency`).
   */
  latency: { window_s: number; ttft_ms: LatencyPercentiles; itl_ms: LatencyPercentiles };
  groups: GroupView[];
  /** The answering process's last events, oldest first (newest last; gateway-events.ts): ids grow by one each. */
  events: GatewayEvent[];
  /**
   * Which list `events` is (random per process): with `--workers N` each front keeps its own, and a restarted gateway
   * starts a new one, so ids are only comparable between answers with the same source.
   */
  events_source: string;
}

/**
 * The ranks view of `groups` at `nowMs` (the app's clock, for the rates), with `events`' list. Pure apart from reading
 * the clients and closing the event bursts that are over.
 */
export function ranksView(
  groups: readonly BackendGroup[],
  stats: RankStatsSource,
  nowMs: number,
  names: readonly string[],
  loadHorizonMs: number,
  events: GatewayEvents,
): RanksAnswer {
  const agg = vllmAggregate(groups);
  const recent = stats.recent(nowMs);
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
    latency: { window_s: RATE_WINDOW_S, ttft_ms: recent.ttftMs, itl_ms: recent.itlMs },
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
          cause: r.cause,
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
    events: events.list(),
    events_source: events.source,
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
    return ranksView(ctx.chooser.groups, stats, ctx.now(), ctx.servedModelNames, ctx.chooser.loadHorizonMs, ctx.events);
  });
}
