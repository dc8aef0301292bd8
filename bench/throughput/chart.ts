/**
 * The chart of bench:throughput: a hand-written SVG of grouped bars, one group per token scenario, one bar per
 * series (the gateway with each worker count, then the floor stacked by component), bar height = median µs of CPU per
 * token, a whisker from the minimum to the maximum over the repeats. Pure: returns the SVG document as a string.
 * `throughputChart` draws it from a results file (bench/throughput.ts writes both; bench/redraw-charts.ts draws it
 * again from the committed file).
 */
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

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/** Renders the groups as a standalone SVG document (UTF-8 text). Bars with a non-finite median are left out. */
export function renderThroughputChart(title: string, groups: readonly ChartGroup[]): string {
  const W = 900;
  const H = 440;
  const left = 60;
  const right = 20;
  const top = 50;
  const bottom = 100;
  const plotW = W - left - right;
  const plotH = H - top - bottom;
  const values = groups.flatMap((g) => g.bars.flatMap((b) => [b.median, b.max])).filter((v) => Number.isFinite(v));
  const maxV = Math.max(1, ...values);
  const step = maxV > 50 ? 10 : maxV > 20 ? 5 : maxV > 8 ? 2 : 1;
  const niceMax = Math.ceil((maxV * 1.05) / step) * step;
  const y = (v: number): number => top + plotH - (v / niceMax) * plotH;
  const groupW = plotW / Math.max(1, groups.length);
  const maxBars = Math.max(1, ...groups.map((g) => g.bars.length));
  const barW = (groupW * 0.8) / maxBars;
  const series = [...new Set(groups.flatMap((g) => g.bars.map((b) => b.series)))];
  const parts: string[] = [];
  parts.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
  );
  parts.push(`<rect width="${W}" height="${H}" fill="#ffffff"/>`);
  parts.push(`<text x="${W / 2}" y="24" text-anchor="middle" font-size="15" font-weight="bold">${esc(title)}</text>`);
  for (let v = 0; v <= niceMax + 1e-9; v += step) {
    parts.push(
      `<line x1="${left}" x2="${W - right}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}" stroke="#e6e6e6"/>`,
    );
    parts.push(`<text x="${left - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${v}</text>`);
  }
  parts.push(
    `<text x="16" y="${top + plotH / 2}" text-anchor="middle" transform="rotate(-90 16 ${top + plotH / 2})">µs CPU per token</text>`,
  );
  const partLabels: string[] = [];
  groups.forEach((g, gi) => {
    const gx = left + gi * groupW + groupW * 0.1;
    g.bars.forEach((b, bi) => {
      if (!Number.isFinite(b.median)) return;
      const x = gx + bi * barW;
      const w = barW - 3;
      if (b.parts && b.parts.length > 0) {
        let base = 0;
        for (const p of b.parts) {
          if (!partLabels.includes(p.label)) partLabels.push(p.label);
          const color = PART_COLORS[partLabels.indexOf(p.label) % PART_COLORS.length];
          parts.push(
            `<rect x="${x.toFixed(1)}" y="${y(base + p.value).toFixed(1)}" width="${w.toFixed(1)}" height="${(y(base) - y(base + p.value)).toFixed(1)}" fill="${color}"><title>${esc(`${g.label} / ${b.series} / ${p.label}: ${p.value.toFixed(2)} µs`)}</title></rect>`,
          );
          base += p.value;
        }
      } else {
        const color = SERIES_COLORS[series.indexOf(b.series) % SERIES_COLORS.length];
        parts.push(
          `<rect x="${x.toFixed(1)}" y="${y(b.median).toFixed(1)}" width="${w.toFixed(1)}" height="${(top + plotH - y(b.median)).toFixed(1)}" fill="${color}"><title>${esc(`${g.label} / ${b.series}: ${b.median.toFixed(2)} µs`)}</title></rect>`,
        );
      }
      const cx = x + w / 2;
      if (Number.isFinite(b.min) && Number.isFinite(b.max) && b.max > b.min) {
        parts.push(
          `<line x1="${cx.toFixed(1)}" x2="${cx.toFixed(1)}" y1="${y(b.min).toFixed(1)}" y2="${y(b.max).toFixed(1)}" stroke="#222"/>`,
        );
        for (const v of [b.min, b.max])
          parts.push(
            `<line x1="${(cx - 4).toFixed(1)}" x2="${(cx + 4).toFixed(1)}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}" stroke="#222"/>`,
          );
      }
      parts.push(
        `<text x="${cx.toFixed(1)}" y="${(y(Math.max(b.median, b.max)) - 4).toFixed(1)}" text-anchor="middle" font-size="10">${b.median.toFixed(1)}</text>`,
      );
      parts.push(
        `<text x="${cx.toFixed(1)}" y="${top + plotH + 14}" text-anchor="middle" font-size="9">${esc(b.series)}</text>`,
      );
    });
    parts.push(
      `<text x="${(left + gi * groupW + groupW / 2).toFixed(1)}" y="${top + plotH + 32}" text-anchor="middle" font-weight="bold">${esc(g.label)}</text>`,
    );
  });
  parts.push(`<line x1="${left}" x2="${left}" y1="${top}" y2="${top + plotH}" stroke="#333"/>`);
  parts.push(`<line x1="${left}" x2="${W - right}" y1="${top + plotH}" y2="${top + plotH}" stroke="#333"/>`);
  const legend = [
    ...series
      .filter((s) => groups.some((g) => g.bars.some((b) => b.series === s && !b.parts)))
      .map((s) => ({ label: s, color: SERIES_COLORS[series.indexOf(s) % SERIES_COLORS.length]! })),
    ...partLabels.map((p, i) => ({ label: `floor: ${p}`, color: PART_COLORS[i % PART_COLORS.length]! })),
  ];
  legend.forEach((l, i) => {
    const lx = left + (i % 4) * 205;
    const ly = H - 36 + Math.floor(i / 4) * 18;
    parts.push(`<rect x="${lx}" y="${ly - 10}" width="12" height="12" fill="${l.color}"/>`);
    parts.push(`<text x="${lx + 18}" y="${ly}">${esc(l.label)}</text>`);
  });
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
