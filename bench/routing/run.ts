/**
 * One routing-benchmark run (issue #5 part 4): a fresh group of in-process simulated TokenSpeed ranks
 * (src/sim/engine.ts `runSimEngine`; one rank slowed by `slowdown`, issue #5 part 2) registered over real ZeroMQ with
 * a `ZmqEngineLink` (engine-wire.md 1.2-1.3, handshake 2.1), an `EngineClient` using the policy under test
 * (src/engine-client/policies.ts; dp-routing.md 9.2, 10.2-10.3), and one workload replayed through
 * `EngineClient.submit` on a scaled clock. Measures TTFT, ITL, throughput and per-rank token share in simulated ms
 * (wall ms / timeScale).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { EngineClient } from '../../src/engine-client/client.js';
import { createDpPolicy, type DpPolicyName } from '../../src/engine-client/policies.js';
import type { RequestStream } from '../../src/engine-client/request-stream.js';
import { tokenspeedProtocol } from '../../src/protocols/tokenspeed/index.js';
import { DEFAULT_SAMPLING, RequestType, type GenerateRequest } from '../../src/protocols/types.js';
import { runSimEngine, type SimEngineHandle } from '../../src/sim/engine.js';
import type { TextModel } from '../../src/sim/text.js';
import { deriveEndpoints } from '../../src/transport/endpoints.js';
import { ZmqEngineLink } from '../../src/transport/zmq-link.js';
import { percentile, type RunMetrics } from './stats.js';
import { seededRandom, type BenchRequest, type Workload } from './workloads.js';

/** The simulated group and clock of a run. Units: ms ratio, tokens, pages of 16 tokens. */
export interface GroupConfig {
  /** DP ranks (engine indices 0..ranks-1). */
  ranks: number;
  /** Engine index of the slowed rank. */
  slowRank: number;
  /** Its step-time multiplier (e.g. 2). */
  slowdown: number;
  /** Wall ms per simulated ms (a power of two keeps scaled times exact; src/sim/virtual-run.ts). */
  timeScale: number;
  maxRunning: number;
  kvTotalPages: number;
  maxModelLen: number;
  /** The text model shared by every rank (loaded once). */
  textModel: TextModel;
  vocabSize: number;
  eosTokenIds: readonly number[];
}

/** A tcp port on 127.0.0.1 that was free a moment ago. Rejects with the listen error. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = address !== null && typeof address !== 'string' ? address.port : 0;
      server.close(() => (port > 0 ? resolve(port) : reject(new Error('no tcp port'))));
    });
  });
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));

/** Seeded prompt token ids (ordinary vocabulary ids 1000..29999). */
function promptIds(req: BenchRequest): number[] {
  const rand = seededRandom(req.seed ^ 0x5eed);
  return Array.from({ length: req.promptTokens }, () => 1000 + Math.floor(rand() * 29_000));
}

function toGenerate(req: BenchRequest): GenerateRequest {
  return {
    requestId: req.id,
    promptTokenIds: promptIds(req),
    sampling: { ...DEFAULT_SAMPLING, maxNewTokens: req.outputTokens, ignoreEos: true, seed: req.seed },
    stream: true,
    returnLogprob: false,
  };
}

/**
 * The benchmark's `OracleSource` (src/engine-client/policies.ts; issue #5 part 1): a rank's true outstanding work,
 * in tokens of a normal-speed rank, read synchronously at selection time:
 * `(SimScheduler.outstandingTokens() + work of ADDs sent to the rank but not yet registered by it) × slowdown`.
 * - The in-transit term: the scheduler only counts a request once its ADD crossed ZeroMQ, so without it a burst of
 *   selections made before any ADD arrives would all see the same state and herd onto one rank. Each rank handles
 *   its ADDs in send order (one ZMQ pipe per peer), so the ADDs not yet registered are exactly the last
 *   `sent − stats().added` of this rank's send list (every benchmark request is valid, so none is rejected). An
 *   unregistered request's work is `prompt + output` tokens, as `outstandingTokens()` counts it.
 * - The `slowdown` factor: a 2× slower rank needs twice the time per token, so equal token counts are not equal work.
 * `sent(rank, req)` must be called for every ADD (the engine client's and the second client's) before the next
 * selection reads the oracle.
 */
