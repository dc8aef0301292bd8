/**
 * The gateway's HTTP app (src/server/app.ts) as the one-process gateway (start.ts) and every `--workers` front
 * (src/fronts/front/front-process.ts) build, listen and close it: the options they both pass (`appDepsOf`), the
 * listen call and the URL it reports (`listenApp`), and the close that does not wait on idle keep-alive sockets
 * (`closeApp`). Also the checks of the listen address made before anything starts: a busy port (`assertPortFree`) and
 * a listener reachable from elsewhere without an API key (`warnIfOpenWithoutKey`).
 */
import { createServer, isIPv4 } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { FLOW_CONTROL_DEFAULTS } from '../engine-client/flow-control.js';
import type { AdmissionGate } from '../server/admission.js';
import type { GatewayDeps } from '../server/app.js';
import type { BackendGroup } from '../server/backend.js';
import { DEFAULT_MAX_CONCURRENT_REQUESTS } from '../server/concurrency.js';
import {
  LISTEN_BACKLOG,
  resolveEdgeOptions,
  type HttpEdgeOptions,
  type ResolvedEdgeOptions,
} from '../server/edge-options.js';
import { TenantDirectory } from '../server/tenant.js';
import type { GatewayMetrics } from '../server/metrics.js';
import type { ResponsesStoreOptions } from '../server/responses/store.js';
import type { GatewayTokenizer } from '../tokenizer/tokenizer.js';
import type { GatewayOptions, ServedModel } from './options.js';

/**
 * The HTTP edge options of `opts`. The concurrency cap counts requests waiting in flow control's queue (it is checked
 * when a request arrives, before anything knows whether it will wait), so with `--flow-control` and no explicit cap
 * the default cap grows by the queue's bound per group: otherwise one tenant's flood would fill the cap (512) long
 * before the queue's own bounds and fair turns could act, and every other tenant would get 429 (found by testing).
 */
export function edgeOptionsOf(opts: GatewayOptions): HttpEdgeOptions | undefined {
  const fc = opts.flowControl;
  if (fc?.enabled !== true || opts.edge?.maxConcurrentRequests !== undefined) return opts.edge;
  const groups = Math.max(1, opts.groups?.length ?? 1);
  const queued = fc.maxQueued ?? FLOW_CONTROL_DEFAULTS.maxQueued;
  return { ...opts.edge, maxConcurrentRequests: DEFAULT_MAX_CONCURRENT_REQUESTS + groups * queued };
}

/**
 * The keys and tenants of an HTTP process (server/tenant.ts): the `--api-key` keys and the keys file's. Each process
 * that serves HTTP (the gateway, or each `--workers` front) keeps its own and reloads it (`reloadKeys`). `keysText`:
 * the keys file's content when another process read it (a front gets it from the primary); null: read it here.
 * @throws KeysFileError when the keys file cannot be read or parsed.
 */
export function tenantDirectoryOf(opts: GatewayOptions, keysText: string | null = null): TenantDirectory {
  const edge = resolveEdgeOptions(edgeOptionsOf(opts));
  return new TenantDirectory(edge.apiKeys, edge.apiKeysFile, keysText);
}

/** The keys file of `opts` (`--api-keys-file`), or null. */
export function keysFileOf(opts: GatewayOptions): string | null {
  return resolveEdgeOptions(edgeOptionsOf(opts)).apiKeysFile;
}

/**
 * Read the keys file of `directory` again (SIGHUP; or take `keysText`, its content read by the primary), logging what
 * it now holds, or why it was not taken (the keys in use stay). Requests already admitted are not affected. Never
 * throws.
 */
export function reloadKeys(directory: TenantDirectory, logger: Logger, keysText: string | null = null): void {
  try {
    const n = directory.reload(keysText);
    logger.info({ keysFile: directory.keysFile, ...n }, 'keys file reloaded');
  } catch (err) {
    logger.error({ keysFile: directory.keysFile, err: String(err) }, 'keys file not reloaded: the keys in use stay');
  }
}

/**
 * The `buildApp` options that come straight from `GatewayOptions`, for the one-process gateway and every `--workers`
 * front alike: one place, so an option cannot reach one and miss the other (the fronts once chose groups without
 * `--load-horizon-ms`, issue 28). The Responses store is not among them: each side builds its own.
 */
export function appOptionsOf(
  opts: GatewayOptions,
): Pick<
  GatewayDeps,
  | 'bodyLimitBytes'
  | 'toolCallParser'
  | 'reasoningParser'
  | 'edge'
  | 'loadHorizonMs'
  | 'allowRuntimeLoraUpdating'
  | 'trustRequestChatTemplate'
> {
  return {
    ...(opts.bodyLimitBytes !== undefined ? { bodyLimitBytes: opts.bodyLimitBytes } : {}),
    ...(opts.toolCallParser !== undefined ? { toolCallParser: opts.toolCallParser } : {}),
    ...(opts.reasoningParser !== undefined ? { reasoningParser: opts.reasoningParser } : {}),
    ...(edgeOptionsOf(opts) !== undefined ? { edge: edgeOptionsOf(opts) } : {}),
    ...(opts.dpPolicyOptions?.loadHorizonMs !== undefined ? { loadHorizonMs: opts.dpPolicyOptions.loadHorizonMs } : {}),
    ...(opts.allowRuntimeLoraUpdating === true ? { allowRuntimeLoraUpdating: true } : {}),
    ...(opts.trustRequestChatTemplate === true ? { trustRequestChatTemplate: true } : {}),
  };
}

