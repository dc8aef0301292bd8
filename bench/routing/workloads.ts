/**
 * The seeded workloads of the routing benchmark (issue #5 part 3; dp-routing.md sections 9-11 for what each one
 * stresses). A workload is a pure function of its seed: the same seed gives the same requests, lengths and arrival
 * times on every run. Arrival times are in **engine ms** (unscaled); the runner multiplies them by the same time
 * scale as the simulated step times (src/sim/virtual-run.ts explains why a power of two keeps runs identical).
 */

/** One benchmark request. Units: tokens, engine ms. */
export interface BenchRequest {
  /** Request id, unique within the workload. */
  id: string;
  /** Arrival time in engine ms, relative to the start of its phase (≥ 0). */
  atMs: number;
  /** Prompt length in tokens (≥ 1). */
  promptTokens: number;
  /** Exact output length in tokens (sent as `max_new_tokens` with `ignore_eos`, so the request runs to it). */
  outputTokens: number;
  /** Per-request sampling seed. */
  seed: number;
  /** Pin to this DP rank (dp-routing.md 9.1; no scoring). */
  pinRank?: number;
  /**
   * Sent by a second client straight to this DP rank's identity over the same input socket, bypassing the engine
   * client (it never sees the request in its in-flight sets; only the rank's load reports show it). Not measured.
   */
  foreignRank?: number;
}

/**
 * A workload: `setup` requests run first and are awaited to completion (not measured), then `main` starts; its
 * arrival times count from the moment the setup finished. Every `main` request without `foreignRank` is measured.
 */
export interface Workload {
  name: string;
  description: string;
  setup: BenchRequest[];
  main: BenchRequest[];
}

/** mulberry32: a small seeded PRNG returning uniform floats in [0, 1). Deterministic for a given 32-bit seed. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return (): number => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Uniform integer in [lo, hi] (inclusive). */
function intIn(rand: () => number, lo: number, hi: number): number {
  return lo + Math.floor(rand() * (hi - lo + 1));
}

/** Exponential inter-arrival gap with the given mean (engine ms). */
function expGap(rand: () => number, meanMs: number): number {
  return -Math.log(1 - rand()) * meanMs;
}

/** Options of `buildWorkloads`. `requests`: measured requests per workload (default 200); `seed`: base seed. */
export interface WorkloadOptions {
  requests?: number;
  seed?: number;
  /** The DP rank that goes idle in `idle_recovery` (default 0). */
  idleRank?: number;
  /** The DP rank the second client loads in `second_client` (default 1). */
  foreignRank?: number;
}

/**
 * Build the six workloads (issue #5 part 3), all sized for a 4-rank group of the sim's default step-time model:
 * - `uniform`: Poisson arrivals (mean gap 12 engine ms), prompts 128-256, outputs 64-128 tokens;
 * - `heavy_tail`: Poisson arrivals (mean gap 6 ms), outputs Pareto-distributed (α = 1.1, 16-1024 tokens): a few
 *   requests dominate the work;
 * - `long_prompt`: Poisson arrivals (mean gap 12 ms); 15 % of prompts are 2048-3072 tokens (prefill-heavy steps, KV
 *   pressure);
 * - `bursty`: bursts of 25 simultaneous requests every 300 engine ms (the same mean rate as `uniform`);
 * - `idle_recovery`: setup = 32 equal requests pinned to `idleRank` (admitted within a round or two, so they finish
 *   together), then a lighter Poisson stream (mean gap 24 ms) of unpinned requests: the idle rank's last report
 *   still counts ~31 running, and only the release clamp (section 10.2) clears it (section 10.3);
 * - `second_client`: a second client keeps 24 long requests running on `foreignRank` behind the gateway's back
 *   (in its load reports only), alongside a uniform stream.
 * Throws RangeError on a non-positive request count.
 */
