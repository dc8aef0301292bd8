/**
 * bench:fairness's chart (bench/fairness.ts writes it beside fairness.json; bench/redraw-charts.ts draws it again
 * from the committed file). Pure: a function of the results file's `summary` to the SVG document as a string.
 */
import { renderRatioChart } from '../routing/chart.js';

/** A median and its min–max over the seeds. */
interface Spread {
  median: number;
  min: number;
  max: number;
}

type Mode = 'off' | 'on';

/** What the written result says of one mode (`summary.off`, `summary.on`) that the chart reads. */
export interface FairnessModeSummary {
  tenants: Record<string, { share: Spread }>;
  jain: Spread;
  criticalTtftRatio: Spread;
}

/** The y axis's top: without flow control the critical ratio is in the hundreds, every other bar is near 1. */
const CHART_TOP = 5;

/**
 * The chart of a written result (its `summary`): per group, flow control off and on side by side (median, whiskers
 * min–max over the seeds): the critical tenant's TTFT p99 ÷ its unloaded one, each standard-band tenant's share × 2
 * (1.0 = an equal split of the two), and Jain's index. The y axis stops at `CHART_TOP`: a bar or whisker above it
 * (the critical ratio without flow control) is cut there with a caret, and its label gives the real median and max.
 */
export function fairnessChart(json: { summary: Record<Mode, FairnessModeSummary> }): string {
  const std = Object.keys(json.summary.on.tenants).filter((t) => t.startsWith('batch-'));
  const twice = (x: Spread): Spread => ({ median: 2 * x.median, min: 2 * x.min, max: 2 * x.max });
  const series = (m: Mode): Spread[] => [
    json.summary[m].criticalTtftRatio,
    ...std.map((t) => twice(json.summary[m].tenants[t]!.share)),
    json.summary[m].jain,
  ];
  const off = series('off');
  const on = series('on');
  return renderRatioChart({
    title: 'bench:fairness at 2× capacity: flow control off vs on (median, whiskers min–max over seeds)',
    workloads: [
      `critical TTFT p99 ÷ unloaded (axis cut at ${CHART_TOP})`,
      ...std.map((t) => `${t} share × 2`),
      "Jain's index",
    ],
    policies: ['flow control off', 'flow control on'],
    yLabel: 'ratio (1.0: unloaded TTFT, an equal split, fair)',
    yTop: CHART_TOP,
    ratios: off.map((x, i) => [x.median, on[i]!.median]),
    spreads: off.map((x, i) => [
      [x.min, x.max],
      [on[i]!.min, on[i]!.max],
    ]),
  });
}
