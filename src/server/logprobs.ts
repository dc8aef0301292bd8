/**
 * `logprobs` / `top_logprobs` (gateway.md sections 8, 11.2 and 12): parameter validation and the OpenAI shapes.
 *
 * vLLM EngineCore returns, per position, the sampled token's logprob (column 0 of `new_logprobs`) and, when asked with
 * `logprobs = k`, the k best candidates (columns 1..k, engine-wire.md 5.6); TokenSpeed returns only the sampled
 * token's (`output_token_logprobs_val`), so TokenSpeed groups serve at most one top logprob (SMG rejects more,
 * gateway.md 8; see engine-capabilities.ts). A position's `top_logprobs` list is the sampled token first, then the
 * ranked candidates skipping the sampled one, up to k entries (gateway.md 11.2, SMG PR #2174). Every value is
 * rendered finite: −∞ and NaN become −9999.0 (vLLM's clamp, gateway.md 12; SGLang #4097), identically when
 * streaming and not.
 */
import { badRequest, quoteValue } from './errors.js';
import type { TokenLogprob } from './generation.js';

/** The finite stand-in for −∞ / NaN logprobs, and the floor of every value (vLLM's −9999.0, gateway.md 12). */
export const LOGPROB_FLOOR = -9999;
/** The most `top_logprobs` a chat request may ask for (OpenAI's and vLLM's default `max_logprobs` limit). */
export const MAX_CHAT_TOP_LOGPROBS = 20;
/** The most `logprobs` a completions request may ask for (OpenAI's legacy completions limit). */
export const MAX_COMPLETION_LOGPROBS = 5;

/** A logprob as a finite JSON number: NaN → −9999, anything below −9999 (−∞ included) → −9999. */
export function finiteLogprob(v: number): number {
  return Number.isNaN(v) ? LOGPROB_FLOOR : Math.min(0, Math.max(LOGPROB_FLOOR, v));
}

const isNull = (v: unknown): boolean => v === null || v === undefined;

/**
 * The requested top-logprob count k, or null when logprobs are not requested.
 * - chat: `logprobs` (boolean) and `top_logprobs` (integer 0..20; only with `logprobs: true` unless 0);
 * - completions: `logprobs` (integer k in 0..5).
 * Which engine groups can serve k is decided later (engine-capabilities.ts: TokenSpeed at most 1). Throws
 * `ApiError` 400 naming the parameter for a wrong type, a negative value, k above the endpoint's limit, or
 * `top_logprobs` > 0 without `logprobs: true` (as vLLM).
 */
export function parseLogprobs(
  body: { logprobs?: unknown; top_logprobs?: unknown },
  endpoint: 'chat' | 'completions',
): number | null {
  const max = endpoint === 'chat' ? MAX_CHAT_TOP_LOGPROBS : MAX_COMPLETION_LOGPROBS;
  const checkK = (name: string, k: unknown): number => {
    if (typeof k !== 'number' || !Number.isSafeInteger(k) || k < 0)
      throw badRequest(`'${name}' must be an integer ≥ 0; got ${quoteValue(k)}`, name);
    if (k > max) throw badRequest(`'${name}' must be at most ${max}; got ${k}`, name);
    return k;
  };
  if (endpoint === 'completions') return isNull(body.logprobs) ? null : checkK('logprobs', body.logprobs);
  if (!isNull(body.logprobs) && typeof body.logprobs !== 'boolean')
    throw badRequest(`'logprobs' must be a boolean`, 'logprobs');
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
 * The `top_logprobs` candidates of one position, at most `k`: the sampled token first, then the ranked candidates
 * without it (gateway.md 11.2). With no candidates from the engine (TokenSpeed, or k ≤ 1) that is the sampled token
 * alone (k ≥ 1) or nothing (k = 0). Values as the engine sent them (render with `finiteLogprob`).
 */
export function topCandidates(entry: TokenLogprob, k: number): { id: number; logprob: number }[] {
  if (k <= 0) return [];
  const out = [{ id: entry.id, logprob: entry.logprob }];
  for (const c of entry.top ?? []) {
    if (out.length >= k) break;
    if (c.id !== entry.id) out.push(c);
  }
  return out;
}

/**
 * Chat `logprobs` object for `entries` (OpenAI `ChatCompletionLogProbs`): `{content: [{token, logprob, bytes,
 * top_logprobs}]}`; `bytes` = the UTF-8 bytes of `token`; `top_logprobs` = `topCandidates` in the same shape.
 */
export function chatLogprobs(
  entries: readonly TokenLogprob[],
  k: number,
  tokenText: TokenText,
): Record<string, unknown> {
  const shape = (id: number, logprob: number) => {
    const token = tokenText(id);
    return { token, logprob: finiteLogprob(logprob), bytes: [...Buffer.from(token, 'utf8')] };
  };
  return {
    content: entries.map((e) => ({
      ...shape(e.id, e.logprob),
      top_logprobs: topCandidates(e, k).map((c) => shape(c.id, c.logprob)),
    })),
  };
}

/**
 * Completions `logprobs` object (OpenAI legacy shape): `{text_offset, token_logprobs, tokens, top_logprobs}`;
 * `top_logprobs` entries are null for k = 0, else `{token: logprob}` of `topCandidates`. `offset.value` is the
 * running character offset (UTF-16 units of the token texts) of the choice, advanced here so streamed chunks
 * continue it.
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
    tokens.push(token);
    textOffset.push(offset.value);
    offset.value += token.length;
    values.push(finiteLogprob(e.logprob));
    if (k < 1) top.push(null);
    else {
      const dict: Record<string, number> = {};
      for (const c of topCandidates(e, k)) {
        const t = tokenText(c.id);
        if (!(t in dict)) dict[t] = finiteLogprob(c.logprob);
      }
      top.push(dict);
    }
  }
  return { text_offset: textOffset, token_logprobs: values, tokens, top_logprobs: top };
}
