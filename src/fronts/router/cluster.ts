/**
 * `--workers N` (issue 9 part 2; docs/workers.md): one router process — the node:cluster primary, owning the
 * engine groups (sockets, handshake, engine clients with their routing state, simulated ranks), the global
 * concurrency count and the Responses store — and N HTTP front processes (cluster workers sharing the listen port)
 * that do HTTP, chat templates, tokenization, detokenization, stop strings and SSE.
 *
 * This module is the primary's side; the front's is front-process.ts. Data plane: one unix socket connection per
 * front, length-prefixed frames both ways (frames.ts; router-service.ts, remote-backend.ts). Control plane
 * (control.ts): the cluster's IPC channel,
 * for a handful of messages: a front is listening, /metrics (prom-client's cluster protocol: the primary asks every
 * front for its registry as JSON, adds its own, and merges them with `AggregatorRegistry.aggregate`), drain, close.
 *
 * Flow control: one `OutputGate` over every engine link's output receive, paused by the router service while a
 * front's outbox lane is far behind (outbox.ts; `model_gateway_router_output_pauses_total`,
 * `model_gateway_router_output_paused_seconds_total`), so overload slows the engines instead of killing a slow front.
 *
 * Lifecycle: a front that exits unasked is dropped by the router (its engine requests ABORTed, its permits returned)
 * and forked again after a backoff (`model_gateway_front_exits_total` counts exits), unless its slot's fronts exited
 * `MAX_FAILED_STARTS` times in a row before listening: such a front cannot start (a broken install, a bad option), so
 * forking it again would loop forever; the start fails, or a started gateway reports it (`failed`) and the CLI shuts
 * down with exit code 1. SIGTERM reaches the primary (`shutdown`): no front is forked any more, every front stops
 * taking API requests (503 `draining`), live requests run up to the grace, the rest end with an error, then the fronts
 * close their servers and exit (one still starting is killed at once: it serves nothing and would not hear the
 * close), and the engine groups close. Fronts ignore SIGINT/SIGTERM/SIGHUP themselves (a signal to the process group
 * reaches them too) and exit when the primary goes.
 */
import { parseKeysFile, readKeysText } from '../../server/keys-file.js';
import cluster, { type Worker } from 'node:cluster';
import { mkdirSync, rmSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { AggregatorRegistry, Counter } from 'prom-client';
import {
  assertPortFree,
  planGateway,
  responsesStoreOptionsOf,
  startPlannedGateway,
  type GatewayOptions,
  type RunningGateway,
} from '../../gateway/index.js';
import { drainLiveRequests } from '../../lifecycle.js';
import { GatewayMetrics } from '../../server/metrics.js';
import { dashboardUrl } from '../../server/routes/dashboard.js';
import type { RankStatsExport } from '../../server/rank-stats.js';
import { ResponsesStore } from '../../server/responses/store.js';
import { FRONT_CHANNEL_ENV, FRONT_TOKEN_ENV, type ControlMessage } from '../channel/control.js';
import { DEFAULT_RANK_STALL_TIMEOUT_MS, DEFAULT_SILENCE_TIMEOUT_MS } from '../../engine-client/client.js';
import { OutputGate } from '../../transport/output-gate.js';
import { gatewayRuntimeDir } from '../../runtime-dir.js';
import { MAX_PRESSURE_MS } from '../channel/outbox.js';
import { RouterService } from './router-service.js';
import { FrontMetricsMemory, type MetricsJson } from './front-metrics-memory.js';

/** Most fronts `--workers auto` picks. */
export const MAX_AUTO_WORKERS = 8;

/**
 * `--workers auto`, also the default (issue 9: derived from the core count): one front per core but one (left to the
 * router and the engines' own processes), 1..8, so one process on a machine of 2 cores or fewer. Why one process
 * there: on the 2-core development machine a second front gave 0.9–1.2× the tokens/s of one process (the engines and
 * the clients share those cores) and costs ~1.5× the CPU per request (docs/benchmarks.md "Throughput benchmark"). `cores` is
 * `os.availableParallelism()` by default, which does not see a container's CPU quota: pass `--workers N` there.
 */
export function autoWorkers(cores = availableParallelism()): number {
  return Math.max(1, Math.min(MAX_AUTO_WORKERS, cores - 1));
}

/** An HTTP front that kept failing to start (`MAX_FAILED_STARTS` in a row): the operator's to fix, printed on one line. */
export class FrontStartError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'FrontStartError';
  }
}