export function buildWorkloads(opts: WorkloadOptions = {}): Workload[] {
  const n = opts.requests ?? 200;
  if (!Number.isSafeInteger(n) || n <= 0) throw new RangeError(`requests must be a positive integer, got ${n}`);
  const base = (opts.seed ?? 20261130) >>> 0;
  const idleRank = opts.idleRank ?? 0;
  const foreignRank = opts.foreignRank ?? 1;

  const stream = (
    name: string,
    salt: number,
    meanGapMs: number,
    shape: (rand: () => number) => { promptTokens: number; outputTokens: number },
    at: (rand: () => number, i: number, prev: number) => number = (rand, _i, prev) => prev + expGap(rand, meanGapMs),
  ): BenchRequest[] => {
    const rand = seededRandom((base ^ Math.imul(salt, 0x9e3779b1)) >>> 0);
    const out: BenchRequest[] = [];
    let t = 0;
    for (let i = 0; i < n; i++) {
      t = i === 0 ? 0 : at(rand, i, t);
      const { promptTokens, outputTokens } = shape(rand);
      out.push({ id: `${name}-${i}`, atMs: t, promptTokens, outputTokens, seed: intIn(rand, 1, 2 ** 31 - 1) });
    }
    return out;
  };
  const uniformShape = (rand: () => number) => ({ promptTokens: intIn(rand, 128, 256), outputTokens: intIn(rand, 64, 128) });

  const uniform: Workload = {
    name: 'uniform',
    description: 'Poisson arrivals (mean gap 12 ms), prompts 128-256, outputs 64-128 tokens',
    setup: [],
    main: stream('uniform', 1, 12, uniformShape),
  };

  const heavyTail: Workload = {
    name: 'heavy_tail',
    description: 'Poisson arrivals (mean gap 6 ms), prompts 128-256, outputs Pareto α=1.1 in 16-1024 tokens',
    setup: [],
    main: stream('heavy_tail', 2, 6, (rand) => ({
      promptTokens: intIn(rand, 128, 256),
      outputTokens: Math.min(1024, Math.round(16 / Math.pow(1 - rand(), 1 / 1.1))),
    })),
  };

  const longPrompt: Workload = {
    name: 'long_prompt',
    description: 'Poisson arrivals (mean gap 12 ms); 15% prompts 2048-3072 tokens, else 128-256; outputs 64-128',
    setup: [],
    main: stream('long_prompt', 3, 12, (rand) => ({
      promptTokens: rand() < 0.15 ? intIn(rand, 2048, 3072) : intIn(rand, 128, 256),
      outputTokens: intIn(rand, 64, 128),
    })),
  };

  const burstSize = 25;
  const bursty: Workload = {
    name: 'bursty',
    description: `bursts of ${burstSize} simultaneous requests every 300 ms; prompts 128-256, outputs 64-128`,
    setup: [],
    main: stream('bursty', 4, 0, uniformShape, (_rand, i) => Math.floor(i / burstSize) * 300),
  };

  const idleRand = seededRandom((base ^ 0x1d1e) >>> 0);
  const idleSetup: BenchRequest[] = Array.from({ length: 32 }, (_, i) => ({
    id: `idle-setup-${i}`,
    atMs: 0,
    promptTokens: 64,
    outputTokens: 160,
    seed: intIn(idleRand, 1, 2 ** 31 - 1),
    pinRank: idleRank,
  }));
  const idleRecovery: Workload = {
    name: 'idle_recovery',
    description: `32 requests pinned to rank ${idleRank} finish (nearly) together, then Poisson arrivals (mean gap 24 ms), uniform shapes`,
    setup: idleSetup,
    main: stream('idle_recovery', 5, 24, uniformShape),
  };

  const foreignRand = seededRandom((base ^ 0xf0e1) >>> 0);
  const foreign: BenchRequest[] = Array.from({ length: 24 }, (_, i) => ({
    id: `foreign-${i}`,
    atMs: 0,
    promptTokens: 64,
    outputTokens: 4000,
    seed: intIn(foreignRand, 1, 2 ** 31 - 1),
    foreignRank,
  }));
  const secondClient: Workload = {
    name: 'second_client',
    description: `a second client holds 24 long requests on rank ${foreignRank}; Poisson arrivals (mean gap 12 ms), uniform shapes`,
    setup: [],
    main: [...foreign, ...stream('second_client', 6, 12, uniformShape)],
  };

  return [uniform, heavyTail, longPrompt, bursty, idleRecovery, secondClient];
}
