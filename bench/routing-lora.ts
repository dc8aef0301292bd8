/**
 * Adapter-aware routing benchmark (issue 31 part 2; src/engine-client/lora-aware.ts): a Zipf-popular LoRA adapter
 * workload on a group of simulated vLLM ranks that each hold `--max-loras` adapters at once (src/sim/lora-slots.ts:
 * a step runs at most that many distinct adapters, a cold adapter costs a load), through the real engine-client path
 * (EngineClient.submit → ZmqEngineLink → ZeroMQ → in-process simulated vLLM ranks), routed by `load` and by
 * `lora_aware`, same requests, same seed, side by side. Prints per policy the adapter loads (summed over the ranks'
 * counters), TTFT p50/p99 and the mean in-flight share of the busiest rank, each as the median over the seeds with
 * its min–max spread, and the paired ratio `lora_aware ÷ load` per seed.
 *
 * Usage: `npm run bench:routing:lora` (= `npx tsx bench/routing-lora.ts`), options `--requests N` (per run, default
 * 400), `--seeds K` (default 3), `--seed S` (the first seed), `--adapters A` (default 16), `--ranks R` (default 4),
 * `--max-loras M` (default 2), `--rate X` (arrivals per simulated second, default 40), `--time-scale X` (wall ms per
 * simulated ms, default 1), `--write` (bench/results/routing-lora.json; without it nothing is written). Progress on
 * stderr.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { EngineClient } from '../src/engine-client/client.js';
import { createDpPolicy } from '../src/engine-client/policies.js';
import { DEFAULT_LORA_SLACK } from '../src/engine-client/lora-aware.js';
import { createVllmProtocol } from '../src/protocols/vllm/index.js';
import { DEFAULT_SAMPLING, type GenerateRequest, type LoraTarget } from '../src/protocols/types.js';
import { runSimEngine, type SimEngineHandle } from '../src/sim/engine.js';
import { TextModel } from '../src/sim/text.js';
import { GatewayTokenizer } from '../src/tokenizer/tokenizer.js';
import { deriveEndpoints } from '../src/transport/endpoints.js';
import { ZmqEngineLink } from '../src/transport/zmq-link.js';
import { freePort } from '../test/helpers/net.js';
import { benchFailed, markdownTable, writeResult } from './routing/report.js';
import { percentile } from './routing/stats.js';
import { formatSpread, spreadOf, type Spread } from './routing/summary.js';
import { seededRandom, intIn } from './routing/workloads.js';

const USAGE = `npm run bench:routing:lora -- [options]
  --requests N    requests per run (400)        --seeds K     repeats (3); --seed S the first (20261207)
  --adapters A    adapters, Zipf-popular (16)   --ranks R     DP ranks (4)
  --max-loras M   adapters a rank holds (2)     --rate X      arrivals per simulated second (40)
  --time-scale X  wall ms per simulated ms (1)  --slack N     lora_aware's slack in requests (${DEFAULT_LORA_SLACK})
  --write         write bench/results/routing-lora.json`;

const POLICIES = ['load', 'lora_aware'] as const;
type Policy = (typeof POLICIES)[number];

interface Args {
  requests: number;
  seeds: number;
  seed: number;
  adapters: number;
  ranks: number;
  maxLoras: number;
  rate: number;
  timeScale: number;
  /** lora_aware's slack (requests; src/engine-client/lora-aware.ts). */
  slack: number;
  write: boolean;
}

interface BenchRequest {
  atMs: number;
  adapter: number;
  promptTokens: number;
  outputTokens: number;
  seed: number;
}

interface RunResult {
  loads: number;
  ttftP50: number;
  ttftP99: number;
  failed: number;
  /** The busiest rank's share of the requests (ratio 0..1). */
  maxShare: number;
}

