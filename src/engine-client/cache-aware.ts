/**
 * The `cache_aware` DP policy (issue 12 part 2; dp-routing.md 14.11): prefix-cache affinity traded against load
 * and rank speed, with SGLang's balance rule.
 *
 * SGLang's router (sgl-router / sgl-model-gateway `policies/cache_aware.rs`) keeps an approximate radix tree per
 * worker from the requests it sent. The system is **imbalanced** when `max − min > balance_abs_threshold` **and**
 * `max > balance_rel_threshold × min` over the workers' loads (defaults 64 and 1.5); then the request goes to the
 * least loaded worker. Otherwise it goes to the worker with the longest prefix match when the match covers more than
 * `cache_threshold` of the prompt (default 0.3), else to the worker with the smallest tree.
 *
 * This policy keeps SGLang's two thresholds, applies them per rank (`hotRanks`), and replaces the match-ratio
 * threshold by a cost comparison in ms, from what this client measures (service-rates.ts):
 * 1. `load`'s choice first: the rank the `load` policy would pick (`fleetScorer`: aged reports, TokenSpeed's running
 *    count, dark-fleet fallback; the same rotating scan). When no rank holds more of the prompt than that one, that
 *    is the answer (unless it has no KV space for the request, step 2), so on prompts that share nothing this policy
 *    chooses what `load` chooses while KV space lasts.
 * 2. Otherwise every rank that holds more of the prompt and is not **hot** competes with `load`'s choice on
 *    `expectedCostMs`: the delay this request adds on that rank, its own and the other requests' there. The prefill
 *    of its uncached tokens stalls every request in the rank's batch (its own first token included); its own decode
 *    takes `outputTokens` steps at the rank's measured ITL; past the rank's batch size (`max_num_seqs`) it first waits
 *    for slots; past the rank's free KV space it waits for pages (`kvWaitMs`, the KV-pressure term). The cheapest
 *    wins; a tie stays with `load`'s choice. When `load`'s choice has no KV space for the request, every rank
 *    competes this way, holder or not, so a long uncached prompt goes where it fits instead of preempting there.
 * 3. A rank is hot when its load exceeds the idlest rank's by more than `balance_abs_threshold` and is more than
 *    `balance_rel_threshold` times it: SGLang's imbalance test, per rank. A hot rank never wins by affinity, so
 *    affinity never adds to a hotspot; but a hotspot elsewhere does not turn affinity off for the ranks within the
 *    bound (SGLang's global rule did: every request then went to the idlest rank, and on long shared prompts each
 *    such request re-prefilled its whole prompt there: 8-10 % of the prompt tokens of `shared_prompt` on two of
 *    three seeds, bench:routing:diagnose).
 * So a conversation moves off a rank that is clearly slower or busier exactly when re-prefilling its history
 * elsewhere costs less than the extra time it would spend there. Without measurements yet (a fresh group), every
 * rank counts as equally fast and the prefill cost defaults to `DEFAULT_PREFILL_ITL_PER_TOKEN`, so a match wins
 * while the loads are balanced, as in SGLang.
 *
 * With KV-cache events (issue 29; `CacheAwareOptions.kvCache`, kv-cache-view.ts), a rank whose event stream is live is
 * scored by what it announced it holds, plus the prompts routed there within the prediction TTL; the other ranks by
 * the approximate index below. `predictedCachedTokens` gives the chosen rank's claim (announced blocks only) for the
 * routing precision.
 *
 * The index (`PrefixIndex`) holds the chained hashes of the prompts sent to each rank, recorded in `onDispatch`
 * (pinned requests too) and dropped in `forgetRank`. `select` and `onDispatch` run in the client's synchronous
 * select + reserve step (dp-routing.md 12.3); the prompt is hashed once per request (`select` keeps the hashes for the
 * `onDispatch` that follows). The decision itself is the pure function `cacheAwareChoice`. Cost: one hash per 16
 * prompt tokens plus one Map lookup per matched block per rank.
 */
