/**
 * Routing diagnostics (issue 12 follow-up): runs chosen workloads × policies on the routing benchmark's group and
 * prints what the summary tables hide: per-rank token and request shares, prefix hits and TTFT by conversation turn,
 * per-rank queue lengths over time (as the policy saw them at each decision), how far each decision strayed from what
 * the `load` score alone would pick and by how much (load terms against matched prefix tokens), and how
 * conversations move between ranks. Nothing is written.
 *
 * Usage: `npm run bench:routing:diagnose -- --workloads multi_turn --policies load,cache_aware [--seed S] [--seeds K]
 * [--requests N] [--time-scale X] [--ranks R]` (R ranks instead of the benchmark's 4, the last one slowed 2×: what the
 * rank count does to a policy; the workloads stay sized for 4).
 */
import { parseArgs } from 'node:util';
import { fleetScorer, DEFAULT_LOAD_HORIZON_MS, lowestPosition, queuedRequests } from '../src/engine-client/policy.js';
import { isDpPolicyName, type DpPolicyName } from '../src/engine-client/policies.js';
import { GatewayTokenizer } from '../src/tokenizer/tokenizer.js';
import { benchGroup } from './routing/report.js';
import { runOnce, type GroupConfig, type RunDiagnostics } from './routing/run.js';
import { percentile } from './routing/stats.js';
import { buildWorkloads } from './routing/workloads.js';

const USAGE = `npm run bench:routing:diagnose -- [options]
  --workloads a,b   workloads of the routing benchmark (multi_turn)
  --policies a,b    DP policies (load,cache_aware)
  --seed S          first seed (20261130); --seeds K seeds in all (1)
  --requests N      measured requests per workload (200)
  --time-scale X    simulated step-time scale (0.5)
  --ranks R         simulated ranks, the last one slowed 2x (4)
  --help            this text`;

const { values } = parseCli(() =>
  parseArgs({
    options: {
      help: { type: 'boolean' },
      workloads: { type: 'string', default: 'multi_turn' },
      policies: { type: 'string', default: 'load,cache_aware' },
      seed: { type: 'string', default: '20261130' },
      seeds: { type: 'string', default: '1' },
      requests: { type: 'string', default: '200' },
      'time-scale': { type: 'string', default: '0.5' },
      ranks: { type: 'string', default: '4' },
    },
  }),
);
if (values.help === true) {
  console.log(USAGE);
  process.exit(0);
}

/** Parse the command line, or print what was wrong and the usage and exit 2 (no stack trace). */
function parseCli<T>(parse: () => T): T {
  try {
    return parse();
  } catch (error) {
    process.stderr.write(
      `bench:routing:diagnose: ${error instanceof Error ? error.message : String(error)}\n${USAGE}\n`,
    );
    process.exit(2);
  }
}

const fmt = (x: number, d = 2): string => (Number.isFinite(x) ? x.toFixed(d) : '-');
const mean = (xs: number[]): number => (xs.length === 0 ? Number.NaN : xs.reduce((a, b) => a + b, 0) / xs.length);

