/**
 * The `model-gateway` command line (node:util parseArgs):
 * - `model-gateway serve [options]`: start the gateway (src/gateway.ts `startGateway`) over one or more engine groups
 *   (`--engine-url`/`--sim`/`--worker`/`--sim-worker`, each followed by its own `--engine tokenspeed|vllm`,
 *   `--dp-size`, ...; see `USAGE`; issue #3 part 5). It serves at once: HTTP listens while ranks are still joining
 *   (issue #8). SIGINT/SIGTERM/SIGHUP drain it (`shutdown()`: /ready 503, new requests 503, live requests run for up
 *   to `--shutdown-grace-ms`) and then shut it down cleanly (HTTP server, engine clients, sockets and their files,
 *   simulated ranks); a second signal exits at once after the synchronous `emergencyStop()` (SIGKILL the simulated
 *   ranks, remove the ipc socket files). A signal during startup is honoured once startup finished;
 * - `model-gateway sim [options]`: run one simulated rank (src/sim/main.ts) in a child process, with
 *   signals forwarded;
 * - `model-gateway --help`, `model-gateway --version`.
 * Every serve option may also come from a `MODEL_GATEWAY_*` environment variable or a `--config FILE` (flag > env >
 * file; cli-config.ts). Exit codes: 0 success, 1 runtime failure, 2 usage error. A usage error and an operator
 * mistake found at start-up (`operatorErrorLine`, an HTTP front that cannot start included) print one line on stderr,
 * without a stack trace.
 */
import { spawn } from 'node:child_process';
import cluster from 'node:cluster';
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { DEFAULT_RANK_STALL_TIMEOUT_MS, DEFAULT_SILENCE_TIMEOUT_MS } from './engine-client/client.js';
import { DEFAULT_SHUTDOWN_GRACE_MS } from './lifecycle.js';
import { DEFAULT_HANDSHAKE_RECEIVE_TIMEOUT_MS, DEFAULT_MAX_MESSAGE_BYTES } from './transport/zmq-link.js';
import {
  DEFAULT_HOST,
  DEFAULT_PORT,
  DEFAULT_SIM_RANKS,
  ENGINE_FAMILIES,
  resolveGroups,
  startGateway,
  type EngineFamily,
  type GatewayOptions,
  type GroupOptions,
  type RunningGateway,
} from './gateway.js';
import {
  DEFAULT_BALANCE_REL_THRESHOLD,
  REFERENCE_MAX_NUM_SEQS,
  SGLANG_BALANCE_ABS_THRESHOLD,
} from './engine-client/cache-aware.js';
import {
  DEFAULT_DP_POLICY,
  DP_POLICY_NAMES,
  type DpPolicyName,
  type DpPolicyTuning,
} from './engine-client/policies.js';
import { DEFAULT_LOAD_HORIZON_MS } from './engine-client/policy.js';
import { ConfigSourceError, layerServeArgs, type OptionSpec } from './cli-config.js';
import { FrontStartError, MAX_AUTO_WORKERS, autoWorkers, startClusterGateway } from './fronts/cluster.js';
import { isFrontProcess } from './fronts/control.js';
import { runFront } from './fronts/front-process.js';
import { packageVersion } from './server/app.js';
import { LOG_FORMATS, type LogFormat } from './gateway-logger.js';
import { ignoreStdioErrors } from './log-sink.js';
import { DEFAULT_MAX_CONCURRENT_REQUESTS } from './server/concurrency.js';
import type { CorsOptions } from './server/cors.js';
import {
  DEFAULT_REQUEST_TIMEOUT_MS,
  DEFAULT_TOKENIZE_BODY_LIMIT_BYTES,
  type HttpEdgeOptions,
} from './server/edge-options.js';
import { DEFAULT_CLIENT_STALL_TIMEOUT_MS, DEFAULT_STREAM_BUFFER_BYTES } from './server/sse.js';
import { simEntryArgs } from './sim/spawn.js';
import {
  REASONING_PARSER_NAMES,
  TOOL_CALL_PARSER_NAMES,
  type ReasoningParserName,
  type ToolCallParserName,
} from './server/parsers/index.js';
import { DEFAULT_RESPONSES_STORE_SIZE } from './server/responses/store.js';
import { tuneV8ForChatTemplates } from './tokenizer/chat-template.js';
import { TokenizerLoadError } from './tokenizer/errors.js';
import { DEFAULT_OFF_LOOP_LIMITS } from './tokenizer/off-loop.js';
import { ConfigError, TransportError } from './transport/errors.js';

/** The `--dp-policy` names the CLI accepts: every policy but `oracle`, which needs the benchmark's simulator state. */
export const CLI_DP_POLICIES: readonly DpPolicyName[] = DP_POLICY_NAMES.filter((n) => n !== 'oracle');

/**
 * Check a `--dp-policy` value (issue #5 part 1; src/engine-client/policies.ts). Throws UsageError for `oracle`
 * (benchmark only: it reads the simulator's true state, which a served gateway does not have) and for an unknown
 * name, listing the valid ones.
 */
function parseDpPolicy(value: string): DpPolicyName {
  if (value === 'oracle') {
    throw new UsageError(
      `--dp-policy oracle is benchmark only (it needs the simulator's true state); use one of ${CLI_DP_POLICIES.join(', ')}`,
    );
  }
  if (!(CLI_DP_POLICIES as readonly string[]).includes(value)) {
    throw new UsageError(`--dp-policy must be one of ${CLI_DP_POLICIES.join(', ')}, got '${value}'`);
  }
  return value as DpPolicyName;
}

/**
 * The output-parsing flags (issue #11): `--tool-call-parser NAME|none`, `--enable-auto-tool-choice` (vLLM's flag:
 * "auto" is on whenever a parser is active; with `--tool-call-parser none` it is a UsageError, as vLLM refuses it
 * without a parser), `--reasoning-parser NAME`, `--responses-store N`. Throws UsageError on an unknown name.
 */
