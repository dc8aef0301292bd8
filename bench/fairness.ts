/**
 * bench:fairness (issue 30 part 6): one fleet shared by four tenants at twice its capacity, with flow control off and
 * on, side by side in one run over several seeds.
 *
 * The fleet: simulated vLLM ranks in real time (`--max-running` requests each, its max_num_seqs), behind a gateway
 * started as a real process with a keys file naming the tenants. Its capacity C (requests per second) is measured
 * first with a closed loop that keeps every batch full. Then, per seed and per mode, every tenant offers Poisson
 * arrivals of streamed completions of a fixed length for the run's duration:
 * - `interactive`: the critical band, 0.1 C;
 * - `batch-a` and `batch-b`: the standard band, 1.2 C and 0.5 C (equal weight, unequal demand: fair queuing should
 *   give them equal shares of what is left);
 * - `scavenger`: the sheddable band, 0.2 C.
 * The interactive tenant alone at the same rate (the first second left out) gives its unloaded TTFT. Flow control's
 * per-rank target is three below the ranks' batch by default, so critical requests find three free slots per rank (the
 * cost: the other bands use 5 of every 8 slots; the table prints the fleet's utilization). Printed per mode, median [min–max] over the
 * seeds: each tenant's share of the requests served during the overload, TTFT p50/p99 per band, the mean queue wait
 * in the gateway (its `model_gateway_tenant_queue_wait_seconds`), 429s by reason, requests lost (no status) or ended
 * otherwise, Jain's fairness index over the two standard-band tenants, and the gateway's peak RSS. Then the issue's
 * targets, measured. Progress goes to stderr; `--write` saves bench/results/fairness.json and fairness.svg.
 *
 * Usage: `npm run bench:fairness -- [--seeds K] [--seed S] [--duration-s D] [--ranks R] [--max-running M]
 *   [--tokens T] [--max-in-flight-per-rank N] [--quick] [--write]`
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { GatewayUnderTest, writeKeysFile, type FleetShape, type FlowSettings } from './fairness/gateway.js';
import { fairnessChart } from './fairness/chart.js';
import { closedLoopRate, offer, type RequestResult, type TenantLoad } from './fairness/load.js';
import { benchFailed } from './routing/report.js';
import { percentile } from './routing/stats.js';

const USAGE = `npm run bench:fairness -- [options]
  --seeds K                  seeds (3); --seed S the first (20261207), the others follow
  --duration-s D             seconds of offered load per run (30)
  --ranks R                  simulated vLLM ranks (2)
  --max-running M            each rank's batch, its max_num_seqs (8)
  --tokens T                 output tokens of every request (48)
  --max-in-flight-per-rank N flow control's per-rank target for the standard and sheddable bands (default
                             max-running − 3: three slots per rank kept for critical requests)
  --queue-timeout-ms MS      flow control's queue deadline (5000)
  --quick                    1 seed, 10 s runs
  --chart-only               draw bench/results/fairness.svg again from fairness.json (no run)
  --write                    save bench/results/fairness.json and fairness.svg`;

const TENANT_SHARES = [
  { name: 'interactive', band: 'critical', share: 0.1 },
  { name: 'batch-a', band: 'standard', share: 1.2 },
  { name: 'batch-b', band: 'standard', share: 0.5 },
  { name: 'scavenger', band: 'sheddable', share: 0.2 },
] as const;
const MODES = ['off', 'on'] as const;
type Mode = (typeof MODES)[number];

interface Args {
  seeds: number;
  seed: number;
  durationMs: number;
  fleet: FleetShape;
  tokens: number;
  target: number | null;
  queueTimeoutMs: number;
  write: boolean;
}

function parse(): Args {
  const { values } = parseArgs({
    options: {
      seeds: { type: 'string', default: '3' },
      seed: { type: 'string', default: '20261207' },
      'duration-s': { type: 'string', default: '30' },
      ranks: { type: 'string', default: '2' },
      'max-running': { type: 'string', default: '8' },
      tokens: { type: 'string', default: '48' },
      'max-in-flight-per-rank': { type: 'string' },
      'queue-timeout-ms': { type: 'string', default: '5000' },
      quick: { type: 'boolean', default: false },
      write: { type: 'boolean', default: false },
      'chart-only': { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  const int = (name: string, v: string, min: number): number => {
    const n = Number(v);
    if (!Number.isSafeInteger(n) || n < min) throw new RangeError(`--${name} must be an integer ≥ ${min}, got ${v}`);
    return n;
  };
  const target = values['max-in-flight-per-rank'];
  return {
    seeds: values.quick ? 1 : int('seeds', values.seeds, 1),
    seed: int('seed', values.seed, 0),
    durationMs: (values.quick ? 10 : int('duration-s', values['duration-s'], 2)) * 1000,
    fleet: { ranks: int('ranks', values.ranks, 1), maxRunning: int('max-running', values['max-running'], 1) },
    tokens: int('tokens', values.tokens, 1),
    target: target === undefined ? null : int('max-in-flight-per-rank', target, 1),
    queueTimeoutMs: int('queue-timeout-ms', values['queue-timeout-ms'], 1),
    write: values.write,
  };
}

/** What one (mode, seed) run measured. Rates are requests per second; times ms; shares 0..1. */
interface RunResult {
  unloadedTtftP99: number;
  perTenant: Record<string, TenantResult>;
  jain: number;
  criticalTtftRatio: number;
  /** Requests served per second during the overload, every tenant. */
  servedRate: number;
  peakRssMiB: number | null;
  startRssMiB: number | null;
}