/**
 * The `buildApp` options every HTTP process of a gateway passes, the one-process gateway and each `--workers` front:
 * its backends (`groups`), the tokenizer, the served model, the logger (as its `http` child), the metrics, the
 * admission gate (the drain state) and `appOptionsOf(opts)`. Each adds its own Responses store (and a front its shared
 * cap and statistics).
 */
export function appDepsOf(
  opts: GatewayOptions,
  parts: {
    groups: readonly BackendGroup[];
    tokenizer: GatewayTokenizer;
    model: ServedModel;
    logger: Logger;
    metrics: GatewayMetrics;
    admission: AdmissionGate;
  },
): GatewayDeps {
  return {
    groups: parts.groups,
    tokenizer: parts.tokenizer,
    modelId: parts.model.modelId,
    servedModelNames: parts.model.servedModelNames,
    logger: parts.logger.child({ component: 'http' }),
    metrics: parts.metrics,
    admission: parts.admission,
    ...appOptionsOf(opts),
  };
}

/** The Responses-API store's options from `GatewayOptions.responsesStoreSize` (absent: the store's default size). */
export function responsesStoreOptionsOf(opts: Pick<GatewayOptions, 'responsesStoreSize'>): ResponsesStoreOptions {
  return opts.responsesStoreSize !== undefined ? { maxResponses: opts.responsesStoreSize } : {};
}

/**
 * Listen on `port` (0 = any free port) and `host` with the gateway's accept backlog (`LISTEN_BACKLOG`); fastify logs
 * `listenText(address)` once per listening address (several for 0.0.0.0). Resolves with the base URL
 * `http://host:port` (the port bound; an IPv6 host in brackets). Rejects with the listen error.
 */
export async function listenApp(
  app: FastifyInstance,
  at: { port: number; host: string; listenText: (address: string) => string },
): Promise<string> {
  const { port, host } = at;
  await app.listen({ port, host, backlog: LISTEN_BACKLOG, listenTextResolver: at.listenText });
  const address = app.server.address();
  const boundPort = typeof address === 'object' && address !== null ? address.port : port;
  return `http://${host.includes(':') ? `[${host}]` : host}:${boundPort}`;
}

/**
 * Grace period in ms between the start of the HTTP server's close and the forced close of every connection still
 * open (see `closeHttp`).
 */
export const HTTP_CLOSE_GRACE_MS = 1000;
/**
 * Close `app`, but destroy every connection still open after `HTTP_CLOSE_GRACE_MS`: by then the engine side is closed
 * (or, in a front, the drain is over), so no response can make progress, and whatever answered in the meantime has been
 * flushed. Needed because Node 20's `closeIdleConnections` (what fastify calls on close) leaves alone a connection
 * that never sent a request, such as a client's pre-opened keep-alive socket, which would hold the close for the
 * headers timeout (about a minute). Rejects with the close error.
 */
export async function closeApp(app: Pick<FastifyInstance, 'server' | 'close'>): Promise<void> {
  const timer = setTimeout(() => app.server.closeAllConnections(), HTTP_CLOSE_GRACE_MS);
  try {
    await app.close();
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Bind `host:port` and close it again, so a busy or forbidden port fails before any engine socket is bound or anything
 * is spawned. Port 0 (any free port) is not checked. Rejects with the listen error (`syscall` 'listen', `code`
 * EADDRINUSE / EACCES / EADDRNOTAVAIL), which cli.ts turns into one line on stderr.
 */
export async function assertPortFree(port: number, host: string): Promise<void> {
  if (port === 0) return;
  const probe = createServer();
  await new Promise<void>((resolve, reject) => {
    probe.once('error', reject);
    probe.listen({ port, host, exclusive: true }, () => resolve());
  });
  await new Promise<void>((resolve) => probe.close(() => resolve()));
}

/**
 * Whether `host` (a bind address or name) only listens on this machine: `localhost`, 127.0.0.0/8, `::1` (also in
 * brackets or IPv4-mapped). `0.0.0.0`, `::` and every other address are reachable from elsewhere.
 */
export function isLoopbackHost(host: string): boolean {
  const h = host
    .trim()
    .toLowerCase()
    .replace(/^\[(.*)\]$/, '$1');
  if (h === 'localhost' || h === '::1') return true;
  const v4 = h.startsWith('::ffff:') ? h.slice('::ffff:'.length) : h;
  return isIPv4(v4) && v4.startsWith('127.');
}

/**
 * Log a warning when `host` is reachable beyond this machine (`isLoopbackHost`) and the edge has no API key: anyone
 * who can reach it can use the API.
 */
export function warnIfOpenWithoutKey(
  logger: Logger,
  host: string,
  edge: Pick<ResolvedEdgeOptions, 'apiKeys' | 'apiKeysFile'>,
): void {
  if (edge.apiKeys.length === 0 && edge.apiKeysFile === null && !isLoopbackHost(host)) {
    logger.warn(
      { host },
      `listening on ${host}, which is reachable beyond this machine, without an API key: anyone who can reach it can ` +
        'use the API; set --api-key (or MODEL_GATEWAY_API_KEY)',
    );
  }
}
