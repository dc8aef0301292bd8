/**
 * The routing state of one engine client: stored load and in-flight sets, in **one** structure
 * (dp-routing.md section 1 "Routing state"; SMG PR #2169 merged the two maps behind one mutex to remove a
 * lock-order deadlock, section 12.2). In this single-threaded client every method is synchronous, so no caller can
 * observe the two maps out of step (section 12.3 rules 1-3).
 *
 * Two load-signal guards of issue 12 live here (the scoring side is in policy.ts):
 * - every stored report is **timestamped** (`storeLoad(…, nowMs)`), so selection can age it (section 14.1;
 *   `RankView.loadAgeMs`);
 * - the **sole-client guard** (section 14.3): zero-on-empty is only sound while this client is the rank's only
 *   client. When a report shows clearly more requests than this client can account for (`soleClientVerdict`), the
 *   guard engages for that rank and the release clamp is suspended there, so the stored counts age out instead of
 *   being erased; it disengages once reports agree again.
 * - requests this client **ABORTed** count as its own work on their rank for the guard until the rank's reports show
 *   them gone (`releaseAborted`, issue 26): an engine applies an ABORT at its next step and keeps streaming rows and
 *   counting the request until then, which can be many report intervals after the release (0.1 s of 5 ms steps was
 *   seen on the TokenSpeed wire). Without this a burst of client disconnects read as another client's load and the
 *   rank, idle a moment later, was shunned for seconds.
 */
import { IdSet, IdTable } from '../collections/id-table.js';
import type { EngineLoad } from '../protocols/types.js';
import { queuedRequests } from './policy.js';
import { ServiceRates } from './service-rates.js';

/**
 * Requests a report may exceed what this client can account for before it counts as another client's work. Covers
 * rows the engine had not committed yet when it sampled, beyond the releases `soleClientVerdict` already allows for.
 */
export const SOLE_CLIENT_SLACK = 2;
/** Consecutive agreeing reports that disengage the guard (one clear report engages it). */
export const SOLE_CLIENT_AGREEING_REPORTS = 3;
/**
 * Reports of a rank without a row for an ABORTed request after which the engine is taken to have applied the ABORT
 * (its rows stop at once; its count in the report may lag one or two rounds: TokenSpeed samples before the round
 * commits, with the overlap schedule one round more, engine-wire.md 4.9).
 */
export const ABORT_QUIET_REPORTS = 3;
/**
 * Reports after which an ABORTed request stops explaining a rank's load even while its rows keep coming: an engine
 * that still streams it this many steps later is not honouring the ABORT, and its load is unexplained.
 */
export const ABORT_MAX_REPORTS = 256;
/** ABORTed requests remembered per rank (bounded; past it an ABORTed request counts as a plain release). */
export const MAX_ABORTING_PER_RANK = 16_384;

/** The sole-client guard of one rank (section 14.3). */
export interface SoleClientGuard {
  /** True while foreign work was seen and not yet contradicted: the release clamp is suspended for the rank. */
  engaged: boolean;
  /** Agreeing reports in a row while engaged. */
  agreeing: number;
  /** The last report's excess (requests reported beyond own in-flight plus the allowed lag). */
  lastExcess: number;
  /** How often the guard engaged / disengaged. */
  engagements: number;
  disengagements: number;
}

/**
 * Inputs of one guard decision, taken when a report is stored and before the same batch's releases (section 8):
 * `reported` = the requests the report says the rank holds (`queuedRequests`, so a TokenSpeed report's waiting
 * requests count once); `own` = this client's in-flight count there; `recentlyReleased` = ids this client retired
 * from the rank during the last two report intervals, which a report sampled before the engine saw them go may still
 * count (TokenSpeed samples before the round commits, and with the overlap schedule a round lags one more;
 * engine-wire.md 4.9); `aborting` = requests this client ABORTed on the rank that the engine may not have let go of
 * yet (aborts are applied at the engine's next step, dp-routing.md 14.9; `RoutingState.releaseAborted`).
 */
export interface SoleClientEvidence {
  reported: number;
  own: number;
  recentlyReleased: number;
  aborting: number;
}

