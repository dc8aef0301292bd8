/**
 * vLLM `SamplingParams` as EngineCore receives it (engine-wire.md 5.3; SMG `protocol/vllm/*.rs`; vLLM
 * `sampling_params.py`): a **named map** nested in `EngineCoreRequest` element 3. Every key is optional on decode
 * (defaults below); on encode the non-optional keys are always written and the optional ones only when they hold a
 * value (nil-valued keys omitted; `logit_bias` also omitted when empty). Keys in declaration order (irrelevant to
 * decoding). Float keys are written as float64 (`cb`): SMG writes float32, vLLM decodes either width, and float64
 * passes the user's value through unrounded (engine-wire.md 3.5, "the safer choice").
 *
 * Also: the `structured_outputs` map, `repetition_detection`, and the mapping from the engine-neutral
 * `SamplingOptions` (gateway.md sections 7, 8, 9.1).
 */
import type { SamplingOptions, StructuredOutput } from '../types.js';
import { anyValue, bool, float, int, list, namedMap, nullable, str, strMap } from '../../wire/codec.js';
import type { Codec } from '../../wire/codec.js';
import { WireDecodeError, WireEncodeError } from '../../wire/errors.js';
import type { WireInt } from '../../wire/reader.js';
import { describe } from '../../wire/writer.js';
import { applyEosTokenIds, NO_EOS } from './eos.js';
import type { VllmEosConfig } from './eos.js';
import { omitNull, sparseMap } from '../../wire/sparse-map.js';

/** `repetition_detection` (engine-wire.md 5.3): a named map; `min_pattern_size` defaults to 0. */
export interface RepetitionDetectionParams {
  max_pattern_size: WireInt;
  min_pattern_size: WireInt;
  min_count: WireInt;
}

/** Codec of `repetition_detection` (all three keys written; `max_pattern_size` and `min_count` required on decode). */
export const repetitionDetectionCodec = namedMap<RepetitionDetectionParams>({
  name: 'RepetitionDetectionParams',
  fields: [
    { name: 'max_pattern_size', codec: int },
    { name: 'min_pattern_size', codec: int, dflt: () => 0 },
    { name: 'min_count', codec: int },
  ],
});

/**
 * `structured_outputs` (engine-wire.md 5.3): exactly one constraint key among `json` (any JSON value), `regex`,
 * `choice`, `grammar`, `json_object` (must be true), `structural_tag`; options; `_backend`. null = key absent.
 */
export interface StructuredOutputsParams {
  json: unknown;
  regex: string | null;
  choice: string[] | null;
  grammar: string | null;
  json_object: boolean | null;
  structural_tag: string | null;
  /** Written only when true. */
  disable_any_whitespace: boolean;
  /** Written only when true. */
  disable_additional_properties: boolean;
  whitespace_pattern: string | null;
  /**
   * Always written on encode, derived from the constraint: `xgrammar` for a structural tag, else `guidance`
   * (the value held here is ignored on encode). On decode: what the peer sent (ignored by the gateway), or null.
   */
  _backend: string | null;
}

/** The six constraint keys of `structured_outputs`, exactly one of which must be set. */
export const STRUCTURED_OUTPUT_CONSTRAINTS = [
  'json',
  'regex',
  'choice',
  'grammar',
  'json_object',
  'structural_tag',
] as const;

const omitFalse = (v: boolean): boolean => v !== true;

const structuredOutputsMap = sparseMap<StructuredOutputsParams>({
  name: 'StructuredOutputsParams',
  fields: [
    { name: 'json', codec: anyValue, dflt: () => null, omit: omitNull },
    { name: 'regex', codec: nullable(str), dflt: () => null, omit: omitNull },
    { name: 'choice', codec: nullable(list(str)), dflt: () => null, omit: omitNull },
    { name: 'grammar', codec: nullable(str), dflt: () => null, omit: omitNull },
    { name: 'json_object', codec: nullable(bool), dflt: () => null, omit: omitNull },
    { name: 'structural_tag', codec: nullable(str), dflt: () => null, omit: omitNull },
    { name: 'disable_any_whitespace', codec: bool, dflt: () => false, omit: omitFalse },
    { name: 'disable_additional_properties', codec: bool, dflt: () => false, omit: omitFalse },
    { name: 'whitespace_pattern', codec: nullable(str), dflt: () => null, omit: omitNull },
    { name: '_backend', codec: nullable(str), dflt: () => null },
  ],
});

