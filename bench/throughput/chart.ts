/**
 * The chart of bench:throughput: a hand-written SVG of grouped bars, one group per token scenario, one bar per
 * series (the gateway with each worker count, then the floor stacked by component), bar height = median µs of CPU per
 * token, a whisker from the minimum to the maximum over the repeats. Pure: returns the SVG document as a string.
 * `throughputChart` draws it from a results file (bench/throughput.ts writes both; bench/redraw-charts.ts draws it
 * again from the committed file).
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
import { floorFigures, tokenFloor, type FloorSample, type ScenarioSpec } from './figures.js';

/** One bar: its median, spread and, for a stacked bar, the parts (label → µs) that add up to it. */
export interface ChartBar {
  series: string;
  median: number;
  min: number;
  max: number;
  parts?: Array<{ label: string; value: number }>;
}

/** One group of bars. */
export interface ChartGroup {
  label: string;
  bars: ChartBar[];
}

const SERIES_COLORS = ['#4e79a7', '#f28e2b', '#59a14f', '#76b7b2'];
const PART_COLORS = ['#bab0ac', '#9c755f', '#edc948', '#b07aa1'];

/**
 * Renders the groups as a standalone SVG document (UTF-8 text). Bars with a non-finite median are left out. Layout,
 * in px: 900 wide, the plot 300 high; the y axis's top is chosen from the bars (bench/chart-svg.ts `chooseYAxis`), a
 * whisker above it is cut there with a caret and its maximum written in the bar's label. Each bar's value label stands
 * in its bar's column above the bar and whisker (turned to read upwards if the values do not fit the column across);
 * under the axis each bar's series name and each group's name wrap to their column and group, and the legend flows in
 * rows, so no two labels share space.
 */