/**
 * Exits in a row of one front slot's processes before listening after which the router stops forking it: the front
 * cannot start. A front that listened and then exited starts the count again (it is forked again however often).
 */
export const MAX_FAILED_STARTS = 3;

/** Backoff before forking a front again after an unasked exit, ms: 100, 200, 400, … up to 5 000. */
export function restartDelayMs(recentExits: number): number {
  return Math.min(5000, 100 * 2 ** Math.max(0, recentExits - 1));
}

const GET_METRICS_REQ = 'prom-client:getMetricsReq';
const GET_METRICS_RES = 'prom-client:getMetricsRes';

/**
 * The router's socket for its fronts: `<tmp>/model-gateway-<uid>/fronts-<pid>.sock` (the directory is 0700). A
 * SIGKILLed router leaves it behind; the next gateway removes it (transport/stale-sweep.ts).
 */
function channelPath(): string {
  const dir = gatewayRuntimeDir();
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  return join(dir, `fronts-${process.pid}.sock`);
}

/** What the CLI holds of a running gateway. */
export type ClusterGateway = Pick<RunningGateway, 'shutdown' | 'close' | 'emergencyStop' | 'reloadKeys'> & {
  /** The fronts' base URL (`http://host:port`); '' when the start was stopped before any front listened. */
  url: string;
  /** The router's view of the fronts (for tests and diagnostics). */
  readonly service: RouterService;
  /**
   * Resolves with the error (already logged) when a front slot exited `MAX_FAILED_STARTS` times in a row before
   * listening: it is not forked again, and the gateway should be shut down (the CLI does, with exit code 1). Never
   * settles otherwise.
   */
  readonly failed: Promise<Error>;
};

/**
 * Start the router here and `workers` (≥ 2) fronts; resolves once every front listens, or, once `startOpts.signal`
 * aborts (a SIGTERM during the start), with the fronts up so far (the caller then shuts the gateway down: the fronts
 * still starting are killed). `opts` are the CLI's options: the fronts are forked with the same command line
 * (cluster's default: this script and its arguments), so they parse the same options. Throws what `startGateway`
 * throws, and when a front slot exits `MAX_FAILED_STARTS` times in a row before listening.
 */
