/**
 * Every option of `model-gateway serve`, declared once (issue 28 part 1). From this table come:
 * - the parseArgs table and the layering sets of cli-config.ts (`PARSE_ARGS_OPTIONS`, `FLAG_ONLY`, ...);
 * - the environment variable and config key of each option (cli-config.ts derives them from the name);
 * - the help text (`optionHelp`, the option part of cli.ts `USAGE`);
 * - the mapping of a parsed value into `GatewayOptions` (`applyServeOption`) and its inverse, the flags that give a
 *   `GatewayOptions` back (`serveArgsOf`, which the `--workers` test harness uses);
 * - the option tables of docs/configuration.md (`renderOptionTables`; a test fails when the page is stale).
 * Engine-group options (`--engine-url`, `--sim`, `--engine`, ...) are declared here for help, docs and layering; their
 * positional syntax (each applies to the group opened before it) is parsed by cli.ts.
 */
import { parseLoraModule } from './engine-client/lora-adapters.js';
import type { LoraModule } from './engine-client/lora-adapters.js';
import { DEFAULT_RANK_STALL_TIMEOUT_MS, DEFAULT_SILENCE_TIMEOUT_MS } from './engine-client/client.js';
import {
  DEFAULT_BALANCE_REL_THRESHOLD,
  REFERENCE_MAX_NUM_SEQS,
  SGLANG_BALANCE_ABS_THRESHOLD,
} from './engine-client/cache-aware.js';
import { DEFAULT_DP_POLICY, DP_POLICY_NAMES, type DpPolicyName } from './engine-client/policies.js';
import { DEFAULT_LOAD_HORIZON_MS } from './engine-client/policy.js';
import { FLOW_CONTROL_DEFAULTS } from './engine-client/flow-control.js';
import { autoWorkers, MAX_AUTO_WORKERS } from './fronts/router/cluster.js';
import { DEFAULT_HOST, DEFAULT_PORT, DEFAULT_SIM_RANKS } from './gateway/index.js';
import { LOG_FORMATS } from './gateway-logger.js';
import { LOG_LEVELS } from './logging.js';
import { DEFAULT_SHUTDOWN_GRACE_MS } from './lifecycle.js';
import { DEFAULT_MAX_CONCURRENT_REQUESTS } from './server/concurrency.js';
import { DEFAULT_REQUEST_TIMEOUT_MS, DEFAULT_TOKENIZE_BODY_LIMIT_BYTES } from './server/edge-options.js';
import { REASONING_PARSER_NAMES, TOOL_CALL_PARSER_NAMES } from './server/parsers/index.js';
import { DEFAULT_RESPONSES_STORE_SIZE } from './server/responses/store.js';
import { DEFAULT_CLIENT_STALL_TIMEOUT_MS, DEFAULT_STREAM_BUFFER_BYTES } from './server/sse.js';
import { tracesUrl } from './tracing.js';
import { MAX_TIMER_MS } from './option-checks.js';
import { DEFAULT_OFF_LOOP_LIMITS } from './tokenizer/off-loop.js';
import { DEFAULT_HANDSHAKE_RECEIVE_TIMEOUT_MS, DEFAULT_MAX_MESSAGE_BYTES } from './transport/zmq-link.js';

/** A command-line mistake: printed on one line with a hint to --help, exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/** The help and docs sections, in the order `--help` prints them. */
export const SECTIONS = {
  groups: {
    help: 'engine groups (one ipc:// socket set, one handshake and N DP ranks each; with several, each request goes to the live group whose least-loaded rank scores lowest):',
    doc: 'Engine groups',
  },
  group: {
    help: 'options of a group (after its --engine-url/--sim/--worker/--sim-worker; before the first group they are defaults for every group):',
    doc: 'Options of a group',
  },
  http: { help: 'HTTP and model:', doc: 'HTTP and model' },
  processes: { help: 'processes and logs:', doc: 'Processes and logs' },
  routing: { help: 'routing (docs/routing.md):', doc: 'Routing' },
  liveness: { help: 'engine liveness:', doc: 'Engine liveness' },
  edge: { help: 'HTTP edge and limits (docs/security.md):', doc: 'HTTP edge and limits' },
} as const;
export type SectionName = keyof typeof SECTIONS;

/**
 * How an option's value is read and written back: `parse` turns the flag's string (or true for a boolean, or the
 * list of a repeatable option) into the `GatewayOptions` value, throwing `UsageError` naming the flag; `format` gives
 * the flag values back (the inverse; absent when the harness never passes the option).
 */
interface Codec<T> {
  parse(flag: string, raw: string | boolean | string[]): T;
  format?(value: T): string[];
}

/** Where and how the option lands in `GatewayOptions`: a path of keys and a codec. */
interface Field<T = unknown> {
  path: readonly string[];
  codec: Codec<T>;
}