import type { EngineLoad, GenerateRequest } from '../protocols/types.js';
import {
  fleetScorer,
  loadHorizonOf,
  loadWeight,
  lowestPosition,
  queuedRequests,
  type DpPolicy,
  type LoadPolicyOptions,
  type RankView,
} from './policy.js';
import { DEFAULT_INDEX_CAPACITY_BLOCKS, PrefixIndex, type PrefixIndexOptions } from './prefix-index.js';
import type { RankService } from './service-rates.js';
import type { KvCacheView } from './kv-cache-view.js';
import type { PromptKey } from './kv-block-index.js';

/** SGLang's `balance_rel_threshold` default: affinity yields to load when the busiest rank is past 1.5× the idlest. */
export const DEFAULT_BALANCE_REL_THRESHOLD = 1.5;
/** SGLang's `balance_abs_threshold` default (requests), which this policy uses for a batch of 256 sequences. */
export const SGLANG_BALANCE_ABS_THRESHOLD = 64;
/** The batch size at which SGLang's absolute bound applies unscaled: vLLM's default `max_num_seqs`. */
export const REFERENCE_MAX_NUM_SEQS = 256;
/**
 * Prefill time per uncached prompt token, in units of the rank's ITL, until the client has measured it: 256 prompt
 * tokens cost about one decode step (the sim's step model gives about 1/440, an 8B model on one GPU about 1/150).
 */
export const DEFAULT_PREFILL_ITL_PER_TOKEN = 1 / 256;
/** Output tokens a request is expected to produce until the client has seen requests finish. */
export const DEFAULT_OUTPUT_TOKENS = 128;

/**
 * The absolute balance bound (requests) for ranks of `maxNumSeqs` (the ready response's `max_num_seqs`): SGLang's 64
 * scaled to the batch size, i.e. a quarter of the batch (64 at vLLM's default 256, 8 at 32); at least 1. Unknown
 * (null, 0, not finite): SGLang's 64. Pure.
 */
export function balanceAbsFor(maxNumSeqs: number | null | undefined): number {
  if (maxNumSeqs === null || maxNumSeqs === undefined || !Number.isFinite(maxNumSeqs) || maxNumSeqs <= 0) {
    return SGLANG_BALANCE_ABS_THRESHOLD;
  }
  return Math.max(1, (maxNumSeqs * SGLANG_BALANCE_ABS_THRESHOLD) / REFERENCE_MAX_NUM_SEQS);
}

/**
 * SGLang's balance rule over the ranks' load scores (requests): imbalanced when `max − min > absThreshold` **and**
 * `max > relThreshold × min`. False for fewer than two ranks. Pure.
 */
export function isImbalanced(loads: readonly number[], absThreshold: number, relThreshold: number): boolean {
  return hotRanks(loads, absThreshold, relThreshold).some((h) => h);
}

/**
 * SGLang's balance rule per rank: a rank is **hot** when its load score exceeds the idlest rank's by more than
 * `absThreshold` **and** is more than `relThreshold` times it. The system is imbalanced (`isImbalanced`, SGLang's
 * test over max and min) exactly when some rank is hot; the idlest rank never is. All false for fewer than two
 * ranks. Pure.
 */
export function hotRanks(loads: readonly number[], absThreshold: number, relThreshold: number): boolean[] {
  if (loads.length < 2) return loads.map(() => false);
  const min = Math.min(...loads);
  return loads.map((l) => l - min > absThreshold && l > relThreshold * min);
}

/** Inputs of `expectedCostMs`. Units: tokens, ms, requests. */
export interface CostInputs {
  /** Prompt tokens the rank would have to prefill (prompt − matched). */
  uncachedTokens: number;
  /** ms per prefilled token on the rank. */
  prefillMsPerToken: number;
  /** The rank's load score (requests it holds, as the `load` policy scores them). */
  load: number;
  /** Output tokens this request is expected to produce. */
  outputTokens: number;
  /** ms per output token on the rank. */
  itlMs: number;
  /** The rank's batch size (`max_num_seqs`); `Infinity` when unknown. */
  maxNumSeqs: number;
  /** KV tokens not in use on the rank (`kvTokensOf`); absent or `Infinity` = unknown: no KV term. */
  kvFreeTokens?: number;
  /** KV tokens in use on the rank (pinned by its running requests); absent = 0. */
  kvUsedTokens?: number;
}

