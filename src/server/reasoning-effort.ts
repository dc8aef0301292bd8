/**
 * `reasoning_effort` (chat) and `reasoning.effort` (Responses) as vLLM serves them (`ChatCompletionRequest.
 * build_chat_params`, vllm/entrypoints/openai/chat_completion/protocol.py; the levels of
 * vllm/entrypoints/openai/reasoning_effort.py): the effort goes to the chat template as its `reasoning_effort`
 * variable (templates such as gpt-oss's read it), and turns the template's thinking switch on or off:
 * `enable_thinking` = effort ≠ `none`, unless the request's own `chat_template_kwargs` set `enable_thinking` (Qwen3's
 * templates read it). A template that reads neither renders as before: the effort then changes nothing, as in vLLM.
 */
import { badRequest, quoteValue } from './errors.js';

/** The efforts vLLM accepts (`none` turns thinking off; the rest are levels, least first). */
export const REASONING_EFFORTS = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max'] as const;
export type ReasoningEffort = (typeof REASONING_EFFORTS)[number];

/**
 * The validated effort of `value` (null/absent → null). Throws `ApiError` 400 naming `param` for anything else than
 * one of `REASONING_EFFORTS`.
 */
export function parseReasoningEffort(value: unknown, param: string): ReasoningEffort | null {
  if (value === null || value === undefined) return null;
  if (typeof value === 'string' && (REASONING_EFFORTS as readonly string[]).includes(value))
    return value as ReasoningEffort;
  throw badRequest(`'${param}' must be one of ${REASONING_EFFORTS.join(', ')}; got ${quoteValue(value)}`, param);
}

/**
 * The chat template's variables for a request: its `chat_template_kwargs` with the effort added (see the module
 * comment). Returns `kwargs` itself when there is no effort. Pure.
 */
export function templateKwargsWithEffort(
  kwargs: Record<string, unknown> | null | undefined,
  effort: ReasoningEffort | null,
): Record<string, unknown> | null | undefined {
  if (effort === null) return kwargs;
  const out: Record<string, unknown> = { ...(kwargs ?? {}), reasoning_effort: effort };
  if (kwargs?.enable_thinking === undefined) out.enable_thinking = effort !== 'none';
  return out;
}
