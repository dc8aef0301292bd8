/**
 * One simulated DP rank on the real wire, TokenSpeed or vLLM EngineCore (`engine`): it dials the gateway exactly like
 * a real rank (engine-wire.md 1.2; handshake 2.1 through `EngineDialer`, ready response 2.5 with the family's
 * granularity key), decodes ADD and ABORT messages through the family's wire (`SimWire`: `tokenspeed-wire.ts`,
 * section 4; `vllm-wire.ts`, section 5), runs the continuous-batching scheduler model (`scheduler.ts`, with the
 * family's finish rules) on a timer, and pushes each step's message as the family encodes it (TokenSpeed: one
 * `BatchTokenIDOutSlim` per step with rows; vLLM: one `EngineCoreOutputs` per step, with `scheduler_stats` always).
 * On `close()` it pushes `ENGINE_CORE_DEAD` (1.7) and closes its sockets.
 *
 * Lockstep (`lockstep`, vLLM only; engine-wire.md 5.7, 5.12; dp-routing.md 13): the ready response reports
 * `data_parallel_size` > 1; the rank starts parked at wave 0, holds every request it receives while parked (no step,
 * no tokens) until a START_DP_WAVE naming a wave ≥ its current wave arrives, reports `wave_complete = w` when it
 * drains and parks (then moves to wave w + 1), and reports `start_wave = w` when a request for an already-drained
 * wave reaches it while parked (`waves.ts`). Dense ranks (the default) never park and never send wave fields; a
 * START_DP_WAVE reaching a dense vLLM rank is ignored.
 *
 * Output backpressure (a sim choice, not a spec fact): a zeromq PUSH send waits once the high-water mark is reached
 * (the gateway is not reading its PULL), so an engine with a blocking output send stalls; likewise this loop stops
 * starting rounds while `OUTPUT_BACKLOG_PAUSE` messages wait to be pushed, and resumes when they drain. `close()` is
 * bounded: it gives pending pushes `closeGraceMs` to complete, then drops them and skips `ENGINE_CORE_DEAD`, which
 * could only queue behind them (1.7: the sentinel is sent non-blocking and best effort).
 *
 * Timing: a round is planned, its admission rejections (if any) are pushed at once, then after
 * `stepTimeMs × timeScale` ms the round commits and its message is pushed; the next round starts right after. With
 * nothing to do (or parked) the loop idles (no timer) until a message arrives. Back-to-back rounds keep the engine's
 * own clock: the next round is due `stepTimeMs × timeScale` after the previous one was **due**, not after its timer
 * actually fired, so a host that is late running timers (a loaded machine) does not slow the simulated engine down;
 * it catches up on lateness of up to `CATCH_UP_LIMIT_MS` (a GPU keeps stepping while the host is busy). A vLLM step with nothing to schedule
 * but aborted ids to report is sent at once (no forward pass).
 *
 * Malformed messages (undecodable ADD, ABORT or START_DP_WAVE, an unusable request id, a type byte the family does
 * not serve, a duplicate request id) are logged and dropped with no reply (TokenSpeed 4.1 "Silent drop"; for vLLM a
 * sim choice).
 */
import { SimLoraRegistry } from './utility.js';
import { performance } from 'node:perf_hooks';
import { DEFAULT_READY_RESPONSE } from '../protocols/handshake.js';
import type { EngineCoreOutputLayout } from '../protocols/vllm/output.js';
import { RequestType, type ReadyResponse, type RequestTypeByte } from '../protocols/types.js';
import { GatewayTokenizer } from '../tokenizer/tokenizer.js';
import { EngineDialer } from '../transport/engine-dialer.js';
import type { WireInt } from '../wire/reader.js';
import { silentLogger, type MinimalLogger } from '../logging.js';
import {
  DEFAULT_STEP_TIME_MODEL,
  KV_PAGE_TOKENS,
  SimScheduler,
  type LoadTail,
  type SchedulerState,
  type SimRow,
  type StepTimeModel,
  type SchedulingPolicy,
} from './scheduler.js';
import { UNDECODABLE_OUTPUT, withFaults, type SimFaults } from './faults.js';
import { TextModel, seedToUint32 } from './text.js';
import type { SimModelBehaviour } from './response-plan.js';
import { createTokenSpeedSimWire } from './tokenspeed-wire.js';
import { createVllmSimWire } from './vllm-wire.js';
import { LockstepWaves } from './waves.js';
import { SimKvPublisher } from './kv-events.js';
import { SimRequestSpans } from './request-spans.js';
import type { Tracer } from '@opentelemetry/api';
import { kvEventsConfigObject, type KvEventsConfig } from '../protocols/kv-events/config.js';
import { SIM_ENGINE_FAMILIES, type SimEngineFamily, type SimStep, type SimWire, type SimWireContext } from './wire.js';

export type { SimEngineFamily } from './wire.js';

