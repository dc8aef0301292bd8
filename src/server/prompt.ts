/**
 * Prompt preparation: chat messages rendered with the model's chat template, completion prompts tokenized or taken
 * as token ids (gateway.md section 5: the gateway tokenizes; the wire carries token ids only). A text prompt whose
 * size alone proves it cannot fit the usable context is refused before tokenizing (gateway.md 9.2), so a
 * multi-megabyte prompt does not block the event loop for seconds only to be refused anyway.
 */
import type { ChatMessage, GatewayTokenizer } from '../tokenizer/tokenizer.js';
import { ApiError, badRequest } from './errors.js';
import { promptTooLongError, type ContextLimits } from './params.js';
import type { ChatCompletionBodyT, CompletionBodyT } from './schemas.js';

/** The tokenizer operations prompt preparation uses (a `GatewayTokenizer` satisfies it). */
export type PromptTokenizer = Pick<GatewayTokenizer, 'encode' | 'applyChatTemplate' | 'vocabSize' | 'minTokenCount'>;

/**
 * Tokenize `text` unless its cheap lower-bound token count (`tokenizer.minTokenCount`: UTF-8 bytes divided by the
 * longest token's bytes, rounded up) already reaches `limits.contextTokenLimit`; then throw, without tokenizing, the
 * same 400 `context_length_exceeded` (`param` = the prompt parameter) that the exact count would get from
 * `buildSampling` (whose rule is `promptTokens ≥ contextTokenLimit`).
 */
export function encodeWithinContext(
  tokenizer: PromptTokenizer,
  text: string,
  addSpecialTokens: boolean,
  limits: ContextLimits,
): number[] {
  const atLeast = tokenizer.minTokenCount(text);
  if (atLeast >= limits.contextTokenLimit) throw promptTooLongError(limits, atLeast, Buffer.byteLength(text, 'utf8'));
  return tokenizer.encode(text, { addSpecialTokens });
}

type ChatMessageBody = ChatCompletionBodyT['messages'][number];

/**
 * Flatten one OpenAI message into the template's `ChatMessage`: string content as is; text parts joined with "\n"
 * (vLLM's "string" content format); `developer` rendered as `system`. Throws 400 naming
 * `messages[i].content[j].type` for a non-text part, and `messages[i].content[j].text` for a text part without text.
 */
export function toTemplateMessage(m: ChatMessageBody, i: number): ChatMessage {
  let content: string | null;
  if (m.content === null || m.content === undefined) content = null;
  else if (typeof m.content === 'string') content = m.content;
  else {
    const texts: string[] = [];
    m.content.forEach((part, j) => {
      if (part.type !== 'text') {
        throw badRequest(
          `content part type '${part.type}' is not supported (only 'text' parts are)`,
          `messages[${i}].content[${j}].type`,
          'unsupported_content',
        );
      }
      if (typeof part.text !== 'string') throw badRequest(`a 'text' content part needs a string 'text'`, `messages[${i}].content[${j}].text`);
      texts.push(part.text);
    });
    content = texts.join('\n');
  }
  const out: ChatMessage = { role: m.role === 'developer' ? 'system' : m.role, content };
  if (typeof m.name === 'string') out.name = m.name;
  if (Array.isArray(m.tool_calls)) out.tool_calls = m.tool_calls;
  if (typeof m.tool_call_id === 'string') out.tool_call_id = m.tool_call_id;
  return out;
}

/**
 * Render the chat messages with the tokenizer's chat template (generation prompt added) and tokenize the result
 * without adding special tokens again (the template already holds them, as in vLLM's chat serving).
 * Throws 400 (`param: 'messages'`) when the template rejects the conversation (ChatTemplateError `raised`, `render`,
 * `missing`), 500 when the template itself does not parse, and 400 `context_length_exceeded` without tokenizing when
 * the rendered text is too large to fit `limits` (see `encodeWithinContext`).
 */
export function chatPromptTokens(tokenizer: PromptTokenizer, body: ChatCompletionBodyT, limits: ContextLimits): number[] {
  const text = renderChat(tokenizer, body.messages, { addGenerationPrompt: true, templateKwargs: body.chat_template_kwargs });
  return encodeWithinContext(tokenizer, text, false, limits);
}

/**
 * Render chat `messages` (schema-valid bodies, see `toTemplateMessage`) with the tokenizer's chat template.
 * Throws 400 (`param: 'messages'`) when the template rejects the conversation (ChatTemplateError `raised`, `render`,
 * `missing`) and 500 when the template itself does not parse. Shared by the chat route and `/tokenize`.
 */
export function renderChat(
  tokenizer: Pick<PromptTokenizer, 'applyChatTemplate'>,
  messages: ChatCompletionBodyT['messages'],
  opts: { addGenerationPrompt: boolean; templateKwargs?: Record<string, unknown> | null },
): string {
  const shaped = messages.map((m, i) => toTemplateMessage(m, i));
  try {
    return tokenizer.applyChatTemplate(shaped, {
      addGenerationPrompt: opts.addGenerationPrompt,
      templateKwargs: opts.templateKwargs ?? undefined,
    });
  } catch (err) {
    // A template that does not parse is the server's problem; everything else is about these messages.
    if (err instanceof Error && err.name === 'ChatTemplateError' && (err as { kind?: unknown }).kind === 'parse') {
      throw new ApiError(500, `the model's chat template cannot be parsed: ${err.message}`, { code: 'chat_template_error' });
    }
    throw badRequest(`the chat template rejected the messages: ${err instanceof Error ? err.message : String(err)}`, 'messages');
  }
}

/**
 * The token ids of a completions `prompt`: a string (tokenized with special tokens, as vLLM does), an array of one
 * string, token ids (each in [0, vocabSize)), or an array of one token-id list. Several prompts → 400 (batching
 * is not served); an empty list → 400; a string too large to fit `limits` → 400 `context_length_exceeded` without
 * tokenizing (see `encodeWithinContext`).
 */
export function completionPromptTokens(
  tokenizer: PromptTokenizer,
  prompt: CompletionBodyT['prompt'],
  limits: ContextLimits,
): number[] {
  if (typeof prompt === 'string') return encodeWithinContext(tokenizer, prompt, true, limits);
  if (prompt.length === 0) throw badRequest(`'prompt' must not be empty`, 'prompt');
  const first = prompt[0];
  if (typeof first === 'string' || Array.isArray(first)) {
    if (prompt.length !== 1) {
      throw badRequest(`'prompt' holds ${prompt.length} prompts; batched prompts are not supported yet (send one)`, 'prompt', 'unsupported_parameter');
    }
    if (typeof first === 'string') return encodeWithinContext(tokenizer, first, true, limits);
    return checkTokenIds(first, tokenizer.vocabSize);
  }
  return checkTokenIds(prompt as number[], tokenizer.vocabSize);
}

function checkTokenIds(ids: number[], vocabSize: number): number[] {
  ids.forEach((id, i) => {
    if (!Number.isSafeInteger(id) || id < 0 || id >= vocabSize) {
      throw badRequest(`'prompt' token ids must be in [0, ${vocabSize}); prompt[${i}] is ${id}`, 'prompt');
    }
  });
  return ids;
}