function report(name: string, policy: string, diag: RunDiagnostics, ranks: number): void {
  console.log(`\n=== ${name} / ${policy}`);
  const byRank = Array.from({ length: ranks }, () => ({ n: 0, prompt: 0, cached: 0, ttft: [] as number[] }));
  for (const r of diag.requests) {
    if (r.rank === null) continue;
    const b = byRank[r.rank];
    b.n += 1;
    b.prompt += r.promptTokens;
    b.cached += r.cachedTokens;
    b.ttft.push(r.ttftMs);
  }
  console.log('per rank: requests, prompt tokens, hit rate, TTFT p50 / p99');
  byRank.forEach((b, i) =>
    console.log(
      `  rank ${i}: ${b.n} req, ${b.prompt} prompt tok, hits ${fmt(b.cached / b.prompt)}, TTFT ${fmt(percentile(b.ttft, 50), 1)} / ${fmt(percentile(b.ttft, 99), 1)}`,
    ),
  );

  // By turn (ids `<workload>-<conversation>-<turn>`).
  const turns = new Map<number, { prompt: number; cached: number; ttft: number[] }>();
  for (const r of diag.requests) {
    const m = /-(\d+)-(\d+)$/.exec(r.id);
    if (!m) continue;
    const k = Number(m[2]);
    const t = turns.get(k) ?? { prompt: 0, cached: 0, ttft: [] };
    t.prompt += r.promptTokens;
    t.cached += r.cachedTokens;
    t.ttft.push(r.ttftMs);
    turns.set(k, t);
  }
  if (turns.size > 0) {
    console.log('by turn: requests, mean prompt, hit rate, TTFT p50');
    for (const [k, t] of [...turns].sort((a, b) => a[0] - b[0])) {
      console.log(
        `  turn ${k}: ${t.ttft.length} req, prompt ${fmt(t.prompt / t.ttft.length, 0)}, hits ${fmt(t.cached / t.prompt)}, TTFT p50 ${fmt(percentile(t.ttft, 50), 1)}`,
      );
    }
    // Conversation moves and stickiness to each rank.
    const conv = new Map<string, number[]>();
    for (const d of diag.decisions) {
      const m = /^(.*)-(\d+)$/.exec(d.requestId);
      if (!m) continue;
      conv.set(m[1], [...(conv.get(m[1]) ?? []), d.rank]);
    }
    let moves = 0;
    let follow = 0;
    const startedOn = Array.from({ length: ranks }, () => ({ n: 0, stayed: 0 }));
    for (const rs of conv.values()) {
      for (let i = 1; i < rs.length; i++) {
        follow += 1;
        if (rs[i] !== rs[i - 1]) moves += 1;
      }
      startedOn[rs[0]].n += 1;
      if (rs.every((r) => r === rs[0])) startedOn[rs[0]].stayed += 1;
    }
    console.log(`conversations: ${conv.size}; follow-up turns that moved rank: ${moves}/${follow}`);
    startedOn.forEach((s, i) => console.log(`  started on rank ${i}: ${s.n}, stayed there throughout: ${s.stayed}`));
  }

  // Queue lengths over time, as the policy saw them (engine's queued count and own in-flight), in 8 time bins.
  const scored = diag.decisions.filter((d) => !d.pinned && d.views.length === ranks);
  if (scored.length === 0) return;
  const end = scored[scored.length - 1].atMs;
  const bins = 8;
  console.log(
    'queued (engine report, aged as load scores it) / own in-flight / KV in use per rank, mean over the decisions of each time bin:',
  );
  for (let b = 0; b < bins; b++) {
    const inBin = scored.filter((d) => Math.min(bins - 1, Math.floor((d.atMs / (end || 1)) * bins)) === b);
    const cells = Array.from({ length: ranks }, (_, i) => {
      const q = mean(inBin.map((d) => (d.views[i].load ? queuedRequests(d.views[i].load!) : 0)));
      const own = mean(inBin.map((d) => d.views[i].inFlight));
      const kv = mean(inBin.map((d) => d.views[i].load?.kvCacheUsage ?? 0));
      return `${fmt(q, 1)}/${fmt(own, 1)}/${fmt(kv * 100, 0)}%`;
    });
    console.log(`  t≈${fmt(((b + 0.5) * end) / bins, 0)} ms (${inBin.length} dec): ${cells.join('  ')}`);
  }

  // Decision anatomy: where the choice differs from load's choice, by how much load and how many matched tokens.
  let differs = 0;
  let withMatch = 0;
  const extraLoad: number[] = [];
  const gainedTokens: number[] = [];
  let toSlow = 0;
  let toSlowLoadWould = 0;
  let boundFired = 0;
  const bonusOfChosen: number[] = [];
  const loadGapOfBest: number[] = [];
  for (const d of scored) {
    const score = fleetScorer(d.views, DEFAULT_LOAD_HORIZON_MS);
    const loads = d.views.map(score);
    const pos = d.views.findIndex((v) => v.engineIndex === d.rank);
    const loadPos = lowestPosition(loads, 0);
    if (Math.max(...d.matchedTokens) > 0) withMatch += 1;
    const minLoad = Math.min(...loads);
    // The first pass's bound (abs 8 AND rel 1.5, per rank) and bonus (matched / 256), as they stood at this decision.
    if (d.matchedTokens.some((m, i) => m > 0 && loads[i] - minLoad > 8 && loads[i] > 1.5 * minLoad)) boundFired += 1;
    const best = d.matchedTokens.indexOf(Math.max(...d.matchedTokens));
    bonusOfChosen.push(d.matchedTokens[best] / 256);
    loadGapOfBest.push(loads[best] - minLoad);
    if (d.rank === ranks - 1) toSlow += 1;
    if (loadPos === ranks - 1) toSlowLoadWould += 1;
    if (loads[pos] > Math.min(...loads)) {
      differs += 1;
      extraLoad.push(loads[pos] - Math.min(...loads));
      gainedTokens.push(d.matchedTokens[pos] - d.matchedTokens[loadPos]);
    }
  }
  console.log(
    `decisions: ${scored.length}, with any indexed match: ${withMatch}, chose a rank with a higher load score than the minimum: ${differs}` +
      ` (extra load p50 ${fmt(percentile(extraLoad, 50), 1)}, max ${fmt(Math.max(...extraLoad), 1)}; matched tokens gained over load's pick p50 ${fmt(percentile(gainedTokens, 50), 0)})`,
  );
  console.log(
    `  best-matching rank: bonus (matched/256) p50 ${fmt(percentile(bonusOfChosen, 50), 1)} p90 ${fmt(percentile(bonusOfChosen, 90), 1)};` +
      ` its load above the minimum p50 ${fmt(percentile(loadGapOfBest, 50), 1)} p90 ${fmt(percentile(loadGapOfBest, 90), 1)}; first-pass bound fired on ${boundFired} decisions`,
  );
  if (diag.policyStats) console.log(`  policy decisions: ${JSON.stringify(diag.policyStats)}`);
  missAttribution(diag, ranks);
  console.log(
    `  sent to the slow rank ${ranks - 1}: ${toSlow} (load's minimum there, first of ties: ${toSlowLoadWould})`,
  );
}

