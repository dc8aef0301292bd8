/**
 * A virtual-clock driver for one `SimScheduler` that replays the engine loop of `engine.ts` without timers or
 * sockets (issue #5 part 2: time scale and heterogeneous ranks must not change results): a round is planned as soon
 * as the rank has work and no round is open; it commits `stepTimeMs × timeScale` ms later, and the next round is
 * planned right after; an arrival is `add`ed at its time and may start a round on an idle rank. When a commit and an
 * arrival fall on the same instant the commit runs first (the engine's timer and socket order is not specified
 * there; this driver picks one order so runs are reproducible).
 *
 * Arrival times are given in **engine ms** (unscaled) and scaled by `timeScale` like the step times, which is what a
 * benchmark must do with its own arrival schedule for a time-scaled run to reproduce an unscaled one. With a
 * `timeScale` that is a power of two every scaled time is exact in floating point, so the run is identical to the
 * unscaled one and only wall times differ (tested); another factor can, in principle, reorder an arrival and a
 * commit that coincide to the last bit.
 */
import type { LoadTail, RoundPlan, SchedulerConfig, SchedulerState, SimRequest, SimRow } from './scheduler.js';
import { SimScheduler } from './scheduler.js';

/** One arrival: at `atMs` engine ms (≥ 0, finite), a fresh request from `request()` (called once per run). */
export interface VirtualArrival {
  atMs: number;
  request: () => SimRequest;
}

/** One round as the driver saw it. Times in wall ms (engine ms × timeScale). */
export interface VirtualRound {
  startMs: number;
  endMs: number;
  /** `plan()`'s decisions (admission rejections excluded: see `rejections`). */
  plannedCount: number;
  prefillTokens: number;
  decodeTokens: number;
  /** Requests preempted when this round was planned. */
  retracted: number;
  tail: LoadTail;
  /** The rows `commit()` produced (empty when no row was due). */
  rows: SimRow[];
}

/** What `runVirtual` returns. */
export interface VirtualRunResult {
  rounds: VirtualRound[];
  /** Terminal rows of requests rejected at admission, with the wall time they went out. */
  rejections: { atMs: number; rows: SimRow[] }[];
  /** Wall time of the last event (ms). */
  endMs: number;
  /** The scheduler's counters at the end (including `preemptions`). */
  state: SchedulerState;
}

interface OpenRound {
  plan: RoundPlan;
  startMs: number;
  endMs: number;
}

/** Options of `runVirtual`. `timeScale`: ratio ≥ 0 (default 1); `maxRounds`: hang guard (default 100 000). */
export interface VirtualRunOptions {
  timeScale?: number;
  maxRounds?: number;
}

/**
 * Replay `arrivals` on a fresh `SimScheduler(config)` until every arrival was added and the rank is idle. Pure and
 * deterministic. Throws RangeError on a negative or non-finite `timeScale` or arrival time, and Error when
 * `maxRounds` rounds did not drain the rank.
 */
export function runVirtual(
  config: SchedulerConfig,
  arrivals: readonly VirtualArrival[],
  opts: VirtualRunOptions = {},
): VirtualRunResult {
  const scale = opts.timeScale ?? 1;
  if (!Number.isFinite(scale) || scale < 0) throw new RangeError(`timeScale must be a finite number ≥ 0, got ${scale}`);
  const maxRounds = opts.maxRounds ?? 100_000;
  for (const a of arrivals) {
    if (!Number.isFinite(a.atMs) || a.atMs < 0)
      throw new RangeError(`arrival time must be a finite number ≥ 0 ms, got ${a.atMs}`);
  }
  // Stable by time: equal times keep their given order.
  const queue = arrivals
    .map((a, i) => ({ a, i }))
    .sort((x, y) => x.a.atMs - y.a.atMs || x.i - y.i)
    .map((x) => x.a);
  const s = new SimScheduler(config);
  const rounds: VirtualRound[] = [];
  const rejections: VirtualRunResult['rejections'] = [];
  let now = 0;
  let open: OpenRound | null = null;
  let next = 0;

  /** The engine's `startRound` on an idle rank: plan, push rejections, open a round when anything was planned. */
  const startRound = (): OpenRound | null => {
    if (!s.hasWork()) return null;
    const plan = s.plan();
    if (plan.admission !== null) rejections.push({ atMs: now, rows: plan.admission.rows });
    if (plan.plannedCount === 0) return null;
    return { plan, startMs: now, endMs: now + plan.stepTimeMs * scale };
  };

  for (;;) {
    const arrivalAt = next < queue.length ? queue[next].atMs * scale : Number.POSITIVE_INFINITY;
    if (open === null && arrivalAt === Number.POSITIVE_INFINITY) break;
    if (open !== null && open.endMs <= arrivalAt) {
      const { plan, startMs, endMs } = open;
      now = endMs;
      open = null;
      const batch = s.commit();
      rounds.push({
        startMs,
        endMs,
        plannedCount: plan.plannedCount,
        prefillTokens: plan.prefillTokens,
        decodeTokens: plan.decodeTokens,
        retracted: plan.retracted,
        tail: plan.tail,
        rows: batch?.rows ?? [],
      });
      if (rounds.length >= maxRounds && s.hasWork())
        throw new Error(`runVirtual: the rank did not drain within ${maxRounds} rounds`);
    } else {
      now = arrivalAt;
      s.add(queue[next].request(), now);
      next += 1;
    }
    if (open === null) open = startRound();
  }
  return { rounds, rejections, endMs: now, state: s.state() };
}
