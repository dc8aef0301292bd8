/**
 * A front process of `--workers N` (docs/workers.md sections 2-6): a cluster worker that connects to the router
 * (remote-backend.ts), builds the HTTP app over `RemoteBackend`s with the shared concurrency cap, Responses store and
 * per-rank statistics, listens on the shared port, and serves until the primary says close (or goes away).
 */
import cluster from 'node:cluster';
import { AggregatorRegistry } from 'prom-client';
import {
  DEFAULT_HOST,
  DEFAULT_PORT,
  appDepsOf,
  closeApp,
  gatewayLogger,
  keysFileOf,
  listenApp,
  reloadKeys,
  resolveServedModel,
  responsesStoreOptionsOf,
  tenantDirectoryOf,
  type GatewayOptions,
} from '../../gateway/index.js';
import { GatewayLifecycle } from '../../lifecycle.js';
import { buildApp } from '../../server/app.js';
import { GatewayMetrics } from '../../server/metrics.js';
import { RankStatsBook, mergeRankStats, type RankStatsExport } from '../../server/rank-stats.js';
import type { SharedRankStats } from '../../server/routes/ranks.js';
import { GatewayTokenizer } from '../../tokenizer/tokenizer.js';
import { FRONT_CHANNEL_ENV, FRONT_TOKEN_ENV, type ControlMessage } from '../channel/control.js';
import { FrontChannel } from './front-channel.js';
import { RemoteBackend, sharedConcurrency } from './remote-backend.js';
import { SharedResponsesStore } from './shared-responses-store.js';
import { startTracing, tracingSettings } from '../../tracing.js';

/** The front side of `clusterRankStats`: answer the primary with `book`, and ask it for every front's. */
function frontRankStats(book: RankStatsBook): SharedRankStats {
  let nextId = 1;
  const waiting = new Map<number, (parts: RankStatsExport[]) => void>();
  process.on('message', (m: ControlMessage) => {
    if (m?.type === 'mgw:rank-stats-req')
      process.send?.({
        type: 'mgw:rank-stats-part',
        reqId: m.reqId,
        parts: book.exportAll(performance.now()),
      } satisfies ControlMessage);
    else if (m?.type === 'mgw:rank-stats-res') {
      waiting.get(m.id)?.(m.parts);
      waiting.delete(m.id);
    }
  });
  return () =>
    new Promise((resolveStats, reject) => {
      const id = nextId++;
      const timer = setTimeout(() => {
        waiting.delete(id);
        reject(new Error('the router did not answer the per-rank statistics request within 5 s'));
      }, 5000);
      waiting.set(id, (parts) => {
        clearTimeout(timer);
        resolveStats(mergeRankStats(parts));
      });
      process.send?.({ type: 'mgw:rank-stats', id } satisfies ControlMessage);
    });
}

/** A front's metrics: the HTTP-side series here; /metrics asks the primary for the whole gateway's. */
class FrontMetrics extends GatewayMetrics {
  private nextId = 1;
  private readonly waiting = new Map<number, (m: { contentType: string; body: string; error?: string }) => void>();

  constructor(modelId: string) {
    super({ modelId, role: 'http' });
    // Answer the primary's prom-client cluster requests with this registry.
    new AggregatorRegistry();
    AggregatorRegistry.setRegistries([this.registry]);
    process.on('message', (m: ControlMessage) => {
      if (m?.type !== 'mgw:metrics-res') return;
      this.waiting.get(m.id)?.(m);
      this.waiting.delete(m.id);
    });
  }

  override async render(): Promise<{ contentType: string; body: string }> {
    const id = this.nextId++;
    const m = await new Promise<{ contentType: string; body: string; error?: string }>((resolveRender, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(id);
        reject(new Error('the router did not answer the metrics request within 10 s'));
      }, 10_000);
      this.waiting.set(id, (r) => {
        clearTimeout(timer);
        resolveRender(r);
      });
      process.send?.({ type: 'mgw:metrics', id } satisfies ControlMessage);
    });
    if (m.error !== undefined) throw new Error(`aggregating metrics failed: ${m.error}`);
    return { contentType: m.contentType, body: m.body };
  }
}

