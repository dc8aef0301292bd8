/**
 * POST /v1/chat/completions (OpenAI Chat Completions; gateway.md sections 5, 8, 9 and 12).
 * Messages are rendered with the model's chat template and tokenized in the gateway; responses use `chatcmpl-` ids,
 * `chat.completion` / `chat.completion.chunk` objects, and a first stream chunk carrying the assistant role.
 */
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { chatLogprobs } from '../logprobs.js';
import { chatPromptTokens } from '../prompt.js';
import { ChatCompletionBody, type ChatCompletionBodyT } from '../schemas.js';
import { handleGeneration, type PromptSource, type ResponseShape, type RouteContext } from '../serve-generation.js';

/** Response shapes of the chat endpoint. */
export const chatShape: ResponseShape = {
  endpoint: '/v1/chat/completions',
  idPrefix: 'chatcmpl-',
  chunkObject: 'chat.completion.chunk',
  responseObject: 'chat.completion',
  openingChoice: (index) => ({ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }),
  chunkChoice: (index, text, finishReason, logprobs) => ({
    index,
    delta: text === '' ? {} : { content: text },
    logprobs,
    finish_reason: finishReason,
  }),
  fullChoice: (index, text, finishReason, logprobs) => ({
    index,
    message: { role: 'assistant', content: text },
    logprobs,
    finish_reason: finishReason,
  }),
  logprobsParams: 'chat',
  renderLogprobs: (entries, k, tokenText) => chatLogprobs(entries, k, tokenText),
};

/** The chat prompt: `messages` rendered with the chat template, then tokenized (gateway.md 5). */
export const chatPrompt: PromptSource<ChatCompletionBodyT> = {
  param: 'messages',
  tokens: chatPromptTokens,
};

/** Register the chat completions route on `app` (the shared flow is `handleGeneration`). */
export function registerChatRoute(app: FastifyInstance, ctx: RouteContext): void {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/v1/chat/completions',
    { schema: { body: ChatCompletionBody } },
    (request, reply) => handleGeneration(ctx, chatShape, chatPrompt, request, reply, request.body),
  );
}
