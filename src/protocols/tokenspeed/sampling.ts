/**
 * TokenSpeed `SamplingParams` (engine-wire.md 4.4; TokenSpeed `sampling_params.py`): a nested, **untagged**
 * positional array of 29 fields (header `dc 001d`), every field with a default (so `[]` is valid), plus the
 * gateway-side normalization (4.5, SMG `sampling.rs`) and the engine-side validation table (4.6) the gateway runs
 * before sending, because TokenSpeed answers an invalid request only with a silent terminal abort.
 */
import type { SamplingOptions, StructuredOutput } from '../types.js';
import { anyValue, bool, float, int, list, nullable, positional, str, strMap, strOrStrList } from '../../wire/codec.js';
import { WireEncodeError } from '../../wire/errors.js';
import type { WireInt } from '../../wire/reader.js';

/** `top_k` meaning "disabled" after normalization: 2^30 (`ce 40000000`; engine-wire.md 4.4). */
export const TOP_K_DISABLED = 1073741824;

/** Temperatures below this are greedy (engine-wire.md 4.5 step 2). */
export const GREEDY_TEMPERATURE_EPSILON = 1e-6;

/** The 29 `SamplingParams` fields in wire order, upstream names (engine-wire.md 4.4). */
export interface TokenSpeedSamplingParams {
  max_new_tokens: WireInt | null;
  stop: string | string[] | null;
  /** A Python `set[int]` on the engine side: an array in the sender's order on the wire (section 3.7). */
  stop_token_ids: WireInt[] | null;
  temperature: number;
  top_p: number;
  top_k: WireInt;
  min_p: number;
  frequency_penalty: number;
  presence_penalty: number;
  repetition_penalty: number;
  min_new_tokens: WireInt;
  json_schema: string | null;
  regex: string | null;
  ebnf: string | null;
  structural_tag: string | null;
  ignore_eos: boolean;
  skip_special_tokens: boolean;
  spaces_between_special_tokens: boolean;
  no_stop_trim: boolean;
  thinking_budget: WireInt | null;
  custom_params: Record<string, unknown> | null;
  stream_interval: WireInt | null;
  /** Token id as a decimal string → additive bias. */
  logit_bias: Record<string, number> | null;
  seed: WireInt | null;
  logprobs: WireInt | null;
  n: WireInt;
  stop_strs: string | string[] | null;
  stop_str_max_len: WireInt;
  is_normalized: boolean;
}

/** The untagged positional codec of `SamplingParams` (29 fields, all defaulted; extras drained). */
export const samplingParamsCodec = positional<TokenSpeedSamplingParams>({
  name: 'SamplingParams',
  fields: [
    { name: 'max_new_tokens', codec: nullable(int), dflt: () => null },
    { name: 'stop', codec: nullable(strOrStrList), dflt: () => null },
    { name: 'stop_token_ids', codec: nullable(list(int)), dflt: () => null },
    { name: 'temperature', codec: float, dflt: () => 1.0 },
    { name: 'top_p', codec: float, dflt: () => 1.0 },
    { name: 'top_k', codec: int, dflt: () => -1 },
    { name: 'min_p', codec: float, dflt: () => 0.0 },
    { name: 'frequency_penalty', codec: float, dflt: () => 0.0 },
    { name: 'presence_penalty', codec: float, dflt: () => 0.0 },
    { name: 'repetition_penalty', codec: float, dflt: () => 1.0 },
    { name: 'min_new_tokens', codec: int, dflt: () => 0 },
    { name: 'json_schema', codec: nullable(str), dflt: () => null },
    { name: 'regex', codec: nullable(str), dflt: () => null },
    { name: 'ebnf', codec: nullable(str), dflt: () => null },
    { name: 'structural_tag', codec: nullable(str), dflt: () => null },
    { name: 'ignore_eos', codec: bool, dflt: () => false },
    { name: 'skip_special_tokens', codec: bool, dflt: () => true },
    { name: 'spaces_between_special_tokens', codec: bool, dflt: () => true },
    { name: 'no_stop_trim', codec: bool, dflt: () => false },
    { name: 'thinking_budget', codec: nullable(int), dflt: () => null },
    { name: 'custom_params', codec: nullable(strMap(anyValue)), dflt: () => null },
    { name: 'stream_interval', codec: nullable(int), dflt: () => null },
    { name: 'logit_bias', codec: nullable(strMap(float)), dflt: () => null },
    { name: 'seed', codec: nullable(int), dflt: () => null },
    { name: 'logprobs', codec: nullable(int), dflt: () => null },
    { name: 'n', codec: int, dflt: () => 1 },
    { name: 'stop_strs', codec: nullable(strOrStrList), dflt: () => null },
    { name: 'stop_str_max_len', codec: int, dflt: () => 0 },
    { name: 'is_normalized', codec: bool, dflt: () => false },
  ],
});

