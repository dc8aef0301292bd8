/**
 * Prompt preparation: chat messages rendered with the model's chat template, completion prompts tokenized or taken
 * as token ids (gateway.md section 5: the gateway tokenizes; the wire carries token ids only).
 */
import type { ChatMessage, GatewayTokenizer } from '../tokenizer/tokenizer.js';
import { ApiError, badRequest } from './errors.js';
import type { ChatCompletionBodyT, CompletionBodyT } from './schemas.js';

/** The tokenizer operations prompt preparation uses (a `GatewayTokenizer` satisfies it). */
export type PromptTokenizer = Pick<GatewayTokenizer, 'encode' | 'applyChatTemplate' | 'vocabSize'>;

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
 * `missing`), 500 when the template itself does not parse.
 */
export function chatPromptTokens(tokenizer: PromptTokenizer, body: ChatCompletionBodyT): number[] {
  const messages = body.messages.map((m, i) => toTemplateMessage(m, i));
  let text: string;
  try {
    text = tokenizer.applyChatTemplate(messages, {
      addGenerationPrompt: true,
      templateKwargs: body.chat_template_kwargs ?? undefined,
    });
  } catch (err) {
    // A template that does not parse is the server's problem; everything else is about these messages.
    if (err instanceof Error && err.name === 'ChatTemplateError' && (err as { kind?: unknown }).kind === 'parse') {
      throw new ApiError(500, `the model's chat template cannot be parsed: ${err.message}`, { code: 'chat_template_error' });
    }
    throw badRequest(`the chat template rejected the messages: ${err instanceof Error ? err.message : String(err)}`, 'messages');
  }
  return tokenizer.encode(text, { addSpecialTokens: false });
}

/**
 * The token ids of a completions `prompt`: a string (tokenized with special tokens, as vLLM does), an array of one
 * string, token ids (each in [0, vocabSize)), or an array of one token-id list. Several prompts → 400 (batching
 * is not served); an empty list → 400.
 */
export function completionPromptTokens(tokenizer: PromptTokenizer, prompt: CompletionBodyT['prompt']): number[] {
  if (typeof prompt === 'string') return tokenizer.encode(prompt, { addSpecialTokens: true });
  if (prompt.length === 0) throw badRequest(`'prompt' must not be empty`, 'prompt');
  const first = prompt[0];
  if (typeof first === 'string' || Array.isArray(first)) {
    if (prompt.length !== 1) {
      throw badRequest(`'prompt' holds ${prompt.length} prompts; batched prompts are not supported yet (send one)`, 'prompt', 'unsupported_parameter');
    }
    if (typeof first === 'string') return tokenizer.encode(first, { addSpecialTokens: true });
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
