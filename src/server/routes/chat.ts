/**
 * POST /v1/chat/completions (OpenAI Chat Completions; gateway.md sections 5, 8, 9 and 12).
 * Messages are rendered with the model's chat template and tokenized in the gateway; responses use `chatcmpl-` ids,
 * `chat.completion` / `chat.completion.chunk` objects, and a first stream chunk carrying the assistant role.
 * The output goes through the reasoning parser (`reasoning_content`) and the tool-call parser of the request's tool
 * mode (`tool_calls`; tool-choice.ts) as vLLM's chat serving does.
 */
import type { RouteContext } from '../route-context.js';
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { ChoiceDelta, ChoiceResult } from '../choice-output.js';
import { chatLogprobs } from '../logprobs.js';
import { createReasoningParser, newToolCallId, reasoningStartFor } from '../parsers/index.js';
import { chatTemplateOptions, encodeWithinContext, renderChat } from '../prompt.js';
import { ChatCompletionBody, type ChatCompletionBodyT } from '../schemas.js';
import { chunkedShape } from '../response-shape.js';
import { handleGeneration, type PreparedPrompt, type PromptSource } from '../serve-generation.js';
import { planTools, toolParserFor, type FunctionTool, type ToolPlan } from '../tool-choice.js';

/** The message fields of a delta (OpenAI `ChoiceDelta`): only what it carries. */
function deltaMessage(d: ChoiceDelta): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (d.reasoning !== '') out.reasoning_content = d.reasoning;
  if (d.content !== '') out.content = d.content;
  if (d.toolCalls.length > 0) out.tool_calls = d.toolCalls;
  return out;
}

/** The assistant message of a finished choice; `content` null when the choice only called tools (as vLLM). */
function fullMessage(r: ChoiceResult): Record<string, unknown> {
  const out: Record<string, unknown> = {
    role: 'assistant',
    content: r.toolCalls.length > 0 && r.content === '' ? null : r.content,
  };
  if (r.reasoning !== null) out.reasoning_content = r.reasoning;
  if (r.toolCalls.length > 0) out.tool_calls = r.toolCalls;
  return out;
}

/** Response shapes of the chat endpoint. */
export const chatShape = chunkedShape({
  endpoint: '/v1/chat/completions',
  idPrefix: 'chatcmpl-',
  chunkObject: 'chat.completion.chunk',
  responseObject: 'chat.completion',
  openingChoice: (index) => ({ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }),
  chunkChoice: (index, delta, finishReason, logprobs) => ({
    index,
    delta: deltaMessage(delta),
    logprobs,
    finish_reason: finishReason,
  }),
  fullChoice: (index, result, logprobs) => ({
    index,
    message: fullMessage(result),
    logprobs,
    finish_reason: result.finishReason,
  }),
  logprobsParams: 'chat',
  renderLogprobs: (entries, k, tokenText) => chatLogprobs(entries, k, tokenText),
});

/** Chat `tools` (`{type: "function", function: {...}}`) as function tools. */
export function chatTools(tools: ChatCompletionBodyT['tools']): FunctionTool[] {
  return (tools ?? []).map((t) => ({
    name: t.function.name,
    description: t.function.description,
    parameters: t.function.parameters,
  }));
}

/**
 * The parsers and constraint of a rendered chat prompt: the reasoning parser (started from the prompt's tail and
 * `enable_thinking`, reasoning.ts `reasoningStartFor`; a constrained output starts by detection, since the grammar
 * applies from the first token) and the tool plan's parser per choice.
 */
export function chatOutput(
  ctx: RouteContext,
  promptText: string,
  plan: ToolPlan,
  templateKwargs: Record<string, unknown> | null | undefined,
  constrained: boolean,
): Pick<PreparedPrompt, 'output' | 'constraint'> {
  const name = ctx.reasoningParser;
  const start = name === null ? null : reasoningStartFor(name, promptText, templateKwargs?.enable_thinking);
  const reasoningStart = start === 'reasoning' && (constrained || plan.constraint !== null) ? 'detect' : start;
  return {
    output: () => ({
      reasoning: name === null || reasoningStart === null ? null : createReasoningParser(name, reasoningStart),
      tools: toolParserFor(plan.mode, newToolCallId),
      callFinishReason: plan.mode.kind === 'named' ? 'stop' : 'tool_calls',
      parallelToolCalls: plan.parallelToolCalls,
    }),
    constraint: plan.constraint === null ? null : { output: plan.constraint, param: 'tool_choice' },
  };
}

/**
 * The chat prompt: `messages` rendered with the chat template (tools included), then tokenized (gateway.md 5; both
 * off the loop when large, prompt.ts); the tool mode from `tools` / `tool_choice` / `parallel_tool_calls`
 * (tool-choice.ts `planTools`).
 */
export const chatPrompt: PromptSource<ChatCompletionBodyT> = {
  param: 'messages',
  async prepare(ctx, body, limits, opts) {
    const plan = planTools(chatTools(body.tools), body.tool_choice, body.parallel_tool_calls, ctx.toolCallParser);
    const options = chatTemplateOptions(body, ctx.trustRequestChatTemplate);
    const rendered = renderChat(ctx.offLoop, body.messages, options, opts.signal);
    // A short chat renders synchronously: no extra turn for it.
    const text = typeof rendered === 'string' ? rendered : await rendered;
    // The template holds the specials: none added unless asked (vLLM's default for chat).
    const tokens = await encodeWithinContext(ctx.offLoop, text, body.add_special_tokens === true, limits, opts.signal);
    return { tokens, ...chatOutput(ctx, text, plan, options.templateKwargs, opts.constrained) };
  },
};

/** Register the chat completions route on `app` (the shared flow is `handleGeneration`). */
export function registerChatRoute(app: FastifyInstance, ctx: RouteContext): void {
  app
    .withTypeProvider<TypeBoxTypeProvider>()
    .post('/v1/chat/completions', { schema: { body: ChatCompletionBody } }, (request, reply) =>
      handleGeneration(ctx, chatShape, chatPrompt, request, reply, request.body),
    );
}