/** One `serve` option. */
export interface ServeOption {
  /** The flag without `--`; also the config key; `MODEL_GATEWAY_<NAME>` unless `flagOnly`. */
  name: string;
  type: 'string' | 'boolean';
  multiple?: boolean;
  short?: string;
  /** What the value looks like in help and docs (`N`, `ADDR`, `DIR|HF_ID`); none for a boolean. */
  value?: string;
  section: SectionName;
  /** What it does, one plain sentence or two (help and docs). */
  help: string;
  /** The docs' wording when it differs from `help` (Markdown: links, code spans). */
  doc?: string;
  /** The default, as a reader wants it (`30000`, `bundled Qwen3`); printed as "(default …)" in help. */
  default?: string;
  /** Not an environment variable or config key (`--help`, `--config`, ...). */
  flagOnly?: boolean;
  /** Takes several space-separated values after one flag, as vLLM's `--served-model-name a b`. */
  spaceSeparated?: boolean;
  /** `opener` starts an engine group; `option` applies to the group before it (cli.ts parses both). */
  group?: 'opener' | 'option';
  /** Where the value goes; none for group options, flag-only options and checks that only validate. */
  field?: Field;
}

const str = (raw: string | boolean | string[]): string => (Array.isArray(raw) ? raw[raw.length - 1]! : String(raw));

/** An integer ≥ `min` (and ≤ `max`). */
function int(min: number, max = Number.MAX_SAFE_INTEGER): Codec<number> {
  return {
    parse(flag, raw) {
      const value = str(raw);
      if (!/^\d+$/.test(value) || Number(value) < min || !Number.isSafeInteger(Number(value)))
        throw new UsageError(`--${flag} must be an integer ≥ ${min}, got '${value}'`);
      if (Number(value) > max) throw new UsageError(`--${flag} must be at most ${max}, got ${value}`);
      return Number(value);
    },
    format: (v) => [String(v)],
  };
}

/**
 * An integer ≥ `min` given as `value` to `--name` (also a group spec's part, e.g. `worker DP size`).
 * @throws UsageError naming the flag.
 */
export function parseIntOption(name: string, value: string, min: number): number {
  return int(min).parse(name, value);
}

/** A finite number ≥ `min`. */
function num(min: number): Codec<number> {
  return {
    parse(flag, raw) {
      const value = str(raw);
      const n = Number(value);
      if (value.trim() === '' || !Number.isFinite(n) || n < min)
        throw new UsageError(`--${flag} must be a number ≥ ${min}, got '${value}'`);
      return n;
    },
    format: (v) => [String(v)],
  };
}

/** One of `names` (`hint`, when given, replaces the list in the message). */
function oneOf<T extends string>(names: readonly T[], hint?: string): Codec<T> {
  return {
    parse(flag, raw) {
      const value = str(raw);
      if (!(names as readonly string[]).includes(value))
        throw new UsageError(`--${flag} must be one of ${hint ?? names.join(', ')}, got '${value}'`);
      return value as T;
    },
    format: (v) => [v],
  };
}

const text: Codec<string> = { parse: (_flag, raw) => str(raw), format: (v) => [v] };
const flag: Codec<true> = { parse: () => true, format: () => [] };
/** An OTLP/HTTP endpoint: an http(s) URL (src/tracing.ts `tracesUrl`); kept as given. */
const otlpEndpoint: Codec<string> = {
  parse(name, raw) {
    const value = str(raw);
    try {
      tracesUrl(value, true);
    } catch (err) {
      throw new UsageError(`--${name}: ${(err as Error).message}`);
    }
    return value;
  },
  format: (v) => [v],
};

/** A CORS list: a JSON list of strings (vLLM's form, `["https://a.example"]`) or comma-separated values. */
function list(map: (s: string) => string = (s) => s): Codec<string[]> {
  return {
    parse(name, raw) {
      const value = str(raw);
      const t = value.trim();
      let items: unknown;
      if (t.startsWith('[')) {
        try {
          items = JSON.parse(t);
        } catch {
          throw new UsageError(`--${name} is not a valid JSON list: ${value}`);
        }
        if (!Array.isArray(items) || items.some((x) => typeof x !== 'string'))
          throw new UsageError(`--${name} must be a list of strings`);
      } else {
        items = t.split(',');
      }
      const out = (items as string[]).map((x) => map(x.trim())).filter((x) => x !== '');
      if (out.length === 0) throw new UsageError(`--${name} needs at least one value`);
      return out;
    },
    format: (v) => [JSON.stringify(v)],
  };
}

/** The `--dp-policy` names the CLI accepts: every policy but `oracle`, which needs the benchmark's simulator state. */
export const CLI_DP_POLICIES: readonly DpPolicyName[] = DP_POLICY_NAMES.filter((n) => n !== 'oracle');

const dpPolicy: Codec<DpPolicyName> = {
  parse(name, raw) {
    const value = str(raw);
    if (value === 'oracle')
      throw new UsageError(
        `--dp-policy oracle is benchmark only (it needs the simulator's true state); use one of ${CLI_DP_POLICIES.join(', ')}`,
      );
    return oneOf(CLI_DP_POLICIES).parse(name, value);
  },
  format: (v) => [v],
};

const field = <T>(path: readonly string[], codec: Codec<T>): Field => ({ path, codec: codec as Codec<unknown> });

/**
 * The table, in `--help` order within each section. `parseArgs` types: a value option is `'string'`, a switch
 * `'boolean'`.
 */