interface TenantResult {
  sent: number;
  ok: number;
  /** Requests served per second during the overload (200s ended inside the offered window). */
  servedRate: number;
  /** This tenant's share of the requests served during the overload. */
  share: number;
  ttftP50: number | null;
  ttftP99: number | null;
  meanQueueWaitMs: number | null;
  refusals: Record<string, number>;
  /** Requests that ended without a status (lost) or with a status other than 200 or 429. */
  lost: number;
  other: number;
}

/** Jain's fairness index of `xs` (1 = equal; 1/n = one takes all). */
function jainIndex(xs: readonly number[]): number {
  const sum = xs.reduce((a, b) => a + b, 0);
  const squares = xs.reduce((a, b) => a + b * b, 0);
  return squares === 0 ? 1 : (sum * sum) / (xs.length * squares);
}

function p(samples: number[], q: number): number | null {
  return samples.length === 0 ? null : percentile(samples, q);
}

/** Per-tenant (sum, count) of the gateway's queue-wait histogram, from its /metrics text. */
async function queueWaits(url: string): Promise<Map<string, { sum: number; count: number }>> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out = new Map<string, { sum: number; count: number }>();
  for (const line of text.split('\n')) {
    const m = /^model_gateway_tenant_queue_wait_seconds_(sum|count)\{[^}]*tenant="([^"]+)"[^}]*\} (\S+)$/.exec(line);
    if (m === null) continue;
    const e = out.get(m[2]!) ?? { sum: 0, count: 0 };
    e[m[1] as 'sum' | 'count'] += Number(m[3]);
    out.set(m[2]!, e);
  }
  return out;
}

function tenantResult(
  results: readonly RequestResult[],
  name: string,
  window: { start: number; end: number },
  servedTotal: number,
  waits: { before?: { sum: number; count: number }; after?: { sum: number; count: number } },
): TenantResult {
  const mine = results.filter((r) => r.tenant === name);
  const ok = mine.filter((r) => r.status === 200 && r.code === null);
  const served = ok.filter((r) => r.endedAt >= window.start && r.endedAt <= window.end).length;
  const refusals: Record<string, number> = {};
  for (const r of mine.filter((x) => x.status === 429))
    refusals[r.code ?? '429'] = (refusals[r.code ?? '429'] ?? 0) + 1;
  const ttfts = ok.map((r) => r.ttftMs).filter((t): t is number => t !== null);
  const dSum = (waits.after?.sum ?? 0) - (waits.before?.sum ?? 0);
  const dCount = (waits.after?.count ?? 0) - (waits.before?.count ?? 0);
  return {
    sent: mine.length,
    ok: ok.length,
    servedRate: (served * 1000) / (window.end - window.start),
    share: servedTotal === 0 ? 0 : served / servedTotal,
    ttftP50: p(ttfts, 50),
    ttftP99: p(ttfts, 99),
    meanQueueWaitMs: dCount > 0 ? (dSum / dCount) * 1000 : null,
    refusals,
    lost: mine.filter((r) => r.status === 0).length,
    other: mine.filter((r) => r.status !== 0 && r.status !== 429 && !(r.status === 200 && r.code === null)).length,
  };
}

