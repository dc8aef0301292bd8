/**
 * Prompt preparation: chat messages rendered with the model's chat template, completion prompts tokenized or taken
 * as token ids (gateway.md section 5: the gateway tokenizes; the wire carries token ids only). A text prompt whose
 * size alone proves it cannot fit the usable context is refused before tokenizing (gateway.md 9.2), so a
 * multi-megabyte prompt does not block the event loop for seconds only to be refused anyway. Large texts and long
 * chats are tokenized and rendered off the event loop, in the process's bounded queue (tokenizer/off-loop.ts, issue 26
 * part 5), and dropped from it when the client leaves (`signal`).
 */
import type { ChatMessage } from '../tokenizer/tokenizer.js';
import {
  OFF_LOOP_RENDER_MIN_MESSAGES,
  type OffLoopSignal,
  type OffLoopTokenizer,
  type TooLong,
} from '../tokenizer/off-loop.js';
import { ApiError, badRequest, quoteValue } from './errors.js';
import { parseReasoningEffort, templateKwargsWithEffort } from './reasoning-effort.js';
import { MAX_MESSAGES } from './input-limits.js';
import { promptTooLongError, type ContextLimits } from './params.js';
import type { ChatCompletionBodyT, CompletionBodyT } from './schemas.js';

/** The tokenizer operations prompt preparation uses: the process's off-loop tokenizer (and the tokenizer it wraps). */
export type PromptTokenizer = Pick<OffLoopTokenizer, 'encodePrompt' | 'render' | 'tokenizer'>;

/**
 * Tokenize `text` unless it cannot fit `limits.contextTokenLimit`: its cheap lower-bound token count
 * (`tokenizer.minTokenCount`: UTF-8 bytes divided by the longest token's bytes, rounded up) already reaches it, which
 * is the same 400 `context_length_exceeded` (`param` = the prompt parameter) that the exact count would get from
 * `buildSampling` (whose rule is `promptTokens ≥ contextTokenLimit`), thrown without tokenizing; or, for a large text,
 * its exact count does (the same 400 with the count). A large text is bounded and tokenized on the worker thread
 * (`OffLoopTokenizer.encodePrompt`, issue 9): the ids come as a promise then, which rejects with the 400 or with the
 * `OffLoopError` of a full queue, a client that left (`signal`) or a failed worker (errors.ts `offLoopApiError`).
 */
export function encodeWithinContext(
  tokenizer: PromptTokenizer,
  text: string,
  addSpecialTokens: boolean,
  limits: ContextLimits,
  signal?: OffLoopSignal,
): number[] | Promise<number[]> {
  const maxTokens = limits.contextTokenLimit;
  const out = tokenizer.encodePrompt(
    text,
    signal === undefined ? { addSpecialTokens, maxTokens } : { addSpecialTokens, maxTokens, signal },
  );
  return out instanceof Promise ? out.then((r) => fitting(r, limits)) : fitting(out, limits);
}

/** The ids, or the 400 `context_length_exceeded` of a prompt that does not fit. */
function fitting(r: number[] | TooLong, limits: ContextLimits): number[] {
  if (Array.isArray(r)) return r;
  throw promptTooLongError(limits, r.tokens, r.bytes ?? undefined);
}

type ChatMessageBody = ChatCompletionBodyT['messages'][number];

