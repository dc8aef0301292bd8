/**
 * Summary statistics of the routing benchmark (issue #5 part 4): percentiles of TTFT and ITL samples, throughput and
 * per-rank token share. Pure functions; units are whatever the samples carry (the benchmark uses simulated ms).
 */

/**
 * The `p`-th percentile (p in 0..100) of `samples` by linear interpolation between closest ranks; NaN when empty.
 * Does not modify `samples`. Throws RangeError for p outside 0..100.
 */
export function percentile(samples: readonly number[], p: number): number {
  if (!(p >= 0 && p <= 100)) throw new RangeError(`percentile must be in 0..100, got ${p}`);
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const pos = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

/** What one (workload, policy) run measured. Times in simulated ms; throughput in tokens per simulated second. */
export interface RunMetrics {
  ttftP50: number;
  ttftP99: number;
  itlP50: number;
  itlP99: number;
  /** Generated tokens of the measured requests / (last finish − first submit), per simulated second. */
  throughput: number;
  /** Per DP rank (engine index order 0..n-1): the ratio 0..1 of measured generated tokens served there. */
  tokenShare: number[];
  /** Measured requests that finished with a finish reason other than `length` (should be 0). */
  failures: number;
  /** Simulated ms from the first measured submit to the last measured finish. */
  spanMs: number;
  /** Preemptions summed over the ranks during the measured phase. */
  preemptions: number;
  /**
   * Per engine index: the stored `num_running` the engine client held when the measured phase started (null = no
   * report yet). Shows a stale report kept by `load_no_clamp` after an idle phase (dp-routing.md 10.3).
   */
  storedRunningAtStart: (number | null)[];
  /** Prompt tokens the ranks served from their prefix cache / all prompt tokens of the measured requests (0..1). */
  prefixHitRate: number;
  /** µs in the policy per request: the median `select` call plus the median `onDispatch` call of the measured phase. */
  selectionUs: number;
  /**
   * Routing precision (issue 29): of the prompt tokens the policy predicted the chosen rank would serve from its
   * cache, the share it did (Σ min(predicted, reported cached_tokens) / Σ predicted) over the measured phase; NaN for
   * a policy that predicts nothing (all but `cache_aware`).
   */
  routingPrecision: number;
}

/** The metric keys tabulated and compared with round-robin (ratio = policy / round_robin). */
export const METRIC_KEYS = ['ttftP50', 'ttftP99', 'itlP50', 'itlP99', 'throughput'] as const;
/** One of `METRIC_KEYS`. */
export type MetricKey = (typeof METRIC_KEYS)[number];

/** `value / baseline`, or NaN when the baseline is 0 or not finite. */
export function ratio(value: number, baseline: number): number {
  return Number.isFinite(baseline) && baseline !== 0 ? value / baseline : Number.NaN;
}