export const SERVE_OPTIONS: readonly ServeOption[] = [
  // Engine groups.
  {
    name: 'engine-url',
    type: 'string',
    multiple: true,
    value: 'URL',
    section: 'groups',
    group: 'opener',
    help: 'Start a group of running engines at worker URL ipc://PATH',
  },
  {
    name: 'sim',
    type: 'string',
    multiple: true,
    value: 'N',
    section: 'groups',
    group: 'opener',
    help: `Start a group of N simulated ranks (without any group: one group of ${DEFAULT_SIM_RANKS})`,
  },
  {
    name: 'worker',
    type: 'string',
    multiple: true,
    value: 'ENGINE:URL[:N]',
    section: 'groups',
    group: 'opener',
    help: 'Compact group of running engines, e.g. vllm:ipc:///tmp/e/w0:2 (N = --dp-size)',
  },
  {
    name: 'sim-worker',
    type: 'string',
    multiple: true,
    value: 'ENGINE:N[:lockstep]',
    section: 'groups',
    group: 'opener',
    help: 'Compact simulated group, e.g. vllm:2:lockstep',
  },
  {
    name: 'engine',
    type: 'string',
    multiple: true,
    value: 'ENGINE',
    section: 'group',
    group: 'option',
    help: "Wire dialect of the group's ranks: tokenspeed or vllm",
    default: 'tokenspeed',
  },
  {
    name: 'dp-size',
    type: 'string',
    multiple: true,
    value: 'N',
    section: 'group',
    group: 'option',
    help: 'Number of DP ranks that must join',
    default: '1 for --engine-url, N for --sim',
  },
  {
    name: 'handshake',
    type: 'string',
    multiple: true,
    value: 'ADDR',
    section: 'group',
    group: 'option',
    help: 'Explicit handshake address tcp://HOST:PORT',
    default: 'derived from the ipc path',
  },
  {
    name: 'lockstep',
    type: 'boolean',
    multiple: true,
    section: 'group',
    group: 'option',
    help: 'Treat the group as lockstep (MoE): wake every rank after every request',
    default: 'decided from data_parallel_size in the ready responses, else from the first wave notification',
  },
  {
    name: 'no-lockstep',
    type: 'boolean',
    multiple: true,
    section: 'group',
    group: 'option',
    help: 'Treat the group as dense: never wake it, ignore wave notifications',
  },
  {
    name: 'sim-engine',
    type: 'string',
    multiple: true,
    value: 'ENGINE',
    section: 'group',
    group: 'option',
    help: 'Same as --engine, for simulated groups (as a default it applies to simulated groups only)',
  },
  {
    name: 'sim-lockstep',
    type: 'boolean',
    multiple: true,
    section: 'group',
    group: 'option',
    help: 'Simulated vLLM ranks step in lockstep (MoE: data_parallel_size > 1, parked when drained)',
  },
  {
    name: 'kv-events-config',
    type: 'string',
    multiple: true,
    value: 'JSON',
    section: 'group',
    group: 'option',
    help: "The group's --kv-events-config (as its engines got it): cache_aware routes on the ranks' KV-cache events",
    default: 'none, unless a ready response carries it',
  },
  {
    name: 'tasks',
    type: 'string',
    multiple: true,
    value: 'LIST',
    section: 'group',
    group: 'option',
    help: "What the group's engines serve, comma-separated: generate, embed (vLLM pooling; an engine started with --runner pooling serves embed only)",
    default: 'generate,embed for simulated vLLM ranks, else generate',
  },
  {
    name: 'group-name',
    type: 'string',
    multiple: true,
    value: 'NAME',
    section: 'group',
    group: 'option',
    help: "The group's name: its group label in /metrics, its title in /health and on the dashboard (letters, digits, . _ -)",
    default: 'the engine family and its index among groups of that family, e.g. vllm-0',
  },
  {
    name: 'sim-arg',
    type: 'string',
    multiple: true,
    value: 'ARG',
    section: 'group',
    group: 'option',
    help: 'Extra argument for every simulated rank of the group (repeatable; use --sim-arg=--flag)',
  },
  // HTTP and model.
  {
    name: 'port',
    type: 'string',
    value: 'N',
    section: 'http',
    help: 'HTTP port; 0 = any free port',
    default: String(DEFAULT_PORT),
    field: field(['port'], int(0, 65535)),
  },
  {
    name: 'host',
    type: 'string',
    value: 'ADDR',
    section: 'http',
    help: 'HTTP bind address',
    default: DEFAULT_HOST,
    field: field(['host'], text),
  },
  {
    name: 'api-key',
    type: 'string',
    multiple: true,
    value: 'KEY',
    section: 'http',
    help: 'Require Authorization: Bearer KEY on /v1/*, /tokenize, /detokenize; repeatable, any of the keys (docs/security.md)',
    doc: 'Require `Authorization: Bearer KEY` on `/v1/*`, `/tokenize`, `/detokenize`. Repeatable ([security.md](security.md)).',
    default: 'the MODEL_GATEWAY_API_KEY environment variable, else no key',
    field: field(['edge', 'apiKeys'], {
      parse(name, raw) {
        const keys = Array.isArray(raw) ? raw : [str(raw)];
        if (keys.some((k) => k === '')) throw new UsageError(`--${name} must not be empty`);
        return keys;
      },
      format: (keys: string[]) => keys,
    }),
  },
  {
    name: 'api-keys-file',
    type: 'string',
    value: 'PATH',
    section: 'http',
    help: 'A JSON file of tenants, each with its keys and priority bands; its keys are accepted too; SIGHUP reads it again (docs/security.md)',
    doc: 'A JSON file of tenants, each with its keys and priority bands; its keys are accepted too. SIGHUP reads it again ([security.md](security.md#tenants-and-the-keys-file)).',
    field: field(['edge', 'apiKeysFile'], text),
  },
  {
    name: 'tokenizer',
    type: 'string',
    value: 'DIR|HF_ID',
    section: 'http',
    help: 'Model folder (tokenizer.json, tokenizer_config.json, optionally config.json / generation_config.json for vLLM EOS ids), or a Hugging Face id such as Qwen/Qwen3-8B found in the local Hugging Face cache (HF_HUB_CACHE, HF_HOME), never downloaded',
    doc: 'Model folder, or a Hugging Face id found in the local cache ([below](#model-name-and-tokenizer)).',
    default: 'bundled Qwen3',
    field: field(['tokenizerDir'], text),
  },
  {
    name: 'served-model-name',
    type: 'string',
    multiple: true,
    spaceSeparated: true,
    value: 'NAME [NAME...]',
    section: 'http',
    help: 'Names a request\'s "model" may use; the first is the one reported',
    default: "the Hugging Face id, else the tokenizer folder's name, else qwen3",
    field: field(['servedModelNames'], {
      parse(name, raw) {
        const names = Array.isArray(raw) ? raw : [str(raw)];
        if (names.some((n) => n.trim() === '')) throw new UsageError(`--${name} must not be empty`);
        return [...new Set(names)];
      },
      format: (names: string[]) => names,
    }),
  },
  {
    name: 'model',
    type: 'string',
    value: 'NAME',
    section: 'http',
    help: 'Same as one --served-model-name',
    field: field(['modelId'], text),
  },
  {
    name: 'config',
    type: 'string',
    value: 'FILE',
    section: 'http',
    flagOnly: true,
    help: "YAML or JSON file of serve options, engine groups under 'groups:' (env MODEL_GATEWAY_CONFIG)",
    doc: 'YAML or JSON file of serve options, engine groups under `groups:` ([below](#config-file)). Also `MODEL_GATEWAY_CONFIG`.',
  },
  {
    name: 'trust-request-chat-template',
    type: 'boolean',
    section: 'http',
    help: "Render a chat request's own chat_template (vLLM's flag; without it such a request gets a 400)",
    field: field(['trustRequestChatTemplate'], flag),
  },
  {
    name: 'tool-call-parser',
    type: 'string',
    value: 'NAME',
    section: 'http',
    help: `Parse tool calls out of generated text: ${TOOL_CALL_PARSER_NAMES.join(', ')}, or none. A parser enables tool_choice "auto"`,
    doc: `${TOOL_CALL_PARSER_NAMES.map((n) => `\`${n}\``).join(', ')} or \`none\` ([http-api.md](http-api.md#tool-calls-reasoning-and-structured-outputs)).`,
    default: 'read off the chat template when unambiguous: <tool_call> → hermes, <|python_tag|> → llama3_json',
    field: field(
      ['toolCallParser'],
      oneOf([...TOOL_CALL_PARSER_NAMES, 'none'], `${TOOL_CALL_PARSER_NAMES.join(', ')} or none`),
    ),
  },
  {
    name: 'enable-auto-tool-choice',
    type: 'boolean',
    section: 'http',
    help: 'Accepted for vLLM command lines: "auto" is on whenever a tool-call parser is active (a usage error with --tool-call-parser none)',
  },
  {
    name: 'reasoning-parser',
    type: 'string',
    value: 'NAME',
    section: 'http',
    help: `Move <think>…</think> into reasoning_content: ${REASONING_PARSER_NAMES.join(', ')}`,
    default: 'none',
    field: field(['reasoningParser'], oneOf(REASONING_PARSER_NAMES)),
  },
  {
    name: 'responses-store',
    type: 'string',
    value: 'N',
    section: 'http',
    help: 'Responses kept in memory for previous_response_id / item_reference / GET /v1/responses/{id}; 0 = store nothing',
    default: String(DEFAULT_RESPONSES_STORE_SIZE),
    field: field(['responsesStoreSize'], int(0)),
  },
  // Processes and logs.
  {
    name: 'workers',
    type: 'string',
    value: 'N|auto',
    section: 'processes',
    help: 'HTTP front processes sharing the port, with one router process owning the engines and the routing state; 1 = one process; see docs/operations.md "Several cores"',
    doc: 'HTTP front processes plus one router ([operations.md](operations.md#several-cores---workers)).',
    default: `auto: cores − 1, at most ${MAX_AUTO_WORKERS}, and 1 on a machine of 2 cores or fewer`,
    field: field(['workers'], {
      parse: (name, raw) => (str(raw) === 'auto' ? autoWorkers() : int(1).parse(name, raw)),
      format: (v: number) => [String(v)],
    }),
  },
  {
    name: 'otlp-traces-endpoint',
    type: 'string',
    value: 'URL',
    section: 'processes',
    help: "Export OpenTelemetry traces to this OTLP/HTTP endpoint (vLLM's flag; OTEL_* variables honoured)",
    doc: 'An OTLP/HTTP URL; a URL without a path gets `/v1/traces` ([observability.md](observability.md#tracing)).',
    default: 'off, unless OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT is set',
    field: field(['otlpTracesEndpoint'], otlpEndpoint),
  },
  {
    name: 'log-level',
    type: 'string',
    value: 'LEVEL',
    section: 'processes',
    help: `pino level: ${LOG_LEVELS.join(', ')}`,
    default: 'info',
    field: field(['logLevel'], oneOf(LOG_LEVELS)),
  },
  {
    name: 'log-format',
    type: 'string',
    value: 'FORMAT',
    section: 'processes',
    help: 'pretty or json',
    doc: '`pretty` or `json` ([observability.md](observability.md#logs)).',
    default: 'pretty on a terminal, json otherwise',
    field: field(['logFormat'], oneOf(LOG_FORMATS)),
  },
  {
    name: 'shutdown-grace-ms',
    type: 'string',
    value: 'N',
    section: 'processes',
    help: 'On SIGTERM/SIGINT, let live requests run up to N ms before ending them; a second signal exits at once',
    default: String(DEFAULT_SHUTDOWN_GRACE_MS),
    field: field(['shutdownGraceMs'], int(0)),
  },
  {
    name: 'exit-with-parent',
    type: 'boolean',
    section: 'processes',
    flagOnly: true,
    help: 'Stop at once (simulated ranks killed, socket files removed) when stdin closes, i.e. when the process that spawned the gateway is gone (test harnesses, supervisors without process groups); a flag only',
    default: 'off',
  },
  // Routing.
  {
    name: 'dp-policy',
    type: 'string',
    value: 'NAME',
    section: 'routing',
    help: `DP rank selection for unpinned requests: ${CLI_DP_POLICIES.join(', ')}; oracle is benchmark only`,
    doc: `DP rank selection for unpinned requests: ${CLI_DP_POLICIES.map((n) => `\`${n}\``).join(', ')} ([routing.md](routing.md#policies)).`,
    default: DEFAULT_DP_POLICY,
    field: field(['dpPolicy'], dpPolicy),
  },
  {
    name: 'load-horizon-ms',
    type: 'string',
    value: 'N',
    section: 'routing',
    help: "A rank's stored load report counts less as it ages and not at all after N ms",
    default: String(DEFAULT_LOAD_HORIZON_MS),
    field: field(['dpPolicyOptions', 'loadHorizonMs'], int(1)),
  },
  {
    name: 'balance-abs-threshold',
    type: 'string',
    value: 'N',
    section: 'routing',
    help: "cache_aware: a rank whose load exceeds the idlest's by more than N requests (and by more than --balance-rel-threshold times) never wins by prefix affinity (SGLang's rule, per rank)",
    default: `max_num_seqs × ${SGLANG_BALANCE_ABS_THRESHOLD}/${REFERENCE_MAX_NUM_SEQS}, or ${SGLANG_BALANCE_ABS_THRESHOLD} when the engine reports none`,
    field: field(['dpPolicyOptions', 'balanceAbsThreshold'], num(0)),
  },
  {
    name: 'balance-rel-threshold',
    type: 'string',
    value: 'X',
    section: 'routing',
    help: "cache_aware: with --balance-abs-threshold, how many times the idlest rank's load makes a rank hot",
    default: String(DEFAULT_BALANCE_REL_THRESHOLD),
    field: field(['dpPolicyOptions', 'balanceRelThreshold'], num(1)),
  },
  {
    name: 'flow-control',
    type: 'boolean',
    section: 'routing',
    help: 'While every rank is saturated, new requests wait in the gateway (by priority band, fairly between tenants) instead of in the engines; 429 + Retry-After past --queue-timeout-ms',
    doc: 'While every rank is saturated, new requests wait in the gateway (by priority band, fairly between tenants) instead of in the engines ([routing.md](routing.md#flow-control)).',
    field: field(['flowControl', 'enabled'], flag),
  },
  {
    name: 'max-in-flight-per-rank',
    type: 'string',
    value: 'N',
    section: 'routing',
    help: 'Flow control: a rank holding N requests is saturated',
    default: "the rank's max_num_seqs",
    field: field(['flowControl', 'maxInFlightPerRank'], int(1)),
  },
  {
    name: 'lora-modules',
    type: 'string',
    multiple: true,
    value: 'NAME=PATH',
    section: 'routing',
    help: 'A LoRA adapter every vLLM group serves under NAME (repeatable; vLLM\'s flag: NAME=PATH or {"name", "path", "base_model_name"} JSON)',
    field: field(['loraModules'], {
      parse(name, raw) {
        const items = Array.isArray(raw) ? raw : [str(raw)];
        return items.map((item) => {
          try {
            return parseLoraModule(item);
          } catch (err) {
            throw new UsageError(`--${name}: ${(err as Error).message}`);
          }
        });
      },
      format: (modules: LoraModule[]) =>
        modules.map((m) => JSON.stringify({ name: m.name, path: m.path, base_model_name: m.baseModelName ?? null })),
    }),
  },
  {
    name: 'max-loras',
    type: 'string',
    value: 'N',
    section: 'routing',
    help: 'LoRA adapters a vLLM rank holds at once (its --max-loras): lora_aware routes on it, simulated ranks get it',
    default: '1',
    field: field(['maxLoras'], int(1)),
  },
  {
    name: 'allow-runtime-lora-updating',
    type: 'boolean',
    section: 'routing',
    help: 'Serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM: VLLM_ALLOW_RUNTIME_LORA_UPDATING)',
    field: field(['allowRuntimeLoraUpdating'], flag),
  },
  {
    name: 'max-queued',
    type: 'string',
    value: 'N',
    section: 'routing',
    help: 'Flow control: requests that may wait per engine group; past it, 429 (a more urgent request sheds a less urgent one)',
    default: String(FLOW_CONTROL_DEFAULTS.maxQueued),
    field: field(['flowControl', 'maxQueued'], int(1)),
  },
  {
    name: 'max-queued-per-tenant',
    type: 'string',
    value: 'N',
    section: 'routing',
    help: 'Flow control: requests one tenant may have waiting per engine group; past it, 429',
    default: String(FLOW_CONTROL_DEFAULTS.maxQueuedPerTenant),
    field: field(['flowControl', 'maxQueuedPerTenant'], int(1)),
  },
  {
    name: 'queue-timeout-ms',
    type: 'string',
    value: 'N',
    section: 'routing',
    help: 'Flow control: a request waiting this long gets 429 + Retry-After',
    default: String(FLOW_CONTROL_DEFAULTS.queueTimeoutMs),
    field: field(['flowControl', 'queueTimeoutMs'], int(1, MAX_TIMER_MS)),
  },
  // Engine liveness.
  {
    name: 'silence-timeout-ms',
    type: 'string',
    value: 'N',
    section: 'liveness',
    help: 'A rank that holds requests and sends nothing for N ms is dead',
    default: String(DEFAULT_SILENCE_TIMEOUT_MS),
    field: field(['silenceTimeoutMs'], int(1)),
  },
  {
    name: 'rank-stall-timeout-ms',
    type: 'string',
    value: 'N',
    section: 'liveness',
    help: 'A rank that holds requests and sends nothing for N ms is stalled: out of rotation, its requests end with an error, back when it speaks again',
    doc: 'A rank that holds requests and sends nothing for N ms is stalled ([operations.md](operations.md#stalled-ranks)).',
    default: String(DEFAULT_RANK_STALL_TIMEOUT_MS),
    field: field(['rankStallTimeoutMs'], int(1)),
  },
  {
    name: 'handshake-timeout-ms',
    type: 'string',
    value: 'N',
    section: 'liveness',
    help: "Bound on each stage of a rank's handshake (INIT → READY, → registration); model loading happens in between",
    default: String(DEFAULT_HANDSHAKE_RECEIVE_TIMEOUT_MS),
    field: field(['handshakeTimeoutMs'], int(1)),
  },
  {
    name: 'max-output-message-bytes',
    type: 'string',
    value: 'N',
    section: 'liveness',
    help: "Largest engine output frame accepted; a bigger one drops that engine's connection",
    default: String(DEFAULT_MAX_MESSAGE_BYTES.output),
    field: field(['maxMessageBytes', 'output'], int(1)),
  },
  // HTTP edge and limits.
  {
    name: 'metrics-require-key',
    type: 'boolean',
    section: 'edge',
    help: '/metrics needs the key too',
    default: 'open',
    field: field(['edge', 'metricsRequireKey'], flag),
  },
  {
    name: 'allowed-origins',
    type: 'string',
    value: 'LIST',
    section: 'edge',
    help: 'CORS: allowed origins, a JSON list or comma-separated; * = any',
    default: 'no CORS',
    field: field(['edge', 'cors', 'allowedOrigins'], list()),
  },
  {
    name: 'allowed-methods',
    type: 'string',
    value: 'LIST',
    section: 'edge',
    help: 'CORS: allowed methods; needs --allowed-origins',
    default: '*',
    field: field(
      ['edge', 'cors', 'allowedMethods'],
      list((m) => m.toUpperCase()),
    ),
  },
  {
    name: 'allowed-headers',
    type: 'string',
    value: 'LIST',
    section: 'edge',
    help: 'CORS: allowed request headers; needs --allowed-origins',
    default: '*',
    field: field(['edge', 'cors', 'allowedHeaders'], list()),
  },
  {
    name: 'allow-credentials',
    type: 'boolean',
    section: 'edge',
    help: 'CORS: allow credentials; needs --allowed-origins',
    default: 'off',
    field: field(['edge', 'cors', 'allowCredentials'], flag),
  },
  {
    name: 'max-concurrent-requests',
    type: 'string',
    value: 'N',
    section: 'edge',
    help: 'Generation requests served at once before 429 + Retry-After; 0 = no cap',
    default: String(DEFAULT_MAX_CONCURRENT_REQUESTS),
    field: field(['edge', 'maxConcurrentRequests'], int(0)),
  },
  {
    name: 'body-limit',
    type: 'string',
    value: 'BYTES',
    section: 'edge',
    help: 'Maximum HTTP request body size',
    default: '8 MiB',
    field: field(['bodyLimitBytes'], int(1)),
  },
  {
    name: 'tokenize-body-limit',
    type: 'string',
    value: 'BYTES',
    section: 'edge',
    help: 'Largest /tokenize and /detokenize body, at most --body-limit; a larger one gets 413',
    default: String(DEFAULT_TOKENIZE_BODY_LIMIT_BYTES),
    field: field(['edge', 'tokenizeBodyLimitBytes'], int(1)),
  },
  {
    name: 'stream-buffer-bytes',
    type: 'string',
    value: 'BYTES',
    section: 'edge',
    help: 'Bytes buffered per stream for a client that does not read',
    default: String(DEFAULT_STREAM_BUFFER_BYTES),
    field: field(['edge', 'streamBufferBytes'], int(1)),
  },
  {
    name: 'client-stall-timeout-ms',
    type: 'string',
    value: 'N',
    section: 'edge',
    help: 'A streaming client that stays behind (that buffer full, outputs held) for N ms has its engine request aborted and its connection closed',
    default: String(DEFAULT_CLIENT_STALL_TIMEOUT_MS),
    field: field(['edge', 'clientStallTimeoutMs'], int(1)),
  },
  {
    name: 'request-timeout-ms',
    type: 'string',
    value: 'N',
    section: 'edge',
    help: 'A request (headers and body) not received within N ms gets 408',
    default: String(DEFAULT_REQUEST_TIMEOUT_MS),
    field: field(['edge', 'requestTimeoutMs'], int(1)),
  },
  {
    name: 'tokenizer-queue-jobs',
    type: 'string',
    value: 'N',
    section: 'edge',
    help: 'Large prompts, /tokenize, /detokenize and long chats are tokenized on a worker thread per process; past N jobs queued there a request gets 429 + Retry-After',
    default: String(DEFAULT_OFF_LOOP_LIMITS.maxJobs),
    field: field(['edge', 'tokenizerQueueJobs'], int(1)),
  },
  {
    name: 'tokenizer-queue-chars',
    type: 'string',
    value: 'N',
    section: 'edge',
    help: 'Past N characters queued for the tokenizer worker thread a request gets 429 + Retry-After',
    default: String(DEFAULT_OFF_LOOP_LIMITS.maxChars),
    field: field(['edge', 'tokenizerQueueChars'], int(1)),
  },
  // Flags without a section line of their own in help (listed at the top of USAGE).
  { name: 'help', type: 'boolean', short: 'h', section: 'processes', flagOnly: true, help: 'Show this help' },
  { name: 'version', type: 'boolean', short: 'V', section: 'processes', flagOnly: true, help: 'Print the version' },
];

