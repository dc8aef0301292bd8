/**
 * What the simulated vLLM EngineCore does with a decoded `EngineCoreRequest` (engine-wire.md 5.2, 5.3) before its
 * scheduler sees it:
 *
 * - Stop conditions come only from the request, as vLLM's `check_stop` reads them: `_eos_token_id` (an EOS finish,
 *   no stop reason) and `stop_token_ids` (a stop finish whose `stop_reason` is the matched id). The engine adds no
 *   EOS of its own: EngineCore has no tokenizer, so the gateway folds the EOS ids into the map (gateway.md 7). The
 *   map has no `ignore_eos` key: the gateway expresses it by leaving EOS out of `stop_token_ids` and `_eos_token_id`
 *   (5.3). `_all_stop_token_ids` only matters below `min_tokens`, where every stop is masked anyway.
 * - `max_tokens` is always present after decoding (decode default 16, 5.3); the output limit is
 *   `min(max_tokens, max_model_len − prompt_len)` (`vllmMaxNewTokens`).
 * - EngineCore reports every step, so each request gets a row per generated token (`stream` with interval 1).
 * - `logprobs` non-nil asks for the sampled token's logprob (the sim sends only column 0, whatever k).
 * - A nil `seed` is derived from the request id (CRC-32, like TokenSpeed's): a sim choice for reproducibility; real
 *   vLLM draws a random one.
 *
 * - A pooling request (nil `sampling_params`, `PoolingParams` with task `embed`) is prefilled and answered with its
 *   pooled vector (pooling.ts), as a vLLM embedding model's EngineCore does.
 *
 * A request EngineCore cannot serve (nil prompt, prompt embeddings, multimodal features, a pooling task other than
 * `embed`, a token id or
 * `logit_bias` key outside the vocabulary, an empty prompt, a prompt beyond the context or the KV cache) is not an
 * exception: it gets a `validationError`, and the engine answers it at once with a terminal output whose
 * `finish_reason` is 3 (error), as vLLM's input thread answers a request whose preprocessing failed
 * (`_handle_request_preproc_error`). Only an ADD with no usable request id is dropped (`SimRequestError`).
 */
import type { EngineCoreRequest } from '../protocols/vllm/request.js';
import { OUTPUT_KIND_FINAL_ONLY, type PoolingParams } from '../protocols/vllm/pooling.js';
import { SIM_EMBEDDING_SIZE } from './pooling.js';
import type { StructuredOutputsParams } from '../protocols/vllm/sampling.js';
import type { StructuredConstraint } from '../protocols/types.js';
import type { WireInt } from '../wire/reader.js';
import { SimRequestError, crc32Seed } from './request.js';
import type { SimRequest, TokenSource } from './scheduler.js';

/** Options of `toVllmSimRequest`. */
export interface VllmSimRequestOptions {
  /** Vocabulary size: prompt token ids and `logit_bias` keys must be below it; unchecked when absent. */
  vocabSize?: number;
  /** The token source from the seed, the prompt and the structured-output constraint. */
  tokens: (seed: WireInt, promptTokenIds: readonly number[], constraint: StructuredConstraint | null) => TokenSource;
}

/** A wire integer as a number; a bigint beyond ±(2^53 − 1) saturates to the safe range's bound. */
function toNumber(v: WireInt): number {
  if (typeof v === 'number') return v;
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) return Number.MAX_SAFE_INTEGER;
  if (v < BigInt(Number.MIN_SAFE_INTEGER)) return Number.MIN_SAFE_INTEGER;
  return Number(v);
}

/** The constraint a decoded `structured_outputs` map sets (engine-wire.md 5.3: exactly one key; decode checked it). */
export function constraintOf(so: StructuredOutputsParams): StructuredConstraint | null {
  if (so.json !== null && so.json !== undefined) return { kind: 'json', schema: so.json };
  if (so.json_object === true) return { kind: 'json_object' };
  if (so.regex !== null) return { kind: 'regex', pattern: so.regex };
  if (so.choice !== null) return { kind: 'choice', choices: so.choice };
  if (so.grammar !== null) return { kind: 'grammar', grammar: so.grammar };
  if (so.structural_tag !== null) return { kind: 'structural_tag', tag: so.structural_tag };
  return null;
}