export async function startClusterGateway(
  opts: GatewayOptions,
  workers: number,
  startOpts: { signal?: AbortSignal } = {},
): Promise<ClusterGateway> {
  if (!cluster.isPrimary) throw new Error('startClusterGateway runs in the cluster primary');
  // Flow control (docs/workers.md section 6): the engines' output is not received while a front is far behind.
  const outputGate = new OutputGate();
  // The router's engine side is the one-process gateway without HTTP (the fronts serve it): its options are checked
  // once, before the port check, and the router reads the same plan (logger, HTTP edge, shutdown grace).
  const plan = planGateway({ ...opts, serveHttp: false, waitForRanks: false, workers: 1, outputGate });
  const log = plan.logger.child({ component: 'router' });
  // The fronts bind the port later (through the primary, node:cluster's round-robin), after the ranks are spawned; a
  // port that is taken must fail the start before that, with the one-process mode's one line (cli.ts).
  await assertPortFree(plan.port, plan.host);
  const gateway = await startPlannedGateway(plan);
  const store = new ResponsesStore(responsesStoreOptionsOf(opts));
  const frontExits = new Counter({
    name: 'model_gateway_front_exits_total',
    help: 'HTTP front processes (--workers N) that exited without being asked to, by signal or exit code',
    labelNames: ['reason'],
    registers: [gateway.metrics.registry],
  });
  const outputPauses = new Counter({
    name: 'model_gateway_router_output_pauses_total',
    help: "Times the router (--workers N) stopped receiving the engines' output because a front's outbox held more than its high-water mark",
    registers: [gateway.metrics.registry],
  });
  const outputPausedSeconds = new Counter({
    name: 'model_gateway_router_output_paused_seconds_total',
    help: "Seconds the router (--workers N) spent not receiving the engines' output (ended pauses) while a front caught up",
    registers: [gateway.metrics.registry],
  });
  let pausedAt = 0;
  const slotOf = new Map<number, number>(); // cluster worker id → front slot (0..workers-1)
  // Closing: front exits are expected (not counted). Shutting down (from the drain on): no front is forked again, as
  // a new one would not hear the drain.
  let stopping = false;
  let shuttingDown = false;
  const service = new RouterService({
    groups: gateway.groups.map((g) => ({
      worker: g.worker,
      name: g.name,
      engine: g.engine,
      tasks: g.tasks,
      backend: g.client,
    })),
    store,
    maxConcurrentRequests: plan.edge.maxConcurrentRequests,
    logger: log,
    onFrontStuck: (frontId) => cluster.workers?.[frontId]?.process.kill('SIGKILL'),
    outputGate,
    // A pause must end well before a rank holding requests looks stalled (no batch handled for the stall timeout).
    maxPressureMs: Math.min(
      MAX_PRESSURE_MS,
      Math.max(
        1,
        Math.floor(
          Math.min(
            opts.rankStallTimeoutMs ?? DEFAULT_RANK_STALL_TIMEOUT_MS,
            opts.silenceTimeoutMs ?? DEFAULT_SILENCE_TIMEOUT_MS,
          ) / 3,
        ),
      ),
    ),
    onOutputPressure: (paused) => {
      if (paused) {
        outputPauses.inc();
        pausedAt = performance.now();
      } else {
        outputPausedSeconds.inc((performance.now() - pausedAt) / 1000);
      }
    },
  });
  const address = channelPath();
  try {
    await service.bind(address);
  } catch (err) {
    await gateway.close();
    throw err;
  }

  // The keys file's content as last read and parsed (the plan read and checked it at start): what every front, a
  // restarted one too, is given (control.ts `mgw:keys`).
  let keysText = plan.keysText;
  let url = '';
  // Counters of fronts that exited stay in /metrics (front-metrics-memory.ts).
  const frontMetrics = new FrontMetricsMemory();
  const listening = new Set<number>(); // front slots that listened at least once
  // Fronts listening now: the ones /metrics and the per-rank statistics ask (one still starting cannot answer yet).
  const serving = new Set<Worker>();
  let allListening: () => void = () => {};
  const started = new Promise<void>((r) => (allListening = r));
  let giveUp: (err: Error) => void = () => {};
  const failed = new Promise<Error>((r) => (giveUp = r));
  const startFailed = failed.then((err) => Promise.reject(err));
  startFailed.catch(() => {}); // settles after the start too: only the start's race reads it
  const exitsBySlot = new Map<number, number[]>();
  // Per slot: its processes that exited in a row before listening (reset when one listens).
  const failedStarts = new Map<number, number>();

  const fork = (slot: number): Worker => {
    const w = cluster.fork({
      [FRONT_CHANNEL_ENV]: address,
      [FRONT_TOKEN_ENV]: service.frontToken.toString('hex'),
      MGW_FRONT_SLOT: String(slot),
    });
    slotOf.set(w.id, slot);
    w.on('message', (m: ControlMessage) => void onControl(w, m));
    return w;
  };

  const onControl = async (w: Worker, m: ControlMessage): Promise<void> => {
    if (m?.type === 'mgw:keys-req') {
      if (keysText !== null) w.send({ type: 'mgw:keys', text: keysText } satisfies ControlMessage);
    } else if (m?.type === 'mgw:listening') {
      url = m.url;
      serving.add(w);
      const slot = slotOf.get(w.id) ?? -1;
      listening.add(slot);
      failedStarts.delete(slot);
      if (listening.size >= workers) allListening();
    } else if (m?.type === 'mgw:rank-stats') {
      w.send({
        type: 'mgw:rank-stats-res',
        id: m.id,
        parts: await clusterRankStats([...serving]),
      } satisfies ControlMessage);
    } else if (m?.type === 'mgw:metrics') {
      try {
        const { contentType, body } = await clusterMetrics(gateway.metrics, [...serving], frontMetrics);
        w.send({ type: 'mgw:metrics-res', id: m.id, contentType, body } satisfies ControlMessage);
      } catch (err) {
        w.send({
          type: 'mgw:metrics-res',
          id: m.id,
          contentType: 'text/plain',
          body: '',
          error: String(err),
        } satisfies ControlMessage);
      }
    }
  };

  cluster.on('exit', (w, code, signal) => {
    void frontMetrics.retire(w.id);
    const wasServing = serving.delete(w);
    service.dropFront(w.id);
    const slot = slotOf.get(w.id);
    slotOf.delete(w.id);
    if (stopping || slot === undefined) return;
    const reason = signal ?? `code ${code}`;
    frontExits.inc({ reason });
    if (shuttingDown) {
      log.warn(
        { front: slot, pid: w.process.pid, code, signal },
        'HTTP front exited while the gateway shuts down: its requests were aborted at the engines; not forking a new one',
      );
      return;
    }
    const inARow = wasServing ? 0 : (failedStarts.get(slot) ?? 0) + 1;
    failedStarts.set(slot, inARow);
    if (inARow >= MAX_FAILED_STARTS) {
      const err = new FrontStartError(
        `HTTP front ${slot} exited ${inARow} times in a row before listening (last: ${reason}); not forking it again`,
      );
      log.error({ front: slot, pid: w.process.pid, code, signal }, err.message);
      giveUp(err);
      return;
    }
    const now = Date.now();
    const recent = (exitsBySlot.get(slot) ?? []).filter((t) => now - t < 30_000);
    recent.push(now);
    exitsBySlot.set(slot, recent);
    const delay = restartDelayMs(recent.length);
    log.warn(
      { front: slot, pid: w.process.pid, code, signal, restartInMs: delay, failedStarts: inARow },
      'HTTP front exited: its requests were aborted at the engines; forking a new one',
    );
    setTimeout(() => {
      if (!shuttingDown) fork(slot);
    }, delay).unref();
  });

  for (let slot = 0; slot < workers; slot++) fork(slot);
  // A SIGTERM during the start stops the wait: a front that cannot start must not hold the gateway's exit.
  const interrupted = new Promise<boolean>((resolveInterrupt) => {
    if (startOpts.signal?.aborted === true) resolveInterrupt(true);
    startOpts.signal?.addEventListener('abort', () => resolveInterrupt(true), { once: true });
  });
  try {
    const stoppedEarly = await Promise.race([started.then(() => false), interrupted, startFailed]);
    if (stoppedEarly)
      log.warn(
        { listening: serving.size, workers },
        'start interrupted: not waiting for the HTTP fronts still starting',
      );
    else
      log.info(
        { url, workers, channel: address },
        `model-gateway listening on ${url} with ${workers} HTTP front processes and one router; dashboard ${dashboardUrl(url)}`,
      );
  } catch (err) {
    stopping = shuttingDown = true;
    for (const w of Object.values(cluster.workers ?? {})) w?.process.kill('SIGKILL');
    service.close();
    await gateway.close();
    throw err;
  }

  const broadcast = (m: ControlMessage) => {
    for (const w of Object.values(cluster.workers ?? {})) if (w?.isConnected()) w.send(m);
  };
  const stopFronts = async (): Promise<void> => {
    stopping = shuttingDown = true;
    const alive = Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined && !w.isDead());
    const exited = Promise.all(
      alive.map((w) => new Promise<void>((r) => (w.isDead() ? r() : w.once('exit', () => r())))),
    );
    service.closingFronts();
    broadcast({ type: 'mgw:close' });
    // A front still starting holds no request and hears `mgw:close` only once it listens: do not wait for the timer.
    const starting = alive.filter((w) => !serving.has(w));
    if (starting.length > 0)
      log.info(
        { pids: starting.map((w) => w.process.pid) },
        'HTTP fronts still starting killed at once: they hold no request',
      );
    for (const w of starting) w.process.kill('SIGKILL');
    const timer = setTimeout(() => {
      for (const w of alive) if (!w.isDead()) w.process.kill('SIGKILL');
    }, 5000);
    await exited;
    clearTimeout(timer);
  };
  let closing: Promise<void> | null = null;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      await stopFronts();
      service.close(); // removes its socket file
      await gateway.close();
    })();
    return closing;
  };
  let draining = false;
  return {
    get url() {
      return url;
    },
    service,
    failed,
    close,
    async shutdown(shutdownOpts: { graceMs?: number } = {}): Promise<void> {
      if (draining || closing !== null) return close();
      draining = shuttingDown = true;
      const graceMs = shutdownOpts.graceMs ?? plan.shutdownGraceMs;
      broadcast({ type: 'mgw:drain' });
      await drainLiveRequests({
        liveRequests: () => service.liveRequests + gateway.groups.reduce((n, g) => n + g.client.registeredCount, 0),
        graceMs,
        logger: log,
        what: 'every front answers /ready 503 and new requests 503',
        clients: gateway.groups.map((g) => g.client),
      });
      return close();
    },
    reloadKeys(): void {
      // The fronts check keys and name tenants from the content read here, once it parses: all of them the same.
      const path = plan.edge.apiKeysFile;
      if (path === null) return;
      try {
        const text = readKeysText(path);
        const file = parseKeysFile(text, path);
        keysText = text;
        log.info({ keysFile: path, tenants: file.tenants, keys: file.byKey.size }, 'keys file reloaded');
        broadcast({ type: 'mgw:keys', text });
      } catch (err) {
        log.error({ keysFile: path, err: String(err) }, 'keys file not reloaded: the keys in use stay');
      }
    },
    emergencyStop(): void {
      for (const w of Object.values(cluster.workers ?? {})) w?.process.kill('SIGKILL');
      rmSync(address, { force: true });
      gateway.emergencyStop();
    },
  };
}

