/**
 * POST /v1/responses, GET /v1/responses/{id}, GET /v1/responses/{id}/input_items, DELETE /v1/responses/{id}
 * (OpenAI Responses API; the subset the openai SDK and the Vercel AI SDK's default `openai()` provider use).
 *
 * A Responses request is served as a chat request of one choice: `input` items (and `previous_response_id`,
 * `instructions`) become chat messages rendered by the chat template (responses/input.ts), function `tools` and
 * `tool_choice` the chat tool plan (tool-choice.ts), `text.format` a structured-output constraint,
 * `max_output_tokens` the completion limit, `top_logprobs` / `include: ["message.output_text.logprobs"]` logprobs.
 * The output is shaped as response items and streaming events (responses/output.ts). `store` (default true) keeps the
 * response in the gateway's bounded in-memory store (responses/store.ts).
 */
import type { RouteContext } from '../route-context.js';
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { ApiError, badRequest, quoteValue } from '../errors.js';
import { itemsToMessages, resolveItems } from '../responses/input.js';
import { responsesShape } from '../responses/output.js';
import { ResponsesBody, type ResponsesBodyT } from '../responses/schema.js';
import { chatPrompt } from './chat.js';
import { parseReasoningEffort, type ReasoningEffort } from '../reasoning-effort.js';
import type { ChatCompletionBodyT } from '../schemas.js';
import { handleGeneration, type PromptSource } from '../serve-generation.js';

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Responses `tools` (flat `{type: "function", name, ...}`) in the chat form the template and tool plan take. */
function chatFormTools(tools: unknown[] | null | undefined): NonNullable<ChatCompletionBodyT['tools']> {
  return (tools ?? []).map((t, i) => {
    if (!isObject(t) || t.type !== 'function') {
      throw badRequest(
        `tool type ${quoteValue(isObject(t) ? t.type : t)} is not supported (only function tools are)`,
        `tools[${i}].type`,
        'unsupported_parameter',
      );
    }
    if (typeof t.name !== 'string' || t.name === '')
      throw badRequest(`'tools[${i}].name' must be a non-empty string`, `tools[${i}].name`);
    const fn: NonNullable<ChatCompletionBodyT['tools']>[number]['function'] = { name: t.name };
    if (typeof t.description === 'string') fn.description = t.description;
    if (isObject(t.parameters)) fn.parameters = t.parameters;
    return { type: 'function' as const, function: fn };
  });
}

/** `text.format` as a chat `response_format` (`text`, `json_object`, `json_schema` with a flat `schema`). */
function responseFormat(text: ResponsesBodyT['text']): unknown {
  const f = text?.format;
  if (f === null || f === undefined) return undefined;
  if (!isObject(f)) throw badRequest(`'text.format' must be an object`, 'text.format');
  if (f.type === 'json_schema')
    return { type: 'json_schema', json_schema: { name: f.name, schema: f.schema, strict: f.strict } };
  return f;
}

/**
 * `reasoning` ({effort, summary}): the effort as chat's `reasoning_effort` (reasoning-effort.ts), the summary mode
 * echoed (`auto`, `concise`, `detailed` or null: the gateway has no summarizer, so every reasoning item's summary is
 * its reasoning text whatever the mode; responses/output.ts). Throws 400 naming `reasoning.effort` /
 * `reasoning.summary` for another value.
 */
function reasoningOf(r: ResponsesBodyT['reasoning']): { effort: ReasoningEffort | null; summary: string | null } {
  const effort = parseReasoningEffort(r?.effort, 'reasoning.effort');
  const summary = r?.summary ?? r?.generate_summary ?? null;
  if (summary !== null && !['auto', 'concise', 'detailed'].includes(summary as string))
    throw badRequest(
      `'reasoning.summary' must be auto, concise or detailed; got ${quoteValue(summary)}`,
      'reasoning.summary',
    );
  return { effort, summary: summary as string | null };
}

/** Refuse what this gateway cannot serve (400 naming the field). */
function refuseUnsupported(body: ResponsesBodyT): void {
  if (body.background === true)
    throw badRequest(
      `'background' responses are not supported (this gateway keeps no job store)`,
      'background',
      'unsupported_parameter',
    );
  if (body.conversation !== undefined && body.conversation !== null)
    throw badRequest(
      `'conversation' is not supported (use previous_response_id or send the items)`,
      'conversation',
      'unsupported_parameter',
    );
  if (body.prompt !== undefined && body.prompt !== null)
    throw badRequest(`'prompt' (stored prompt templates) is not supported`, 'prompt', 'unsupported_parameter');
  if (
    body.top_logprobs !== null &&
    body.top_logprobs !== undefined &&
    (body.top_logprobs < 0 || body.top_logprobs > 20)
  ) {
    throw badRequest(`'top_logprobs' must be in [0, 20]; got ${body.top_logprobs}`, 'top_logprobs');
  }
}