function parseOutputFlags(v: {
  'tool-call-parser'?: string;
  'enable-auto-tool-choice'?: boolean;
  'reasoning-parser'?: string;
  'responses-store'?: string;
}): Pick<GatewayOptions, 'toolCallParser' | 'reasoningParser' | 'responsesStoreSize'> {
  const out: Pick<GatewayOptions, 'toolCallParser' | 'reasoningParser' | 'responsesStoreSize'> = {};
  const tool = v['tool-call-parser'];
  if (tool !== undefined) {
    if (tool !== 'none' && !(TOOL_CALL_PARSER_NAMES as readonly string[]).includes(tool)) {
      throw new UsageError(
        `--tool-call-parser must be one of ${TOOL_CALL_PARSER_NAMES.join(', ')} or none, got '${tool}'`,
      );
    }
    out.toolCallParser = tool as ToolCallParserName | 'none';
  }
  if (v['enable-auto-tool-choice'] === true && tool === 'none') {
    throw new UsageError('--enable-auto-tool-choice needs a tool-call parser (--tool-call-parser none disables it)');
  }
  const reasoning = v['reasoning-parser'];
  if (reasoning !== undefined) {
    if (!(REASONING_PARSER_NAMES as readonly string[]).includes(reasoning)) {
      throw new UsageError(
        `--reasoning-parser must be one of ${REASONING_PARSER_NAMES.join(', ')}, got '${reasoning}'`,
      );
    }
    out.reasoningParser = reasoning as ReasoningParserName;
  }
  const store = intOption('responses-store', v['responses-store'], 0);
  if (store !== undefined) out.responsesStoreSize = store;
  return out;
}

/**
 * `--load-horizon-ms N` (integer ≥ 1), `--balance-abs-threshold N` (number ≥ 0), `--balance-rel-threshold X` (number
 * ≥ 1) as `DpPolicyTuning` (dp-routing.md 14.1 for the horizon, 14.11 for the balance bounds; src/engine-client/cache-aware.ts), or null when none is given.
 * Throws UsageError on a bad value.
 */
function parsePolicyTuning(
  horizon: string | undefined,
  abs: string | undefined,
  rel: string | undefined,
): DpPolicyTuning | null {
  const tuning: DpPolicyTuning = {};
  const h = intOption('load-horizon-ms', horizon, 1);
  if (h !== undefined) tuning.loadHorizonMs = h;
  const num = (name: string, value: string | undefined, min: number): number | undefined => {
    if (value === undefined) return undefined;
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n) || n < min)
      throw new UsageError(`--${name} must be a number ≥ ${min}, got '${value}'`);
    return n;
  };
  const a = num('balance-abs-threshold', abs, 0);
  if (a !== undefined) tuning.balanceAbsThreshold = a;
  const r = num('balance-rel-threshold', rel, 1);
  if (r !== undefined) tuning.balanceRelThreshold = r;
  return Object.keys(tuning).length > 0 ? tuning : null;
}

