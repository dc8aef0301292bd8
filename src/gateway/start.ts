/**
 * `startGateway`: wire the whole gateway together (architecture.md "The path of one request"; gateway.md sections 2,
 * 3, 4, 7, 15 and 16; issue #3 parts 4-5). The gateway serves one or more **engine groups** (workers): each is one
 * `ipc://` socket set with its own handshake, N DP ranks, one engine client and one engine family (TokenSpeed or
 * vLLM, pinned by configuration because the handshake cannot reveal the wire dialect, gateway.md 2.2).
 *
 * Serve at once (issue #8 part 4): it removes the socket files dead gateways left behind (transport/stale-sweep.ts),
 * checks that the HTTP port is free, binds each group's sockets and builds its engine client (engine-groups.ts), builds
 * one HTTP app over all groups (the app picks a group per request, src/server/groups.ts) and listens (http-app.ts),
 * then spawns the simulated ranks (sim-ranks.ts). Every check that can refuse the options runs first (plan.ts).
 * So a refused start (a live gateway owns an ipc path, the port is taken, a bind fails) ends before the "listening"
 * line and before anything is spawned. Ranks join whenever they dial in, for the gateway's whole life (restarts
 * included); until a group can serve, requests get 503 with Retry-After and /health and /ready say `starting`. A group
 * that cannot serve is skipped by routing while the others keep serving.
 *
 * Gateway restarts (issue 26 part 6): a group with an `engineUrl` keeps its ranks' handshakes in `<P>-ranks.json`
 * beside its sockets and, on start, adopts the ranks of a previous gateway that are still connected (their sockets
 * reconnect by themselves; transport/adoption.ts): they serve without a restart. Simulated ranks of such a group are
 * spawned once adoption is over, only for the indexes nobody adopted.
 *
 * Stopping: `close()` at once; `shutdown()` drains first; `emergencyStop()` for a process about to exit (shutdown.ts).
 */
import { dirname } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { EngineClient } from '../engine-client/client.js';
import { GatewayLifecycle } from '../lifecycle.js';
import { buildApp } from '../server/app.js';
import type { BackendGroup } from '../server/backend.js';
import { GatewayMetrics } from '../server/metrics.js';
import { dashboardUrl } from '../server/routes/dashboard.js';
import { sweepDeadGatewayFiles } from '../transport/stale-sweep.js';
import {
  closeEngineClients,
  groupEndpoints,
  runningGroups,
  startEngineGroups,
  type GroupRuntime,
  type RunningGroup,
} from './engine-groups.js';
import {
  appDepsOf,
  assertPortFree,
  listenApp,
  reloadKeys,
  responsesStoreOptionsOf,
  tenantDirectoryOf,
} from './http-app.js';
import type { GatewayOptions } from './options.js';
import { planGateway, type GatewayPlan } from './plan.js';
import { gatewayStops } from './shutdown.js';
import { spawnGroupSims, waitForGroupRanks } from './sim-ranks.js';
import { loggableEndpoint, startTracing } from '../tracing.js';

/** A started gateway: its base URL (`http://host:port`) and idempotent ways to stop it. */
export interface RunningGateway {
  url: string;
  /** The first group's engine client (for diagnostics and tests; `groups` has every group's). */
  client: EngineClient;
  /** Every served group, in configuration order. */
  groups: readonly RunningGroup[];
  /** The admission/drain state the HTTP layer reads (src/lifecycle.ts). */
  lifecycle: GatewayLifecycle;
  /** The metrics over every group (with `serveHttp: false`: the engine-side series a router contributes). */
  metrics: GatewayMetrics;
  /** Stop at once: live requests end (stream-closed), then HTTP, sockets (files removed) and simulated ranks. */
  close(): Promise<void>;
  /**
   * Graceful stop (SIGTERM): drain (readiness 503, new API requests 503 with Retry-After), let live requests run for
   * up to `graceMs` (default `shutdownGraceMs`, 30 000), end the rest with a client-closed error naming the grace
   * (their ranks get ABORTs), then `close()`. Idempotent; a later `close()` joins it.
   */
  shutdown(opts?: { graceMs?: number }): Promise<void>;
  /**
   * Synchronous last-resort teardown for a process about to `process.exit()` without waiting for `close()` (the
   * CLI's second SIGINT/SIGTERM): SIGKILL the simulated ranks still running and remove every group's ipc socket
   * files (if still its own). Sockets, HTTP connections and real engines are left to the process exit. Never
   * throws; a no-op for what is already gone.
   */
  emergencyStop(): void;
  /**
   * Read the keys file again (SIGHUP with `--api-keys-file`): the next requests are checked against its keys and
   * get its tenants. A file that cannot be read or parsed is logged and the keys in use stay. Never throws.
   */
  reloadKeys(): void;
}

/**
 * Start the gateway (see the module docs). Resolves once the HTTP server listens and every group's sockets are bound
 * (with `waitForRanks`, the default, once every DP rank has also joined). Throws (after tearing down whatever was
 * started, socket files included) on a bad option (`RangeError` from `planGateway`, transport `ConfigError`), a busy
 * HTTP port, a bind failure (`TransportError`; `ConfigError` when another live gateway owns the ipc path or the socket
 * directory is unsafe), or, with `waitForRanks`, a simulated rank dying before its group joined.
 */