/** A guard transition, for the client's log line and metric. */
export type SoleClientTransition = 'engaged' | 'disengaged';

/**
 * The guard's next state for one report (section 14.3, "going beyond"): `excess = reported − own −
 * recentlyReleased − aborting`; an excess above `SOLE_CLIENT_SLACK` engages the guard (another client is using the engine);
 * while engaged, `SOLE_CLIENT_AGREEING_REPORTS` reports in a row within the slack disengage it. Pure: returns the new
 * state and the transition (null when none).
 */
export function soleClientVerdict(
  guard: SoleClientGuard,
  evidence: SoleClientEvidence,
): { guard: SoleClientGuard; transition: SoleClientTransition | null } {
  const excess = evidence.reported - evidence.own - evidence.recentlyReleased - evidence.aborting;
  const foreign = excess > SOLE_CLIENT_SLACK;
  if (!guard.engaged) {
    if (!foreign) return { guard: { ...guard, lastExcess: excess }, transition: null };
    return {
      guard: { ...guard, engaged: true, agreeing: 0, lastExcess: excess, engagements: guard.engagements + 1 },
      transition: 'engaged',
    };
  }
  if (foreign) return { guard: { ...guard, agreeing: 0, lastExcess: excess }, transition: null };
  const agreeing = guard.agreeing + 1;
  if (agreeing < SOLE_CLIENT_AGREEING_REPORTS)
    return { guard: { ...guard, agreeing, lastExcess: excess }, transition: null };
  return {
    guard: { ...guard, engaged: false, agreeing: 0, lastExcess: excess, disengagements: guard.disengagements + 1 },
    transition: 'disengaged',
  };
}

const IDLE_GUARD: SoleClientGuard = Object.freeze({
  engaged: false,
  agreeing: 0,
  lastExcess: 0,
  engagements: 0,
  disengagements: 0,
});

/** What `storeLoad` decided about the sole-client guard (null `transition`: no change). */
export interface StoreLoadResult {
  transition: SoleClientTransition | null;
  guard: SoleClientGuard;
  evidence: SoleClientEvidence;
}

/** One ABORTed request of a rank: report counts (`RankExtras.reports`) when it was aborted and last seen in a row. */
interface AbortMark {
  abortedAt: number;
  seenAt: number;
}

/** Per-rank bookkeeping beside the load and the in-flight set. */
interface RankExtras {
  storedAtMs: number;
  /** Ids retired from the rank since the last stored report, and during the interval before (aborted ones excluded). */
  releasedSinceReport: number;
  releasedIntervalBefore: number;
  guard: SoleClientGuard;
  /** Reports stored for the rank's current process (the clock of `aborting`). */
  reports: number;
  /** Requests this client ABORTed there that the engine may still hold (section 14.3; bounded). */
  aborting: IdTable<AbortMark>;
}

function freshExtras(guard: SoleClientGuard): RankExtras {
  return {
    storedAtMs: 0,
    releasedSinceReport: 0,
    releasedIntervalBefore: 0,
    guard,
    reports: 0,
    aborting: new IdTable(),
  };
}

/**
 * Per-rank stored load (`load[rank]`, section 11) and in-flight sets of request ids (`inflight[rank]`, section 10.1).
 * Ranks are engine indices (DP ranks). A rank has an in-flight entry once it has been selected at least once; the
 * entry is kept when it empties, because an existing-but-empty set is what lets the clamp run (section 10.2 step 2).
 */
export class RoutingState {
  private readonly loads = new Map<number, EngineLoad>();
  /** Per rank an `IdSet`, not a `Set`: ids come and go per request (collections/id-table.ts says why). */
  private readonly inflight = new Map<number, IdSet>();
  private readonly extras = new Map<number, RankExtras>();
  /**
   * The client's own per-rank service rates (service-rates.ts): fed by the client at dispatch and per batch; a
   * request leaves it with its in-flight slot (`release`, `clearInFlight`) and a rank with `forgetRank`.
   */
  readonly rates = new ServiceRates();

