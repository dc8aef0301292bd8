/**
 * Per-rank request statistics for `GET /v1/gateway/ranks` and the dashboard (issue #13 part 2): dispatch rate,
 * generated-token rate, and TTFT / ITL percentiles of each DP rank of each engine group.
 *
 * Cost model: the routes record once per request (dispatch, TTFT, finish) and once per token-bearing engine output
 * (ITL: one sample per output, the gap divided by its token count, not one per token), each an O(1) write into a
 * fixed-size ring or a one-second bucket. Percentiles are computed only when someone asks (a copy and a sort of at
 * most `RING_SIZE` numbers), so the hot path never sorts. Memory per rank is bounded (two rings, two bucket arrays).
 */

/** Samples kept per rank and latency kind: the percentiles describe the last this-many samples. */
export const RING_SIZE = 512;
/** The rate window in seconds: rates are counts over the last this-many whole seconds, divided by it. */
export const RATE_WINDOW_S = 10;

/** A fixed-capacity ring of numbers (the newest `capacity` values), each with the time it was recorded at (ms). */
class SampleRing {
  private readonly values: Float64Array;
  private readonly times: Float64Array;
  private next = 0;
  private filled = 0;

  constructor(capacity: number) {
    this.values = new Float64Array(capacity);
    this.times = new Float64Array(capacity);
  }

  push(value: number, atMs: number): void {
    this.values[this.next] = value;
    this.times[this.next] = atMs;
    this.next = (this.next + 1) % this.values.length;
    if (this.filled < this.values.length) this.filled++;
  }

  /** The stored values, sorted ascending (a copy). */
  sorted(): Float64Array {
    return this.values.slice(0, this.filled).sort();
  }

  /** Append to `into` the stored values recorded at or after `fromMs` (in no particular order). */
  since(fromMs: number, into: number[]): void {
    for (let i = 0; i < this.filled; i++) if (this.times[i]! >= fromMs) into.push(this.values[i]!);
  }
}

/** Counts per whole second over the last `RATE_WINDOW_S` seconds (one slot per second, reused as time moves on). */
class RateWindow {
  private readonly counts = new Float64Array(RATE_WINDOW_S + 1);
  private readonly seconds = new Float64Array(RATE_WINDOW_S + 1).fill(-1);

  add(nowMs: number, n: number): void {
    const second = Math.floor(nowMs / 1000);
    const slot = second % this.counts.length;
    if (this.seconds[slot] !== second) {
      this.seconds[slot] = second;
      this.counts[slot] = 0;
    }
    this.counts[slot]! += n;
  }

  /** Events per second over the last `RATE_WINDOW_S` whole seconds before the current one. */
  perSecond(nowMs: number): number {
    const current = Math.floor(nowMs / 1000);
    let total = 0;
    for (let i = 0; i < this.counts.length; i++) {
      const age = current - this.seconds[i]!;
      if (age >= 1 && age <= RATE_WINDOW_S) total += this.counts[i]!;
    }
    return total / RATE_WINDOW_S;
  }
}

/** Percentiles of one latency kind over the last samples, in ms; null fields when there is no sample yet. */
export interface LatencyPercentiles {
  p50: number | null;
  p90: number | null;
  p99: number | null;
  /** Samples the percentiles were computed from (at most `RING_SIZE`). */
  samples: number;
}

/** What `RankStatsBook.snapshot` reports for one rank. */
export interface RankStatsSnapshot {
  /** Requests dispatched per second (all, pinned or not) over the last `RATE_WINDOW_S` seconds. */
  dispatchRate: number;
  /** Tokens generated per second over the last `RATE_WINDOW_S` seconds. */
  tokenRate: number;
  /** Time to first token of the last requests, ms. */
  ttftMs: LatencyPercentiles;
  /** Inter-token latency of the last token-bearing outputs (gap / tokens in the output), ms per token. */
  itlMs: LatencyPercentiles;
}

/** Nearest-rank percentile `q` (0..1) of an ascending array; null when it is empty. */
export function percentile(sorted: ArrayLike<number>, q: number): number | null {
  if (sorted.length === 0) return null;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank]!;
}