/** The constraint keys set in `p` (non-null). */
function constraintsOf(p: StructuredOutputsParams): string[] {
  return STRUCTURED_OUTPUT_CONSTRAINTS.filter((k) => p[k] !== null && p[k] !== undefined);
}

/** Why `p` is not a valid constraint set (none, two or more, `json_object: false`), or null. */
function structuredOutputsProblem(p: StructuredOutputsParams): string | null {
  const set = constraintsOf(p);
  if (set.length === 0)
    return `exactly one constraint key is required (${STRUCTURED_OUTPUT_CONSTRAINTS.join(', ')}); got none`;
  if (set.length > 1) return `exactly one constraint key is allowed; got ${set.join(', ')}`;
  if (p.json_object === false) return 'json_object must be true when present';
  return null;
}

/**
 * Codec of `structured_outputs`. Encode writes the constraint, the options that are set and `_backend`
 * (`xgrammar` for a structural tag, else `guidance`); throws WireEncodeError on no constraint, two constraints or
 * `json_object: false`. Decode applies the same check (WireDecodeError) and keeps the peer's `_backend` verbatim.
 */
export const structuredOutputsCodec: Codec<StructuredOutputsParams> = {
  type: 'StructuredOutputsParams',
  decode(r, path, expected) {
    const p = structuredOutputsMap.decode(r, path, expected);
    const problem = structuredOutputsProblem(p);
    if (problem !== null) throw new WireDecodeError(path, problem);
    return p;
  },
  encode(w, v, path) {
    if (v === null || typeof v !== 'object') {
      throw new WireEncodeError(path, `expected a StructuredOutputsParams object, got ${describe(v)}`);
    }
    const full: StructuredOutputsParams = { ...defaultStructuredOutputs(), ...v };
    const problem = structuredOutputsProblem(full);
    if (problem !== null) throw new WireEncodeError(path, problem);
    structuredOutputsMap.encode(w, { ...full, _backend: full.structural_tag !== null ? 'xgrammar' : 'guidance' }, path);
  },
};

/** A `StructuredOutputsParams` with nothing set (not valid on its own: set one constraint). */
export function defaultStructuredOutputs(): StructuredOutputsParams {
  return {
    json: null,
    regex: null,
    choice: null,
    grammar: null,
    json_object: null,
    structural_tag: null,
    disable_any_whitespace: false,
    disable_additional_properties: false,
    whitespace_pattern: null,
    _backend: null,
  };
}

/**
 * The `structured_outputs` map of an engine-neutral constraint (engine-wire.md 5.3 "Gateway mapping"; gateway.md 8):
 * a JSON schema → `json` (the parsed schema, or the raw string when it did not parse); JSON object → `json_object:
 * true`; regex, choice, grammar and structural tag map directly; the options are copied (`_backend` is derived on
 * encode). Pure; never throws.
 */
export function toVllmStructuredOutputs(so: StructuredOutput): StructuredOutputsParams {
  const out = defaultStructuredOutputs();
  const c = so.constraint;
  switch (c.kind) {
    case 'json':
      out.json = c.schema;
      break;
    case 'json_object':
      out.json_object = true;
      break;
    case 'regex':
      out.regex = c.pattern;
      break;
    case 'choice':
      out.choice = [...c.choices];
      break;
    case 'grammar':
      out.grammar = c.grammar;
      break;
    case 'structural_tag':
      out.structural_tag = c.tag;
      break;
  }
  out.disable_any_whitespace = so.disableAnyWhitespace;
  out.disable_additional_properties = so.disableAdditionalProperties;
  out.whitespace_pattern = so.whitespacePattern;
  return out;
}

/**
 * `logit_bias`: msgpack map with **integer** keys (token ids) and float values (engine-wire.md 5.3). Held as a
 * `Map` in wire order. Decode: keys any msgpack integer within ±(2^53−1), values float32/float64/int. Encode:
 * smallest-int keys, float64 values.
 */
