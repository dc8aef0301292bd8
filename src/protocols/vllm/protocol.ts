/**
 * `EngineProtocol` for vLLM EngineCore ranks (engine-wire.md section 5; SMG `protocol/vllm/*.rs`): ADD = the full
 * 21-element `EngineCoreRequest` with the sparse sampling map (5.2, 5.3) and the pinned rank as
 * `data_parallel_rank` (gateway.md 14); ABORT = `list[str]`, the same bytes as TokenSpeed's (5.4, 4.7);
 * START_DP_WAVE = `[wave, nil]` (5.7); outputs = `EngineCoreOutputs` in any shape (5.8), wave notices as
 * `EngineBatch.wave` (5.12).
 *
 * Each rank's outputs are decoded in the `EngineCoreOutput` layout its engine sends (13 or 16 fields,
 * docs/wire/vllm-output.md), decided once per rank process from its ready response's version or the shape of its
 * outputs (layout.ts). That per-rank memory is the only state: per-request token counts are not kept here (5.9
 * "Token counts": the engine client's per-request stream keeps the running completion total and the last
 * `prefill_stats` values). Build one instance per engine group (engine indices are per group).
 */
import { encodeUtilityCall, type UtilityArg } from './utility.js';
import type { AddTarget, EngineBatch, EngineProtocol, GenerateRequest, ReadyResponse } from '../types.js';
import type { WireInt } from '../../wire/reader.js';
import { WireDecodeError } from '../../wire/errors.js';
import { encodeAbortPayload } from '../tokenspeed/abort.js';
import type { VllmEosConfig } from './eos.js';
import { OutputLayouts } from './layout.js';
import type { OutputLayoutDecision } from './layout.js';
import {
  decodeEngineCoreOutputs,
  detectOutputLayout,
  engineCoreOutputsToEngineBatch,
  peekEngineIndex,
} from './output.js';
import type { EngineCoreOutputLayout } from './output.js';
import { encodeEngineCoreRequest, toEngineCoreRequest } from './request.js';
import { encodeStartDpWave } from './wave.js';

/** Options of `createVllmProtocol`. */
export interface VllmProtocolOptions {
  /**
   * Tokens (the first engine's ready response, gateway.md 9.1), or a getter for it (the handshake may finish after
   * the protocol is built). Used only for a request without a token limit.
   */
  maxModelLen?: number | (() => number | undefined);
  /** Connect-time EOS ids (gateway.md 7; `resolveEosConfig`). Default: none. */
  eos?: Readonly<VllmEosConfig>;
  /** Wall clock in **milliseconds** since the Unix epoch, for `arrival_time` (default `Date.now`). */
  now?: () => number;
  /** Called with a message for dropped inputs (negative `logit_bias` ids). */
  onWarning?: (message: string) => void;
  /**
   * Called once per rank process when its `EngineCoreOutput` layout is decided (from its ready response's version or
   * its outputs' shape; layout.ts). The gateway logs it.
   */
  onOutputLayout?: (decision: OutputLayoutDecision) => void;
}

/** The vLLM protocol: an `EngineProtocol` whose wave message is always present. */
export interface VllmProtocol extends EngineProtocol {
  readonly name: 'vllm';
  /** Context tokens the engine keeps back from `max_model_len − prompt` (vLLM: none). */
  readonly reservedContextTokens: number;
  /**
   * The START_DP_WAVE payload `[wave, nil]` (engine-wire.md 5.7), sent to every rank of a lockstep group. Accepts
   * the full u64 range as a bigint. Throws WireEncodeError for a wave outside [0, 2^64−1].
   */
  encodeStartWave(wave: WireInt): Uint8Array;
  /** The layout decided for rank `engineIndex` (13 or 16 fields), or undefined while undecided. */
  outputLayoutOf(engineIndex: number): EngineCoreOutputLayout | undefined;
}

/**
 * Builds a vLLM protocol instance. `encodeAdd(request, target)` sets `data_parallel_rank` = `target.dpRank` (nil when
 * unpinned or `target` is absent) and throws WireEncodeError naming the field (see `toEngineCoreRequest`);
 * `decodeOutput` decodes in the layout of the rank the payload's `engine_index` names (undecided: the layout the
 * payload's shape shows, remembered for the rank once the message decodes; ambiguous: the 16-field codec, which reads
 * ambiguous outputs the same) and throws WireDecodeError naming the field for anything malformed or an invalid
 * envelope shape (5.8). `noteRankJoined` resets the rank's layout and reads its ready response's `vllm_version`.
 */
export function createVllmProtocol(opts: VllmProtocolOptions = {}): VllmProtocol {
  const now = opts.now ?? Date.now;
  const layouts = new OutputLayouts(opts.onOutputLayout);
  const maxModelLen = (): number | undefined =>
    typeof opts.maxModelLen === 'function' ? opts.maxModelLen() : opts.maxModelLen;
  return {
    name: 'vllm',
    reservedContextTokens: 0,
    encodeAdd(request: GenerateRequest, target?: AddTarget): Uint8Array {
      const wire = toEngineCoreRequest(request, {
        arrivalTime: now() / 1000,
        maxModelLen: request.sampling?.maxNewTokens === null ? maxModelLen() : undefined,
        eos: opts.eos,
        onWarning: opts.onWarning,
        dpRank: target?.dpRank ?? null,
      });
      return encodeEngineCoreRequest(wire);
    },
    encodeAbort(requestIds: readonly string[]): Uint8Array {
      return encodeAbortPayload(requestIds);
    },
    decodeOutput(frames: readonly Uint8Array[]): EngineBatch {
      if (frames.length === 0) throw new WireDecodeError('EngineCoreOutputs', 'output message has no frames');
      const rank = peekEngineIndex(frames[0]!);
      const known = rank === null ? undefined : layouts.of(rank);
      if (known !== undefined) return engineCoreOutputsToEngineBatch(decodeEngineCoreOutputs(frames, known));
      // Undecided: only until the rank's first message that shows its layout (real vLLM: its first output).
      const shown = detectOutputLayout(frames[0]!);
      const batch = engineCoreOutputsToEngineBatch(decodeEngineCoreOutputs(frames, shown?.layout ?? 16));
      // Remembered only for a message that decoded: garbage cannot fix a rank's layout.
      if (shown !== null && rank !== null) layouts.noteShape(rank, shown);
      return batch;
    },
    noteRankJoined(engineIndex: number, ready: ReadyResponse): void {
      layouts.noteJoined(engineIndex, ready.vllmVersion);
    },
    outputLayoutOf: (engineIndex) => layouts.of(engineIndex),
    encodeStartWave(wave: WireInt): Uint8Array {
      return encodeStartDpWave(wave, null);
    },
    encodeUtility(callId: number, method: string, args: readonly unknown[]): Uint8Array {
      return encodeUtilityCall(callId, method, args as readonly UtilityArg[]);
    },
  };
}

/**
 * A vLLM protocol with default options (no EOS ids, no `max_model_len`: every request must carry a token limit,
 * `arrival_time` from `Date.now`, layout decisions not reported). It remembers output layouts per engine index, so
 * an engine client should build its own (`createVllmProtocol`).
 */
export const vllmProtocol: VllmProtocol = createVllmProtocol();
