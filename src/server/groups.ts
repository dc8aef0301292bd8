/**
 * Worker-level routing: which engine group (worker) serves a request (gateway.md section 16: a worker-level policy
 * picks the worker, then the worker's engine client picks the DP rank; issue #3 part 5).
 *
 * Policy (this gateway's, inferred from gateway.md 16 and dp-routing.md 9.2): the group whose **best rank** has the
 * lowest load score wins, where a rank's score is the engine client's own `loadScore` (dp-routing.md 9.2 step 4:
 * `max(in-flight, waiting + running)` plus the KV penalty) over its `rankStates()`. So a request goes where the
 * engine client would then find the least-loaded rank. Ties go to the first group in a scan that starts at a
 * rotating position (advanced on every choice), as the rank scan of dp-routing.md 9.2 step 3 does, so idle groups
 * take turns instead of the first group always winning.
 *
 * Only live groups are candidates (gateway.md 4.2: a closed client is unhealthy; dp-routing.md 6: it is closed for
 * good): a request is never submitted to a dead group while another one lives. A pinned request
 * (`X-data-parallel-rank`, gateway.md 14) is scored the same way among the live groups that have that rank, and the
 * pin then applies inside the chosen group.
 *
 * The choice is synchronous and reads the client state at the call, so a caller that submits right after it without
 * an `await` in between (the routes do) reserves the chosen rank in the same tick (dp-routing.md 12.3 rule 1).
 */
import { loadScore } from '../engine-client/policy.js';
import type { BackendGroup, BackendRankState } from './backend.js';
import { ApiError } from './errors.js';

/**
 * The best (lowest) load score over a group's ranks (`loadScore` of each `{engineIndex, inFlight, load}`; units:
 * requests plus the dimensionless KV penalty). `Infinity` for a group that lists no rank (no 2-byte identity), so
 * such a group only wins when it is the only candidate. Pure; never throws.
 */
export function bestRankScore(states: readonly BackendRankState[]): number {
  let best = Infinity;
  for (const s of states) {
    const score = loadScore({ engineIndex: s.engineIndex, inFlight: s.inFlight, load: s.load });
    if (score < best) best = score;
  }
  return best;
}

/**
 * The position in `scores` of the lowest score, scanning from `start` (taken modulo the length; wrapping) and
 * replacing the candidate only on a **strictly** lower score, so ties go to the earliest position in the scan.
 * Pure. Throws RangeError on an empty list.
 */
export function lowestGroupPosition(scores: readonly number[], start: number): number {
  const count = scores.length;
  if (count === 0) throw new RangeError('cannot choose an engine group: no candidates');
  const first = ((Math.trunc(start) % count) + count) % count;
  let best = first;
  for (let offset = 1; offset < count; offset++) {
    const pos = (first + offset) % count;
    if (scores[pos]! < scores[best]!) best = pos;
  }
  return best;
}

/** The 503 answered when every engine group is dead (gateway.md 4.2, 11.3). */
export function noLiveGroupError(groups: readonly BackendGroup[]): ApiError {
  const names = groups.map((g) => `${g.worker} (${g.engine})`).join(', ');
  return new ApiError(503, `engine core dead: no engine group is alive (${names})`, { code: 'engine_dead' });
}

/**
 * The engine groups an app serves and the worker-level choice among them. Group order is the configuration order
 * (`/health` lists them in it). Not thread-shared state: one instance per app.
 */
export class GroupRouter {
  /** Every group, alive or not, in configuration order. */
  readonly groups: readonly BackendGroup[];
  /** Rotating scan start of the tie-break (number of choices made so far). */
  private scanStart = 0;

  /** Throws RangeError on an empty list or a duplicate worker name. */
  constructor(groups: readonly BackendGroup[]) {
    if (groups.length === 0) throw new RangeError('GroupRouter needs at least one engine group');
    const seen = new Set<string>();
    for (const g of groups) {
      if (seen.has(g.worker)) throw new RangeError(`duplicate engine group worker name ${JSON.stringify(g.worker)}`);
      seen.add(g.worker);
    }
    this.groups = [...groups];
  }

  /** The live groups (`backend.isAlive()`), in configuration order. */
  alive(): BackendGroup[] {
    return this.groups.filter((g) => g.backend.isAlive());
  }

  /**
   * Tokens: the `max_model_len` reported by /v1/models (gateway.md 15.1: the first engine's handshake value), taken
   * as the smallest over the live groups (over all groups when none lives), i.e. the context every group can serve.
   */
  get maxModelLen(): number {
    const live = this.alive();
    return Math.min(...(live.length > 0 ? live : this.groups).map((g) => g.backend.maxModelLen));
  }

  /**
   * The live groups in configuration order, restricted to those having DP rank `dpRank` when it is given.
   * Throws `ApiError` 503 (`engine_dead`) when no group is alive; with `dpRank`, 400 (`invalid_dp_rank`, param
   * `X-data-parallel-rank`) when no live group has that rank.
   */
  candidates(dpRank?: number): BackendGroup[] {
    const live = this.alive();
    if (live.length === 0) throw noLiveGroupError(this.groups);
    if (dpRank === undefined) return live;
    const having = live.filter((g) => g.backend.engines.some((e) => e.engineIndex === dpRank));
    if (having.length === 0) {
      const ranks = [...new Set(live.flatMap((g) => g.backend.engines.map((e) => e.engineIndex)))].filter((i) => i !== null);
      throw new ApiError(400, `X-data-parallel-rank must be one of ${ranks.join(', ')} (the DP ranks of the live engine groups); got '${dpRank}'`, {
        param: 'X-data-parallel-rank',
        code: 'invalid_dp_rank',
      });
    }
    return having;
  }

  /**
   * Choose among `candidates` (non-empty, e.g. from `candidates()`): the lowest `bestRankScore` of each group's
   * `rankStates()`, ties by the rotating scan start, which advances by one on every call. Throws RangeError on an
   * empty list.
   */
  choose(candidates: readonly BackendGroup[]): BackendGroup {
    if (candidates.length === 0) throw new RangeError('cannot choose an engine group: no candidates');
    const start = this.scanStart;
    this.scanStart = this.scanStart >= Number.MAX_SAFE_INTEGER ? 0 : this.scanStart + 1;
    if (candidates.length === 1) return candidates[0]!;
    const scores = candidates.map((g) => bestRankScore(g.backend.rankStates()));
    return candidates[lowestGroupPosition(scores, start)]!;
  }
}