/** Usage text of the CLI. */
export const USAGE = `Usage:
  model-gateway serve [options]     Start the OpenAI-compatible gateway
  model-gateway sim [sim options]   Run one simulated rank (see 'model-gateway sim --help')
  model-gateway --help              Show this help
  model-gateway --version           Print the version

examples:
  model-gateway serve --sim 2
      two simulated TokenSpeed ranks (no GPU)
  model-gateway serve --engine-url ipc:///tmp/e/ts --dp-size 2 --api-key KEY
      a running TokenSpeed engine with 2 DP ranks, behind a key
  model-gateway serve --engine-url ipc:///tmp/e/vl --engine vllm --dp-size 2 \\
      --tokenizer Qwen/Qwen3-8B
      a running vLLM engine and its model's tokenizer
  model-gateway serve --worker tokenspeed:ipc:///tmp/e/ts:2 --worker vllm:ipc:///tmp/e/vl
      two groups at once (compact form)
  model-gateway serve --engine-url ipc:///tmp/e/moe --engine vllm --dp-size 4 --lockstep
      an MoE vLLM group whose ready responses are short
  model-gateway serve --sim 2 --sim-engine vllm --sim 2 --sim-engine vllm --sim-lockstep
      a dense and a lockstep simulated vLLM group

Every serve option is also an environment variable MODEL_GATEWAY_<OPTION> (e.g.
MODEL_GATEWAY_PORT=30001) and a key of --config FILE; precedence: flag > environment > file.

engine groups (one ipc:// socket set, one handshake and N DP ranks each; with several, each
request goes to the live group whose least-loaded rank scores lowest):
  --engine-url URL         Start a group of running engines at worker URL ipc://PATH
  --sim N                  Start a group of N simulated ranks (default without any group: one group
                           of ${DEFAULT_SIM_RANKS})
  --worker ENGINE:URL[:N]  Compact group of running engines, e.g. vllm:ipc:///tmp/e/w0:2 (N =
                           --dp-size)
  --sim-worker ENGINE:N[:lockstep]
                           Compact simulated group, e.g. vllm:2:lockstep
 options of a group (after its --engine-url/--sim/--worker/--sim-worker; before the first group they
 are defaults for every group):
  --engine ENGINE          Wire dialect of the group's ranks: tokenspeed (default) or vllm
  --dp-size N              Number of DP ranks that must join (default 1 for --engine-url, N for
                           --sim)
  --handshake ADDR         Explicit handshake address tcp://HOST:PORT (default: derived from the ipc
                           path)
  --lockstep               Treat the group as lockstep (MoE): wake every rank after every request.
                           Default: decided from data_parallel_size in the ready responses, else
                           from the first wave notification
  --no-lockstep            Treat the group as dense: never wake it, ignore wave notifications
  --sim-engine ENGINE      Same as --engine, for simulated groups (as a default it applies to
                           simulated groups only)
  --sim-lockstep           Simulated vLLM ranks step in lockstep (MoE: data_parallel_size > 1,
                           parked when drained)
  --sim-arg ARG            Extra argument for every simulated rank of the group (repeatable; use
                           --sim-arg=--flag)

HTTP and model:
  --port N                 HTTP port (default ${DEFAULT_PORT}; 0 = any free port)
  --host ADDR              HTTP bind address (default ${DEFAULT_HOST})
  --api-key KEY            Require Authorization: Bearer KEY on /v1/*, /tokenize, /detokenize
                           (repeatable: any of the keys; default: the MODEL_GATEWAY_API_KEY
                           environment variable, else no key; docs/security.md)
  --tokenizer DIR|HF_ID    Model folder (tokenizer.json, tokenizer_config.json, optionally
                           config.json / generation_config.json for vLLM EOS ids), or a Hugging Face
                           id such as Qwen/Qwen3-8B found in the local Hugging Face cache
                           (HF_HUB_CACHE, HF_HOME; never downloaded) (default: bundled Qwen3)
  --served-model-name NAME [NAME...]
                           Names a request's "model" may use; the first is the one reported
                           (default: the Hugging Face id, else the tokenizer folder's name, else
                           qwen3)
  --model NAME             Same as one --served-model-name
  --config FILE            YAML or JSON file of serve options, engine groups under 'groups:' (env
                           MODEL_GATEWAY_CONFIG)
  --tool-call-parser NAME  Parse tool calls out of generated text: ${TOOL_CALL_PARSER_NAMES.join(', ')}, or none
                           (default: read off the chat template when unambiguous: <tool_call> →
                           hermes, <|python_tag|> → llama3_json). A parser enables tool_choice
                           "auto".
  --enable-auto-tool-choice
                           Accepted for vLLM command lines: "auto" is on whenever a tool-call parser
                           is active (a usage error with --tool-call-parser none)
  --reasoning-parser NAME  Move <think>…</think> into reasoning_content: ${REASONING_PARSER_NAMES.join(', ')}
                           (default none)
  --responses-store N      Responses kept in memory for previous_response_id / item_reference /
                           GET /v1/responses/{id} (default ${DEFAULT_RESPONSES_STORE_SIZE}; 0 = store nothing)

processes and logs:
  --workers N|auto         HTTP front processes sharing the port, with one router process owning the
                           engines and the routing state; 1 = one process (docs/operations.md
                           "Several cores"; default auto: cores − 1, at most ${MAX_AUTO_WORKERS}, and 1 on a
                           machine of 2 cores or fewer)
  --log-level LEVEL        pino level: trace, debug, info, warn, error, fatal, silent (default info)
  --log-format FORMAT      pretty (default on a terminal) or json (default otherwise)
  --shutdown-grace-ms N    On SIGTERM/SIGINT, let live requests run up to N ms before ending them
                           (default ${DEFAULT_SHUTDOWN_GRACE_MS}; a second signal exits at once)
  --exit-with-parent       Stop at once (simulated ranks killed, socket files removed) when stdin
                           closes, i.e. when the process that spawned the gateway is gone (test
                           harnesses, supervisors without process groups); a flag only

routing (docs/routing.md):
  --dp-policy NAME         DP rank selection for unpinned requests (default ${DEFAULT_DP_POLICY}):
                           ${CLI_DP_POLICIES.join(', ')}
                           (oracle is benchmark only)
  --load-horizon-ms N      A rank's stored load report counts less as it ages and not at all
                           after N ms (default ${DEFAULT_LOAD_HORIZON_MS})
  --balance-abs-threshold N
  --balance-rel-threshold X
                           cache_aware: a rank whose load exceeds the idlest's by more than N
                           requests and by more than X times never wins by prefix affinity
                           (SGLang's rule, per rank; defaults max_num_seqs × ${SGLANG_BALANCE_ABS_THRESHOLD}/${REFERENCE_MAX_NUM_SEQS}, or ${SGLANG_BALANCE_ABS_THRESHOLD} when the
                           engine reports none, and ${DEFAULT_BALANCE_REL_THRESHOLD})

engine liveness:
  --silence-timeout-ms N   A rank that holds requests and sends nothing for N ms is dead
                           (default ${DEFAULT_SILENCE_TIMEOUT_MS})
  --rank-stall-timeout-ms N
                           A rank that holds requests and sends nothing for N ms is stalled: out of
                           rotation, its requests end with an error, back when it speaks again
                           (default ${DEFAULT_RANK_STALL_TIMEOUT_MS})
  --handshake-timeout-ms N Bound on each stage of a rank's handshake (INIT → READY, → registration);
                           model loading happens in between (default ${DEFAULT_HANDSHAKE_RECEIVE_TIMEOUT_MS})
  --max-output-message-bytes N
                           Largest engine output frame accepted; a bigger one drops that engine's
                           connection (default ${DEFAULT_MAX_MESSAGE_BYTES.output})

HTTP edge and limits (docs/security.md):
  --metrics-require-key    /metrics needs the key too (default: open)
  --allowed-origins LIST   CORS: allowed origins, a JSON list or comma-separated; * = any (default:
                           no CORS)
  --allowed-methods LIST   CORS: allowed methods (default *; needs --allowed-origins)
  --allowed-headers LIST   CORS: allowed request headers (default *; needs --allowed-origins)
  --allow-credentials      CORS: allow credentials (needs --allowed-origins)
  --max-concurrent-requests N
                           Generation requests served at once before 429 + Retry-After
                           (default ${DEFAULT_MAX_CONCURRENT_REQUESTS}; 0 = no cap)
  --body-limit BYTES       Maximum HTTP request body size (default 8 MiB)
  --tokenize-body-limit BYTES
                           Largest /tokenize and /detokenize body; a larger one gets 413
                           (default ${DEFAULT_TOKENIZE_BODY_LIMIT_BYTES}, at most --body-limit)
  --stream-buffer-bytes BYTES
                           Bytes buffered per stream for a client that does not read
                           (default ${DEFAULT_STREAM_BUFFER_BYTES})
  --client-stall-timeout-ms N
                           A streaming client that stays behind (that buffer full, outputs held)
                           for N ms has its engine request aborted and its connection closed
                           (default ${DEFAULT_CLIENT_STALL_TIMEOUT_MS})
  --request-timeout-ms N   A request (headers and body) not received within N ms gets 408
                           (default ${DEFAULT_REQUEST_TIMEOUT_MS})
  --tokenizer-queue-jobs N
  --tokenizer-queue-chars N
                           Large prompts, /tokenize, /detokenize and long chats are tokenized on a
                           worker thread per process; past N jobs or N characters queued there a
                           request gets 429 + Retry-After (defaults ${DEFAULT_OFF_LOOP_LIMITS.maxJobs} and ${DEFAULT_OFF_LOOP_LIMITS.maxChars})
`;

