/**
 * Runnable entry of one simulated TokenSpeed or vLLM EngineCore rank (a separate process, like a real rank):
 *
 *   node --import tsx src/sim/main.ts --handshake tcp://127.0.0.1:25152 --engine-index 0 [options]
 *
 * Options (units: tokens, 16-token KV pages, ms): `--engine tokenspeed|vllm` (tokenspeed; the wire, engine-wire.md
 * sections 4 / 5), `--lockstep` with `--dp-size N` (N ≥ 2; vLLM only: a lockstep MoE rank reporting
 * `data_parallel_size` N that parks when drained and needs a START_DP_WAVE, engine-wire.md 5.12), `--ready-response
 * long|short` (long; vLLM only: short = the 3-key ready response of vLLM releases up to at least 9aaf83ef, issue #14),
 * `--output-layout 13|16` (13; vLLM only: the EngineCoreOutput layout, docs/wire/vllm-output.md), `--vllm-version STR`
 * (vLLM only: the ready response's `vllm_version`), `--max-running N` (64), `--kv-pages N` (4096), `--max-model-len N`
 * (32768), `--time-scale X` (1), `--slowdown X` (1; this rank's step-time multiplier, issue #5 part 2), `--seed N` (0), `--stream-interval N` (1), `--step-base-ms X`, `--step-prefill-ms X`,
 * `--step-decode-ms X` (the step-time model), `--disable-output-logprobs`, `--disable-prefix-caching` (the prefix cache
 * of scheduler.ts is on by default), `--scheduling-policy fcfs|priority` (vLLM only; scheduler.ts), `--kv-events-config JSON` (publish KV-cache events as the engine would; kv-events.ts), `--tool-call-format hermes|llama3_json|none`
 * (hermes) and `--reasoning` (how the model answers tools and whether it thinks first; response-plan.ts), `--init-timeout-ms N` (600000),
 * `--abort-lag-rounds N` (0: how many rounds after an ABORT arrives the rank applies it, issue 26), `--exit-with-parent`,
 * `--keep-running` (once registered, outlive the spawning gateway: see below),
 * `--stats-dir DIR` (on SIGUSR2 the rank writes its counters to DIR/rank-<engine index>.json; `writeStatsFile`),
 * `--fault-overrun-tokens N`, `--fault-token-id ID`, `--fault-token-at N`, `--fault-undecodable-output` (faults for
 * tests, faults.ts),
 * `--log-level trace|debug|info|warn|error|fatal|silent` (info). Logs are pino JSON lines on stdout (through a
 * `LogSink`, so a dead reader can never keep the rank alive).
 *
 * With `--keep-running` (issue 26 part 6) a registered rank stays up when stdin closes (its spawning gateway died,
 * even with `--exit-with-parent`, which `spawnSimRanks` always passes): like a real engine it keeps its sockets, which
 * reconnect by themselves once a gateway binds the same endpoints again, and serves again once that gateway adopts it
 * (src/transport/adoption.ts). Meanwhile its output PUSH queues up to its high-water mark and the rank pauses its
 * rounds ("output is backed up", engine.ts) until the new gateway reads again. A rank still waiting for INIT when
 * stdin closes exits as before (nothing recorded it, so nobody could adopt it).
 * On SIGTERM or SIGINT (or, with `--exit-with-parent`, when stdin closes) the rank pushes `ENGINE_CORE_DEAD`
 * (engine-wire.md 1.7), closes its sockets and exits 0, within about `closeGraceMs` even when the gateway stopped
 * reading its outputs (engine.ts).
 * Bad arguments exit 2 with a message on stderr; a failed handshake exits 1.
 */