/** The table by name. */
export const SERVE_OPTION: ReadonlyMap<string, ServeOption> = new Map(SERVE_OPTIONS.map((o) => [o.name, o]));

/** Options listed on their own lines at the top of USAGE, not in a section. */
const TOP_LEVEL = new Set(['help', 'version']);

/** The parseArgs options table of `serve`. */
export const PARSE_ARGS_OPTIONS: Readonly<
  Record<string, { type: 'string' | 'boolean'; multiple?: boolean; short?: string }>
> = Object.fromEntries(
  SERVE_OPTIONS.map((o) => [
    o.name,
    {
      type: o.type,
      ...(o.multiple === true ? { multiple: true } : {}),
      ...(o.short !== undefined ? { short: o.short } : {}),
    },
  ]),
);

const names = (pick: (o: ServeOption) => boolean): ReadonlySet<string> =>
  new Set(SERVE_OPTIONS.filter(pick).map((o) => o.name));
/** Options that are flags only, never environment variables or config keys. */
export const FLAG_ONLY = names((o) => o.flagOnly === true);
/** Flags that take several space-separated values, as vLLM's (`--served-model-name a b`). */
export const SPACE_SEPARATED = names((o) => o.spaceSeparated === true);
/** The options that open an engine group. */
export const GROUP_OPENERS = names((o) => o.group === 'opener');
/** The options that apply to the group before them. */
export const GROUP_OPTIONS = names((o) => o.group === 'option');