/** A command-line mistake: printed on one line with a hint to --help, exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

function intOption(name: string, value: string | undefined, min: number): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value) || Number(value) < min || !Number.isSafeInteger(Number(value))) {
    throw new UsageError(`--${name} must be an integer ≥ ${min}, got '${value}'`);
  }
  return Number(value);
}

const LOG_LEVELS = new Set(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']);

/** The options that take part in the group syntax (see `USAGE`). */
const GROUP_OPENERS = new Set(['engine-url', 'sim', 'worker', 'sim-worker']);
const GROUP_OPTIONS = new Set([
  'engine',
  'sim-engine',
  'dp-size',
  'handshake',
  'lockstep',
  'no-lockstep',
  'sim-lockstep',
  'sim-arg',
]);

/** One group (or the defaults) as written on the command line, before defaults are applied. */
interface GroupFlags {
  /** The flag that opened the group, for messages (`--engine-url ipc://x`); null for the defaults. */
  opener: string | null;
  kind: 'real' | 'sim' | null;
  engineUrl?: string;
  sim?: number;
  engine?: EngineFamily;
  simEngine?: EngineFamily;
  dpSize?: number;
  handshake?: string;
  lockstep?: boolean;
  /** `--lockstep` (true) / `--no-lockstep` (false): the gateway's lockstep option; absent = auto. */
  lockstepMode?: boolean;
  simArgs: string[];
}

function parseEngine(flag: string, value: string): EngineFamily {
  if (!(ENGINE_FAMILIES as readonly string[]).includes(value)) {
    throw new UsageError(`${flag} must be ${ENGINE_FAMILIES.join(' or ')}, got '${value}'`);
  }
  return value as EngineFamily;
}

function checkEngineUrl(flag: string, url: string): string {
  if (!url.startsWith('ipc://') || url.length === 'ipc://'.length) {
    throw new UsageError(`${flag} must be an ipc://PATH worker URL, got '${url}'`);
  }
  return url;
}

/** `--worker ENGINE:ipc://PATH[:N]` (a path ending in `:<digits>` needs the long form). */
function parseWorkerSpec(spec: string): GroupFlags {
  const m = /^([a-z]+):(ipc:\/\/.+?)(?::(\d+))?$/.exec(spec);
  if (!m)
    throw new UsageError(
      `--worker must look like ENGINE:ipc://PATH[:DP_SIZE], e.g. vllm:ipc:///tmp/e/w0:2; got '${spec}'`,
    );
  const group: GroupFlags = {
    opener: `--worker ${spec}`,
    kind: 'real',
    engine: parseEngine('--worker engine', m[1]!),
    engineUrl: checkEngineUrl('--worker', m[2]!),
    simArgs: [],
  };
  if (m[3] !== undefined) group.dpSize = intOption('worker DP size', m[3], 1);
  return group;
}

/** `--sim-worker ENGINE:N[:lockstep]`. */
function parseSimWorkerSpec(spec: string): GroupFlags {
  const m = /^([a-z]+):(\d+)(:lockstep)?$/.exec(spec);
  if (!m) throw new UsageError(`--sim-worker must look like ENGINE:N[:lockstep], e.g. vllm:2:lockstep; got '${spec}'`);
  return {
    opener: `--sim-worker ${spec}`,
    kind: 'sim',
    engine: parseEngine('--sim-worker engine', m[1]!),
    sim: intOption('sim-worker rank count', m[2], 1),
    ...(m[3] !== undefined ? { lockstep: true } : {}),
    simArgs: [],
  };
}

/** Apply one group option to `target` (a group, or the defaults). Throws UsageError on a misplaced or repeated option. */
function applyGroupOption(target: GroupFlags, name: string, value: string | undefined): void {
  const where = target.opener === null ? 'before the first group' : `for ${target.opener}`;
  const once = <K extends keyof GroupFlags>(key: K, v: GroupFlags[K], flag = name) => {
    if (target[key] !== undefined) throw new UsageError(`--${flag} given twice ${where}`);
    target[key] = v;
  };
  if (target.kind === 'real' && (name === 'sim-engine' || name === 'sim-lockstep' || name === 'sim-arg')) {
    throw new UsageError(
      `--${name} applies to simulated groups, not ${target.opener}${name === 'sim-engine' ? ' (use --engine)' : ''}`,
    );
  }
  switch (name) {
    case 'engine':
    case 'sim-engine': {
      const engine = parseEngine(`--${name}`, value!);
      // On a group both spell the same thing; as defaults --sim-engine only reaches simulated groups.
      if (target.kind !== null && (target.engine !== undefined || target.simEngine !== undefined)) {
        throw new UsageError(`the engine is given twice ${where}`);
      }
      if (name === 'engine' || target.kind !== null) once('engine', engine, name);
      else once('simEngine', engine, name);
      return;
    }
    case 'dp-size':
      once('dpSize', intOption('dp-size', value, 1));
      return;
    case 'handshake':
      if (!value!.startsWith('tcp://'))
        throw new UsageError(`--handshake must be a tcp://HOST:PORT address, got '${value}'`);
      once('handshake', value);
      return;
    case 'lockstep':
    case 'no-lockstep':
      if (target.lockstepMode !== undefined) throw new UsageError(`--lockstep / --no-lockstep given twice ${where}`);
      target.lockstepMode = name === 'lockstep';
      return;
    case 'sim-lockstep':
      once('lockstep', true);
      return;
    case 'sim-arg':
      target.simArgs.push(value!);
      return;
  }
}

/** The `GroupOptions` of one command-line group after the defaults (see `USAGE`). */
function toGroupOptions(g: GroupFlags, defaults: GroupFlags): GroupOptions {
  const sim = g.kind === 'sim';
  const out: GroupOptions = {};
  const engine =
    g.kind === null
      ? (defaults.simEngine ?? defaults.engine)
      : (g.engine ?? (sim ? defaults.simEngine : undefined) ?? defaults.engine);
  if (engine !== undefined) out.engine = engine;
  if (g.engineUrl !== undefined) out.engineUrl = g.engineUrl;
  if (g.sim !== undefined) out.sim = g.sim;
  const dpSize = g.dpSize ?? defaults.dpSize;
  if (dpSize !== undefined) out.dpSize = dpSize;
  const handshake = g.handshake ?? defaults.handshake;
  if (handshake !== undefined) out.handshake = handshake;
  const lockstepMode = g.lockstepMode ?? defaults.lockstepMode;
  if (lockstepMode !== undefined) out.lockstepMode = lockstepMode;
  if (sim || g.kind === null) {
    const simArgs = [...defaults.simArgs, ...(g === defaults ? [] : g.simArgs)];
    if (simArgs.length > 0) out.simArgs = simArgs;
    if (g.lockstep ?? defaults.lockstep) out.lockstep = true;
  }
  return out;
}