function percentiles(ring: SampleRing): LatencyPercentiles {
  return percentilesOfSorted(ring.sorted());
}

function percentilesOfSorted(s: Float64Array): LatencyPercentiles {
  return { p50: percentile(s, 0.5), p90: percentile(s, 0.9), p99: percentile(s, 0.99), samples: s.length };
}

/** Percentiles of `values` (ms, any order). */
function percentilesOf(values: readonly number[]): LatencyPercentiles {
  return percentilesOfSorted(Float64Array.from(values).sort());
}

/**
 * The latency of the whole gateway lately (the dashboard's charts): TTFT and ITL percentiles over every rank's samples
 * recorded in the last `RATE_WINDOW_S` seconds (at most `RING_SIZE` per rank: a busy rank's last ITL samples may span
 * less than that), ms; null fields when there was none.
 */
export interface RecentLatency {
  ttftMs: LatencyPercentiles;
  itlMs: LatencyPercentiles;
}

class RankStats {
  readonly dispatches = new RateWindow();
  readonly tokens = new RateWindow();
  readonly ttft = new SampleRing(RING_SIZE);
  readonly itl = new SampleRing(RING_SIZE);
}

/**
 * The per-rank statistics of one app, keyed by worker (engine group) and engine index (DP rank). Times are ms on the
 * caller's clock (`now()` of the app: monotonic `performance.now()` by default). Never throws; samples that are not
 * finite numbers ≥ 0 are ignored.
 */
export class RankStatsBook {
  private readonly byWorker = new Map<string, Map<number, RankStats>>();

  private stats(worker: string, engineIndex: number): RankStats {
    let ranks = this.byWorker.get(worker);
    if (ranks === undefined) {
      ranks = new Map();
      this.byWorker.set(worker, ranks);
    }
    let s = ranks.get(engineIndex);
    if (s === undefined) {
      s = new RankStats();
      ranks.set(engineIndex, s);
    }
    return s;
  }

  /** One request was dispatched to the rank at `nowMs`. */
  recordDispatch(worker: string, engineIndex: number, nowMs: number): void {
    this.stats(worker, engineIndex).dispatches.add(nowMs, 1);
  }

  /** The rank produced `tokens` tokens at `nowMs`: its first (TTFT `ttftMs`) or a later output (ITL `itlMsPerToken`). */
  recordTokens(
    worker: string,
    engineIndex: number,
    nowMs: number,
    tokens: number,
    latency: { ttftMs: number } | { itlMsPerToken: number },
  ): void {
    if ('ttftMs' in latency) this.recordSample(worker, engineIndex, nowMs, tokens, latency.ttftMs, true);
    else this.recordSample(worker, engineIndex, nowMs, tokens, latency.itlMsPerToken, false);
  }

  /**
   * `recordTokens` without a latency object (the per-token path, generation.ts): `ms` is the TTFT (`first`) or the
   * ITL per token of this output.
   */
  recordSample(worker: string, engineIndex: number, nowMs: number, tokens: number, ms: number, first: boolean): void {
    const s = this.stats(worker, engineIndex);
    s.tokens.add(nowMs, tokens);
    if (!Number.isFinite(ms) || ms < 0) return;
    if (first) s.ttft.push(ms, nowMs);
    else s.itl.push(ms, nowMs);
  }

  /** The whole gateway's recent latency at `nowMs` (`RecentLatency`). */
  recent(nowMs: number): RecentLatency {
    const from = nowMs - RATE_WINDOW_S * 1000;
    const ttft: number[] = [];
    const itl: number[] = [];
    for (const ranks of this.byWorker.values()) {
      for (const s of ranks.values()) {
        s.ttft.since(from, ttft);
        s.itl.since(from, itl);
      }
    }
    return { ttftMs: percentilesOf(ttft), itlMs: percentilesOf(itl) };
  }

