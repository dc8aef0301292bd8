/**
 * Responses-API input → the chat messages the chat template renders (OpenAI Responses input items; vLLM's
 * `responses` serving does the same conversion):
 * - a string `input` is one user message;
 * - `message` items (`type` may be omitted): roles `user`, `system`, `developer`, `assistant`; content a string or
 *   `input_text` / `output_text` parts (other part types → 400 naming the part);
 * - `function_call` items become the assistant's `tool_calls` (consecutive ones, and a directly preceding assistant
 *   text, form one assistant turn); `function_call_output` items become `tool` messages;
 * - `reasoning` items are dropped (chat templates strip earlier turns' reasoning anyway);
 * - `item_reference` items, and `previous_response_id`, are resolved from the store (responses/store.ts).
 * `instructions` become a first system message (not carried over from a previous response, as OpenAI documents).
 */
import { ApiError, badRequest, quoteValue } from '../errors.js';
import type { ChatCompletionBodyT } from '../schemas.js';
import type { ResponsesStore } from './store.js';

type ChatMessage = ChatCompletionBodyT['messages'][number];
type Item = Record<string, unknown>;

const isObject = (v: unknown): v is Item => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The resolved conversation: its items (what a stored response keeps) and the chat messages to render. */
export interface ResponsesConversation {
  items: Item[];
  messages: ChatMessage[];
}

/** The text of a message item's content (a string, or text parts joined without separator). */
function contentText(content: unknown, path: string): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw badRequest(`'${path}' must be a string or a list of content parts`, path);
  return content
    .map((part, j) => {
      if (!isObject(part)) throw badRequest(`'${path}[${j}]' must be an object`, `${path}[${j}]`);
      if (
        (part.type === 'input_text' || part.type === 'output_text' || part.type === 'text') &&
        typeof part.text === 'string'
      )
        return part.text;
      throw badRequest(
        `content part type ${quoteValue(part.type)} is not supported (only input_text and output_text are)`,
        `${path}[${j}].type`,
        'unsupported_content',
      );
    })
    .join('');
}

/** The output of a `function_call_output` item as text (a string, or text parts; anything else serialized). */
function outputText(output: unknown, path: string): string {
  if (typeof output === 'string') return output;
  if (Array.isArray(output)) return contentText(output, path);
  return JSON.stringify(output ?? '');
}

/**
 * The items of a request: the previous response's conversation (`previous_response_id`: its input and output
 * items), then this request's input with every `item_reference` replaced by the stored item. Throws `ApiError` 404
 * (`param: previous_response_id`) for an unknown previous response, 400 naming `input[i]` for an unknown reference
 * or a malformed item.
 */
export function resolveItems(
  store: ResponsesStore,
  input: string | unknown[],
  previousResponseId: string | null | undefined,
): Item[] {
  const items: Item[] = [];
  if (previousResponseId !== null && previousResponseId !== undefined) {
    const prev = store.get(previousResponseId);
    if (prev === undefined) {
      throw new ApiError(
        404,
        `Previous response with id '${previousResponseId}' not found (responses are kept in this gateway's memory only: ${store.enabled ? 'it was never stored, or was evicted' : 'storing is disabled'})`,
        {
          type: 'invalid_request_error',
          param: 'previous_response_id',
          code: 'previous_response_not_found',
        },
      );
    }
    items.push(...prev.inputItems, ...prev.outputItems);
  }
  if (typeof input === 'string') {
    items.push({ type: 'message', role: 'user', content: input });
    return items;
  }
  input.forEach((raw, i) => {
    if (!isObject(raw)) throw badRequest(`'input[${i}]' must be an object`, `input[${i}]`);
    if (raw.type === 'item_reference') {
      const id = raw.id;
      const found = typeof id === 'string' ? store.item(id) : undefined;
      if (found === undefined) {
        throw badRequest(
          `Item with id ${quoteValue(id)} not found (items are kept with stored responses in this gateway's memory only)`,
          `input[${i}]`,
          'item_not_found',
        );
      }
      items.push(found);
      return;
    }
    items.push(raw);
  });
  return items;
}

/**
 * The chat messages of resolved `items`, after a system message with `instructions` when given. Throws `ApiError`
 * 400 naming `input[i]` (index into `items`) for a malformed or unsupported item.
 */
export function itemsToMessages(items: readonly Item[], instructions: string | null | undefined): ChatMessage[] {
  const messages: ChatMessage[] = [];
  if (typeof instructions === 'string' && instructions !== '') messages.push({ role: 'system', content: instructions });
  /** The assistant message the next function_call joins (the last message, when it is an assistant turn). */
  const openAssistant = (): ChatMessage & { tool_calls: unknown[] } => {
    const last = messages[messages.length - 1];
    if (last !== undefined && last.role === 'assistant') {
      last.tool_calls ??= [];
      return last as ChatMessage & { tool_calls: unknown[] };
    }
    const m = { role: 'assistant' as const, content: null, tool_calls: [] as unknown[] };
    messages.push(m);
    return m;
  };
  items.forEach((item, i) => {
    const path = `input[${i}]`;
    const type = item.type ?? 'message';
    switch (type) {
      case 'message': {
        const role = item.role;
        if (role !== 'user' && role !== 'system' && role !== 'developer' && role !== 'assistant') {
          throw badRequest(
            `'${path}.role' must be user, system, developer or assistant; got ${quoteValue(role)}`,
            `${path}.role`,
          );
        }
        messages.push({ role, content: contentText(item.content, `${path}.content`) });
        return;
      }
      case 'function_call': {
        const { call_id: callId, name, arguments: args } = item;
        if (typeof callId !== 'string' || typeof name !== 'string' || typeof args !== 'string') {
          throw badRequest(`'${path}' (function_call) needs string call_id, name and arguments`, path);
        }
        openAssistant().tool_calls.push({ id: callId, type: 'function', function: { name, arguments: args } });
        return;
      }
      case 'function_call_output': {
        if (typeof item.call_id !== 'string')
          throw badRequest(`'${path}' (function_call_output) needs a string call_id`, `${path}.call_id`);
        messages.push({ role: 'tool', tool_call_id: item.call_id, content: outputText(item.output, `${path}.output`) });
        return;
      }
      case 'reasoning':
        return;
      default:
        throw badRequest(
          `input item type ${quoteValue(type)} is not supported (message, function_call, function_call_output, reasoning and item_reference are)`,
          `${path}.type`,
          'unsupported_parameter',
        );
    }
  });
  if (messages.length === 0) throw badRequest(`'input' must hold at least one message`, 'input');
  return messages;
}