  /**
   * Overwrite `load[rank]` with a copy of `load` (never merged; section 11), stamped `nowMs` (ms, the caller's
   * monotonic clock) for ageing (section 14.1), and run the sole-client guard on it (section 14.3; see
   * `soleClientVerdict`). Called before any release of the same batch (section 8 step 2), so `own` still counts the
   * requests this batch finishes, as the report does. ABORTed requests of the rank (`releaseAborted`) count as its
   * own work until a report is explained without them (then all are forgotten), or until `ABORT_QUIET_REPORTS`
   * reports came with no row for one (`noteRow`), or `ABORT_MAX_REPORTS` reports after its ABORT.
   */
  storeLoad(rank: number, load: EngineLoad, nowMs = 0): StoreLoadResult {
    const copy: EngineLoad = {
      numRunning: load.numRunning,
      numWaiting: load.numWaiting,
      kvCacheUsage: load.kvCacheUsage,
    };
    if (load.runningIncludesWaiting === true) copy.runningIncludesWaiting = true;
    this.loads.set(rank, copy);
    const x = this.extrasOf(rank);
    x.reports += 1;
    const own = this.inFlightCount(rank);
    const reported = queuedRequests(copy);
    if (x.aborting.size > 0) settleAborts(x, reported - own <= SOLE_CLIENT_SLACK);
    const evidence: SoleClientEvidence = {
      reported,
      own,
      recentlyReleased: x.releasedSinceReport + x.releasedIntervalBefore,
      aborting: x.aborting.size,
    };
    const { guard, transition } = soleClientVerdict(x.guard, evidence);
    x.guard = guard;
    x.storedAtMs = nowMs;
    x.releasedIntervalBefore = x.releasedSinceReport;
    x.releasedSinceReport = 0;
    return { transition, guard, evidence };
  }

  /** A copy of the stored load for `rank`, or null when the rank never reported. */
  load(rank: number): EngineLoad | null {
    const l = this.loads.get(rank);
    return l ? { ...l } : null;
  }

  /** How long ago (ms, against `nowMs`) the stored load of `rank` was stored, or null when it never reported. */
  loadAgeMs(rank: number, nowMs: number): number | null {
    if (!this.loads.has(rank)) return null;
    return Math.max(0, nowMs - (this.extras.get(rank)?.storedAtMs ?? nowMs));
  }