/** Why EngineCore cannot serve `req`, or null (checked in field order). */
export function vllmValidationErrorOf(req: EngineCoreRequest, opts: { vocabSize?: number }): string | null {
  if (req.prompt_embeds !== null && req.prompt_embeds !== undefined)
    return 'prompt_embeds are not served by this engine';
  if (req.prompt_token_ids === null) return 'prompt_token_ids is nil (this engine serves token prompts only)';
  if (req.mm_features !== null && req.mm_features.length > 0)
    return 'mm_features: multimodal inputs are not served by this engine';
  const pooling = req.pooling_params;
  if (req.sampling_params === null && pooling === null) return 'sampling_params and pooling_params are both nil';
  if (req.sampling_params !== null && pooling !== null) return 'sampling_params and pooling_params are both set';
  const poolingError = pooling === null ? null : poolingProblem(pooling);
  if (poolingError !== null) return poolingError;
  const vocab = opts.vocabSize;
  for (let i = 0; i < req.prompt_token_ids.length; i++) {
    const t = toNumber(req.prompt_token_ids[i]);
    if (t < 0 || (vocab !== undefined && t >= vocab)) {
      return `prompt_token_ids[${i}]: token id ${String(req.prompt_token_ids[i])} is outside the vocabulary [0, ${vocab ?? '∞'})`;
    }
  }
  if (pooling !== null) return null;
  const p = req.sampling_params!;
  if (toNumber(p.max_tokens) < 0) return `sampling_params.max_tokens: ${String(p.max_tokens)} must be ≥ 0`;
  if (toNumber(p.min_tokens) < 0) return `sampling_params.min_tokens: ${String(p.min_tokens)} must be ≥ 0`;
  if (p.logit_bias !== null && vocab !== undefined) {
    for (const k of p.logit_bias.keys()) {
      if (k < 0 || k >= vocab)
        return `sampling_params.logit_bias: token id ${k} is outside the vocabulary [0, ${vocab})`;
    }
  }
  return null;
}

/**
 * Why the simulated pooler cannot serve `p` (vLLM's `PoolingParams.verify` for a Matryoshka `embed` model of
 * `SIM_EMBEDDING_SIZE` elements), or null: the task must be `embed`, `dimensions` in 1..SIM_EMBEDDING_SIZE, the
 * output kind FINAL_ONLY, no step pooling.
 */
function poolingProblem(p: PoolingParams): string | null {
  if (p.task !== 'embed') return `pooling_params.task: ${JSON.stringify(p.task)} is not served (this model embeds)`;
  if (toNumber(p.output_kind) !== OUTPUT_KIND_FINAL_ONLY) return 'pooling_params.output_kind must be FINAL_ONLY (2)';
  if (p.step_tag_id !== null || p.returned_token_ids !== null)
    return 'pooling_params: step pooling is not served by this model';
  const d = p.dimensions === null ? null : toNumber(p.dimensions);
  if (d !== null && (d < 1 || d > SIM_EMBEDDING_SIZE))
    return `pooling_params.dimensions: ${d} is outside 1..${SIM_EMBEDDING_SIZE}`;
  return null;
}

/**
 * Maps a decoded `EngineCoreRequest` onto the scheduler's request (see the module comment), plus the wave the
 * sender named (`current_wave`, index 12). Throws `SimRequestError` for an empty `request_id` (nothing to answer to).
 */
export function toVllmSimRequest(
  req: EngineCoreRequest,
  opts: VllmSimRequestOptions,
): { request: SimRequest; requestWave: number } {
  if (req.request_id.length === 0) throw new SimRequestError('EngineCoreRequest.request_id: empty request id');
  const validationError = vllmValidationErrorOf(req, opts);
  const prompt = (req.prompt_token_ids ?? []).map(toNumber);
  const p = req.sampling_params;
  const seed: WireInt = p?.seed ?? crc32Seed(req.request_id);
  const request: SimRequest = {
    rid: req.request_id,
    promptTokenIds: prompt,
    maxNewTokens: p === null ? 16 : Math.max(0, toNumber(p.max_tokens)),
    minNewTokens: p === null ? 0 : Math.max(0, toNumber(p.min_tokens)),
    stopTokenIds: p === null ? null : p.stop_token_ids.map(toNumber),
    eosTokenIds: p === null || p._eos_token_id === null ? [] : [toNumber(p._eos_token_id)],
    ignoreEos: false,
    stream: true,
    streamInterval: 1,
    returnLogprob: p !== null && p.logprobs !== null,
    validationError,
    tokens: opts.tokens(seed, prompt, p?.structured_outputs ? constraintOf(p.structured_outputs) : null),
    priority: toNumber(req.priority),
  };
  // The gateway's W3C trace context (engine-wire.md 5.2 element 14): a rank that traces makes its span a child of it.
  if (req.trace_headers !== null) request.traceHeaders = req.trace_headers;
  const lora = req.lora_request;
  if (lora !== null) request.lora = { id: toNumber(lora.lora_int_id), name: lora.lora_name, path: lora.lora_path };
  const pooling = req.pooling_params;
  if (pooling !== null) {
    request.maxNewTokens = 0;
    request.pooling = {
      dimensions: pooling.dimensions === null ? SIM_EMBEDDING_SIZE : toNumber(pooling.dimensions),
      // vLLM's frontend resolves a nil use_activation to true before the engine sees it; the engine treats nil as off.
      normalize: pooling.use_activation === true,
    };
  }
  return { request, requestWave: Math.max(0, toNumber(req.current_wave)) };
}