/**
 * Flatten one OpenAI message into the template's `ChatMessage`: string content as is; text parts joined with "\n"
 * (vLLM's "string" content format); `developer` rendered as `system`; an assistant's `reasoning_content` (or
 * `reasoning`) passed on for templates that render it. Throws 400 naming
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
          `content part type ${quoteValue(part.type)} is not supported (only 'text' parts are)`,
          `messages[${i}].content[${j}].type`,
          'unsupported_content',
        );
      }
      if (typeof part.text !== 'string')
        throw badRequest(`a 'text' content part needs a string 'text'`, `messages[${i}].content[${j}].text`);
      texts.push(part.text);
    });
    content = texts.join('\n');
  }
  const out: ChatMessage = { role: m.role === 'developer' ? 'system' : m.role, content };
  if (typeof m.name === 'string') out.name = m.name;
  if (Array.isArray(m.tool_calls)) out.tool_calls = m.tool_calls;
  if (typeof m.tool_call_id === 'string') out.tool_call_id = m.tool_call_id;
  const reasoning = m.reasoning_content ?? m.reasoning;
  if (m.role === 'assistant' && typeof reasoning === 'string') out.reasoning_content = reasoning;
  return out;
}

/** The chat-template switches of one chat request (see `chatTemplateOptions`). */
export interface ChatTemplateOptions {
  /** Append the assistant-turn opener (template `add_generation_prompt`). */
  addGenerationPrompt: boolean;
  /** End the prompt right after the final message's text so the model continues it (vLLM extension). */
  continueFinalMessage: boolean;
  /** OpenAI function tools for the template's `tools` variable (schema-checked), or undefined when not sent. */
  tools?: unknown[];
  /** The request's `chat_template_kwargs`, with its `reasoning_effort` (reasoning-effort.ts). */
  templateKwargs?: Record<string, unknown> | null;
  /** The request's own template (vLLM `chat_template`; only with `--trust-request-chat-template`). */
  chatTemplate?: string;
}

/** The longest template a request may send (characters; the model's own templates are a few thousand). */
export const MAX_REQUEST_CHAT_TEMPLATE_CHARS = 65_536;

/**
 * The template switches of a chat body: `add_generation_prompt` (default true), `continue_final_message` (default
 * false), `tools` (as sent; null → none), `chat_template_kwargs` with `reasoning_effort` folded in as vLLM does
 * (reasoning-effort.ts; 400 naming it for an unknown level). Throws 400 naming `continue_final_message` when
 * both it and `add_generation_prompt` are true (vLLM `protocol.py` `check_generation_prompt`: "Cannot set both").
 */
export function chatTemplateOptions(
  body: Pick<
    ChatCompletionBodyT,
    'add_generation_prompt' | 'continue_final_message' | 'tools' | 'chat_template_kwargs' | 'reasoning_effort'
  > & { chat_template?: unknown },
  trustRequestTemplate = false,
): ChatTemplateOptions {
  const addGenerationPrompt = body.add_generation_prompt ?? true;
  const continueFinalMessage = body.continue_final_message ?? false;
  if (addGenerationPrompt && continueFinalMessage) {
    throw badRequest(
      `'continue_final_message' and 'add_generation_prompt' cannot both be true (send 'add_generation_prompt': false to continue the final message)`,
      'continue_final_message',
    );
  }
  const out: ChatTemplateOptions = {
    addGenerationPrompt,
    continueFinalMessage,
    templateKwargs: templateKwargsWithEffort(
      body.chat_template_kwargs,
      parseReasoningEffort(body.reasoning_effort, 'reasoning_effort'),
    ),
  };
  if (Array.isArray(body.tools)) out.tools = body.tools;
  const own = body.chat_template;
  if (own !== null && own !== undefined) {
    // As vLLM: a request's template is a way to run code in the template engine; only a trusting server takes it.
    if (!trustRequestTemplate)
      throw badRequest(
        `'chat_template' is passed with the request, but the gateway runs without --trust-request-chat-template: refused (the model's own template applies)`,
        'chat_template',
        'unsupported_parameter',
      );
    if (typeof own !== 'string' || own === '' || own.length > MAX_REQUEST_CHAT_TEMPLATE_CHARS)
      throw badRequest(
        `'chat_template' must be a Jinja template of 1 to ${MAX_REQUEST_CHAT_TEMPLATE_CHARS} characters`,
        'chat_template',
      );
    out.chatTemplate = own;
  }
  return out;
}