  /** The sole-client guard of `rank` (a copy; idle for a rank never seen). */
  soleClientGuard(rank: number): SoleClientGuard {
    return { ...(this.extras.get(rank)?.guard ?? IDLE_GUARD) };
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
      set = new IdSet();
      this.inflight.set(rank, set);
    }
    set.add(id);
  }

  /**
   * `release(rank, ids)` (dp-routing.md section 10.2; SMG PR #2131):
   * 1. no in-flight entry for `rank` (never selected) → nothing, no clamp;
   * 2. remove each id (absent ids are ignored, so every retirement path is idempotent per id; section 10.1);
   * 3. if the set is now empty (also when it already was) and a load is stored and `clamp` is true and the rank's
   *    sole-client guard is not engaged (section 14.3): set its running and waiting counts to 0 and keep its KV usage
   *    (cache pages outlive requests) and its timestamp.
   * Returns true when the clamp changed a non-zero running or waiting count to 0 (a "clamp event" for metrics).
   */
  release(rank: number, ids: Iterable<string>, clamp: boolean): boolean {
    return this.releaseFrom(rank, ids, clamp, false);
  }

  /**
   * `release` for requests this client ABORTed on `rank` (a client disconnect or cancel, a stall, a group failure, an
   * overrun): the same removal and clamp, and each released id is remembered as work the engine may still be doing
   * until its reports show it gone (see `storeLoad`), so the sole-client guard does not read the engine's lag in
   * applying the ABORT as another client's load. Returns what `release` returns.
   */
  releaseAborted(rank: number, ids: Iterable<string>, clamp: boolean): boolean {
    return this.releaseFrom(rank, ids, clamp, true);
  }

  /**
   * A row for `id` came from `rank`: if it is one this client ABORTed there, the engine still holds it (section 14.3;
   * cheap when the rank has no ABORTed requests).
   */
  noteRow(rank: number, id: string): void {
    const x = this.extras.get(rank);
    if (x === undefined || x.aborting.size === 0) return;
    const mark = x.aborting.get(id);
    if (mark !== undefined) mark.seenAt = x.reports;
  }

  /** Requests ABORTed on `rank` that its reports may still count (section 14.3). */
  abortingCount(rank: number): number {
    return this.extras.get(rank)?.aborting.size ?? 0;
  }

  private releaseFrom(rank: number, ids: Iterable<string>, clamp: boolean, aborted: boolean): boolean {
    const set = this.inflight.get(rank);
    if (!set) return false;
    let released = 0;
    const x = aborted ? this.extrasOf(rank) : null;
    for (const id of ids) {
      if (!set.delete(id)) continue;
      released += 1;
      this.rates.end(id);
      if (x !== null) markAborted(x, id);
    }
    if (released > 0 && x === null) this.extrasOf(rank).releasedSinceReport += released;
    if (set.size !== 0 || !clamp) return false;
    if (this.extras.get(rank)?.guard.engaged === true) return false;
    const stored = this.loads.get(rank);
    if (!stored || (stored.numRunning === 0 && stored.numWaiting === 0)) return false;
    this.loads.set(rank, { ...stored, numRunning: 0, numWaiting: 0 });
    return true;
  }

  /**
   * Forget everything about `rank`: its stored load, its in-flight set, its report age and release history, and the
   * sole-client guard's evidence (a rank that died, or joined as a fresh process with an empty engine state, issue
   * #8). The guard's transition counts are cumulative and kept; an engaged guard is disengaged (and counted so, so
   * engagements − disengagements stays the current state). Its next reservation starts a new set.
   */
  forgetRank(rank: number): void {
    this.rates.forget(rank);
    this.loads.delete(rank);
    this.inflight.delete(rank);
    const x = this.extras.get(rank);
    if (x === undefined) return;
    const g = x.guard;
    const guard = { ...IDLE_GUARD, engagements: g.engagements, disengagements: g.disengagements + (g.engaged ? 1 : 0) };
    this.extras.set(rank, freshExtras(guard));
  }

  /**
   * Empty every in-flight set (fail_all / close; section 6). Entries and stored loads are kept. The requests are
   * remembered as ABORTed on their rank (the group failure ABORTs them on every rank still connected; a rank that
   * died is forgotten with its ABORTed requests).
   */
  clearInFlight(): void {
    for (const [rank, set] of this.inflight) {
      if (set.size === 0) continue;
      const x = this.extrasOf(rank);
      for (const id of set.keys()) markAborted(x, id);
      set.clear();
    }
    this.rates.clearPending();
  }

  private extrasOf(rank: number): RankExtras {
    let x = this.extras.get(rank);
    if (x === undefined) {
      x = freshExtras(IDLE_GUARD);
      this.extras.set(rank, x);
    }
    return x;
  }
}

/**
 * Remember `id` as ABORTed on the rank of `x`. When the table is full it counts as an ordinary release instead (the
 * report lag window of `releasedSinceReport`), so a flood of aborts costs O(1) each.
 */
function markAborted(x: RankExtras, id: string): void {
  if (x.aborting.size >= MAX_ABORTING_PER_RANK && !x.aborting.has(id)) {
    x.releasedSinceReport += 1;
    return;
  }
  x.aborting.set(id, { abortedAt: x.reports, seenAt: x.reports });
}

/**
 * Forget the ABORTed requests of a rank that its latest report (already counted in `x.reports`) no longer needs to
 * explain: all of them when the report is explained without them (`explained`), else those quiet for more than
 * `ABORT_QUIET_REPORTS` reports or ABORTed more than `ABORT_MAX_REPORTS` reports ago.
 */
function settleAborts(x: RankExtras, explained: boolean): void {
  if (explained) {
    x.aborting.clear();
    return;
  }
  const now = x.reports;
  for (const id of x.aborting.keys()) {
    const m = x.aborting.get(id)!;
    if (now - m.seenAt > ABORT_QUIET_REPORTS || now - m.abortedAt > ABORT_MAX_REPORTS) x.aborting.delete(id);
  }
}
