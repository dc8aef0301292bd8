/**
 * Request-parameter validation and translation into engine-neutral `SamplingOptions` (gateway.md sections 8 and 9;
 * engine-wire.md section 4.6 for the ranges TokenSpeed enforces, which the gateway checks first so the client gets a
 * 400 naming the parameter instead of an unexplained terminal `abort`).
 */
import { DEFAULT_SAMPLING, type SamplingOptions } from '../protocols/types.js';
import { badRequest, quoteValue, type ApiError } from './errors.js';
import type { CommonBodyT } from './schemas.js';

/** TokenSpeed's "top-k disabled" value after normalization (2^30, engine-wire.md 4.4 index 5). */
export const TOP_K_DISABLED = 1 << 30;
/** Largest top-k TokenSpeed's fused sampling kernel accepts (engine-wire.md 4.6). */
export const TOP_K_MAX = 127;

const isNull = (v: unknown): boolean => v === null || v === undefined;

/**
 * Parameters OpenAI (or vLLM) defines that the gateway does not serve yet, each with the predicate of its no-op
 * values. Any other value is refused with 400 naming the parameter (never silently dropped).
 */
const UNSUPPORTED: Record<string, (value: unknown) => boolean> = {
  spaces_between_special_tokens: (v) => isNull(v) || v === true,
  prompt_logprobs: isNull,
  functions: (v) => isNull(v) || (Array.isArray(v) && v.length === 0),
  function_call: (v) => isNull(v) || v === 'none',
  suffix: (v) => isNull(v) || v === '',
  best_of: (v) => isNull(v) || v === 1,
  // Would change the output (audio out, web search): refused unless they ask for plain text only.
  modalities: (v) => isNull(v) || (Array.isArray(v) && v.every((m) => m === 'text')),
  audio: isNull,
  web_search_options: isNull,
  // vLLM extensions that change the output (issue 31 part 4): refused until served, never dropped.
};

const UNSUPPORTED_ENTRIES = Object.entries(UNSUPPORTED);

/**
 * Refuse every not-yet-served parameter that carries a value other than its no-op default.
 * Throws `ApiError` 400 (`code: 'unsupported_parameter'`, `param` = the parameter's name).
 */
export function rejectUnsupported(body: Record<string, unknown>): void {
  const priority = body.priority;
  if (!isNull(priority) && priority !== 0) {
    // vLLM's body field would let any client jump the engine's queue; here the tenant's band decides (issue 30).
    throw badRequest(
      `parameter 'priority' is not served in the request body (got ${quoteValue(priority)}): name a priority band ` +
        `with the x-gateway-inference-objective header (critical, standard, sheddable), within your tenant's ceiling`,
      'priority',
      'unsupported_parameter',
    );
  }
  for (const [name, isNoOp] of UNSUPPORTED_ENTRIES) {
    if (name in body && !isNoOp(body[name])) {
      throw badRequest(
        `parameter '${name}' is not supported by this gateway yet (got ${quoteValue(body[name])})`,
        name,
        'unsupported_parameter',
      );
    }
  }
}

/**
 * The request's stop strings (gateway.md 6): `stop` as one string or a list, both meaning the same (gateway.md 12,
 * SGLang PR #190); duplicates removed, order kept; no cap on the count (vLLM has none). Returns [] when absent.
 * Throws `ApiError` 400 (`param: 'stop'`) for an empty string or a non-string entry.
 */
export function parseStopStrings(stop: unknown): string[] {
  if (isNull(stop)) return [];
  const list = typeof stop === 'string' ? [stop] : stop;
  if (!Array.isArray(list)) throw badRequest(`'stop' must be a string or a list of strings`, 'stop');
  for (const s of list) {
    if (typeof s !== 'string') throw badRequest(`'stop' entries must be strings; got ${quoteValue(s)}`, 'stop');
    if (s === '') throw badRequest(`'stop' must not contain empty strings`, 'stop');
  }
  return [...new Set(list as string[])];
}

/** Most entries of `allowed_token_ids` (the engine builds a vocabulary mask from them; vLLM has no bound). */
export const MAX_ALLOWED_TOKEN_IDS = 65_536;

