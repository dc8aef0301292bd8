/**
 * Aggregation of the routing benchmark's repeats (issue 12 part 6): each (workload, policy) cell is run once per
 * seed, and every number is reported as the median with the spread (min-max) over the seeds. Ratios are **paired**:
 * a policy's metric divided by the baseline's metric from the same seed (the same requests, arrivals and prompts),
 * then summarised, so a ratio whose whole range lies below or above 1 is outside the run-to-run noise. Pure.
 */
import type { RunMetrics } from './stats.js';

/** The metrics summarised per cell (all numbers of `RunMetrics` that have a direction). */
export const SUMMARY_KEYS = [
  'ttftP50',
  'ttftP99',
  'itlP50',
  'itlP99',
  'throughput',
  'prefixHitRate',
  'selectionUs',
  'routingPrecision',
] as const;
/** One of `SUMMARY_KEYS`. */
export type SummaryKey = (typeof SUMMARY_KEYS)[number];

/** Median and spread of some samples. NaN everywhere when no sample is finite. */
export interface Spread {
  median: number;
  min: number;
  max: number;
}

/** Median (mean of the middle two for an even count), min and max of the finite values of `xs`. */
export function spreadOf(xs: readonly number[]): Spread {
  const v = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return { median: Number.NaN, min: Number.NaN, max: Number.NaN };
  const mid = Math.floor(v.length / 2);
  const median = v.length % 2 === 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
  return { median, min: v[0], max: v[v.length - 1] };
}

/** Every summary key's spread over `runs` (one per seed). */
export function summarize(runs: readonly RunMetrics[]): Record<SummaryKey, Spread> {
  return Object.fromEntries(SUMMARY_KEYS.map((k) => [k, spreadOf(runs.map((r) => r[k]))])) as Record<
    SummaryKey,
    Spread
  >;
}

/**
 * Paired ratios `runs[i][k] / baseline[i][k]` per seed, summarised per key. Throws RangeError when the two lists
 * differ in length (they must come from the same seeds). A ratio with a zero or non-finite baseline is left out.
 */
export function pairedRatios(runs: readonly RunMetrics[], baseline: readonly RunMetrics[]): Record<SummaryKey, Spread> {
  if (runs.length !== baseline.length)
    throw new RangeError(`paired ratios need the same seeds: ${runs.length} vs ${baseline.length} runs`);
  const ratio = (a: number, b: number): number => (Number.isFinite(b) && b !== 0 ? a / b : Number.NaN);
  return Object.fromEntries(
    SUMMARY_KEYS.map((k) => [k, spreadOf(runs.map((r, i) => ratio(r[k], baseline[i][k])))]),
  ) as Record<SummaryKey, Spread>;
}

/**
 * Whether `candidate` ties or beats `reference` on a metric where lower is better: its median is at most the
 * reference's worst (max) run. With `higherIsBetter`, at least the reference's worst (min) run.
 */
export function tiesOrBeats(candidate: Spread, reference: Spread, higherIsBetter = false): boolean {
  return higherIsBetter ? candidate.median >= reference.min : candidate.median <= reference.max;
}

/**
 * Whether `candidate` is worse than `reference` beyond the run-to-run noise: the two spreads do not overlap and the
 * candidate's lies on the bad side (above for lower-is-better metrics, below with `higherIsBetter`).
 */
export function losesOutsideSpread(candidate: Spread, reference: Spread, higherIsBetter = false): boolean {
  return higherIsBetter ? candidate.max < reference.min : candidate.min > reference.max;
}

/** `12.3 [11.0–14.1]` with `digits` decimals; `-` for NaN. */
export function formatSpread(s: Spread, digits: number, suffix = ''): string {
  const f = (x: number): string => (Number.isFinite(x) ? x.toFixed(digits) : '-');
  if (!Number.isFinite(s.median)) return '-';
  return `${f(s.median)}${suffix} [${f(s.min)}–${f(s.max)}]`;
}