export class TrueWorkOracle {
  private readonly handles = new Map<number, SimEngineHandle>();
  private readonly sentWork = new Map<number, number[]>();
  private readonly slow: { rank: number; factor: number };

  constructor(ranks: readonly SimEngineHandle[], group: Pick<GroupConfig, 'slowRank' | 'slowdown'>) {
    for (const h of ranks) {
      this.handles.set(h.engineIndex, h);
      this.sentWork.set(h.engineIndex, []);
    }
    this.slow = { rank: group.slowRank, factor: group.slowdown };
  }

  /** Record an ADD sent to `rank` (in send order). */
  sent(rank: number, req: BenchRequest): void {
    this.sentWork.get(rank)?.push(req.promptTokens + req.outputTokens);
  }

  /** The rank's outstanding work (tokens × slowdown); +Infinity for an unknown rank. Never throws. */
  outstandingTokens(rank: number): number {
    const h = this.handles.get(rank);
    const sent = this.sentWork.get(rank);
    if (h === undefined || sent === undefined) return Number.POSITIVE_INFINITY;
    let inTransit = 0;
    for (let i = h.stats().added; i < sent.length; i++) inTransit += sent[i];
    return (h.outstandingTokens() + inTransit) * (rank === this.slow.rank ? this.slow.factor : 1);
  }
}

/** What one measured request saw (wall ms). */
interface Trace {
  rank: number | null;
  ttftMs: number | null;
  itlMs: number[];
  tokens: number;
  submitMs: number;
  finishMs: number;
  finishReason: string | null;
}

/** Read a stream to its end, recording wall times of token-bearing outputs. Never rejects (errors end the trace). */
async function consume(stream: RequestStream, submitMs: number): Promise<Trace> {
  const trace: Trace = { rank: stream.engineIndex, ttftMs: null, itlMs: [], tokens: 0, submitMs, finishMs: submitMs, finishReason: null };
  let last = submitMs;
  try {
    for await (const out of stream) {
      const now = performance.now();
      const n = out.newTokenIds.length;
      if (n > 0) {
        if (trace.ttftMs === null) trace.ttftMs = now - submitMs;
        else {
          const per = (now - last) / n;
          for (let i = 0; i < n; i++) trace.itlMs.push(per);
        }
        trace.tokens += n;
        last = now;
      }
      if (out.finishReason !== null) trace.finishReason = out.finishReason;
      trace.finishMs = now;
    }
  } catch (error) {
    trace.finishReason = `error: ${error instanceof Error ? error.message : String(error)}`;
    trace.finishMs = performance.now();
  }
  return trace;
}

/**
 * Run `workload` under `policy` on a fresh simulated group and return its metrics (simulated ms). Throws when the
 * handshake or a submit fails; every socket, rank and temp dir is closed before returning or throwing.
 */
