/**
 * The official `openai` npm client against one started gateway, shared by one e2e file per engine family (each file
 * starts its own gateways: openai-sdk.test.ts for TokenSpeed, openai-sdk-vllm.test.ts for a dense and a lockstep vLLM
 * group), so both families answer the same checks (issue #3 "Done when": the SDK test passes against both):
 * - `sdkBasics`: the model list, streamed and buffered chat, a streamed completion pinned to rank 1, a disconnect
 *   reaching the rank as an ABORT, a bad request as the SDK's BadRequestError;
 * - `sdkParameters` (issue #4): stop strings, n > 1 with a seed, logprobs and logit_bias, /tokenize + /detokenize;
 * - `sdkChat` (issue #4 part 7, #11): text-parts content, tools in the template, a tool-calling conversation,
 *   `chat_template_kwargs`, and `tool_choice: "auto"` answered with the parsed call (the hermes parser the Qwen3
 *   template implies).
 * Register them in this order inside the file's `describe`: the basics count pinned dispatches and ABORTs from a fresh
 * gateway (a stop string ends its engine request with an ABORT). `gateway()` is read inside the tests.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';
import { openaiClient, streamChatWithUsage, streamPinnedCompletion } from '../helpers/gateway.js';
import type { TestGateway } from '../helpers/test-gateway.js';

/** One SDK client per started gateway (the scenarios of a `describe` share it). */
function clientOf(gateway: () => TestGateway): () => OpenAI {
  const clients = new WeakMap<TestGateway, OpenAI>();
  return () => {
    const g = gateway();
    let client = clients.get(g);
    if (client === undefined) clients.set(g, (client = openaiClient(g)));
    return client;
  };
}

/** The buffered chat both non-streaming checks send. */
const BRIEF_HELLO: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
  { role: 'system', content: 'Be brief.' },
  { role: 'user', content: 'Hello!' },
];

/**
 * Asserts what every buffered chat answer has (a `chatcmpl-` id, an assistant message with text, usage that adds up)
 * and returns its first choice.
 */
function assertAnswered(res: OpenAI.Chat.Completions.ChatCompletion): OpenAI.Chat.Completions.ChatCompletion.Choice {
  assert.match(res.id, /^chatcmpl-/);
  const choice = res.choices[0]!;
  assert.equal(choice.message.role, 'assistant');
  assert.ok((choice.message.content ?? '').trim().length > 0);
  assert.equal(res.usage!.total_tokens, res.usage!.prompt_tokens + res.usage!.completion_tokens);
  return choice;
}

