/**
 * One routing-benchmark run (issue #5 part 4): a fresh group of in-process simulated TokenSpeed ranks
 * (src/sim/engine.ts `runSimEngine`; one rank slowed by `slowdown`, issue #5 part 2) registered over real ZeroMQ with
 * a `ZmqEngineLink` (engine-wire.md 1.2-1.3, handshake 2.1), an `EngineClient` using the policy under test
 * (src/engine-client/policies.ts; dp-routing.md 9.2, 10.2-10.3), and one workload replayed through
 * `EngineClient.submit` on a scaled clock. Measures TTFT, ITL, throughput and per-rank token share in simulated ms
 * on the ranks' own clocks (`SimEngineOptions.recordTimeline`: from a request's arrival at its rank to the rounds that
 * produced its tokens, so a loaded host's late timers and event-loop stalls do not show up as engine latency; the
 * routing decisions themselves still see the real, wall-clock order of reports), the prefix-cache hit rate (the
 * ranks' `cached_tokens` over the prompt tokens, issue 12) and the CPU cost of the policy's selection (µs per
 * request).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { EngineClient } from '../../src/engine-client/client.js';
import { indexShapeFor } from '../../src/engine-client/cache-aware.js';
import { PrefixIndex } from '../../src/engine-client/prefix-index.js';
import { createDpPolicy, type DpPolicyName } from '../../src/engine-client/policies.js';
import type { DpPolicy, RankView } from '../../src/engine-client/policy.js';
import type { RequestStream } from '../../src/engine-client/request-stream.js';
import { tokenspeedProtocol } from '../../src/protocols/tokenspeed/index.js';
import { DEFAULT_SAMPLING, RequestType, type GenerateRequest } from '../../src/protocols/types.js';
import { runSimEngine, type SimEngineHandle, type SimTimeline } from '../../src/sim/engine.js';
import type { TextModel } from '../../src/sim/text.js';
import { deriveEndpoints } from '../../src/transport/endpoints.js';
import { ZmqEngineLink } from '../../src/transport/zmq-link.js';
import { startGroupKvEvents } from '../../src/gateway/kv-events.js';
import { parseKvEventsConfig, type KvEventsConfig } from '../../src/protocols/kv-events/config.js';
import { pino } from 'pino';
import { freePort, freePortRange } from '../../test/helpers/net.js';
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

/**
 * The policies a run can use: every `DpPolicyName`, and `cache_aware_events`: `cache_aware` on the ranks' KV-cache
 * events (the simulated ranks publish them; src/gateway/kv-events.ts subscribes, as a gateway group with
 * `--kv-events-config` does).
 */
export type BenchPolicy = DpPolicyName | 'cache_aware_events';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));

/** `count` seeded token ids (ordinary vocabulary ids 1000..29999). */
function seededIds(seed: number, count: number): number[] {
  const rand = seededRandom(seed ^ 0x5eed);
  return Array.from({ length: count }, () => 1000 + Math.floor(rand() * 29_000));
}

/**
 * A request's prompt: its prefix segments (or, for a follow-up turn, `before`: the previous prompt and output), then
 * its own seeded tokens.
 */
function promptIds(req: BenchRequest, before: readonly number[] = []): number[] {
  const head = [...before];
  for (const seg of req.prefix ?? []) head.push(...seededIds(seg.seed, seg.tokens));
  return [...head, ...seededIds(req.seed, req.promptTokens)];
}