/**
 * The request's `allowed_token_ids` (vLLM: only these ids may be sampled): a non-empty list of token ids in
 * [0, vocabSize), at most `MAX_ALLOWED_TOKEN_IDS`, duplicates removed; null when absent.
 * @throws ApiError 400 (`param: 'allowed_token_ids'`) naming the bad entry.
 */
export function parseAllowedTokenIds(value: unknown, vocabSize: number): number[] | null {
  if (isNull(value)) return null;
  const param = 'allowed_token_ids';
  if (!Array.isArray(value) || value.length === 0)
    throw badRequest(`'${param}' must be a non-empty list of token ids`, param);
  if (value.length > MAX_ALLOWED_TOKEN_IDS)
    throw badRequest(`'${param}' holds ${value.length} ids; at most ${MAX_ALLOWED_TOKEN_IDS}`, param);
  value.forEach((id, i) => {
    if (!Number.isSafeInteger(id) || (id as number) < 0 || (id as number) >= vocabSize)
      throw badRequest(
        `'${param}' entries must be token ids in [0, ${vocabSize}); ${param}[${i}] is ${quoteValue(id)}`,
        param,
      );
  });
  return [...new Set(value as number[])];
}

/**
 * The request's `truncate_prompt_tokens` (vLLM): keep only the last k prompt tokens (left truncation); -1 keeps as many
 * as leave one token of room in the context. Null when absent.
 * @throws ApiError 400 (`param: 'truncate_prompt_tokens'`) for anything but -1 or an integer ≥ 1.
 */
export function parseTruncatePromptTokens(value: unknown): number | null {
  if (isNull(value)) return null;
  if (value === -1 || (Number.isSafeInteger(value) && (value as number) >= 1)) return value as number;
  throw badRequest(
    `'truncate_prompt_tokens' must be -1 (the context) or an integer ≥ 1; got ${quoteValue(value)}`,
    'truncate_prompt_tokens',
  );
}

/**
 * The request's `return_token_ids` (vLLM): whether the answer carries the prompt's token ids (top level; streamed:
 * in the first chunk) and each choice's (`token_ids`; streamed: each chunk's own). Absent: false.
 * @throws ApiError 400 (`param: 'return_token_ids'`) for a value that is not a boolean.
 */
export function parseReturnTokenIds(value: unknown): boolean {
  if (isNull(value)) return false;
  if (typeof value !== 'boolean') throw badRequest(`'return_token_ids' must be a boolean`, 'return_token_ids');
  return value;
}

/** Most `bad_words` entries and characters per entry (each becomes token sequences the engine checks every step). */
export const MAX_BAD_WORDS = 128;
export const MAX_BAD_WORD_CHARS = 256;

/**
 * The token sequences of the request's `bad_words` as vLLM's frontend makes them (`SamplingParams.
 * update_from_tokenizer`): each word without its leading spaces, encoded without special tokens, then with one leading
 * space, the latter kept only when it starts with another token and has as many tokens (the word in the middle of a
 * text). Null when absent or empty.
 * @throws ApiError 400 (`param: 'bad_words'`) for a value that is not a list of non-empty strings within the bounds.
 */
export function badWordsTokenIds(
  tokenizer: { encode(text: string, opts: { addSpecialTokens: boolean }): number[] },
  value: unknown,
): number[][] | null {
  if (isNull(value)) return null;
  const param = 'bad_words';
  if (
    !Array.isArray(value) ||
    value.some((w) => typeof w !== 'string' || w.trim() === '' || w.length > MAX_BAD_WORD_CHARS)
  )
    throw badRequest(
      `'${param}' must be a list of non-empty strings of at most ${MAX_BAD_WORD_CHARS} characters`,
      param,
    );
  if (value.length > MAX_BAD_WORDS)
    throw badRequest(`'${param}' holds ${value.length} words; at most ${MAX_BAD_WORDS}`, param);
  const out: number[][] = [];
  for (const word of value as string[]) {
    const bare = word.trimStart();
    const plain = tokenizer.encode(bare, { addSpecialTokens: false });
    out.push(plain);
    const spaced = tokenizer.encode(` ${bare}`, { addSpecialTokens: false });
    if (spaced[0] !== plain[0] && spaced.length === plain.length) out.push(spaced);
  }
  return out.length === 0 ? null : out;
}