const nz = (x: number | undefined): number => (x !== undefined && Number.isFinite(x) && x > 0 ? x : 0);

/**
 * The wait (ms) for KV space on a rank (the KV-pressure term of `expectedCostMs`). Over its life the request pins
 * its uncached prompt tokens and its output (`need = uncached + outputTokens`; the matched blocks are shared), and
 * the rank's batch keeps growing by the output still to come (`reserve = min(load, seqs) × outputTokens / 2`: half an
 * answer per running request). Past the free space, the engine either holds the request at admission (vLLM's V1
 * scheduler stops admitting at the first waiting request it cannot allocate, `v1/core/sched/scheduler.py`, and the
 * simulated ranks do the same, so it also holds those behind it) or admits it and preempts the newest requests once
 * decode runs out of pages, which recompute later. Either way the request waits for the rank to free
 * `shortage = need + reserve − free` tokens; the rank frees about its used tokens per request lifetime
 * (`outputTokens × itl`), so the wait is `shortage / used × outputTokens × itl`. 0 when it fits or nothing is
 * known. Pure.
 */
export function kvWaitMs(c: CostInputs): number {
  const free = c.kvFreeTokens ?? Number.POSITIVE_INFINITY;
  if (!(free < Number.POSITIVE_INFINITY)) return 0;
  const seqs = Number.isFinite(c.maxNumSeqs) && c.maxNumSeqs > 0 ? c.maxNumSeqs : Number.POSITIVE_INFINITY;
  const out = nz(c.outputTokens);
  const reserve = (Math.min(nz(c.load), seqs) * out) / 2;
  const shortage = nz(c.uncachedTokens) + out + reserve - Math.max(0, free);
  if (shortage <= 0) return 0;
  const used = Math.max(nz(c.kvUsedTokens), 16);
  return (shortage / used) * out * nz(c.itlMs);
}

/**
 * The delay (ms) a request adds on a rank, its own and other requests' (the model behind step 2 of the module
 * comment): `uncached × prefill × (1 + min(load, seqs)) + outputTokens × itl × (1 + queued / seqs) + kvWaitMs`,
 * where `queued = max(0, load + 1 − seqs)` is how far past the batch it would queue (one slot frees about every
 * `outputTokens × itl / seqs` ms) and `kvWaitMs` the wait for KV space. Non-finite or negative inputs count as 0
 * (batch size: as unknown). Pure.
 */
export function expectedCostMs(c: CostInputs): number {
  const seqs = Number.isFinite(c.maxNumSeqs) && c.maxNumSeqs > 0 ? c.maxNumSeqs : Number.POSITIVE_INFINITY;
  const load = nz(c.load);
  const batch = Math.min(load, seqs);
  const queued = Number.isFinite(seqs) ? Math.max(0, load + 1 - seqs) : 0;
  return (
    nz(c.uncachedTokens) * nz(c.prefillMsPerToken) * (1 + batch) +
    nz(c.outputTokens) * nz(c.itlMs) * (1 + queued / seqs) +
    kvWaitMs(c)
  );
}

/**
 * A rank's KV space as its stored report shows it, for `kvWaitMs` (tokens): `used = kvCacheUsage × kvTotalTokens × w`,
 * `free = kvTotalTokens − used`, where `w` is the report's ageing weight (policy.ts `loadWeight`, 0..1). Unknown size
 * (`kvTotalTokens` null), no report or a report past the horizon (w = 0): `free` is `Infinity` (no KV term).
 * A report whose queue is empty (a rank that went idle: the release clamp zeroes its counts but keeps its last KV
 * usage, dp-routing.md 10.2) counts as nothing in use: its running requests' pages are gone, and cached blocks nobody
 * uses are evictable (both engines count them as free). Non-finite usage counts as 0. Pure.
 */