function parseCli(argv: string[]): Args | null {
  if (argv.includes('--help') || argv.includes('-h')) return null;
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: {
      requests: { type: 'string', default: '400' },
      seeds: { type: 'string', default: '3' },
      seed: { type: 'string', default: '20261207' },
      adapters: { type: 'string', default: '16' },
      ranks: { type: 'string', default: '4' },
      'max-loras': { type: 'string', default: '2' },
      rate: { type: 'string', default: '40' },
      'time-scale': { type: 'string', default: '1' },
      slack: { type: 'string', default: String(DEFAULT_LORA_SLACK) },
      write: { type: 'boolean', default: false },
    },
  });
  const num = (name: string, v: string, min: number): number => {
    const n = Number(v);
    if (!Number.isFinite(n) || n < min) throw new RangeError(`--${name} must be a number ≥ ${min}, got '${v}'`);
    return n;
  };
  return {
    requests: num('requests', values.requests!, 1),
    seeds: num('seeds', values.seeds!, 1),
    seed: num('seed', values.seed!, 0),
    adapters: num('adapters', values.adapters!, 1),
    ranks: num('ranks', values.ranks!, 1),
    maxLoras: num('max-loras', values['max-loras']!, 1),
    rate: num('rate', values.rate!, 0.001),
    timeScale: num('time-scale', values['time-scale']!, 0.01),
    slack: num('slack', values.slack!, 0),
    write: values.write === true,
  };
}

/** Zipf(s = 1) over `n` ranks: P(k) ∝ 1/(k+1). */
function zipfPicker(n: number, rand: () => number): () => number {
  const weights = Array.from({ length: n }, (_, k) => 1 / (k + 1));
  const total = weights.reduce((a, b) => a + b, 0);
  return () => {
    let x = rand() * total;
    for (let k = 0; k < n; k++) {
      x -= weights[k]!;
      if (x <= 0) return k;
    }
    return n - 1;
  };
}

/** The seeded workload: Poisson arrivals at `rate`, Zipf-popular adapters, prompts 100–400, outputs 40–120 tokens. */
function workload(a: Args, seed: number): BenchRequest[] {
  const rand = seededRandom(seed);
  const pick = zipfPicker(a.adapters, rand);
  let t = 0;
  return Array.from({ length: a.requests }, (_, i) => {
    t += (-Math.log(1 - rand()) / a.rate) * 1000;
    return {
      atMs: t,
      adapter: pick(),
      promptTokens: intIn(rand, 100, 400),
      outputTokens: intIn(rand, 40, 120),
      seed: seed * 10_000 + i,
    };
  });
}