/**
 * Parse `serve` arguments into `startGateway` options. Group syntax: `--engine-url`, `--sim`, `--worker` and
 * `--sim-worker` each start an engine group; the group options (`--engine`, `--sim-engine`, `--dp-size`, `--handshake`,
 * `--lockstep` / `--no-lockstep` (`lockstepMode`, issue #14), `--sim-lockstep`, `--sim-arg`) that follow apply to that
 * group, and those given before the first group are defaults for every group. One group (or none: the default simulated
 * group) comes back as the single-group shorthand fields, several as `groups`. Throws `UsageError` on an unknown flag,
 * a stray positional argument, a bad value, a misplaced or repeated group option; returns `null` for `--help`.
 * `--dp-policy NAME` becomes `dpPolicy` (issue #5 part 1; `oracle` and unknown names are UsageErrors); `--load-horizon-ms`,
 * `--balance-abs-threshold` and `--balance-rel-threshold` become `dpPolicyOptions` (issue 12);
 * `--rank-stall-timeout-ms`, `--handshake-timeout-ms`, `--shutdown-grace-ms` and `--max-output-message-bytes` (issue
 * #8) become `rankStallTimeoutMs`, `handshakeTimeoutMs`, `shutdownGraceMs` and `maxMessageBytes.output`.
 * The HTTP-edge flags become `edge` (`parseEdgeArgs`; `MODEL_GATEWAY_API_KEY` is `--api-key` like every other
 * option's variable).
 */
export function parseServeArgs(argv: string[], sources: ServeArgSources = {}): GatewayOptions | null {
  // The options table. Every option here is also MODEL_GATEWAY_<NAME> and a --config key (cli-config.ts).
  const options = {
    config: { type: 'string' },
    version: { type: 'boolean', short: 'V' },
    'served-model-name': { type: 'string', multiple: true },
    'log-format': { type: 'string' },
    port: { type: 'string' },
    host: { type: 'string' },
    'engine-url': { type: 'string', multiple: true },
    sim: { type: 'string', multiple: true },
    worker: { type: 'string', multiple: true },
    'sim-worker': { type: 'string', multiple: true },
    engine: { type: 'string', multiple: true },
    'sim-engine': { type: 'string', multiple: true },
    'dp-size': { type: 'string', multiple: true },
    handshake: { type: 'string', multiple: true },
    lockstep: { type: 'boolean', multiple: true },
    'no-lockstep': { type: 'boolean', multiple: true },
    'sim-lockstep': { type: 'boolean', multiple: true },
    'sim-arg': { type: 'string', multiple: true },
    tokenizer: { type: 'string' },
    model: { type: 'string' },
    'silence-timeout-ms': { type: 'string' },
    'rank-stall-timeout-ms': { type: 'string' },
    'handshake-timeout-ms': { type: 'string' },
    'shutdown-grace-ms': { type: 'string' },
    'max-output-message-bytes': { type: 'string' },
    'body-limit': { type: 'string' },
    'log-level': { type: 'string' },
    'dp-policy': { type: 'string' },
    'tool-call-parser': { type: 'string' },
    'enable-auto-tool-choice': { type: 'boolean' },
    'reasoning-parser': { type: 'string' },
    'responses-store': { type: 'string' },
    'load-horizon-ms': { type: 'string' },
    'balance-abs-threshold': { type: 'string' },
    'balance-rel-threshold': { type: 'string' },
    'api-key': { type: 'string', multiple: true },
    'metrics-require-key': { type: 'boolean' },
    'allowed-origins': { type: 'string' },
    'allowed-methods': { type: 'string' },
    'allowed-headers': { type: 'string' },
    'allow-credentials': { type: 'boolean' },
    'max-concurrent-requests': { type: 'string' },
    'stream-buffer-bytes': { type: 'string' },
    'client-stall-timeout-ms': { type: 'string' },
    'request-timeout-ms': { type: 'string' },
    'tokenizer-queue-jobs': { type: 'string' },
    'tokenizer-queue-chars': { type: 'string' },
    'tokenize-body-limit': { type: 'string' },
    workers: { type: 'string' },
    'exit-with-parent': { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  } as const satisfies Record<string, OptionSpec>;
  let layered;
  let parsed;
  try {
    layered = layerServeArgs(argv, {
      options,
      groupOpeners: GROUP_OPENERS,
      groupOptions: GROUP_OPTIONS,
      flagOnly: FLAG_ONLY,
      spaceSeparated: SPACE_SEPARATED,
      env: sources.env ?? {},
      ...(sources.readFile ? { readFile: sources.readFile } : {}),
    });
    parsed = parseArgs({ args: layered.argv, strict: true, allowPositionals: false, tokens: true, options });
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err));
  }
  try {
    return serveOptionsFrom(parsed);
  } catch (err) {
    if (err instanceof UsageError) throw new UsageError(withOrigin(err.message, layered.origins));
    throw err;
  }
}

/** Where the values of `parseServeArgs` come from besides the arguments (the CLI passes `process.env`). */
export interface ServeArgSources {
  /** `MODEL_GATEWAY_*` variables (default: none). */
  env?: Readonly<Record<string, string | undefined>>;
  /** Reads `--config FILE` (default: the file system). */
  readFile?: (path: string) => string;
}

/** Options that are flags only, never environment variables or config keys. */
const FLAG_ONLY = new Set(['help', 'version', 'config', 'exit-with-parent']);
/** Flags that take several space-separated values, as vLLM's (`--served-model-name a b`). */
const SPACE_SEPARATED = new Set(['served-model-name']);

/** `--port must be ...` → `--port must be ... (from MODEL_GATEWAY_PORT)` when the value did not come from a flag. */
function withOrigin(message: string, origins: ReadonlyMap<string, string>): string {
  const m = /--([a-z][a-z0-9-]*)/.exec(message);
  const origin = m ? origins.get(m[1]!) : undefined;
  return origin !== undefined && !origin.startsWith('--') ? `${message} (from ${origin})` : message;
}

