/**
 * The routing benchmark's chart (issue #5 part 4): a hand-written SVG of grouped bars, one group per workload, one
 * bar per DP policy, bar height = the policy's TTFT p99 divided by round-robin's in the same run (1.0 = a tie; lower
 * is better). A dashed line marks 1.0. Pure: returns the SVG document as a string. `routingChart` draws it from a
 * routing results file (bench/routing.ts writes both; bench/redraw-charts.ts draws it again from the committed file).
 * bench:fairness draws its ratios with the same `renderRatioChart` (bench/fairness/chart.ts).
 */

import {
  chartFrame,
  chooseYAxis,
  esc,
  labelRise,
  labelsTurned,
  legend,
  textWidth,
  tickLabel,
  ticks,
  valueLabels,
  whisker,
  wrapText,
  yTitle,
  CARET_H,
  type ValueLabel,
} from '../chart-svg.js';

/**
 * One bar value: `ratios[workload][policy]` (NaN or non-finite values draw no bar). `spreads` (optional, same shape):
 * a `[min, max]` whisker drawn over each bar (the spread over repeats).
 */
export interface ChartInput {
  title: string;
  workloads: readonly string[];
  policies: readonly string[];
  ratios: readonly (readonly number[])[];
  spreads?: readonly (readonly (readonly [number, number])[])[];
  /** The y axis's title (default `TTFT p99 / round_robin`, the routing benchmark's). */
  yLabel?: string;
  /**
   * The y axis's top (default: chosen from the bars, `chooseYAxis` in bench/chart-svg.ts: at least 1.2, so the 1.0
   * line shows). A bar or whisker above it is drawn to it, ends in a caret, and its value is written in its label.
   */
  yTop?: number;
}

const COLORS = ['#8c8c8c', '#4e79a7', '#59a14f', '#e15759', '#f28e2b', '#76b7b2'];

/** A value label's number: two decimals below 10, one below 100, none above. */
function fmt(v: number): string {
  return v.toFixed(Math.abs(v) >= 100 ? 0 : Math.abs(v) >= 10 ? 1 : 2);
}

/**
 * Render `input` as a standalone SVG document (UTF-8 text). Layout, in px: the chart is 120 + 110 per workload wide
 * (at least 900), the plot 280 high. Every label has room of its own: the title, workload names and y title wrap to
 * their space (bench/chart-svg.ts `wrapText`); each bar's value label stands in its bar's column above the bar and its
 * whisker, turned to read upwards when the values do not fit the column across; the margins above and below the plot
 * grow to hold them. Throws RangeError when `ratios` or `spreads` do not match the labels.
 */