/** Run the whole load once against `gw`; the unloaded phase first (the critical tenant alone). */
async function runOnce(
  gw: GatewayUnderTest,
  tenants: readonly TenantLoad[],
  a: Args,
  seed: number,
): Promise<RunResult> {
  const critical = tenants.find((t) => t.band === 'critical')!;
  const aloneStart = performance.now();
  const alone = await offer(gw.url, [critical], a.tokens, a.durationMs, seed + 1000);
  const unloaded = alone
    .filter((r) => r.sentAt >= aloneStart + 1000)
    .map((r) => r.ttftMs)
    .filter((t): t is number => t !== null);
  const before = await queueWaits(gw.url);
  const startRssMiB = gw.rssMiB();
  let peakRssMiB = startRssMiB;
  const sampler = setInterval(() => {
    const rss = gw.rssMiB();
    if (rss !== null) peakRssMiB = Math.max(peakRssMiB ?? 0, rss);
  }, 250);
  const start = performance.now();
  let results: RequestResult[];
  try {
    results = await offer(gw.url, tenants, a.tokens, a.durationMs, seed);
  } finally {
    clearInterval(sampler);
  }
  const after = await queueWaits(gw.url);
  // Shares over the overload itself: what ended while every tenant was still sending, after a 2 s ramp.
  const window = { start: start + 2000, end: start + a.durationMs };
  const servedTotal = results.filter(
    (r) => r.status === 200 && r.code === null && r.endedAt >= window.start && r.endedAt <= window.end,
  ).length;
  const perTenant: Record<string, TenantResult> = {};
  for (const t of tenants)
    perTenant[t.name] = tenantResult(results, t.name, window, servedTotal, {
      ...(before.has(t.name) ? { before: before.get(t.name)! } : {}),
      ...(after.has(t.name) ? { after: after.get(t.name)! } : {}),
    });
  const unloadedTtftP99 = percentile(unloaded, 99);
  const std = tenants.filter((t) => t.band === 'standard').map((t) => perTenant[t.name]!.servedRate);
  return {
    unloadedTtftP99,
    perTenant,
    jain: jainIndex(std),
    criticalTtftRatio: (perTenant[critical.name]!.ttftP99 ?? Number.NaN) / unloadedTtftP99,
    servedRate: (servedTotal * 1000) / (window.end - window.start),
    peakRssMiB,
    startRssMiB,
  };
}

interface Spread {
  median: number;
  min: number;
  max: number;
}

/** What the written result says of one mode (`summary.off`, `summary.on`). */
interface ModeSummary {
  tenants: Record<string, { share: Spread }>;
  jain: Spread;
  criticalTtftRatio: Spread;
}

function spread(xs: readonly number[]): Spread {
  const s = [...xs].filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (s.length === 0) return { median: Number.NaN, min: Number.NaN, max: Number.NaN };
  return { median: s[Math.floor((s.length - 1) / 2)]!, min: s[0]!, max: s.at(-1)! };
}

const cell = (s: Spread, digits = 2, unit = ''): string =>
  Number.isNaN(s.median)
    ? '–'
    : `${s.median.toFixed(digits)}${unit} [${s.min.toFixed(digits)}–${s.max.toFixed(digits)}]`;