export async function startGateway(opts: GatewayOptions = {}): Promise<RunningGateway> {
  return startPlannedGateway(planGateway(opts));
}

/**
 * `startGateway` for options already checked by `planGateway` (the `--workers` router plans once and reads the plan
 * itself). Throws what `startGateway` throws after the checks.
 */
export async function startPlannedGateway(plan: GatewayPlan): Promise<RunningGateway> {
  const { logger, opts } = plan;
  const endpoints = groupEndpoints(plan.specs);
  // Dead gateways' socket files go first (the runtime dir of simulated groups and `--workers`, and the configured
  // groups' socket directories; never a live gateway's), then a taken HTTP port fails the start before any socket is
  // bound, so that a refused start touches nothing and prints no "listening" line.
  await sweepDeadGatewayFiles(
    [...new Set(endpoints.map((e) => dirname(e.ipcPath)))],
    logger.child({ component: 'transport' }),
  );
  if (plan.serveHttp) await assertPortFree(plan.port, plan.host);
  const tracing =
    plan.tracing === null
      ? null
      : await startTracing(
          plan.tracing,
          plan.serveHttp ? 'gateway' : 'router',
          undefined,
          logger.child({ component: 'tracing' }),
        );
  if (plan.tracing !== null) {
    const { endpoint, protocol, sampler, ratio } = plan.tracing;
    logger.info(
      { endpoint: loggableEndpoint(endpoint), protocol, sampler, ratio },
      'tracing on: spans go to the OTLP endpoint',
    );
  }
  let started: Awaited<ReturnType<typeof startEngineGroups>>;
  try {
    started = await startEngineGroups(plan, endpoints, tracing?.tracer ?? null);
  } catch (err) {
    await tracing?.shutdown();
    throw err;
  }
  const { groups, tokenizer } = started;

  const running = runningGroups(groups);
  const backendGroups: BackendGroup[] = running.map((g) => ({
    worker: g.worker,
    name: g.name,
    engine: g.engine,
    tasks: g.tasks,
    backend: g.client,
  }));
  const { modelId } = plan.model;
  const metrics = new GatewayMetrics({
    modelId,
    ...(plan.serveHttp ? {} : { role: 'engine' as const }),
    ...(plan.opts.maxLoras !== undefined ? { maxLoras: plan.opts.maxLoras } : {}),
  });
  metrics.collectProcessMetrics(plan.serveHttp ? 'gateway' : 'router');
  const lifecycle = new GatewayLifecycle();
  if (!plan.serveHttp) metrics.attach(backendGroups);
  let app: FastifyInstance | null = null;
  const tenants = tenantDirectoryOf(opts, plan.keysText); // read and checked by the plan
  try {
    app = !plan.serveHttp
      ? null
      : await buildApp({
          ...appDepsOf(opts, {
            groups: backendGroups,
            tokenizer,
            model: plan.model,
            logger,
            metrics,
            admission: lifecycle,
          }),
          responsesStore: responsesStoreOptionsOf(opts),
          tenants,
          tracer: tracing?.tracer ?? null,
        });
  } catch (err) {
    await closeEngineClients(groups);
    await tracing?.shutdown();
    throw err;
  }
  const stops = gatewayStops({ groups, app, lifecycle, logger, shutdownGraceMs: plan.shutdownGraceMs, tracing });

  let url = '';
  try {
    if (app !== null) {
      // fastify logs one line per listening address (several for 0.0.0.0): this is the gateway's "listening" line.
      url = await listenApp(app, {
        port: plan.port,
        host: plan.host,
        listenText: (address) => `model-gateway listening on ${address}`,
      });
    }
    await spawnGroupSims(groups, plan.opts.maxLoras);
    logServing(plan, groups, url);
    if (opts.waitForRanks ?? true) await waitForGroupRanks(groups);
  } catch (err) {
    await stops.teardown();
    throw err;
  }
  const { close, shutdown, emergencyStop } = stops;
  const reload = (): void => reloadKeys(tenants, logger);
  return {
    url,
    client: running[0]!.client,
    groups: running,
    lifecycle,
    metrics,
    close,
    shutdown,
    emergencyStop,
    reloadKeys: reload,
  };
}

/** The line that says what the gateway serves (with the dashboard's URL once the gateway listens). */
function logServing(plan: GatewayPlan, groups: readonly GroupRuntime[], url: string): void {
  const { modelId, servedModelNames } = plan.model;
  const { dpPolicyName } = plan;
  const slots = groups.reduce((sum, g) => sum + g.spec.dpSize, 0);
  // A router of `--workers N` has no URL yet (its fronts listen later): their listening line names the dashboard.
  plan.logger.info(
    {
      url,
      servedModelNames,
      dpPolicy: dpPolicyName,
      groups: groups.map((g) => ({ worker: g.endpoints.workerUrl, engine: g.spec.engine, dpSize: g.spec.dpSize })),
    },
    `serving model '${modelId}' with ${slots} DP rank slot(s) in ${groups.length} engine group(s), DP policy '${dpPolicyName}': ranks join as they dial in, ` +
      `/ready turns 200 once a group can serve${url === '' ? '' : `; dashboard ${dashboardUrl(url)}`}`,
  );
}