/** Sets `value` at `path` in `target`, creating the objects on the way. */
function setPath(target: Record<string, unknown>, path: readonly string[], value: unknown): void {
  let at = target;
  for (const key of path.slice(0, -1)) at = (at[key] ??= {}) as Record<string, unknown>;
  at[path[path.length - 1]!] = value;
}

function getPath(source: unknown, path: readonly string[]): unknown {
  let at = source;
  for (const key of path) {
    if (typeof at !== 'object' || at === null) return undefined;
    at = (at as Record<string, unknown>)[key];
  }
  return at;
}

/**
 * Parses the (layered) parseArgs value of option `name` and writes it at its field's path in `target` (a
 * `GatewayOptions` being built). Nothing for an option without a field or an absent value.
 * @throws UsageError naming the flag when the value is bad.
 */
export function applyServeOption(
  target: Record<string, unknown>,
  name: string,
  raw: string | boolean | Array<string | boolean> | undefined,
): void {
  const f = SERVE_OPTION.get(name)?.field;
  if (f === undefined || raw === undefined || raw === false) return;
  setPath(target, f.path, f.codec.parse(name, raw as string | boolean | string[]));
}

/**
 * The `serve` flags that give `opts`' fields back (the inverse of `applyServeOption`), for the options whose field
 * holds a value, in table order; `skip` names top-level `GatewayOptions` keys the caller passes itself. Throws an
 * Error naming any key of `opts` (or of its nested option objects) that no option writes, so a test harness never
 * drops an option silently.
 */
