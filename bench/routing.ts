/**
 * Routing-quality benchmark (issue #5 parts 3-4, issue 12 part 6; dp-routing.md sections 9.2, 10.2-10.3, 14): runs
 * every DP policy (`round_robin`, `inflight`, `load`, `load_no_clamp`, `cache_aware`, `oracle`;
 * src/engine-client/policies.ts) over every seeded workload (bench/routing/workloads.ts: six without shared prefixes;
 * six with, three of them sized so that the shared set exceeds one rank's cache and three where `load` gets the hits
 * too) through the real engine-client path (EngineClient.submit → ZmqEngineLink → ZeroMQ → in-process simulated
 * TokenSpeed ranks with prefix caches, one of them slowed 2×), once per seed. Prints per workload TTFT p50/p99, ITL
 * p99 (simulated ms), throughput (tokens per simulated second), prefix-cache hit rate and the policy's selection cost
 * (µs per request), each as the median over the seeds with its min-max spread, plus paired ratios to `load` and to
 * `round_robin` (same seed, same requests), and each shared-prefix workload's hit-rate ceiling (`hitRateCeiling`). Then
 * the issue 12 targets, measured, each hit-rate target beside its ceiling, and the default rule (`defaultVerdict`).
 *
 * Usage: `npm run bench:routing` (= `npx tsx bench/routing.ts`), options `--requests N` (measured requests per
 * workload, default 200), `--seeds K` (repeats per cell, default 3), `--seed S` (the first seed; the others follow),
 * `--time-scale X` (wall ms per simulated ms, default 0.5; use a power of two), `--workloads a,b` and `--policies
 * a,b` (subsets), `--ranks R` (ranks in the group, default 4; the slowed rank stays the last one; the workloads'
 * arrival rates do not change with R), `--write` (write bench/results/routing.json and routing.svg, or
 * routing-ranksR.json / .svg for R ≠ 4; without it nothing is written). A progress bar goes to stderr.
 */
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { DP_POLICY_NAMES, isDpPolicyName, type DpPolicyName } from '../src/engine-client/policies.js';
import { GatewayTokenizer } from '../src/tokenizer/tokenizer.js';
import { routingChart } from './routing/chart.js';
import { benchFailed, benchGroup, groupJson, markdownTable, writeResult } from './routing/report.js';
import { runOnce, type GroupConfig } from './routing/run.js';
import type { RunMetrics } from './routing/stats.js';
import {
  formatSpread,
  losesOutsideSpread,
  pairedRatios,
  spreadOf,
  summarize,
  tiesOrBeats,
  type Spread,
  type SummaryKey,
} from './routing/summary.js';
import { buildWorkloads, hitRateCeiling, type Workload } from './routing/workloads.js';

interface Args {
  requests: number;
  seeds: number;
  seed: number;
  timeScale: number;
  workloads: string[] | null;
  policies: DpPolicyName[];
  ranks: number;
  write: boolean;
}

const USAGE = `npm run bench:routing -- [options]
  --requests N      measured requests per workload (200)
  --seeds K         repeats per cell (3); --seed S the first seed (20261130), the others follow
  --time-scale X    wall ms per simulated ms (0.5; use a power of two)
  --workloads a,b   a subset of the workloads; --policies a,b a subset of the DP policies (load and round_robin are
                    always run: they are the ratio bases)
  --ranks R         ranks in the group (4; the last one is slowed 2x)
  --write           write bench/results/routing.json and routing.svg (routing-ranksR.* for R != 4)
  --help            this text`;

/** The workloads without shared prefixes (issue #5), on which cache_aware must not lose to load. */
const CLASSIC = ['uniform', 'heavy_tail', 'long_prompt', 'bursty', 'idle_recovery', 'second_client'];
/** The workloads with the issue 12 targets on TTFT p50 and hit rate. */
const PREFIX_TARGETS = ['multi_turn', 'shared_prompt'];
/** Their variants where load gets the hits too (bench/routing/workloads.ts): the same ratios, shown, no target. */
const PREFIX_VARIANTS = ['multi_turn_shared_system', 'shared_prompt_zipf', 'shared_prompt_fits', 'rag'];

