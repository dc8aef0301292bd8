/**
 * The routing benchmark on KV-cache events (issue 29 part 5): the same runner as `bench:routing`
 * (bench/routing/run.ts: in-process simulated TokenSpeed ranks with prefix caches over real ZeroMQ, one rank slowed
 * 2×, the real engine client), on the workloads replayed from the Mooncake conversation trace
 * (bench/routing/trace-workloads.ts: `mooncake`, `kv_pressure`, `rank_restart`, `second_client_prefix`) and two
 * without shared prefixes (`uniform`, `heavy_tail`), under `round_robin`, `load`, `cache_aware` (its approximate
 * index), `cache_aware_events` (the ranks publish their KV events, the gateway's subscribers feed the exact index)
 * and `oracle`. Prints per workload TTFT p50/p99, tokens/s, prefix hit rate against the workload's ceiling and
 * routing precision (cached tokens predicted on the chosen rank that the rank did serve from cache), each as the
 * median and min-max over the seeds, then the targets, measured.
 *
 * Usage: `npm run bench:routing:kv-events -- [--requests N] [--seeds K] [--seed S] [--time-scale X] [--workloads a,b]
 * [--write]` (writes bench/results/routing-kv-events.json only with `--write`). Progress goes to stderr.
 */
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { GatewayTokenizer } from '../src/tokenizer/tokenizer.js';
import { runOnce, type BenchPolicy, type GroupConfig } from './routing/run.js';
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
import { benchFailed, benchGroup, groupJson, markdownTable, writeResult } from './routing/report.js';
import { loadMooncakeTrace, traceWorkloads } from './routing/trace-workloads.js';
import { buildWorkloads, hitRateCeiling, type Workload } from './routing/workloads.js';

const POLICIES: readonly BenchPolicy[] = ['round_robin', 'load', 'cache_aware', 'cache_aware_events', 'oracle'];
const TRACE = ['mooncake', 'kv_pressure', 'rank_restart', 'second_client_prefix'];
const NO_PREFIX = ['uniform', 'heavy_tail'];
/** Where the exact index must beat the approximate one (the guess goes wrong there). */
const GUESS_FAILS = ['kv_pressure', 'rank_restart', 'second_client_prefix'];

const USAGE = `npm run bench:routing:kv-events -- [options]
  --requests N      measured requests per workload (200)
  --seeds K         repeats per cell (3); --seed S the first seed (20261207), the others follow
  --time-scale X    wall ms per simulated ms (0.5; a power of two)
  --workloads a,b   a subset of ${[...TRACE, ...NO_PREFIX].join(', ')}
  --write           write bench/results/routing-kv-events.json
  --help            this text`;