/**
 * Render the chat messages with the tokenizer's chat template (switches from `chatTemplateOptions`, tools included)
 * and tokenize the result without adding special tokens again (the template already holds them, as in vLLM's chat
 * serving). Throws 400 (`param: 'messages'`) when the template rejects the conversation (ChatTemplateError `raised`,
 * `render`, `missing`), 400 naming `continue_final_message` (see `chatTemplateOptions`, `renderChat`), 500 when
 * the template itself does not parse, and 400 `context_length_exceeded` without tokenizing when the rendered text is
 * too large to fit `limits` (see `encodeWithinContext`). A long chat is rendered off the loop (see `renderChat`).
 */
export async function chatPromptTokens(
  tokenizer: PromptTokenizer,
  body: ChatCompletionBodyT,
  limits: ContextLimits,
  signal?: OffLoopSignal,
): Promise<number[]> {
  const text = await renderChat(tokenizer, body.messages, chatTemplateOptions(body), signal);
  return encodeWithinContext(tokenizer, text, false, limits, signal);
}

/**
 * Render chat `messages` (schema-valid bodies, see `toTemplateMessage`) with the tokenizer's chat template, passing
 * `tools` (when given) as the template's `tools`. With `continueFinalMessage`, the text is cut right after the final
 * message's text (see `cutAfterFinalMessage`). A chat of at least `OFF_LOOP_RENDER_MIN_MESSAGES` messages is rendered
 * on the off-loop worker (issue 26 part 5: 240k messages took 2–3 s of the loop): the text comes as a promise then,
 * rejecting with an `OffLoopError` as `encodeWithinContext` does; a shorter one is rendered here and returned as is.
 * Throws 400 (`param: 'messages'`) for more than `MAX_MESSAGES` messages (Responses history counts), and when the
 * template rejects the conversation (ChatTemplateError `raised`, `render`, `missing`), 400 (`param:
 * 'continue_final_message'`) when the final message's text cannot be found in the rendering, and 500 when the
 * template itself does not parse. Shared by the chat route, the Responses route and `/tokenize`.
 */
export function renderChat(
  tokenizer: Pick<PromptTokenizer, 'render' | 'tokenizer'>,
  messages: ChatCompletionBodyT['messages'],
  opts: {
    addGenerationPrompt: boolean;
    continueFinalMessage?: boolean;
    tools?: unknown[];
    templateKwargs?: Record<string, unknown> | null;
    chatTemplate?: string;
  },
  signal?: OffLoopSignal,
): string | Promise<string> {
  if (messages.length > MAX_MESSAGES) {
    throw badRequest(`'messages' has more than ${MAX_MESSAGES} entries (the gateway's limit)`, 'messages');
  }
  const shaped = messages.map((m, i) => toTemplateMessage(m, i));
  const options = {
    addGenerationPrompt: opts.addGenerationPrompt,
    ...(opts.tools !== undefined ? { tools: opts.tools } : {}),
    templateKwargs: opts.templateKwargs ?? undefined,
    ...(opts.chatTemplate !== undefined ? { chatTemplate: opts.chatTemplate } : {}),
  };
  const finish = (text: string) =>
    opts.continueFinalMessage === true ? cutAfterFinalMessage(text, shaped[shaped.length - 1]!.content) : text;
  if (shaped.length >= OFF_LOOP_RENDER_MIN_MESSAGES) {
    return tokenizer.render(shaped, options, signal).then(finish, (err: unknown) => {
      throw templateApiError(err, opts.chatTemplate !== undefined);
    });
  }
  let text: string;
  try {
    text = tokenizer.tokenizer.applyChatTemplate(shaped, options);
  } catch (err) {
    throw templateApiError(err, opts.chatTemplate !== undefined);
  }
  return finish(text);
}

/**
 * The error of a failed render: a template that does not parse is the server's problem (500); an off-loop error
 * passes through (errors.ts maps it); everything else is about these messages (400 naming `messages`).
 */
