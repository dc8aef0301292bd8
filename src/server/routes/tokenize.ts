/**
 * POST /tokenize and POST /detokenize as vLLM's OpenAI-compatible server has them (vLLM `serving_tokenization.py`
 * and `protocol.py`: `TokenizeCompletionRequest`, `TokenizeChatRequest`, `TokenizeResponse`, `DetokenizeRequest`,
 * `DetokenizeResponse`; gateway.md section 5: the gateway owns tokenization, so these answer without any engine).
 *
 * - `/tokenize` with `prompt` (string): tokens of the text, `add_special_tokens` default true;
 *   with `messages`: the chat template rendered (`add_generation_prompt` default true, `continue_final_message`,
 *   `tools`, `chat_template_kwargs`; prompt.ts `chatTemplateOptions`), then
 *   tokenized with `add_special_tokens` default false (the template holds the specials, as vLLM).
 *   → `{count, max_model_len, tokens, token_strs: null}` (`max_model_len` as /v1/models reports it).
 * - `/detokenize` `{tokens}` → `{prompt}` (special tokens kept, as vLLM's detokenize).
 * `model` other than the served one → 404; exactly one of `prompt` / `messages` → else 400; bad token ids → 400.
 */
import type { FastifyInstance } from 'fastify';
import { Type, type TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { badRequest } from '../errors.js';
import { MAX_TOOLS } from '../input-limits.js';
import { chatTemplateOptions, renderChat } from '../prompt.js';
import { ChatMessageSchema, ToolSchema } from '../schemas.js';
import { checkModel, type RouteContext } from '../serve-generation.js';

const Opt = <T extends Parameters<typeof Type.Optional>[0]>(s: T) => Type.Optional(Type.Union([s, Type.Null()]));

/** POST /tokenize body: a completion-style `prompt` or a chat-style `messages` (vLLM's two request types). */
export const TokenizeBody = Type.Object(
  {
    model: Opt(Type.String()),
    prompt: Opt(Type.String()),
    messages: Opt(Type.Array(ChatMessageSchema, { minItems: 1 })),
    add_special_tokens: Opt(Type.Boolean()),
    add_generation_prompt: Opt(Type.Boolean()),
    continue_final_message: Opt(Type.Boolean()),
    tools: Opt(Type.Array(ToolSchema, { maxItems: MAX_TOOLS })),
    chat_template_kwargs: Opt(Type.Record(Type.String(), Type.Unknown())),
  },
  { additionalProperties: false },
);

/** POST /detokenize body. */
export const DetokenizeBody = Type.Object(
  { model: Opt(Type.String()), tokens: Type.Array(Type.Integer()) },
  { additionalProperties: false },
);

/** Register `/tokenize` and `/detokenize` on `app`. */
export function registerTokenizeRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const typed = app.withTypeProvider<TypeBoxTypeProvider>();
  typed.post('/tokenize', { schema: { body: TokenizeBody } }, async (request) => {
    const body = request.body;
    checkModel(body.model, ctx.servedModelNames);
    const hasPrompt = body.prompt !== null && body.prompt !== undefined;
    const hasMessages = body.messages !== null && body.messages !== undefined;
    if (hasPrompt === hasMessages) throw badRequest(`exactly one of 'prompt' and 'messages' is required`, hasPrompt ? 'messages' : 'prompt');
    let tokens: number[];
    if (hasMessages) {
      const text = renderChat(ctx.offLoop, body.messages!, chatTemplateOptions(body));
      tokens = ctx.tokenizer.encode(text, { addSpecialTokens: body.add_special_tokens ?? false });
    } else {
      for (const name of ['add_generation_prompt', 'continue_final_message', 'tools'] as const) {
        if (body[name] !== null && body[name] !== undefined) throw badRequest(`'${name}' applies to 'messages' only`, name);
      }
      tokens = ctx.tokenizer.encode(body.prompt!, { addSpecialTokens: body.add_special_tokens ?? true });
    }
    return { count: tokens.length, max_model_len: ctx.router.maxModelLen, tokens, token_strs: null };
  });

  typed.post('/detokenize', { schema: { body: DetokenizeBody } }, async (request) => {
    const body = request.body;
    checkModel(body.model, ctx.servedModelNames);
    try {
      ctx.tokenizer.validateTokenIds(body.tokens);
    } catch (err) {
      throw badRequest(`'tokens': ${err instanceof Error ? err.message : String(err)}`, 'tokens');
    }
    return { prompt: ctx.tokenizer.decode(body.tokens, { skipSpecialTokens: false }) };
  });
}
