/**
 * `logprobs` / `top_logprobs` (gateway.md sections 8, 11.2 and 12): parameter validation and the OpenAI shapes.
 *
 * Both engines on this wire return only the **sampled** token's logprob (TokenSpeed `output_token_logprobs_val`;
 * vLLM column 0 of `new_logprobs`, requested with `logprobs = 0`, engine-wire.md 5.3), so the gateway accepts at most
 * one top logprob (SMG rejects more for TokenSpeed, gateway.md 8): with k = 1 the `top_logprobs` list holds the sampled
 * token itself (gateway.md 11.2: the sampled token first, up to k entries). Every value is rendered finite: −∞ and NaN
 * become −9999.0 (vLLM's clamp, gateway.md 12; SGLang #4097), identically when streaming and not.
 */
import { badRequest } from './errors.js';
import type { TokenLogprob } from './generation.js';

/** The finite stand-in for −∞ / NaN logprobs, and the floor of every value (vLLM's −9999.0, gateway.md 12). */
export const LOGPROB_FLOOR = -9999;
/** The most top logprobs the engines can return (the sampled token only). */
export const MAX_TOP_LOGPROBS = 1;

/** A logprob as a finite JSON number: NaN → −9999, anything below −9999 (−∞ included) → −9999. */
export function finiteLogprob(v: number): number {
  return Number.isNaN(v) ? LOGPROB_FLOOR : Math.min(0, Math.max(LOGPROB_FLOOR, v));
}

const isNull = (v: unknown): boolean => v === null || v === undefined;

/**
 * The requested top-logprob count k (0 or 1), or null when logprobs are not requested.
 * - chat: `logprobs` (boolean) and `top_logprobs` (integer; only with `logprobs: true` unless 0);
 * - completions: `logprobs` (integer k).
 * Throws `ApiError` 400 naming the parameter for a wrong type, a negative value, k > 1 (the engines return only the
 * sampled token's logprob), or `top_logprobs` > 0 without `logprobs: true` (as vLLM).
 */
export function parseLogprobs(body: { logprobs?: unknown; top_logprobs?: unknown }, endpoint: 'chat' | 'completions'): number | null {
  const checkK = (name: string, k: unknown): number => {
    if (typeof k !== 'number' || !Number.isSafeInteger(k) || k < 0) throw badRequest(`'${name}' must be an integer ≥ 0; got ${JSON.stringify(k)}`, name);
    if (k > MAX_TOP_LOGPROBS) {
      throw badRequest(
        `'${name}' must be at most ${MAX_TOP_LOGPROBS}: the engines return only the sampled token's logprob (got ${k})`,
        name,
        'unsupported_parameter',
      );
    }
    return k;
  };
  if (endpoint === 'completions') return isNull(body.logprobs) ? null : checkK('logprobs', body.logprobs);
  if (!isNull(body.logprobs) && typeof body.logprobs !== 'boolean') throw badRequest(`'logprobs' must be a boolean`, 'logprobs');
  const k = isNull(body.top_logprobs) ? 0 : checkK('top_logprobs', body.top_logprobs);
  if (body.logprobs !== true) {
    if (k > 0) throw badRequest(`'top_logprobs' requires 'logprobs' to be true`, 'top_logprobs');
    return null;
  }
  return k;
}

/** Decodes one token id to its text (special tokens kept). */
export type TokenText = (id: number) => string;

/**
 * Chat `logprobs` object for `entries` (OpenAI `ChatCompletionLogProbs`): `{content: [{token, logprob, bytes,
 * top_logprobs}]}`; `bytes` = the UTF-8 bytes of `token`; `top_logprobs` = [] for k = 0, [the sampled token] for k = 1.
 */
export function chatLogprobs(entries: readonly TokenLogprob[], k: number, tokenText: TokenText): Record<string, unknown> {
  return {
    content: entries.map((e) => {
      const token = tokenText(e.id);
      const one = { token, logprob: finiteLogprob(e.logprob), bytes: [...Buffer.from(token, 'utf8')] };
      return { ...one, top_logprobs: k >= 1 ? [one] : [] };
    }),
  };
}

/**
 * Completions `logprobs` object (OpenAI legacy shape): `{text_offset, token_logprobs, tokens, top_logprobs}`;
 * `top_logprobs` entries are null for k = 0 and `{token: logprob}` for k = 1. `offset.value` is the running character
 * offset (UTF-16 units of the token texts) of the choice, advanced here so streamed chunks continue it.
 */
export function completionLogprobs(
  entries: readonly TokenLogprob[],
  k: number,
  tokenText: TokenText,
  offset: { value: number },
): Record<string, unknown> {
  const tokens: string[] = [];
  const textOffset: number[] = [];
  const values: number[] = [];
  const top: Array<Record<string, number> | null> = [];
  for (const e of entries) {
    const token = tokenText(e.id);
    const v = finiteLogprob(e.logprob);
    tokens.push(token);
    textOffset.push(offset.value);
    offset.value += token.length;
    values.push(v);
    top.push(k >= 1 ? { [token]: v } : null);
  }
  return { text_offset: textOffset, token_logprobs: values, tokens, top_logprobs: top };
}
