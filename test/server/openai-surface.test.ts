/**
 * The OpenAI surface of issue #11 through the routes over fake engines (the real tokenizer, every token its own
 * output so markup arrives split across deltas): tool calls (auto/required/named; streamed deltas equal the full
 * message; no markup in content), reasoning_content, structured outputs reaching the engine request, top logprobs
 * (vLLM candidates; TokenSpeed's limit), `GET /v1/models/{id}`.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { FakeBackend } from './fake-backend.js';
import { FakeBackend as Fake } from './fake-backend.js';
import { choicesOf, MODEL_ID, parseSse, useApp } from './helpers.js';

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
  { type: 'function', function: { name: 'get_time' } },
];
const USER = [{ role: 'user', content: 'Weather in Paris and the time?' }];

type Fx = ReturnType<typeof useApp>;

/** Script the backend to answer every request with `text`, token by token. */
function answer(fx: Fx, text: string, finish: 'stop' | 'length' = 'stop'): void {
  fx.backend.onSubmit = (s) => s.stream.pushAll(fx.tokenizer.encode(text, { addSpecialTokens: false }), finish);
}

/** Non-streaming and streaming answers of one chat body; asserts the stream is well-formed. */
async function both(fx: Fx, body: Record<string, unknown>) {
  const full = await fx.app.inject({ method: 'POST', url: '/v1/chat/completions', payload: body });
  assert.equal(full.statusCode, 200, full.body);
  const res = await fx.app.inject({ method: 'POST', url: '/v1/chat/completions', payload: { ...body, stream: true } });
  assert.equal(res.statusCode, 200, res.body);
  const { events, doneCount } = parseSse(res.payload);
  assert.equal(doneCount, 1);
  return {
    message: full.json().choices[0].message,
    finish: full.json().choices[0].finish_reason,
    deltas: events.flatMap((e) => choicesOf(e)),
  };
}

/** A streamed choice's `delta`, the fields these tests read. */
interface Delta {
  content?: string | null;
  reasoning_content?: string | null;
  tool_calls?: Array<{ index: number; id?: string; type?: string; function: { name?: string; arguments?: string } }>;
}

/** A tool call of a message, the fields these tests read. */
interface ToolCall {
  id: string;
  function: { name: string; arguments: string };
}

/** One item variant of the array schema `tool_choice: "required"` constrains the engine to: one tool by name. */
interface VariantSchema {
  properties: { name: { enum: string[] } };
}

/** Reassemble streamed choice deltas into a message (content, reasoning_content, tool_calls). */
function assemble(deltas: Array<Record<string, unknown>>) {
  let content = '';
  let reasoning = '';
  const calls: Array<{ id: string; name: string; arguments: string }> = [];
  let finish: unknown = null;
  for (const c of deltas) {
    const d = c.delta as Delta;
    content += d.content ?? '';
    reasoning += d.reasoning_content ?? '';
    for (const tc of d.tool_calls ?? []) {
      if (tc.id !== undefined) {
        assert.equal(tc.index, calls.length, 'a new call gets the next index');
        assert.equal(tc.type, 'function');
        calls.push({ id: tc.id, name: tc.function.name!, arguments: tc.function.arguments ?? '' });
      } else {
        assert.equal(tc.function.name, undefined, 'the name is sent once');
        calls[tc.index]!.arguments += tc.function.arguments;
      }
    }
    if (c.finish_reason !== null) finish = c.finish_reason;
  }
  return { content, reasoning, calls, finish };
}

