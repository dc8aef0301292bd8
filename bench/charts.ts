/**
 * Every committed benchmark chart as a function of its committed results file (bench/results/): `routing.json` →
 * `routing.svg` and each `routing-ranksR.json` → `routing-ranksR.svg` (bench/routing/chart.ts), `throughput.json` →
 * `throughput.svg` (bench/throughput/chart.ts), `fairness.json` → `fairness.svg` (bench/fairness/chart.ts). The
 * benchmarks' `--write` draws with the same functions, so an SVG drawn here from the committed JSON is the one the run
 * wrote, drawn with the chart code of now. Used by bench/redraw-charts.ts (`npm run bench:charts`) and the charts'
 * tests.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fairnessChart, type FairnessModeSummary } from './fairness/chart.js';
import { routingChart, type RoutingResults } from './routing/chart.js';
import { throughputChart, type ThroughputResults } from './throughput/chart.js';

/** bench/results/, absolute. */
export const RESULTS_DIR = fileURLToPath(new URL('./results/', import.meta.url));

/** One chart: the results file it is drawn from and the SVG file it is written to (both names in the folder). */
export interface ChartSource {
  json: string;
  svg: string;
  draw: (results: unknown) => string;
}

/** The charts whose results file is in `dir` (default bench/results/), in file-name order. */
export function chartSources(dir: string = RESULTS_DIR): ChartSource[] {
  const out: ChartSource[] = [];
  for (const name of readdirSync(dir).sort()) {
    const base = name.replace(/\.json$/, '');
    if (/^routing(-ranks\d+)?\.json$/.test(name))
      out.push({ json: name, svg: `${base}.svg`, draw: (r) => routingChart(r as RoutingResults) });
    else if (name === 'throughput.json')
      out.push({ json: name, svg: `${base}.svg`, draw: (r) => throughputChart(r as ThroughputResults) });
    else if (name === 'fairness.json')
      out.push({
        json: name,
        svg: `${base}.svg`,
        draw: (r) => fairnessChart(r as { summary: Record<'off' | 'on', FairnessModeSummary> }),
      });
  }
  return out;
}

/** Each chart of `dir` drawn from its results file: SVG file name → SVG document. Reads, writes nothing. */
export function drawCharts(dir: string = RESULTS_DIR): Map<string, string> {
  return new Map(
    chartSources(dir).map((c) => [c.svg, c.draw(JSON.parse(readFileSync(join(dir, c.json), 'utf8')) as unknown)]),
  );
}