/** Options of `runSimEngine`. Units: tokens, pages of 16 tokens, ms. */
export interface SimEngineOptions {
  /** This rank's engine index (0..65535): its ZMQ identity and `engine_index` (engine-wire.md 1.5, 4.8, 5.8). */
  engineIndex: number;
  /** The gateway's handshake address, `tcp://host:port`. */
  handshakeAddress: string;
  /** The wire this rank speaks (default `'tokenspeed'`; `'vllm'` = vLLM EngineCore, engine-wire.md section 5). */
  engine?: SimEngineFamily;
  /**
   * Lockstep (MoE DP) rank: park when drained, wait for START_DP_WAVE (engine-wire.md 5.12). vLLM only; requires
   * `dataParallelSize` ≥ 2. Default false (a dense rank).
   */
  lockstep?: boolean;
  /** Reported `data_parallel_size`: the lockstep group's size (≥ 2). Only with `lockstep`; dense ranks report 1. */
  dataParallelSize?: number;
  /**
   * The ready-response form to register with (engine-wire.md 2.5; issue #14): `long` (default: the 19 keys) or, vLLM
   * only, `short`: the 3 keys of vLLM releases up to at least 9aaf83ef (`max_model_len`, `num_gpu_blocks`,
   * `dp_stats_address`), so the gateway learns neither `data_parallel_size` nor the rest. A lockstep rank behaves the
   * same either way; the gateway then detects it from its first `wave_complete`.
   */
  readyResponse?: 'long' | 'short';
  /**
   * vLLM only: the `EngineCoreOutput` layout of the rank's outputs (docs/wire/vllm-output.md): 13 fields (default, as
   * vLLM 9aaf83ef / 52a31cce send them) or 16 (SMG's decoder, `ec_transfer_params` at 9).
   */
  outputLayout?: EngineCoreOutputLayout;
  /**
   * vLLM only: the `vllm_version` of the long ready response (default `"vllm-sim"`, which names no layout), e.g. a
   * setuptools-scm version naming a vLLM commit (`0.21.1.dev3+g52a31ccec`) to exercise the gateway's version rule.
   */
  vllmVersion?: string;
  /** Cap on running requests (default 64); reported as `max_num_seqs`. */
  maxRunning?: number;
  /** LoRA adapters a step may run at once (vLLM `--max-loras`; `SchedulerConfig.maxLoras`, default 1). */
  maxLoras?: number;
  /** Device KV pages of 16 tokens (default 4096 = 65 536 tokens); reported as `num_gpu_blocks`. */
  kvTotalPages?: number;
  /** Context length in tokens (default 32 768); reported as `max_model_len`. */
  maxModelLen?: number;
  /** Step-time model (default `DEFAULT_STEP_TIME_MODEL`). */
  stepTimeModel?: StepTimeModel;
  /** Multiplies every simulated step time (default 1; 0 = as fast as possible, 0.1 = ten times faster). */
  timeScale?: number;
  /**
   * This rank's step-time multiplier (ratio > 0, default 1; e.g. 2.0 = a rank slowed by a noisy neighbour; issue #5
   * part 2). Unlike `timeScale` it is part of the modelled engine (`SchedulerConfig.slowdown`).
   */
  slowdown?: number;
  /** Keep a prefix cache (scheduler.ts, prefix-cache.ts; default true, as vLLM V1 and TokenSpeed do). */
  prefixCaching?: boolean;
  /**
   * vLLM's `--scheduling-policy` (scheduler.ts `SchedulingPolicy`; default `'fcfs'`): `'priority'` serves the waiting
   * queue by each request's `priority`. Only a vLLM rank reads `priority` from its requests; TokenSpeed's have none.
   */
  schedulingPolicy?: SchedulingPolicy;
  /**
   * Publish the prefix cache's KV events as the engine does when started with this `--kv-events-config`
   * (kv-events.ts; off unless `enabled`). Bound before the rank dials the gateway.
   */
  kvEvents?: KvEventsConfig;
  /**
   * Record every request's timeline on the rank's own clock (`SimEngineHandle.timeline`; default false): for
   * benchmarks, whose latencies should not include the host's scheduling delays. Kept until `clearTimelines()`.
   */
  recordTimeline?: boolean;
  /**
   * Trace requests that carry `trace_headers` (request-spans.ts; `--otlp-traces-endpoint`). Absent or null: no spans.
   */
  tracer?: Tracer | null;
  /** XORed into every request's seed so whole runs can differ (default 0: the request seed alone decides). */
  seed?: number;
  /** Server default `--stream-interval` in tokens (default 1; TokenSpeed only: vLLM reports every step). */
  streamInterval?: number;
  /** TokenSpeed `--enable-output-logprobs` (default true here, so the gateway's logprob path can be exercised). */
  enableOutputLogprobs?: boolean;
  /** Reported as `instance_id` (default `"tokenspeed-sim"` / `"vllm-sim"`). */
  instanceId?: string;
  /** Reported as `data_parallel_rank` (informational; default the engine index). */
  dataParallelRank?: number;
  /** How long to wait for the gateway's INIT (ms, default 600 000). */
  initTimeoutMs?: number;
  /**
   * How many rounds after a client ABORT arrives this rank applies it (default 0 = before its next round). A real
   * engine inside long steps, or behind on its input, keeps running, streaming and counting the request until then
   * (issue 26 measured ~0.1 s, ~20 rounds, on the TokenSpeed wire): a fidelity knob for the gateway's handling of
   * that lag. Counted in rounds, not ms, so tests do not depend on the host's speed.
   */
  abortLagRounds?: number;
  /**
   * How long `close()` waits for output messages already queued for the PUSH before dropping them (ms, default
   * `DEFAULT_CLOSE_GRACE_MS`). Pushes only wait when the gateway stopped reading its PULL.
   */
  closeGraceMs?: number;
  /** The text model (default: built from `GatewayTokenizer.load(GatewayTokenizer.defaultDir())` and `behaviour`). */
  textModel?: TextModel;
  /**
   * How the default text model treats tools and reasoning (response-plan.ts; default Hermes tool calls when the
   * prompt declares tools, no `<think>` blocks). Ignored when `textModel` is given.
   */
  behaviour?: SimModelBehaviour;
  /** The vocabulary size for `logit_bias` (and vLLM prompt token) validation (default: the loaded tokenizer's). */
  vocabSize?: number;
  /**
   * The model's EOS ids (default: the loaded tokenizer's, else the text model's EOS). TokenSpeed: the engine's own
   * EOS finish check. vLLM: only decides whether the text model may emit EOS (when the request's stop set names it).
   */
  eosTokenIds?: readonly number[];
  /** Contract faults to commit on every request (faults.ts; tests of the gateway's output checks). Default: none. */
  faults?: SimFaults;
  logger?: MinimalLogger;
}

