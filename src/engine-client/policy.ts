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
 * pure function `lowestScorePosition`, so further policies (issue #5: round_robin, inflight, load_no_clamp, oracle)
 * can reuse them with their own counters.
 */
import type { EngineLoad, GenerateRequest } from '../protocols/types.js';

/**
 * What a policy may know about one rank.
 * - `engineIndex`: the DP rank decoded from the 2-byte identity, or null for an identity of another length.
 * - `inFlight`: the size of the client's in-flight set for the rank (requests routed there and not yet retired).
 * - `load`: the stored load (last report, possibly clamped; section 11), or null when the rank never reported.
 *   A copy: a policy cannot modify the stored load (section 9.2 "The stored load is never modified by selection").
 */
export interface RankView {
  readonly engineIndex: number | null;
  readonly inFlight: number;
  readonly load: EngineLoad | null;
}

/**
 * A rank-selection policy (architecture.md "The seams": `DpPolicy`).
 * - `name`: a short stable label for logs and metrics (e.g. `load`).
 * - `releaseClamp`: whether the client applies the zero-on-empty release clamp (dp-routing.md section 10.2 step 4)
 *   while this policy is active. Absent = true. `false` exists for the `load_no_clamp` ablation.
 * - `select(ranks, request)`: returns the position in `ranks` of the chosen rank, an integer in
 *   `0 .. ranks.length - 1`. Called only with `ranks.length >= 1`. Throws RangeError on an empty list.
 */
export interface DpPolicy {
  readonly name: string;
  readonly releaseClamp?: boolean;
  select(ranks: readonly RankView[], request: GenerateRequest): number;
}

/** Weight of the KV-pressure penalty per waiting request (dp-routing.md section 9.2 step 4; vLLM `core_client.py`). */
export const KV_PENALTY_WEIGHT = 6;
/** KV cache usage (ratio 0..1) above which queued work is penalized (section 9.2 step 4). */
export const KV_PENALTY_THRESHOLD = 0.5;

function finiteOrZero(x: number): number {
  return Number.isFinite(x) ? x : 0;
}

/**
 * The load score of one rank, lower is better (dp-routing.md section 9.2 step 4; worked examples in 9.4):
 * `max(own, waiting + running) + (waiting > 0 ? waiting × 6 × max(0, kv − 0.5) : 0)`, where `own` is the in-flight
 * count and (running, waiting, kv) the stored report, or all zeros without a report or without an engine index.
 * Units: requests (plus a dimensionless KV penalty). Non-finite report fields count as 0. Pure; never throws.
 */
export function loadScore(view: RankView): number {
  const own = view.engineIndex === null ? 0 : view.inFlight;
  const reported = view.engineIndex === null ? null : view.load;
  const running = reported ? finiteOrZero(reported.numRunning) : 0;
  const waiting = reported ? finiteOrZero(reported.numWaiting) : 0;
  const kv = reported ? finiteOrZero(reported.kvCacheUsage) : 0;
  let score = Math.max(own, waiting + running);
  if (waiting > 0) score += waiting * KV_PENALTY_WEIGHT * Math.max(0, kv - KV_PENALTY_THRESHOLD);
  return score;
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
  const count = ranks.length;
  if (count === 0) throw new RangeError('cannot select a DP rank: no engines connected');
  const first = ((Math.trunc(start) % count) + count) % count;
  let best = first;
  let bestScore = score(ranks[first]);
  for (let offset = 1; offset < count; offset++) {
    const pos = (first + offset) % count;
    const s = score(ranks[pos]);
    if (s < bestScore) {
      best = pos;
      bestScore = s;
    }
  }
  return best;
}

/**
 * The default policy (`name: 'load'`): SMG's DP scorer with the full score (`loadScore`), a rotating scan start
 * (`start = scanStart mod count`, then `scanStart += 1` on every call; dp-routing.md section 9.2 step 3) and the
 * release clamp on. Each call of `createLoadPolicy` returns an independent policy with its scan start at 0.
 */
export function createLoadPolicy(): DpPolicy {
  let scanStart = 0;
  return {
    name: 'load',
    releaseClamp: true,
    select(ranks: readonly RankView[]): number {
      if (ranks.length === 0) throw new RangeError('cannot select a DP rank: no engines connected');
      const start = scanStart % ranks.length;
      // 2^53 selections are out of reach; the reset only keeps the counter an exact integer forever.
      scanStart = scanStart >= Number.MAX_SAFE_INTEGER ? 0 : scanStart + 1;
      return lowestScorePosition(ranks, start, loadScore);
    },
  };
}
