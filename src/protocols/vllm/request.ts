/**
 * vLLM `EngineCoreRequest`, the ADD payload (engine-wire.md 5.2; vLLM `v1/engine/__init__.py`, SMG
 * `protocol/vllm/*.rs`): an **untagged** positional array. SMG always sends the full 21 elements (20 before
 * `session_id`, SMG PR #2175); indices 0..5 are required on decode, later ones default; extra trailing elements
 * are drained (3.2). Nested: the sampling map (5.3, `sampling.ts`) and `LoraRequest`.
 */
import type { GenerateRequest, LoraTarget } from '../types.js';
import {
  anyValue,
  bool,
  decodeMessage,
  float,
  int,
  list,
  namedMap,
  nullable,
  positional,
  str,
  strMap,
} from '../../wire/codec.js';
import { WireEncodeError } from '../../wire/errors.js';
import type { WireInt } from '../../wire/reader.js';
import { MsgpackWriter } from '../../wire/writer.js';
import { toVllmSamplingParams, vllmSamplingParamsCodec } from './sampling.js';
import type { VllmSamplingParams } from './sampling.js';
import type { VllmEosConfig } from './eos.js';
import { poolingParamsCodec, toPoolingParams, type PoolingParams } from './pooling.js';

/** vLLM `LoraRequest` (5.2): positional; sent for a request that names an adapter (utility.ts `toLoraRequest`). */
export interface LoraRequest {
  lora_name: string;
  lora_int_id: WireInt;
  lora_path: string;
  base_model_name: string | null;
  tensorizer_config_dict: unknown;
  load_inplace: boolean;
  is_3d_lora_weight: boolean;
}

/** `LoraRequest` codec: 3 required fields, then nil, nil, false, false defaults. */
export const loraRequestCodec = positional<LoraRequest>({
  name: 'LoraRequest',
  fields: [
    { name: 'lora_name', codec: str },
    { name: 'lora_int_id', codec: int },
    { name: 'lora_path', codec: str },
    { name: 'base_model_name', codec: nullable(str), dflt: () => null },
    { name: 'tensorizer_config_dict', codec: anyValue, dflt: () => null },
    { name: 'load_inplace', codec: bool, dflt: () => false },
    { name: 'is_3d_lora_weight', codec: bool, dflt: () => false },
  ],
});

/** The wire `LoRARequest` of `target` (engine-wire.md 5.2 `LoraRequest`; the defaults of the last four fields). */
export function toLoraRequest(target: LoraTarget): LoraRequest {
  return {
    lora_name: target.name,
    lora_int_id: target.id,
    lora_path: target.path,
    base_model_name: target.baseModelName,
    tensorizer_config_dict: null,
    load_inplace: false,
    is_3d_lora_weight: false,
  };
}

/** `reasoning_parser_kwargs` (5.2 index 18): `{chat_template_kwargs: map}`. */
export interface ReasoningParserKwargs {
  chat_template_kwargs: Record<string, unknown>;
}

const reasoningParserKwargsCodec = namedMap<ReasoningParserKwargs>({
  name: 'ReasoningParserKwargs',
  fields: [{ name: 'chat_template_kwargs', codec: strMap(anyValue) }],
});

/** Every field of `EngineCoreRequest`, wire order, upstream names (engine-wire.md 5.2). */
export interface EngineCoreRequest {
  /** 0: the engine request id. */
  request_id: string;
  /** 1: the tokenized prompt. */
  prompt_token_ids: WireInt[] | null;
  /** 2: multimodal feature maps (5.5); nil for text. Kept generic. */
  mm_features: unknown[] | null;
  /** 3: the sampling map (5.3). */
  sampling_params: VllmSamplingParams | null;
  /** 4: nil for generation; a pooling request's `PoolingParams` (pooling.ts), with nil `sampling_params`. */
  pooling_params: PoolingParams | null;
  /** 5: Unix time in seconds (float64). */
  arrival_time: number;
  lora_request: LoraRequest | null;
  cache_salt: string | null;
  /** 8: the pinned DP rank, else nil (routing itself is by identity). */
  data_parallel_rank: WireInt | null;
  /** 9: must be nil; the gateway refuses to send anything else. */
  prompt_embeds: unknown;
  prompt_is_token_ids: boolean[] | null;
  client_index: WireInt;
  current_wave: WireInt;
  priority: WireInt;
  trace_headers: Record<string, string> | null;
  resumable: boolean;
  external_req_id: string | null;
  reasoning_ended: boolean | null;
  reasoning_parser_kwargs: ReasoningParserKwargs | null;
  abort_immediately: boolean;
  /** 20: added in SMG PR #2175. */
  session_id: string | null;
}