export const logitBiasCodec: Codec<Map<number, number>> = {
  type: 'dict[int, float]',
  decode(r, path, expected) {
    const n = r.readMapHeader(path, expected ?? 'map');
    const out = new Map<number, number>();
    for (let i = 0; i < n; i++) {
      const key = r.readInt(`${path}(key ${i})`);
      if (typeof key === 'bigint')
        throw new WireDecodeError(`${path}(key ${i})`, `token id ${key} is beyond ±(2^53−1)`);
      out.set(key, r.readFloat(`${path}[${key}]`));
    }
    return out;
  },
  encode(w, v, path) {
    if (!(v instanceof Map)) throw new WireEncodeError(path, `expected a Map, got ${describe(v)}`);
    w.writeMapHeader(v.size);
    for (const [k, x] of v) {
      w.writeInt(k, `${path}(key ${String(k)})`);
      w.writeFloat64(x, `${path}[${String(k)}]`);
    }
  },
};

/** The vLLM sampling map, every key (engine-wire.md 5.3 table order). null = key absent ("none"). */
export interface VllmSamplingParams {
  temperature: number;
  top_p: number;
  /** 0 = all tokens. */
  top_k: WireInt;
  seed: WireInt | null;
  /** Decode default **16**; the gateway always sends it (gateway.md 9.1). */
  max_tokens: WireInt;
  min_tokens: WireInt;
  thinking_token_budget: WireInt | null;
  /** Top-k logprobs per position; 0 = the sampled token only; −1 = full vocabulary. */
  logprobs: WireInt | null;
  prompt_logprobs: WireInt | null;
  min_p: number;
  frequency_penalty: number;
  presence_penalty: number;
  repetition_penalty: number;
  repetition_detection: RepetitionDetectionParams | null;
  stop_token_ids: WireInt[];
  /** Primary EOS id (gateway.md 7). */
  _eos_token_id: WireInt | null;
  /** Sorted set. */
  _all_stop_token_ids: WireInt[];
  /** Omitted when null or empty. */
  logit_bias: Map<number, number> | null;
  allowed_token_ids: WireInt[] | null;
  _bad_words_token_ids: WireInt[][] | null;
  structured_outputs: StructuredOutputsParams | null;
  logprob_token_ids: WireInt[] | null;
  skip_reading_prefix_cache: boolean | null;
  extra_args: Record<string, unknown> | null;
}

/** The sampling-map codec (engine-wire.md 5.3): sparse on encode, defaults on decode, unknown keys skipped. */
export const vllmSamplingParamsCodec: Codec<VllmSamplingParams> = sparseMap<VllmSamplingParams>({
  name: 'SamplingParams',
  fields: [
    { name: 'temperature', codec: float, dflt: () => 1.0 },
    { name: 'top_p', codec: float, dflt: () => 1.0 },
    { name: 'top_k', codec: int, dflt: () => 0 },
    { name: 'seed', codec: nullable(int), dflt: () => null, omit: omitNull },
    { name: 'max_tokens', codec: int, dflt: () => 16 },
    { name: 'min_tokens', codec: int, dflt: () => 0 },
    { name: 'thinking_token_budget', codec: nullable(int), dflt: () => null, omit: omitNull },
    { name: 'logprobs', codec: nullable(int), dflt: () => null, omit: omitNull },
    { name: 'prompt_logprobs', codec: nullable(int), dflt: () => null, omit: omitNull },
    { name: 'min_p', codec: float, dflt: () => 0.0 },
    { name: 'frequency_penalty', codec: float, dflt: () => 0.0 },
    { name: 'presence_penalty', codec: float, dflt: () => 0.0 },
    { name: 'repetition_penalty', codec: float, dflt: () => 1.0 },
    { name: 'repetition_detection', codec: nullable(repetitionDetectionCodec), dflt: () => null, omit: omitNull },
    { name: 'stop_token_ids', codec: list(int), dflt: () => [] },
    { name: '_eos_token_id', codec: nullable(int), dflt: () => null, omit: omitNull },
    { name: '_all_stop_token_ids', codec: list(int), dflt: () => [] },
    {
      name: 'logit_bias',
      codec: nullable(logitBiasCodec),
      dflt: () => null,
      omit: (v) => v === null || v.size === 0,
    },
    { name: 'allowed_token_ids', codec: nullable(list(int)), dflt: () => null, omit: omitNull },
    { name: '_bad_words_token_ids', codec: nullable(list(list(int))), dflt: () => null, omit: omitNull },
    { name: 'structured_outputs', codec: nullable(structuredOutputsCodec), dflt: () => null, omit: omitNull },
    { name: 'logprob_token_ids', codec: nullable(list(int)), dflt: () => null, omit: omitNull },
    { name: 'skip_reading_prefix_cache', codec: nullable(bool), dflt: () => null, omit: omitNull },
    { name: 'extra_args', codec: nullable(strMap(anyValue)), dflt: () => null, omit: omitNull },
  ],
});