import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { pino, type Level } from 'pino';
import { runSimEngine, type SimEngineHandle, type SimEngineOptions } from './engine.js';
import { LogSink, ignoreStdioErrors } from '../log-sink.js';
import { LOG_LEVELS } from '../logging.js';
import { DEFAULT_STEP_TIME_MODEL, SCHEDULING_POLICIES, type SchedulingPolicy } from './scheduler.js';
import { SIM_ENGINE_FAMILIES, type SimEngineFamily } from './wire.js';
import { DEFAULT_SIM_BEHAVIOUR, SIM_TOOL_CALL_FORMATS, type SimToolCallFormat } from './response-plan.js';
import { parseKvEventsConfig } from '../protocols/kv-events/config.js';
import { startTracing, tracesUrl, tracingSettings, type TracingSettings } from '../tracing.js';

/** A command-line mistake; the message names the option. */
export class SimArgsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SimArgsError';
  }
}

/** Parsed command line: engine options (without logger/text model) plus the log level. */
export interface SimMainArgs {
  engine: Omit<SimEngineOptions, 'logger' | 'textModel' | 'tracer'>;
  logLevel: Level | 'silent';
  /** `--otlp-traces-endpoint`: trace requests that carry trace headers (request-spans.ts), or null: no tracing. */
  otlpTracesEndpoint: string | null;
  /** Stop when stdin closes (set by `spawnSimRanks`, whose pipe closes when the gateway process dies). */
  exitWithParent: boolean;
  /** `--keep-running`: once registered, do not stop when stdin closes (overrides `exitWithParent` then). */
  keepRunning: boolean;
  /** `--stats-dir`: where SIGUSR2 writes the rank's counters (`writeStatsFile`), or null. */
  statsDir: string | null;
}

/** Usage text of `model-gateway sim` (also printed by `--help`). */
export const SIM_USAGE = `Usage: model-gateway sim --handshake tcp://HOST:PORT [options]

Runs one simulated TokenSpeed or vLLM EngineCore rank that dials the gateway's handshake socket like a real rank.

options (units: tokens, 16-token KV pages, ms):
  --handshake ADDR           Gateway handshake address (required)
  --engine-index N           Engine index / DP rank, 0..65535 (default 0)
  --engine FAMILY            Wire to speak: tokenspeed or vllm (default tokenspeed)
  --lockstep                 vLLM only: a lockstep (MoE) rank that parks when drained and waits for START_DP_WAVE
  --dp-size N                With --lockstep: the group size reported as data_parallel_size (N >= 2, required)
  --ready-response FORM      long (default: all 19 keys) or short (vLLM only: max_model_len, num_gpu_blocks and
                             dp_stats_address, as vLLM releases up to at least May 2026 send it)
  --output-layout N          vLLM only: EngineCoreOutput layout, 13 (default: vLLM 9aaf83ef / 52a31cce) or 16
                             (SMG's decoder: ec_transfer_params at 9)
  --vllm-version STR         vLLM only: vllm_version of the long ready response (default vllm-sim)
  --max-running N            Cap on running requests (default 64)
  --max-loras N              vLLM: LoRA adapters a step may run at once (default 1)
  --kv-pages N               Total KV pages of 16 tokens (default 4096)
  --max-model-len N          Context length reported in the ready response (default 32768)
  --time-scale X             Multiplier on the modelled step time; 0 = as fast as possible (default 1)
  --slowdown X               This rank's step-time multiplier, > 0 (e.g. 2 = a noisy neighbour; default 1)
  --seed N                   Base seed of the text model (default 0)
  --stream-interval N        Server default streaming cadence in tokens (default 1)
  --step-base-ms X           Step-time model: fixed cost per round
  --step-prefill-ms X        Step-time model: cost per prefill token
  --step-decode-ms X         Step-time model: cost per decode token
  --disable-output-logprobs  Act like an engine started without --enable-output-logprobs
  --disable-prefix-caching   No prefix cache: every prompt is prefilled in full, cached_tokens stays 0
  --scheduling-policy fcfs|priority
                             vLLM only: serve waiting requests by their priority (lower first), as vLLM does
  --kv-events-config JSON    Publish KV-cache events as the engine does with this config, e.g.
                             '{"enable_kv_cache_events":true,"endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5567"}'
                             (the endpoints offset by the engine index; the engine's block hashes and layout)
  --tool-call-format FMT     Tool calls written when the prompt declares tools: hermes, llama3_json or none
                             (default hermes, the bundled Qwen3's format)
  --reasoning                Write a <think> block before answers (unless the prompt closed one)
  --init-timeout-ms N        How long to wait for INIT (default 600000)
  --abort-lag-rounds N       Apply each client ABORT N rounds after it arrives, running the request meanwhile
                             (default 0: before the next round; a real engine in long steps lags like this)
  --exit-with-parent         Stop (sending ENGINE_CORE_DEAD) when stdin closes, i.e. when the spawning process dies
  --keep-running             Once registered, keep serving when the spawning gateway dies (overrides
                             --exit-with-parent then): a gateway restarted on the same endpoints adopts the rank
  --stats-dir DIR            On SIGUSR2, write the rank's counters to DIR/rank-<engine index>.json (for benchmarks)
  --fault-overrun-tokens N   Fault (tests): run every request N tokens past its max_new_tokens / max_tokens
  --fault-token-id ID        Fault (tests): send token id ID (any integer ≥ 0, e.g. one outside the vocabulary)
                             as the --fault-token-at-th token of every request
  --fault-token-at N         Which token --fault-token-id replaces, 1-based (default 1)
  --fault-undecodable-output Fault (tests): push bytes no wire decodes instead of every output message
  --otlp-traces-endpoint URL Trace every request that carries trace_headers (vLLM's flag; OTEL_* variables honoured)
  --log-level LEVEL          trace, debug, info, warn, error, fatal, silent (default info)
  --help                     Show this help
`;