function toGenerate(req: BenchRequest, prompt: number[] = promptIds(req)): GenerateRequest {
  return {
    requestId: req.id,
    promptTokenIds: prompt,
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
 * `sent(rank, work)` must be called for every ADD (the engine client's and the second client's) before the next
 * selection reads the oracle: the engine client's are reported from the policy's `onDispatch` (`instrumented`), in
 * the select + reserve step, so concurrent submits cannot reorder them.
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

  /** A restarted rank's new process: its outstanding work starts from nothing. */
  replace(handle: SimEngineHandle): void {
    this.handles.set(handle.engineIndex, handle);
    this.sentWork.set(handle.engineIndex, []);
  }

  /** Record an ADD of `work` tokens (prompt + output) sent to `rank`, in send order. */
  sent(rank: number, work: number): void {
    this.sentWork.get(rank)?.push(work);
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

/** What one measured request's stream delivered (tokens; wall ms for submit and finish). */
interface Trace {
  requestId: string;
  rank: number | null;
  tokens: number;
  /** The generated token ids (a follow-up turn's prompt continues with them). */
  outputIds: number[];
  /** The engine's prompt and prefix-cache hit counts (last reported). */
  promptTokens: number;
  cachedTokens: number;
  submitMs: number;
  finishMs: number;
  finishReason: string | null;
}

/** An empty trace for a request that never got a stream. */
function failedTrace(requestId: string, submitMs: number): Trace {
  return {
    requestId,
    rank: null,
    tokens: 0,
    outputIds: [],
    promptTokens: 0,
    cachedTokens: 0,
    submitMs,
    finishMs: submitMs,
    finishReason: 'error',
  };
}

/** Read a stream to its end, collecting its tokens and counts. Never rejects (errors end the trace). */
async function consume(stream: RequestStream, submitMs: number): Promise<Trace> {
  const trace: Trace = { ...failedTrace(stream.requestId, submitMs), rank: stream.engineIndex, finishReason: null };
  try {
    for await (const out of stream) {
      trace.tokens += out.newTokenIds.length;
      trace.outputIds.push(...out.newTokenIds);
      trace.promptTokens = out.promptTokens;
      trace.cachedTokens = out.cachedTokens;
      if (out.finishReason !== null) trace.finishReason = out.finishReason;
      trace.finishMs = performance.now();
    }
  } catch (error) {
    trace.finishReason = `error: ${error instanceof Error ? error.message : String(error)}`;
    trace.finishMs = performance.now();
  }
  return trace;
}

const ratioOf = (a: number, b: number): number => (b > 0 ? a / b : Number.NaN);

/**
 * TTFT and ITL samples and the span, in simulated ms (rank-clock ms / `timeScale`), from the measured requests' rank
 * timelines (`SimTimeline`): TTFT = the first token-bearing row's round due time − the arrival (taken as the first
 * row's round begin when that was earlier: a rank catching up on late timers); ITL = the gap between consecutive
 * token-bearing rows over the later row's tokens; span = last row due − first arrival.
 */
function latencies(
  timelines: readonly (SimTimeline | null)[],
  timeScale: number,
): { ttft: number[]; itl: number[]; spanMs: number } {
  const ttft: number[] = [];
  const itl: number[] = [];
  let first = Number.POSITIVE_INFINITY;
  let last = Number.NEGATIVE_INFINITY;
  for (const tl of timelines) {
    if (tl === null) continue;
    const rows = tl.rows.filter((r) => r.tokens > 0);
    if (rows.length === 0) continue;
    const arrived = Math.min(tl.arrivedMs, tl.rows[0].beginMs);
    first = Math.min(first, arrived);
    last = Math.max(last, rows[rows.length - 1].dueMs);
    ttft.push((rows[0].dueMs - arrived) / timeScale);
    for (let i = 1; i < rows.length; i++) {
      const per = (rows[i].dueMs - rows[i - 1].dueMs) / rows[i].tokens / timeScale;
      for (let k = 0; k < rows[i].tokens; k++) itl.push(per);
    }
  }
  return { ttft, itl, spanMs: last > first ? (last - first) / timeScale : Number.NaN };
}

/**
 * The measured phase: open-loop requests at their arrival times on the scaled clock (absolute deadlines, so timer
 * lateness does not accumulate), each follow-up turn `thinkMs` after its previous turn finished, with the previous
 * prompt and output in front of its own tokens; a `foreignRank` request goes to `sendForeign` (not measured).
 * Resolves with the trace of every measured request once all finished.
 */
async function replay(
  main: readonly BenchRequest[],
  client: EngineClient,
  timeScale: number,
  sendForeign: (req: BenchRequest) => Promise<void>,
): Promise<Trace[]> {
  const followUps = new Map<string, BenchRequest[]>();
  for (const req of main) {
    if (req.follows) followUps.set(req.follows.previous, [...(followUps.get(req.follows.previous) ?? []), req]);
  }
  const traces: Promise<Trace>[] = [];
  let measured = main.filter((r) => r.foreignRank === undefined).length;
  let settle: () => void = () => {};
  const allLaunched = new Promise<void>((resolve) => (settle = resolve));
  const launch = async (req: BenchRequest, prompt: number[]): Promise<void> => {
    const submitMs = performance.now();
    let stream: RequestStream;
    try {
      stream = await client.submit(toGenerate(req, prompt), req.pinRank !== undefined ? { dpRank: req.pinRank } : {});
    } catch (error) {
      // Counted as a failure (its follow-ups are never sent: their share of `measured` is waived).
      const reason = `error: submit failed: ${error instanceof Error ? error.message : String(error)}`;
      traces.push(Promise.resolve({ ...failedTrace(req.id, submitMs), finishReason: reason }));
      measured -= countFollowUps(req.id);
      if (traces.length >= measured) settle();
      return;
    }
    const trace = consume(stream, submitMs).then((t) => {
      for (const next of followUps.get(req.id) ?? []) {
        const before = [...prompt, ...t.outputIds];
        setTimeout(() => void launch(next, promptIds(next, before)), next.follows!.thinkMs * timeScale);
      }
      return t;
    });
    traces.push(trace);
    if (traces.length >= measured) settle();
  };
  const countFollowUps = (id: string): number =>
    (followUps.get(id) ?? []).reduce((n, next) => n + 1 + countFollowUps(next.id), 0);
  const t0 = performance.now();
  for (const req of [...main].filter((r) => !r.follows).sort((a, b) => a.atMs - b.atMs)) {
    const wait = t0 + req.atMs * timeScale - performance.now();
    if (wait > 0.5) await sleep(wait);
    if (req.foreignRank !== undefined) await sendForeign(req);
    else await launch(req, promptIds(req));
  }
  if (measured > 0) await allLaunched;
  return Promise.all(traces);
}

/** Per-call durations (µs) of a policy's `select` and `onDispatch`, measured by `instrumented`. */
interface PolicyCost {
  select: number[];
  dispatch: number[];
}

/**
 * `policy` with the benchmark's bookkeeping around it, in the client's synchronous select + reserve step: every
 * dispatch is reported to `onSent` (rank, work in tokens: prompt + output limit), and the duration of every `select`
 * and `onDispatch` call is recorded in `cost` (µs; synchronous code, so its CPU time, except when the host
 * deschedules the process mid-call: the benchmark reports medians, which such outliers do not move).
 */
function instrumented(
  policy: DpPolicy,
  onSent: (rank: number, work: number) => void,
  cost: PolicyCost,
  record?: {
    select(views: readonly RankView[], request: GenerateRequest): void;
    dispatch(rank: number, request: GenerateRequest): void;
  },
): DpPolicy {
  return {
    name: policy.name,
    releaseClamp: policy.releaseClamp,
    select(ranks, request) {
      record?.select(ranks, request);
      const t = performance.now();
      const pos = policy.select(ranks, request);
      cost.select.push((performance.now() - t) * 1000);
      return pos;
    },
    onDispatch(rank, request) {
      const t = performance.now();
      policy.onDispatch?.(rank, request);
      cost.dispatch.push((performance.now() - t) * 1000);
      record?.dispatch(rank, request);
      onSent(rank, request.promptTokenIds.length + (request.sampling.maxNewTokens ?? 0));
    },
    predictedCachedTokens: (request) => policy.predictedCachedTokens?.(request) ?? null,
    forgetRank: (rank) => policy.forgetRank?.(rank),
  };
}

/** One routing decision as the diagnostics see it (bench/routing/diagnose.ts). Times in simulated ms. */
export interface DecisionRecord {
  atMs: number;
  requestId: string;
  pinned: boolean;
  /** Engine index chosen. */
  rank: number;
  /** Per position (engine order): the view the policy saw. */
  views: RankView[];
  /**
   * Per position: prompt tokens of the leading blocks a shadow index (what `cache_aware` would know, whatever the
   * policy) held for that rank at the decision.
   */
  matchedTokens: number[];
  promptTokens: number;
  /** The policy's reason for this decision, when it counts reasons (`cache_aware`: `CacheAwareStats`). */
  reason?: string;
}

/** What a run hands its diagnostics: every decision, and per measured request its rank, hits and TTFT. */
export interface RunDiagnostics {
  decisions: DecisionRecord[];
  requests: {
    id: string;
    rank: number | null;
    promptTokens: number;
    cachedTokens: number;
    ttftMs: number;
    finishMs: number;
  }[];
  /** The policy's own decision counts, when it keeps any (`cache_aware`: `CacheAwareStats`). */
  policyStats?: Record<string, number>;
}

/**
 * Run `workload` under `policy` on a fresh simulated group and return its metrics (simulated ms). With `diag`, every
 * decision and every measured request is appended to it. Throws when the handshake or a submit fails; every socket,
 * rank and temp dir is closed before returning or throwing.
 */
export async function runOnce(
  workload: Workload,
  policy: BenchPolicy,
  group: GroupConfig,
  diag?: RunDiagnostics,
): Promise<RunMetrics> {
  const dir = await mkdtemp(join(tmpdir(), 'mgw-bench-'));
  const endpoints = deriveEndpoints(`ipc://${dir}/gw`, `tcp://127.0.0.1:${await freePort()}`);
  const link = await ZmqEngineLink.bind({ endpoints, dpSize: group.ranks, handshakeReceiveTimeoutMs: 30_000 });
  const events = policy === 'cache_aware_events';
  // Both endpoints from one run of ports below the ephemeral range, so no outgoing connection takes one (a restarted
  // rank binds its ports again mid-run).
  const kvBase = events ? await freePortRange(2 * group.ranks) : 0;
  const kvEvents: KvEventsConfig | undefined = events
    ? parseKvEventsConfig({
        enable_kv_cache_events: true,
        endpoint: `tcp://*:${kvBase}`,
        replay_endpoint: `tcp://*:${kvBase + group.ranks}`,
      })
    : undefined;
  const handles: SimEngineHandle[] = [];
  const startRank = (i: number): Promise<SimEngineHandle> =>
    runSimEngine({
      engineIndex: i,
      handshakeAddress: endpoints.handshake,
      timeScale: group.timeScale,
      slowdown: i === group.slowRank ? group.slowdown : 1,
      maxRunning: group.maxRunning,
      kvTotalPages: workload.kvTotalPages ?? group.kvTotalPages,
      maxModelLen: group.maxModelLen,
      textModel: group.textModel,
      vocabSize: group.vocabSize,
      eosTokenIds: group.eosTokenIds,
      enableOutputLogprobs: false,
      closeGraceMs: 50,
      initTimeoutMs: 30_000,
      recordTimeline: true,
      ...(kvEvents !== undefined ? { kvEvents } : {}),
    });
  const streams = startGroupKvEvents('tokenspeed', group.ranks, kvEvents ?? null, events, pino({ level: 'silent' }));
  let client: EngineClient | null = null;
  try {
    const [, ...ranks] = await Promise.all([
      link.whenJoined(),
      ...Array.from({ length: group.ranks }, (_, i) => startRank(i)),
    ]);
    handles.push(...(ranks as SimEngineHandle[]));
    const oracle = new TrueWorkOracle(ranks as SimEngineHandle[], group);
    const shape = indexShapeFor((ranks as SimEngineHandle[])[0].ready);
    const cost: PolicyCost = { select: [], dispatch: [] };
    const t0 = performance.now();
    let lastSelect: { views: RankView[]; request: GenerateRequest; matched: number[] } | null = null;
    const shadow = new PrefixIndex(shape);
    const record =
      diag === undefined
        ? undefined
        : {
            select: (views: readonly RankView[], request: GenerateRequest): void => {
              const hashes = shadow.hashes(request.promptTokenIds);
              const matched = views.map((v) =>
                v.engineIndex === null ? 0 : shadow.match(v.engineIndex, hashes) * shadow.blockTokens,
              );
              lastSelect = { views: views.map((v) => ({ ...v })), request, matched };
            },
            dispatch: (rank: number, request: GenerateRequest): void => {
              const p = lastSelect;
              lastSelect = null;
              const scored = p !== null && p.request === request;
              diag.decisions.push({
                atMs: (performance.now() - t0) / group.timeScale,
                requestId: request.requestId,
                pinned: !scored,
                rank,
                views: scored ? p.views : [],
                matchedTokens: scored ? p.matched : [],
                promptTokens: request.promptTokenIds.length,
                reason: scored ? reasonOfLast() : undefined,
              });
              shadow.record(rank, shadow.hashes(request.promptTokenIds));
            },
          };
    const inner = createDpPolicy(events ? 'cache_aware' : policy, {
      oracle,
      ...shape,
      ...(events ? { kvCache: streams.view } : {}),
    });
    const reasons = 'stats' in inner ? (inner.stats as Record<string, number>) : null;
    let reasonsBefore: Record<string, number> = { ...(reasons ?? {}) };
    const reasonOfLast = (): string | undefined => {
      if (reasons === null) return undefined;
      const changed = Object.keys(reasons).find((k) => reasons[k] !== reasonsBefore[k]);
      reasonsBefore = { ...reasons };
      return changed;
    };
    const chosen = instrumented(inner, (rank, work) => oracle.sent(rank, work), cost, record);
    const c = new EngineClient({ protocol: tokenspeedProtocol, link, policy: chosen, kvCache: streams.view });
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
        return consume(stream, performance.now());
      }),
    );
    const setupFailed = setup.filter((t) => t.finishReason !== 'length');
    if (setupFailed.length > 0) throw new Error(`setup request failed: ${setupFailed[0].finishReason}`);
    // What the policy will see of each rank when the measured phase starts (stale reports show here; section 10.3).
    const storedRunningAtStart = c.rankStates().map((r) => r.load?.numRunning ?? null);
    const preemptionsBefore = ranks.reduce((s, h) => s + h.stats().preemptions, 0);
    const costBefore = { select: cost.select.length, dispatch: cost.dispatch.length };
    const precisionBefore = { ...c.stats.routingPrecision };
    // Settled now and rethrown after the replay, so a failed restart is reported, never an unhandled rejection.
    const restarted = scheduleRestart(workload, group, ranks as SimEngineHandle[], oracle, startRank, handles).then(
      () => null,
      (err: unknown) => err,
    );
    const done = await replay(workload.main, c, group.timeScale, async (req) => {
      oracle.sent(req.foreignRank as number, req.promptTokens + req.outputTokens);
      await link.send(
        identityOf(req.foreignRank as number),
        RequestType.ADD,
        tokenspeedProtocol.encodeAdd(toGenerate(req)),
      );
    });
    const restartError = await restarted;
    if (restartError !== null) throw restartError;
    // Every request runs to its length unless a rank restarted under it: anything else is a request the group
    // refused (a workload that does not fit it), which would count as a cache miss and measure nothing.
    const served = done.filter((t) => t.finishReason === 'length');
    const failed = done.find((t) => t.finishReason !== 'length');
    if (failed !== undefined && workload.restart === undefined) {
      throw new Error(
        `${workload.name} / ${policy}: request ${failed.requestId} ended with ${failed.finishReason} ` +
          `(${failed.promptTokens} prompt tokens): the workload does not fit the group`,
      );
    }
    const preemptions = handles.reduce((s, h) => s + h.stats().preemptions, 0) - preemptionsBefore;
    const precision = c.stats.routingPrecision;
    const predicted = precision.predictedTokens - precisionBefore.predictedTokens;
    const confirmed = precision.confirmedTokens - precisionBefore.confirmedTokens;

    // A restarted rank's requests are in its first process's timelines or in its second's.
    const timelineOf = (rank: number, id: string): SimTimeline | null => {
      for (const h of handles) if (h.engineIndex === rank && h.timeline(id) !== null) return h.timeline(id);
      return null;
    };
    const timelines = done.map((t) => (t.rank === null ? null : timelineOf(t.rank, t.requestId)));
    const lat = latencies(timelines, group.timeScale);
    if (diag !== undefined) {
      if ('stats' in inner) diag.policyStats = { ...(inner.stats as Record<string, number>) };
      done.forEach((t, i) => {
        const tl = timelines[i];
        const rows = tl?.rows.filter((r) => r.tokens > 0) ?? [];
        const arrived =
          tl === null || tl === undefined || rows.length === 0
            ? Number.NaN
            : Math.min(tl.arrivedMs, tl.rows[0].beginMs);
        diag.requests.push({
          id: t.requestId,
          rank: t.rank,
          promptTokens: t.promptTokens,
          cachedTokens: t.cachedTokens,
          ttftMs: rows.length === 0 ? Number.NaN : (rows[0].dueMs - arrived) / group.timeScale,
          finishMs: (t.finishMs - t0) / group.timeScale,
        });
      });
    }
    const { ttft, itl, spanMs } = lat;
    const tokens = done.reduce((s, t) => s + t.tokens, 0);
    const perRank = Array.from({ length: group.ranks }, () => 0);
    for (const t of done) if (t.rank !== null && t.rank < perRank.length) perRank[t.rank] += t.tokens;
    return {
      ttftP50: percentile(ttft, 50),
      ttftP99: percentile(ttft, 99),
      itlP50: percentile(itl, 50),
      itlP99: percentile(itl, 99),
      throughput: spanMs > 0 ? (tokens / spanMs) * 1000 : Number.NaN,
      tokenShare: perRank.map((n) => (tokens > 0 ? n / tokens : 0)),
      failures: done.length - served.length,
      spanMs,
      preemptions,
      storedRunningAtStart,
      prefixHitRate: ratioOf(
        served.reduce((s, t) => s + t.cachedTokens, 0),
        served.reduce((s, t) => s + t.promptTokens, 0),
      ),
      selectionUs:
        percentile(cost.select.slice(costBefore.select), 50) + percentile(cost.dispatch.slice(costBefore.dispatch), 50),
      routingPrecision: predicted > 0 ? confirmed / predicted : Number.NaN,
    };
  } finally {
    if (client) await client.close();
    else await link.close();
    await streams.close();
    await Promise.all(handles.map((h) => h.close({ sendDead: false })));
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * `workload.restart`: at its time into the measured phase (scaled), stop that rank's process (it sends
 * ENGINE_CORE_DEAD, as an engine shutting down does; its requests fail) and start a fresh one with the same engine
 * index, which joins again with an empty cache (and, with KV events, a publisher starting at seq 0). The oracle and
 * `handles` learn the new process. Resolves once it has joined (at once without a restart).
 */
async function scheduleRestart(
  workload: Workload,
  group: GroupConfig,
  ranks: SimEngineHandle[],
  oracle: TrueWorkOracle,
  startRank: (i: number) => Promise<SimEngineHandle>,
  handles: SimEngineHandle[],
): Promise<void> {
  const r = workload.restart;
  if (r === undefined) return;
  await sleep(r.atMs * group.timeScale);
  await ranks[r.rank]!.close({ sendDead: true });
  const fresh = await startRank(r.rank);
  handles.push(fresh);
  ranks[r.rank] = fresh;
  oracle.replace(fresh);
}
