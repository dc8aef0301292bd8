/**
 * TypeBox (JSON Schema) request-body schemas of the OpenAI routes (gateway.md sections 8, 9 and 12; OpenAI's API
 * reference and vLLM's `protocol.py` for the extension parameters).
 *
 * Schema rules:
 * - every optional parameter also accepts JSON `null` (OpenAI SDKs and pydantic-based clients send explicit nulls);
 * - `additionalProperties: false` at the top level marks the closed parameter set of a route: a top-level parameter
 *   not listed is ignored and logged like vLLM does (unknown-fields.ts removes it before validation, so the flag never
 *   fires there); nested objects stay strict (an unknown key inside one is a 400 naming it; the app's ajv runs with
 *   `removeAdditional: false`, `coerceTypes: false`);
 * - the parameters whose cost grows with their size are capped (input-limits.ts: `stop`, `stop_token_ids`,
 *   `logit_bias`, `tools`), answered with 400 naming them;
 * - loosely typed parameters are validated in code with a 400 naming them (structured-output.ts, tool-choice.ts,
 *   logprobs.ts); parameters OpenAI defines but the gateway does not serve yet are typed loosely here and refused in code
 *   (params.ts `rejectUnsupported`) unless their value is the no-op default.
 */
import { Type, type Static, type TSchema } from '@fastify/type-provider-typebox';
import {
  MAX_LOGIT_BIAS_ENTRIES,
  MAX_MESSAGES,
  MAX_STOP_CHARS,
  MAX_STOP_STRINGS,
  MAX_STOP_TOKEN_IDS,
  MAX_TOOLS,
  MAX_EMBEDDING_INPUTS,
  MAX_EMBEDDING_DIMENSIONS,
} from './input-limits.js';

/** `T | null`, optional. */
function Opt<T extends TSchema>(schema: T) {
  return Type.Optional(Type.Union([schema, Type.Null()]));
}

/** Sampling and output parameters shared by chat and completions. */
const common = {
  model: Opt(Type.String()),
  max_tokens: Opt(Type.Integer()),
  max_completion_tokens: Opt(Type.Integer()),
  min_tokens: Opt(Type.Integer()),
  temperature: Opt(Type.Number()),
  top_p: Opt(Type.Number()),
  top_k: Opt(Type.Integer()),
  min_p: Opt(Type.Number()),
  presence_penalty: Opt(Type.Number()),
  frequency_penalty: Opt(Type.Number()),
  repetition_penalty: Opt(Type.Number()),
  seed: Opt(Type.Integer()),
  n: Opt(Type.Integer()),
  stream: Opt(Type.Boolean()),
  stream_options: Opt(
    Type.Object(
      // vLLM's `continuous_usage_stats`: with include_usage, every chunk carries the usage so far (respond-streamed.ts).
      { include_usage: Opt(Type.Boolean()), continuous_usage_stats: Opt(Type.Boolean()) },
      { additionalProperties: false },
    ),
  ),
  stop_token_ids: Opt(Type.Array(Type.Integer(), { maxItems: MAX_STOP_TOKEN_IDS })),
  ignore_eos: Opt(Type.Boolean()),
  skip_special_tokens: Opt(Type.Boolean()),
  /** OpenAI end-user id: accepted and ignored (it does not change generation). */
  user: Opt(Type.String()),
  /**
   * Stop strings: one string or a list (gateway.md 6 and 12); at most MAX_STOP_STRINGS of MAX_STOP_CHARS each
   * (input-limits.ts); empty strings → 400 (params.ts).
   */
  stop: Opt(
    Type.Union([
      Type.String({ maxLength: MAX_STOP_CHARS }),
      Type.Array(Type.String({ maxLength: MAX_STOP_CHARS }), { maxItems: MAX_STOP_STRINGS }),
    ]),
  ),
  /** Token id (decimal string key) → additive bias; validated and clamped in params.ts `parseLogitBias`. */
  logit_bias: Opt(Type.Record(Type.String(), Type.Unknown(), { maxProperties: MAX_LOGIT_BIAS_ENTRIES })),
  /** vLLM extension: keep the matched stop string in the output. */
  include_stop_str_in_output: Opt(Type.Boolean()),
  /** Structured outputs (structured-output.ts validates them): OpenAI's `response_format`, vLLM's parameters. */
  response_format: Type.Optional(Type.Unknown()),
  structured_outputs: Type.Optional(Type.Unknown()),
  guided_json: Type.Optional(Type.Unknown()),
  guided_regex: Type.Optional(Type.Unknown()),
  guided_choice: Type.Optional(Type.Unknown()),
  guided_grammar: Type.Optional(Type.Unknown()),
  guided_whitespace_pattern: Type.Optional(Type.Unknown()),
  /** vLLM: the grammar backend; accepted and ignored (the engine picks its backend). */
  guided_decoding_backend: Type.Optional(Type.Unknown()),
  /** vLLM: whether the tokenizer adds its special tokens to the prompt (default: completions true, chat false). */
  add_special_tokens: Opt(Type.Boolean()),
  /** vLLM's request priority: 0 is accepted; the band header orders requests here (params.ts says why). */
  priority: Type.Optional(Type.Unknown()),
  // Known but not served yet: refused in code unless the value is a no-op (params.ts). vLLM's extensions that change
  // the output are listed so they are refused, not dropped as unknown fields (issue 31 part 4).
  spaces_between_special_tokens: Type.Optional(Type.Unknown()),
  prompt_logprobs: Type.Optional(Type.Unknown()),
  bad_words: Type.Optional(Type.Unknown()),
  allowed_token_ids: Type.Optional(Type.Unknown()),
  truncate_prompt_tokens: Type.Optional(Type.Unknown()),
  return_token_ids: Type.Optional(Type.Unknown()),
  thinking_token_budget: Type.Optional(Type.Unknown()),
};