function numberOption(
  name: string,
  raw: string | undefined,
  opts: { integer?: boolean; min?: number; max?: number } = {},
): number | undefined {
  if (raw === undefined) return undefined;
  const v = Number(raw);
  const { integer = false, min = -Infinity, max = Infinity } = opts;
  if (raw.trim() === '' || !Number.isFinite(v) || (integer && !Number.isSafeInteger(v)) || v < min || v > max) {
    const range = `${min === -Infinity ? '' : `≥ ${min}`}${max === Infinity ? '' : ` ≤ ${max}`}`;
    throw new SimArgsError(
      `--${name}: expected ${integer ? 'an integer' : 'a number'} ${range}, got ${JSON.stringify(raw)}`,
    );
  }
  return v;
}

/** A finite number > 0, or undefined when absent. Throws `SimArgsError` naming the option. */
function positiveOption(name: string, raw: string | undefined): number | undefined {
  const v = numberOption(name, raw, { min: 0 });
  if (v === 0) throw new SimArgsError(`--${name}: expected a number > 0, got ${JSON.stringify(raw)}`);
  return v;
}

/**
 * Parse the rank's command line (without `node` and the script path). Throws `SimArgsError` naming the bad option,
 * including unknown options and a missing `--handshake`.
 */
export function parseSimArgs(argv: readonly string[]): SimMainArgs {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        handshake: { type: 'string' },
        'engine-index': { type: 'string' },
        engine: { type: 'string' },
        lockstep: { type: 'boolean' },
        'dp-size': { type: 'string' },
        'ready-response': { type: 'string' },
        'output-layout': { type: 'string' },
        'vllm-version': { type: 'string' },
        'max-running': { type: 'string' },
        'max-loras': { type: 'string' },
        'kv-pages': { type: 'string' },
        'max-model-len': { type: 'string' },
        'time-scale': { type: 'string' },
        slowdown: { type: 'string' },
        seed: { type: 'string' },
        'stream-interval': { type: 'string' },
        'step-base-ms': { type: 'string' },
        'step-prefill-ms': { type: 'string' },
        'step-decode-ms': { type: 'string' },
        'disable-output-logprobs': { type: 'boolean' },
        'disable-prefix-caching': { type: 'boolean' },
        'scheduling-policy': { type: 'string' },
        'kv-events-config': { type: 'string' },
        'init-timeout-ms': { type: 'string' },
        'abort-lag-rounds': { type: 'string' },
        'log-level': { type: 'string' },
        'exit-with-parent': { type: 'boolean' },
        'keep-running': { type: 'boolean' },
        'stats-dir': { type: 'string' },
        'fault-overrun-tokens': { type: 'string' },
        'fault-token-id': { type: 'string' },
        'fault-token-at': { type: 'string' },
        'fault-undecodable-output': { type: 'boolean' },
        'tool-call-format': { type: 'string' },
        reasoning: { type: 'boolean' },
        'otlp-traces-endpoint': { type: 'string' },
      },
    }));
  } catch (error) {
    throw new SimArgsError(error instanceof Error ? error.message : String(error));
  }
  const str = (k: string): string | undefined => values[k] as string | undefined;
  const handshake = str('handshake');
  if (handshake === undefined) throw new SimArgsError('--handshake tcp://host:port is required');
  if (!/^tcp:\/\/.+:\d+$/.test(handshake))
    throw new SimArgsError(`--handshake: expected tcp://host:port, got ${JSON.stringify(handshake)}`);
  const logLevel = str('log-level') ?? 'info';
  if (!(LOG_LEVELS as readonly string[]).includes(logLevel)) {
    throw new SimArgsError(`--log-level: expected one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(logLevel)}`);
  }
  const engineFamily = str('engine') ?? 'tokenspeed';
  if (!(SIM_ENGINE_FAMILIES as readonly string[]).includes(engineFamily)) {
    throw new SimArgsError(
      `--engine: expected one of ${SIM_ENGINE_FAMILIES.join(', ')}, got ${JSON.stringify(engineFamily)}`,
    );
  }
  const lockstep = values.lockstep === true;
  const dpSize = numberOption('dp-size', str('dp-size'), { integer: true, min: 2, max: 0x10000 });
  if (lockstep && engineFamily !== 'vllm') {
    throw new SimArgsError(
      '--lockstep needs --engine vllm: the TokenSpeed wire has no wave messages (engine-wire.md 5.12)',
    );
  }
  if (lockstep && dpSize === undefined) throw new SimArgsError('--lockstep needs --dp-size N (the group size, N ≥ 2)');
  if (!lockstep && dpSize !== undefined) {
    throw new SimArgsError('--dp-size is only meaningful with --lockstep: dense ranks report data_parallel_size 1');
  }
  const readyResponse = str('ready-response');
  if (readyResponse !== undefined && readyResponse !== 'long' && readyResponse !== 'short') {
    throw new SimArgsError(`--ready-response: expected long or short, got ${JSON.stringify(readyResponse)}`);
  }
  if (readyResponse === 'short' && engineFamily !== 'vllm') {
    throw new SimArgsError(
      '--ready-response short needs --engine vllm: TokenSpeed always sends the 19-key ready response',
    );
  }
  const outputLayout = str('output-layout');
  if (outputLayout !== undefined && outputLayout !== '13' && outputLayout !== '16') {
    throw new SimArgsError(`--output-layout: expected 13 or 16, got ${JSON.stringify(outputLayout)}`);
  }
  const vllmVersion = str('vllm-version');
  if ((outputLayout !== undefined || vllmVersion !== undefined) && engineFamily !== 'vllm') {
    throw new SimArgsError(
      '--output-layout and --vllm-version need --engine vllm: they describe the vLLM EngineCore wire',
    );
  }
  const base = numberOption('step-base-ms', str('step-base-ms'), { min: 0 });
  const prefill = numberOption('step-prefill-ms', str('step-prefill-ms'), { min: 0 });
  const decode = numberOption('step-decode-ms', str('step-decode-ms'), { min: 0 });
  const engine: Omit<SimEngineOptions, 'logger' | 'textModel' | 'tracer'> = {
    handshakeAddress: handshake,
    engineIndex: numberOption('engine-index', str('engine-index'), { integer: true, min: 0, max: 0xffff }) ?? 0,
    maxRunning: numberOption('max-running', str('max-running'), { integer: true, min: 1 }),
    maxLoras: numberOption('max-loras', str('max-loras'), { integer: true, min: 1 }),
    kvTotalPages: numberOption('kv-pages', str('kv-pages'), { integer: true, min: 1 }),
    maxModelLen: numberOption('max-model-len', str('max-model-len'), { integer: true, min: 3 }),
    timeScale: numberOption('time-scale', str('time-scale'), { min: 0 }),
    seed: numberOption('seed', str('seed'), { integer: true }),
    streamInterval: numberOption('stream-interval', str('stream-interval'), { integer: true, min: 1 }),
    initTimeoutMs: numberOption('init-timeout-ms', str('init-timeout-ms'), { integer: true, min: 1 }),
    enableOutputLogprobs: values['disable-output-logprobs'] === true ? false : undefined,
  };
  if (engineFamily !== 'tokenspeed') engine.engine = engineFamily as SimEngineFamily;
  if (values['disable-prefix-caching'] === true) engine.prefixCaching = false;
  const policy = str('scheduling-policy');
  if (policy !== undefined) {
    if (!(SCHEDULING_POLICIES as readonly string[]).includes(policy)) {
      throw new SimArgsError(
        `--scheduling-policy: expected one of ${SCHEDULING_POLICIES.join(', ')}, got ${JSON.stringify(policy)}`,
      );
    }
    if (engineFamily !== 'vllm' && policy !== 'fcfs') {
      throw new SimArgsError('--scheduling-policy priority: only a vLLM rank has request priorities');
    }
    engine.schedulingPolicy = policy as SchedulingPolicy;
  }
  const kvEvents = str('kv-events-config');
  if (kvEvents !== undefined) {
    try {
      engine.kvEvents = parseKvEventsConfig(kvEvents);
    } catch (err) {
      throw new SimArgsError(`--kv-events-config: ${(err as Error).message}`);
    }
    if (engine.kvEvents.enabled && engine.prefixCaching === false) {
      throw new SimArgsError('--kv-events-config needs the prefix cache: it announces what the cache holds');
    }
  }
  const toolFormat = str('tool-call-format');
  if (toolFormat !== undefined && !(SIM_TOOL_CALL_FORMATS as readonly string[]).includes(toolFormat)) {
    throw new SimArgsError(
      `--tool-call-format: expected one of ${SIM_TOOL_CALL_FORMATS.join(', ')}, got ${JSON.stringify(toolFormat)}`,
    );
  }
  if (toolFormat !== undefined || values.reasoning === true) {
    engine.behaviour = {
      toolCallFormat: (toolFormat as SimToolCallFormat | undefined) ?? DEFAULT_SIM_BEHAVIOUR.toolCallFormat,
      reasoning: values.reasoning === true,
    };
  }
  const slowdown = positiveOption('slowdown', str('slowdown'));
  if (slowdown !== undefined) engine.slowdown = slowdown;
  const abortLagRounds = numberOption('abort-lag-rounds', str('abort-lag-rounds'), { integer: true, min: 0 });
  if (abortLagRounds !== undefined) engine.abortLagRounds = abortLagRounds;
  if (lockstep) {
    engine.lockstep = true;
    engine.dataParallelSize = dpSize;
  }
  if (readyResponse !== undefined) engine.readyResponse = readyResponse;
  if (outputLayout !== undefined) engine.outputLayout = outputLayout === '13' ? 13 : 16;
  if (vllmVersion !== undefined) engine.vllmVersion = vllmVersion;
  if (base !== undefined || prefill !== undefined || decode !== undefined) {
    engine.stepTimeModel = {
      baseMs: base ?? DEFAULT_STEP_TIME_MODEL.baseMs,
      perPrefillTokenMs: prefill ?? DEFAULT_STEP_TIME_MODEL.perPrefillTokenMs,
      perDecodeTokenMs: decode ?? DEFAULT_STEP_TIME_MODEL.perDecodeTokenMs,
    };
  }
  const overrunTokens = numberOption('fault-overrun-tokens', str('fault-overrun-tokens'), { integer: true, min: 0 });
  const badTokenId = numberOption('fault-token-id', str('fault-token-id'), { integer: true, min: 0, max: 2 ** 32 - 1 });
  const badTokenAt = numberOption('fault-token-at', str('fault-token-at'), { integer: true, min: 1 });
  if (badTokenAt !== undefined && badTokenId === undefined)
    throw new SimArgsError('--fault-token-at needs --fault-token-id');
  const undecodableOutput = values['fault-undecodable-output'] === true;
  if (overrunTokens !== undefined || badTokenId !== undefined || undecodableOutput) {
    engine.faults = {
      ...(overrunTokens !== undefined ? { overrunTokens } : {}),
      ...(badTokenId !== undefined ? { badTokenId, badTokenAt: badTokenAt ?? 1 } : {}),
      ...(undecodableOutput ? { undecodableOutput } : {}),
    };
  }
  const statsDir = str('stats-dir') ?? null;
  if (statsDir === '') throw new SimArgsError('--stats-dir: expected a directory, got ""');
  const otlpTracesEndpoint = str('otlp-traces-endpoint') ?? null;
  if (otlpTracesEndpoint !== null) {
    try {
      tracesUrl(otlpTracesEndpoint, true);
    } catch (error) {
      throw new SimArgsError(`--otlp-traces-endpoint: ${(error as Error).message}`);
    }
  }
  return {
    engine,
    logLevel: logLevel as Level | 'silent',
    exitWithParent: values['exit-with-parent'] === true,
    keepRunning: values['keep-running'] === true,
    statsDir,
    otlpTracesEndpoint,
  };
}