/**
 * Where the prompt tokens that missed went, per the shadow index (what `cache_aware` would know at each decision)
 * against the rank's reported hit, as shares of all measured prompt tokens: `moved` = the index held more of the
 * prompt on another rank than on the chosen one (by whether that other rank was the slow one); `evicted` = the index
 * held it on the chosen rank but the rank had evicted it; `extra` = the rank hit more than the index knew (generated
 * tokens, another conversation's blocks).
 */
function missAttribution(diag: RunDiagnostics, ranks: number): void {
  const byId = new Map(
    diag.decisions.filter((d) => !d.pinned && d.views.length === ranks).map((d) => [d.requestId, d]),
  );
  // Prompt tokens: all, hit, lost to moves (off the slow rank / the others), indexed but evicted, hit beyond the index.
  const t = { prompt: 0, cached: 0, movedOffSlow: 0, movedOther: 0, movedCount: 0, evicted: 0, extra: 0 };
  const evictedByRank = Array.from({ length: ranks }, () => 0);
  const movedByReason = new Map<string, number>();
  for (const r of diag.requests) {
    const d = byId.get(r.id);
    if (d === undefined || r.rank === null) continue;
    t.prompt += r.promptTokens;
    t.cached += r.cachedTokens;
    const pos = d.views.findIndex((v) => v.engineIndex === r.rank);
    const mc = d.matchedTokens[pos] ?? 0;
    const best = d.matchedTokens.indexOf(Math.max(...d.matchedTokens));
    const lost = d.matchedTokens[best] - mc;
    if (lost > 0) {
      t.movedCount += 1;
      const why = d.reason ?? 'load';
      movedByReason.set(why, (movedByReason.get(why) ?? 0) + lost);
      if (best === ranks - 1) t.movedOffSlow += lost;
      else t.movedOther += lost;
    }
    // The rank never counts the prompt's last token as a hit (at least one is computed).
    const promisable = Math.min(mc, Math.floor((r.promptTokens - 1) / 16) * 16);
    if (promisable > r.cachedTokens) {
      t.evicted += promisable - r.cachedTokens;
      evictedByRank[r.rank] += promisable - r.cachedTokens;
    } else t.extra += r.cachedTokens - promisable;
  }
  const pct = (x: number): string => `${fmt((100 * x) / (t.prompt || 1), 1)}%`;
  console.log(
    `  hits ${pct(t.cached)} of prompt tokens; lost by choosing a rank holding less of the prompt than another (${t.movedCount} requests): ` +
      `${pct(t.movedOffSlow)} off the slow rank, ${pct(t.movedOther)} off the others; indexed but evicted by the rank: ${pct(t.evicted)} ` +
      `(per rank ${evictedByRank.map(pct).join(' ')}); hit beyond the index: ${pct(t.extra)}`,
  );
  console.log(
    `  lost by moves, by the policy's reason: ${[...movedByReason].map(([k, v]) => `${k} ${pct(v)}`).join(', ')}`,
  );
}

async function main(): Promise<void> {
  const policies = values.policies!.split(',');
  for (const p of policies) if (!isDpPolicyName(p)) throw new RangeError(`unknown policy ${p}`);
  const tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  const group: GroupConfig = benchGroup(Number(values.ranks), Number(values['time-scale']), tokenizer);
  const seed0 = Number(values.seed);
  for (let s = 0; s < Number(values.seeds); s++) {
    const workloads = buildWorkloads({ requests: Number(values.requests), seed: seed0 + s }).filter((w) =>
      values.workloads!.split(',').includes(w.name),
    );
    for (const w of workloads) {
      for (const p of policies as DpPolicyName[]) {
        const diag: RunDiagnostics = { decisions: [], requests: [] };
        const m = await runOnce(w, p, group, diag);
        console.log(
          `\n--- seed ${seed0 + s}: TTFT p50 ${fmt(m.ttftP50, 1)} p99 ${fmt(m.ttftP99, 0)}, ITL p50 ${fmt(m.itlP50, 1)} p99 ${fmt(m.itlP99, 0)}, preemptions ${m.preemptions}, tok/s ${fmt(m.throughput, 0)}, hits ${fmt(m.prefixHitRate)}, shares ${m.tokenShare.map((x) => fmt(x)).join(' ')}, span ${fmt(m.spanMs, 0)} ms`,
        );
        report(w.name, p, diag, group.ranks);
      }
    }
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