/** One content part of a chat message; only `{type: "text", text}` is served (checked in prompt.ts). */
const ContentPart = Type.Object({ type: Type.String(), text: Type.Optional(Type.String()) });

/** One chat message (OpenAI roles; `developer` is rendered as `system`). */
export const ChatMessageSchema = Type.Object(
  {
    role: Type.Union([
      Type.Literal('system'),
      Type.Literal('developer'),
      Type.Literal('user'),
      Type.Literal('assistant'),
      Type.Literal('tool'),
    ]),
    content: Opt(Type.Union([Type.String(), Type.Array(ContentPart)])),
    name: Opt(Type.String()),
    tool_calls: Opt(Type.Array(Type.Unknown())),
    tool_call_id: Opt(Type.String()),
    /** An assistant turn's reasoning as the gateway returned it (vLLM accepts it back; `reasoning` is its alias). */
    reasoning_content: Opt(Type.String()),
    reasoning: Opt(Type.String()),
  },
  { additionalProperties: false },
);

/**
 * One OpenAI function tool, `{type: "function", function: {name, description?, parameters?, strict?}}` (vLLM's
 * `ChatCompletionToolsParam` / `FunctionDefinition` in `protocol.py`); a malformed tool is a 400 naming its path
 * (e.g. `tools[0].function.name`). Passed to the chat template as sent (prompt.ts).
 */
