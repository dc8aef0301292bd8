/**
 * DP rank selection policies for unpinned requests (dp-routing.md section 9.2; SMG `connector.rs`, "the DP scorer").
 *
 * A policy sees one `RankView` per connected engine, in the identity-sorted engine order (engine-wire.md 1.5), and
 * returns the chosen **position** in that list. Policies are synchronous and never touch client state: the client
 * builds the views, calls `select` and reserves the in-flight slot in the same synchronous block
 * (dp-routing.md section 12.3 rule 1). Pinned requests (section 9.1) never reach a policy.
 *
 * Scan-start ownership: the rotating scan start (section 9.2 step 3) is the policy's own state. `createLoadPolicy`
 * keeps the counter in its closure and advances it on every `select` call; since the client calls `select` exactly
 * once per unpinned selection and never for a pinned one, the counter advances exactly as section 9.2 requires and is
 * not advanced by pins (section 9.1 step 3). The scoring itself is the pure function `loadScore` and the scan is the
 * pure function `lowestScorePosition`, so further policies (issue #5: round_robin, inflight, load_no_clamp, oracle;
 * issue 12: cache_aware) can reuse them with their own counters.
 *
 * Load-signal guards of issue 12, all in the pure scorer (dp-routing.md 14):
 * - **TokenSpeed's running count** (14.2): its `num_running` already counts the waiting requests (engine-wire.md 4.9),
 *   so the queue term is `max(running, waiting)` for it and `running + waiting` for vLLM (`queuedRequests`).
 * - **Snapshot ageing** (14.1): a stored report counts for less as it ages, linearly from full weight when fresh to
 *   nothing at the horizon (`loadWeight`; default `DEFAULT_LOAD_HORIZON_MS`), where it counts as absent and the rank
 *   is scored by its own in-flight count. Never as "saturated".
 * - **Dark-fleet fallback** (14.5): when no rank has a fresh report, selection is join-shortest-queue on the client's
 *   own in-flight counts with the rotating scan (`fleetScorer`). Staleness never excludes a rank and never rejects a
 *   request: every rank keeps a finite score.
 */
import { positiveMs } from '../option-checks.js';
import type { EngineLoad, GenerateRequest, LoraAdapterCounts } from '../protocols/types.js';
import type { RankService } from './service-rates.js';

/**
 * What a policy may know about one rank.
 * - `engineIndex`: the DP rank decoded from the 2-byte identity, or null for an identity of another length.
 * - `inFlight`: the size of the client's in-flight set for the rank (requests routed there and not yet retired).
 * - `load`: the stored load (last report, possibly clamped; section 11), or null when the rank never reported.
 *   A copy: a policy cannot modify the stored load (section 9.2 "The stored load is never modified by selection").
 * - `loadAgeMs`: how long ago `load` was stored, in ms (section 14.1); absent or null = unknown, scored as fresh.
 * - `service`: what the client measured of the rank's speed from its own streams (service-rates.ts: ITL, prefill
 *   cost, output length); absent or null fields = unknown. Only `cache_aware` reads it.
 */
export interface RankView {
  readonly engineIndex: number | null;
  readonly inFlight: number;
  readonly load: EngineLoad | null;
  readonly loadAgeMs?: number | null;
  readonly service?: RankService | null;
  /**
   * The LoRA adapters the rank's last report counted requests for, by name (vLLM scheduler stats); absent or null =
   * none reported. Only `lora_aware` reads it.
   */
  readonly adapters?: LoraAdapterCounts | null;
}

/**
 * A rank-selection policy (architecture.md "The seams": `DpPolicy`).
 * - `name`: a short stable label for logs and metrics (e.g. `load`).
 * - `releaseClamp`: whether the client applies the zero-on-empty release clamp (dp-routing.md section 10.2 step 4)
 *   while this policy is active. Absent = true. `false` exists for the `load_no_clamp` ablation.
 * - `select(ranks, request)`: returns the position in `ranks` of the chosen rank, an integer in
 *   `0 .. ranks.length - 1`. Called only with `ranks.length >= 1`, and only with ranks in state `ready` (issue #8;
 *   a joining, stalled or dead rank is never offered). Throws RangeError on an empty list.
 * - `onDispatch` / `forgetRank`: optional hooks (agreed interface A between issues 8 and 12).
 */
