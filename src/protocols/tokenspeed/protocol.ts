/**
 * `EngineProtocol` for TokenSpeed's msgpack mode (engine-wire.md section 4; SMG
 * `protocol/tokenspeed/{request,sampling,output}.rs`): ADD = the 11-element `TokenizedGenerateReqInput` prefix with
 * the full, gateway-normalized 29-element `SamplingParams` (4.3); ABORT = `list[str]` (4.7); outputs =
 * `BatchTokenIDOutSlim` in any form (4.8).
 */
import type { AddTarget, EngineBatch, EngineProtocol, GenerateRequest } from '../types.js';
import { WireDecodeError, WireEncodeError } from '../../wire/errors.js';
import { encodeAbortPayload } from './abort.js';
import { batchToEngineBatch, decodeBatchTokenIDOutSlim } from './output.js';
import { decodeBatchFast } from './output-fast.js';
import { encodeTokenizedGenerateReqInput } from './request.js';
import type { TokenizedGenerateReqInput } from './request.js';
import { toTokenSpeedSamplingParams, validateSamplingParams } from './sampling.js';

/** Options of `createTokenSpeedProtocol`. */
export interface TokenSpeedProtocolOptions {
  /** The model's vocabulary size: enables the `logit_bias` key range check of 4.6. */
  vocabSize?: number;
  /** Called with a finish string other than ''/stop/length/abort/error (it is reported as `stop`). */
  onUnknownFinishReason?: (raw: string) => void;
}

/**
 * Builds the wire struct the gateway sends for one request (4.3): `rid`, nil `http_worker_ipc`/`input_text`,
 * `input_ids`, normalized sampling params, `return_logprob`, `logprob_start_len` −1, `top_logprobs_num` 0, nil
 * `token_ids_logprob`, `stream`; every later field at its default. Throws WireEncodeError naming the field for
 * anything TokenSpeed would refuse with a silent terminal abort (4.6) or cannot decode.
 */
export function toTokenizedGenerateReqInput(
  request: GenerateRequest,
  opts: TokenSpeedProtocolOptions = {},
): TokenizedGenerateReqInput {
  const root = 'TokenizedGenerateReqInput';
  if (typeof request.requestId !== 'string' || request.requestId.length === 0) {
    throw new WireEncodeError(`${root}.rid`, 'request id must be a non-empty string');
  }
  if (!Array.isArray(request.promptTokenIds)) throw new WireEncodeError(`${root}.input_ids`, 'expected an array');
  const ids = request.promptTokenIds;
  for (let i = 0; i < ids.length; i++) {
    const t = ids[i]!;
    if (!Number.isSafeInteger(t) || t < 0) {
      throw new WireEncodeError(`${root}.input_ids[${i}]`, `token id must be an integer ≥ 0, got ${String(t)}`);
    }
  }
  if (typeof request.stream !== 'boolean') throw new WireEncodeError(`${root}.stream`, 'expected a boolean');
  if (typeof request.returnLogprob !== 'boolean') {
    throw new WireEncodeError(`${root}.return_logprob`, 'expected a boolean');
  }
  if ((request.topLogprobs ?? 0) > 0) {
    // SMG refuses more than the sampled token's logprob for TokenSpeed (gateway.md 8); the HTTP layer says so first.
    throw new WireEncodeError(
      `${root}.top_logprobs_num`,
      `${request.topLogprobs} top logprobs requested; TokenSpeed returns only the sampled token's`,
    );
  }
  const s = request.sampling;
  for (const [field, value] of [
    ['max_new_tokens', s.maxNewTokens],
    ['min_new_tokens', s.minNewTokens],
    ['top_k', s.topK],
    ['seed', s.seed],
  ] as const) {
    if (value !== null && !Number.isSafeInteger(value)) {
      throw new WireEncodeError(`${root}.sampling_params.${field}`, `expected an integer, got ${String(value)}`);
    }
  }
  if (s.seed !== null && s.seed < 0) {
    throw new WireEncodeError(`${root}.sampling_params.seed`, `seed must be ≥ 0, got ${s.seed}`);
  }
  for (let i = 0; i < s.stopTokenIds.length; i++) {
    const t = s.stopTokenIds[i]!;
    if (!Number.isSafeInteger(t) || t < 0) {
      throw new WireEncodeError(
        `${root}.sampling_params.stop_token_ids[${i}]`,
        `token id must be an integer ≥ 0, got ${String(t)}`,
      );
    }
  }
  const sampling = toTokenSpeedSamplingParams(s);
  validateSamplingParams(sampling, { vocabSize: opts.vocabSize, path: `${root}.sampling_params` });
  return {
    rid: request.requestId,
    http_worker_ipc: null,
    input_text: null,
    input_ids: [...request.promptTokenIds],
    sampling_params: sampling,
    return_logprob: request.returnLogprob,
    logprob_start_len: -1,
    top_logprobs_num: 0,
    token_ids_logprob: null,
    stream: request.stream,
    input_embeds: null,
    session_params: null,
    custom_logit_processor: null,
    return_hidden_states: false,
    created_time: 0.0,
    bootstrap_host: null,
    bootstrap_port: null,
    bootstrap_room: null,
    input_multi_ids: null,
    input_extra_infos: null,
    input_ids_unpadded: null,
    multimodal_inputs: null,
    validation_error: null,
    data_parallel_rank: null,
  };
}

