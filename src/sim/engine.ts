/**
 * One simulated TokenSpeed DP rank on the real wire: it dials the gateway exactly like a TokenSpeed rank started with
 * `--zmq-msgpack --zmq-engine-index N` (engine-wire.md 1.2; handshake 2.1 through `EngineDialer`), decodes ADD and
 * ABORT messages (4.1, 4.2, 4.7), finalizes and validates requests like TokenSpeed (4.5, 4.6; `request.ts`), runs the
 * continuous-batching scheduler model (`scheduler.ts`) on a timer, and pushes each round's rows as one 14-element
 * `BatchTokenIDOutSlim` (4.8, 4.9). On `close()` it pushes `ENGINE_CORE_DEAD` (1.7) and closes its sockets.
 *
 * Output backpressure (a sim choice, not a spec fact): a zeromq PUSH send waits once the high-water mark is reached
 * (the gateway is not reading its PULL), so an engine with a blocking output send stalls; likewise this loop stops
 * starting rounds while `OUTPUT_BACKLOG_PAUSE` batches wait to be pushed, and resumes when they drain. `close()` is
 * bounded: it gives pending pushes `closeGraceMs` to complete, then drops them and skips `ENGINE_CORE_DEAD`, which
 * could only queue behind them (1.7: the sentinel is sent non-blocking and best effort).
 *
 * Timing: a round is planned, its admission rejections (if any) are pushed at once, then after
 * `stepTimeMs × timeScale` ms the round commits and its batch is pushed; the next round starts right after. With no
 * registered request the loop idles (no timer) until a message arrives.
 *
 * Malformed messages (undecodable ADD or ABORT, a non-string rid, an unknown type byte, a duplicate rid) are logged and
 * dropped with no reply, like TokenSpeed (4.1 "Silent drop").
 */
import { performance } from 'node:perf_hooks';
import { DEFAULT_READY_RESPONSE } from '../protocols/handshake.js';
import { decodeAbortPayload } from '../protocols/tokenspeed/abort.js';
import { decodeTokenizedGenerateReqInput } from '../protocols/tokenspeed/request.js';
import { RequestType, type ReadyResponse } from '../protocols/types.js';
import { GatewayTokenizer } from '../tokenizer/tokenizer.js';
import { EngineDialer } from '../transport/engine-dialer.js';
import type { WireInt } from '../wire/reader.js';
import { silentLogger, type MinimalLogger } from '../logging.js';
import { encodeSimBatch } from './output.js';
import { toSimRequest } from './request.js';
import { DEFAULT_STEP_TIME_MODEL, KV_PAGE_TOKENS, SimScheduler, type SimBatch, type StepTimeModel } from './scheduler.js';
import { TextModel, seedToUint32 } from './text.js';

