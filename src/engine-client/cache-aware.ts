/**
 * The `cache_aware` DP policy (issue 12 part 2; dp-routing.md 14.11): prefix-cache affinity traded against load,
 * with a balance bound in the spirit of SGLang's cache-aware router.
 *
 * SGLang's router (sgl-model-gateway `policies/cache_aware.rs`) keeps an approximate radix tree per worker from the
 * requests it sent; when the system is **imbalanced** — `(max − min) > balance_abs_threshold` **and**
 * `max > balance_rel_threshold × min` over the workers' loads — it routes to the least loaded worker; otherwise to
 * the worker with the longest prefix match if the match ratio exceeds `cache_threshold`, else to the worker with the
 * smallest tree. This policy differs on purpose:
 * - the bound is **per rank**: a rank may use its affinity only while it is not overloaded against the least loaded
 *   rank (`withinBalanceBound`: not both `load − min > abs` and `load > rel × min`), so one hot rank loses its
 *   affinity without switching every other rank to pure load balancing;
 * - instead of a match-ratio threshold, a rank's score is its load minus the prefill it would save, in load units:
 *   `score = load − matchedTokens / tokensPerLoadUnit` (`affinityScore`), so a long shared prefix pulls harder than a
 *   short one and a few matching blocks never outweigh a real load difference;
 * - without any match the score is exactly the `load` policy's (`fleetScorer`: aged reports, TokenSpeed's running
 *   count, dark-fleet fallback; policy.ts), with the same rotating scan, so on prompts that share nothing the policy
 *   chooses what `load` chooses.
 *
 * The index (`PrefixIndex`) holds the chained hashes of the prompts sent to each rank, recorded in `onDispatch`
 * (pinned requests too) and dropped in `forgetRank`. `select` and `onDispatch` run in the client's synchronous
 * select + reserve step (dp-routing.md 12.3); the prompt is hashed once per request (`select` keeps the hashes for the
 * `onDispatch` that follows). Cost: one hash per 16 prompt tokens plus one Map lookup per matched block per rank.
 */
import type { GenerateRequest } from '../protocols/types.js';
import { fleetScorer, loadHorizonOf, lowestPosition, type DpPolicy, type LoadPolicyOptions, type RankView } from './policy.js';
import { DEFAULT_INDEX_CAPACITY_BLOCKS, PrefixIndex, type PrefixIndexOptions } from './prefix-index.js';

/** Default absolute load difference (requests) past which a rank's affinity yields to load. */
export const DEFAULT_BALANCE_ABS_THRESHOLD = 8;
/** Default relative bound (ratio of a rank's load to the least loaded rank's) past which affinity yields to load. */
export const DEFAULT_BALANCE_REL_THRESHOLD = 1.5;
/**
 * Default prompt tokens of saved prefill worth one request of load. One more request on a rank costs every step
 * there one decode token; a prefill of a few hundred tokens costs about as much as a step of a small batch (the
 * sim's default step model: 0.02 ms per prefill token against 8 ms per step plus 0.1 ms per decoding request).
 */
export const DEFAULT_TOKENS_PER_LOAD_UNIT = 256;

/**
 * Options of `createCacheAwarePolicy` (besides `loadHorizonMs` and the index's `blockTokens` / `capacityBlocks`):
 * `balanceAbsThreshold` (requests, ≥ 0), `balanceRelThreshold` (ratio ≥ 1), `tokensPerLoadUnit` (tokens, > 0).
 */
export interface CacheAwareOptions extends LoadPolicyOptions, PrefixIndexOptions {
  balanceAbsThreshold?: number;
  balanceRelThreshold?: number;
  tokensPerLoadUnit?: number;
}

/**
 * The balance bound: whether a rank with `load` may still use its prefix affinity when the least loaded rank has
 * `minLoad` (loads in the load policy's units, requests). False only when the rank is past **both** bounds:
 * `load − minLoad > absThreshold` and `load > relThreshold × minLoad` (SGLang's two conditions, applied per rank).
 * Pure.
 */
export function withinBalanceBound(load: number, minLoad: number, absThreshold: number, relThreshold: number): boolean {
  return !(load - minLoad > absThreshold && load > relThreshold * minLoad);
}

/**
 * A rank's cache-aware score, lower is better: `load − matchedTokens / tokensPerLoadUnit` while `eligible` (within
 * the balance bound), else `load` (its affinity does not count). `matchedTokens`: prompt tokens of the leading blocks
 * the index holds for the rank. Pure.
 */