/** Counters of one simulated rank. */
export interface SimEngineStats {
  added: number;
  /** Requests answered with a terminal abort (TokenSpeed) or error (vLLM) output instead of being served. */
  rejected: number;
  /** ADDs dropped because an earlier ABORT named them. */
  abortedOnArrival: number;
  /** Registered requests dropped by ABORT. */
  aborted: number;
  /** Messages dropped as malformed (undecodable, bad rid, unknown type, duplicate rid). */
  dropped: number;
  /** Forward passes started. */
  rounds: number;
  /** LoRA adapter loads into GPU slots (lora-slots.ts). */
  loraLoads: number;
  /** Running requests preempted back to the waiting queue for lack of KV pages (`SchedulerState.preemptions`). */
  preemptions: number;
  /** Output messages pushed (step batches, rejections, wave notices). */
  batchesSent: number;
  /** Step messages queued for the PUSH (a TokenSpeed step without rows sends none; vLLM sends one per step). */
  steps: number;
  /** Rows in those step messages (so `stepRows / steps` is the mean rows per output batch). */
  stepRows: number;
  tokensGenerated: number;
  /** Messages that could not be encoded or pushed (including those dropped by `close()`). */
  sendErrors: number;
  /** Messages handed to the PUSH whose send has not completed yet. */
  pendingSends: number;
  /** Times the loop paused because `OUTPUT_BACKLOG_PAUSE` messages were waiting to be pushed. */
  outputPauses: number;
  /** True while the loop is paused on output backpressure. */
  outputPaused: boolean;
  /** Lockstep: START_DP_WAVE messages that started a wave. */
  wavesStarted: number;
  /** START_DP_WAVE messages ignored (stale wave, already stepping, excluded, or a dense rank). */
  wakesIgnored: number;
  /** Lockstep: `wave_complete` notices sent. */
  wavesCompleted: number;
  /** Lockstep: `start_wave` notices sent. */
  startWaveRequests: number;
}

/**
 * One request's life on a rank's clock (wall ms of `performance.now()`, except that back-to-back rounds follow the
 * rank's own step clock; see the module comment): `arrivedMs` when its ADD was registered; one entry per output row,
 * `dueMs` = when the round that produced it was due to commit, `beginMs` = when that round began, `tokens` = the
 * row's new tokens. A row's round never begins before the request arrived on the rank's clock, except while the rank
 * catches up on late timers; then the request counts as arrived when that round began (`SimTimeline` users take
 * `min(arrivedMs, rows[0].beginMs)`).
 */
export interface SimTimeline {
  arrivedMs: number;
  rows: { beginMs: number; dueMs: number; tokens: number }[];
}

/** A lockstep rank's wave state, as `SimEngineHandle.wave()` reports it. */
export interface SimWaveState {
  currentWave: number;
  /** True while stepping; false while parked. */
  running: boolean;
}

/** A running simulated rank. */
export interface SimEngineHandle {
  readonly engineIndex: number;
  /** The wire this rank speaks. */
  readonly engine: SimEngineFamily;
  /** The registration this rank sent. */
  readonly ready: ReadyResponse;
  stats(): SimEngineStats;
  /** Lockstep ranks: the current wave and whether the rank steps; null for a dense rank. */
  wave(): SimWaveState | null;
  /**
   * The rank's true outstanding work in tokens, read now (`SimScheduler.outstandingTokens()`: prompt tokens still to
   * (re)prefill plus output tokens still allowed, over every registered request, whoever sent it). Synchronous and
   * cheap: what the routing benchmark's `oracle` DP policy reads (src/engine-client/policies.ts `OracleSource`;
   * issue #5 parts 1 and 4). Never throws.
   */
  outstandingTokens(): number;
  /**
   * Tokens of `tokens`' leading full blocks this rank's prefix cache holds now (`SimScheduler.cachedPrefixTokens`).
   * For tests and benchmarks. Never throws.
   */
  cachedPrefixTokens(tokens: readonly number[]): number;
  /**
   * Resets the rank's prefix cache (vLLM `reset_prefix_cache`; `SimScheduler.resetPrefixCache`): false while requests
   * hold cached blocks. With KV events on, the reset is published with the rank's next step, as vLLM does.
   */
  resetPrefixCache(): boolean;
  /** The request's timeline (`recordTimeline` on), or null when none was recorded. Never throws. */
  timeline(rid: string): SimTimeline | null;
  /** Drop every recorded timeline. */
  clearTimelines(): void;
  /** Resolves when the rank has stopped (after `close()`, or when its input socket failed). Never rejects. */
  readonly closed: Promise<void>;
  /**
   * Stop the loop, give pending output pushes up to `closeGraceMs` to complete, push `ENGINE_CORE_DEAD` (unless
   * `sendDead` is false, or pushes were still blocked: then it is skipped) without waiting, and close the sockets
   * (dropping whatever the gateway never read). Bounded by about `closeGraceMs`; idempotent; never rejects.
   */
  close(opts?: { sendDead?: boolean }): Promise<void>;
}