/** A fresh `SamplingParams` holding TokenSpeed's struct defaults (un-normalized: `top_k` −1, `is_normalized` false). */
export function defaultSamplingParams(): TokenSpeedSamplingParams {
  return samplingParamsCodec.defaults() as TokenSpeedSamplingParams;
}

/**
 * The gateway-side normalization (engine-wire.md 4.5, SMG `sampling.rs`), returning a new object:
 * 1. empty `stop_token_ids` → nil; 2. `temperature < 1e-6` (negative included) → temperature 1.0 and `top_k` 1
 * (greedy); 3. `top_k == −1` → 2^30; 4. `stop_strs = []`, `stop_str_max_len = 0`, `is_normalized = true`.
 * Idempotent: normalizing a normalized value returns an equal value. The steps run whatever the incoming
 * `is_normalized` flag says (the gateway does not trust it). Stop strings are the gateway's job, so `stop` is kept
 * as given (the engine ignores it once `is_normalized` is true).
 */
export function normalizeSamplingParams(p: TokenSpeedSamplingParams): TokenSpeedSamplingParams {
  const out: TokenSpeedSamplingParams = { ...p };
  if (out.stop_token_ids !== null && out.stop_token_ids.length === 0) out.stop_token_ids = null;
  if (out.temperature < GREEDY_TEMPERATURE_EPSILON) {
    out.temperature = 1.0;
    out.top_k = 1;
  }
  if (out.top_k === -1 || out.top_k === -1n) out.top_k = TOP_K_DISABLED;
  out.stop_strs = [];
  out.stop_str_max_len = 0;
  out.is_normalized = true;
  return out;
}

/** TokenSpeed's four grammar fields (engine-wire.md 4.4 indexes 11..14); at most one is set. */
export type TokenSpeedGrammarFields = Pick<
  TokenSpeedSamplingParams,
  'json_schema' | 'regex' | 'ebnf' | 'structural_tag'
>;

/** Characters with a meaning in a regular expression, escaped when a choice becomes a regex alternation. */
const REGEX_SPECIAL = /[\\^$.*+?()[\]{}|/]/g;

/**
 * Why TokenSpeed cannot carry `so`, or null when it can (gateway.md 8: TokenSpeed has exactly one of `json_schema`,
 * `regex`, `ebnf`, `structural_tag`, no choice or JSON-object field and none of vLLM's structured-output options).
 * A choice and a JSON object have exact equivalents (a regex alternation, the schema `{"type": "object"}`), so only
 * the options are refused.
 */
export function tokenSpeedStructuredOutputProblem(so: StructuredOutput): string | null {
  const refused = [
    so.disableAnyWhitespace ? 'disable_any_whitespace' : null,
    so.disableAdditionalProperties ? 'disable_additional_properties' : null,
    so.whitespacePattern !== null ? 'whitespace_pattern' : null,
  ].filter((x) => x !== null);
  return refused.length === 0 ? null : `TokenSpeed's sampling parameters have no ${refused.join(', ')} option`;
}

/**
 * The grammar fields for `so` (engine-wire.md 4.4): a JSON schema → `json_schema` (the schema serialized as JSON, or
 * the raw string as given); a JSON object → `json_schema` `{"type":"object"}`; a regex → `regex`; a choice → `regex`
 * matching exactly one of the strings (each escaped, joined with `|`); a grammar → `ebnf`; a structural tag →
 * `structural_tag`. null → every field nil. Throws WireEncodeError when `so` carries an option TokenSpeed lacks
 * (`tokenSpeedStructuredOutputProblem`).
 */