let metricsRequests = 0;

/**
 * /metrics of the whole gateway, in the primary: every listening front's registry (prom-client's cluster request,
 * answered by the `AggregatorRegistry` each front creates) plus the router's engine-side registry, merged by
 * `AggregatorRegistry.aggregate` (counters and histograms summed over fronts; the engine-side series exist in the
 * router only, so nothing is counted twice). A front that does not answer within 5 s is left out.
 */
async function clusterMetrics(
  routerMetrics: GatewayMetrics,
  fronts: readonly Worker[],
  memory: FrontMetricsMemory,
): Promise<{ contentType: string; body: string }> {
  const requestId = `mgw-${process.pid}-${metricsRequests++}`;
  // Connected now (askFronts asks these, in this order, within this same synchronous step).
  const live = fronts.filter((w) => w.isConnected());
  const replies = await askFronts<MetricsJson[]>(
    live,
    { type: GET_METRICS_REQ, requestId },
    (m) =>
      m?.type === GET_METRICS_RES && m.requestId === requestId
        ? ((m.metrics as MetricsJson[] | undefined) ?? [])
        : undefined,
    5000,
    [],
  );
  live.forEach((w, i) => memory.remember(w.id, replies[i]!.flat()));
  const own = await routerMetrics.registry.getMetricsAsJSON();
  const merged = AggregatorRegistry.aggregate([own, await memory.retiredMetrics(), ...replies.flat()]);
  return { contentType: merged.contentType, body: await merged.metrics() };
}