const DEFAULTS = { maxRunning: 64, kvTotalPages: 4096, maxModelLen: 32_768 } as const;

/** How far (wall ms) a busy rank's clock may run ahead of late timers to catch up (see the module comment). */
export const CATCH_UP_LIMIT_MS = 1000;

/** Default of `SimEngineOptions.closeGraceMs`, in ms. */
export const DEFAULT_CLOSE_GRACE_MS = 500;

/**
 * Messages waiting for the output PUSH at which the loop pauses (output backpressure). A push only waits once the
 * PUSH's high-water mark (zeromq default 1000 messages) is reached, so in normal operation at most one is pending.
 */
export const OUTPUT_BACKLOG_PAUSE = 8;

/** Resolves true when `p` settles within `ms` ms, false otherwise. Never rejects; clears its timer. */
function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  return Promise.race([
    p.then(
      () => true,
      () => true,
    ),
    expired,
  ]).finally(() => clearTimeout(timer));
}

function describeError(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The wire of `family` for one rank. Throws `RangeError` for an unknown family. */
export function createSimWire(family: SimEngineFamily, ctx: SimWireContext): SimWire {
  switch (family) {
    case 'tokenspeed':
      return createTokenSpeedSimWire(ctx);
    case 'vllm':
      return createVllmSimWire(ctx);
    default:
      throw new RangeError(`engine must be one of ${SIM_ENGINE_FAMILIES.join(', ')}, got ${JSON.stringify(family)}`);
  }
}

/**
 * Connect one simulated rank and start serving. Resolves once the rank is registered with the gateway (the dialer's
 * handshake finished). Throws `RangeError` on bad options (an unknown `engine`; `lockstep` with TokenSpeed, without
 * `dataParallelSize` ≥ 2; `dataParallelSize` without `lockstep`; `readyResponse` other than long/short, or short with
 * TokenSpeed; `outputLayout` other than 13/16; `outputLayout` or `vllmVersion` with TokenSpeed), and the dialer's `ConfigError` / `HandshakeError`
 * when the handshake fails; loading the default tokenizer can throw the tokenizer's errors.
 */
export async function runSimEngine(opts: SimEngineOptions): Promise<SimEngineHandle> {
  const log = opts.logger ?? silentLogger;
  const family = opts.engine ?? 'tokenspeed';
  if (!SIM_ENGINE_FAMILIES.includes(family)) {
    throw new RangeError(`engine must be one of ${SIM_ENGINE_FAMILIES.join(', ')}, got ${JSON.stringify(family)}`);
  }
  const abortLagRounds = opts.abortLagRounds ?? 0;
  if (!(Number.isSafeInteger(abortLagRounds) && abortLagRounds >= 0))
    throw new RangeError(`abortLagRounds must be an integer ≥ 0, got ${abortLagRounds}`);
  const lockstep = opts.lockstep ?? false;
  if (lockstep && family !== 'vllm') {
    throw new RangeError(
      'lockstep needs engine "vllm": the TokenSpeed wire has no wave messages (engine-wire.md 5.12)',
    );
  }
  if (lockstep && !(Number.isSafeInteger(opts.dataParallelSize) && (opts.dataParallelSize as number) >= 2)) {
    throw new RangeError(
      `lockstep needs dataParallelSize, an integer ≥ 2 (the group size), got ${String(opts.dataParallelSize)}`,
    );
  }
  if (!lockstep && opts.dataParallelSize !== undefined) {
    throw new RangeError(
      'dataParallelSize is only reported by a lockstep rank: dense ranks report 1 (engine-wire.md 5.12)',
    );
  }
  const readyForm = opts.readyResponse ?? 'long';
  if (readyForm !== 'long' && readyForm !== 'short')
    throw new RangeError(`readyResponse must be 'long' or 'short', got ${JSON.stringify(readyForm)}`);
  if (readyForm === 'short' && family !== 'vllm') {
    throw new RangeError(
      'readyResponse "short" needs engine "vllm": TokenSpeed always sends the 19-key ready response',
    );
  }
  const outputLayout = opts.outputLayout ?? 13;
  if (outputLayout !== 13 && outputLayout !== 16)
    throw new RangeError(`outputLayout must be 13 or 16, got ${JSON.stringify(outputLayout)}`);
  if ((opts.outputLayout !== undefined || opts.vllmVersion !== undefined) && family !== 'vllm') {
    throw new RangeError('outputLayout and vllmVersion need engine "vllm": they describe the vLLM EngineCore wire');
  }
  const timeScale = opts.timeScale ?? 1;
  if (!Number.isFinite(timeScale) || timeScale < 0)
    throw new RangeError(`timeScale must be a finite number ≥ 0, got ${timeScale}`);
  const maxRunning = opts.maxRunning ?? DEFAULTS.maxRunning;
  const kvTotalPages = opts.kvTotalPages ?? DEFAULTS.kvTotalPages;
  const maxModelLen = opts.maxModelLen ?? DEFAULTS.maxModelLen;
  const closeGraceMs = opts.closeGraceMs ?? DEFAULT_CLOSE_GRACE_MS;
  if (!Number.isFinite(closeGraceMs) || closeGraceMs < 0)
    throw new RangeError(`closeGraceMs must be a finite number ≥ 0, got ${closeGraceMs}`);

  let textModel = opts.textModel;
  let vocabSize = opts.vocabSize;
  let eosTokenIds = opts.eosTokenIds;
  if (textModel === undefined || vocabSize === undefined || eosTokenIds === undefined) {
    if (textModel === undefined || vocabSize === undefined) {
      const tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
      textModel ??= new TextModel(tokenizer, opts.behaviour !== undefined ? { behaviour: opts.behaviour } : {});
      vocabSize ??= tokenizer.vocabSize;
      eosTokenIds ??= tokenizer.eosTokenIds;
    }
    eosTokenIds ??= [textModel.eosTokenId];
  }
  const model = textModel;
  const runSeed = seedToUint32(opts.seed ?? 0);
  const wire = createSimWire(family, {
    vocabSize,
    enableOutputLogprobs: opts.enableOutputLogprobs ?? true,
    tokens: (seed: WireInt, prompt: readonly number[], constraint) =>
      model.createSource((seedToUint32(seed) ^ runSeed) >>> 0, prompt, constraint),
    candidatePool: model.candidatePool,
    outputLayout,
  });

  const scheduler = new SimScheduler({
    engineIndex: opts.engineIndex,
    maxRunning,
    kvTotalPages,
    maxModelLen,
    eosTokenIds,
    stepTime: opts.stepTimeModel ?? DEFAULT_STEP_TIME_MODEL,
    ...(opts.slowdown !== undefined ? { slowdown: opts.slowdown } : {}),
    streamInterval: opts.streamInterval,
    finishRules: wire.finishRules,
    ...(opts.prefixCaching !== undefined ? { prefixCaching: opts.prefixCaching } : {}),
    ...(opts.schedulingPolicy !== undefined ? { schedulingPolicy: opts.schedulingPolicy } : {}),
    ...(opts.maxLoras !== undefined ? { maxLoras: opts.maxLoras } : {}),
    kvEvents: opts.kvEvents?.enabled === true,
  });
  const kvPublisher =
    opts.kvEvents?.enabled === true
      ? await SimKvPublisher.bind(opts.kvEvents, opts.engineIndex, family, KV_PAGE_TOKENS, log)
      : null;
  const waves = lockstep ? new LockstepWaves(opts.engineIndex) : null;
  const ready: ReadyResponse = {
    ...DEFAULT_READY_RESPONSE,
    maxModelLen,
    numGpuBlocks: kvTotalPages,
    prefixGranularity: KV_PAGE_TOKENS,
    dtype: 'bfloat16',
    vllmVersion: opts.vllmVersion ?? wire.version,
    worldSize: 1,
    // > 1 marks the worker as a lockstep group (engine-wire.md 5.12); independent (dense) DP ranks report 1.
    dataParallelSize: lockstep ? (opts.dataParallelSize as number) : 1,
    tensorParallelSize: 1,
    pipelineParallelSize: 1,
    decodeContextParallelSize: 1,
    dataParallelRank: opts.dataParallelRank ?? opts.engineIndex,
    maxNumSeqs: maxRunning,
    maxNumBatchedTokens: 8192,
    instanceId: opts.instanceId ?? wire.defaultInstanceId,
    kvCacheSizeTokens: wire.reportsKvCacheSizeTokens ? kvTotalPages * KV_PAGE_TOKENS : null,
    kvCacheMaxConcurrency: null,
    // Newer vLLM reports its KV-event config here; TokenSpeed's field stays nil (docs/reference/kv-events.md 1).
    ...(family === 'vllm' && opts.kvEvents?.enabled === true
      ? { kvEventsConfig: kvEventsConfigObject(opts.kvEvents) }
      : {}),
  };

  const dialing = EngineDialer.connect({
    handshakeAddress: opts.handshakeAddress,
    engineIndex: opts.engineIndex,
    readyResponse: ready,
    granularityKey: wire.granularityKey,
    readyForm,
    initTimeoutMs: opts.initTimeoutMs,
    logger: log,
  });
  const dialer = await dialing.catch(async (err: unknown) => {
    await kvPublisher?.close();
    throw err;
  });
  // Debug: the gateway logs the join itself ("DP rank N joined", with max_model_len and the KV pages).
  log.debug(
    {
      engineIndex: opts.engineIndex,
      engine: family,
      lockstep,
      readyForm,
      outputLayout: family === 'vllm' ? outputLayout : undefined,
      maxRunning,
      kvTotalPages,
      maxModelLen,
      timeScale,
      slowdown: scheduler.config.slowdown,
    },
    'sim rank registered',
  );

  const stats: SimEngineStats = {
    added: 0,
    rejected: 0,
    abortedOnArrival: 0,
    aborted: 0,
    dropped: 0,
    loraLoads: 0,
    rounds: 0,
    preemptions: 0,
    batchesSent: 0,
    steps: 0,
    stepRows: 0,
    tokensGenerated: 0,
    sendErrors: 0,
    pendingSends: 0,
    outputPauses: 0,
    outputPaused: false,
    wavesStarted: 0,
    wakesIgnored: 0,
    wavesCompleted: 0,
    startWaveRequests: 0,
  };
  let stopping = false;
  let timer: NodeJS.Timeout | null = null;
  let sends: Promise<void> = Promise.resolve();
  /** Steps since start (dense ranks' `step_counter`). */
  let totalSteps = 0;

  /**
   * Encode (catching encoder errors) and queue one output message; `null` from the encoder sends nothing. True when a
   * message was queued.
   */
  const undecodable = opts.faults?.undecodableOutput === true;
  const push = (what: string, encode: () => Uint8Array[] | null): boolean => {
    let frames: Uint8Array[] | null;
    try {
      frames = encode();
      if (undecodable && frames !== null) frames = [...UNDECODABLE_OUTPUT];
    } catch (error) {
      stats.sendErrors += 1;
      log.error(
        { engineIndex: opts.engineIndex, what, err: describeError(error) },
        'sim rank could not encode an output message',
      );
      return false;
    }
    if (frames === null) return false;
    stats.pendingSends += 1;
    if (stats.pendingSends >= OUTPUT_BACKLOG_PAUSE && !stats.outputPaused) {
      stats.outputPaused = true;
      stats.outputPauses += 1;
      log.warn(
        { engineIndex: opts.engineIndex, pendingSends: stats.pendingSends },
        'sim rank output is backed up (the gateway is not reading its PULL); pausing rounds',
      );
    }
    // The dialer sends in call order, so the last send queued is the last to settle (what `close()` waits for).
    sends = dialer.sendFrames(frames).then(
      () => {
        stats.batchesSent += 1;
        sendSettled();
      },
      (error: unknown) => {
        stats.sendErrors += 1;
        if (!stopping)
          log.warn(
            { engineIndex: opts.engineIndex, what, err: describeError(error) },
            'sim rank could not push an output message',
          );
        sendSettled();
      },
    );
    return true;
  };

  const sendSettled = (): void => {
    stats.pendingSends -= 1;
    if (stats.outputPaused && stats.pendingSends === 0) {
      stats.outputPaused = false;
      if (stopping) return;
      log.info({ engineIndex: opts.engineIndex }, 'sim rank output drained; resuming rounds');
      startRound();
    }
  };

  // Spans of traced requests (request-spans.ts), ended as their terminal rows leave.
  const spans = opts.tracer ? new SimRequestSpans(opts.tracer, opts.engineIndex) : null;
  // `state` is read by the encoder (vLLM stats; `push` encodes at once, so "right after the step" still holds) and
  // built only then: the TokenSpeed wire never reads it.
  const stepOf = (rows: readonly SimRow[], tail: LoadTail): SimStep => {
    spans?.rows(rows);
    let state: SchedulerState | null = null;
    return {
      engineIndex: opts.engineIndex,
      rows,
      tail,
      get state() {
        return (state ??= scheduler.state());
      },
      kvTotalPages,
      stepCounter: waves === null ? totalSteps : waves.stepCounter,
      currentWave: waves === null ? 0 : waves.currentWave,
    };
  };

  /** Count a step and push its message. */
  const pushStep = (rows: readonly SimRow[], tail: LoadTail): void => {
    totalSteps += 1;
    waves?.stepped();
    // Before the step's output, as the engines take a step's events when they schedule it.
    kvPublisher?.publish(scheduler.takeKvEvents());
    for (const r of rows) stats.tokensGenerated += r.outputIds.length;
    const step = stepOf(rows, tail);
    if (push('step', () => wire.encodeStep(step))) {
      stats.steps += 1;
      stats.stepRows += rows.length;
    }
  };

  const hasWork = (): boolean => scheduler.hasWork() || wire.hasPendingReport();

  /** A stepping lockstep rank with nothing left parks and reports the wave it completed (5.12). */
  const maybePark = (): void => {
    if (waves === null || !waves.running || hasWork() || wire.waves === null) return;
    const done = waves.park();
    stats.wavesCompleted += 1;
    log.debug({ engineIndex: opts.engineIndex, wave: done }, 'sim rank drained its wave and parked');
    const waveWire = wire.waves;
    push('wave_complete', () => waveWire.encodeWaveComplete(opts.engineIndex, done));
  };

  /** When the last round's commit was due (wall ms), for back-to-back rounds; null after an idle or paused loop. */
  let lastDue: number | null = null;
  const timelines = opts.recordTimeline === true ? new Map<string, SimTimeline>() : null;

  const startRound = (continuing = false): void => {
    const due = continuing ? lastDue : null;
    lastDue = null;
    if (stopping || timer !== null || stats.outputPaused) return;
    // A parked lockstep rank holds its requests: it cannot step without the rest of its group (5.12).
    if (waves !== null && !waves.running) return;
    if (laggingAborts.length > 0) applyLaggingAborts();
    if (!hasWork()) {
      maybePark();
      return;
    }
    const plan = scheduler.plan();
    if (plan.admission !== null) {
      const step = stepOf(plan.admission.rows, plan.admission.tail);
      push('rejections', () => wire.encodeRejections(step));
    }
    if (plan.plannedCount === 0) {
      // No forward pass. A vLLM rank still reports aborted ids in a step of its own (no rows, stats).
      if (wire.hasPendingReport()) pushStep([], plan.tail);
      // Anything still registered would have been planned (add() refuses what cannot fit).
      if (scheduler.hasWork())
        log.error({ engineIndex: opts.engineIndex, ...scheduler.state() }, 'sim rank has work it cannot schedule');
      maybePark();
      return;
    }
    stats.rounds += 1;
    stats.preemptions += plan.retracted;
    const now = performance.now();
    // timeScale 0 has no engine clock to keep (every step takes no time).
    const begin = due === null || timeScale === 0 ? now : Math.max(due, now - CATCH_UP_LIMIT_MS);
    const commitDue = begin + plan.stepTimeMs * timeScale;
    timer = setTimeout(
      () => {
        timer = null;
        if (stopping) return;
        const batch = scheduler.commit();
        if (timelines !== null) {
          for (const r of batch?.rows ?? [])
            timelines.get(r.rid)?.rows.push({ beginMs: begin, dueMs: commitDue, tokens: r.outputIds.length });
        }
        pushStep(batch?.rows ?? [], plan.tail);
        lastDue = commitDue;
        startRound(true);
      },
      Math.max(0, commitDue - now),
    );
  };

  const onAdd = (payload: Uint8Array): void => {
    let rid = '?';
    try {
      const { request: decoded, requestWave } = wire.decodeAdd(payload);
      const spec = withFaults(decoded, opts.faults);
      const lora = spec.lora;
      // As vLLM's worker: an adapter it was not given loads from the request's path, and fails the request without one.
      if (lora !== undefined && spec.validationError === null && !loraRegistry.admit(lora.id, lora.name, lora.path))
        spec.validationError = `LoRA adapter ${lora.name} (id ${lora.id}): no adapter found at ${lora.path}`;
      rid = spec.rid;
      const result = scheduler.add(spec, performance.now());
      switch (result) {
        case 'queued': {
          stats.added += 1;
          timelines?.set(rid, { arrivedMs: performance.now(), rows: [] });
          if (spans !== null && spec.traceHeaders !== undefined)
            spans.start(rid, spec.traceHeaders, spec.promptTokenIds.length);
          log.debug(
            { engineIndex: opts.engineIndex, rid, promptTokens: spec.promptTokenIds.length },
            'sim rank queued a request',
          );
          const startWave = waves?.arrived(requestWave) ?? null;
          if (startWave !== null && wire.waves !== null) {
            // A request for an already-drained wave reached a parked rank: ask the gateway to wake the group (5.12).
            stats.startWaveRequests += 1;
            log.debug(
              { engineIndex: opts.engineIndex, rid, requestWave, wave: startWave },
              'sim rank asks for a wave start',
            );
            const waveWire = wire.waves;
            push('start_wave', () => waveWire.encodeStartWave(opts.engineIndex, startWave));
          }
          break;
        }
        case 'rejected': {
          stats.rejected += 1;
          log.info(
            { engineIndex: opts.engineIndex, rid, reason: scheduler.rejectionReason(spec) },
            `sim rank refuses a request (terminal ${family === 'vllm' ? 'error output' : 'abort row'})`,
          );
          if (wire.rejectAt === 'arrival') {
            const batch = scheduler.takeRejections();
            if (batch !== null) {
              const step = stepOf(batch.rows, batch.tail);
              push('rejections', () => wire.encodeRejections(step));
            }
          }
          break;
        }
        case 'aborted':
          stats.abortedOnArrival += 1;
          log.debug({ engineIndex: opts.engineIndex, rid }, 'sim rank dropped a request aborted before it arrived');
          break;
        case 'duplicate':
          stats.dropped += 1;
          log.warn({ engineIndex: opts.engineIndex, rid }, 'sim rank dropped an ADD for a rid already running');
          break;
      }
    } catch (error) {
      stats.dropped += 1;
      log.warn({ engineIndex: opts.engineIndex, rid, err: describeError(error) }, 'sim rank dropped a malformed ADD');
    }
  };

  /** ABORT payloads held back by `abortLagRounds`, with the rounds each still waits (applied by `startRound`). */
  const laggingAborts: Array<{ payload: Uint8Array; rounds: number }> = [];
  const onAbort = (payload: Uint8Array): void => {
    if (abortLagRounds === 0) applyAbort(payload);
    else laggingAborts.push({ payload, rounds: abortLagRounds });
  };
  /** Before a round is planned: count it for every lagging ABORT and apply those whose lag is over. */
  const applyLaggingAborts = (): void => {
    for (let i = 0; i < laggingAborts.length;) {
      const a = laggingAborts[i]!;
      if (--a.rounds > 0) {
        i++;
        continue;
      }
      laggingAborts.splice(i, 1);
      applyAbort(a.payload);
    }
  };

  const applyAbort = (payload: Uint8Array): void => {
    try {
      const rids = wire.decodeAbort(payload);
      const registered = rids.filter((rid) => scheduler.has(rid));
      const n = scheduler.abort(rids, performance.now());
      spans?.aborted(registered);
      stats.aborted += n;
      wire.noteAborted(registered);
      log.debug({ engineIndex: opts.engineIndex, rids, dropped: n }, 'sim rank applied an ABORT');
    } catch (error) {
      stats.dropped += 1;
      log.warn({ engineIndex: opts.engineIndex, err: describeError(error) }, 'sim rank dropped a malformed ABORT');
    }
  };

  const loraRegistry = new SimLoraRegistry();
  const onUtility = (payload: Uint8Array): void => {
    const utility = wire.utility;
    if (utility === null) return;
    try {
      const call = utility.decodeCall(payload);
      const outcome = loraRegistry.call(call.method, call.args);
      log.debug({ engineIndex: opts.engineIndex, method: call.method, callId: call.callId }, 'sim rank utility call');
      push('utility', () => utility.encodeReply(opts.engineIndex, call.callId, outcome));
    } catch (error) {
      stats.dropped += 1;
      log.warn({ engineIndex: opts.engineIndex, err: describeError(error) }, 'sim rank dropped a malformed UTILITY');
    }
  };

  const onStartWave = (payload: Uint8Array): void => {
    if (wire.waves === null) return;
    try {
      const { wave, excludeEngineIndex } = wire.waves.decodeStartWave(payload);
      if (waves === null) {
        stats.wakesIgnored += 1;
        // As vLLM's EngineCoreProc does (it logs "Unrecognized input request type" and carries on; waves.ts).
        log.debug({ engineIndex: opts.engineIndex, wave }, 'dense sim rank ignored a START_DP_WAVE');
        return;
      }
      const before = waves.currentWave;
      const outcome = waves.start(wave, excludeEngineIndex);
      if (outcome === 'started') stats.wavesStarted += 1;
      else stats.wakesIgnored += 1;
      log.debug({ engineIndex: opts.engineIndex, wave, currentWave: before, outcome }, 'sim rank got a START_DP_WAVE');
    } catch (error) {
      stats.dropped += 1;
      log.warn(
        { engineIndex: opts.engineIndex, err: describeError(error) },
        'sim rank dropped a malformed START_DP_WAVE',
      );
    }
  };

  const served: ReadonlySet<RequestTypeByte> = new Set<RequestTypeByte>([
    RequestType.ADD,
    RequestType.ABORT,
    ...wire.extraRequestTypes,
  ]);

  let closing: Promise<void> | null = null;
  const close = (closeOpts: { sendDead?: boolean } = {}): Promise<void> => {
    closing ??= (async () => {
      stopping = true;
      if (timer !== null) {
        clearTimeout(timer);
        timer = null;
      }
      laggingAborts.length = 0;
      // A push waits only while the gateway does not read its PULL: give it a short grace, never more.
      const flushed = await settlesWithin(sends, closeGraceMs);
      if (!flushed) {
        log.warn(
          { engineIndex: opts.engineIndex, pendingSends: stats.pendingSends, closeGraceMs },
          'sim rank output is not being read; dropping pending batches and skipping ENGINE_CORE_DEAD',
        );
      } else if (closeOpts.sendDead ?? true) {
        // Non-blocking (send timeout 0) and best effort: a failure is logged by the dialer.
        await dialer.sendEngineCoreDead();
      }
      // Closing the PUSH fails a blocked push at once (zeromq triggers its poller on close).
      await dialer.close();
      await kvPublisher?.close();
      spans?.closeAll();
      log.info({ engineIndex: opts.engineIndex, ...stats }, 'sim rank stopped');
    })();
    return closing;
  };

  const loop = (async () => {
    try {
      for await (const msg of dialer.requests()) {
        if (stopping) break;
        if (!served.has(msg.type)) {
          stats.dropped += 1;
          log.warn(
            { engineIndex: opts.engineIndex, engine: family, type: msg.type },
            'sim rank dropped a request type its engine does not serve',
          );
        } else if (msg.type === RequestType.ADD) onAdd(msg.payload);
        else if (msg.type === RequestType.ABORT) onAbort(msg.payload);
        else if (msg.type === RequestType.START_DP_WAVE) onStartWave(msg.payload);
        else if (msg.type === RequestType.UTILITY) onUtility(msg.payload);
        startRound();
      }
    } catch (error) {
      if (!stopping)
        log.error({ engineIndex: opts.engineIndex, err: describeError(error) }, 'sim rank input failed; stopping');
    }
    await close();
  })();

  return {
    engineIndex: opts.engineIndex,
    engine: family,
    ready,
    stats: () => ({ ...stats, loraLoads: scheduler.state().loraLoads }),
    wave: () => (waves === null ? null : { currentWave: waves.currentWave, running: waves.running }),
    outstandingTokens: () => scheduler.outstandingTokens(),
    cachedPrefixTokens: (tokens) => scheduler.cachedPrefixTokens(tokens),
    resetPrefixCache: () => scheduler.resetPrefixCache(),
    timeline: (rid) => timelines?.get(rid) ?? null,
    clearTimelines: () => timelines?.clear(),
    closed: loop,
    close,
  };
}