/**
 * Context tokens TokenSpeed keeps out of reach: it clamps `max_new_tokens` to
 * `min(2^30, (context_len − 1) − prompt_len − 1)` (engine-wire.md 4.4, last paragraph; gateway.md 9.1), so
 * prompt + completion is at most `max_model_len − 2`.
 */
export const TOKENSPEED_RESERVED_CONTEXT_TOKENS = 2;

/**
 * A TokenSpeed `EngineProtocol` (`reservedContextTokens` = {@link TOKENSPEED_RESERVED_CONTEXT_TOKENS}).
 * - `encodeAdd(request, target)` ignores `target`: a pinned rank needs no wire field, the identity frame routes the
 *   ADD (gateway.md 14; newer TokenSpeed's trailing `data_parallel_rank` is never sent, as in SMG). Throws
 *   WireEncodeError naming the field (4.6 checks, see `validateSamplingParams`), and for a pooling request.
 * - No `encodeStartWave`: the TokenSpeed wire has no wave message (engine-wire.md 5.12; dp-routing.md 13.2).
 * - `decodeOutput` reads frame 0 only (aux frames are ignored, 4.8) and throws WireDecodeError naming the field.
 *   Every row reports all three token counts (4.8 `prompt_tokens`, `completion_tokens` (cumulative),
 *   `cached_tokens`), so no `EngineOutputRow` count is ever null.
 */
export function createTokenSpeedProtocol(opts: TokenSpeedProtocolOptions = {}): EngineProtocol {
  return {
    name: 'tokenspeed',
    reservedContextTokens: TOKENSPEED_RESERVED_CONTEXT_TOKENS,
    encodeAdd(request: GenerateRequest, _target?: AddTarget): Uint8Array {
      // TokenSpeed's request has no pooling field: an embedding cannot be asked for (the server never routes one here).
      if (request.pooling !== undefined)
        throw new WireEncodeError('TokenizedGenerateReqInput', 'TokenSpeed serves no pooling (embedding) requests');
      if (request.lora !== undefined)
        throw new WireEncodeError('TokenizedGenerateReqInput', 'the gateway sends LoRA adapters to vLLM groups only');
      return encodeTokenizedGenerateReqInput(toTokenizedGenerateReqInput(request, opts), { form: 'prefix' });
    },
    encodeAbort(requestIds: readonly string[]): Uint8Array {
      return encodeAbortPayload(requestIds);
    },
    decodeOutput(frames: readonly Uint8Array[]): EngineBatch {
      if (frames.length === 0) throw new WireDecodeError('BatchTokenIDOutSlim', 'output message has no frames');
      // The common shape in one pass (output-fast.ts); anything else, errors included, through the schema-driven decoder.
      return (
        decodeBatchFast(frames[0], opts.onUnknownFinishReason) ??
        batchToEngineBatch(decodeBatchTokenIDOutSlim(frames[0]), opts.onUnknownFinishReason)
      );
    },
  };
}

/** The TokenSpeed protocol with default options (no vocabulary-size check, unknown finish strings → `stop`). */
export const tokenspeedProtocol: EngineProtocol = createTokenSpeedProtocol();