/** Options of `runSimEngine`. Units: tokens, pages of 16 tokens, ms. */
export interface SimEngineOptions {
  /** This rank's engine index (0..65535): its ZMQ identity and `engine_index` (engine-wire.md 1.5, 4.8). */
  engineIndex: number;
  /** The gateway's handshake address, `tcp://host:port`. */
  handshakeAddress: string;
  /** Cap on running requests (default 64); reported as `max_num_seqs`. */
  maxRunning?: number;
  /** Device KV pages of 16 tokens (default 4096 = 65 536 tokens); reported as `num_gpu_blocks`. */
  kvTotalPages?: number;
  /** Context length in tokens (default 32 768); reported as `max_model_len`. */
  maxModelLen?: number;
  /** Step-time model (default `DEFAULT_STEP_TIME_MODEL`). */
  stepTimeModel?: StepTimeModel;
  /** Multiplies every simulated step time (default 1; 0 = as fast as possible, 0.1 = ten times faster). */
  timeScale?: number;
  /** XORed into every request's seed so whole runs can differ (default 0: the request seed alone decides). */
  seed?: number;
  /** Server default `--stream-interval` in tokens (default 1). */
  streamInterval?: number;
  /** TokenSpeed `--enable-output-logprobs` (default true here, so the gateway's logprob path can be exercised). */
  enableOutputLogprobs?: boolean;
  /** Reported as `instance_id` (default `"tokenspeed-sim"`). */
  instanceId?: string;
  /** Reported as `data_parallel_rank` (informational; default the engine index). */
  dataParallelRank?: number;
  /** How long to wait for the gateway's INIT (ms, default 600 000). */
  initTimeoutMs?: number;
  /**
   * How long `close()` waits for output batches already queued for the PUSH before dropping them (ms, default
   * `DEFAULT_CLOSE_GRACE_MS`). Pushes only wait when the gateway stopped reading its PULL.
   */
  closeGraceMs?: number;
  /** The text model (default: built from `GatewayTokenizer.load(GatewayTokenizer.defaultDir())`). */
  textModel?: TextModel;
  /** The vocabulary size for `logit_bias` validation (default: the loaded tokenizer's). */
  vocabSize?: number;
  /** EOS ids for the finish check (default: the loaded tokenizer's, else the text model's EOS). */
  eosTokenIds?: readonly number[];
  logger?: MinimalLogger;
}

/** Counters of one simulated rank. */
export interface SimEngineStats {
  added: number;
  rejected: number;
  /** ADDs dropped because an earlier ABORT named them. */
  abortedOnArrival: number;
  /** Registered requests dropped by ABORT. */
  aborted: number;
  /** Messages dropped as malformed (undecodable, bad rid, unknown type, duplicate rid). */
  dropped: number;
  rounds: number;
  batchesSent: number;
  tokensGenerated: number;
  /** Batches that could not be pushed (including those dropped by `close()`). */
  sendErrors: number;
  /** Batches handed to the PUSH whose send has not completed yet. */
  pendingSends: number;
  /** Times the loop paused because `OUTPUT_BACKLOG_PAUSE` batches were waiting to be pushed. */
  outputPauses: number;
  /** True while the loop is paused on output backpressure. */
  outputPaused: boolean;
}

/** A running simulated rank. */
export interface SimEngineHandle {
  readonly engineIndex: number;
  /** The registration this rank sent. */
  readonly ready: ReadyResponse;
  stats(): SimEngineStats;
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

/** Default of `SimEngineOptions.closeGraceMs`, in ms. */
export const DEFAULT_CLOSE_GRACE_MS = 500;

/**
 * Batches waiting for the output PUSH at which the loop pauses (output backpressure). A push only waits once the
 * PUSH's high-water mark (zeromq default 1000 messages) is reached, so in normal operation at most one is pending.
 */
export const OUTPUT_BACKLOG_PAUSE = 8;

/** Resolves true when `p` settles within `ms` ms, false otherwise. Never rejects; clears its timer. */
function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  return Promise.race([p.then(() => true, () => true), expired]).finally(() => clearTimeout(timer));
}