describe('tool calls (hermes, the chat template default)', () => {
  const fx = useApp();
  const HERMES =
    'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>';

  test('auto: calls parsed from the text; streamed deltas (id + name once, then fragments) equal the message', async () => {
    answer(fx, HERMES);
    const { message, finish, deltas } = await both(fx, { messages: USER, tools: TOOLS, tool_choice: 'auto' });
    assert.equal(finish, 'tool_calls');
    assert.equal(message.content, 'Checking.');
    assert.deepEqual(
      message.tool_calls.map((c: ToolCall) => [c.function.name, JSON.parse(c.function.arguments)]),
      [
        ['get_weather', { city: 'Paris' }],
        ['get_time', {}],
      ],
    );
    for (const c of message.tool_calls) assert.match(c.id, /^call_[A-Za-z0-9]{24}$/);
    const s = assemble(deltas);
    assert.equal(s.finish, 'tool_calls');
    assert.equal(s.content, message.content);
    assert.deepEqual(
      s.calls.map((c) => [c.name, c.arguments]),
      message.tool_calls.map((c: ToolCall) => [c.function.name, c.function.arguments]),
    );
    assert.ok(
      !deltas.some((c) => String((c.delta as Delta).content ?? '').includes('<tool')),
      'no markup in any content delta',
    );
    assert.ok(
      deltas.filter((c) => (c.delta as Delta).tool_calls?.[0]?.index === 0).length > 3,
      'arguments arrive in fragments',
    );
  });

  test('tool_choice none and no tools: the text is content', async () => {
    answer(fx, HERMES);
    assert.equal((await both(fx, { messages: USER, tools: TOOLS, tool_choice: 'none' })).message.content, HERMES);
    assert.equal((await both(fx, { messages: USER })).message.content, HERMES);
  });

  test("required: the engine is constrained to vLLM's array schema; the array becomes calls", async () => {
    answer(fx, '[{"name": "get_time", "parameters": {}}]');
    const before = fx.backend.submissions.length;
    const { message, finish, deltas } = await both(fx, {
      messages: USER,
      tools: TOOLS,
      tool_choice: 'required',
      parallel_tool_calls: false,
    });
    const so = fx.backend.submissions[before]!.request.sampling.structuredOutput!;
    assert.equal(so.constraint.kind, 'json');
    const schema = (so.constraint as { schema: { type: string; maxItems: number; items: { anyOf: VariantSchema[] } } })
      .schema;
    assert.equal(schema.type, 'array');
    assert.equal(schema.maxItems, 1);
    assert.deepEqual(
      schema.items.anyOf.map((v) => v.properties.name.enum[0]),
      ['get_weather', 'get_time'],
    );
    assert.equal(finish, 'tool_calls');
    assert.equal(message.content, null);
    assert.deepEqual(
      message.tool_calls.map((c: ToolCall) => c.function.name),
      ['get_time'],
    );
    assert.equal(assemble(deltas).calls[0]!.arguments, '{}');
  });

  test('named function: constrained to its parameters; one call, finish stop (as OpenAI and vLLM)', async () => {
    answer(fx, '{"city": "Rome"}');
    const before = fx.backend.submissions.length;
    const { message, finish } = await both(fx, {
      messages: USER,
      tools: TOOLS,
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
    });
    assert.deepEqual(
      (fx.backend.submissions[before]!.request.sampling.structuredOutput!.constraint as { schema: unknown }).schema,
      TOOLS[0]!.function.parameters,
    );
    assert.equal(finish, 'stop');
    assert.deepEqual(
      message.tool_calls.map((c: ToolCall) => [c.function.name, c.function.arguments]),
      [['get_weather', '{"city": "Rome"}']],
    );
  });

  test('parallel_tool_calls false keeps the first call of an auto answer', async () => {
    answer(fx, HERMES);
    const { message, deltas } = await both(fx, { messages: USER, tools: TOOLS, parallel_tool_calls: false });
    assert.deepEqual(
      message.tool_calls.map((c: ToolCall) => c.function.name),
      ['get_weather'],
    );
    assert.equal(assemble(deltas).calls.length, 1);
  });
});

describe('reasoning (--reasoning-parser qwen3)', () => {
  const fx = useApp({ output: { reasoningParser: 'qwen3' } });

  test('<think> text goes to reasoning_content, streamed and not; tool calls are parsed from the content only', async () => {
    answer(
      fx,
      '<think>\nThe user asks about <tool_call> markup.\n</think>\n\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
    );
    const { message, finish, deltas } = await both(fx, { messages: USER, tools: TOOLS });
    assert.equal(message.reasoning_content, '\nThe user asks about <tool_call> markup.\n');
    assert.deepEqual(
      message.tool_calls.map((c: ToolCall) => c.function.name),
      ['get_time'],
    );
    assert.equal(finish, 'tool_calls');
    const s = assemble(deltas);
    assert.equal(s.reasoning, message.reasoning_content);
    assert.equal(s.calls.length, 1);
  });

  test('enable_thinking false: the template closes the block; everything is content', async () => {
    answer(fx, 'Plain <think>answer</think>.');
    const { message } = await both(fx, { messages: USER, chat_template_kwargs: { enable_thinking: false } });
    assert.equal(message.content, 'Plain <think>answer</think>.');
    assert.equal(message.reasoning_content, undefined);
  });
});