/** The basic SDK calls against a gateway over 2 ranks serving `model` (see the module comment). */
export function sdkBasics(gateway: () => TestGateway, model: string): void {
  const client = clientOf(gateway);

  test('lists the model', async () => {
    const models = await client().models.list();
    assert.deepEqual(
      models.data.map((m) => m.id),
      [model],
    );
  });

  test('streaming chat completion: readable text and a finish reason', async () => {
    const { text, finish, usage } = await streamChatWithUsage(client(), model, 'Tell me something.', 24);
    assert.ok(text.trim().length > 0, 'some text');
    assert.ok(!text.includes('\uFFFD'), 'no replacement characters');
    // The simulated ranks draw English sentences through the real Qwen3 tokenizer: the detokenized stream must be
    // plain words, punctuation and whitespace (the text may break paragraphs with newlines), mostly letters (a broken
    // detokenizer shows byte garbage or U+FFFD).
    assert.match(text, /^[A-Za-z0-9\s.,;:'!?()-]+$/, `readable text, got ${JSON.stringify(text)}`);
    assert.ok(
      text.split(/\s+/).filter((w) => /^[A-Za-z]+[.,;:!?]?$/.test(w)).length >= 3,
      `at least 3 words in ${JSON.stringify(text)}`,
    );
    assert.ok(finish === 'stop' || finish === 'length', `finish reason ${finish}`);
    // vLLM reports no cumulative completion count: the engine client's stream counts the tokens (types.ts).
    assert.ok(usage && usage.completion_tokens > 0 && usage.completion_tokens <= 24, JSON.stringify(usage));
    assert.ok(usage.prompt_tokens > 0);
  });

  test('non-streaming chat completion', async () => {
    const res = await client().chat.completions.create({ model, messages: BRIEF_HELLO, max_completion_tokens: 16 });
    assert.equal(res.choices.length, 1);
    const choice = assertAnswered(res);
    assert.ok(choice.finish_reason === 'stop' || choice.finish_reason === 'length');
    assert.ok(res.usage!.prompt_tokens > 0);
  });

  test('non-streaming chat completion: the explicit limit reaches the engine (never a silent 16)', async () => {
    const res = await client().chat.completions.create({
      model,
      messages: BRIEF_HELLO,
      max_completion_tokens: 40,
      // ignore_eos is a vLLM/SGLang extension: the simulated rank then runs to the limit.
      ...({ ignore_eos: true } as Record<string, unknown>),
    });
    const choice = assertAnswered(res);
    assert.equal(choice.finish_reason, 'length');
    assert.equal(res.usage!.completion_tokens, 40, 'the explicit limit reached the engine (not a silent 16)');
  });

  test('streaming completion pinned to rank 1, then every in-flight set is empty', async () => {
    const { text, finish } = await streamPinnedCompletion(client(), model, 'Once upon a time', 8, 1);
    assert.ok(text.length > 0);
    assert.ok(finish === 'stop' || finish === 'length');
    const states = await gateway().rankStates();
    assert.equal(states.find((r) => r.dp_rank === 1)!.dispatched_pinned, 1);
    for (const r of states) assert.equal(r.in_flight, 0, `rank ${r.dp_rank} in-flight`);
  });

  test('abandoning a stream mid-generation sends ABORT and empties the in-flight set', async () => {
    const aborts = () => gateway().metricSum('model_gateway_aborts_sent_total');
    const inFlight = async () => (await gateway().rankStates()).reduce((n, r) => n + r.in_flight, 0);
    const abortsBefore = await aborts();
    const stream = await client().chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'Write a long story.' }],
      max_tokens: 4000,
      // Runs to the limit: a stream that ended by itself before the gateway saw the disconnect would need no ABORT
      // (it happened under load: the text model's answer can be short).
      ...({ ignore_eos: true } as Record<string, unknown>),
      stream: true,
    });
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta.content) break; // `break` aborts the HTTP request (the SDK's controller)
    }
    // Hang guard only: the ABORT goes out as soon as the server sees the socket close.
    const deadline = Date.now() + 60_000;
    while ((await aborts()) === abortsBefore || (await inFlight()) > 0) {
      assert.ok(Date.now() < deadline, 'ABORT not sent within 60 s of the disconnect');
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(await aborts(), abortsBefore + 1);
  });

  test('a bad request surfaces as an OpenAI BadRequestError naming the parameter', async () => {
    await assert.rejects(
      client().chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], top_p: 0 }),
      (err: unknown) => err instanceof OpenAI.BadRequestError && /top_p/.test(err.message),
    );
  });
}

/**
 * Issue #4 parameters (see the module comment): stop (string and list; never leaks; finish_reason stop), n > 1 (n
 * choices with their own indexes and finish reasons, summed usage, same seed → same texts), logprobs (finite values),
 * logit_bias accepted, and /tokenize + /detokenize over raw HTTP.
 */