async function main(): Promise<void> {
  const a = parse();
  const log = (m: string) => process.stderr.write(`[fairness] ${m}\n`);
  const dir = mkdtempSync(join(tmpdir(), 'mgw-bench-fairness-'));
  const wallStart = Date.now();
  const keys = (name: string) => `sk-bench-${name}`;
  const probe: TenantLoad = { name: 'batch-a', key: keys('batch-a'), band: 'standard', ratePerSecond: 0 };
  const keysFile = writeKeysFile(
    dir,
    TENANT_SHARES.map((t) => ({ name: t.name, key: keys(t.name), band: t.band, ratePerSecond: 0 })),
  );
  const target = a.target ?? Math.max(1, a.fleet.maxRunning - 3);
  const flow: FlowSettings = { maxInFlightPerRank: target, queueTimeoutMs: a.queueTimeoutMs };
  const gateways: Record<Mode, GatewayUnderTest | null> = { off: null, on: null };
  try {
    gateways.off = await GatewayUnderTest.start(a.fleet, null, keysFile);
    gateways.on = await GatewayUnderTest.start(a.fleet, flow, keysFile);
    const slots = a.fleet.ranks * a.fleet.maxRunning;
    log('warming both gateways up: 3 s each with every batch full');
    for (const g of [gateways.off, gateways.on]) await closedLoopRate(g.url, probe, a.tokens, slots, 3000);
    log(`measuring the fleet's capacity: ${slots} requests in flight for 8 s`);
    const capacity = await closedLoopRate(gateways.off.url, probe, a.tokens, slots, 8000);
    if (capacity <= 0) throw new Error("the fleet served no request in the capacity run (see the gateway's log above)");
    log(`capacity C = ${capacity.toFixed(1)} requests/s; offered 2.0 C`);
    const tenants: TenantLoad[] = TENANT_SHARES.map((t) => ({
      name: t.name,
      key: keys(t.name),
      band: t.band,
      ratePerSecond: t.share * capacity,
    }));
    const runs: Record<Mode, RunResult[]> = { off: [], on: [] };
    const seeds = Array.from({ length: a.seeds }, (_, i) => a.seed + i);
    for (const seed of seeds) {
      for (const mode of MODES) {
        log(
          `seed ${seed}, flow control ${mode}: ${a.durationMs / 1000} s unloaded, then ${a.durationMs / 1000} s at 2× C`,
        );
        runs[mode].push(await runOnce(gateways[mode]!, tenants, a, seed));
      }
    }
    report({ ...a, target }, capacity, tenants, runs, seeds, (Date.now() - wallStart) / 1000);
  } finally {
    await Promise.all(Object.values(gateways).map((g) => g?.close()));
    rmSync(dir, { recursive: true, force: true });
  }
}