describe('structured outputs reach the engine request', () => {
  const fx = useApp();

  test('response_format, structured_outputs and guided_* map onto one constraint; TokenSpeed-incompatible options → 400', async () => {
    answer(fx, '{}');
    const schema = { type: 'object', properties: { a: { type: 'integer' } } };
    const cases: Array<[Record<string, unknown>, unknown]> = [
      [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } }, { kind: 'json', schema }],
      [{ response_format: { type: 'json_object' } }, { kind: 'json_object' }],
      [{ structured_outputs: { choice: ['a', 'b'] } }, { kind: 'choice', choices: ['a', 'b'] }],
      [{ guided_json: JSON.stringify(schema) }, { kind: 'json', schema }],
      [{ guided_regex: '[a-z]+' }, { kind: 'regex', pattern: '[a-z]+' }],
      [{ guided_grammar: 'root ::= "x"' }, { kind: 'grammar', grammar: 'root ::= "x"' }],
      [{ response_format: { type: 'text' } }, null],
    ];
    for (const [extra, expected] of cases) {
      const before = fx.backend.submissions.length;
      const res = await fx.app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        payload: { messages: USER, ...extra },
      });
      assert.equal(res.statusCode, 200, res.body);
      assert.deepEqual(
        fx.backend.submissions[before]!.request.sampling.structuredOutput?.constraint ?? null,
        expected,
        JSON.stringify(extra),
      );
    }
    const before = fx.backend.submissions.length;
    const completion = await fx.app.inject({
      method: 'POST',
      url: '/v1/completions',
      payload: { prompt: 'x', guided_choice: ['yes', 'no'] },
    });
    assert.equal(completion.statusCode, 200, completion.body);
    assert.deepEqual(fx.backend.submissions[before]!.request.sampling.structuredOutput!.constraint, {
      kind: 'choice',
      choices: ['yes', 'no'],
    });
    const refused = await fx.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      payload: { messages: USER, structured_outputs: { json_object: true, whitespace_pattern: ' ' } },
    });
    assert.equal(refused.statusCode, 400);
    assert.equal(refused.json().error.param, 'structured_outputs');
    assert.match(refused.json().error.message, /TokenSpeed.*whitespace_pattern/);
  });
});

describe('top logprobs: vLLM candidates, TokenSpeed limit, model by id', () => {
  const ts = new Fake();
  const vllm = new Fake();
  const fx = useApp({
    groups: [
      { worker: 'ipc:///tmp/fake/ts', name: 'ts', engine: 'tokenspeed', backend: ts },
      { worker: 'ipc:///tmp/fake/vl', name: 'vl', engine: 'vllm', backend: vllm },
    ],
  });

  function script(b: FakeBackend, ids: number[]): void {
    b.onSubmit = (s) =>
      ids.forEach((id, i) =>
        s.stream.push(
          [id],
          i === ids.length - 1 ? 'stop' : null,
          [-0.5],
          [
            [
              { id, logprob: -0.5 },
              { id: id + 1, logprob: -1 },
              { id: id + 2, logprob: -2 },
              { id: id + 3, logprob: -Infinity },
            ],
          ],
        ),
      );
  }

  test('k > 1 goes to the vLLM group (k candidates asked), rendered sampled-first; completions logprobs up to 5', async () => {
    const ids = fx.tokenizer.encode('Hello there', { addSpecialTokens: false });
    script(ts, ids);
    script(vllm, ids);
    for (let i = 0; i < 3; i++) {
      const res = await fx.app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        payload: { messages: USER, logprobs: true, top_logprobs: 3 },
      });
      assert.equal(res.statusCode, 200, res.body);
      const tops = res.json().choices[0].logprobs.content[0].top_logprobs;
      assert.deepEqual(
        tops.map((t: { logprob: number }) => t.logprob),
        [-0.5, -1, -2],
      );
    }
    assert.equal(ts.submissions.length, 0, 'TokenSpeed cannot return candidates: never chosen');
    assert.equal(vllm.submissions.at(-1)!.request.topLogprobs, 3);
    const c = await fx.app.inject({ method: 'POST', url: '/v1/completions', payload: { prompt: 'x', logprobs: 4 } });
    assert.equal(c.statusCode, 200, c.body);
    assert.deepEqual(Object.values(c.json().choices[0].logprobs.top_logprobs[0]), [-0.5, -1, -2, -9999]);
  });

  test('GET /v1/models/{id}: the served model, 404 for another', async () => {
    const ok = await fx.app.inject({ method: 'GET', url: `/v1/models/${MODEL_ID}` });
    assert.equal(ok.statusCode, 200);
    assert.equal(ok.json().id, MODEL_ID);
    assert.equal(ok.json().object, 'model');
    const missing = await fx.app.inject({ method: 'GET', url: '/v1/models/org/other-model' });
    assert.equal(missing.statusCode, 404);
    assert.equal(missing.json().error.code, 'model_not_found');
  });
});

describe('top logprobs on a TokenSpeed-only gateway', () => {
  const fx = useApp();
  test("k > 1 → 400 naming the parameter and TokenSpeed's limit; k = 1 served", async () => {
    const res = await fx.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      payload: { messages: USER, logprobs: true, top_logprobs: 2 },
    });
    assert.equal(res.statusCode, 400);
    assert.equal(res.json().error.param, 'top_logprobs');
    assert.match(res.json().error.message, /at most 1 on TokenSpeed/);
    const c = await fx.app.inject({ method: 'POST', url: '/v1/completions', payload: { prompt: 'x', logprobs: 2 } });
    assert.equal(c.json().error.param, 'logprobs');
    answer(fx, 'Hi');
    assert.equal(
      (
        await fx.app.inject({
          method: 'POST',
          url: '/v1/chat/completions',
          payload: { messages: USER, logprobs: true, top_logprobs: 1 },
        })
      ).statusCode,
      200,
    );
  });
});
