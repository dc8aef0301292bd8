/**
 * The `POST /v1/responses` body (OpenAI Responses API, the subset the openai SDK and the Vercel AI SDK send by
 * default; OpenAI's API reference). Fields are typed loosely where the code validates them with a 400 naming the
 * field (responses/input.ts, routes/responses.ts). Accepted and ignored, because they do not change what the model
 * generates here: `metadata` (echoed), `user`, `safety_identifier`, `prompt_cache_key`, `prompt_cache_retention`,
 * `service_tier`, `reasoning`, `truncation`, `include` (except `message.output_text.logprobs`, which turns logprobs
 * on), `stream_options`, `max_tool_calls`.
 */
import { Type, type Static, type TSchema } from '@fastify/type-provider-typebox';
import { MAX_MESSAGES } from '../input-limits.js';

function Opt<T extends TSchema>(schema: T) {
  return Type.Optional(Type.Union([schema, Type.Null()]));
}

/** POST /v1/responses body. */
export const ResponsesBody = Type.Object(
  {
    model: Opt(Type.String()),
    /** A string (one user message) or a list of input items (messages, function calls and outputs, references). */
    input: Type.Union([Type.String(), Type.Array(Type.Unknown(), { maxItems: MAX_MESSAGES })]),
    instructions: Opt(Type.String()),
    max_output_tokens: Opt(Type.Integer()),
    temperature: Opt(Type.Number()),
    top_p: Opt(Type.Number()),
    top_logprobs: Opt(Type.Integer()),
    tools: Opt(Type.Array(Type.Unknown())),
    tool_choice: Type.Optional(Type.Unknown()),
    parallel_tool_calls: Opt(Type.Boolean()),
    max_tool_calls: Opt(Type.Integer()),
    text: Opt(Type.Object({ format: Type.Optional(Type.Unknown()), verbosity: Type.Optional(Type.Unknown()) })),
    stream: Opt(Type.Boolean()),
    stream_options: Opt(Type.Record(Type.String(), Type.Unknown())),
    store: Opt(Type.Boolean()),
    previous_response_id: Opt(Type.String()),
    metadata: Opt(Type.Record(Type.String(), Type.Unknown())),
    user: Opt(Type.String()),
    safety_identifier: Opt(Type.String()),
    prompt_cache_key: Opt(Type.String()),
    prompt_cache_retention: Opt(Type.String()),
    service_tier: Opt(Type.String()),
    reasoning: Opt(Type.Record(Type.String(), Type.Unknown())),
    truncation: Opt(Type.String()),
    include: Opt(Type.Array(Type.String())),
    /** Refused unless false/absent: background responses need a job store this gateway does not keep. */
    background: Opt(Type.Boolean()),
    /** Refused: conversations are an OpenAI-hosted object. */
    conversation: Type.Optional(Type.Unknown()),
    /** Refused: prompt templates are an OpenAI-hosted object. */
    prompt: Type.Optional(Type.Unknown()),
  },
  { additionalProperties: false },
);
export type ResponsesBodyT = Static<typeof ResponsesBody>;
