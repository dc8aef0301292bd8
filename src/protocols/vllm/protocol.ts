/**
 * `EngineProtocol` for vLLM EngineCore ranks (engine-wire.md section 5; SMG `protocol/vllm/*.rs`): ADD = the full
 * 21-element `EngineCoreRequest` with the sparse sampling map (5.2, 5.3); ABORT = `list[str]`, the same bytes as
 * TokenSpeed's (5.4, 4.7); START_DP_WAVE = `[wave, nil]` (5.7); outputs = `EngineCoreOutputs` in any shape (5.8).
 *
 * Stateful: it keeps each in-flight request's running completion count and its prefill-reported prompt/cached tokens
 * (5.9 "Token counts"), so use one instance per engine client (`createVllmProtocol`).
 */
import type { EngineProtocol } from '../types.js';
import type { WireInt } from '../../wire/reader.js';
import { WireDecodeError } from '../../wire/errors.js';
import { encodeAbortPayload } from '../tokenspeed/abort.js';
import type { VllmEosConfig } from './eos.js';
import { decodeEngineCoreOutputs, engineCoreOutputsToEngineBatch, RequestTokenCounts } from './output.js';
import type { VllmEngineBatch } from './output.js';
import { encodeEngineCoreRequest, toEngineCoreRequest } from './request.js';
import type { VllmGenerateRequest } from './request.js';
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
}

/** The vLLM protocol: an `EngineProtocol` plus what lockstep groups and the seam extensions need. */
export interface VllmProtocol extends EngineProtocol {
  readonly name: 'vllm';
  /** Context tokens the engine keeps back from `max_model_len − prompt` (vLLM: none). */
  readonly reservedContextTokens: number;
  /** `encodeAdd` accepts the pinned rank as `dpRank` (sent as `data_parallel_rank`). */
  encodeAdd(request: VllmGenerateRequest): Uint8Array;
  /** Decodes to `VllmEngineBatch` (the wave event in `wave`, `stopReason` on each output). */
  decodeOutput(frames: readonly Uint8Array[]): VllmEngineBatch;
  /** The START_DP_WAVE payload `[wave, nil]` (engine-wire.md 5.7), sent to every rank of a lockstep group. */
  encodeStartWave(wave: WireInt): Uint8Array;
  /** Requests whose token counts are still held (finished and aborted ones are dropped). For tests and metrics. */
  readonly trackedRequests: number;
}

/**
 * Builds a vLLM protocol instance. `encodeAdd` throws WireEncodeError naming the field (see `toEngineCoreRequest`);
 * `encodeAbort` forgets the ids' token counts (the gateway retires aborted requests locally, 5.4); `decodeOutput`
 * throws WireDecodeError naming the field for anything malformed or an invalid envelope shape (5.8).
 */
export function createVllmProtocol(opts: VllmProtocolOptions = {}): VllmProtocol {
  const counts = new RequestTokenCounts();
  const now = opts.now ?? Date.now;
  const maxModelLen = (): number | undefined =>
    typeof opts.maxModelLen === 'function' ? opts.maxModelLen() : opts.maxModelLen;
  return {
    name: 'vllm',
    reservedContextTokens: 0,
    encodeAdd(request: VllmGenerateRequest): Uint8Array {
      const wire = toEngineCoreRequest(request, {
        arrivalTime: now() / 1000,
        maxModelLen: request.sampling?.maxNewTokens === null ? maxModelLen() : undefined,
        eos: opts.eos,
        onWarning: opts.onWarning,
      });
      return encodeEngineCoreRequest(wire);
    },
    encodeAbort(requestIds: readonly string[]): Uint8Array {
      const payload = encodeAbortPayload(requestIds);
      requestIds.forEach((id) => counts.forget(id));
      return payload;
    },
    decodeOutput(frames: readonly Uint8Array[]): VllmEngineBatch {
      if (frames.length === 0) throw new WireDecodeError('EngineCoreOutputs', 'output message has no frames');
      return engineCoreOutputsToEngineBatch(decodeEngineCoreOutputs(frames), counts);
    },
    encodeStartWave(wave: WireInt): Uint8Array {
      return encodeStartDpWave(wave, null);
    },
    get trackedRequests(): number {
      return counts.size;
    },
  };
}

/**
 * A shared vLLM protocol with default options (no EOS ids, no `max_model_len`: every request must carry a token
 * limit). It holds per-request token counts, so an engine client should prefer its own `createVllmProtocol()`.
 */
export const vllmProtocol: VllmProtocol = createVllmProtocol();