function templateApiError(err: unknown, requestTemplate = false): Error {
  if (err instanceof Error && err.name === 'OffLoopError') return err;
  const parse =
    err instanceof Error && err.name === 'ChatTemplateError' && (err as { kind?: unknown }).kind === 'parse';
  // The request's own template failing is the client's mistake, not the model's.
  if (parse && requestTemplate)
    return badRequest(`'chat_template' cannot be parsed: ${(err as Error).message}`, 'chat_template');
  if (err instanceof Error && err.name === 'ChatTemplateError' && (err as { kind?: unknown }).kind === 'parse') {
    return new ApiError(500, `the model's chat template cannot be parsed: ${err.message}`, {
      code: 'chat_template_error',
    });
  }
  return badRequest(
    `the chat template rejected the messages: ${err instanceof Error ? err.message : String(err)}`,
    'messages',
  );
}

/**
 * `rendered` cut right after the last occurrence of the final message's text, so generation continues that message
 * (the rule of Hugging Face transformers' `apply_chat_template(continue_final_message=True)`, which vLLM uses): the
 * trimmed text is searched; when the rendering keeps the message's leading/trailing spacing the cut keeps the
 * trailing spacing too, otherwise it ends at the trimmed text. Throws 400 (`param: 'continue_final_message'`) when
 * the final message has no text or its text does not appear in the rendering.
 */
export function cutAfterFinalMessage(rendered: string, finalContent: string | null): string {
  const trimmed = (finalContent ?? '').trim();
  if (trimmed === '') {
    throw badRequest(`'continue_final_message' needs a final message with text to continue`, 'continue_final_message');
  }
  const at = rendered.lastIndexOf(trimmed);
  if (at < 0) {
    throw badRequest(
      `'continue_final_message': the final message's text does not appear in the chat template's rendering`,
      'continue_final_message',
    );
  }
  const fromStart = finalContent!.trimStart();
  const keepsSpacing = rendered.slice(at, at + fromStart.length) === fromStart;
  return rendered.slice(0, at + (keepsSpacing ? fromStart.length : trimmed.length));
}

/**
 * The token ids of a completions `prompt`: a string (tokenized with special tokens unless `addSpecialTokens` is false,
 * as vLLM does), an array of one
 * string, token ids (each in [0, vocabSize)), or an array of one token-id list. Several prompts → 400 (batching
 * is not served); an empty list → 400; a string too large to fit `limits` → 400 `context_length_exceeded` without
 * tokenizing (see `encodeWithinContext`; a large one off the loop, dropped when `signal` aborts).
 */
export function completionPromptTokens(
  tokenizer: PromptTokenizer,
  prompt: CompletionBodyT['prompt'],
  limits: ContextLimits,
  signal?: OffLoopSignal,
  addSpecialTokens = true,
): number[] | Promise<number[]> {
  if (typeof prompt === 'string') return encodeWithinContext(tokenizer, prompt, addSpecialTokens, limits, signal);
  if (prompt.length === 0) throw badRequest(`'prompt' must not be empty`, 'prompt');
  const first = prompt[0];
  if (typeof first === 'string' || Array.isArray(first)) {
    if (prompt.length !== 1) {
      throw badRequest(
        `'prompt' holds ${prompt.length} prompts; batched prompts are not supported yet (send one)`,
        'prompt',
        'unsupported_parameter',
      );
    }
    if (typeof first === 'string') return encodeWithinContext(tokenizer, first, addSpecialTokens, limits, signal);
    return checkTokenIds(first, tokenizer.tokenizer.vocabSize);
  }
  return checkTokenIds(prompt as number[], tokenizer.tokenizer.vocabSize);
}

function checkTokenIds(ids: number[], vocabSize: number): number[] {
  ids.forEach((id, i) => {
    if (!Number.isSafeInteger(id) || id < 0 || id >= vocabSize) {
      throw badRequest(`'prompt' token ids must be in [0, ${vocabSize}); prompt[${i}] is ${id}`, 'prompt');
    }
  });
  return ids;
}
