/**
 * The `model-gateway` command line (node:util parseArgs):
 * - `model-gateway serve [options]`: start the gateway (src/gateway/start.ts `startGateway`) over one or more engine groups
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
import {
  ENGINE_FAMILIES,
  resolveGroups,
  startGateway,
  parseTasks,
  type EngineFamily,
  type EngineTask,
  type GatewayOptions,
  type GroupOptions,
  type RunningGateway,
} from './gateway/index.js';
import { ConfigSourceError, layerServeArgs } from './cli-config.js';
import { FrontStartError, autoWorkers, startClusterGateway } from './fronts/router/cluster.js';
import { isFrontProcess } from './fronts/channel/control.js';
import { runFront } from './fronts/front/front-process.js';
import { packageVersion } from './server/app.js';
import { ignoreStdioErrors } from './log-sink.js';
import {
  FLAG_ONLY,
  GROUP_OPENERS,
  GROUP_OPTIONS,
  PARSE_ARGS_OPTIONS,
  SERVE_OPTIONS,
  SPACE_SEPARATED,
  UsageError,
  applyServeOption,
  optionHelp,
  parseIntOption,
} from './serve-options.js';
import { simEntryArgs } from './sim/spawn.js';
import { parseKvEventsConfig } from './protocols/kv-events/config.js';
import { tuneV8ForChatTemplates } from './tokenizer/chat-template.js';
import { TokenizerLoadError } from './tokenizer/errors.js';
import { ConfigError, TransportError } from './transport/errors.js';

export { CLI_DP_POLICIES, UsageError } from './serve-options.js';

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

${optionHelp()}`;

/** An integer ≥ `min` from a group spec or a group option (`--dp-size`, `--sim`, `--worker ...:N`). */
function intOption(name: string, value: string | undefined, min: number): number | undefined {
  return value === undefined ? undefined : parseIntOption(name, value, min);
}

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
  kvEventsConfig?: string;
  tasks?: EngineTask[];
  name?: string;
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
    case 'tasks':
      try {
        once('tasks', parseTasks(value!));
      } catch (err) {
        throw new UsageError(`--tasks: ${(err as Error).message}`);
      }
      return;
    case 'group-name':
      once('name', value);
      return;
    case 'kv-events-config':
      try {
        parseKvEventsConfig(value!);
      } catch (err) {
        throw new UsageError(`--kv-events-config: ${(err as Error).message}`);
      }
      once('kvEventsConfig', value);
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
  const tasks = g.tasks ?? defaults.tasks;
  if (tasks !== undefined) out.tasks = tasks;
  // A name is a group's own: given before the first group it names the one group there is (more are refused).
  const name = g.name ?? defaults.name;
  if (name !== undefined) out.name = name;
  const kvEventsConfig = g.kvEventsConfig ?? defaults.kvEventsConfig;
  if (kvEventsConfig !== undefined) out.kvEventsConfig = kvEventsConfig;
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
  // The table (serve-options.ts): every option not flag-only is also MODEL_GATEWAY_<NAME> and a --config key.
  const options = PARSE_ARGS_OPTIONS;
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

  if (v['served-model-name'] !== undefined && v.model !== undefined)
    throw new UsageError('give --served-model-name or --model, not both');
  if (parsed.values['enable-auto-tool-choice'] === true && v['tool-call-parser'] === 'none')
    throw new UsageError('--enable-auto-tool-choice needs a tool-call parser (--tool-call-parser none disables it)');
  if (v['allowed-origins'] === undefined) {
    const stray = ['allowed-methods', 'allowed-headers', 'allow-credentials'].find(
      (f) => parsed.values[f] !== undefined,
    );
    if (stray !== undefined) throw new UsageError(`--${stray} needs --allowed-origins (CORS is off without it)`);
  }
  if (defaults.name !== undefined && groups.length > 1)
    throw new UsageError('--group-name before the first group names the only group; give it after each group instead');
  const opts: GatewayOptions = {};
  if (groups.length <= 1) Object.assign(opts, toGroupOptions(groups[0] ?? defaults, defaults));
  else opts.groups = groups.map((g) => toGroupOptions(g, defaults));
  for (const o of SERVE_OPTIONS) applyServeOption(opts as Record<string, unknown>, o.name, parsed.values[o.name]);
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

/** A signal repeated within this many ms of the first counts as the same one (see `serve`). */
const SIGNAL_REPEAT_MS = 500;

/**
 * `serve`: start (serving at once: `waitForRanks: false`), then on SIGINT/SIGTERM/SIGHUP drain and close (with
 * `--api-keys-file`, SIGHUP reads the keys file again instead); a second
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
  let gateway:
    | (Pick<RunningGateway, 'shutdown' | 'emergencyStop' | 'reloadKeys'> & { failed?: Promise<Error> })
    | null = null;
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
  // instead of Node's default of dying at once and leaving the simulated worker's socket files behind. With a keys
  // file, SIGHUP means what it means to most daemons instead: read the configuration (the keys file) again.
  const keysFile = opts.edge?.apiKeysFile !== undefined;
  const onHangup = keysFile ? () => gateway?.reloadKeys() : onSignal;
  process.on('SIGHUP', onHangup);
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
      process.off('SIGHUP', onHangup);
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