export interface DpPolicy {
  readonly name: string;
  readonly releaseClamp?: boolean;
  select(ranks: readonly RankView[], request: GenerateRequest): number;
  /** Called inside the synchronous select+reserve step for every request sent to a rank, pinned or not. */
  onDispatch?(engineIndex: number, request: GenerateRequest): void;
  /**
   * The prompt tokens the policy expects the chosen rank to serve from its prefix cache, asked once right after
   * `onDispatch` of an unpinned request (null: no prediction). Compared with the engine's `cached_tokens` (routing
   * precision, service-rates.ts).
   */
  predictedCachedTokens?(request: GenerateRequest): number | null;
  /** The rank's engine state is gone (it died, or rejoined as a fresh process): drop what is known about it. */
  forgetRank?(engineIndex: number): void;
}

/** Weight of the KV-pressure penalty per waiting request (dp-routing.md section 9.2 step 4; vLLM `core_client.py`). */
export const KV_PENALTY_WEIGHT = 6;
/** KV cache usage (ratio 0..1) above which queued work is penalized (section 9.2 step 4). */
export const KV_PENALTY_THRESHOLD = 0.5;
/**
 * Default age (ms) at which a stored report stops counting (section 14.1). Engines report on every step while
 * tokens flow (every few to tens of ms), so a report this old comes from a rank that sent nothing for seconds:
 * vLLM's DP coordinator re-publishes idle stats every 4 s, SGLang's load publisher about once a second (14.4).
 */
export const DEFAULT_LOAD_HORIZON_MS = 5000;

function finiteOrZero(x: number): number {
  return Number.isFinite(x) ? x : 0;
}

/**
 * The requests a report says the rank holds, queued or running (section 14.2; engine-wire.md 4.9, 5.10): with
 * `runningIncludesWaiting` (TokenSpeed: `num_running` counts the waiting requests too) `max(running, waiting)`, so
 * no queued request counts twice; otherwise (vLLM: disjoint counts) `running + waiting`. Non-finite fields count as
 * 0. Pure; never throws.
 */
export function queuedRequests(load: EngineLoad): number {
  const running = finiteOrZero(load.numRunning);
  const waiting = finiteOrZero(load.numWaiting);
  return load.runningIncludesWaiting === true ? Math.max(running, waiting) : running + waiting;
}

/**
 * How much a stored report counts (section 14.1): 1 when fresh (age 0, or an unknown age: absent, null, negative or
 * non-finite), falling linearly to 0 at `horizonMs`, 0 beyond it. `horizonMs` ≤ 0 or non-finite: reports never age
 * (weight 1). Ratio 0..1. Pure.
 */
export function loadWeight(ageMs: number | null | undefined, horizonMs: number): number {
  if (ageMs === null || ageMs === undefined || !Number.isFinite(ageMs) || ageMs <= 0) return 1;
  if (!Number.isFinite(horizonMs) || horizonMs <= 0) return 1;
  return ageMs >= horizonMs ? 0 : 1 - ageMs / horizonMs;
}

/** Whether `view` has a report that still counts at `horizonMs` (weight > 0). Pure. */
export function hasFreshLoad(view: RankView, horizonMs: number): boolean {
  return view.engineIndex !== null && view.load !== null && loadWeight(view.loadAgeMs, horizonMs) > 0;
}

/** The dark-fleet condition of section 14.5: no rank has a fresh report (also true for an empty list). Pure. */
export function isDarkFleet(ranks: readonly RankView[], horizonMs: number): boolean {
  return !ranks.some((v) => hasFreshLoad(v, horizonMs));
}

/**
 * The load scorer for reports that age out at `horizonMs` (section 14.1): a rank scores, lower is better
 * (dp-routing.md section 9.2 step 4; worked examples in 9.4),
 * `max(own, w × queued) + (waiting > 0 ? w × waiting × 6 × max(0, kv − 0.5) : 0)`, where `own` is the in-flight
 * count, (queued, waiting, kv) come from the stored report (`queued` = `queuedRequests`, section 14.2; all zeros
 * without a report or without an engine index) and `w` = `loadWeight(loadAgeMs, horizonMs)`. Units: requests (plus a
 * dimensionless KV penalty). Pure; the scorer never throws.
 */