  /** The rank's rates and percentiles at `nowMs` (all zero / null for a rank never recorded). */
  snapshot(worker: string, engineIndex: number, nowMs: number): RankStatsSnapshot {
    const s = this.byWorker.get(worker)?.get(engineIndex) ?? new RankStats();
    return {
      dispatchRate: s.dispatches.perSecond(nowMs),
      tokenRate: s.tokens.perSecond(nowMs),
      ttftMs: percentiles(s.ttft),
      itlMs: percentiles(s.itl),
    };
  }

  /**
   * Every recorded rank's rates at `nowMs` and its latency samples (ms), for merging with the books of other
   * processes (`--workers N`: each front records the requests it served; `mergeRankStats`).
   */
  exportAll(nowMs: number): RankStatsExport[] {
    const out: RankStatsExport[] = [];
    const from = nowMs - RATE_WINDOW_S * 1000;
    for (const [worker, ranks] of this.byWorker) {
      for (const [engineIndex, s] of ranks) {
        const recentTtftMs: number[] = [];
        const recentItlMs: number[] = [];
        s.ttft.since(from, recentTtftMs);
        s.itl.since(from, recentItlMs);
        out.push({
          worker,
          engineIndex,
          dispatchRate: s.dispatches.perSecond(nowMs),
          tokenRate: s.tokens.perSecond(nowMs),
          ttftMs: [...s.ttft.sorted()],
          itlMs: [...s.itl.sorted()],
          recentTtftMs,
          recentItlMs,
        });
      }
    }
    return out;
  }

  /** Drop what is known about a rank (it rejoined as a fresh process, or its group is gone). */
  forgetRank(worker: string, engineIndex: number): void {
    this.byWorker.get(worker)?.delete(engineIndex);
  }
}

/**
 * One rank's figures from one book (`RankStatsBook.exportAll`): rates per second, latency samples in ms (all kept, and
 * those of the last `RATE_WINDOW_S` seconds: `RecentLatency`).
 */
export interface RankStatsExport {
  worker: string;
  engineIndex: number;
  dispatchRate: number;
  tokenRate: number;
  ttftMs: number[];
  itlMs: number[];
  recentTtftMs: number[];
  recentItlMs: number[];
}

/**
 * What `ranksView` reads: per rank (`snapshot`) and for the whole gateway (`recent`); a `RankStatsBook`, or several
 * books merged (`mergeRankStats`).
 */
export type RankStatsSource = Pick<RankStatsBook, 'snapshot' | 'recent'>;

/**
 * Several processes' books as one (`--workers N`): per rank, rates summed and percentiles over the union of the
 * samples (each book's last `RING_SIZE`), and the recent latency over every book's recent samples. Pure; `nowMs` of
 * `snapshot` and `recent` is ignored (each book exported at its own now).
 */
export function mergeRankStats(parts: readonly RankStatsExport[]): RankStatsSource {
  const merged = new Map<string, { dispatchRate: number; tokenRate: number; ttft: number[]; itl: number[] }>();
  const recentTtft: number[] = [];
  const recentItl: number[] = [];
  for (const p of parts) {
    for (const v of p.recentTtftMs) recentTtft.push(v);
    for (const v of p.recentItlMs) recentItl.push(v);
    const key = `${p.engineIndex}\u0000${p.worker}`;
    let m = merged.get(key);
    if (m === undefined) {
      m = { dispatchRate: 0, tokenRate: 0, ttft: [], itl: [] };
      merged.set(key, m);
    }
    m.dispatchRate += p.dispatchRate;
    m.tokenRate += p.tokenRate;
    m.ttft.push(...p.ttftMs);
    m.itl.push(...p.itlMs);
  }
  return {
    recent: () => ({ ttftMs: percentilesOf(recentTtft), itlMs: percentilesOf(recentItl) }),
    snapshot(worker: string, engineIndex: number): RankStatsSnapshot {
      const m = merged.get(`${engineIndex}\u0000${worker}`);
      if (m === undefined)
        return { dispatchRate: 0, tokenRate: 0, ttftMs: percentilesOf([]), itlMs: percentilesOf([]) };
      return {
        dispatchRate: m.dispatchRate,
        tokenRate: m.tokenRate,
        ttftMs: percentilesOf(m.ttft),
        itlMs: percentilesOf(m.itl),
      };
    },
  };
}