export function kvTokensOf(
  load: EngineLoad | null,
  kvTotalTokens: number | null,
  weight = 1,
): { kvFreeTokens: number; kvUsedTokens: number } {
  if (kvTotalTokens === null || !(kvTotalTokens > 0) || load === null || !(weight > 0)) {
    return { kvFreeTokens: Number.POSITIVE_INFINITY, kvUsedTokens: 0 };
  }
  const usage = queuedRequests(load) > 0 ? Math.min(1, nz(load.kvCacheUsage)) * Math.min(1, weight) : 0;
  const used = usage * kvTotalTokens;
  return { kvFreeTokens: kvTotalTokens - used, kvUsedTokens: used };
}

/** Per rank: the ITL and prefill cost to score with (ms), filled in where the client has no measurement yet. */
export interface ServiceEstimate {
  itlMs: number;
  prefillMsPerToken: number;
}

const known = (x: number | null | undefined): x is number =>
  x !== null && x !== undefined && Number.isFinite(x) && x > 0;

/**
 * Fill in what is not measured yet (pure): a rank without an ITL gets the mean of the measured ones (1 when none is:
 * costs are then in steps of an equal rank); a rank without a prefill cost gets the group's prefill-per-ITL ratio
 * (taken from any rank that has one: the client pools it, service-rates.ts) times its ITL, else
 * `DEFAULT_PREFILL_ITL_PER_TOKEN` times its ITL.
 */
export function serviceEstimates(services: readonly (RankService | null | undefined)[]): ServiceEstimate[] {
  const itls = services.map((s) => s?.itlMs).filter(known);
  const meanItl = itls.length > 0 ? itls.reduce((a, b) => a + b, 0) / itls.length : 1;
  const withBoth = services.find((s) => known(s?.itlMs) && known(s?.prefillMsPerToken));
  const ratio = withBoth
    ? (withBoth.prefillMsPerToken as number) / (withBoth.itlMs as number)
    : DEFAULT_PREFILL_ITL_PER_TOKEN;
  return services.map((s) => {
    const itlMs = known(s?.itlMs) ? s.itlMs : meanItl;
    return { itlMs, prefillMsPerToken: known(s?.prefillMsPerToken) ? s.prefillMsPerToken : ratio * itlMs };
  });
}

/**
 * Output tokens to expect from a request (pure): the mean over the ranks that measured one (else
 * `DEFAULT_OUTPUT_TOKENS`), but never more than the request's own `maxNewTokens` limit when it has one.
 */
export function expectedOutputTokens(
  services: readonly (RankService | null | undefined)[],
  maxNewTokens: number | null,
): number {
  const outs = services.map((s) => s?.outputTokens).filter(known);
  const mean = outs.length > 0 ? outs.reduce((a, b) => a + b, 0) / outs.length : DEFAULT_OUTPUT_TOKENS;
  return known(maxNewTokens) ? Math.min(mean, maxNewTokens) : mean;
}

/**
 * Why `cacheAwareChoice` chose what it chose (the policy counts them: `CacheAwareStats`): `no-better-match` (no rank
 * holds more of the prompt than `load`'s pick: that pick), `imbalanced` (the cheapest rank was hot: the balance bound
 * changed the answer), `load-cheaper` (`load`'s pick costs least), `affinity` (a rank holding more costs least),
 * `kv-short` (`load`'s pick had no KV space for the request; a rank holding no more of it, with room, costs least).
 */
export type CacheAwareReason = 'no-better-match' | 'imbalanced' | 'load-cheaper' | 'affinity' | 'kv-short';

/** Inputs of `cacheAwareChoice`, one entry per rank in list order. Units: requests, tokens, ms. */
export interface ChoiceInputs {
  /** The `load` policy's score per rank. */
  loads: readonly number[];
  /** Prompt tokens of the leading blocks the index holds per rank. */
  matched: readonly number[];
  promptTokens: number;
  /** Per rank, as `serviceEstimates` filled it in. */
  estimates: readonly ServiceEstimate[];
  outputTokens: number;
  /** The rotating scan start (ties of the load score go to the earliest rank of the scan, as in `load`). */
  start: number;
  balanceAbsThreshold: number;
  balanceRelThreshold: number;
  maxNumSeqs: number;
  /** Per rank, its KV space (`kvTokensOf`); absent = unknown everywhere (no KV term). */
  kv?: readonly { kvFreeTokens: number; kvUsedTokens: number }[];
}