/** Every front's per-rank statistics (`RankStatsBook.exportAll`), asked over the cluster channel; 2 s per front. */
async function clusterRankStats(fronts: readonly Worker[]): Promise<RankStatsExport[]> {
  const reqId = `mgw-rs-${process.pid}-${metricsRequests++}`;
  const parts = await askFronts<RankStatsExport[]>(
    fronts,
    { type: 'mgw:rank-stats-req', reqId } satisfies ControlMessage,
    (m) => {
      const c = m as ControlMessage | undefined;
      return c?.type === 'mgw:rank-stats-part' && c.reqId === reqId ? c.parts : undefined;
    },
    2000,
    [],
  );
  return parts.flat();
}

/**
 * Send `request` to every connected front and collect one reply each: the first message for which `reply` returns a
 * value. A front that exits or does not answer within `timeoutMs` contributes `fallback`. Never rejects.
 */
function askFronts<T>(
  fronts: readonly Worker[],
  request: object,
  reply: (m: Record<string, unknown> | undefined) => T | undefined,
  timeoutMs: number,
  fallback: T,
): Promise<T[]> {
  return Promise.all(
    fronts
      .filter((w) => w.isConnected())
      .map(
        (w) =>
          new Promise<T>((resolveReply) => {
            const timer = setTimeout(() => done(fallback), timeoutMs);
            function done(v: T) {
              clearTimeout(timer);
              w.off('message', onMessage);
              w.off('exit', onExit);
              resolveReply(v);
            }
            function onMessage(m: Record<string, unknown> | undefined) {
              const v = reply(m);
              if (v !== undefined) done(v);
            }
            function onExit() {
              done(fallback);
            }
            w.on('message', onMessage);
            w.once('exit', onExit);
            w.send(request);
          }),
      ),
  );
}
