/**
 * The gateway as ONE vLLM-style model server (issue #13 part 1): the load a cluster router reads from
 * `vllm:num_requests_running`, `vllm:num_requests_waiting` and `vllm:kv_cache_usage_perc`, aggregated over every DP
 * rank of every live engine group.
 *
 * Why one aggregate and not one series per rank: the Gateway API Inference Extension's model-server protocol
 * (docs/proposals/003-model-server-protocol: TotalQueuedRequests, TotalRunningRequests, KVCacheUtilization, gauges
 * "of the model server") reads ONE sample per metric name per pod; its endpoint picker takes the first matching series
 * (pkg/epp/backend/metrics/metrics.go `getLatestMetric`). Per-rank series would make it see rank 0 only.
 *
 * Semantics (vLLM's, per rank, summed or averaged):
 * - running: requests in the engines' execution batches. vLLM's `num_running_reqs` is that already; TokenSpeed's
 *   `num_running` also counts its waiting queue (engine-wire.md 4.9, dp-routing.md 14.2), so a TokenSpeed rank
 *   contributes `max(0, num_running − num_waiting)`.
 * - waiting: the sum of the ranks' `num_waiting` (the gateway itself queues nothing: every accepted request is
 *   submitted to a rank at once).
 * - KV cache usage: the mean of the ranks' usage ratios (0..1) over the ranks that reported a load, i.e. the share of
 *   the server's KV capacity in use when ranks are equally sized (ZMQ reports carry ratios, not page counts of every
 *   engine family); 0 before any report.
 * The stored loads are the release-clamped ones (dp-routing.md 10), so an idle server reads 0 running / 0 waiting.
 * Ranks of a dead group, and ranks whose lifecycle state (when the engine client reports one) is `dead` or `joining`
 * (not serving yet), are left out.
 */
import type { BackendRankState } from './backend.js';

/** One engine group as the aggregate reads it. */
export interface AggregateGroup {
  readonly engine: string;
  readonly backend: { rankStates(): BackendRankState[]; isAlive(): boolean };
}

/** The aggregate load of the gateway: counts in requests, `kvCacheUsage` a ratio 0..1. */
export interface ServerLoad {
  running: number;
  waiting: number;
  kvCacheUsage: number;
  /** Ranks counted (live groups, not dead). */
  ranks: number;
  /** Sum of the counted ranks' in-flight sets. */
  inFlight: number;
}

/** Running requests of one rank in vLLM's sense (see the module comment); 0 without a stored load. */
export function vllmRunning(engine: string, rank: BackendRankState): number {
  const load = rank.load;
  if (load === null) return 0;
  return engine === 'tokenspeed' ? Math.max(0, load.numRunning - load.numWaiting) : load.numRunning;
}

/** Aggregate the live groups' ranks (see the module comment). Pure; never throws. */
export function vllmAggregate(groups: readonly AggregateGroup[]): ServerLoad {
  const out: ServerLoad = { running: 0, waiting: 0, kvCacheUsage: 0, ranks: 0, inFlight: 0 };
  let kvSum = 0;
  let kvRanks = 0;
  for (const g of groups) {
    if (!g.backend.isAlive()) continue;
    for (const rank of g.backend.rankStates()) {
      if (rank.state === 'dead' || rank.state === 'joining') continue;
      out.ranks++;
      out.inFlight += rank.inFlight;
      out.running += vllmRunning(g.engine, rank);
      if (rank.load !== null) {
        out.waiting += rank.load.numWaiting;
        kvSum += rank.load.kvCacheUsage;
        kvRanks++;
      }
    }
  }
  out.kvCacheUsage = kvRanks > 0 ? kvSum / kvRanks : 0;
  return out;
}