/**
 * The decision of the module comment, pure: `load`'s choice (lowest load, ties by the scan from `start`) unless a
 * rank holding more of the prompt has a strictly lower `expectedCostMs` and is not hot (`hotRanks`: past SGLang's
 * balance bound against the idlest rank); then the cheapest such rank (ties to the earliest in the scan). When
 * `load`'s choice has no KV space for the request (`kvWaitMs` > 0 there), every rank that is not hot competes, so
 * the request goes where it fits if that costs less. Reasons: `imbalanced` when the cheapest rank was hot (the bound
 * changed the answer), `kv-short` when the winner holds no more of the prompt than `load`'s choice (it had room).
 * Returns the position and the reason. Throws RangeError on empty or mismatched lists.
 */
export function cacheAwareChoice(c: ChoiceInputs): { position: number; reason: CacheAwareReason } {
  const n = c.loads.length;
  if (n === 0 || c.matched.length !== n || c.estimates.length !== n || (c.kv !== undefined && c.kv.length !== n)) {
    throw new RangeError('cacheAwareChoice: one entry per rank in every list');
  }
  const byLoad = lowestPosition(c.loads, c.start);
  const base = c.matched[byLoad];
  const inputs = (i: number): CostInputs => ({
    uncachedTokens: c.promptTokens - c.matched[i],
    prefillMsPerToken: c.estimates[i].prefillMsPerToken,
    load: c.loads[i],
    outputTokens: c.outputTokens,
    itlMs: c.estimates[i].itlMs,
    maxNumSeqs: c.maxNumSeqs,
    ...c.kv?.[i],
  });
  const short = c.kv !== undefined && kvWaitMs(inputs(byLoad)) > 0;
  if (!short && !c.matched.some((m) => m > base)) return { position: byLoad, reason: 'no-better-match' };
  const hot = hotRanks(c.loads, c.balanceAbsThreshold, c.balanceRelThreshold);
  const baseCost = expectedCostMs(inputs(byLoad));
  let best = byLoad;
  let bestCost = baseCost;
  let unbound = byLoad; // the cheapest with the bound ignored
  let unboundCost = baseCost;
  const first = ((Math.trunc(c.start) % n) + n) % n;
  for (let k = 0; k < n; k++) {
    const i = (first + k) % n;
    if (i === byLoad || (!short && c.matched[i] <= base)) continue;
    const ci = expectedCostMs(inputs(i));
    if (ci < unboundCost) {
      unbound = i;
      unboundCost = ci;
    }
    if (!hot[i] && ci < bestCost) {
      best = i;
      bestCost = ci;
    }
  }
  if (unbound !== best) return { position: best, reason: 'imbalanced' };
  if (best === byLoad) return { position: best, reason: 'load-cheaper' };
  return { position: best, reason: c.matched[best] > base ? 'affinity' : 'kv-short' };
}

/**
 * The shape of a group's ranks for this policy, from a rank's ready response (engine-wire.md 2.5): index blocks of
 * the engine's `prefix_granularity` / `block_size` tokens when that is at least 16 (an engine caching at a finer
 * grain still holds every 16-token block the index names; hashing every token would cost a Map entry per token),
 * else 16; index capacity = the rank's KV cache in those blocks (`num_gpu_blocks × granularity / blockTokens`: the
 * engine cannot cache more), between 1 and `DEFAULT_INDEX_CAPACITY_BLOCKS`; `maxNumSeqs` = its `max_num_seqs`
 * (null when 0 or absent); `kvTotalTokens` = its KV cache in tokens (`num_gpu_blocks × granularity`; null when
 * unknown or 0: no KV term). A field the ready response left out (null: vLLM's short form, issue #14) counts as
 * unknown: 16-token blocks, the default capacity. Pure.
 */