export function renderRatioChart(input: ChartInput): string {
  const { workloads, policies, ratios } = input;
  if (ratios.length !== workloads.length || ratios.some((r) => r.length !== policies.length)) {
    throw new RangeError('ratios must have one row per workload and one column per policy');
  }
  if (
    input.spreads &&
    (input.spreads.length !== workloads.length || input.spreads.some((r) => r.length !== policies.length))
  ) {
    throw new RangeError('spreads must have the shape of ratios');
  }
  const W = Math.max(900, 120 + 110 * workloads.length);
  const right = 20;
  const plotH = 280;
  const whiskerOf = (wi: number, pi: number): readonly [number, number] | null => {
    const s = input.spreads?.[wi]?.[pi];
    return s && Number.isFinite(s[0]) && Number.isFinite(s[1]) ? s : null;
  };
  const axis = chooseYAxis(
    ratios.flatMap((row, wi) => row.map((median, pi) => ({ median, high: whiskerOf(wi, pi)?.[1] }))),
    1.2,
    1.5,
    input.yTop,
  );
  const tickLabels = ticks(axis).map((v) => ({ v, text: tickLabel(v, axis, 2) }));
  const yt = yTitle(input.yLabel ?? 'TTFT p99 / round_robin', 0, plotH);
  const left = Math.ceil(yt.right + 8 + Math.max(...tickLabels.map((t) => textWidth(t.text, 12))) + 6);
  const plotW = W - left - right;
  const groupW = plotW / workloads.length;
  const barW = (groupW * 0.8) / policies.length;
  const colW = barW - 2;

  // Value labels, placed relative to the plot's top (its px is known once the margin above is).
  const titleLines = wrapText(input.title, 15, W - 40);
  const titleBottom = 24 + 19 * (titleLines.length - 1) + 3;
  const yRel = (v: number): number => plotH - (Math.min(v, axis.top) / axis.top) * plotH;
  const labels: ValueLabel[] = [];
  ratios.forEach((row, wi) =>
    row.forEach((v, pi) => {
      if (!Number.isFinite(v)) return;
      const wh = whiskerOf(wi, pi);
      const high = Math.max(v, wh?.[1] ?? v);
      const cut = high > axis.top;
      labels.push({
        x: left + wi * groupW + groupW * 0.1 + pi * barW + colW / 2,
        bottom: cut ? -CARET_H : yRel(high),
        text: cut ? `${fmt(v)} (max ${fmt(high)})` : fmt(v),
      });
    }),
  );
  // 9 px, smaller only if the columns are narrower than that: a turned label is one line (the font size) wide.
  const fs = Math.max(6, Math.min(9, Math.floor(colW - 2)));
  const gap = 3;
  const turned = labelsTurned(labels, fs, colW - 2);
  const rise = labelRise(labels, fs, turned, gap);
  const top = Math.ceil(Math.max(50, titleBottom + 8 + Math.max(0, ...labels.map((l) => rise - l.bottom))));
  const y = (v: number): number => top + yRel(v);

  // Below the plot: the workload names (wrapped to their group), then the legend.
  const nameLines = workloads.map((w) => wrapText(w, 12, groupW - 8));
  const namesTop = top + plotH + 18;
  const namesBottom = namesTop + 14 * (Math.max(1, ...nameLines.map((l) => l.length)) - 1);
  const leg = legend(
    policies.map((p, pi) => ({ label: p, color: COLORS[pi % COLORS.length]! })),
    left,
    W - right,
    namesBottom + 34,
  );
  const H = Math.ceil(leg.lastY + 16);

  const parts: string[] = [];
  parts.push(...chartFrame(W, H, titleLines, tickLabels, { left, right, y }));
  parts.push(...yTitle(input.yLabel ?? 'TTFT p99 / round_robin', top + plotH / 2, plotH).svg);
  workloads.forEach((w, wi) => {
    const gx = left + wi * groupW + groupW * 0.1;
    policies.forEach((p, pi) => {
      const v = ratios[wi][pi];
      if (!Number.isFinite(v)) return;
      const x = gx + pi * barW;
      const cx = x + colW / 2;
      const barTop = y(Math.min(v, axis.top));
      parts.push(
        `<rect x="${x.toFixed(1)}" y="${barTop.toFixed(1)}" width="${colW.toFixed(1)}" height="${(top + plotH - barTop).toFixed(1)}" fill="${COLORS[pi % COLORS.length]}"><title>${esc(`${w} / ${p}: ${v.toFixed(3)}`)}</title></rect>`,
      );
      const wh = whiskerOf(wi, pi);
      if (v > axis.top) {
        // A bar taller than the axis: a break across its top, and the caret (the whisker's, or its own).
        const by = top + 10;
        parts.push(
          `<path d="M${x.toFixed(1)},${(by + 3).toFixed(1)} L${(x + colW).toFixed(1)},${(by - 3).toFixed(1)} M${x.toFixed(1)},${(by + 7).toFixed(1)} L${(x + colW).toFixed(1)},${(by + 1).toFixed(1)}" stroke="#ffffff" stroke-width="2"/>`,
        );
      }
      if (wh) parts.push(...whisker(cx, wh[0], wh[1], axis, y, 4).svg);
      else if (v > axis.top) parts.push(...whisker(cx, v, v, axis, y, 4).svg);
    });
    nameLines[wi]!.forEach((line, i) =>
      parts.push(
        `<text x="${(left + wi * groupW + groupW / 2).toFixed(1)}" y="${namesTop + 14 * i}" text-anchor="middle">${esc(line)}</text>`,
      ),
    );
  });
  if (axis.top >= 1)
    parts.push(
      `<line x1="${left}" x2="${W - right}" y1="${y(1).toFixed(1)}" y2="${y(1).toFixed(1)}" stroke="#333" stroke-dasharray="5,4"/>`,
    );
  parts.push(`<line x1="${left}" x2="${left}" y1="${top}" y2="${top + plotH}" stroke="#333"/>`);
  parts.push(`<line x1="${left}" x2="${W - right}" y1="${top + plotH}" y2="${top + plotH}" stroke="#333"/>`);
  parts.push(
    ...valueLabels(
      labels.map((l) => ({ ...l, bottom: top + l.bottom })),
      fs,
      turned,
      gap,
    ),
  );
  parts.push(...leg.svg);
  parts.push('</svg>');
  return parts.join('\n') + '\n';
}

/** A median and its min–max spread; `null` where the results file holds no finite value (JSON writes NaN as null). */
export interface SpreadJson {
  median: number | null;
  min: number | null;
  max: number | null;
}

/** What `routingChart` reads of a routing results file (bench/results/routing*.json, written by bench/routing.ts). */
export interface RoutingResults {
  seeds: readonly number[];
  group: { ranks: number; slowRank: number; slowdown: number };
  /** One entry per workload, in the chart's order; each has one entry per policy, in the bars' order (the same in all). */
  workloads: ReadonlyArray<{
    name: string;
    policies: Readonly<Record<string, { ratioToRoundRobin: { ttftP99: SpreadJson } }>>;
  }>;
}

const num = (v: number | null): number => v ?? Number.NaN;

/**
 * The routing benchmark's chart of `results`: per workload, each policy's TTFT p99 divided by round_robin's in the
 * same seed, median with its min–max over the seeds (`ratioToRoundRobin.ttftP99`).
 */
export function routingChart(results: RoutingResults): string {
  const { seeds, group, workloads } = results;
  const policies = Object.keys(workloads[0]?.policies ?? {});
  const cells = workloads.map((w) => policies.map((p) => w.policies[p]?.ratioToRoundRobin.ttftP99));
  return renderRatioChart({
    title: `TTFT p99 relative to round_robin, median and min-max over ${seeds.length} seeds (lower is better; ${group.ranks} ranks, rank ${group.slowRank} ${group.slowdown}x slower)`,
    workloads: workloads.map((w) => w.name),
    policies,
    ratios: cells.map((r) => r.map((s) => num(s?.median ?? null))),
    spreads: cells.map((r) => r.map((s) => [num(s?.min ?? null), num(s?.max ?? null)] as const)),
  });
}