function describeError(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * Connect one simulated rank and start serving. Resolves once the rank is registered with the gateway (the dialer's
 * handshake finished). Throws `RangeError` on bad options, and the dialer's `ConfigError` / `HandshakeError` when the
 * handshake fails; loading the default tokenizer can throw the tokenizer's errors.
 */
export async function runSimEngine(opts: SimEngineOptions): Promise<SimEngineHandle> {
  const log = opts.logger ?? silentLogger;
  const timeScale = opts.timeScale ?? 1;
  if (!Number.isFinite(timeScale) || timeScale < 0) throw new RangeError(`timeScale must be a finite number ≥ 0, got ${timeScale}`);
  const maxRunning = opts.maxRunning ?? DEFAULTS.maxRunning;
  const kvTotalPages = opts.kvTotalPages ?? DEFAULTS.kvTotalPages;
  const maxModelLen = opts.maxModelLen ?? DEFAULTS.maxModelLen;
  const closeGraceMs = opts.closeGraceMs ?? DEFAULT_CLOSE_GRACE_MS;
  if (!Number.isFinite(closeGraceMs) || closeGraceMs < 0) throw new RangeError(`closeGraceMs must be a finite number ≥ 0, got ${closeGraceMs}`);

  let textModel = opts.textModel;
  let vocabSize = opts.vocabSize;
  let eosTokenIds = opts.eosTokenIds;
  if (textModel === undefined || vocabSize === undefined || eosTokenIds === undefined) {
    if (textModel === undefined || vocabSize === undefined) {
      const tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
      textModel ??= new TextModel(tokenizer);
      vocabSize ??= tokenizer.vocabSize;
      eosTokenIds ??= tokenizer.eosTokenIds;
    }
    eosTokenIds ??= [textModel.eosTokenId];
  }
  const model = textModel;

  const scheduler = new SimScheduler({
    engineIndex: opts.engineIndex,
    maxRunning,
    kvTotalPages,
    maxModelLen,
    eosTokenIds,
    stepTime: opts.stepTimeModel ?? DEFAULT_STEP_TIME_MODEL,
    streamInterval: opts.streamInterval,
  });
  const ready: ReadyResponse = {
    ...DEFAULT_READY_RESPONSE,
    maxModelLen,
    numGpuBlocks: kvTotalPages,
    prefixGranularity: KV_PAGE_TOKENS,
    dtype: 'bfloat16',
    vllmVersion: 'tokenspeed-sim',
    worldSize: 1,
    // Independent (dense) DP ranks: > 1 would mark the worker as a lockstep group (engine-wire.md 5.12).
    dataParallelSize: 1,
    tensorParallelSize: 1,
    pipelineParallelSize: 1,
    decodeContextParallelSize: 1,
    dataParallelRank: opts.dataParallelRank ?? opts.engineIndex,
    maxNumSeqs: maxRunning,
    maxNumBatchedTokens: 8192,
    instanceId: opts.instanceId ?? 'tokenspeed-sim',
    kvCacheSizeTokens: kvTotalPages * KV_PAGE_TOKENS,
    kvCacheMaxConcurrency: null,
  };

  const dialer = await EngineDialer.connect({
    handshakeAddress: opts.handshakeAddress,
    engineIndex: opts.engineIndex,
    readyResponse: ready,
    initTimeoutMs: opts.initTimeoutMs,
    logger: log,
  });
  log.info({ engineIndex: opts.engineIndex, maxRunning, kvTotalPages, maxModelLen, timeScale }, 'sim rank registered');

  const runSeed = seedToUint32(opts.seed ?? 0);
  const enableOutputLogprobs = opts.enableOutputLogprobs ?? true;
  const stats: SimEngineStats = {
    added: 0, rejected: 0, abortedOnArrival: 0, aborted: 0, dropped: 0, rounds: 0, batchesSent: 0, tokensGenerated: 0, sendErrors: 0,
    pendingSends: 0, outputPauses: 0, outputPaused: false,
  };
  let stopping = false;
  let timer: NodeJS.Timeout | null = null;
  let sends: Promise<void> = Promise.resolve();

  const send = (batch: SimBatch): void => {
    let payload: Uint8Array;
    try {
      payload = encodeSimBatch(batch);
    } catch (error) {
      stats.sendErrors += 1;
      log.error({ engineIndex: opts.engineIndex, err: describeError(error) }, 'sim rank could not encode a batch');
      return;
    }
    for (const r of batch.rows) stats.tokensGenerated += r.outputIds.length;
    stats.pendingSends += 1;
    if (stats.pendingSends >= OUTPUT_BACKLOG_PAUSE && !stats.outputPaused) {
      stats.outputPaused = true;
      stats.outputPauses += 1;
      log.warn(
        { engineIndex: opts.engineIndex, pendingSends: stats.pendingSends },
        'sim rank output is backed up (the gateway is not reading its PULL); pausing rounds',
      );
    }
    sends = sends.then(() => dialer.sendOutput(payload)).then(
      () => {
        stats.batchesSent += 1;
        sendSettled();
      },
      (error: unknown) => {
        stats.sendErrors += 1;
        if (!stopping) log.warn({ engineIndex: opts.engineIndex, err: describeError(error) }, 'sim rank could not push a batch');
        sendSettled();
      },
    );
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

  const startRound = (): void => {
    if (stopping || timer !== null || stats.outputPaused || !scheduler.hasWork()) return;
    const plan = scheduler.plan();
    if (plan.admission !== null) send(plan.admission);
    if (plan.plannedCount === 0) {
      // Only rejections were due; anything still registered would have been planned (add() refuses what cannot fit).
      if (scheduler.hasWork()) log.error({ engineIndex: opts.engineIndex, ...scheduler.state() }, 'sim rank has work it cannot schedule');
      return;
    }
    stats.rounds += 1;
    timer = setTimeout(() => {
      timer = null;
      if (stopping) return;
      const batch = scheduler.commit();
      if (batch !== null) send(batch);
      startRound();
    }, plan.stepTimeMs * timeScale);
  };

  const tokens = (seed: WireInt, prompt: readonly number[]) =>
    model.createSource((seedToUint32(seed) ^ runSeed) >>> 0, prompt);

  const onAdd = (payload: Uint8Array): void => {
    let rid = '?';
    try {
      const decoded = decodeTokenizedGenerateReqInput(payload);
      const spec = toSimRequest(decoded, { vocabSize, enableOutputLogprobs, tokens });
      rid = spec.rid;
      const result = scheduler.add(spec, performance.now());
      switch (result) {
        case 'queued':
          stats.added += 1;
          log.debug({ engineIndex: opts.engineIndex, rid, promptTokens: spec.promptTokenIds.length }, 'sim rank queued a request');
          break;
        case 'rejected':
          stats.rejected += 1;
          log.info({ engineIndex: opts.engineIndex, rid, reason: scheduler.rejectionReason(spec) }, 'sim rank rejects a request (terminal abort row)');
          break;
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

  const onAbort = (payload: Uint8Array): void => {
    try {
      const rids = decodeAbortPayload(payload);
      const n = scheduler.abort(rids, performance.now());
      stats.aborted += n;
      log.debug({ engineIndex: opts.engineIndex, rids, dropped: n }, 'sim rank applied an ABORT');
    } catch (error) {
      stats.dropped += 1;
      log.warn({ engineIndex: opts.engineIndex, err: describeError(error) }, 'sim rank dropped a malformed ABORT');
    }
  };

  let closing: Promise<void> | null = null;
  const close = (closeOpts: { sendDead?: boolean } = {}): Promise<void> => {
    closing ??= (async () => {
      stopping = true;
      if (timer !== null) {
        clearTimeout(timer);
        timer = null;
      }
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
      log.info({ engineIndex: opts.engineIndex, ...stats }, 'sim rank stopped');
    })();
    return closing;
  };

  const loop = (async () => {
    try {
      for await (const msg of dialer.requests()) {
        if (stopping) break;
        if (msg.type === RequestType.ADD) onAdd(msg.payload);
        else if (msg.type === RequestType.ABORT) onAbort(msg.payload);
        else {
          stats.dropped += 1;
          log.warn({ engineIndex: opts.engineIndex, type: msg.type }, 'sim rank dropped a request type TokenSpeed does not serve');
        }
        startRound();
      }
    } catch (error) {
      if (!stopping) log.error({ engineIndex: opts.engineIndex, err: describeError(error) }, 'sim rank input failed; stopping');
    }
    await close();
  })();

  return {
    engineIndex: opts.engineIndex,
    ready,
    stats: () => ({ ...stats }),
    closed: loop,
    close,
  };
}