/** Bound of a `logit_bias` value: vLLM clamps every bias to [−100, 100] (vLLM `protocol.py`), as OpenAI documents. */
export const LOGIT_BIAS_LIMIT = 100;

/**
 * The request's `logit_bias` (gateway.md 8): an object mapping token ids, as decimal strings (JSON object keys), to
 * additive biases. Keys are normalized to canonical decimals (`"007"` → `"7"`, as vLLM's `int(key)`) and must be in
 * [0, vocabSize) (TokenSpeed's range, engine-wire.md 4.6; the vLLM protocol turns them into integer keys); values
 * must be finite numbers and are clamped to [−100, 100] as vLLM does. Returns null when absent or empty.
 * Throws `ApiError` 400 (`param: 'logit_bias'`) naming the bad key or value.
 */
export function parseLogitBias(value: unknown, vocabSize: number): Record<string, number> | null {
  if (isNull(value)) return null;
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw badRequest(`'logit_bias' must be an object mapping token ids to biases`, 'logit_bias');
  }
  const out: Record<string, number> = {};
  for (const [key, bias] of Object.entries(value as Record<string, unknown>)) {
    const id = /^[0-9]+$/.test(key) ? Number(key) : NaN;
    if (!Number.isSafeInteger(id) || id >= vocabSize) {
      throw badRequest(
        `'logit_bias' keys must be token ids in [0, ${vocabSize}); got ${quoteValue(key)}`,
        'logit_bias',
      );
    }
    if (typeof bias !== 'number' || !Number.isFinite(bias)) {
      throw badRequest(`'logit_bias' values must be finite numbers; got ${quoteValue(bias)} for ${key}`, 'logit_bias');
    }
    out[String(id)] = Math.min(LOGIT_BIAS_LIMIT, Math.max(-LOGIT_BIAS_LIMIT, bias));
  }
  return Object.keys(out).length === 0 ? null : out;
}

/** Context needed to validate a request's parameters. Units: tokens. */
export interface ParamContext {
  promptTokens: number;
  /** The first engine's `max_model_len` from the handshake (gateway.md 9.1); named in the error messages. */
  maxModelLen: number;
  /**
   * The usable context: `max_model_len` minus what the engine reserves (the backend's `contextTokenLimit`;
   * TokenSpeed: `max_model_len − 2`, engine-wire.md 4.4 last paragraph). Admission and the default limit use it.
   */
  contextTokenLimit: number;
  /** Token ids must lie in [0, vocabSize). */
  vocabSize: number;
  /** Name of the prompt parameter for error messages: `messages` or `prompt`. */
  promptParam: 'messages' | 'prompt' | 'input';
}

/** The context sizes named in a "maximum context length" message. Units: tokens. */
export type ContextLimits = Pick<ParamContext, 'maxModelLen' | 'contextTokenLimit' | 'promptParam'>;

/** "This model's maximum context length is N tokens" (vLLM's wording), saying what the engine reserves, if anything. */
function maxContextSentence(limits: ContextLimits): string {
  const reserved = limits.maxModelLen - limits.contextTokenLimit;
  const why = reserved > 0 ? ` (max_model_len ${limits.maxModelLen} less ${reserved} the engine reserves)` : '';
  return `This model's maximum context length is ${limits.contextTokenLimit} tokens${why}.`;
}

/**
 * The 400 `context_length_exceeded` for a prompt that leaves no room for a completion (`param` = the prompt
 * parameter; gateway.md 9.2, vLLM #40302). `promptTokens` is the prompt's token count, or, with `atLeastFromBytes`,
 * a lower bound derived from the prompt's size in UTF-8 bytes without tokenizing it (the message says so).
 */
export function promptTooLongError(limits: ContextLimits, promptTokens: number, atLeastFromBytes?: number): ApiError {
  const count =
    atLeastFromBytes === undefined
      ? `${promptTokens} tokens`
      : `at least ${promptTokens} tokens (bounded from its ${atLeastFromBytes} bytes without tokenizing)`;
  return badRequest(
    `${maxContextSentence(limits)} However, your ${limits.promptParam} resulted in ${count}, which leaves no room ` +
      `for a completion. Please reduce the length of the ${limits.promptParam}.`,
    limits.promptParam,
    'context_length_exceeded',
  );
}