/** The parsed (layered) arguments as `startGateway` options; returns null for --help. */
function serveOptionsFrom(parsed: {
  values: Record<string, string | boolean | (string | boolean)[] | undefined>;
  tokens: ReadonlyArray<{ kind: string; name?: string; value?: string | undefined }>;
}): GatewayOptions | null {
  const v = parsed.values as Record<string, string | undefined> & { help?: boolean; 'served-model-name'?: string[] };
  if (v.help) return null;

  const defaults: GroupFlags = { opener: null, kind: null, simArgs: [] };
  const groups: GroupFlags[] = [];
  for (const token of parsed.tokens) {
    if (token.kind !== 'option') continue;
    const { value } = token;
    const name = token.name!;
    if (GROUP_OPENERS.has(name)) {
      if (name === 'engine-url') {
        groups.push({
          opener: `--engine-url ${value}`,
          kind: 'real',
          engineUrl: checkEngineUrl('--engine-url', value!),
          simArgs: [],
        });
      } else if (name === 'sim') {
        groups.push({ opener: `--sim ${value}`, kind: 'sim', sim: intOption('sim', value, 1), simArgs: [] });
      } else if (name === 'worker') {
        groups.push(parseWorkerSpec(value!));
      } else {
        groups.push(parseSimWorkerSpec(value!));
      }
    } else if (GROUP_OPTIONS.has(name)) {
      applyGroupOption(groups[groups.length - 1] ?? defaults, name, value);
    }
  }

  const port = intOption('port', v.port, 0);
  if (port !== undefined && port > 65535) throw new UsageError(`--port must be at most 65535, got ${port}`);
  const logLevel = v['log-level'];
  if (logLevel !== undefined && !LOG_LEVELS.has(logLevel)) {
    throw new UsageError(`--log-level must be one of ${[...LOG_LEVELS].join(', ')}, got '${logLevel}'`);
  }
  const opts: GatewayOptions = {};
  if (port !== undefined) opts.port = port;
  if (v.host !== undefined) opts.host = v.host;
  if (groups.length <= 1) Object.assign(opts, toGroupOptions(groups[0] ?? defaults, defaults));
  else opts.groups = groups.map((g) => toGroupOptions(g, defaults));
  if (v.tokenizer !== undefined) opts.tokenizerDir = v.tokenizer;
  const served = v['served-model-name'];
  if (served !== undefined && v.model !== undefined)
    throw new UsageError('give --served-model-name or --model, not both');
  if (served !== undefined) {
    if (served.some((n) => n.trim() === '')) throw new UsageError('--served-model-name must not be empty');
    opts.servedModelNames = [...new Set(served)];
  }
  if (v.model !== undefined) opts.modelId = v.model;
  const logFormat = v['log-format'];
  if (logFormat !== undefined) {
    if (!(LOG_FORMATS as readonly string[]).includes(logFormat)) {
      throw new UsageError(`--log-format must be one of ${LOG_FORMATS.join(', ')}, got '${logFormat}'`);
    }
    opts.logFormat = logFormat as LogFormat;
  }
  const silence = intOption('silence-timeout-ms', v['silence-timeout-ms'], 1);
  if (silence !== undefined) opts.silenceTimeoutMs = silence;
  const stall = intOption('rank-stall-timeout-ms', v['rank-stall-timeout-ms'], 1);
  if (stall !== undefined) opts.rankStallTimeoutMs = stall;
  const handshakeTimeout = intOption('handshake-timeout-ms', v['handshake-timeout-ms'], 1);
  if (handshakeTimeout !== undefined) opts.handshakeTimeoutMs = handshakeTimeout;
  const grace = intOption('shutdown-grace-ms', v['shutdown-grace-ms'], 0);
  if (grace !== undefined) opts.shutdownGraceMs = grace;
  const maxOutput = intOption('max-output-message-bytes', v['max-output-message-bytes'], 1);
  if (maxOutput !== undefined) opts.maxMessageBytes = { output: maxOutput };
  const bodyLimit = intOption('body-limit', v['body-limit'], 1);
  if (bodyLimit !== undefined) opts.bodyLimitBytes = bodyLimit;
  if (logLevel !== undefined) opts.logLevel = logLevel;
  if (v['dp-policy'] !== undefined) opts.dpPolicy = parseDpPolicy(v['dp-policy']);
  Object.assign(opts, parseOutputFlags(parsed.values as Parameters<typeof parseOutputFlags>[0]));
  const tuning = parsePolicyTuning(v['load-horizon-ms'], v['balance-abs-threshold'], v['balance-rel-threshold']);
  if (tuning !== null) opts.dpPolicyOptions = tuning;
  const edge = parseEdgeArgs(parsed.values);
  if (edge !== null) opts.edge = edge;
  const workers = v.workers === 'auto' ? autoWorkers() : intOption('workers', v.workers, 1);
  if (workers !== undefined) opts.workers = workers;
  // Group-level consistency (dp-size vs sim count, lockstep without vLLM, shared worker URLs or handshakes).
  try {
    resolveGroups(opts);
  } catch (err) {
    if (err instanceof RangeError) throw new UsageError(err.message);
    throw err;
  }
  return opts;
}

/** The environment variable of `--api-key` (vLLM reads `VLLM_API_KEY` likewise); cli-config.ts maps it generically. */
export const API_KEY_ENV = 'MODEL_GATEWAY_API_KEY';

/** A CORS list flag: a JSON list of strings (vLLM's form, `["https://a.example"]`) or comma-separated values. */
function parseListOption(flag: string, value: string): string[] {
  const text = value.trim();
  let list: unknown;
  if (text.startsWith('[')) {
    try {
      list = JSON.parse(text);
    } catch {
      throw new UsageError(`--${flag} is not a valid JSON list: ${value}`);
    }
    if (!Array.isArray(list) || list.some((x) => typeof x !== 'string'))
      throw new UsageError(`--${flag} must be a list of strings`);
  } else {
    list = text.split(',');
  }
  const out = (list as string[]).map((x) => x.trim()).filter((x) => x !== '');
  if (out.length === 0) throw new UsageError(`--${flag} needs at least one value`);
  return out;
}