export function toTokenSpeedGrammar(so: StructuredOutput | null | undefined): TokenSpeedGrammarFields {
  const out: TokenSpeedGrammarFields = { json_schema: null, regex: null, ebnf: null, structural_tag: null };
  if (so === null || so === undefined) return out;
  const problem = tokenSpeedStructuredOutputProblem(so);
  if (problem !== null) throw new WireEncodeError('SamplingParams.json_schema', problem);
  const c = so.constraint;
  switch (c.kind) {
    case 'json':
      out.json_schema = typeof c.schema === 'string' ? c.schema : JSON.stringify(c.schema);
      break;
    case 'json_object':
      out.json_schema = '{"type":"object"}';
      break;
    case 'regex':
      out.regex = c.pattern;
      break;
    case 'choice':
      out.regex = `(${c.choices.map((x) => x.replace(REGEX_SPECIAL, '\\$&')).join('|')})`;
      break;
    case 'grammar':
      out.ebnf = c.grammar;
      break;
    case 'structural_tag':
      out.structural_tag = c.tag;
      break;
  }
  return out;
}

/**
 * Maps the engine-neutral `SamplingOptions` (already validated and defaulted by the HTTP layer) onto TokenSpeed's
 * 29 fields and normalizes them (engine-wire.md 4.4 "Gateway sends" column): `stop` nil (stop strings are matched in
 * the gateway), the grammar fields from `structuredOutput` (`toTokenSpeedGrammar`), `no_stop_trim` false, `thinking_budget` = `thinkingTokenBudget` (nil without), `custom_params`/`stream_interval` nil,
 * `logprobs` nil, `n` 1, `stop_strs` `[]`, `is_normalized` true. `logit_bias` and `seed` are passed through.
 */
export function toTokenSpeedSamplingParams(s: SamplingOptions): TokenSpeedSamplingParams {
  return normalizeSamplingParams({
    max_new_tokens: s.maxNewTokens,
    stop: null,
    stop_token_ids: [...s.stopTokenIds],
    temperature: s.temperature,
    top_p: s.topP,
    top_k: s.topK,
    min_p: s.minP,
    frequency_penalty: s.frequencyPenalty,
    presence_penalty: s.presencePenalty,
    repetition_penalty: s.repetitionPenalty,
    min_new_tokens: s.minNewTokens,
    ...toTokenSpeedGrammar(s.structuredOutput),
    ignore_eos: s.ignoreEos,
    skip_special_tokens: s.skipSpecialTokens,
    spaces_between_special_tokens: s.spacesBetweenSpecialTokens,
    no_stop_trim: false,
    thinking_budget: s.thinkingTokenBudget ?? null,
    custom_params: null,
    stream_interval: null,
    logit_bias: s.logitBias === null ? null : { ...s.logitBias },
    seed: s.seed,
    logprobs: null,
    n: 1,
    stop_strs: [],
    stop_str_max_len: 0,
    is_normalized: true,
  });
}

/** Options of `validateSamplingParams`. */
export interface SamplingValidationOptions {
  /** The engine's vocabulary size: `logit_bias` keys must be in [0, vocabSize). Unchecked when absent. */
  vocabSize?: number;
  /** Path prefix for error messages. */
  path?: string;
}

/**
 * Runs the engine's receive-socket checks (engine-wire.md 4.6) on parameters about to be sent, so the gateway
 * refuses what TokenSpeed would otherwise turn into a silent terminal abort. Throws WireEncodeError naming the
 * first failing field:
 * temperature ≥ 0; top_p in (0, 1]; min_p in [0, 1]; top_k −1, 1..127 or exactly 2^30; frequency/presence
 * penalty in [−2, 2]; repetition_penalty in [0, 2]; max_new_tokens nil or ≥ 0; 0 ≤ min_new_tokens ≤
 * max_new_tokens; logit_bias keys decimal token ids in [0, vocabSize); logprobs nil or 0; at most one of
 * json_schema / regex / ebnf; n == 1 (finalization would refuse any other value). Non-finite floats are refused.
 */