export function renderThroughputChart(title: string, groups: readonly ChartGroup[]): string {
  const W = 900;
  const right = 20;
  const plotH = 300;
  const bars = groups.flatMap((g) => g.bars).filter((b) => Number.isFinite(b.median));
  const hasWhisker = (b: ChartBar): boolean => Number.isFinite(b.min) && Number.isFinite(b.max) && b.max > b.min;
  const axis = chooseYAxis(
    bars.map((b) => ({ median: b.median, high: hasWhisker(b) ? b.max : undefined })),
    1,
  );
  const tickLabels = ticks(axis).map((v) => ({ v, text: tickLabel(v, axis) }));
  const yt = yTitle('µs CPU per token', 0, plotH);
  const left = Math.ceil(yt.right + 8 + Math.max(...tickLabels.map((t) => textWidth(t.text, 12))) + 6);
  const plotW = W - left - right;
  const groupW = plotW / Math.max(1, groups.length);
  const maxBars = Math.max(1, ...groups.map((g) => g.bars.length));
  const barW = (groupW * 0.8) / maxBars;
  const w = barW - 3;
  const series = [...new Set(groups.flatMap((g) => g.bars.map((b) => b.series)))];

  const titleLines = wrapText(title, 15, W - 40);
  const titleBottom = 24 + 19 * (titleLines.length - 1) + 3;
  const yRel = (v: number): number => plotH - (Math.min(Math.max(v, 0), axis.top) / axis.top) * plotH;
  const labels: ValueLabel[] = [];
  groups.forEach((g, gi) =>
    g.bars.forEach((b, bi) => {
      if (!Number.isFinite(b.median)) return;
      const high = Math.max(b.median, hasWhisker(b) ? b.max : b.median);
      const cut = high > axis.top;
      labels.push({
        x: left + gi * groupW + groupW * 0.1 + bi * barW + w / 2,
        bottom: cut ? -CARET_H : yRel(high),
        text: cut ? `${b.median.toFixed(1)} (max ${high.toFixed(1)})` : b.median.toFixed(1),
      });
    }),
  );
  const fs = Math.max(6, Math.min(10, Math.floor(w - 2)));
  const gap = 4;
  const turned = labelsTurned(labels, fs, w - 2);
  const rise = labelRise(labels, fs, turned, gap);
  const top = Math.ceil(Math.max(50, titleBottom + 8 + Math.max(0, ...labels.map((l) => rise - l.bottom))));
  const y = (v: number): number => top + yRel(v);

  // Under the axis: each bar's series name (9 px, wrapped to its column), then each group's name (bold, wrapped to
  // its group), then the legend.
  const seriesLines = groups.map((g) => g.bars.map((b) => wrapText(b.series, 9, w)));
  const seriesTop = top + plotH + 14;
  const seriesRows = Math.max(1, ...seriesLines.flat().map((l) => l.length));
  const groupLines = groups.map((g) => wrapText(g.label, 12, groupW - 8));
  const groupTop = seriesTop + 11 * (seriesRows - 1) + 18;
  const groupBottom = groupTop + 14 * (Math.max(1, ...groupLines.map((l) => l.length)) - 1);

  const parts: string[] = [];
  const partLabels: string[] = [];
  const body: string[] = [];
  groups.forEach((g, gi) => {
    const gx = left + gi * groupW + groupW * 0.1;
    g.bars.forEach((b, bi) => {
      if (!Number.isFinite(b.median)) return;
      const x = gx + bi * barW;
      const rect = (from: number, to: number, color: string, tip: string): void => {
        const y0 = y(from);
        const y1 = y(to);
        if (y0 - y1 > 0)
          body.push(
            `<rect x="${x.toFixed(1)}" y="${y1.toFixed(1)}" width="${w.toFixed(1)}" height="${(y0 - y1).toFixed(1)}" fill="${color}"><title>${esc(tip)}</title></rect>`,
          );
      };
      if (b.parts && b.parts.length > 0) {
        let base = 0;
        for (const p of b.parts) {
          if (!partLabels.includes(p.label)) partLabels.push(p.label);
          const color = PART_COLORS[partLabels.indexOf(p.label) % PART_COLORS.length]!;
          rect(base, base + p.value, color, `${g.label} / ${b.series} / ${p.label}: ${p.value.toFixed(2)} µs`);
          base += p.value;
        }
      } else {
        const color = SERIES_COLORS[series.indexOf(b.series) % SERIES_COLORS.length]!;
        rect(0, b.median, color, `${g.label} / ${b.series}: ${b.median.toFixed(2)} µs`);
      }
      const cx = x + w / 2;
      if (b.median > axis.top) {
        // A bar taller than the axis: a break across its top.
        const by = top + 10;
        body.push(
          `<path d="M${x.toFixed(1)},${(by + 3).toFixed(1)} L${(x + w).toFixed(1)},${(by - 3).toFixed(1)} M${x.toFixed(1)},${(by + 7).toFixed(1)} L${(x + w).toFixed(1)},${(by + 1).toFixed(1)}" stroke="#ffffff" stroke-width="2"/>`,
        );
      }
      if (hasWhisker(b)) body.push(...whisker(cx, b.min, b.max, axis, y, 8).svg);
      else if (b.median > axis.top) body.push(...whisker(cx, b.median, b.median, axis, y, 8).svg);
      seriesLines[gi]![bi]!.forEach((line, i) =>
        body.push(
          `<text x="${cx.toFixed(1)}" y="${seriesTop + 11 * i}" text-anchor="middle" font-size="9">${esc(line)}</text>`,
        ),
      );
    });
    groupLines[gi]!.forEach((line, i) =>
      body.push(
        `<text x="${(left + gi * groupW + groupW / 2).toFixed(1)}" y="${groupTop + 14 * i}" text-anchor="middle" font-weight="bold">${esc(line)}</text>`,
      ),
    );
  });
  const leg = legend(
    [
      ...series
        .filter((s) => groups.some((g) => g.bars.some((b) => b.series === s && !b.parts)))
        .map((s) => ({ label: s, color: SERIES_COLORS[series.indexOf(s) % SERIES_COLORS.length]! })),
      ...partLabels.map((p, i) => ({ label: `floor: ${p}`, color: PART_COLORS[i % PART_COLORS.length]! })),
    ],
    left,
    W - right,
    groupBottom + 30,
  );
  const H = Math.ceil(leg.lastY + 16);

  parts.push(...chartFrame(W, H, titleLines, tickLabels, { left, right, y }));
  parts.push(...yTitle('µs CPU per token', top + plotH / 2, plotH).svg);
  parts.push(...body);
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
interface SpreadJson {
  median: number | null;
  min: number | null;
  max: number | null;
}

/** What `throughputChart` reads of a results file (bench/results/throughput.json, written by bench/throughput.ts). */
export interface ThroughputResults {
  args: { ranks: number; maxTokens: number; workers: readonly number[] };
  /** Worker counts asked for but not run (the chart leaves them out). */
  unavailableWorkers: readonly number[];
  scenarios: readonly ScenarioSpec[];
  figures: ReadonlyArray<{ scenario: string; workers: number; gatewayPerUnit: SpreadJson }>;
  floors: { samples: readonly FloorSample[] };
}

const num = (v: number | null): number => v ?? Number.NaN;

/** Token-phase chart groups: the gateway per worker count, then the stacked floor. */
function chartGroups(results: ThroughputResults): ChartGroup[] {
  const floors = results.floors.samples;
  const workers = results.args.workers.filter((w) => !results.unavailableWorkers.includes(w));
  const ff = floorFigures(floors, []);
  return results.scenarios
    .filter((s) => s.kind === 'token')
    .map((spec) => {
      const bars: ChartGroup['bars'] = [];
      for (const w of workers) {
        const f = results.figures.find((x) => x.scenario === spec.name && x.workers === w);
        if (f)
          bars.push({
            series: `gateway w${w}`,
            median: num(f.gatewayPerUnit.median),
            min: num(f.gatewayPerUnit.min),
            max: num(f.gatewayPerUnit.max),
          });
      }
      if (floors.length > 0) {
        const total = floors.map((f) => tokenFloor(spec, f)).sort((a, b) => a - b);
        const sse = floors.map((f) => f.sseChunk[spec.streams] ?? Number.NaN).sort((a, b) => a - b);
        const parts = [
          { label: 'ZeroMQ row', value: ff.zmqRow.median },
          { label: 'detokenize (table)', value: ff.detokTable.median },
          ...(spec.stream ? [{ label: 'SSE chunk', value: sse[sse.length >> 1]! }] : []),
        ];
        bars.push({
          series: 'floor',
          median: parts.reduce((a, p) => a + p.value, 0),
          min: total[0]!,
          max: total[total.length - 1]!,
          parts,
        });
      }
      return { label: spec.name, bars };
    });
}

/** The chart of a throughput results file: the token scenarios' gateway CPU per token beside their floor. */
export function throughputChart(results: ThroughputResults): string {
  return renderThroughputChart(
    `Gateway CPU per token vs floor (${results.args.ranks} sim ranks at time-scale 0, max_tokens ${results.args.maxTokens}; median, min–max)`,
    chartGroups(results),
  );
}