/** The Responses prompt: the chat prompt over the converted messages, admission errors naming `input`. */
const responsesPrompt: PromptSource<ChatCompletionBodyT> = { ...chatPrompt, param: 'input' };

const notFound = (id: string) =>
  new ApiError(404, `Response with id '${id}' not found (responses are kept in this gateway's memory only)`, {
    type: 'invalid_request_error',
    param: 'response_id',
    code: 'not_found',
  });

/** The ids of the `item_reference` items of a request's input list. */
function referencedItemIds(input: readonly unknown[]): string[] {
  const ids: string[] = [];
  for (const raw of input) {
    const item = raw as { type?: unknown; id?: unknown } | null;
    if (item !== null && typeof item === 'object' && item.type === 'item_reference' && typeof item.id === 'string')
      ids.push(item.id);
  }
  return ids;
}

/** Register the Responses routes on `app`. */
export function registerResponsesRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const typed = app.withTypeProvider<TypeBoxTypeProvider>();
  typed.post('/v1/responses', { schema: { body: ResponsesBody } }, async (request, reply) => {
    const body = request.body;
    refuseUnsupported(body);
    // With --workers N the store lives in the router: copy what this request refers to first.
    await ctx.responses.prefetch(
      typeof body.previous_response_id === 'string' ? [body.previous_response_id] : [],
      Array.isArray(body.input) ? referencedItemIds(body.input) : [],
    );
    const items = resolveItems(ctx.responses, body.input, body.previous_response_id);
    const messages = itemsToMessages(items, body.instructions);
    const logprobs = (body.include ?? []).includes('message.output_text.logprobs') || (body.top_logprobs ?? 0) > 0;
    const reasoning = reasoningOf(body.reasoning);
    const chatBody: ChatCompletionBodyT = {
      model: body.model,
      messages,
      tools: chatFormTools(body.tools),
      tool_choice: body.tool_choice,
      parallel_tool_calls: body.parallel_tool_calls,
      max_completion_tokens: body.max_output_tokens,
      temperature: body.temperature,
      top_p: body.top_p,
      stream: body.stream,
      response_format: responseFormat(body.text),
      ...(reasoning.effort !== null ? { reasoning_effort: reasoning.effort } : {}),
      ...(logprobs ? { logprobs: true, top_logprobs: body.top_logprobs ?? 0 } : {}),
    };
    const shape = responsesShape({
      store: ctx.responses,
      storeRequested: body.store !== false,
      inputItems: items,
      echo: {
        instructions: body.instructions ?? null,
        max_output_tokens: body.max_output_tokens ?? null,
        temperature: body.temperature ?? 1,
        top_p: body.top_p ?? 1,
        tools: body.tools ?? [],
        tool_choice: body.tool_choice ?? 'auto',
        parallel_tool_calls: body.parallel_tool_calls ?? true,
        text: { format: body.text?.format ?? { type: 'text' } },
        previous_response_id: body.previous_response_id ?? null,
        metadata: body.metadata ?? {},
        user: body.user ?? null,
        truncation: body.truncation ?? 'disabled',
        reasoning,
        background: false,
      },
    });
    return handleGeneration(ctx, shape, responsesPrompt, request, reply, chatBody);
  });

  typed.get('/v1/responses/:id', async (request) => {
    const { id } = request.params as { id: string };
    const stored = await ctx.responses.fetch(id);
    if (stored === undefined) throw notFound(id);
    return stored.response;
  });

  typed.get('/v1/responses/:id/input_items', async (request) => {
    const { id } = request.params as { id: string };
    const stored = await ctx.responses.fetch(id);
    if (stored === undefined) throw notFound(id);
    const data = stored.inputItems;
    const idOf = (x: Record<string, unknown> | undefined) => (typeof x?.id === 'string' ? x.id : null);
    return { object: 'list', data, first_id: idOf(data[0]), last_id: idOf(data[data.length - 1]), has_more: false };
  });

  typed.delete('/v1/responses/:id', async (request) => {
    const { id } = request.params as { id: string };
    if (!(await ctx.responses.remove(id))) throw notFound(id);
    return { id, object: 'response', deleted: true };
  });
}
