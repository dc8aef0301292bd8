/**
 * Routing-quality benchmark (issue #5 parts 3-4; dp-routing.md sections 9.2, 10.2-10.3): runs every DP policy
 * (`round_robin`, `inflight`, `load`, `load_no_clamp`, `oracle`; src/engine-client/policies.ts) over every seeded
 * workload (bench/routing/workloads.ts) through the real engine-client path (EngineClient.submit → ZmqEngineLink →
 * ZeroMQ → in-process simulated TokenSpeed ranks, one of them slowed 2×), and prints per workload TTFT p50/p99,
 * ITL p50/p99 (simulated ms), throughput (tokens per simulated second) and per-rank token share, each with its ratio
 * to round-robin measured in the same run. Writes bench/results/routing.json and bench/results/routing.svg (TTFT p99
 * ratio to round-robin, grouped by workload).
 *
 * Usage: `npm run bench:routing` (= `npx tsx bench/routing.ts`), options `--requests N` (measured requests per
 * workload, default 200), `--seed S`, `--time-scale X` (wall ms per simulated ms, default 0.5; use a power of two),
 * `--workloads a,b` and `--policies a,b` (subsets). A progress bar goes to stderr.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { DP_POLICY_NAMES, isDpPolicyName, type DpPolicyName } from '../src/engine-client/policies.js';
import { TextModel } from '../src/sim/text.js';
import { GatewayTokenizer } from '../src/tokenizer/tokenizer.js';
import { renderRatioChart } from './routing/chart.js';
import { runOnce, type GroupConfig } from './routing/run.js';
import { METRIC_KEYS, ratio, type RunMetrics } from './routing/stats.js';
import { buildWorkloads } from './routing/workloads.js';

interface Args {
  requests: number;
  seed: number;
  timeScale: number;
  workloads: string[] | null;
  policies: DpPolicyName[];
}

function parseArgs(argv: readonly string[]): Args {
  const args: Args = { requests: 200, seed: 20261130, timeScale: 0.5, workloads: null, policies: [...DP_POLICY_NAMES] };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = argv[i + 1];
    if (value === undefined) throw new RangeError(`${flag} needs a value`);
    i += 1;
    switch (flag) {
      case '--requests': args.requests = Number(value); break;
      case '--seed': args.seed = Number(value); break;
      case '--time-scale': args.timeScale = Number(value); break;
      case '--workloads': args.workloads = value.split(','); break;
      case '--policies': {
        const names = value.split(',');
        const bad = names.filter((n) => !isDpPolicyName(n));
        if (bad.length > 0) throw new RangeError(`unknown policy ${bad.join(', ')}; valid: ${DP_POLICY_NAMES.join(', ')}`);
        args.policies = names as DpPolicyName[];
        break;
      }
      default: throw new RangeError(`unknown option ${flag} (valid: --requests, --seed, --time-scale, --workloads, --policies)`);
    }
  }
  if (!Number.isSafeInteger(args.requests) || args.requests <= 0) throw new RangeError(`--requests must be a positive integer`);
  if (!Number.isSafeInteger(args.seed)) throw new RangeError(`--seed must be an integer`);
  if (!(Number.isFinite(args.timeScale) && args.timeScale > 0)) throw new RangeError(`--time-scale must be a number > 0`);
  if (!args.policies.includes('round_robin')) args.policies.unshift('round_robin'); // the baseline of every ratio
  return args;
}

function progress(done: number, total: number, label: string, startMs: number): void {
  const width = 30;
  const filled = Math.round((done / total) * width);
  const secs = ((performance.now() - startMs) / 1000).toFixed(0);
  process.stderr.write(`\r[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${done}/${total} ${secs}s ${label}`.padEnd(100));
}

const fmt = (v: number, digits = 1): string => (Number.isFinite(v) ? v.toFixed(digits) : '-');

function table(workload: string, results: Map<DpPolicyName, RunMetrics>, policies: readonly DpPolicyName[]): string {
  const base = results.get('round_robin');
  const header = ['policy', 'TTFT p50', 'TTFT p99', 'ITL p50', 'ITL p99', 'tok/s', 'token share by rank', 'preempt'];
  const rows: string[][] = [header];
  for (const p of policies) {
    const m = results.get(p);
    if (!m) continue;
    const cell = (k: (typeof METRIC_KEYS)[number], digits: number): string =>
      `${fmt(m[k], digits)} (${base ? fmt(ratio(m[k], base[k]), 2) : '-'}x)`;
    rows.push([
      p,
      cell('ttftP50', 1),
      cell('ttftP99', 1),
      cell('itlP50', 2),
      cell('itlP99', 2),
      cell('throughput', 0),
      m.tokenShare.map((s) => s.toFixed(2)).join('/'),
      String(m.preemptions) + (m.failures > 0 ? ` FAIL ${m.failures}` : ''),
    ]);
  }
  const widths = header.map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  const line = (r: string[]): string => '| ' + r.map((c, i) => c.padEnd(widths[i])).join(' | ') + ' |';
  return [`### ${workload}`, line(rows[0]), '|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|', ...rows.slice(1).map(line)].join('\n');
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const all = buildWorkloads({ requests: args.requests, seed: args.seed });
  const workloads = args.workloads === null ? all : all.filter((w) => args.workloads?.includes(w.name));
  if (workloads.length === 0) throw new RangeError(`no workload matches; valid: ${all.map((w) => w.name).join(', ')}`);
  const tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  const group: GroupConfig = {
    ranks: 4,
    slowRank: 3,
    slowdown: 2,
    timeScale: args.timeScale,
    maxRunning: 32,
    kvTotalPages: 2048,
    maxModelLen: 8192,
    textModel: new TextModel(tokenizer),
    vocabSize: tokenizer.vocabSize,
    eosTokenIds: tokenizer.eosTokenIds,
  };
  const total = workloads.length * args.policies.length;
  const start = performance.now();
  let done = 0;
  const results = new Map<string, Map<DpPolicyName, RunMetrics>>();
  for (const w of workloads) {
    const perPolicy = new Map<DpPolicyName, RunMetrics>();
    results.set(w.name, perPolicy);
    for (const p of args.policies) {
      progress(done, total, `${w.name} / ${p}`, start);
      perPolicy.set(p, await runOnce(w, p, group));
      done += 1;
    }
  }
  progress(done, total, 'done', start);
  process.stderr.write('\n');

  const { textModel: _t, ...groupJson } = group;
  console.log(
    `Routing benchmark: ${group.ranks} simulated TokenSpeed ranks (rank ${group.slowRank} slowed ${group.slowdown}x), ` +
      `${args.requests} measured requests per workload, seed ${args.seed}, time scale ${group.timeScale}. ` +
      'Times in simulated ms; (ratio to round_robin in the same run).\n',
  );
  for (const w of workloads) {
    console.log(`${table(w.name, results.get(w.name) as Map<DpPolicyName, RunMetrics>, args.policies)}\n_${w.description}_\n`);
  }

  const outDir = join(dirname(fileURLToPath(import.meta.url)), 'results');
  await mkdir(outDir, { recursive: true });
  const json = {
    generatedBy: 'npm run bench:routing',
    seed: args.seed,
    requestsPerWorkload: args.requests,
    group: groupJson,
    units: { ttft: 'simulated ms', itl: 'simulated ms per token', throughput: 'tokens per simulated second', tokenShare: 'ratio 0..1 per engine index' },
    workloads: workloads.map((w) => {
      const per = results.get(w.name) as Map<DpPolicyName, RunMetrics>;
      const base = per.get('round_robin') as RunMetrics;
      return {
        name: w.name,
        description: w.description,
        policies: Object.fromEntries(
          args.policies.map((p) => {
            const m = per.get(p) as RunMetrics;
            return [p, { ...m, ratioToRoundRobin: Object.fromEntries(METRIC_KEYS.map((k) => [k, ratio(m[k], base[k])])) }];
          }),
        ),
      };
    }),
  };
  await writeFile(join(outDir, 'routing.json'), JSON.stringify(json, null, 2) + '\n');
  const svg = renderRatioChart({
    title: `TTFT p99 relative to round_robin (lower is better; ${group.ranks} ranks, rank ${group.slowRank} ${group.slowdown}x slower)`,
    workloads: workloads.map((w) => w.name),
    policies: args.policies,
    ratios: workloads.map((w) => {
      const per = results.get(w.name) as Map<DpPolicyName, RunMetrics>;
      const base = per.get('round_robin') as RunMetrics;
      return args.policies.map((p) => ratio((per.get(p) as RunMetrics).ttftP99, base.ttftP99));
    }),
  });
  await writeFile(join(outDir, 'routing.svg'), svg);
  console.log(`wrote ${join('bench', 'results', 'routing.json')} and ${join('bench', 'results', 'routing.svg')}`);
}

main().catch((error: unknown) => {
  process.stderr.write(`\nbench:routing failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exitCode = 1;
});
