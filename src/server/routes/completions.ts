/**
 * POST /v1/completions (OpenAI legacy Completions; gateway.md sections 5, 8, 9 and 12).
 * `prompt`: a string, an array of one string, token ids, or an array of one token-id list; responses use `cmpl-`
 * ids and `text_completion` objects (stream chunks too, as OpenAI does).
 */
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { badRequest } from '../errors.js';
import { buildSampling, rejectUnsupported } from '../params.js';
import { completionPromptTokens } from '../prompt.js';
import { CompletionBody } from '../schemas.js';
import { checkModel, header, serveGeneration, type ResponseShape, type RouteContext } from '../serve-generation.js';

/** Response shapes of the completions endpoint. */
export const completionShape: ResponseShape = {
  endpoint: '/v1/completions',
  idPrefix: 'cmpl-',
  chunkObject: 'text_completion',
  openingChoice: () => null,
  chunkChoice: (text, finishReason) => ({ index: 0, text, logprobs: null, finish_reason: finishReason }),
  fullResponse: (base, text, finishReason, usage) => ({
    ...header(base, 'text_completion'),
    choices: [{ index: 0, text, logprobs: null, finish_reason: finishReason }],
    usage,
  }),
};

/** Register the completions route on `app`. */
export function registerCompletionsRoute(app: FastifyInstance, ctx: RouteContext): void {
  app.withTypeProvider<TypeBoxTypeProvider>().post(
    '/v1/completions',
    { schema: { body: CompletionBody } },
    async (request, reply) => {
      const startedAt = ctx.now();
      const body = request.body;
      checkModel(body.model, ctx.modelId);
      rejectUnsupported(body as Record<string, unknown>);
      if (body.stream !== true && body.stream_options != null) {
        throw badRequest(`'stream_options' is only allowed when 'stream' is true`, 'stream_options');
      }
      const promptTokenIds = completionPromptTokens(ctx.tokenizer, body.prompt);
      const sampling = buildSampling(body, {
        promptTokens: promptTokenIds.length,
        maxModelLen: ctx.backend.maxModelLen,
        vocabSize: ctx.tokenizer.vocabSize,
        promptParam: 'prompt',
      });
      return serveGeneration(ctx, completionShape, request, reply, {
        promptTokenIds,
        sampling,
        stream: body.stream === true,
        includeUsage: body.stream_options?.include_usage === true,
      }, startedAt);
    },
  );
}