function parseCli(argv: string[]) {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: {
      requests: { type: 'string', default: '200' },
      seeds: { type: 'string', default: '3' },
      seed: { type: 'string', default: '20261207' },
      'time-scale': { type: 'string', default: '0.5' },
      workloads: { type: 'string' },
      write: { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help === true) {
    console.log(USAGE);
    process.exit(0);
  }
  const int = (name: string, v: string, min: number): number => {
    const n = Number(v);
    if (!Number.isSafeInteger(n) || n < min) throw new RangeError(`--${name} must be an integer ≥ ${min}, got ${v}`);
    return n;
  };
  const timeScale = Number(values['time-scale']);
  if (!(timeScale > 0)) throw new RangeError('--time-scale must be a number > 0');
  const all = [...TRACE, ...NO_PREFIX];
  const workloads = values.workloads === undefined ? all : values.workloads.split(',');
  const bad = workloads.filter((w) => !all.includes(w));
  if (bad.length > 0) throw new RangeError(`unknown workload ${bad.join(', ')}; valid: ${all.join(', ')}`);
  return {
    requests: int('requests', values.requests, 1),
    seeds: int('seeds', values.seeds, 1),
    seed: int('seed', values.seed, 0),
    timeScale,
    workloads,
    write: values.write === true,
  };
}

interface Cell {
  summary: Record<SummaryKey, Spread>;
  toLoad: Record<SummaryKey, Spread>;
}

const pct = (s: Spread): Spread => ({ median: s.median * 100, min: s.min * 100, max: s.max * 100 });

function table(w: Workload, cells: Map<BenchPolicy, Cell>, ceiling: Spread): string {
  const header = ['policy', 'TTFT p50 ms', 'TTFT p99 ms', 'tok/s', 'prefix hits', 'precision', 'TTFT p50 / load'];
  const rows = [header];
  for (const [p, c] of cells) {
    const s = c.summary;
    rows.push([
      p,
      formatSpread(s.ttftP50, 1),
      formatSpread(s.ttftP99, 0),
      formatSpread(s.throughput, 0),
      formatSpread(pct(s.prefixHitRate), 0, '%'),
      formatSpread(s.routingPrecision, 3),
      formatSpread(c.toLoad.ttftP50, 2, '×'),
    ]);
  }
  return [
    `### ${w.name}`,
    ...markdownTable(rows),
    `_${w.description}; prefix hit-rate ceiling ${formatSpread(pct(ceiling), 1, '%')}_`,
  ].join('\n');
}

/** The "Done when" lines for the benchmark, measured. */
function targets(
  cells: Map<string, Map<BenchPolicy, Cell>>,
  ceilingRuns: Map<string, number[]>,
  runs: Map<string, Map<BenchPolicy, RunMetrics[]>>,
) {
  const ceilings = new Map([...ceilingRuns].map(([w, xs]) => [w, spreadOf(xs)]));
  const lines: string[] = [];
  const verdicts: Record<string, boolean> = {};
  const verdict = (key: string, ok: boolean, text: string): void => {
    verdicts[key] = ok;
    lines.push(`- ${ok ? 'met    ' : 'NOT met'} ${text}`);
  };
  for (const [w, c] of cells) {
    const ev = c.get('cache_aware_events')?.summary;
    const ap = c.get('cache_aware')?.summary;
    const ld = c.get('load');
    if (!ev || !ap || !ld) continue;
    if (Number.isFinite(ev.routingPrecision.min)) {
      verdict(
        `${w}.precision`,
        ev.routingPrecision.min >= 0.95,
        `${w}: events routing precision ${formatSpread(ev.routingPrecision, 3)} (target ≥ 0.95; approximate ${formatSpread(ap.routingPrecision, 3)})`,
      );
    }
    if (w === 'mooncake') {
      const r = c.get('cache_aware_events')!.toLoad.ttftP50;
      verdict(`${w}.ttftP50`, r.max <= 0.5, `${w}: events TTFT p50 / load ${formatSpread(r, 2, '×')} (target ≤ 0.5×)`);
      // Each seed samples other conversations, with a ceiling of its own: compare each run with its own seed's.
      const ofCeiling = spreadOf(
        runs
          .get(w)!
          .get('cache_aware_events')!
          .map((r, i) => r.prefixHitRate / ceilingRuns.get(w)![i]!),
      );
      verdict(
        `${w}.hitRate`,
        ofCeiling.min >= 0.95,
        `${w}: events hit rate ${formatSpread(pct(ev.prefixHitRate), 1, '%')} vs ceiling ${formatSpread(pct(ceilings.get(w)!), 1, '%')}, per seed ${formatSpread(pct(ofCeiling), 0, '%')} of it (target ≥ 95 %)`,
      );
    }
    if (GUESS_FAILS.includes(w)) {
      // Seeds sample different conversations, so their spread is mostly the workload's: the paired ratio (same
      // requests) says whether events beat the approximate index on every seed.
      const paired = pairedRatios(runs.get(w)!.get('cache_aware_events')!, runs.get(w)!.get('cache_aware')!).ttftP50;
      verdict(
        `${w}.beatsApprox`,
        losesOutsideSpread(ap.ttftP50, ev.ttftP50) || paired.max < 1,
        `${w}: TTFT p50 events ${formatSpread(ev.ttftP50, 1)} vs approximate ${formatSpread(ap.ttftP50, 1)} ms, paired events / approximate ${formatSpread(paired, 2, '×')} (target: better outside the spread, or on every seed)`,
      );
    }
    if (NO_PREFIX.includes(w)) {
      verdict(
        `${w}.ttftP99`,
        tiesOrBeats(ev.ttftP99, ld.summary.ttftP99),
        `${w}: TTFT p99 events ${formatSpread(ev.ttftP99, 0)} vs load ${formatSpread(ld.summary.ttftP99, 0)} ms (target: within load's spread or better)`,
      );
    }
  }
  return { lines, verdicts };
}

async function main(): Promise<void> {
  const args = parseCli(process.argv.slice(2));
  const seeds = Array.from({ length: args.seeds }, (_, i) => args.seed + i);
  const tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  const group: GroupConfig = benchGroup(4, args.timeScale, tokenizer);
  const trace = loadMooncakeTrace();
  const build = (seed: number): Workload[] =>
    [
      ...traceWorkloads(trace, {
        requests: args.requests,
        seed,
        ranks: group.ranks,
        contextTokens: group.maxModelLen,
        kvTotalPages: group.kvTotalPages,
      }),
      ...buildWorkloads({ requests: args.requests, seed }),
    ].filter((w) => args.workloads.includes(w.name));
  const results = new Map<string, Map<BenchPolicy, RunMetrics[]>>();
  const ceilingRuns = new Map<string, number[]>();
  const total = seeds.length * args.workloads.length * POLICIES.length;
  const start = performance.now();
  const loadBefore = loadavg()[0];
  let done = 0;
  let workloads: Workload[] = [];
  for (const seed of seeds) {
    workloads = build(seed);
    for (const w of workloads) {
      ceilingRuns.set(w.name, [...(ceilingRuns.get(w.name) ?? []), hitRateCeiling(w)]);
      for (const p of POLICIES) {
        const secs = ((performance.now() - start) / 1000).toFixed(0);
        process.stderr.write(`\r[${done}/${total}] ${secs}s seed ${seed}: ${w.name} / ${p}`.padEnd(90));
        const per = results.get(w.name) ?? new Map<BenchPolicy, RunMetrics[]>();
        results.set(w.name, per);
        per.set(p, [...(per.get(p) ?? []), await runOnce(w, p, group)]);
        done++;
      }
    }
  }
  const wallS = (performance.now() - start) / 1000;
  const machineLoad = { before: Number(loadBefore.toFixed(1)), after: Number(loadavg()[0].toFixed(1)) };
  process.stderr.write('\n');
  const cells = new Map(
    [...results].map(([w, per]) => {
      const load = per.get('load')!;
      return [
        w,
        new Map([...per].map(([p, runs]) => [p, { summary: summarize(runs), toLoad: pairedRatios(runs, load) }])),
      ] as const;
    }),
  );
  const ceilings = new Map([...ceilingRuns].map(([w, xs]) => [w, spreadOf(xs)]));
  console.log(
    `Routing on KV-cache events: ${group.ranks} simulated TokenSpeed ranks (rank ${group.slowRank} slowed ${group.slowdown}x, ` +
      `${group.kvTotalPages} KV pages of 16 tokens), ${args.requests} measured requests per workload, seeds ${seeds.join(', ')}, ` +
      `time scale ${group.timeScale}, ${wallS.toFixed(0)} s (load average ${machineLoad.before} → ${machineLoad.after}). ` +
      'Each cell: median [min–max] over the seeds; times in simulated ms; ratios paired per seed.\n',
  );
  for (const w of workloads) console.log(`${table(w, cells.get(w.name)!, ceilings.get(w.name)!)}\n`);
  const t = targets(cells, ceilingRuns, results);
  console.log(['Issue 29 targets:', ...t.lines].join('\n'));
  if (!args.write) {
    console.log('\n(nothing written; pass --write to update bench/results/routing-kv-events.json)');
    return;
  }
  const json = {
    generatedBy: 'npm run bench:routing:kv-events -- --write',
    seeds,
    requestsPerWorkload: args.requests,
    wallSeconds: Math.round(wallS),
    machineLoad,
    group: groupJson(group),
    units: {
      ttft: "simulated ms on the ranks' clocks",
      throughput: 'tokens per simulated second',
      prefixHitRate: 'cached prompt tokens / prompt tokens, 0..1',
      routingPrecision: 'Σ min(predicted, reported cached tokens) / Σ predicted, 0..1 (cache_aware policies only)',
      spread: 'median, min, max over the seeds; ratios paired per seed',
    },
    targets: t.verdicts,
    workloads: workloads.map((w) => ({
      name: w.name,
      description: w.description,
      prefixHitRateCeiling: ceilings.get(w.name),
      policies: Object.fromEntries(
        [...cells.get(w.name)!].map(([p, c]) => [
          p,
          { summary: c.summary, ratioToLoad: c.toLoad, runs: results.get(w.name)?.get(p) },
        ]),
      ),
    })),
  };
  console.log(`\nwrote ${await writeResult('routing-kv-events.json', JSON.stringify(json, null, 2) + '\n')}`);
}

main().catch(benchFailed('bench:routing:kv-events', USAGE));