export function affinityScore(load: number, matchedTokens: number, eligible: boolean, tokensPerLoadUnit: number): number {
  return eligible ? load - matchedTokens / tokensPerLoadUnit : load;
}

/**
 * The index shape for a group from its ranks' ready response (engine-wire.md 2.5): blocks of the engine's
 * `prefix_granularity` / `block_size` tokens when that is at least 16 (an engine caching at a finer grain still holds
 * every 16-token block the index names; hashing every token would cost a Map entry per token), else 16; capacity =
 * the rank's KV cache in those blocks (`num_gpu_blocks × granularity / blockTokens`: the engine cannot cache more),
 * between 1 and `DEFAULT_INDEX_CAPACITY_BLOCKS`. A field the ready response left out (null: vLLM's short form,
 * issue #14) counts as unknown: 16-token blocks, the default capacity. Pure.
 */
export function indexShapeFor(ready: { prefixGranularity: number | null; numGpuBlocks: number | null }): Required<PrefixIndexOptions> {
  const pg = ready.prefixGranularity;
  const g = pg !== null && Number.isSafeInteger(pg) && pg > 0 ? pg : 16;
  const blockTokens = Math.max(16, g);
  const blocks = ready.numGpuBlocks;
  const fit = blocks !== null && Number.isFinite(blocks) ? Math.floor((blocks * g) / blockTokens) : DEFAULT_INDEX_CAPACITY_BLOCKS;
  return { blockTokens, capacityBlocks: Math.min(DEFAULT_INDEX_CAPACITY_BLOCKS, Math.max(1, fit)) };
}

function checked(name: string, v: number, ok: (v: number) => boolean, what: string): number {
  if (!Number.isFinite(v) || !ok(v)) throw new RangeError(`${name} must be ${what}, got ${v}`);
  return v;
}

/** A cache-aware policy with its own index and scan start. Throws RangeError on a bad option. */
export function createCacheAwarePolicy(opts: CacheAwareOptions = {}): DpPolicy & { readonly index: PrefixIndex } {
  const horizonMs = loadHorizonOf(opts);
  const abs = checked('balanceAbsThreshold', opts.balanceAbsThreshold ?? DEFAULT_BALANCE_ABS_THRESHOLD, (v) => v >= 0, 'a number ≥ 0');
  const rel = checked('balanceRelThreshold', opts.balanceRelThreshold ?? DEFAULT_BALANCE_REL_THRESHOLD, (v) => v >= 1, 'a number ≥ 1');
  const perUnit = checked('tokensPerLoadUnit', opts.tokensPerLoadUnit ?? DEFAULT_TOKENS_PER_LOAD_UNIT, (v) => v > 0, 'a number > 0');
  const index = new PrefixIndex(opts);
  let scanStart = 0;
  // The hashes `select` computed, for the `onDispatch` of the same request that follows in the same step.
  let last: { request: GenerateRequest; hashes: number[] } | null = null;
  const hashesOf = (request: GenerateRequest): number[] => {
    if (last !== null && last.request === request) return last.hashes;
    const hashes = index.hashes(request.promptTokenIds);
    last = { request, hashes };
    return hashes;
  };

  return {
    name: 'cache_aware',
    releaseClamp: true,
    index,
    select(ranks: readonly RankView[], request: GenerateRequest): number {
      if (ranks.length === 0) throw new RangeError('cannot select a DP rank: no engines connected');
      const start = scanStart % ranks.length;
      scanStart = scanStart >= Number.MAX_SAFE_INTEGER ? 0 : scanStart + 1;
      const hashes = hashesOf(request);
      const loadOf = fleetScorer(ranks, horizonMs);
      const loads = ranks.map(loadOf);
      const minLoad = Math.min(...loads);
      const scores = ranks.map((v, i) => {
        const matched = v.engineIndex === null ? 0 : index.match(v.engineIndex, hashes) * index.blockTokens;
        return affinityScore(loads[i], matched, withinBalanceBound(loads[i], minLoad, abs, rel), perUnit);
      });
      return lowestPosition(scores, start);
    },
    onDispatch(engineIndex: number, request: GenerateRequest): void {
      index.record(engineIndex, hashesOf(request));
      last = null;
    },
    forgetRank(engineIndex: number): void {
      index.forget(engineIndex);
    },
  };
}