export function validateSamplingParams(p: TokenSpeedSamplingParams, opts: SamplingValidationOptions = {}): void {
  const base = opts.path ?? 'SamplingParams';
  if (typeof p.temperature !== 'number' || !Number.isFinite(p.temperature) || p.temperature < 0) {
    failAt(base, 'temperature', `${String(p.temperature)} must be a finite number ≥ 0`);
  }
  checkFloatIn(base, 'top_p', p.top_p, 0, 1, true);
  checkFloatIn(base, 'min_p', p.min_p, 0, 1, false);
  const k = p.top_k;
  const kOk = k == -1 || k == TOP_K_DISABLED || (k >= 1 && k <= 127);
  if (!kOk)
    failAt(base, 'top_k', `${String(k)} is not −1, 1..127 or 2^30 (0 is refused; 128+ exceeds the sampling kernel)`);
  checkFloatIn(base, 'frequency_penalty', p.frequency_penalty, -2, 2, false);
  checkFloatIn(base, 'presence_penalty', p.presence_penalty, -2, 2, false);
  checkFloatIn(base, 'repetition_penalty', p.repetition_penalty, 0, 2, false);
  if (p.max_new_tokens !== null && p.max_new_tokens < 0)
    failAt(base, 'max_new_tokens', `${p.max_new_tokens} must be ≥ 0`);
  if (p.min_new_tokens < 0) failAt(base, 'min_new_tokens', `${p.min_new_tokens} must be ≥ 0`);
  if (p.max_new_tokens !== null && p.min_new_tokens > p.max_new_tokens) {
    failAt(base, 'min_new_tokens', `${p.min_new_tokens} exceeds max_new_tokens ${p.max_new_tokens}`);
  }
  if (p.logit_bias !== null) {
    for (const [key, bias] of Object.entries(p.logit_bias)) {
      const id = /^(0|[1-9][0-9]*)$/.test(key) ? Number(key) : NaN;
      if (!Number.isSafeInteger(id) || (opts.vocabSize !== undefined && id >= opts.vocabSize)) {
        failAt(
          base,
          `logit_bias[${JSON.stringify(key)}]`,
          opts.vocabSize === undefined
            ? 'key must be a decimal token id ≥ 0'
            : `key must be a decimal token id in [0, ${opts.vocabSize})`,
        );
      }
      if (typeof bias !== 'number' || !Number.isFinite(bias)) {
        failAt(base, `logit_bias[${JSON.stringify(key)}]`, `bias ${String(bias)} must be a finite number`);
      }
    }
  }
  if (p.logprobs !== null && p.logprobs != 0) failAt(base, 'logprobs', `${p.logprobs} must be nil or 0`);
  if ((p.json_schema !== null ? 1 : 0) + (p.regex !== null ? 1 : 0) + (p.ebnf !== null ? 1 : 0) > 1) {
    const grammars = GRAMMAR_FIELDS.filter((g) => p[g] !== null);
    failAt(base, grammars[1]!, `at most one grammar may be set (got ${grammars.join(', ')})`);
  }
  if (p.n != 1) failAt(base, 'n', `${p.n} must be 1 (the gateway fans out n > 1 itself)`);
}

const GRAMMAR_FIELDS = ['json_schema', 'regex', 'ebnf'] as const;

function failAt(base: string, field: string, problem: string): never {
  throw new WireEncodeError(`${base}.${field}`, problem);
}

/** Refuses `value` outside [lo, hi] (or (lo, hi] with `loOpen`), and NaN. */
function checkFloatIn(base: string, field: string, value: number, lo: number, hi: number, loOpen: boolean): void {
  if (typeof value !== 'number' || Number.isNaN(value) || !(loOpen ? value > lo : value >= lo) || !(value <= hi)) {
    failAt(base, field, `${String(value)} is outside ${loOpen ? '(' : '['}${lo}, ${hi}]`);
  }
}