/**
 * A fresh sampling map holding the decode defaults (engine-wire.md 5.3): temperature 1, top_p 1, top_k 0,
 * max_tokens 16, min_tokens 0, min_p 0, penalties 0/0/1, empty stop lists, every optional key null.
 */
export function defaultVllmSamplingParams(): VllmSamplingParams {
  return {
    temperature: 1.0,
    top_p: 1.0,
    top_k: 0,
    seed: null,
    max_tokens: 16,
    min_tokens: 0,
    thinking_token_budget: null,
    logprobs: null,
    prompt_logprobs: null,
    min_p: 0.0,
    frequency_penalty: 0.0,
    presence_penalty: 0.0,
    repetition_penalty: 1.0,
    repetition_detection: null,
    stop_token_ids: [],
    _eos_token_id: null,
    _all_stop_token_ids: [],
    logit_bias: null,
    allowed_token_ids: null,
    _bad_words_token_ids: null,
    structured_outputs: null,
    logprob_token_ids: null,
    skip_reading_prefix_cache: null,
    extra_args: null,
  };
}

/** What `toVllmSamplingParams` needs beyond the sampling options. */
export interface VllmSamplingContext {
  /** Prompt length in tokens (for the `max_tokens` default). */
  promptTokens: number;
  /** Tokens, from the handshake (gateway.md 9.1). Required when `maxNewTokens` is null. */
  maxModelLen?: number;
  /** The `logprobs` key: null = not requested; 0 = the sampled token only; k = top k; −1 = full vocabulary. */
  logprobs?: number | null;
  /** Connect-time EOS ids (gateway.md 7); default none. */
  eos?: Readonly<VllmEosConfig>;
  /** Called for dropped inputs (negative `logit_bias` token ids). */
  onWarning?: (message: string) => void;
  /** Path prefix of error messages (default `SamplingParams`). */
  path?: string;
}

/**
 * Maps the engine-neutral options onto the vLLM sampling map (gateway.md 8, vLLM column; engine-wire.md 5.3
 * "Gateway value"):
 * - temperature, top_p, min_p, the three penalties, min_tokens, seed pass through; `top_k` −1 (disabled) → 0;
 * - `max_tokens` = `maxNewTokens`, else `maxModelLen − promptTokens` saturating at 0 (gateway.md 9.1; never omitted,
 *   or EngineCore would stop at 16 tokens);
 * - `stop_token_ids` / `_eos_token_id` / `_all_stop_token_ids` from `applyEosTokenIds` (gateway.md 7);
 * - `logit_bias`: decimal keys become integer keys; negative token ids are dropped with a warning; empty → omitted;
 * - `logprobs` from the context; `structured_outputs` from `structuredOutput` (`toVllmStructuredOutputs`); every
 *   other optional key absent.
 * Range checks are the HTTP layer's (gateway.md 8); this throws WireEncodeError naming the field only for what the
 * wire cannot carry: non-integer or unsafe ints, negative stop ids, non-finite floats, `top_k` < −1, a negative
 * `max_tokens`, a non-decimal `logit_bias` key, or a null `maxNewTokens` without `maxModelLen`.
 */