export const ToolSchema = Type.Object(
  {
    type: Type.Literal('function'),
    function: Type.Object(
      {
        name: Type.String(),
        description: Opt(Type.String()),
        parameters: Opt(Type.Record(Type.String(), Type.Unknown())),
        strict: Opt(Type.Boolean()),
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
);

/** POST /v1/chat/completions body. */
export const ChatCompletionBody = Type.Object(
  {
    ...common,
    messages: Type.Array(ChatMessageSchema, { minItems: 1, maxItems: MAX_MESSAGES }),
    /** vLLM extension: extra variables for the chat template (e.g. Qwen3's `enable_thinking`). */
    chat_template_kwargs: Opt(Type.Record(Type.String(), Type.Unknown())),
    /** Validated in logprobs.ts `parseLogprobs` (a boolean; top_logprobs ≤ 20, ≤ 1 on TokenSpeed groups). */
    logprobs: Type.Optional(Type.Unknown()),
    top_logprobs: Type.Optional(Type.Unknown()),
    /** Function tools rendered into the prompt by the chat template; calls parsed per `tool_choice` (tool-choice.ts). */
    tools: Opt(Type.Array(ToolSchema, { maxItems: MAX_TOOLS })),
    /** `none` | `auto` | `required` | a named function (tool-choice.ts `planTools`); tools are rendered for `none` too. */
    tool_choice: Type.Optional(Type.Unknown()),
    parallel_tool_calls: Type.Optional(Type.Unknown()),
    /** Append the assistant-turn opener (template `add_generation_prompt`); default true. */
    add_generation_prompt: Opt(Type.Boolean()),
    /**
     * vLLM extension: end the prompt inside the final message so the model continues it; needs
     * `add_generation_prompt: false` (both true → 400, as vLLM's `protocol.py`).
     */
    continue_final_message: Opt(Type.Boolean()),
    functions: Type.Optional(Type.Unknown()),
    function_call: Type.Optional(Type.Unknown()),
    /** OpenAI's reasoning effort, served as vLLM does (reasoning-effort.ts); checked there. */
    reasoning_effort: Type.Optional(Type.Unknown()),
    /** vLLM: a request's own chat template (vLLM needs `--trust-request-chat-template`): refused (params.ts). */
    chat_template: Type.Optional(Type.Unknown()),
    // Output modalities and audio/web-search options would change the output: refused unless no-ops (params.ts).
    modalities: Type.Optional(Type.Unknown()),
    audio: Type.Optional(Type.Unknown()),
    web_search_options: Type.Optional(Type.Unknown()),
  },
  { additionalProperties: false },
);
export type ChatCompletionBodyT = Static<typeof ChatCompletionBody>;

/** POST /v1/completions body. `prompt`: a string, an array of one string, token ids, or an array of one id list. */
export const CompletionBody = Type.Object(
  {
    ...common,
    prompt: Type.Union([
      Type.String(),
      Type.Array(Type.String()),
      Type.Array(Type.Integer()),
      Type.Array(Type.Array(Type.Integer())),
    ]),
    /** Validated in logprobs.ts `parseLogprobs` (an integer k ≤ 5, ≤ 1 on TokenSpeed groups). */
    logprobs: Type.Optional(Type.Unknown()),
    echo: Type.Optional(Type.Unknown()),
    suffix: Type.Optional(Type.Unknown()),
    best_of: Type.Optional(Type.Unknown()),
  },
  { additionalProperties: false },
);
export type CompletionBodyT = Static<typeof CompletionBody>;

/**
 * POST /v1/embeddings (OpenAI's embeddings request, plus vLLM's `truncate_prompt_tokens`, `add_special_tokens` and
 * `priority`). `input`: a string, strings, token ids or token-id lists, at most `MAX_EMBEDDING_INPUTS` of them;
 * `dimensions` (Matryoshka) and `encoding_format` are checked in embeddings.ts.
 */
export const EmbeddingBody = Type.Object(
  {
    model: Opt(Type.String()),
    input: Type.Union([
      Type.String(),
      Type.Array(Type.String(), { maxItems: MAX_EMBEDDING_INPUTS }),
      Type.Array(Type.Integer()),
      Type.Array(Type.Array(Type.Integer()), { maxItems: MAX_EMBEDDING_INPUTS }),
    ]),
    encoding_format: Opt(Type.Union([Type.Literal('float'), Type.Literal('base64')])),
    dimensions: Opt(Type.Integer({ minimum: 1, maximum: MAX_EMBEDDING_DIMENSIONS })),
    /** OpenAI end-user id: accepted and ignored (it does not change the vectors). */
    user: Opt(Type.String()),
    truncate_prompt_tokens: Opt(Type.Integer()),
    add_special_tokens: Opt(Type.Boolean()),
    /** vLLM's request priority: 0 only (the priority band header sets it, priority-band.ts). */
    priority: Opt(Type.Integer()),
  },
  { additionalProperties: false },
);
export type EmbeddingBodyT = Static<typeof EmbeddingBody>;

/** The parameters both bodies share, as the sampling translation reads them. */
export type CommonBodyT = Pick<ChatCompletionBodyT, keyof typeof common>;
