/**
 * POST /v1/completions (OpenAI legacy Completions; gateway.md sections 5, 8, 9 and 12).
 * `prompt`: a string, an array of one string, token ids, or an array of one token-id list; responses use `cmpl-`
 * ids and `text_completion` objects (stream chunks too, as OpenAI does). No reasoning or tool-call parsing (as vLLM's
 * completions serving); structured outputs apply. `echo: true` prepends the prompt's text (without logprobs).
 */
import type { RouteContext } from '../route-context.js';
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { completionLogprobs } from '../logprobs.js';
import { completionPromptTokens } from '../prompt.js';
import { CompletionBody, type CompletionBodyT } from '../schemas.js';
import { badRequest } from '../errors.js';
import { chunkedShape } from '../response-shape.js';
import { handleGeneration, type PromptSource } from '../serve-generation.js';

/**
 * Response shapes of the completions endpoint; with `echo` (the prompt's text), as vLLM echoes: every choice's text
 * starts with the prompt (non-streaming), or each choice's first chunk is the prompt (streaming).
 */
export function completionShapeFor(echo: string | null = null) {
  return chunkedShape({
    endpoint: '/v1/completions',
    idPrefix: 'cmpl-',
    chunkObject: 'text_completion',
    responseObject: 'text_completion',
    openingChoice: (index) => (echo === null ? null : { index, text: echo, logprobs: null, finish_reason: null }),
    chunkChoice: (index, delta, finishReason, logprobs) => ({
      index,
      text: delta.content,
      logprobs,
      finish_reason: finishReason,
    }),
    fullChoice: (index, result, logprobs) => ({
      index,
      text: echo === null ? result.content : echo + result.content,
      logprobs,
      finish_reason: result.finishReason,
    }),
    logprobsParams: 'completions',
    renderLogprobs: completionLogprobs,
  });
}

/** The completions shape without echo (one for every request). */
export const completionShape = completionShapeFor();

/**
 * The text `echo` prepends: the prompt string, or the token-id prompt decoded (special tokens kept, as vLLM echoes
 * the prompt it got). Null without `echo`. Throws `ApiError` 400 naming `echo` with `logprobs` (echoing needs the
 * prompt's logprobs, which the engines are not asked for).
 */
function echoText(ctx: RouteContext, body: CompletionBodyT): string | null {
  if (body.echo === null || body.echo === undefined || body.echo === false) return null;
  if (body.echo !== true) throw badRequest(`'echo' must be a boolean`, 'echo');
  if (body.logprobs !== null && body.logprobs !== undefined)
    throw badRequest(
      `'echo' with 'logprobs' needs the prompt's logprobs, which this gateway does not return`,
      'echo',
      'unsupported_parameter',
    );
  const p = body.prompt;
  const first = Array.isArray(p) ? p[0] : p;
  if (typeof first === 'string') return first;
  const ids = (Array.isArray(first) ? first : p) as number[];
  return ctx.tokenizer.decode(ids, { skipSpecialTokens: false });
}

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
    .post('/v1/completions', { schema: { body: CompletionBody } }, (request, reply) => {
      const echo = echoText(ctx, request.body);
      const shape = echo === null ? completionShape : completionShapeFor(echo);
      return handleGeneration(ctx, shape, completionPrompt, request, reply, request.body);
    });
}
