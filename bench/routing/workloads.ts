/**
 * The seeded workloads of the routing benchmark (issue #5 part 3; dp-routing.md sections 9-11 for what each one
 * stresses; issue 12 adds three with shared prefixes, 14.11). A workload is a pure function of its seed: the same
 * seed gives the same requests, lengths, prompt tokens and arrival times on every run. Arrival times are in **engine
 * ms** (unscaled); the runner multiplies them by the same time scale as the simulated step times
 * (src/sim/virtual-run.ts explains why a power of two keeps runs identical).
 */

/** A run of seeded token ids shared by every prompt that names it (a system prompt, a document). Tokens. */
export interface PromptSegment {
  seed: number;
  tokens: number;
}

/** One benchmark request. Units: tokens, engine ms. */
export interface BenchRequest {
  /** Request id, unique within the workload. */
  id: string;
  /** Arrival time in engine ms, relative to the start of its phase (≥ 0). Ignored for a request that `follows`. */
  atMs: number;
  /**
   * The request's own prompt tokens (≥ 1), seeded by `seed`, after its `prefix` segments (or, for a follow-up turn,
   * after the previous turn's prompt and output).
   */
  promptTokens: number;
  /** Shared segments the prompt starts with, in order (default none). */
  prefix?: PromptSegment[];
  /**
   * A conversation's next turn (closed loop): sent `thinkMs` engine ms after the `previous` request finished, its
   * prompt = the previous prompt + the previous output tokens + its own `promptTokens` tokens.
   */
  follows?: { previous: string; thinkMs: number };
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
  /** Restart this DP rank (a fresh process: empty cache, seq 0) at `atMs` engine ms into `main` (default none). */
  restart?: { rank: number; atMs: number };
  /** KV pages per rank for this workload, when it needs a smaller cache than the group's (default the group's). */
  kvTotalPages?: number;
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
export function intIn(rand: () => number, lo: number, hi: number): number {
  return lo + Math.floor(rand() * (hi - lo + 1));
}

/** Exponential inter-arrival gap with the given mean (engine ms). */
function expGap(rand: () => number, meanMs: number): number {
  return -Math.log(1 - rand()) * meanMs;
}

/** A pick from weights ∝ 1 / (rank + 1)^s over `n` items (Zipf; s = 0 is uniform). */
function zipfPick(rand: () => number, n: number, s: number): number {
  const weights = Array.from({ length: n }, (_, i) => 1 / Math.pow(i + 1, s));
  let x = rand() * weights.reduce((a, b) => a + b, 0);
  for (let i = 0; i < n; i++) {
    x -= weights[i];
    if (x < 0) return i;
  }
  return n - 1;
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
 *   (in its load reports only), alongside a uniform stream;
 * and six with shared prefixes (issue 12; what prefix-cache affinity is for, dp-routing.md 14.11). Three are sized by
 * one rule (`SHARED_WORKING_SET_TOKENS`): what they share at a time is about **twice one rank's KV cache** (the
 * benchmark's ranks have 2048 pages = 32 768 tokens each) and half the group's, so no rank can cache everything but
 * the group can; the hits come from what each workload's name says:
 * - `multi_turn`: chat conversations whose history grows turn by turn. Each conversation runs behind one of 8 short
 *   app system prompts (64-192 tokens: about 1 000 tokens in all, cached everywhere but a small part of any prompt),
 *   starts with a 300-1200-token first message (text the user pasted), then 3-6 turns of 64-128-token answers and
 *   50-200-token follow-ups, each sent 150-450 ms after the previous answer; a new conversation every 30 ms on
 *   average, about 45 of them open at once with about 1500 history tokens each (≈ 67 000 tokens);
 * - `shared_prompt`: 12 long system prompts (4500-6500 tokens, about 66 000 in all, like agent prompts with tool
 *   definitions), equally popular, × many users (64-256-token messages), Poisson arrivals every 25 ms;
 * - `rag`: 24 documents of 2000-3500 tokens (about 66 000 in all) behind a 128-token instruction, asked 24-96-token
 *   questions uniformly at random, Poisson arrivals every 20 ms.
 * Three are the cases where `load` gets the hits too, kept so the table shows them:
 * - `multi_turn_shared_system`: `multi_turn`'s conversations (the first pass's workload, request for request) behind
 *   one 512-token system prompt that every rank caches;
 * - `shared_prompt_zipf`: `shared_prompt` with Zipf s = 0.8 popularity (the first pass's workload): the hot prompts
 *   stay cached on every rank;
 * - `shared_prompt_fits`: 4 system prompts of 3000-5000 tokens (about 16 000 in all, `FITS_WORKING_SET_TOKENS`):
 *   every rank holds them all.
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
  const uniformShape = (rand: () => number) => ({
    promptTokens: intIn(rand, 128, 256),
    outputTokens: intIn(rand, 64, 128),
  });

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

  return [uniform, heavyTail, longPrompt, bursty, idleRecovery, secondClient, ...prefixWorkloads(n, base)];
}

/** One rank's KV cache in the benchmark's group (bench/routing.ts: 2048 pages of 16 tokens). Tokens. */
export const RANK_KV_TOKENS = 2048 * 16;
/**
 * The sizing rule of the favourable shared-prefix workloads: what they share at a time (their working set) is twice
 * one rank's KV cache, i.e. half the 4-rank group's: more than any one rank can hold, so under `load` (every rank sees
 * every prefix) each rank evicts about half of it, while the group holds it all when each rank keeps its share, with
 * room left for the running requests' own pages. Tokens.
 */
export const SHARED_WORKING_SET_TOKENS = 2 * RANK_KV_TOKENS;
/** The rule of the `_fits` variant: everything shared fits in half of one rank's cache, so every rank holds it all. */
export const FITS_WORKING_SET_TOKENS = RANK_KV_TOKENS / 2;

/**
 * The shared-prefix workloads of `buildWorkloads` (see there), `n` measured requests each: the favourable ones sized
 * by `SHARED_WORKING_SET_TOKENS`, and the variants where `load` gets the hits too.
 */
function prefixWorkloads(n: number, base: number): Workload[] {
  const randFor = (salt: number): (() => number) => seededRandom((base ^ Math.imul(salt, 0x85ebca6b)) >>> 0);
  const seedOf = (rand: () => number): number => intIn(rand, 1, 2 ** 31 - 1);

  // Chat conversations until n turns in all; `system()` picks each conversation's system prompt.
  const conversations = (name: string, mt: () => number, system: () => PromptSegment): BenchRequest[] => {
    const turns: BenchRequest[] = [];
    let start = 0;
    for (let c = 0; turns.length < n; c++) {
      start += c === 0 ? 0 : expGap(mt, 30);
      const count = Math.min(intIn(mt, 3, 6), n - turns.length);
      for (let k = 0; k < count; k++) {
        const first = k === 0;
        turns.push({
          id: `${name}-${c}-${k}`,
          atMs: first ? start : 0,
          promptTokens: first ? intIn(mt, 300, 1200) : intIn(mt, 50, 200),
          outputTokens: intIn(mt, 64, 128),
          seed: seedOf(mt),
          ...(first
            ? { prefix: [system()] }
            : { follows: { previous: `${name}-${c}-${k - 1}`, thinkMs: intIn(mt, 150, 450) } }),
        });
      }
    }
    return turns;
  };
  const chatShape =
    '3-6 turns each, every turn resends the growing history (300-1200-token first message, 64-128-token answers, 50-200-token follow-ups 150-450 ms later); a new conversation every 30 ms';

  const ma = randFor(10);
  const apps: PromptSegment[] = Array.from({ length: 8 }, () => ({ seed: seedOf(ma), tokens: intIn(ma, 64, 192) }));
  const multiTurn: Workload = {
    name: 'multi_turn',
    description: `chat conversations behind 8 short app system prompts (64-192 tokens), ${chatShape}`,
    setup: [],
    main: conversations('multi_turn', ma, () => apps[intIn(ma, 0, apps.length - 1)]),
  };

  // The first pass's multi_turn, request for request (same salt): one 512-token system prompt for every chat.
  const ms = randFor(7);
  const everyone: PromptSegment = { seed: seedOf(ms), tokens: 512 };
  const multiTurnShared: Workload = {
    name: 'multi_turn_shared_system',
    description: `chat conversations behind one 512-token system prompt that every rank caches, ${chatShape}`,
    setup: [],
    main: conversations('multi_turn_shared_system', ms, () => everyone),
  };

  // n Poisson arrivals, each prompt = `prefix()` then its own `own` tokens, with `output` tokens to generate.
  const withPrefix = (
    name: string,
    rand: () => number,
    meanGapMs: number,
    prefix: () => PromptSegment[],
    own: [number, number],
    output: [number, number],
  ): BenchRequest[] => {
    const out: BenchRequest[] = [];
    for (let i = 0, t = 0; i < n; i++) {
      t = i === 0 ? 0 : t + expGap(rand, meanGapMs);
      out.push({
        id: `${name}-${i}`,
        atMs: t,
        prefix: prefix(),
        promptTokens: intIn(rand, ...own),
        outputTokens: intIn(rand, ...output),
        seed: seedOf(rand),
      });
    }
    return out;
  };
  const systemPrompts = (rand: () => number, count: number, lo: number, hi: number): PromptSegment[] =>
    Array.from({ length: count }, () => ({ seed: seedOf(rand), tokens: intIn(rand, lo, hi) }));
  const userShape = 'users with 64-256-token messages; Poisson arrivals (mean gap 25 ms), outputs 24-64';

  const su = randFor(11);
  const uniformPrompts = systemPrompts(su, 12, 4500, 6500);
  const sharedPrompt: Workload = {
    name: 'shared_prompt',
    description: `12 system prompts of 4500-6500 tokens, equally popular × ${userShape}`,
    setup: [],
    main: withPrefix(
      'shared_prompt',
      su,
      25,
      () => [uniformPrompts[intIn(su, 0, uniformPrompts.length - 1)]],
      [64, 256],
      [24, 64],
    ),
  };

  // The first pass's shared_prompt, request for request (same salt): Zipf popularity keeps the hot prompts everywhere.
  const sp = randFor(8);
  const zipfPrompts = systemPrompts(sp, 12, 4500, 6500);
  const sharedPromptZipf: Workload = {
    name: 'shared_prompt_zipf',
    description: `12 system prompts of 4500-6500 tokens, Zipf s=0.8 popularity (the hot ones cached on every rank) × ${userShape}`,
    setup: [],
    main: withPrefix(
      'shared_prompt_zipf',
      sp,
      25,
      () => [zipfPrompts[zipfPick(sp, zipfPrompts.length, 0.8)]],
      [64, 256],
      [24, 64],
    ),
  };

  const sf = randFor(12);
  const fitting = systemPrompts(sf, 4, 3000, 5000);
  const sharedPromptFits: Workload = {
    name: 'shared_prompt_fits',
    description: `4 system prompts of 3000-5000 tokens (all of them fit in every rank's cache), equally popular × ${userShape}`,
    setup: [],
    main: withPrefix(
      'shared_prompt_fits',
      sf,
      25,
      () => [fitting[intIn(sf, 0, fitting.length - 1)]],
      [64, 256],
      [24, 64],
    ),
  };

  const rg = randFor(9);
  const instruction: PromptSegment = { seed: seedOf(rg), tokens: 128 };
  const docs: PromptSegment[] = Array.from({ length: 24 }, () => ({ seed: seedOf(rg), tokens: intIn(rg, 2000, 3500) }));
  const questions = withPrefix(
    'rag',
    rg,
    20,
    () => [instruction, docs[intIn(rg, 0, docs.length - 1)]],
    [24, 96],
    [32, 96],
  );
  const rag: Workload = {
    name: 'rag',
    description:
      '24 documents of 2000-3500 tokens behind a 128-token instruction, asked 24-96-token questions at random; Poisson arrivals (mean gap 20 ms), outputs 32-96',
    setup: [],
    main: questions,
  };
  return [multiTurn, multiTurnShared, sharedPrompt, sharedPromptZipf, sharedPromptFits, rag];
}

/** The simulated ranks' prefix-cache block (src/sim/scheduler.ts `KV_PAGE_TOKENS`). Tokens. */
const CACHE_BLOCK_TOKENS = 16;

/**
 * The prefix-cache hit rate no policy can beat on `workload` (0..1; NaN without measured requests): every measured
 * request lands on a rank that holds everything it shares with the requests before it, and nothing is ever evicted.
 * A request shares its whole previous turn (prompt + output, the turn it `follows`) or the longest run of leading
 * `prefix` segments some earlier request of the list also started with (which request comes first hardly matters:
 * one per distinct run misses it); hits count in full blocks of 16 tokens,
 * at most `floor((prompt − 1) / 16)` of them (the sim always computes one token, src/sim/scheduler.ts), so a prompt
 * shared block for block counts as the sim would count it. Setup and foreign requests do not count, but seed the
 * earlier prefixes. An upper bound for the issue 12 hit-rate targets: when 2× `load`'s hit rate exceeds it, the
 * target cannot be met on that workload. Pure.
 */
export function hitRateCeiling(workload: Workload): number {
  const promptLen = new Map<string, number>();
  const outputOf = new Map<string, number>();
  const seen: PromptSegment[][] = [];
  const blocks = (tokens: number): number => Math.floor(tokens / CACHE_BLOCK_TOKENS);
  const segTokens = (segs: readonly PromptSegment[], j: number): number =>
    segs.slice(0, j).reduce((s, g) => s + g.tokens, 0);
  let prompt = 0;
  let cached = 0;
  for (const req of [...workload.setup, ...workload.main]) {
    const segs = req.prefix ?? [];
    let len: number;
    let shared: number;
    if (req.follows) {
      const before = (promptLen.get(req.follows.previous) ?? 0) + (outputOf.get(req.follows.previous) ?? 0);
      len = before + req.promptTokens;
      shared = blocks(before);
    } else {
      len = segTokens(segs, segs.length) + req.promptTokens;
      let j = 0;
      for (const other of seen) {
        let k = 0;
        while (
          k < segs.length &&
          k < other.length &&
          segs[k].seed === other[k].seed &&
          segs[k].tokens === other[k].tokens
        )
          k += 1;
        j = Math.max(j, k);
      }
      shared = blocks(segTokens(segs, j));
      seen.push(segs);
    }
    promptLen.set(req.id, len);
    outputOf.set(req.id, req.outputTokens);
    if (workload.setup.includes(req) || req.foreignRank !== undefined) continue;
    prompt += len;
    cached += Math.min(shared, blocks(len - 1)) * CACHE_BLOCK_TOKENS;
  }
  return prompt > 0 ? cached / prompt : Number.NaN;
}