function checkRange(name: string, value: number, lo: number, hi: number, loOpen = false): void {
  const ok = Number.isFinite(value) && (loOpen ? value > lo : value >= lo) && value <= hi;
  if (!ok) throw badRequest(`'${name}' must be in ${loOpen ? '(' : '['}${lo}, ${hi}]; got ${value}`, name);
}

function checkSafeInteger(name: string, value: number): void {
  if (!Number.isSafeInteger(value)) throw badRequest(`'${name}' must be an integer within ±2^53; got ${value}`, name);
}

/**
 * The token limit of a request: `max_completion_tokens` takes precedence over `max_tokens` (gateway.md 9.1);
 * returns null when neither is set.
 */
export function requestedLimit(body: CommonBodyT): { value: number; param: string } | null {
  if (!isNull(body.max_completion_tokens))
    return { value: body.max_completion_tokens as number, param: 'max_completion_tokens' };
  if (!isNull(body.max_tokens)) return { value: body.max_tokens as number, param: 'max_tokens' };
  return null;
}

/**
 * Validate the admission rules and the sampling ranges, and build the engine-neutral sampling options.
 * With `limit` = `ctx.contextTokenLimit` (the usable context, gateway.md 9 and engine-wire.md 4.4):
 * - prompt of 0 tokens → 400 (`param` = the prompt parameter);
 * - `promptTokens ≥ limit` → 400 `context_length_exceeded` before any send (gateway.md 9.2, vLLM #40302): the
 *   engine could not produce a single token (TokenSpeed would abort it);
 * - an explicit limit ≤ 0 → 400; with `promptTokens + explicit > limit` → 400 `context_length_exceeded` naming the
 *   limit parameter and the numbers (TokenSpeed would otherwise clamp it silently and finish with `length`);
 * - no explicit limit → `maxNewTokens = limit − promptTokens` (always concrete: never a silent 16, gateway.md 9.1);
 * - ranges (engine-wire.md 4.6): temperature ≥ 0; top_p in (0, 1]; top_k −1 or 0 (both "disabled", 0 is vLLM's
 *   spelling) or 1..127 or 2^30; min_p in [0, 1]; presence/frequency penalty in [−2, 2]; repetition_penalty in
 *   [0, 2]; min_tokens in [0, maxNewTokens]; seed in [0, 2^53); stop_token_ids in [0, vocabSize).
 * Throws `ApiError` 400 naming the parameter.
 */
export function buildSampling(body: CommonBodyT, ctx: ParamContext): SamplingOptions {
  const maxNewTokens = tokenLimitOf(body, ctx);
  const s: SamplingOptions = { ...DEFAULT_SAMPLING, stopTokenIds: [], maxNewTokens };
  setDistributionParams(body, s);
  if (!isNull(body.min_tokens)) {
    const m = body.min_tokens as number;
    checkSafeInteger('min_tokens', m);
    if (m < 0 || m > maxNewTokens)
      throw badRequest(`'min_tokens' must be in [0, ${maxNewTokens}] (the token limit); got ${m}`, 'min_tokens');
    s.minNewTokens = m;
  }
  if (!isNull(body.seed)) {
    const seed = body.seed as number;
    checkSafeInteger('seed', seed);
    if (seed < 0) throw badRequest(`'seed' must be ≥ 0; got ${seed}`, 'seed');
    s.seed = seed;
  }
  if (!isNull(body.stop_token_ids)) {
    const ids = body.stop_token_ids as number[];
    for (const id of ids) {
      if (!Number.isSafeInteger(id) || id < 0 || id >= ctx.vocabSize) {
        throw badRequest(
          `'stop_token_ids' entries must be token ids in [0, ${ctx.vocabSize}); got ${id}`,
          'stop_token_ids',
        );
      }
    }
    s.stopTokenIds = [...new Set(ids)];
  }
  s.logitBias = parseLogitBias((body as { logit_bias?: unknown }).logit_bias, ctx.vocabSize);
  const allowed = parseAllowedTokenIds((body as { allowed_token_ids?: unknown }).allowed_token_ids, ctx.vocabSize);
  if (allowed !== null) s.allowedTokenIds = allowed;
  const budget = (body as { thinking_token_budget?: unknown }).thinking_token_budget;
  if (!isNull(budget)) {
    if (!Number.isSafeInteger(budget) || (budget as number) < 0)
      throw badRequest(
        `'thinking_token_budget' must be an integer ≥ 0; got ${quoteValue(budget)}`,
        'thinking_token_budget',
      );
    s.thinkingTokenBudget = budget as number;
  }
  if (!isNull(body.ignore_eos)) s.ignoreEos = body.ignore_eos as boolean;
  if (!isNull(body.skip_special_tokens)) s.skipSpecialTokens = body.skip_special_tokens as boolean;
  return s;
}