export function sdkParameters(gateway: () => TestGateway, model: string): void {
  const client = clientOf(gateway);

  test('stop as a string and as a list: the text ends before the stop string', async () => {
    for (const stop of [' ', [' ', 'zzz']]) {
      const res = await client().completions.create({
        model,
        prompt: 'Once upon a time',
        max_tokens: 40,
        seed: 3,
        stop,
      });
      const c = res.choices[0]!;
      assert.ok(!c.text.includes(' '), `stop text leaked: ${JSON.stringify(c.text)}`);
      assert.equal(c.finish_reason, 'stop');
    }
    const streamed = await client().chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 40,
      seed: 3,
      stop: ['e'],
      stream: true,
    });
    let text = '';
    let finish: string | null = null;
    for await (const chunk of streamed) {
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.ok(!text.includes('e'), JSON.stringify(text));
    assert.equal(finish, 'stop');
  });

  test('n = 3 with a seed: 3 indexed choices, summed usage, repeatable', async () => {
    const req = { model, messages: [{ role: 'user' as const, content: '你好 🎉' }], max_tokens: 12, n: 3, seed: 11 };
    const a = await client().chat.completions.create(req);
    const b = await client().chat.completions.create(req);
    assert.deepEqual(
      a.choices.map((c) => c.index),
      [0, 1, 2],
    );
    for (const c of a.choices) assert.ok(c.finish_reason === 'stop' || c.finish_reason === 'length');
    assert.deepEqual(
      a.choices.map((c) => c.message.content),
      b.choices.map((c) => c.message.content),
    );
    assert.ok(a.usage!.completion_tokens <= 36 && a.usage!.completion_tokens >= 3);
    assert.equal(a.usage!.total_tokens, a.usage!.prompt_tokens + a.usage!.completion_tokens);
    assert.ok(new Set(a.choices.map((c) => c.message.content)).size > 1, 'seeds s + i give different choices');
  });

  test('logprobs: one finite entry per completion token; logit_bias accepted', async () => {
    const res = await client().chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 8,
      logprobs: true,
      top_logprobs: 1,
      logit_bias: { '100': 1 },
      ignore_eos: true,
    } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const content = res.choices[0]!.logprobs!.content!;
    assert.equal(content.length, res.usage!.completion_tokens);
    for (const c of content) {
      assert.ok(Number.isFinite(c.logprob) && c.logprob <= 0, String(c.logprob));
      assert.equal(c.top_logprobs.length, 1);
    }
  });

  test('/tokenize and /detokenize round trip', async () => {
    const post = async (path: string, body: unknown) =>
      (
        await fetch(`${gateway().url}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        })
      ).json() as Promise<Record<string, unknown>>;
    const t = await post('/tokenize', { model, prompt: '你好 🎉 world' });
    assert.equal(t.count, (t.tokens as number[]).length);
    assert.equal(typeof t.max_model_len, 'number');
    assert.deepEqual(await post('/detokenize', { tokens: t.tokens }), { prompt: '你好 🎉 world' });
  });
}

const WEATHER_TOOL: OpenAI.Chat.Completions.ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

/**
 * Issue #4 part 7 chat (see the module comment): content as a string or a text-parts array (joined with "\n" as vLLM
 * does), tools rendered into the chat template (visible as a longer prompt), a tool-calling conversation (assistant
 * `tool_calls` with null content, then a `tool` message), `chat_template_kwargs` reaching the template,
 * `max_completion_tokens`, and `tool_choice: "auto"` answered with the parsed call (issue #11).
 */
export function sdkChat(gateway: () => TestGateway, model: string): void {
  const client = clientOf(gateway);

  /** Prompt tokens the gateway counted for `body` (max_tokens 1 keeps the answer short). */
  async function promptTokens(body: Record<string, unknown>): Promise<number> {
    const res = await client().chat.completions.create({
      model,
      max_tokens: 1,
      ...body,
    } as unknown as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming);
    assert.equal(res.choices.length, 1);
    return res.usage!.prompt_tokens;
  }

  test('a text-parts array means the same as its parts joined with a newline (as vLLM joins them)', async () => {
    const asString = await promptTokens({ messages: [{ role: 'user', content: 'Hello\nthere' }] });
    const asParts = await promptTokens({
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Hello' },
            { type: 'text', text: 'there' },
          ],
        },
      ],
    });
    assert.equal(asParts, asString);
  });

  test('tools are rendered into the prompt (tool_choice absent or "none")', async () => {
    const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
    const without = await promptTokens({ messages });
    const withTools = await promptTokens({ messages, tools: [WEATHER_TOOL] });
    const withNone = await promptTokens({ messages, tools: [WEATHER_TOOL], tool_choice: 'none' });
    assert.ok(withTools > without + 20, `tools add the tool schema to the prompt (${without} → ${withTools} tokens)`);
    assert.equal(withNone, withTools);
  });

  test('a tool-calling conversation: assistant tool_calls, then the tool result, then an answer', async () => {
    const res = await client().chat.completions.create({
      model,
      max_completion_tokens: 8,
      tools: [WEATHER_TOOL],
      messages: [
        { role: 'system', content: 'You can call tools.' },
        { role: 'user', content: 'What is the weather in Paris?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_1', content: '{"temperature_c": 18}' },
      ],
    });
    const c = res.choices[0]!;
    assert.ok((c.message.content ?? '').length > 0);
    assert.ok(c.finish_reason === 'stop' || c.finish_reason === 'length');
    assert.ok(res.usage!.completion_tokens <= 8, 'max_completion_tokens honoured');
    const shorter = await promptTokens({
      tools: [WEATHER_TOOL],
      messages: [
        { role: 'system', content: 'You can call tools.' },
        { role: 'user', content: 'What is the weather in Paris?' },
      ],
    });
    assert.ok(res.usage!.prompt_tokens > shorter, 'the tool call and its result are part of the prompt');
  });

  test('chat_template_kwargs reach the template (Qwen3 enable_thinking: false adds an empty think block)', async () => {
    const messages = [{ role: 'user', content: 'Hi' }];
    const plain = await promptTokens({ messages });
    const noThinking = await promptTokens({ messages, chat_template_kwargs: { enable_thinking: false } });
    assert.ok(noThinking > plain, `${plain} → ${noThinking}`);
  });

  test('tool_choice "auto" returns the call the rank writes (hermes parser read off the Qwen3 template)', async () => {
    const res = await client().chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'Weather?' }],
      tools: [WEATHER_TOOL],
      tool_choice: 'auto',
    });
    const choice = res.choices[0]!;
    assert.equal(choice.finish_reason, 'tool_calls');
    const call = choice.message.tool_calls![0]!;
    assert.ok(call.type === 'function' && call.function.name === 'get_weather', JSON.stringify(call));
    assert.equal(typeof JSON.parse(call.function.arguments).city, 'string');
    assert.equal(choice.message.content, null);
  });
}