/** The file `--stats-dir DIR` gets for the rank with engine index `engineIndex`. */
export function statsFilePath(dir: string, engineIndex: number): string {
  return join(dir, `rank-${engineIndex}.json`);
}

/**
 * Write `{ engineIndex, pid, ...stats }` (the counters of `SimEngineStats`) as JSON to `statsFilePath(dir, index)`,
 * through a temporary file and a rename, so a reader never sees half a file. Throws the fs errors.
 */
export function writeStatsFile(dir: string, handle: SimEngineHandle): void {
  const path = statsFilePath(dir, handle.engineIndex);
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify({ engineIndex: handle.engineIndex, pid: process.pid, ...handle.stats() }));
  renameSync(tmp, path);
}

/**
 * How long a stopping rank waits for its last log lines to reach the reader, in ms. A dead reader costs nothing (EPIPE
 * drops the lines at once); a live one on a loaded machine can take over 300 ms to read the pipe, and the rank's
 * closing counters ("sim rank stopped") were lost that way. Below `STOP_DEADLINE_MS` and the spawner's stop grace.
 */
const LOG_DRAIN_MS = 2000;
/**
 * Hard bound on a stop, in ms after it began: if the rank has not finished closing by then (it should take at most
 * about `closeGraceMs`), it exits anyway with code 1. The timer is unref'd, so it never keeps the process alive.
 */