/**
 * The HTTP-edge options of the parsed (layered) flags (`--api-key`, the CORS flags, the concurrency cap, stream
 * buffering, the request timeout, the tokenizer queue's bounds), or null when none is set. Throws UsageError for an empty key, a CORS flag without
 * `--allowed-origins`, and bad numbers.
 */
function parseEdgeArgs(v: Record<string, string | boolean | (string | boolean)[] | undefined>): HttpEdgeOptions | null {
  const edge: HttpEdgeOptions = {};
  const keys = v['api-key'] as string[] | undefined;
  if (keys !== undefined) {
    if (keys.some((k) => k === '')) throw new UsageError('--api-key must not be empty');
    edge.apiKeys = keys;
  }
  if (v['metrics-require-key'] === true) edge.metricsRequireKey = true;
  const origins = v['allowed-origins'] as string | undefined;
  if (origins !== undefined) {
    const cors: CorsOptions = { allowedOrigins: parseListOption('allowed-origins', origins) };
    const methods = v['allowed-methods'] as string | undefined;
    if (methods !== undefined)
      cors.allowedMethods = parseListOption('allowed-methods', methods).map((m) => m.toUpperCase());
    const headers = v['allowed-headers'] as string | undefined;
    if (headers !== undefined) cors.allowedHeaders = parseListOption('allowed-headers', headers);
    if (v['allow-credentials'] === true) cors.allowCredentials = true;
    edge.cors = cors;
  } else {
    const stray = ['allowed-methods', 'allowed-headers', 'allow-credentials'].find((f) => v[f] !== undefined);
    if (stray !== undefined) throw new UsageError(`--${stray} needs --allowed-origins (CORS is off without it)`);
  }
  const num = (flag: string, min: number) => intOption(flag, v[flag] as string | undefined, min);
  const max = num('max-concurrent-requests', 0);
  if (max !== undefined) edge.maxConcurrentRequests = max;
  const buffer = num('stream-buffer-bytes', 1);
  if (buffer !== undefined) edge.streamBufferBytes = buffer;
  const stall = num('client-stall-timeout-ms', 1);
  if (stall !== undefined) edge.clientStallTimeoutMs = stall;
  const requestTimeout = num('request-timeout-ms', 1);
  if (requestTimeout !== undefined) edge.requestTimeoutMs = requestTimeout;
  const queueJobs = num('tokenizer-queue-jobs', 1);
  if (queueJobs !== undefined) edge.tokenizerQueueJobs = queueJobs;
  const queueChars = num('tokenizer-queue-chars', 1);
  if (queueChars !== undefined) edge.tokenizerQueueChars = queueChars;
  const tokenizeLimit = num('tokenize-body-limit', 1);
  if (tokenizeLimit !== undefined) edge.tokenizeBodyLimitBytes = tokenizeLimit;
  return Object.keys(edge).length > 0 ? edge : null;
}

/** A signal repeated within this many ms of the first counts as the same one (see `serve`). */
const SIGNAL_REPEAT_MS = 500;

/**
 * `serve`: start (serving at once: `waitForRanks: false`), then on SIGINT/SIGTERM/SIGHUP drain and close; a second
 * signal exits at once. A signal that arrives while the gateway is still starting is held until it started, then
 * acted on (so even a Ctrl-C during startup leaves no socket files behind); with `--workers N` it also ends the wait
 * for the HTTP fronts still starting (one that cannot start must not hold the exit). With `--workers N`, a front that
 * cannot start (cluster.ts `failed`) shuts the gateway down too, with exit code 1. Resolves with the exit code.
 */
