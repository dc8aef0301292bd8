/**
 * The seam between the simulator's one engine loop (`engine.ts`) and an engine family's wire: decoding ADD and ABORT
 * payloads into the scheduler's requests, encoding a step's rows plus its load, the ready-response flavour, and (for
 * a wire that has them) wave messages. One module per family implements it: `tokenspeed-wire.ts` (engine-wire.md
 * section 4) and `vllm-wire.ts` (section 5). Everything here is synchronous and free of sockets and timers.
 */
import type { UtilityCall } from '../protocols/vllm/utility.js';
import type { UtilityOutcome } from './utility.js';
import type { EngineCoreOutputLayout } from '../protocols/vllm/output.js';
import type { RequestTypeByte, StructuredConstraint } from '../protocols/types.js';
import type { WireInt } from '../wire/reader.js';
import type { LoadTail, SchedulerState, SimRequest, SimRow, TokenSource } from './scheduler.js';

/** The engine families the simulator speaks (`--engine`). */
export type SimEngineFamily = 'tokenspeed' | 'vllm';

/** Every family, in `--engine` help order. */
export const SIM_ENGINE_FAMILIES: readonly SimEngineFamily[] = Object.freeze(['tokenspeed', 'vllm']);

/** What every family's request decoder needs from the engine. */
export interface SimWireContext {
  /** The vocabulary size (token ids and `logit_bias` keys must be below it); unchecked when absent. */
  vocabSize?: number;
  /** TokenSpeed `--enable-output-logprobs` (a TokenSpeed request asking for logprobs without it is refused). */
  enableOutputLogprobs: boolean;
  /**
   * The token source of one request, from its (finalized) seed, prompt and structured-output constraint (null: none;
   * the text model's `createSource`).
   */
  tokens: (seed: WireInt, promptTokenIds: readonly number[], constraint: StructuredConstraint | null) => TokenSource;
  /** Token ids a vLLM rank reports as ranked candidates for top logprobs (the text model's `candidatePool`). */
  candidatePool?: readonly number[];
  /**
   * The `EngineCoreOutput` layout a vLLM rank sends (docs/wire/vllm-output.md): 13 fields (default, vLLM 9aaf83ef /
   * 52a31cce) or 16 (SMG's decoder). Ignored by TokenSpeed.
   */
  outputLayout?: EngineCoreOutputLayout;
}

/** A decoded ADD. */
export interface SimAdd {
  /** The scheduler's view of the request; a non-null `validationError` makes it a terminal error/abort row. */
  request: SimRequest;
  /**
   * The wave the sender believed current (vLLM `EngineCoreRequest.current_wave`, engine-wire.md 5.2 index 12; the
   * gateway always sends 0). 0 for a wire without waves.
   */
  requestWave: number;
}

/**
 * One scheduler step as the encoders see it. Rows may be empty (a vLLM step without request outputs still reports
 * its stats, engine-wire.md 5.8).
 */
export interface SimStep {
  /** The producing rank (`engine_index`). */
  engineIndex: number;
  rows: readonly SimRow[];
  /** The load tail sampled when the step was planned (TokenSpeed 4.9 semantics). */
  tail: LoadTail;
  /** The scheduler right after the step (vLLM `SchedulerStats` are made after the step, engine-wire.md 5.10). */
  state: SchedulerState;
  /** The rank's KV pages (for a usage ratio 0..1). */
  kvTotalPages: number;
  /** Steps since the current wave started (lockstep) or since the rank started (dense). */
  stepCounter: number;
  /** The rank's current wave (0 for a dense rank). */
  currentWave: number;
}

/** The wave messages of a wire that has them (vLLM: engine-wire.md 5.7, 5.8, 5.12). */
export interface SimWaveWire {
  /**
   * Decodes a START_DP_WAVE payload `[wave, exclude_engine_index]` (5.7). Returns the wave and the excluded rank
   * (null = none). Throws `WireDecodeError` on a malformed payload, `RangeError` on a wave beyond 2^53 − 1.
   */
  decodeStartWave(payload: Uint8Array): { wave: number; excludeEngineIndex: number | null };
  /** The "wave complete" envelope: only `wave_complete = wave` (5.8). One frame. */
  encodeWaveComplete(engineIndex: number, wave: number): Uint8Array[];
  /** The "start wave" envelope: only `start_wave = wave` (5.8). One frame. */
  encodeStartWave(engineIndex: number, wave: number): Uint8Array[];
}

/**
 * One engine family's wire, per rank (an instance may hold per-rank state, such as vLLM's finished ids waiting for
 * the next step). Decoders throw on a payload that cannot be answered at all (the engine logs and drops it);
 * encoders throw `WireEncodeError` on values the wire cannot carry.
 */
export interface SimWire {
  readonly family: SimEngineFamily;
  /** Spelling of the granularity key in the ready response (engine-wire.md 2.5). */
  readonly granularityKey: 'prefix_granularity' | 'block_size';
  /** `vllm_version` of the ready response (2.5: logged only by the gateway). */
  readonly version: string;
  /** Default `instance_id` of the ready response. */
  readonly defaultInstanceId: string;
  /** Whether the rank reports `kv_cache_size_tokens` (TokenSpeed fills it; vLLM leaves it nil). */
  readonly reportsKvCacheSizeTokens: boolean;
  /**
   * When admission rejections go out: `'round'` = with the next round's plan, carrying the previous tail (TokenSpeed
   * 4.6); `'arrival'` = at once, even on a parked rank (vLLM answers a request it cannot take from its input thread).
   */
  readonly rejectAt: 'round' | 'arrival';
  /** The scheduler rules of this family (`SchedulerConfig.finishRules`). */
  readonly finishRules: 'tokenspeed' | 'vllm';
  /** Wave messages, or null for a wire without them (TokenSpeed: no lockstep possible). */
  readonly waves: SimWaveWire | null;
  /** The request types this family serves besides ADD and ABORT (vLLM: START_DP_WAVE). */
  readonly extraRequestTypes: readonly RequestTypeByte[];
  /** Decode and finalize an ADD payload. Throws (the engine drops the message) when no usable request id exists. */
  decodeAdd(payload: Uint8Array): SimAdd;
  /** Decode an ABORT payload (`list[str]`, 4.7 / 5.4). Throws `WireDecodeError`. */
  decodeAbort(payload: Uint8Array): string[];
  /** Note ids a client ABORT dropped (vLLM lists them in the next step's `finished_requests`; TokenSpeed: nothing). */
  noteAborted(requestIds: readonly string[]): void;
  /** True when the next step must send a message even without rows or running requests (vLLM: aborted ids to report). */
  hasPendingReport(): boolean;
  /** The message for admission rejections (`rows` all terminal), or null to send nothing. */
  encodeRejections(step: SimStep): Uint8Array[] | null;
  /** The message for one step, or null to send nothing (TokenSpeed never sends an empty batch). */
  encodeStep(step: SimStep): Uint8Array[] | null;
  /** Utility calls (vLLM: request type `03`), or null for a wire without them. */
  readonly utility: SimUtilityWire | null;
}

/** The utility calls of a wire that has them (vLLM: docs/wire/vllm-utility.md). */
export interface SimUtilityWire {
  /** Decode a UTILITY payload. Throws `WireDecodeError` on a malformed one. */
  decodeCall(payload: Uint8Array): UtilityCall;
  /** The answer to call `callId` of this rank. */
  encodeReply(engineIndex: number, callId: number, outcome: UtilityOutcome): Uint8Array[];
}
