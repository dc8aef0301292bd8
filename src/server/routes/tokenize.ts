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
 * `model` other than the served one → 404; exactly one of `prompt` / `messages` → else 400; bad token ids → 400;
 * more than `MAX_MESSAGES` messages → 400.
 *
 * Large work goes off the event loop (issue 26 part 5: a 7 MB `/tokenize` stalled every stream for 1.3–1.6 s, 1.3 M
 * ids to `/detokenize` for 1.8–2.2 s), as vLLM runs its tokenizer off its event loop and caps neither: a text of
 * `OFF_LOOP_ENCODE_MIN_CHARS` or more, a chat of `OFF_LOOP_RENDER_MIN_MESSAGES` messages or more, and
 * `OFF_LOOP_DECODE_MIN_IDS` ids or more are the worker's jobs (tokenizer/off-loop.ts): 429 when its queue is full,
 * dropped when the client leaves, and the worker writes the answer's ids or text as JSON, which is sent as is.
 * Smaller requests are answered here, as before.
 */
import type { RouteContext } from '../route-context.js';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Type, type TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  OFF_LOOP_DECODE_MIN_IDS,
  OFF_LOOP_ENCODE_MIN_CHARS,
  OFF_LOOP_RENDER_MIN_MESSAGES,
} from '../../tokenizer/off-loop.js';
import { watchClientDisconnect, type DisconnectSignal } from '../disconnect.js';
import { badRequest } from '../errors.js';
import { MAX_MESSAGES, MAX_TOOLS } from '../input-limits.js';
import { chatTemplateOptions, renderChat } from '../prompt.js';
import { ChatMessageSchema, ToolSchema } from '../schemas.js';
import { adapterNames, checkModel } from '../adapters.js';

const Opt = <T extends Parameters<typeof Type.Optional>[0]>(s: T) => Type.Optional(Type.Union([s, Type.Null()]));

/** POST /tokenize body: a completion-style `prompt` or a chat-style `messages` (vLLM's two request types). */
export const TokenizeBody = Type.Object(
  {
    model: Opt(Type.String()),
    prompt: Opt(Type.String()),
    messages: Opt(Type.Array(ChatMessageSchema, { minItems: 1, maxItems: MAX_MESSAGES })),
    add_special_tokens: Opt(Type.Boolean()),
    /** vLLM: also answer each token's vocabulary string (`token_strs`). */
    return_token_strs: Opt(Type.Boolean()),
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

/**
 * Run `work` with the client's disconnect watched (its signal goes to the off-loop jobs). A client that left gets no
 * answer: its connection is destroyed and the reply hijacked; any other outcome is `work`'s.
 */
async function whileConnected(
  request: FastifyRequest,
  reply: FastifyReply,
  work: (signal: DisconnectSignal) => Promise<unknown>,
): Promise<unknown> {
  const watch = watchClientDisconnect(request.raw, reply.raw);
  try {
    return await work(watch.signal);
  } catch (err) {
    if (!watch.signal.aborted) throw err;
    if (!reply.sent) reply.hijack();
    if (!reply.raw.destroyed) reply.raw.destroy();
    return reply;
  } finally {
    watch.dispose();
  }
}

const JSON_TYPE = 'application/json; charset=utf-8';

/** Register `/tokenize` and `/detokenize` on `app`. */
export function registerTokenizeRoutes(app: FastifyInstance, ctx: RouteContext): void {
  const typed = app.withTypeProvider<TypeBoxTypeProvider>();
  typed.post('/tokenize', { schema: { body: TokenizeBody } }, async (request, reply) => {
    const body = request.body;
    checkModel(body.model, ctx.servedModelNames, adapterNames(ctx));
    const hasPrompt = body.prompt !== null && body.prompt !== undefined;
    const hasMessages = body.messages !== null && body.messages !== undefined;
    if (hasPrompt === hasMessages)
      throw badRequest(`exactly one of 'prompt' and 'messages' is required`, hasPrompt ? 'messages' : 'prompt');
    let text: string | null = null;
    let addSpecialTokens: boolean;
    if (hasMessages) {
      addSpecialTokens = body.add_special_tokens ?? false;
      // A long chat is rendered off the loop, below (it needs the disconnect signal); a short one here.
      if (body.messages!.length < OFF_LOOP_RENDER_MIN_MESSAGES) {
        const rendered = renderChat(ctx.offLoop, body.messages!, chatTemplateOptions(body));
        text = typeof rendered === 'string' ? rendered : await rendered;
      }
    } else {
      for (const name of ['add_generation_prompt', 'continue_final_message', 'tools'] as const) {
        if (body[name] !== null && body[name] !== undefined)
          throw badRequest(`'${name}' applies to 'messages' only`, name);
      }
      addSpecialTokens = body.add_special_tokens ?? true;
      text = body.prompt!;
    }
    if (text !== null && text.length < OFF_LOOP_ENCODE_MIN_CHARS) {
      const tokens = ctx.tokenizer.encode(text, { addSpecialTokens });
      const strs = body.return_token_strs === true ? ctx.tokenizer.tokenStrings(tokens) : null;
      return { count: tokens.length, max_model_len: ctx.chooser.maxModelLen, tokens, token_strs: strs };
    }
    const known = text;
    return whileConnected(request, reply, async (signal) => {
      const full = known ?? (await renderChat(ctx.offLoop, body.messages!, chatTemplateOptions(body), signal));
      const { count, json } = await ctx.offLoop.encodeJson(full, { addSpecialTokens, signal });
      const head = `{"count":${count},"max_model_len":${JSON.stringify(ctx.chooser.maxModelLen)},"tokens":`;
      // Token strings of a long prompt: one map lookup per id here (the ids come back as JSON text).
      const strs =
        body.return_token_strs === true
          ? JSON.stringify(ctx.tokenizer.tokenStrings(JSON.parse(json.toString('utf8')) as number[]))
          : 'null';
      return reply
        .type(JSON_TYPE)
        .send(Buffer.concat([Buffer.from(head), json, Buffer.from(`,"token_strs":${strs}}`)]));
    });
  });

  typed.post('/detokenize', { schema: { body: DetokenizeBody } }, async (request, reply) => {
    const body = request.body;
    checkModel(body.model, ctx.servedModelNames, adapterNames(ctx));
    const refuse = (err: unknown) =>
      badRequest(`'tokens': ${err instanceof Error ? err.message : String(err)}`, 'tokens');
    if (body.tokens.length < OFF_LOOP_DECODE_MIN_IDS) {
      try {
        ctx.tokenizer.validateTokenIds(body.tokens);
      } catch (err) {
        throw refuse(err);
      }
      return { prompt: ctx.tokenizer.decode(body.tokens, { skipSpecialTokens: false }) };
    }
    return whileConnected(request, reply, async (signal) => {
      let json: Buffer;
      try {
        json = await ctx.offLoop.decodeJson(body.tokens, { skipSpecialTokens: false, signal });
      } catch (err) {
        // The worker validates the ids as the tokenizer does here (its RangeError/TypeError names the first bad one).
        if (err instanceof RangeError || err instanceof TypeError) throw refuse(err);
        throw err;
      }
      return reply.type(JSON_TYPE).send(Buffer.concat([Buffer.from('{"prompt":'), json, Buffer.from('}')]));
    });
  });
}