export function indexShapeFor(ready: {
  prefixGranularity: number | null;
  numGpuBlocks: number | null;
  maxNumSeqs?: number | null;
}): Required<PrefixIndexOptions> & { maxNumSeqs: number | null; kvTotalTokens: number | null } {
  const pg = ready.prefixGranularity;
  const g = pg !== null && Number.isSafeInteger(pg) && pg > 0 ? pg : 16;
  const blockTokens = Math.max(16, g);
  const blocks = ready.numGpuBlocks;
  const fit =
    blocks !== null && Number.isFinite(blocks) ? Math.floor((blocks * g) / blockTokens) : DEFAULT_INDEX_CAPACITY_BLOCKS;
  const seqs = ready.maxNumSeqs;
  return {
    blockTokens,
    capacityBlocks: Math.min(DEFAULT_INDEX_CAPACITY_BLOCKS, Math.max(1, fit)),
    maxNumSeqs: seqs !== null && seqs !== undefined && Number.isSafeInteger(seqs) && seqs > 0 ? seqs : null,
    kvTotalTokens: blocks !== null && Number.isFinite(blocks) && blocks > 0 ? blocks * g : null,
  };
}

/**
 * Options of `createCacheAwarePolicy` (besides `loadHorizonMs` and the index's `blockTokens` / `capacityBlocks`):
 * `maxNumSeqs` (the ranks' batch size, from `indexShapeFor`; null = unknown), `kvTotalTokens` (one rank's KV cache in
 * tokens, from `indexShapeFor`; null = unknown: no KV term), `balanceAbsThreshold` (requests ≥ 0;
 * default `balanceAbsFor(maxNumSeqs)`), `balanceRelThreshold` (ratio ≥ 1; default 1.5).
 */
export interface CacheAwareOptions extends LoadPolicyOptions, PrefixIndexOptions {
  /**
   * The group's exact index from the ranks' KV-cache events (kv-cache-view.ts), or absent: a rank whose stream is live
   * is scored by what it announced (and what was just routed there), the others by the approximate index.
   */
  kvCache?: KvCacheView | null;
  /** The policy's clock in ms (default `performance.now`): the time of routes and of the prediction TTL. */
  now?: () => number;
  maxNumSeqs?: number | null;
  kvTotalTokens?: number | null;
  balanceAbsThreshold?: number;
  balanceRelThreshold?: number;
}

/** How often each `CacheAwareReason` decided an unpinned request (a live object: read it, never write it). */
export type CacheAwareStats = Record<CacheAwareReason, number>;

function checked(name: string, v: number, ok: (v: number) => boolean, what: string): number {
  if (!Number.isFinite(v) || !ok(v)) throw new RangeError(`${name} must be ${what}, got ${v}`);
  return v;
}

/**
 * The prompt tokens a rank can serve from its cache: `matched`, but at most the whole blocks of the prompt's first
 * `promptTokens − 1` tokens (both engines compute at least the last prompt token: vLLM caps a hit at
 * `num_tokens − 1`, and so does the simulated rank), in `blockTokens`-token blocks. Pure.
 */
export function servableCachedTokens(matched: number, promptTokens: number, blockTokens: number): number {
  const cap = Math.floor(Math.max(0, promptTokens - 1) / blockTokens) * blockTokens;
  return Math.max(0, Math.min(matched, cap));
}