export function serveArgsOf(opts: object, skip: ReadonlySet<string> = new Set()): string[] {
  const out: string[] = [];
  const covered = new Set<string>();
  for (const o of SERVE_OPTIONS) {
    if (o.field === undefined || skip.has(o.field.path[0]!)) continue;
    for (let i = 1; i <= o.field.path.length; i++) covered.add(o.field.path.slice(0, i).join('.'));
    const value = getPath(opts, o.field.path);
    if (value === undefined) continue;
    const format = o.field.codec.format;
    if (format === undefined) throw new Error(`option --${o.name} cannot be written back as a flag`);
    // `--name=value`: a value that starts with '-' is never taken for a flag; a list repeats the flag.
    if (o.type === 'boolean') {
      if (value === true) out.push(`--${o.name}`);
    } else for (const v of format(value)) out.push(`--${o.name}=${v}`);
  }
  const branches = new Set<string>();
  for (const o of SERVE_OPTIONS)
    for (let i = 1; o.field !== undefined && i < o.field.path.length; i++)
      branches.add(o.field.path.slice(0, i).join('.'));
  const walk = (v: object, prefix: string): void => {
    for (const [k, x] of Object.entries(v)) {
      const key = prefix === '' ? k : `${prefix}.${k}`;
      if (x === undefined || (prefix === '' && skip.has(k))) continue;
      if (!covered.has(key)) throw new Error(`option '${key}' has no serve flag`);
      if (branches.has(key) && typeof x === 'object' && x !== null) walk(x as object, key);
    }
  };
  walk(opts, '');
  return out;
}

