/**
 * What a TokenSpeed rank does to a decoded ADD before its scheduler sees it (engine-wire.md 4.5 and 4.6; TokenSpeed
 * `sampling_params.py` post-init hook, `zmq_wire.py` request finalization, the receive socket's validation):
 *
 * 1. decode-time normalization, only when `is_normalized` is false (`normalizeOnDecode`);
 * 2. finalization, always (`finalizeRequest`): nil `seed` ← CRC-32 of the rid's UTF-8 bytes; `stop_strs` nil → `[]`,
 *    a string → a one-element list; `stop_str_max_len` ← longest stop string in characters; `is_normalized` ← true;
 *    `n != 1` sets `validation_error`;
 * 3. receive-socket validation (`validationErrorOf`): an existing `validation_error` wins; else the logprob gate
 *    (`--enable-output-logprobs`), the sampling checks (shared with the gateway: `validateSamplingParams`), the newer
 *    logprob-start gate, and (decided later in TokenSpeed's request handler, same terminal abort) a non-nil
 *    `session_params.id`.
 *
 * `toSimRequest` turns the result into the scheduler's `SimRequest`. A request with a validation error is still a
 * request: the scheduler admits it finished with one terminal `abort` row.
 */
import { crc32 } from 'node:zlib';
import type { TokenizedGenerateReqInput } from '../protocols/tokenspeed/request.js';
import {
  GREEDY_TEMPERATURE_EPSILON,
  TOP_K_DISABLED,
  validateSamplingParams,
  type TokenSpeedSamplingParams,
} from '../protocols/tokenspeed/sampling.js';
import type { StructuredConstraint } from '../protocols/types.js';
import type { WireInt } from '../wire/reader.js';
import type { SimRequest, TokenSource } from './scheduler.js';

/** An ADD the sim cannot serve at all (no usable rid): the engine logs and drops it, sending nothing. */
export class SimRequestError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SimRequestError';
  }
}

/** TokenSpeed's derived seed: CRC-32 (IEEE, unsigned) of the rid's UTF-8 bytes (engine-wire.md 4.5; `gw-min` → 3819114943). */
export function crc32Seed(rid: string): number {
  return crc32(Buffer.from(rid, 'utf8')) >>> 0;
}

function num(v: WireInt): number {
  return typeof v === 'bigint' ? Number(v) : v;
}

/**
 * The post-init hook msgspec runs on every decode (engine-wire.md 4.5 step 1). With `is_normalized` true nothing
 * changes; otherwise: `stop_strs` ← `stop`; empty `stop_token_ids` → nil, a non-empty one deduplicated; temperature
 * < 1e-6 → 1.0 with `top_k` 1 (greedy); then `top_k` −1 → 2^30. Returns a new object.
 */
export function normalizeOnDecode(p: TokenSpeedSamplingParams): TokenSpeedSamplingParams {
  if (p.is_normalized) return p;
  const out: TokenSpeedSamplingParams = { ...p, stop_strs: p.stop };
  if (out.stop_token_ids !== null) {
    out.stop_token_ids = out.stop_token_ids.length === 0 ? null : [...new Set(out.stop_token_ids)];
  }
  if (out.temperature < GREEDY_TEMPERATURE_EPSILON) {
    out.temperature = 1.0;
    out.top_k = 1;
  }
  if (num(out.top_k) === -1) out.top_k = TOP_K_DISABLED;
  return out;
}

/**
 * Request finalization (engine-wire.md 4.5 step 2), after `normalizeOnDecode`. Returns a new request; never throws.
 * `rid` must be a string for the CRC-32 seed; with any other rid the seed is derived from `""`.
 */
export function finalizeRequest(req: TokenizedGenerateReqInput): TokenizedGenerateReqInput {
  const p: TokenSpeedSamplingParams = { ...normalizeOnDecode(req.sampling_params) };
  if (p.seed === null) p.seed = crc32Seed(typeof req.rid === 'string' ? req.rid : '');
  const stops = p.stop_strs === null ? [] : typeof p.stop_strs === 'string' ? [p.stop_strs] : p.stop_strs;
  p.stop_strs = stops;
  p.stop_str_max_len = stops.reduce((m, s) => Math.max(m, [...s].length), 0);
  p.is_normalized = true;
  let validation_error = req.validation_error;
  if (num(p.n) !== 1 && validation_error === null) {
    validation_error = `n = ${String(p.n)} is not supported: the frontend must fan out n > 1 into separate requests`;
  }
  return { ...req, sampling_params: p, validation_error };
}

