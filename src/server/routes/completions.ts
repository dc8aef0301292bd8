/**
 * POST /v1/completions (OpenAI legacy Completions; gateway.md sections 5, 8, 9 and 12).
 * `prompt`: a string, an array of one string, token ids, or an array of one token-id list; responses use `cmpl-`
 * ids and `text_completion` objects (stream chunks too, as OpenAI does). No reasoning or tool-call parsing (as vLLM's
 * completions serving); structured outputs apply.
 */
import type { RouteContext } from '../route-context.js';
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { completionLogprobs } from '../logprobs.js';
import { completionPromptTokens } from '../prompt.js';
import { CompletionBody, type CompletionBodyT } from '../schemas.js';
import { chunkedShape } from '../response-shape.js';
import { handleGeneration, type PromptSource } from '../serve-generation.js';

/** Response shapes of the completions endpoint. */
export const completionShape = chunkedShape({
  endpoint: '/v1/completions',
  idPrefix: 'cmpl-',
  chunkObject: 'text_completion',
  responseObject: 'text_completion',
  openingChoice: () => null,
  chunkChoice: (index, delta, finishReason, logprobs) => ({
    index,
    text: delta.content,
    logprobs,
    finish_reason: finishReason,
  }),
  fullChoice: (index, result, logprobs) => ({
    index,
    text: result.content,
    logprobs,
    finish_reason: result.finishReason,
  }),
  logprobsParams: 'completions',
  renderLogprobs: completionLogprobs,
});

/** The completions prompt: `prompt` tokenized, or taken as token ids (gateway.md 5). */
export const completionPrompt: PromptSource<CompletionBodyT> = {
  param: 'prompt',
  prepare: async (ctx, body, limits, opts) => ({
    tokens: await completionPromptTokens(
      ctx.offLoop,
      body.prompt,
      limits,
      opts.signal,
      body.add_special_tokens ?? true,
    ),
  }),
};

/** Register the completions route on `app` (the shared flow is `handleGeneration`). */
export function registerCompletionsRoute(app: FastifyInstance, ctx: RouteContext): void {
  app
    .withTypeProvider<TypeBoxTypeProvider>()
    .post('/v1/completions', { schema: { body: CompletionBody } }, (request, reply) =>
      handleGeneration(ctx, completionShape, completionPrompt, request, reply, request.body),
    );
}