/** The column where help descriptions start, and the width help lines fit. */
const HELP_COLUMN = 27;
const HELP_WIDTH = 100;

/** `text` wrapped to `width` columns, each line after the first indented by `indent` spaces. */
function wrap(textIn: string, first: string, indent: number, width = HELP_WIDTH): string[] {
  const lines: string[] = [];
  let line = first;
  for (const word of textIn.split(' ')) {
    const sep = line.length === 0 || line.endsWith(' ') ? '' : ' ';
    if (line.trim().length > 0 && line.length + sep.length + word.length > width) {
      lines.push(line.trimEnd());
      line = ' '.repeat(indent) + word;
    } else line += sep + word;
  }
  lines.push(line.trimEnd());
  return lines;
}

/** One option's help lines: the flag, then its description from column 27 (on the next line when the flag is long). */
function helpLines(o: ServeOption): string[] {
  const flagText = `  --${o.name}${o.value !== undefined ? ` ${o.value}` : ''}`;
  const description = o.default !== undefined ? `${o.help} (default ${o.default})` : o.help;
  if (flagText.length <= HELP_COLUMN - 2) return wrap(description, flagText.padEnd(HELP_COLUMN), HELP_COLUMN);
  return [flagText, ...wrap(description, ' '.repeat(HELP_COLUMN), HELP_COLUMN)];
}