function report(
  a: Args,
  capacity: number,
  tenants: readonly TenantLoad[],
  runs: Record<Mode, RunResult[]>,
  seeds: readonly number[],
  wallSeconds: number,
): void {
  const out: string[] = [];
  out.push(
    `bench:fairness — ${a.fleet.ranks} simulated vLLM ranks × ${a.fleet.maxRunning} running, ${a.tokens}-token ` +
      `streamed completions, capacity C = ${capacity.toFixed(1)} req/s, offered 2.0 C for ${a.durationMs / 1000} s, ` +
      `seeds ${seeds.join(', ')}. Cells: median [min–max] over the seeds.\n`,
  );
  const summary: Partial<Record<Mode, ModeSummary & Record<string, unknown>>> = {};
  for (const mode of MODES) {
    const rs = runs[mode];
    out.push(`flow control ${mode}`);
    out.push(
      '| tenant | band | offered req/s | share served | TTFT p50 ms | TTFT p99 ms | queue wait ms | 429s | lost / other |',
    );
    out.push('| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
    const tenantSummary: Record<string, { share: Spread } & Record<string, unknown>> = {};
    for (const t of tenants) {
      const of = (f: (x: TenantResult) => number | null) =>
        spread(rs.map((r) => f(r.perTenant[t.name]!) ?? Number.NaN));
      const refusals: Record<string, number> = {};
      for (const r of rs)
        for (const [k, v] of Object.entries(r.perTenant[t.name]!.refusals)) refusals[k] = (refusals[k] ?? 0) + v;
      const lost = rs.reduce((s, r) => s + r.perTenant[t.name]!.lost, 0);
      const other = rs.reduce((s, r) => s + r.perTenant[t.name]!.other, 0);
      const s = {
        share: of((x) => x.share),
        ttftP50: of((x) => x.ttftP50),
        ttftP99: of((x) => x.ttftP99),
        queueWaitMs: of((x) => x.meanQueueWaitMs),
        refusals,
        lost,
        other,
        sent: rs.reduce((n, r) => n + r.perTenant[t.name]!.sent, 0),
      };
      tenantSummary[t.name] = s;
      const r429 = Object.entries(refusals)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ');
      out.push(
        `| ${t.name} | ${t.band} | ${t.ratePerSecond.toFixed(1)} | ${cell(s.share)} | ${cell(s.ttftP50, 0)} | ` +
          `${cell(s.ttftP99, 0)} | ${cell(s.queueWaitMs, 0)} | ${r429 || '0'} | ${lost} / ${other} |`,
      );
    }
    const jain = spread(rs.map((r) => r.jain));
    const ratio = spread(rs.map((r) => r.criticalTtftRatio));
    const unloaded = spread(rs.map((r) => r.unloadedTtftP99));
    const rss = spread(rs.map((r) => r.peakRssMiB ?? Number.NaN));
    const rss0 = spread(rs.map((r) => r.startRssMiB ?? Number.NaN));
    const utilization = spread(rs.map((r) => r.servedRate / capacity));
    out.push(
      `Jain's index (standard band) ${cell(jain, 3)}; critical TTFT p99 ${cell(ratio, 2, '×')} its unloaded ` +
        `${cell(unloaded, 0)} ms; served ${cell(utilization)} of C; gateway RSS ${cell(rss0, 0)} → peak ` +
        `${cell(rss, 0)} MiB\n`,
    );
    summary[mode] = {
      tenants: tenantSummary,
      utilization,
      jain,
      criticalTtftRatio: ratio,
      unloadedTtftP99: unloaded,
      rssStartMiB: rss0,
      rssPeakMiB: rss,
    };
  }
  const lostAll = MODES.reduce(
    (n, m) => n + runs[m].reduce((s, r) => s + Object.values(r.perTenant).reduce((x, t) => x + t.lost + t.other, 0), 0),
    0,
  );
  const targets = {
    criticalOn: runs.on.every((r) => r.criticalTtftRatio <= 1.5),
    criticalOff: runs.off.every((r) => r.criticalTtftRatio >= 5),
    jainOn: runs.on.every((r) => r.jain >= 0.95),
    noneLost: lostAll === 0,
  };
  out.push('Targets (issue 30, every seed):');
  out.push(`- critical TTFT p99 ≤ 1.5× unloaded with flow control: ${targets.criticalOn ? 'met' : 'NOT met'}`);
  out.push(`- ≥ 5× without it: ${targets.criticalOff ? 'met' : 'NOT met'}`);
  out.push(`- Jain's index ≥ 0.95 in the standard band with flow control: ${targets.jainOn ? 'met' : 'NOT met'}`);
  out.push(`- every request ended with tokens or a 429: ${targets.noneLost ? 'met' : `NOT met (${lostAll} did not)`}`);
  process.stdout.write(`${out.join('\n')}\n`);
  if (!a.write) return;
  const json = {
    generatedBy: 'npm run bench:fairness -- --write',
    seeds,
    wallSeconds: Math.round(wallSeconds),
    fleet: a.fleet,
    tokens: a.tokens,
    capacityRequestsPerSecond: capacity,
    offered: Object.fromEntries(tenants.map((t) => [t.name, { band: t.band, requestsPerSecond: t.ratePerSecond }])),
    flowControl: { maxInFlightPerRank: a.target, queueTimeoutMs: a.queueTimeoutMs },
    units: {
      share: "the tenant's part of the requests served during the overload, 0..1",
      utilization: 'requests served per second during the overload ÷ C',
      ttft: 'ms, client side',
      queueWaitMs: "mean ms a request waited to be placed (the gateway's model_gateway_tenant_queue_wait_seconds)",
      rss: 'MiB, the gateway process alone',
    },
    summary,
    targets,
  };
  const results = new URL('./results/', import.meta.url);
  writeFileSync(new URL('fairness.json', results), `${JSON.stringify(json, null, 2)}\n`);
  // Every mode has its summary by now (the loop above).
  writeFileSync(new URL('fairness.svg', results), fairnessChart({ summary: summary as Record<Mode, ModeSummary> }));
  process.stderr.write('[fairness] wrote bench/results/fairness.json and fairness.svg\n');
}

if (process.argv.includes('--chart-only')) {
  // Draw bench/results/fairness.svg again from the committed fairness.json (no run).
  const results = new URL('./results/', import.meta.url);
  const json = JSON.parse(readFileSync(new URL('fairness.json', results), 'utf8')) as {
    summary: Record<Mode, ModeSummary>;
  };
  writeFileSync(new URL('fairness.svg', results), fairnessChart(json));
} else {
  main().catch(benchFailed('bench:fairness', USAGE));
}