/** The positional codec (21 fields; minimum 6 elements). */
export const engineCoreRequestCodec = positional<EngineCoreRequest>({
  name: 'EngineCoreRequest',
  fields: [
    { name: 'request_id', codec: str },
    { name: 'prompt_token_ids', codec: nullable(list(int)) },
    { name: 'mm_features', codec: nullable(list(anyValue)) },
    { name: 'sampling_params', codec: nullable(vllmSamplingParamsCodec) },
    { name: 'pooling_params', codec: nullable(poolingParamsCodec) },
    { name: 'arrival_time', codec: float },
    { name: 'lora_request', codec: nullable(loraRequestCodec), dflt: () => null },
    { name: 'cache_salt', codec: nullable(str), dflt: () => null },
    { name: 'data_parallel_rank', codec: nullable(int), dflt: () => null },
    { name: 'prompt_embeds', codec: anyValue, dflt: () => null },
    { name: 'prompt_is_token_ids', codec: nullable(list(bool)), dflt: () => null },
    { name: 'client_index', codec: int, dflt: () => 0 },
    { name: 'current_wave', codec: int, dflt: () => 0 },
    { name: 'priority', codec: int, dflt: () => 0 },
    { name: 'trace_headers', codec: nullable(strMap(str)), dflt: () => null },
    { name: 'resumable', codec: bool, dflt: () => false },
    { name: 'external_req_id', codec: nullable(str), dflt: () => null },
    { name: 'reasoning_ended', codec: nullable(bool), dflt: () => null },
    { name: 'reasoning_parser_kwargs', codec: nullable(reasoningParserKwargsCodec), dflt: () => null },
    { name: 'abort_immediately', codec: bool, dflt: () => false },
    { name: 'session_id', codec: nullable(str), dflt: () => null },
  ],
});

/** Element count SMG sends (engine-wire.md 3.3, 5.2). */
export const ENGINE_CORE_REQUEST_LENGTH = 21;

/**
 * Encodes an ADD payload: always the full 21-element array (3.3), smallest ints, float64 floats, the sparse sampling
 * map. Throws WireEncodeError naming the field for a value the wire cannot carry, a non-nil `prompt_embeds` (SMG
 * refuses to send it) or a negative `data_parallel_rank`.
 */
export function encodeEngineCoreRequest(req: EngineCoreRequest): Uint8Array {
  const root = 'EngineCoreRequest';
  if (req === null || typeof req !== 'object') throw new WireEncodeError(root, 'expected an object');
  if (req.prompt_embeds !== null && req.prompt_embeds !== undefined) {
    throw new WireEncodeError(`${root}.prompt_embeds`, 'must be nil (prompt embeddings are not sent)');
  }
  const rank = req.data_parallel_rank;
  if (rank !== null && rank !== undefined && rank < 0) {
    throw new WireEncodeError(`${root}.data_parallel_rank`, `must be ≥ 0, got ${String(rank)}`);
  }
  const w = scratch;
  w.reset();
  engineCoreRequestCodec.encodeWith(w, req, root, { length: ENGINE_CORE_REQUEST_LENGTH });
  return w.take();
}

/** The writer every ADD is encoded in (synchronously, one at a time); each result is a copy of its own. */
const scratch = new MsgpackWriter(256);

/**
 * Decodes an ADD payload as EngineCore's msgspec decoder does (the simulated vLLM rank's side): at least 6 elements
 * (`request_id` .. `arrival_time`), absent trailing fields defaulted, extra elements drained, strict scalar typing,
 * trailing bytes refused. Integers beyond ±(2^53−1) come back as bigint. Throws WireDecodeError naming the field.
 */
export function decodeEngineCoreRequest(bytes: Uint8Array): EngineCoreRequest {
  return decodeMessage(engineCoreRequestCodec, bytes, 'EngineCoreRequest');
}