export async function runOnce(workload: Workload, policy: DpPolicyName, group: GroupConfig): Promise<RunMetrics> {
  const dir = await mkdtemp(join(tmpdir(), 'mgw-bench-'));
  const endpoints = deriveEndpoints(`ipc://${dir}/gw`, `tcp://127.0.0.1:${await freePort()}`);
  const pending = await ZmqEngineLink.bind({ endpoints, dpSize: group.ranks, handshakeReceiveTimeoutMs: 30_000 });
  const handles: SimEngineHandle[] = [];
  let client: EngineClient | null = null;
  try {
    const [link, ...ranks] = await Promise.all([
      pending.handshake(),
      ...Array.from({ length: group.ranks }, (_, i) =>
        runSimEngine({
          engineIndex: i,
          handshakeAddress: endpoints.handshake,
          timeScale: group.timeScale,
          slowdown: i === group.slowRank ? group.slowdown : 1,
          maxRunning: group.maxRunning,
          kvTotalPages: group.kvTotalPages,
          maxModelLen: group.maxModelLen,
          textModel: group.textModel,
          vocabSize: group.vocabSize,
          eosTokenIds: group.eosTokenIds,
          enableOutputLogprobs: false,
          closeGraceMs: 50,
          initTimeoutMs: 30_000,
        }),
      ),
    ]);
    handles.push(...ranks);
    const oracle = new TrueWorkOracle(ranks, group);
    const c = new EngineClient({ protocol: tokenspeedProtocol, link, policy: createDpPolicy(policy, { oracle }) });
    client = c;
    const identityOf = (rank: number): Uint8Array => {
      const e = c.engines.find((x) => x.engineIndex === rank);
      if (!e) throw new RangeError(`no engine with index ${rank}`);
      return e.identity;
    };

    // Setup phase: submitted at once, awaited to completion, not measured.
    const setup = await Promise.all(
      workload.setup.map(async (req) => {
        const stream = await c.submit(toGenerate(req), req.pinRank !== undefined ? { dpRank: req.pinRank } : {});
        if (stream.engineIndex !== null) oracle.sent(stream.engineIndex, req);
        return consume(stream, performance.now());
      }),
    );
    const setupFailed = setup.filter((t) => t.finishReason !== 'length');
    if (setupFailed.length > 0) throw new Error(`setup request failed: ${setupFailed[0].finishReason}`);
    // What the policy will see of each rank when the measured phase starts (stale reports show here; section 10.3).
    const storedRunningAtStart = c.rankStates().map((r) => r.load?.numRunning ?? null);
    const preemptionsBefore = ranks.reduce((s, h) => s + h.stats().preemptions, 0);

    // Main phase: replay arrivals on the scaled clock (absolute deadlines, so timer lateness does not accumulate).
    const main = [...workload.main].sort((a, b) => a.atMs - b.atMs);
    const t0 = performance.now();
    const traces: Promise<Trace>[] = [];
    for (const req of main) {
      const due = t0 + req.atMs * group.timeScale;
      const wait = due - performance.now();
      if (wait > 0.5) await sleep(wait);
      if (req.foreignRank !== undefined) {
        oracle.sent(req.foreignRank, req);
        await link.send(identityOf(req.foreignRank), RequestType.ADD, tokenspeedProtocol.encodeAdd(toGenerate(req)));
        continue;
      }
      const submitMs = performance.now();
      const stream = await c.submit(toGenerate(req), req.pinRank !== undefined ? { dpRank: req.pinRank } : {});
      // Recorded before the next submit (the only place the oracle is read), so the FIFO stays aligned.
      if (stream.engineIndex !== null) oracle.sent(stream.engineIndex, req);
      traces.push(consume(stream, submitMs));
    }
    const done = await Promise.all(traces);
    const preemptions = ranks.reduce((s, h) => s + h.stats().preemptions, 0) - preemptionsBefore;

    const toSim = (ms: number): number => ms / group.timeScale;
    const ttft = done.flatMap((t) => (t.ttftMs === null ? [] : [toSim(t.ttftMs)]));
    const itl = done.flatMap((t) => t.itlMs.map(toSim));
    const tokens = done.reduce((s, t) => s + t.tokens, 0);
    const first = Math.min(...done.map((t) => t.submitMs));
    const last = Math.max(...done.map((t) => t.finishMs));
    const spanMs = toSim(last - first);
    const perRank = Array.from({ length: group.ranks }, () => 0);
    for (const t of done) if (t.rank !== null && t.rank < perRank.length) perRank[t.rank] += t.tokens;
    return {
      ttftP50: percentile(ttft, 50),
      ttftP99: percentile(ttft, 99),
      itlP50: percentile(itl, 50),
      itlP99: percentile(itl, 99),
      throughput: spanMs > 0 ? (tokens / spanMs) * 1000 : Number.NaN,
      tokenShare: perRank.map((n) => (tokens > 0 ? n / tokens : 0)),
      failures: done.filter((t) => t.finishReason !== 'length').length,
      spanMs,
      preemptions,
      storedRunningAtStart,
    };
  } finally {
    if (client) await client.close();
    else await pending.close();
    await Promise.all(handles.map((h) => h.close({ sendDead: false })));
    await rm(dir, { recursive: true, force: true });
  }
}
