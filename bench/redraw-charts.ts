/**
 * `npm run bench:charts`: draws every committed benchmark chart again from its committed results file, without
 * running a benchmark (bench/charts.ts lists them): after a change to the chart code, or to check that the committed
 * SVGs are what their JSON draws.
 *
 * Usage: `npm run bench:charts` (writes bench/results/*.svg), `npm run bench:charts -- --check` (writes nothing;
 * exit code 1 naming each SVG that differs from what its JSON draws).
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { RESULTS_DIR, drawCharts } from './charts.js';

const USAGE = `Usage: npm run bench:charts [-- --check]

Draw every committed benchmark chart (bench/results/*.svg) again from its committed results file.

Options:
  --check   write nothing; exit 1 naming each SVG that differs from what its JSON draws
  --help    show this help
`;
const args = process.argv.slice(2);
if (args.includes('--help')) {
  process.stdout.write(USAGE);
  process.exit(0);
}
const unknown = args.find((a) => a !== '--check');
if (unknown !== undefined) {
  process.stderr.write(`bench:charts: unknown option ${unknown}\n\n${USAGE}`);
  process.exit(2);
}
const check = args.includes('--check');
const stale: string[] = [];
for (const [svg, content] of drawCharts()) {
  const path = join(RESULTS_DIR, svg);
  const old = existsSync(path) ? readFileSync(path, 'utf8') : null;
  if (old === content) {
    console.log(`bench/results/${svg}: unchanged`);
  } else if (check) {
    stale.push(svg);
    console.log(`bench/results/${svg}: differs from what its JSON draws`);
  } else {
    writeFileSync(path, content);
    console.log(`bench/results/${svg}: redrawn`);
  }
}
if (stale.length > 0) {
  console.log('run `npm run bench:charts` to redraw them');
  process.exitCode = 1;
}