/** One run of `reqs` under `policy` on fresh ranks. */
async function runOnce(
  a: Args,
  policy: Policy,
  reqs: readonly BenchRequest[],
  textModel: TextModel,
  tokenizer: GatewayTokenizer,
): Promise<RunResult> {
  const dir = await mkdtemp(join(tmpdir(), 'mgw-bench-lora-'));
  const endpoints = deriveEndpoints(`ipc://${dir}/gw`, `tcp://127.0.0.1:${await freePort()}`);
  const link = await ZmqEngineLink.bind({ endpoints, dpSize: a.ranks, handshakeReceiveTimeoutMs: 30_000 });
  const handles: SimEngineHandle[] = [];
  let client: EngineClient | null = null;
  try {
    const [, ...ranks] = await Promise.all([
      link.whenJoined(),
      ...Array.from({ length: a.ranks }, (_, i) =>
        runSimEngine({
          engine: 'vllm',
          engineIndex: i,
          handshakeAddress: endpoints.handshake,
          timeScale: a.timeScale,
          maxRunning: 64,
          maxLoras: a.maxLoras,
          kvTotalPages: 4096,
          maxModelLen: 8192,
          textModel,
          vocabSize: tokenizer.vocabSize,
          eosTokenIds: tokenizer.eosTokenIds,
          closeGraceMs: 50,
          initTimeoutMs: 30_000,
        }),
      ),
    ]);
    handles.push(...(ranks as SimEngineHandle[]));
    // The adapters' paths must exist for the ranks (as for vLLM): the run's temp folder does.
    const adapters: LoraTarget[] = Array.from({ length: a.adapters }, (_, k) => ({
      name: `adapter-${k}`,
      id: k + 1,
      path: dir,
      baseModelName: null,
    }));
    const c = new EngineClient({
      protocol: createVllmProtocol(),
      link,
      policy: createDpPolicy(policy, { maxLoras: a.maxLoras, loraSlack: a.slack }),
    });
    client = c;
    const t0 = performance.now();
    const ttfts: number[] = [];
    const perRank = new Array<number>(a.ranks).fill(0);
    let failed = 0;
    await Promise.all(
      reqs.map(async (r, i) => {
        const wait = t0 + r.atMs * a.timeScale - performance.now();
        if (wait > 0) await new Promise((res) => setTimeout(res, wait));
        const request: GenerateRequest = {
          requestId: `lora-${i}`,
          promptTokenIds: Array.from({ length: r.promptTokens }, (_, j) => 1000 + ((r.seed * 31 + j * 7) % 20_000)),
          sampling: { ...DEFAULT_SAMPLING, maxNewTokens: r.outputTokens, ignoreEos: true, seed: r.seed },
          stream: true,
          returnLogprob: false,
          lora: adapters[r.adapter]!,
        };
        const submitted = performance.now();
        let first: number | null = null;
        try {
          const stream = await c.submit(request);
          if (stream.engineIndex !== null) perRank[stream.engineIndex]! += 1;
          for await (const out of stream) {
            if (first === null && out.newTokenIds.length > 0) first = performance.now();
            if (out.finishReason !== null && out.finishReason !== 'length') failed += 1;
          }
        } catch {
          failed += 1;
        }
        if (first !== null) ttfts.push((first - submitted) / a.timeScale);
      }),
    );
    const loads = handles.reduce((sum, h) => sum + h.stats().loraLoads, 0);
    return {
      loads,
      ttftP50: percentile(ttfts, 50),
      ttftP99: percentile(ttfts, 99),
      failed,
      maxShare: Math.max(...perRank) / reqs.length,
    };
  } finally {
    await client?.close();
    await Promise.all(handles.map((h) => h.close()));
    await link.close();
    await rm(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const a = parseCli(process.argv.slice(2));
  if (a === null) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  const textModel = new TextModel(tokenizer);
  const runs: Record<Policy, RunResult[]> = { load: [], lora_aware: [] };
  const started = performance.now();
  for (let s = 0; s < a.seeds; s++) {
    const seed = a.seed + s;
    const reqs = workload(a, seed);
    for (const p of POLICIES) {
      process.stderr.write(`seed ${seed} ${p} … `);
      const r = await runOnce(a, p, reqs, textModel, tokenizer);
      runs[p].push(r);
      process.stderr.write(`${r.loads} loads, TTFT p99 ${r.ttftP99.toFixed(0)} ms\n`);
    }
  }
  const ratio = (k: keyof RunResult): Spread => spreadOf(runs.lora_aware.map((r, i) => r[k] / runs.load[i]![k]));
  const row = (p: Policy): string[] => [
    p,
    formatSpread(spreadOf(runs[p].map((r) => r.loads)), 0),
    formatSpread(spreadOf(runs[p].map((r) => r.ttftP50)), 0),
    formatSpread(spreadOf(runs[p].map((r) => r.ttftP99)), 0),
    formatSpread(spreadOf(runs[p].map((r) => r.maxShare)), 2),
    String(runs[p].reduce((n, r) => n + r.failed, 0)),
  ];
  const lines = markdownTable([
    ['policy', 'adapter loads', 'TTFT p50 (ms)', 'TTFT p99 (ms)', 'busiest rank share', 'failed'],
    row('load'),
    row('lora_aware'),
  ]);
  const loads = ratio('loads');
  const p99 = ratio('ttftP99');
  const p99Load = spreadOf(runs.load.map((r) => r.ttftP99));
  const p99Aware = spreadOf(runs.lora_aware.map((r) => r.ttftP99));
  const within = p99Aware.median <= p99Load.max;
  const summary = [
    ``,
    `${a.seeds} seeds, ${a.requests} requests each, ${a.adapters} Zipf adapters, ${a.ranks} ranks with --max-loras ${a.maxLoras}, ${a.rate} req/s; ${((performance.now() - started) / 1000).toFixed(0)} s`,
    ...lines,
    ``,
    `lora_aware ÷ load, paired per seed: adapter loads ${formatSpread(loads, 2)}, TTFT p99 ${formatSpread(p99, 2)}`,
    `target: ≥ 30 % fewer loads (ratio ≤ 0.70): ${loads.median <= 0.7 ? 'met' : 'NOT met'}; ` +
      `TTFT p99 within load's spread (median ${p99Aware.median.toFixed(0)} ≤ load's max ${p99Load.max.toFixed(0)} ms): ${within ? 'met' : 'NOT met'}`,
  ];
  process.stdout.write(summary.join('\n') + '\n');
  if (a.write) {
    const path = await writeResult(
      'routing-lora.json',
      JSON.stringify({ args: a, runs, ratios: { loads, ttftP99: p99 } }, null, 2) + '\n',
    );
    process.stdout.write(`wrote ${path}\n`);
  }
}

main().catch(benchFailed('bench:routing:lora', USAGE));
