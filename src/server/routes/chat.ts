/**
 * POST /v1/chat/completions (OpenAI Chat Completions; gateway.md sections 5, 8, 9 and 12).
 * Messages are rendered with the model's chat template and tokenized in the gateway; responses use `chatcmpl-` ids,
 * `chat.completion` / `chat.completion.chunk` objects, and a first stream chunk carrying the assistant role.
 */
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { badRequest } from '../errors.js';
import { buildSampling, rejectUnsupported } from '../params.js';
import { chatPromptTokens } from '../prompt.js';
import { ChatCompletionBody } from '../schemas.js';
import { checkModel, header, serveGeneration, type ResponseShape, type RouteContext } from '../serve-generation.js';

/** Response shapes of the chat endpoint. */
export const chatShape: ResponseShape = {
  endpoint: '/v1/chat/completions',
  idPrefix: 'chatcmpl-',
  chunkObject: 'chat.completion.chunk',
  openingChoice: () => ({ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }),
  chunkChoice: (text, finishReason) => ({
    index: 0,
    delta: text === '' ? {} : { content: text },
    logprobs: null,
    finish_reason: finishReason,
  }),
  fullResponse: (base, text, finishReason, usage) => ({
    ...header(base, 'chat.completion'),
    choices: [{ index: 0, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: finishReason }],
    usage,
  }),
};

/** Register the chat completions route on `app`. */
export function registerChatRoute(app: FastifyInstance, ctx: RouteContext): void {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/v1/chat/completions',
    { schema: { body: ChatCompletionBody } },
    async (request, reply) => {
      const startedAt = ctx.now();
      const body = request.body;
      checkModel(body.model, ctx.modelId);
      rejectUnsupported(body as Record<string, unknown>);
      if (body.stream !== true && body.stream_options != null) {
        throw badRequest(`'stream_options' is only allowed when 'stream' is true`, 'stream_options');
      }
      const promptTokenIds = chatPromptTokens(ctx.tokenizer, body);
      const sampling = buildSampling(body, {
        promptTokens: promptTokenIds.length,
        maxModelLen: ctx.backend.maxModelLen,
        vocabSize: ctx.tokenizer.vocabSize,
        promptParam: 'messages',
      });
      return serveGeneration(ctx, chatShape, request, reply, {
        promptTokenIds,
        sampling,
        stream: body.stream === true,
        includeUsage: body.stream_options?.include_usage === true,
      }, startedAt);
    },
  );
}