const STOP_DEADLINE_MS = 5000;

/**
 * Run one rank until SIGTERM/SIGINT (or until its input socket fails, or stdin closes with `--exit-with-parent`),
 * then return the exit code: 0 after a clean stop, 1 when the rank could not start, 2 on bad arguments.
 *
 * Shutdown never depends on logging: logs go through a `LogSink` (no exit hook; EPIPE drops them), stdout/stderr
 * write errors are ignored, the engine is closed before anything is logged about it, and once a stop began a
 * watchdog exits the process (code 1) after `STOP_DEADLINE_MS` whatever happens. With `--exit-with-parent` a stdin that
 * closes before the handshake finished exits the process at once (code 1). Meant to run as the process's entry:
 * the watchdog and the early exit call `process.exit`.
 */
export async function simMain(argv: readonly string[]): Promise<number> {
  ignoreStdioErrors();
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(SIM_USAGE);
    return 0;
  }
  let args: SimMainArgs;
  try {
    args = parseSimArgs(argv);
  } catch (error) {
    process.stderr.write(`sim rank: ${error instanceof Error ? error.message : String(error)}\n`);
    return 2;
  }
  const sink = new LogSink({ fd: 1 });
  const logger = pino({ level: args.logLevel, base: { pid: process.pid, engineIndex: args.engine.engineIndex } }, sink);
  let handle: SimEngineHandle | null = null;
  let stopping = false;
  /** Begin the stop: close first, then log (a log line must never delay or prevent the stop). */
  const stop = (why: string, fields: Record<string, unknown>, level: 'debug' | 'info' | 'warn'): void => {
    if (stopping) return;
    stopping = true;
    // Nothing to announce or flush before the handshake finished: leave at once.
    if (handle === null) process.exit(1);
    setTimeout(() => process.exit(1), STOP_DEADLINE_MS).unref();
    void handle.close();
    try {
      logger[level](fields, why);
    } catch {
      // logging is best effort
    }
  };
  const onParentGone = (): void => {
    if (args.keepRunning && handle !== null) {
      try {
        logger.warn(
          {},
          'stdin closed: the spawning gateway is gone; sim rank keeps running (--keep-running) for a gateway restarted on the same endpoints to adopt',
        );
      } catch {
        // logging is best effort
      }
      return;
    }
    stop('stdin closed: the spawning process is gone; sim rank stopping', {}, 'warn');
  };
  if (args.exitWithParent) {
    // Watched from the start, so a gateway that dies during the handshake does not leave this rank waiting for INIT.
    process.stdin.once('end', onParentGone);
    process.stdin.once('error', onParentGone);
    process.stdin.resume();
  }
  const statsDir = args.statsDir;
  const onStatsSignal = (): void => {
    // Before the handshake finished there is nothing to count yet: the signal is ignored (not fatal).
    if (statsDir === null || handle === null) return;
    try {
      writeStatsFile(statsDir, handle);
    } catch (error) {
      logger.warn(
        { err: error instanceof Error ? error.message : String(error), statsDir },
        'sim rank could not write its stats file',
      );
    }
  };
  // Without --stats-dir SIGUSR2 keeps node's default (it ends the process), as before.
  if (statsDir !== null) process.on('SIGUSR2', onStatsSignal);
  let traceSettings: TracingSettings | null = null;
  try {
    traceSettings = args.otlpTracesEndpoint === null ? null : tracingSettings(args.otlpTracesEndpoint, process.env);
  } catch (error) {
    // A bad OTEL_* variable: one line, as for a bad flag (the OTEL_* values are the rank's configuration too).
    process.stderr.write(`sim rank: ${(error as Error).message}\n`);
    return 2;
  }
  const tracing =
    traceSettings === null ? null : await startTracing(traceSettings, 'engine', 'model-gateway-sim', logger);
  try {
    handle = await runSimEngine({ ...args.engine, logger, tracer: tracing?.tracer ?? null });
  } catch (error) {
    logger.fatal({ err: error instanceof Error ? error.message : String(error) }, 'sim rank could not start');
    await tracing?.shutdown();
    await sink.drain(LOG_DRAIN_MS);
    return 1;
  }
  const h = handle;
  // Debug: "sim rank stopped" (with its counters) follows at info.
  const onSignal = (signal: NodeJS.Signals): void => stop('sim rank stopping', { signal }, 'debug');
  process.once('SIGTERM', onSignal);
  process.once('SIGINT', onSignal);
  await h.closed;
  process.removeListener('SIGTERM', onSignal);
  process.removeListener('SIGINT', onSignal);
  process.removeListener('SIGUSR2', onStatsSignal);
  if (args.exitWithParent) process.stdin.pause();
  await tracing?.shutdown(); // the spans of the last requests
  await sink.drain(LOG_DRAIN_MS);
  return 0;
}

const isEntry = process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href;
if (isEntry) {
  const code = await simMain(process.argv.slice(2));
  // zeromq keeps its context alive a little after close; the rank is done, so leave now.
  process.exit(code);
}