async function serve(argv: string[], io: CliIo): Promise<number> {
  if (argv.includes('--version') || argv.includes('-V')) {
    io.stdout(`model-gateway ${packageVersion()}\n`);
    return 0;
  }
  const opts = parseServeArgs(argv, { env: process.env });
  if (opts === null) {
    io.stdout(USAGE);
    return 0;
  }
  ignoreStdioErrors();
  tuneV8ForChatTemplates();
  if (isFrontProcess()) return serveFront(opts);
  let gateway: (Pick<RunningGateway, 'shutdown' | 'emergencyStop'> & { failed?: Promise<Error> }) | null = null;
  let resolveExit: (code: number) => void = () => {};
  const exit = new Promise<number>((r) => (resolveExit = r));
  let signals = 0;
  let firstSignalAt = 0;
  let firstSignal: NodeJS.Signals | null = null;
  const startInterrupted = new AbortController();
  // 1 once the gateway failed on its own: a signal during that shutdown does not make it a clean exit.
  let stopCode = 0;
  const stop = (g: Pick<RunningGateway, 'shutdown'>) =>
    g.shutdown().then(
      () => resolveExit(stopCode),
      (err: unknown) => {
        process.stderr.write(`model-gateway: shutdown failed: ${err instanceof Error ? err.message : String(err)}\n`);
        resolveExit(1);
      },
    );
  const onSignal = (signal: NodeJS.Signals) => {
    // One Ctrl-C under `npm start` arrives twice: from the terminal (the whole foreground process group) and again
    // forwarded by the tsx wrapper. A repeat within SIGNAL_REPEAT_MS is that same keypress, not a second request.
    if (signals > 0 && Date.now() - firstSignalAt < SIGNAL_REPEAT_MS) return;
    signals++;
    if (signals === 1) {
      firstSignalAt = Date.now();
      firstSignal = signal;
    }
    if (signals > 1) {
      // Exit at once, but never leave simulated ranks or socket files behind (synchronous teardown).
      gateway?.emergencyStop();
      process.stderr.write(`model-gateway: second ${signal}, simulated ranks killed, exiting now\n`);
      process.exit(1);
    }
    if (gateway !== null) void stop(gateway);
    else startInterrupted.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  // A closed terminal (or the end of a shell job) sends SIGHUP to the process group: shut down cleanly as for SIGTERM,
  // instead of Node's default of dying at once and leaving the simulated worker's socket files behind.
  process.on('SIGHUP', onSignal);
  // --exit-with-parent: the stdin pipe from the spawning process closes when that process dies, even by SIGKILL.
  // Stop as for a second signal (synchronous teardown); during startup, right after it.
  let parentGone = false;
  const onParentGone = () => {
    parentGone = true;
    if (gateway === null) return;
    gateway.emergencyStop();
    process.stderr.write(
      'model-gateway: stdin closed (--exit-with-parent): the parent is gone; simulated ranks killed, exiting now\n',
    );
    process.exit(1);
  };
  if (argv.includes('--exit-with-parent')) {
    process.stdin.once('end', onParentGone);
    process.stdin.once('error', onParentGone);
    process.stdin.resume();
    // A read stdin keeps the event loop alive: let go of it once the gateway has stopped.
    void exit.then(() => {
      process.stdin.off('end', onParentGone);
      process.stdin.off('error', onParentGone);
      process.stdin.destroy();
    });
  }
  try {
    const workers = opts.workers ?? autoWorkers();
    gateway =
      workers > 1
        ? await startClusterGateway({ ...opts, workers }, workers, { signal: startInterrupted.signal })
        : await startGateway({ ...opts, waitForRanks: false });
  } finally {
    if (gateway === null) {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      process.off('SIGHUP', onSignal);
      resolveExit(1); // the start failed: let go of stdin (--exit-with-parent)
    }
  }
  if (parentGone) onParentGone();
  if (firstSignal !== null) {
    process.stderr.write(`model-gateway: ${firstSignal} during startup: shutting down\n`);
    void stop(gateway);
  }
  const running = gateway;
  void running.failed?.then((err) => {
    process.stderr.write(`model-gateway: ${err.message}: shutting down\n`);
    stopCode = 1;
    void stop(running);
  });
  return exit;
}

/**
 * A front of `--workers N` (this process is a cluster worker forked by the router with the same command line):
 * serve HTTP until the router says close, then leave the cluster; resolves with the exit code.
 */
async function serveFront(opts: GatewayOptions): Promise<number> {
  try {
    return await runFront(opts);
  } finally {
    // The IPC channel to the primary keeps the process alive: leave it, then exit whatever else is still open.
    cluster.worker?.disconnect();
    setTimeout(() => process.exit(), 2000).unref();
  }
}

/** `sim`: run the simulator entry in a child (same node; tsx loader for src/), forwarding signals; resolves with its exit code. */
function sim(argv: string[]): Promise<number> {
  const child = spawn(process.execPath, [...simEntryArgs(), ...argv], {
    stdio: 'inherit',
  });
  const forward = (signal: NodeJS.Signals) => child.kill(signal);
  process.on('SIGINT', forward);
  process.on('SIGTERM', forward);
  return new Promise((resolveExit) => {
    child.on('error', (err) => {
      process.stderr.write(`model-gateway sim: cannot start the simulator: ${err.message}\n`);
      resolveExit(1);
    });
    child.on('exit', (code, signal) => {
      process.off('SIGINT', forward);
      process.off('SIGTERM', forward);
      resolveExit(code ?? (signal ? 1 : 0));
    });
  });
}

/** Where the CLI writes its own messages (help, version, one-line errors); the process's stdout/stderr by default. */
export interface CliIo {
  stdout(text: string): void;
  stderr(text: string): void;
}

const PROCESS_IO: CliIo = {
  stdout: (text) => void process.stdout.write(text),
  stderr: (text) => void process.stderr.write(text),
};

/**
 * Run the CLI with `argv` (without node and script), writing its messages to `io`. Resolves with the process exit
 * code; never throws.
 */
export async function main(argv: string[], io: CliIo = PROCESS_IO): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case 'serve':
        return await serve(rest, io);
      case 'sim':
        return await sim(rest);
      case '--version':
      case '-V':
      case 'version':
        io.stdout(`model-gateway ${packageVersion()}\n`);
        return 0;
      case undefined:
      case '--help':
      case '-h':
      case 'help':
        io.stdout(USAGE);
        return command === undefined ? 2 : 0;
      default:
        throw new UsageError(`unknown command '${command}'`);
    }
  } catch (err) {
    if (err instanceof UsageError || err instanceof ConfigSourceError) {
      const help =
        command === 'serve' || command === 'sim' ? `model-gateway ${command} --help` : 'model-gateway --help';
      io.stderr(`model-gateway: ${err.message} (see '${help}')\n`);
      return 2;
    }
    const line = operatorErrorLine(err);
    if (line !== null) {
      io.stderr(`model-gateway: ${line}\n`);
      return 1;
    }
    io.stderr(`model-gateway: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    return 1;
  }
}

/**
 * The one line printed for an operator mistake found at start-up (no stack trace), or null for an unexpected error
 * (printed with its stack). Operator mistakes: a tokenizer folder or Hugging Face model that cannot be loaded, an
 * HTTP port already in use or not allowed, and option values the gateway refused (RangeError) or the transport
 * refused (socket folder, addresses: errors with a `code` such as ECONFIG, EADDRINUSE, EACCES).
 */
export function operatorErrorLine(err: unknown): string | null {
  if (err instanceof TokenizerLoadError || err instanceof FrontStartError) return err.message;
  if (err instanceof RangeError) return err.message;
  if (!(err instanceof Error)) return null;
  const e = err as Error & { code?: unknown; address?: unknown; port?: unknown; syscall?: unknown };
  if (e.syscall === 'listen' && (e.code === 'EADDRINUSE' || e.code === 'EACCES' || e.code === 'EADDRNOTAVAIL')) {
    const where =
      typeof e.address === 'string' && e.port !== undefined ? `${e.address}:${String(e.port)}` : 'the HTTP address';
    const why =
      e.code === 'EADDRINUSE'
        ? 'the port is already in use (another gateway?); choose one with --port'
        : e.code === 'EACCES'
          ? 'permission denied; choose a port above 1023 with --port'
          : 'the address is not on this machine; check --host';
    return `cannot listen on ${where}: ${why}`;
  }
  if (err instanceof TransportError || err instanceof ConfigError) return err.message;
  return null;
}

function isEntryPoint(): boolean {
  const entry = process.argv[1];
  if (entry === undefined) return false;
  try {
    return import.meta.url === pathToFileURL(realpathSync(entry)).href;
  } catch {
    return false;
  }
}

if (isEntryPoint()) {
  process.exitCode = await main(process.argv.slice(2));
}