/** The option part of `serve --help`: every section's heading, then its options, in table order. */
export function optionHelp(): string {
  const out: string[] = [];
  for (const [name, section] of Object.entries(SECTIONS)) {
    const options = SERVE_OPTIONS.filter((o) => o.section === name && !TOP_LEVEL.has(o.name));
    if (options.length === 0) continue;
    if (name !== 'group' && out.length > 0) out.push('');
    const indent = name === 'group' ? 1 : 0;
    out.push(...wrap(section.help, ' '.repeat(indent), indent));
    for (const o of options) out.push(...helpLines(o));
  }
  return out.join('\n') + '\n';
}

/** Markdown table cell text: pipes escaped. */
const cell = (s: string): string => s.replaceAll('|', '\\|');

/**
 * The option tables of docs/configuration.md, one per section, generated from the table (the page holds them between
 * `<!-- options:begin -->` and `<!-- options:end -->`; test/cli/options-table.test.ts compares).
 */
export function renderOptionTables(): string {
  const out: string[] = [];
  for (const [name, section] of Object.entries(SECTIONS)) {
    const options = SERVE_OPTIONS.filter((o) => o.section === name && !TOP_LEVEL.has(o.name));
    if (options.length === 0) continue;
    out.push(`### ${section.doc}`, '');
    out.push('| Option | Default | What it does |', '| --- | --- | --- |');
    for (const o of options) {
      const flagText = `\`--${o.name}${o.value !== undefined ? ` ${o.value}` : ''}\``;
      out.push(`| ${cell(flagText)} | ${cell(o.default ?? '')} | ${cell(o.doc ?? `${o.help}.`)} |`);
    }
    out.push('');
  }
  return out.join('\n');
}