/**
 * The keys file's content as the primary last read it (control.ts `mgw:keys`): asked for once, before the front
 * serves. Rejects when the primary goes away first.
 */
function keysFromPrimary(): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const onMessage = (m: ControlMessage) => {
      if (m?.type !== 'mgw:keys') return;
      done();
      resolve(m.text);
    };
    const onGone = () => {
      done();
      reject(new Error('the primary went away before it sent the keys file'));
    };
    const done = () => {
      process.off('message', onMessage);
      process.off('disconnect', onGone);
    };
    process.on('message', onMessage);
    process.once('disconnect', onGone);
    process.send?.({ type: 'mgw:keys-req' } satisfies ControlMessage);
  });
}

/**
 * Run this process as a front (a cluster worker with `FRONT_CHANNEL_ENV` set): connect to the router, build the HTTP
 * app over `RemoteBackend`s, listen on the shared port, and serve until the primary says close (or goes away).
 * Resolves with the exit code.
 */
export async function runFront(opts: GatewayOptions): Promise<number> {
  const address = process.env[FRONT_CHANNEL_ENV]!;
  const token = Buffer.from(process.env[FRONT_TOKEN_ENV] ?? '', 'hex');
  const slot = Number(process.env.MGW_FRONT_SLOT ?? '0');
  const frontId = cluster.worker!.id;
  const logger = gatewayLogger(opts).child({ front: slot });
  // The primary decides when to stop (a signal to the process group reaches every front too).
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => {});
  const model = resolveServedModel(opts);
  const [tokenizer, channel] = await Promise.all([
    GatewayTokenizer.load(model.tokenizerDir),
    FrontChannel.connect(address, frontId, token, logger.child({ component: 'channel' })),
  ]);
  const groups = channel.groups.map((g, i) => ({
    worker: g.worker,
    name: g.name,
    engine: g.engine,
    tasks: g.tasks,
    backend: new RemoteBackend(channel, i),
  }));
  const lifecycle = new GatewayLifecycle();
  const rankStats = new RankStatsBook();
  const metrics = new FrontMetrics(model.modelId);
  metrics.collectProcessMetrics('front');
  const tenants = tenantDirectoryOf(opts, keysFileOf(opts) === null ? null : await keysFromPrimary());
  process.on('message', (m: ControlMessage) => {
    if (m?.type === 'mgw:keys') reloadKeys(tenants, logger, m.text);
  });
  // Each front exports its own spans; the router's route spans join them through the engine request's trace headers.
  const traceSettings = tracingSettings(opts.otlpTracesEndpoint, process.env);
  const tracing =
    traceSettings === null
      ? null
      : await startTracing(traceSettings, 'front', undefined, logger.child({ component: 'tracing' }));
  const app = await buildApp({
    tenants,
    ...appDepsOf(opts, { groups, tokenizer, model, logger, metrics, admission: lifecycle }),
    tracer: tracing?.tracer ?? null,
    sharedConcurrencyCap: sharedConcurrency(channel),
    rankStatsInstance: rankStats,
    sharedRankStats: frontRankStats(rankStats),
    responsesStoreInstance: new SharedResponsesStore(channel, responsesStoreOptionsOf(opts)),
  });
  const url = await listenApp(app, {
    port: opts.port ?? DEFAULT_PORT,
    host: opts.host ?? DEFAULT_HOST,
    listenText: (a) => `front ${slot} listening on ${a}`,
  });
  process.send?.({ type: 'mgw:listening', url } satisfies ControlMessage);

  return new Promise<number>((resolveExit) => {
    let closing = false;
    const close = async (code: number) => {
      if (closing) return;
      closing = true;
      lifecycle.markStopped();
      await closeApp(app).catch(() => {});
      channel.close();
      await tracing?.shutdown();
      resolveExit(code);
    };
    process.on('message', (m: ControlMessage) => {
      if (m?.type === 'mgw:drain') lifecycle.startDrain();
      else if (m?.type === 'mgw:close') void close(0);
    });
    // The primary is gone, or its answers can no longer reach this front: nobody routes for it any more.
    process.on('disconnect', () => void close(1));
    channel.once('socket-closed', () => void close(1));
  });
}