/** What the rank knows when it validates a request (engine-wire.md 4.6). */
export interface EngineValidationOptions {
  /** The engine's vocabulary size (`logit_bias` keys must be below it); unchecked when absent. */
  vocabSize?: number;
  /** TokenSpeed `--enable-output-logprobs`; without it a `return_logprob` request is refused. */
  enableOutputLogprobs: boolean;
}

/**
 * The receive-socket validation of a finalized request (engine-wire.md 4.6), returning the reason the engine would
 * abort it, or null. The message never travels back on the wire; the sim logs it.
 */
export function validationErrorOf(req: TokenizedGenerateReqInput, opts: EngineValidationOptions): string | null {
  if (req.validation_error !== null) return req.validation_error;
  if (req.return_logprob && !opts.enableOutputLogprobs) {
    return 'return_logprob requires the engine to be started with --enable-output-logprobs';
  }
  try {
    validateSamplingParams(req.sampling_params, { vocabSize: opts.vocabSize, path: 'sampling_params' });
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
  if (req.return_logprob) {
    const promptLen = req.input_ids?.length ?? 0;
    const start = num(req.logprob_start_len);
    const resolved = start === -1 ? promptLen - 1 : start;
    if (start < -1) return `logprob_start_len ${start} is below -1`;
    if (resolved > promptLen - 1) return `logprob_start_len ${start} is past the prompt (${promptLen} tokens)`;
    if (resolved < promptLen - 1)
      return `logprob_start_len ${start} would produce prompt logprobs, which this engine does not return`;
    if (num(req.top_logprobs_num) !== 0) return `top_logprobs_num ${String(req.top_logprobs_num)} is not supported`;
    if (req.token_ids_logprob !== null) return 'token_ids_logprob is not supported';
  }
  if (req.session_params !== null && req.session_params.id !== null) {
    return `unknown session ${JSON.stringify(req.session_params.id)}`;
  }
  if (req.input_ids === null) return 'input_ids is nil (the engine runs with --skip-tokenizer-init)';
  return null;
}

/** Options of `toSimRequest`. */
export interface ToSimRequestOptions extends EngineValidationOptions {
  /** Builds the token source from the finalized seed, the prompt and the grammar (the text model's `createSource`). */
  tokens: (seed: WireInt, promptTokenIds: readonly number[], constraint: StructuredConstraint | null) => TokenSource;
}

/**
 * Finalize, validate and map a decoded ADD onto the scheduler's `SimRequest`. Throws `SimRequestError` when the rid
 * is not a single string (nil or a batch list): TokenSpeed's single-request path cannot answer such a request, so
 * the engine drops it after logging.
 */
export function toSimRequest(decoded: TokenizedGenerateReqInput, opts: ToSimRequestOptions): SimRequest {
  if (typeof decoded.rid !== 'string') {
    throw new SimRequestError(
      `TokenizedGenerateReqInput.rid: expected a single string, got ${decoded.rid === null ? 'nil' : 'a list'}`,
    );
  }
  const req = finalizeRequest(decoded);
  const p = req.sampling_params;
  const prompt = (req.input_ids ?? []).map(num);
  const interval = p.stream_interval === null ? null : num(p.stream_interval);
  return {
    rid: decoded.rid,
    promptTokenIds: prompt,
    maxNewTokens: p.max_new_tokens === null ? null : num(p.max_new_tokens),
    minNewTokens: Math.max(0, num(p.min_new_tokens)),
    stopTokenIds: p.stop_token_ids === null ? null : p.stop_token_ids.map(num),
    ignoreEos: p.ignore_eos,
    stream: req.stream,
    streamInterval: interval !== null && interval >= 1 ? interval : null,
    returnLogprob: req.return_logprob,
    validationError: validationErrorOf(req, opts),
    tokens: opts.tokens(p.seed ?? 0, prompt, grammarOf(p)),
  };
}

/**
 * The constraint of TokenSpeed's grammar fields (engine-wire.md 4.4 indexes 11..14; at most one is set, validation
 * refuses two): `json_schema` → a JSON schema (parsed when it parses), `regex`, `ebnf` → grammar, `structural_tag`.
 */
export function grammarOf(p: TokenSpeedSamplingParams): StructuredConstraint | null {
  if (p.json_schema !== null) {
    try {
      return { kind: 'json', schema: JSON.parse(p.json_schema) as unknown };
    } catch {
      return { kind: 'json', schema: p.json_schema };
    }
  }
  if (p.regex !== null) return { kind: 'regex', pattern: p.regex };
  if (p.ebnf !== null) return { kind: 'grammar', grammar: p.ebnf };
  if (p.structural_tag !== null) return { kind: 'structural_tag', tag: p.structural_tag };
  return null;
}