function parseCli(argv: string[]): Args {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    allowPositionals: false,
    options: {
      requests: { type: 'string', default: '200' },
      seeds: { type: 'string', default: '3' },
      seed: { type: 'string', default: '20261130' },
      'time-scale': { type: 'string', default: '0.5' },
      workloads: { type: 'string' },
      policies: { type: 'string' },
      ranks: { type: 'string', default: '4' },
      write: { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help === true) {
    console.log(USAGE);
    process.exit(0);
  }
  const int = (name: string, v: string | undefined, min: number): number => {
    const n = Number(v);
    if (!Number.isSafeInteger(n) || n < min) throw new RangeError(`--${name} must be an integer ≥ ${min}, got ${v}`);
    return n;
  };
  const timeScale = Number(values['time-scale']);
  if (!(Number.isFinite(timeScale) && timeScale > 0)) throw new RangeError('--time-scale must be a number > 0');
  const policies = values.policies === undefined ? [...DP_POLICY_NAMES] : values.policies.split(',');
  const bad = policies.filter((n) => !isDpPolicyName(n));
  if (bad.length > 0) throw new RangeError(`unknown policy ${bad.join(', ')}; valid: ${DP_POLICY_NAMES.join(', ')}`);
  const chosen = policies as DpPolicyName[];
  for (const baseline of ['load', 'round_robin'] as const) if (!chosen.includes(baseline)) chosen.unshift(baseline); // ratio bases
  return {
    requests: int('requests', values.requests, 1),
    seeds: int('seeds', values.seeds, 1),
    seed: int('seed', values.seed, 0),
    timeScale,
    workloads: values.workloads === undefined ? null : values.workloads.split(','),
    policies: DP_POLICY_NAMES.filter((p) => chosen.includes(p)),
    ranks: int('ranks', values.ranks, 2),
    write: values.write === true,
  };
}

function progress(done: number, total: number, label: string, startMs: number): void {
  const width = 30;
  const filled = Math.round((done / total) * width);
  const secs = ((performance.now() - startMs) / 1000).toFixed(0);
  process.stderr.write(
    `\r[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${done}/${total} ${secs}s ${label}`.padEnd(100),
  );
}

/** Per workload and policy: one run per seed, in seed order. */
type Results = Map<string, Map<DpPolicyName, RunMetrics[]>>;

interface Cell {
  summary: Record<SummaryKey, Spread>;
  toLoad: Record<SummaryKey, Spread>;
  toRoundRobin: Record<SummaryKey, Spread>;
}

function cellsOf(per: Map<DpPolicyName, RunMetrics[]>): Map<DpPolicyName, Cell> {
  const load = per.get('load') as RunMetrics[];
  const rr = per.get('round_robin') as RunMetrics[];
  return new Map(
    [...per].map(([p, runs]) => [
      p,
      { summary: summarize(runs), toLoad: pairedRatios(runs, load), toRoundRobin: pairedRatios(runs, rr) },
    ]),
  );
}

function table(w: Workload, cells: Map<DpPolicyName, Cell>): string {
  const header = [
    'policy',
    'TTFT p50 ms',
    'TTFT p99 ms',
    'ITL p99 ms',
    'tok/s',
    'prefix hits',
    'TTFT p50 / load',
    'TTFT p99 / load',
    'TTFT p99 / rr',
    'select µs',
  ];
  const rows: string[][] = [header];
  for (const [p, c] of cells) {
    const s = c.summary;
    rows.push([
      p,
      formatSpread(s.ttftP50, 1),
      formatSpread(s.ttftP99, 0),
      formatSpread(s.itlP99, 1),
      formatSpread(s.throughput, 0),
      formatSpread(
        { median: s.prefixHitRate.median * 100, min: s.prefixHitRate.min * 100, max: s.prefixHitRate.max * 100 },
        0,
        '%',
      ),
      formatSpread(c.toLoad.ttftP50, 2, '×'),
      formatSpread(c.toLoad.ttftP99, 2, '×'),
      formatSpread(c.toRoundRobin.ttftP99, 2, '×'),
      formatSpread(s.selectionUs, 1),
    ]);
  }
  return [`### ${w.name}`, ...markdownTable(rows), `_${w.description}_`].join('\n');
}

/** The issue 12 "Done when" targets, measured: one line each, `met` or `NOT met` with the numbers. */
function targets(
  cellsByWorkload: Map<string, Map<DpPolicyName, Cell>>,
  ceilings: Map<string, Spread>,
): { lines: string[]; verdicts: Record<string, boolean> } {
  const lines: string[] = [];
  const verdicts: Record<string, boolean> = {};
  const verdict = (key: string, ok: boolean, text: string): void => {
    verdicts[key] = ok;
    lines.push(`- ${ok ? 'met    ' : 'NOT met'} ${text}`);
  };
  for (const w of PREFIX_TARGETS) {
    const cells = cellsByWorkload.get(w);
    const ca = cells?.get('cache_aware');
    const ld = cells?.get('load');
    if (!ca || !ld) continue;
    const ttft = ca.toLoad.ttftP50;
    verdict(
      `${w}.ttftP50`,
      ttft.max <= 0.5,
      `${w}: cache_aware TTFT p50 / load = ${formatSpread(ttft, 2, '×')} (target ≤ 0.5× on every seed)`,
    );
    const hits = ca.toLoad.prefixHitRate;
    verdict(
      `${w}.hitRate`,
      hits.min >= 2,
      `${w}: cache_aware prefix hit rate / load = ${formatSpread(hits, 2, '×')} (target ≥ 2× on every seed)`,
    );
    lines.push(`    ${ceilingNote(ceilings.get(w), ca.summary.prefixHitRate, ld.summary.prefixHitRate)}`);
  }
  for (const w of PREFIX_VARIANTS) {
    const ca = cellsByWorkload.get(w)?.get('cache_aware');
    if (!ca) continue;
    lines.push(
      `- (no target) ${w}: cache_aware TTFT p50 / load = ${formatSpread(ca.toLoad.ttftP50, 2, '×')}, prefix hit rate / load = ${formatSpread(ca.toLoad.prefixHitRate, 2, '×')}`,
    );
    const ld = cellsByWorkload.get(w)?.get('load');
    if (ld) lines.push(`    ${ceilingNote(ceilings.get(w), ca.summary.prefixHitRate, ld.summary.prefixHitRate)}`);
  }
  for (const w of CLASSIC) {
    const ca = cellsByWorkload.get(w)?.get('cache_aware');
    const ld = cellsByWorkload.get(w)?.get('load');
    if (!ca || !ld) continue;
    verdict(
      `${w}.ttftP99`,
      tiesOrBeats(ca.summary.ttftP99, ld.summary.ttftP99),
      `${w}: cache_aware TTFT p99 ${formatSpread(ca.summary.ttftP99, 0)} vs load ${formatSpread(ld.summary.ttftP99, 0)} ms (target: median within load's spread or better)`,
    );
  }
  return { lines, verdicts };
}

/**
 * One line on what the hit-rate target can reach: the workload's ceiling (`hitRateCeiling`, per seed), cache_aware's
 * hit rate as a share of it, and the hit rate 2× load's would need (medians over the seeds; percent).
 */
function ceilingNote(ceiling: Spread | undefined, ca: Spread, ld: Spread): string {
  const pct = (s: Spread): Spread => ({ median: s.median * 100, min: s.min * 100, max: s.max * 100 });
  if (ceiling === undefined) return '(no hit-rate ceiling computed)';
  const twice = 2 * ld.median;
  return (
    `hit-rate ceiling (every request where its shared prefix is, nothing evicted) ${formatSpread(pct(ceiling), 1, '%')}; ` +
    `cache_aware reaches ${((ca.median / ceiling.median) * 100).toFixed(0)}% of it; 2× load's median would be ${(twice * 100).toFixed(1)}%` +
    (twice > ceiling.max ? ' (above the ceiling: the 2× target cannot be met here)' : '')
  );
}

/**
 * Whether cache_aware ties or beats load on every workload (TTFT p50, TTFT p99, ITL p99, throughput): the rule for
 * making it the default. A loss counts only outside the spread (the seeds' ranges do not overlap).
 */
function defaultVerdict(cellsByWorkload: Map<string, Map<DpPolicyName, Cell>>): string[] {
  const out: string[] = [];
  for (const [w, cells] of cellsByWorkload) {
    const ca = cells.get('cache_aware')?.summary;
    const ld = cells.get('load')?.summary;
    if (!ca || !ld) continue;
    const losses = [
      losesOutsideSpread(ca.ttftP50, ld.ttftP50) ? 'TTFT p50' : null,
      losesOutsideSpread(ca.ttftP99, ld.ttftP99) ? 'TTFT p99' : null,
      losesOutsideSpread(ca.itlP99, ld.itlP99) ? 'ITL p99' : null,
      losesOutsideSpread(ca.throughput, ld.throughput, true) ? 'throughput' : null,
    ].filter((x) => x !== null);
    out.push(
      `- ${w}: ${losses.length === 0 ? 'ties or beats load' : `loses to load (outside the spread) on ${losses.join(', ')}`}`,
    );
  }
  return out;
}

async function main(): Promise<void> {
  const args = parseCli(process.argv.slice(2));
  const seeds = Array.from({ length: args.seeds }, (_, i) => args.seed + i);
  const names = buildWorkloads({ requests: args.requests, seed: seeds[0] }).map((w) => w.name);
  const picked = args.workloads === null ? names : names.filter((n) => args.workloads?.includes(n));
  if (picked.length === 0) throw new RangeError(`no workload matches; valid: ${names.join(', ')}`);
  const tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  const group: GroupConfig = benchGroup(args.ranks, args.timeScale, tokenizer);
  const total = seeds.length * picked.length * args.policies.length;
  const loadBefore = loadavg()[0];
  const start = performance.now();
  let done = 0;
  const results: Results = new Map(picked.map((n) => [n, new Map(args.policies.map((p) => [p, [] as RunMetrics[]]))]));
  let workloads: Workload[] = [];
  const ceilingRuns = new Map<string, number[]>();
  for (const seed of seeds) {
    workloads = buildWorkloads({ requests: args.requests, seed }).filter((w) => picked.includes(w.name));
    for (const w of workloads) {
      ceilingRuns.set(w.name, [...(ceilingRuns.get(w.name) ?? []), hitRateCeiling(w)]);
      for (const p of args.policies) {
        progress(done, total, `seed ${seed}: ${w.name} / ${p}`, start);
        results
          .get(w.name)
          ?.get(p)
          ?.push(await runOnce(w, p, group));
        done += 1;
      }
    }
  }
  progress(done, total, 'done', start);
  const wallS = (performance.now() - start) / 1000;
  const machineLoad = { before: Number(loadBefore.toFixed(1)), after: Number(loadavg()[0].toFixed(1)) };
  process.stderr.write('\n');

  const cellsByWorkload = new Map(picked.map((n) => [n, cellsOf(results.get(n) as Map<DpPolicyName, RunMetrics[]>)]));
  console.log(
    `Routing benchmark: ${group.ranks} simulated TokenSpeed ranks with prefix caches (rank ${group.slowRank} slowed ${group.slowdown}x, ` +
      `${group.kvTotalPages} KV pages of 16 tokens each), ${args.requests} measured requests per workload, seeds ${seeds.join(', ')}, ` +
      `time scale ${group.timeScale}, ${wallS.toFixed(0)} s (1-minute load average ${machineLoad.before} before, ${machineLoad.after} after). ` +
      'Each cell: median [min–max] over the seeds; times in simulated ms; ' +
      'ratios are paired per seed (same requests).\n',
  );
  const ceilings = new Map(picked.map((n) => [n, spreadOf(ceilingRuns.get(n) ?? [])]));
  for (const w of workloads) {
    const c = ceilings.get(w.name);
    const note =
      c !== undefined && c.max > 0
        ? `\n_prefix hit-rate ceiling (no policy can beat it): ${formatSpread({ median: c.median * 100, min: c.min * 100, max: c.max * 100 }, 1, '%')}_`
        : '';
    console.log(`${table(w, cellsByWorkload.get(w.name) as Map<DpPolicyName, Cell>)}${note}\n`);
  }
  const t = targets(cellsByWorkload, ceilings);
  console.log(
    [
      'Issue 12 targets (cache_aware):',
      ...t.lines,
      '',
      'cache_aware against load (the default rule):',
      ...defaultVerdict(cellsByWorkload),
    ].join('\n'),
  );

  const base = args.ranks === 4 ? 'routing' : `routing-ranks${args.ranks}`;
  if (!args.write) {
    console.log(`\n(nothing written; pass --write to update bench/results/${base}.json and ${base}.svg)`);
    return;
  }
  const json = {
    generatedBy: `npm run bench:routing -- --write${args.ranks === 4 ? '' : ` --ranks ${args.ranks}`}`,
    seeds,
    requestsPerWorkload: args.requests,
    wallSeconds: Math.round(wallS),
    machineLoad,
    group: groupJson(group),
    units: {
      ttft: "simulated ms on the ranks' clocks",
      itl: "simulated ms per token on the ranks' clocks",
      throughput: 'tokens per simulated second',
      tokenShare: 'ratio 0..1 per engine index',
      prefixHitRate: 'cached prompt tokens / prompt tokens, 0..1',
      prefixHitRateCeiling: 'the hit rate no policy can beat (bench/routing/workloads.ts hitRateCeiling), 0..1',
      selectionUs: 'µs per request in the policy: median select call + median onDispatch call',
      spread: 'median, min, max over the seeds; ratios paired per seed',
    },
    targets: t.verdicts,
    workloads: workloads.map((w) => ({
      name: w.name,
      description: w.description,
      prefixHitRateCeiling: ceilings.get(w.name),
      policies: Object.fromEntries(
        [...(cellsByWorkload.get(w.name) as Map<DpPolicyName, Cell>)].map(([p, c]) => [
          p,
          {
            summary: c.summary,
            ratioToLoad: c.toLoad,
            ratioToRoundRobin: c.toRoundRobin,
            runs: results.get(w.name)?.get(p),
          },
        ]),
      ),
    })),
  };
  const jsonPath = await writeResult(`${base}.json`, JSON.stringify(json, null, 2) + '\n');
  const svg = routingChart(json);
  const svgPath = await writeResult(`${base}.svg`, svg);
  console.log(`\nwrote ${jsonPath} and ${svgPath}`);
}

main().catch(benchFailed('bench:routing', USAGE));