/** What `toEngineCoreRequest` needs beyond the request. */
export interface EngineCoreRequestContext {
  /** Unix time in **seconds** for `arrival_time` (float). */
  arrivalTime: number;
  /**
   * The pinned DP rank (the seam's `AddTarget.dpRank`; gateway.md 14), sent as `data_parallel_rank`; null or absent
   * for an unpinned request (nil on the wire: routing itself is by identity, engine-wire.md 1.5).
   */
  dpRank?: number | null;
  /** Tokens, from the handshake; used when the request sets no token limit (gateway.md 9.1). */
  maxModelLen?: number;
  /** Connect-time EOS ids (gateway.md 7). */
  eos?: Readonly<VllmEosConfig>;
  onWarning?: (message: string) => void;
}

/**
 * Builds the wire struct the gateway sends (engine-wire.md 5.2 "Gateway sends"): `request_id`, the prompt, nil
 * multimodal/pooling/LoRA/salt/embeddings, the sampling map (`toVllmSamplingParams`; `logprobs` = `topLogprobs`
 * (default 0, the sampled token only) when `returnLogprob`: EngineCore then returns k ranked candidates per position,
 * engine-wire.md 5.6), `arrival_time`, `data_parallel_rank` = `ctx.dpRank` when pinned, every
 * later field at its default. `stream` has no vLLM field (EngineCore reports every step). Throws WireEncodeError
 * naming the field: empty request id, a prompt token that is not an integer ≥ 0, a negative or non-integer
 * `dpRank`, a non-finite `arrivalTime`, or any sampling error.
 */
export function toEngineCoreRequest(request: GenerateRequest, ctx: EngineCoreRequestContext): EngineCoreRequest {
  const root = 'EngineCoreRequest';
  if (typeof request.requestId !== 'string' || request.requestId.length === 0) {
    throw new WireEncodeError(`${root}.request_id`, 'request id must be a non-empty string');
  }
  if (!Array.isArray(request.promptTokenIds))
    throw new WireEncodeError(`${root}.prompt_token_ids`, 'expected an array');
  request.promptTokenIds.forEach((t, i) => {
    if (!Number.isSafeInteger(t) || t < 0) {
      throw new WireEncodeError(`${root}.prompt_token_ids[${i}]`, `token id must be an integer ≥ 0, got ${String(t)}`);
    }
  });
  const rank = ctx.dpRank ?? null;
  if (rank !== null && (!Number.isSafeInteger(rank) || rank < 0)) {
    throw new WireEncodeError(`${root}.data_parallel_rank`, `must be an integer ≥ 0, got ${String(rank)}`);
  }
  if (typeof ctx.arrivalTime !== 'number' || !Number.isFinite(ctx.arrivalTime)) {
    throw new WireEncodeError(
      `${root}.arrival_time`,
      `expected a finite number of seconds, got ${String(ctx.arrivalTime)}`,
    );
  }
  if (typeof request.returnLogprob !== 'boolean') {
    throw new WireEncodeError(`${root}.sampling_params.logprobs`, 'returnLogprob must be a boolean');
  }
  // A pooling request carries PoolingParams instead of a sampling map (docs/wire/vllm-pooling.md).
  const pooling = request.pooling === undefined ? null : toPoolingParams(request.pooling);
  const sampling =
    pooling !== null
      ? null
      : toVllmSamplingParams(request.sampling, {
          promptTokens: request.promptTokenIds.length,
          maxModelLen: ctx.maxModelLen,
          logprobs: request.returnLogprob ? (request.topLogprobs ?? 0) : null,
          eos: ctx.eos,
          onWarning: ctx.onWarning,
          path: `${root}.sampling_params`,
        });
  return {
    request_id: request.requestId,
    prompt_token_ids: [...request.promptTokenIds],
    mm_features: null,
    sampling_params: sampling,
    pooling_params: pooling,
    arrival_time: ctx.arrivalTime,
    lora_request: request.lora === undefined ? null : toLoraRequest(request.lora),
    cache_salt: null,
    data_parallel_rank: rank,
    prompt_embeds: null,
    prompt_is_token_ids: null,
    client_index: 0,
    current_wave: 0,
    priority: request.priority ?? 0,
    trace_headers: request.trace === undefined ? null : { ...request.trace },
    resumable: false,
    external_req_id: null,
    reasoning_ended: null,
    reasoning_parser_kwargs: null,
    abort_immediately: false,
    session_id: null,
  };
}