/** A cache-aware policy with its own index, scan start and decision counts. Throws RangeError on a bad option. */
export function createCacheAwarePolicy(
  opts: CacheAwareOptions = {},
): DpPolicy & { readonly index: PrefixIndex; readonly stats: CacheAwareStats } {
  const horizonMs = loadHorizonOf(opts);
  const seqs = opts.maxNumSeqs ?? null;
  const abs = checked(
    'balanceAbsThreshold',
    opts.balanceAbsThreshold ?? balanceAbsFor(seqs),
    (v) => v >= 0,
    'a number ≥ 0',
  );
  const rel = checked(
    'balanceRelThreshold',
    opts.balanceRelThreshold ?? DEFAULT_BALANCE_REL_THRESHOLD,
    (v) => v >= 1,
    'a number ≥ 1',
  );
  const maxNumSeqs = seqs !== null && Number.isFinite(seqs) && seqs > 0 ? seqs : Number.POSITIVE_INFINITY;
  const kvTotal = opts.kvTotalTokens ?? null;
  if (kvTotal !== null) checked('kvTotalTokens', kvTotal, (v) => v > 0, 'a number > 0');
  const index = new PrefixIndex(opts);
  const exact = opts.kvCache ?? null;
  const now = opts.now ?? (() => performance.now());
  const stats: CacheAwareStats = { 'no-better-match': 0, imbalanced: 0, 'load-cheaper': 0, affinity: 0, 'kv-short': 0 };
  let scanStart = 0;
  // What `select` computed for a request, for the `onDispatch` and `predictedCachedTokens` that follow in the same
  // step: its approximate-index hashes, its exact-index keys and the cached tokens predicted on the chosen rank.
  let last: { request: GenerateRequest; hashes: number[]; keys: PromptKey[] | null; predicted: number | null } | null =
    null;
  const keysOf = (request: GenerateRequest): NonNullable<typeof last> => {
    if (last !== null && last.request === request) return last;
    last = {
      request,
      hashes: index.hashes(request.promptTokenIds),
      keys: exact !== null && exact.enabled ? exact.promptKeys(request.promptTokenIds) : null,
      predicted: null,
    };
    return last;
  };
  /**
   * Tokens of the prompt rank `engineIndex` holds: the exact index when its stream is live (with the blocks routed
   * there within the prediction TTL: `nowMs`; without it, the announced blocks alone), else the approximate index.
   */
  const matchedOn = (engineIndex: number, k: NonNullable<typeof last>, nowMs?: number): number => {
    const prompt = k.request.promptTokenIds.length;
    if (exact !== null && k.keys !== null && exact.isLive(engineIndex, nowMs ?? now())) {
      return servableCachedTokens(exact.cachedPrefixTokens(engineIndex, k.keys, nowMs), prompt, exact.blockSize);
    }
    return servableCachedTokens(index.match(engineIndex, k.hashes) * index.blockTokens, prompt, index.blockTokens);
  };

  return {
    name: 'cache_aware',
    releaseClamp: true,
    index,
    stats,
    select(ranks: readonly RankView[], request: GenerateRequest): number {
      if (ranks.length === 0) throw new RangeError('cannot select a DP rank: no engines connected');
      const start = scanStart % ranks.length;
      scanStart = scanStart >= Number.MAX_SAFE_INTEGER ? 0 : scanStart + 1;
      const k = keysOf(request);
      const nowMs = now();
      const services = ranks.map((v) => v.service);
      const matched = ranks.map((v) => (v.engineIndex === null ? 0 : matchedOn(v.engineIndex, k, nowMs)));
      const { position, reason } = cacheAwareChoice({
        loads: ranks.map(fleetScorer(ranks, horizonMs)),
        matched,
        promptTokens: request.promptTokenIds.length,
        estimates: serviceEstimates(services),
        outputTokens: expectedOutputTokens(services, request.sampling.maxNewTokens),
        start,
        balanceAbsThreshold: abs,
        balanceRelThreshold: rel,
        maxNumSeqs,
        kv:
          kvTotal === null
            ? undefined
            : ranks.map((v) =>
                kvTokensOf(v.engineIndex === null ? null : v.load, kvTotal, loadWeight(v.loadAgeMs, horizonMs)),
              ),
      });
      // The claim checked against the engine's `cached_tokens` (routing precision): what the chosen rank's index
      // says it holds. Blocks routed there and not announced yet steer the choice (predict-on-route) but are a
      // forecast, not a claim: a request queued beside the one computing them finds them only if it is admitted after.
      const chosen = ranks[position]!.engineIndex;
      k.predicted = chosen === null ? 0 : matchedOn(chosen, k);
      stats[reason] += 1;
      return position;
    },
    onDispatch(engineIndex: number, request: GenerateRequest): void {
      const k = keysOf(request);
      index.record(engineIndex, k.hashes);
      if (exact !== null && k.keys !== null) exact.noteRouted(engineIndex, k.keys, now());
    },
    predictedCachedTokens(request: GenerateRequest): number | null {
      const k = last !== null && last.request === request ? last : null;
      last = null;
      return k?.predicted ?? null;
    },
    forgetRank(engineIndex: number): void {
      index.forget(engineIndex);
      exact?.forgetRank(engineIndex);
    },
  };
}
