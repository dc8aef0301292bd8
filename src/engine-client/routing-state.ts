/**
 * The routing state of one engine client: stored load and in-flight sets, in **one** structure
 * (dp-routing.md section 1 "Routing state"; SMG PR #2169 merged the two maps behind one mutex to remove a
 * lock-order deadlock, section 12.2). In this single-threaded client every method is synchronous, so no caller can
 * observe the two maps out of step (section 12.3 rules 1-3).
 */
import type { EngineLoad } from '../protocols/types.js';

/**
 * Per-rank stored load (`load[rank]`, section 11) and in-flight sets of request ids (`inflight[rank]`, section 10.1).
 * Ranks are engine indices (DP ranks). A rank has an in-flight entry once it has been selected at least once; the
 * entry is kept when it empties, because an existing-but-empty set is what lets the clamp run (section 10.2 step 2).
 */
export class RoutingState {
  private readonly loads = new Map<number, EngineLoad>();
  private readonly inflight = new Map<number, Set<string>>();

  /**
   * Overwrite `load[rank]` with a copy of `load` (never merged, never aged; section 11). Called before any release
   * of the same batch (section 8 step 2).
   */
  storeLoad(rank: number, load: EngineLoad): void {
    this.loads.set(rank, {
      numRunning: load.numRunning,
      numWaiting: load.numWaiting,
      kvCacheUsage: load.kvCacheUsage,
    });
  }

  /** A copy of the stored load for `rank`, or null when the rank never reported. */
  load(rank: number): EngineLoad | null {
    const l = this.loads.get(rank);
    return l ? { ...l } : null;
  }

  /** Size of `inflight[rank]` (0 when the rank has no entry). */
  inFlightCount(rank: number): number {
    return this.inflight.get(rank)?.size ?? 0;
  }

  /** Whether `id` is in `inflight[rank]`. */
  holds(rank: number, id: string): boolean {
    return this.inflight.get(rank)?.has(id) ?? false;
  }

  /** Add `id` to `inflight[rank]`, creating the entry (section 9.1 step 2, 9.2 step 5). Adding twice is a no-op. */
  reserve(rank: number, id: string): void {
    let set = this.inflight.get(rank);
    if (!set) {
      set = new Set();
      this.inflight.set(rank, set);
    }
    set.add(id);
  }

  /**
   * `release(rank, ids)` (dp-routing.md section 10.2; SMG PR #2131):
   * 1. no in-flight entry for `rank` (never selected) → nothing, no clamp;
   * 2. remove each id (absent ids are ignored, so every retirement path is idempotent per id; section 10.1);
   * 3. if the set is now empty (also when it already was) and a load is stored and `clamp` is true: set its
   *    running and waiting counts to 0 and keep its KV usage (cache pages outlive requests).
   * Returns true when the clamp changed a non-zero running or waiting count to 0 (a "clamp event" for metrics).
   */
  release(rank: number, ids: Iterable<string>, clamp: boolean): boolean {
    const set = this.inflight.get(rank);
    if (!set) return false;
    for (const id of ids) set.delete(id);
    if (set.size !== 0 || !clamp) return false;
    const stored = this.loads.get(rank);
    if (!stored || (stored.numRunning === 0 && stored.numWaiting === 0)) return false;
    this.loads.set(rank, { numRunning: 0, numWaiting: 0, kvCacheUsage: stored.kvCacheUsage });
    return true;
  }

  /** Empty every in-flight set (fail_all / close; section 6). Entries and stored loads are kept. */
  clearInFlight(): void {
    for (const set of this.inflight.values()) set.clear();
  }
}