/**
 * The request's completion token limit (`max_tokens` / `max_completion_tokens`, else what the context leaves after the
 * prompt). Throws `ApiError` 400 for an empty prompt, a prompt that fills the context, a limit below 1 or one the
 * context cannot hold (`context_length_exceeded`).
 */
function tokenLimitOf(body: CommonBodyT, ctx: ParamContext): number {
  const { promptTokens, contextTokenLimit } = ctx;
  if (promptTokens === 0)
    throw badRequest(`'${ctx.promptParam}' must not be empty: the prompt has 0 tokens`, ctx.promptParam);
  if (promptTokens >= contextTokenLimit) throw promptTooLongError(ctx, promptTokens);
  const contextMessage = (requested: number) =>
    `${maxContextSentence(ctx)} However, you requested ${promptTokens + requested} tokens (${promptTokens} in the ` +
    `${ctx.promptParam}, ${requested} in the completion). Please reduce the length of the ${ctx.promptParam} or ` +
    `completion.`;
  const limit = requestedLimit(body);
  let maxNewTokens: number;
  if (limit !== null) {
    checkSafeInteger(limit.param, limit.value);
    if (limit.value < 1) throw badRequest(`'${limit.param}' must be at least 1; got ${limit.value}`, limit.param);
    if (promptTokens + limit.value > contextTokenLimit) {
      throw badRequest(contextMessage(limit.value), limit.param, 'context_length_exceeded');
    }
    maxNewTokens = limit.value;
  } else {
    maxNewTokens = contextTokenLimit - promptTokens;
  }
  return maxNewTokens;
}

/** Temperature, top_p, top_k, min_p and the three penalties onto `s`, range-checked (see `buildSampling`). */
function setDistributionParams(body: CommonBodyT, s: SamplingOptions): void {
  if (!isNull(body.temperature)) {
    const t = body.temperature as number;
    if (!(t >= 0) || !Number.isFinite(t))
      throw badRequest(`'temperature' must be a finite number ≥ 0; got ${t}`, 'temperature');
    s.temperature = t;
  }
  if (!isNull(body.top_p)) {
    checkRange('top_p', body.top_p as number, 0, 1, true);
    s.topP = body.top_p as number;
  }
  if (!isNull(body.top_k)) {
    const k = body.top_k as number;
    if (k === -1 || k === 0) s.topK = -1;
    else if ((k >= 1 && k <= TOP_K_MAX) || k === TOP_K_DISABLED) s.topK = k;
    else
      throw badRequest(`'top_k' must be -1 or 0 (disabled), 1..${TOP_K_MAX}, or ${TOP_K_DISABLED}; got ${k}`, 'top_k');
  }
  if (!isNull(body.min_p)) {
    checkRange('min_p', body.min_p as number, 0, 1);
    s.minP = body.min_p as number;
  }
  if (!isNull(body.presence_penalty)) {
    checkRange('presence_penalty', body.presence_penalty as number, -2, 2);
    s.presencePenalty = body.presence_penalty as number;
  }
  if (!isNull(body.frequency_penalty)) {
    checkRange('frequency_penalty', body.frequency_penalty as number, -2, 2);
    s.frequencyPenalty = body.frequency_penalty as number;
  }
  if (!isNull(body.repetition_penalty)) {
    checkRange('repetition_penalty', body.repetition_penalty as number, 0, 2);
    s.repetitionPenalty = body.repetition_penalty as number;
  }
}