export function toVllmSamplingParams(s: SamplingOptions, ctx: VllmSamplingContext): VllmSamplingParams {
  const base = ctx.path ?? 'SamplingParams';
  const fail = (field: string, problem: string): never => {
    throw new WireEncodeError(`${base}.${field}`, problem);
  };
  const intField = (field: string, v: unknown): number => {
    if (typeof v !== 'number' || !Number.isSafeInteger(v)) fail(field, `expected an integer, got ${String(v)}`);
    return v as number;
  };
  const floatField = (field: string, v: unknown): number => {
    if (typeof v !== 'number' || !Number.isFinite(v)) fail(field, `expected a finite number, got ${String(v)}`);
    return v as number;
  };

  let maxTokens: number;
  if (s.maxNewTokens === null) {
    if (ctx.maxModelLen === undefined) {
      fail('max_tokens', 'no token limit and no max_model_len to derive one from (EngineCore would stop at 16 tokens)');
    }
    maxTokens = Math.max(0, intField('max_tokens', ctx.maxModelLen) - intField('max_tokens', ctx.promptTokens));
  } else {
    maxTokens = intField('max_tokens', s.maxNewTokens);
    if (maxTokens < 0) fail('max_tokens', `${maxTokens} must be ≥ 0`);
  }
  const topK = intField('top_k', s.topK);
  if (topK < -1) fail('top_k', `${topK} must be −1 (disabled), 0 (all tokens) or ≥ 1`);
  const stopIds = s.stopTokenIds.map((t, i) => {
    const id = intField(`stop_token_ids[${i}]`, t);
    if (id < 0) fail(`stop_token_ids[${i}]`, `token id must be ≥ 0, got ${id}`);
    return id;
  });
  if (typeof s.ignoreEos !== 'boolean') fail('ignore_eos', `expected a boolean, got ${describe(s.ignoreEos)}`);
  const eosFields = applyEosTokenIds(stopIds, s.ignoreEos, ctx.eos ?? NO_EOS);

  let logitBias: Map<number, number> | null = null;
  if (s.logitBias !== null && s.logitBias !== undefined) {
    logitBias = new Map();
    for (const [key, bias] of Object.entries(s.logitBias)) {
      if (!/^-?(0|[1-9][0-9]*)$/.test(key) || !Number.isSafeInteger(Number(key))) {
        fail(`logit_bias[${JSON.stringify(key)}]`, 'key must be a decimal token id');
      }
      const id = Number(key);
      floatField(`logit_bias[${JSON.stringify(key)}]`, bias);
      if (id < 0) {
        ctx.onWarning?.(`logit_bias: negative token id ${id} dropped`);
        continue;
      }
      logitBias.set(id, bias);
    }
  }
  const logprobs = ctx.logprobs ?? null;
  if (logprobs !== null && intField('logprobs', logprobs) < -1) fail('logprobs', `${logprobs} must be ≥ −1`);

  return {
    ...defaultVllmSamplingParams(),
    temperature: floatField('temperature', s.temperature),
    top_p: floatField('top_p', s.topP),
    top_k: topK === -1 ? 0 : topK,
    seed: s.seed === null ? null : intField('seed', s.seed),
    max_tokens: maxTokens,
    min_tokens: intField('min_tokens', s.minNewTokens),
    logprobs,
    min_p: floatField('min_p', s.minP),
    frequency_penalty: floatField('frequency_penalty', s.frequencyPenalty),
    presence_penalty: floatField('presence_penalty', s.presencePenalty),
    repetition_penalty: floatField('repetition_penalty', s.repetitionPenalty),
    stop_token_ids: eosFields.stop_token_ids,
    _eos_token_id: eosFields._eos_token_id,
    _all_stop_token_ids: eosFields._all_stop_token_ids,
    logit_bias: logitBias !== null && logitBias.size > 0 ? logitBias : null,
    allowed_token_ids:
      s.allowedTokenIds === null || s.allowedTokenIds === undefined
        ? null
        : s.allowedTokenIds.map((id, i) => intField(`allowed_token_ids[${i}]`, id)),
    _bad_words_token_ids:
      s.badWordsTokenIds === null || s.badWordsTokenIds === undefined
        ? null
        : s.badWordsTokenIds.map((seq, i) => seq.map((id, j) => intField(`_bad_words_token_ids[${i}][${j}]`, id))),
    thinking_token_budget:
      s.thinkingTokenBudget === null || s.thinkingTokenBudget === undefined
        ? null
        : intField('thinking_token_budget', s.thinkingTokenBudget),
    structured_outputs: s.structuredOutput ? toVllmStructuredOutputs(s.structuredOutput) : null,
  };
}