export function loadScorer(horizonMs: number = DEFAULT_LOAD_HORIZON_MS): (view: RankView) => number {
  return (view: RankView): number => {
    const own = view.engineIndex === null ? 0 : view.inFlight;
    const reported = view.engineIndex === null ? null : view.load;
    if (reported === null) return own;
    const w = loadWeight(view.loadAgeMs, horizonMs);
    const waiting = finiteOrZero(reported.numWaiting);
    const kv = finiteOrZero(reported.kvCacheUsage);
    let score = Math.max(own, w * queuedRequests(reported));
    if (waiting > 0) score += w * waiting * KV_PENALTY_WEIGHT * Math.max(0, kv - KV_PENALTY_THRESHOLD);
    return score;
  };
}

/** `loadScorer(DEFAULT_LOAD_HORIZON_MS)`: the score of section 9.2 step 4 with the guards of section 14. */
export const loadScore: (view: RankView) => number = loadScorer();

/**
 * The scorer a load-based selection uses over `ranks` (sections 9.2, 14.5): the aged `loadScorer(horizonMs)`, or,
 * in a dark fleet (`isDarkFleet`), join-shortest-queue on the own in-flight count (0 for an engine without an
 * index). Pure.
 */
export function fleetScorer(ranks: readonly RankView[], horizonMs: number): (view: RankView) => number {
  if (isDarkFleet(ranks, horizonMs)) return (view) => (view.engineIndex === null ? 0 : view.inFlight);
  return loadScorer(horizonMs);
}

/**
 * Scan `ranks` from position `start` (wrapping) and return the position with the lowest `score`; a rank replaces
 * the best candidate only when its score is **strictly** lower, so ties go to the earliest rank in this scan
 * (dp-routing.md section 9.2 step 4). `start` is taken modulo `ranks.length` (negative values are normalized).
 * Pure. Throws RangeError when `ranks` is empty.
 */
export function lowestScorePosition(
  ranks: readonly RankView[],
  start: number,
  score: (view: RankView) => number = loadScore,
): number {
  if (ranks.length === 0) throw new RangeError('cannot select a DP rank: no engines connected');
  return lowestPosition(ranks.map(score), start);
}

/**
 * `lowestScorePosition` over precomputed scores (one per candidate, in list order: DP ranks here, engine groups in
 * server/groups.ts): the position of the lowest score in a wrapping scan from `start` (taken modulo the length),
 * replacing the candidate only on a strictly lower score, so ties go to the earliest in the scan. Pure.
 * @throws RangeError with `emptyMessage` when `scores` is empty.
 */
export function lowestPosition(
  scores: readonly number[],
  start: number,
  emptyMessage = 'cannot select a DP rank: no engines connected',
): number {
  const count = scores.length;
  if (count === 0) throw new RangeError(emptyMessage);
  const first = ((Math.trunc(start) % count) + count) % count;
  let best = first;
  for (let offset = 1; offset < count; offset++) {
    const pos = (first + offset) % count;
    if (scores[pos] < scores[best]) best = pos;
  }
  return best;
}

/** Options of the load-based policies. `loadHorizonMs`: report ageing horizon (default `DEFAULT_LOAD_HORIZON_MS`). */
export interface LoadPolicyOptions {
  loadHorizonMs?: number;
}

/** The horizon of `opts`, validated. Throws RangeError unless it is a finite number > 0. */
export function loadHorizonOf(opts: LoadPolicyOptions = {}): number {
  return positiveMs('loadHorizonMs', opts.loadHorizonMs ?? DEFAULT_LOAD_HORIZON_MS);
}

/**
 * The default policy (`name: 'load'`): SMG's DP scorer (`fleetScorer`: the aged score, or join-shortest-queue in a
 * dark fleet), a rotating scan start (`start = scanStart mod count`, then `scanStart += 1` on every call;
 * dp-routing.md section 9.2 step 3) and the release clamp on. Each call of `createLoadPolicy` returns an independent
 * policy with its scan start at 0. Throws RangeError on a bad `loadHorizonMs`.
 */
export function createLoadPolicy(opts: LoadPolicyOptions = {}): DpPolicy {
  const horizonMs = loadHorizonOf(opts);
  let scanStart = 0;
  return {
    name: 'load',
    releaseClamp: true,
    select(ranks: readonly RankView[]): number {
      if (ranks.length === 0) throw new RangeError('cannot select a DP rank: no engines connected');
      const start = scanStart % ranks.length;
      // 2^53 selections are out of reach; the reset only keeps the counter an exact integer forever.
      scanStart = scanStart >= Number.MAX_SAFE_INTEGER ? 0 : scanStart + 1;
      return lowestScorePosition(ranks, start, fleetScorer(ranks, horizonMs));
    },
  };
}
