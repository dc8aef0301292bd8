/**
 * POST /v1/responses over a fake engine (issue #11 part 4): string and item input, instructions, function tools and
 * function_call / function_call_output items, text.format, max_output_tokens (incomplete), the streamed event
 * sequence (types, increasing sequence_number, `event:` lines, no [DONE]) agreeing with the non-streaming output,
 * the bounded store (`previous_response_id`, `item_reference`, GET/DELETE, `store: false`, eviction).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { MAX_PATH_PARAM_LENGTH } from '../../src/server/app.js';
import { useApp } from './helpers.js';

/** Parse a Responses SSE payload: every record `event: <type>\ndata: <json>` with matching types. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed JSON events, read field by field by the assertions
function parseEvents(payload: string): Array<Record<string, any>> {
  assert.ok(payload.endsWith('\n\n'));
  return payload
    .slice(0, -2)
    .split('\n\n')
    .map((rec) => {
      const m = /^event: (\S+)\ndata: (.*)$/.exec(rec);
      assert.ok(m !== null, `malformed record ${JSON.stringify(rec)}`);
      // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as the return type above
      const data = JSON.parse(m[2]!) as Record<string, any>;
      assert.equal(data.type, m[1]);
      return data;
    });
}

const TOOLS = [
  {
    type: 'function',
    name: 'get_weather',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
];

describe('POST /v1/responses', () => {
  const fx = useApp({ output: { reasoningParser: 'qwen3', responsesStore: { maxResponses: 3 } } });
  const post = (payload: Record<string, unknown>) => fx.app.inject({ method: 'POST', url: '/v1/responses', payload });
  const answer = (text: string, finish: 'stop' | 'length' = 'stop') => {
    fx.backend.onSubmit = (s) => s.stream.pushAll(fx.tokenizer.encode(text, { addSpecialTokens: false }), finish);
  };
  const lastPrompt = () =>
    fx.tokenizer.decode(fx.backend.submissions.at(-1)!.request.promptTokenIds, { skipSpecialTokens: false });

  test('string input with instructions: a message item, usage, the request echoed', async () => {
    answer('Hello there.');
    const res = await post({
      model: 'test-model',
      input: 'Hi!',
      instructions: 'Be brief.',
      max_output_tokens: 50,
      temperature: 0.5,
    });
    assert.equal(res.statusCode, 200, res.body);
    const r = res.json();
    assert.match(r.id, /^resp_/);
    assert.equal(r.object, 'response');
    assert.equal(r.status, 'completed');
    assert.equal(r.output.length, 1);
    assert.equal(r.output[0].type, 'message');
    assert.equal(r.output[0].role, 'assistant');
    assert.deepEqual(
      r.output[0].content.map((c: { type: string; text: string }) => [c.type, c.text]),
      [['output_text', 'Hello there.']],
    );
    assert.equal(r.usage.output_tokens, fx.tokenizer.encode('Hello there.', { addSpecialTokens: false }).length);
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
    assert.equal(r.instructions, 'Be brief.');
    assert.equal(r.temperature, 0.5);
    assert.match(lastPrompt(), /<\|im_start\|>system\nBe brief\.<\|im_end\|>\n<\|im_start\|>user\nHi!<\|im_end\|>/);
  });

  test('streaming: the documented event sequence, sequence numbers 0.., the same output as non-streaming', async () => {
    answer('<think>\nShort.\n</think>\n\nFine, thanks.');
    const full = (await post({ input: 'How are you?' })).json();
    const res = await post({ input: 'How are you?', stream: true });
    assert.equal(res.statusCode, 200);
    assert.match(String(res.headers['content-type']), /text\/event-stream/);
    const events = parseEvents(res.payload);
    assert.deepEqual(
      events.map((e) => e.sequence_number),
      events.map((_, i) => i),
    );
    // The reasoning deltas come in pairs (vLLM's reasoning_text, OpenAI's summary text): one entry for the run.
    const types = events
      .map((e) => (e.type === 'response.reasoning_summary_text.delta' ? 'response.reasoning_text.delta' : e.type))
      .filter((t, i, a) => t !== a[i - 1]);
    assert.deepEqual(types, [
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.reasoning_summary_part.added',
      'response.reasoning_text.delta',
      'response.reasoning_text.done',
      'response.content_part.done',
      'response.reasoning_summary_text.done',
      'response.reasoning_summary_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    const done = events.at(-1)!.response;
    const strip = (items: Array<Record<string, unknown>>) => items.map(({ id: _id, ...rest }) => rest);
    assert.deepEqual(strip(done.output), strip(full.output));
    assert.equal(full.output[0].content[0].text, '\nShort.\n');
    assert.deepEqual(
      full.output[0].summary,
      [{ type: 'summary_text', text: '\nShort.\n' }],
      'OpenAI clients read this',
    );
    const summaryText = events
      .filter((e) => e.type === 'response.reasoning_summary_text.delta')
      .map((e) => e.delta)
      .join('');
    assert.equal(summaryText, '\nShort.\n');
    assert.equal(full.output[1].content[0].text, '\n\nFine, thanks.');
    const text = events
      .filter((e) => e.type === 'response.output_text.delta')
      .map((e) => e.delta)
      .join('');
    assert.equal(text, '\n\nFine, thanks.');
    assert.equal(events[0]!.response.status, 'in_progress');
  });

  test('function tools: a function_call item; its output sent back as function_call_output; text.format constrains', async () => {
    answer('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>');
    const first = (
      await post({
        input: [{ role: 'user', content: [{ type: 'input_text', text: 'Weather in Oslo?' }] }],
        tools: TOOLS,
      })
    ).json();
    const call = first.output.find((o: { type: string }) => o.type === 'function_call');
    assert.ok(call, JSON.stringify(first.output));
    assert.equal(call.name, 'get_weather');
    assert.equal(call.arguments, '{"city": "Oslo"}');
    assert.match(call.call_id, /^call_/);
    answer('{"summary": "cold"}');
    const before = fx.backend.submissions.length;
    const second = await post({
      input: [
        { role: 'user', content: 'Weather in Oslo?' },
        { type: 'function_call', call_id: call.call_id, name: 'get_weather', arguments: call.arguments },
        { type: 'function_call_output', call_id: call.call_id, output: '2 degrees' },
      ],
      tools: TOOLS,
      text: {
        format: {
          type: 'json_schema',
          name: 'w',
          schema: { type: 'object', properties: { summary: { type: 'string' } } },
        },
      },
    });
    assert.equal(second.statusCode, 200, second.body);
    assert.equal(second.json().output[0].content[0].text, '{"summary": "cold"}');
    assert.equal(fx.backend.submissions[before]!.request.sampling.structuredOutput!.constraint.kind, 'json');
    assert.match(
      lastPrompt(),
      /<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "Oslo"\}\}\n<\/tool_call>/,
    );
    assert.match(lastPrompt(), /<tool_response>\n2 degrees\n<\/tool_response>/);
  });

  test('store: previous_response_id and item_reference resolve stored items; GET, input_items, DELETE; store false', async () => {
    answer('First answer.');
    const a = (await post({ input: 'One' })).json();
    answer('Second answer.');
    const b = await post({ input: 'Two', previous_response_id: a.id });
    assert.equal(b.statusCode, 200, b.body);
    assert.match(
      lastPrompt(),
      /user\nOne<\|im_end\|>\n<\|im_start\|>assistant\nFirst answer\.<\|im_end\|>\n<\|im_start\|>user\nTwo/,
    );
    const ref = await post({
      input: [
        { role: 'user', content: 'One' },
        { type: 'item_reference', id: a.output[0].id },
        { role: 'user', content: 'Again' },
      ],
    });
    assert.equal(ref.statusCode, 200, ref.body);
    assert.match(lastPrompt(), /assistant\nFirst answer\.<\|im_end\|>\n<\|im_start\|>user\nAgain/);
    const got = await fx.app.inject({ method: 'GET', url: `/v1/responses/${a.id}` });
    assert.deepEqual(got.json(), a);
    const items = (await fx.app.inject({ method: 'GET', url: `/v1/responses/${b.json().id}/input_items` })).json();
    assert.deepEqual(
      items.data.map((i: { role: string }) => i.role),
      ['user', 'assistant', 'user'],
    );
    assert.equal((await fx.app.inject({ method: 'DELETE', url: `/v1/responses/${a.id}` })).json().deleted, true);
    assert.equal((await fx.app.inject({ method: 'GET', url: `/v1/responses/${a.id}` })).statusCode, 404);
    const gone = await post({ input: 'x', previous_response_id: a.id });
    assert.equal(gone.statusCode, 404);
    assert.equal(gone.json().error.param, 'previous_response_id');
    const badRef = await post({ input: [{ type: 'item_reference', id: 'msg_nope' }] });
    assert.equal(badRef.statusCode, 400);
    assert.equal(badRef.json().error.param, 'input[0]');
    const unstored = (await post({ input: 'y', store: false })).json();
    assert.equal(unstored.store, false);
    assert.equal((await fx.app.inject({ method: 'GET', url: `/v1/responses/${unstored.id}` })).statusCode, 404);
  });

  test('an unknown id of any length a URL can carry: the same OpenAI-style 404 as a short one (GET, input_items, DELETE)', async () => {
    // fastify's default maxParamLength (100) answered 414 `uri_too_long` past 100 characters.
    for (const [method, path] of [
      ['GET', ''],
      ['GET', '/input_items'],
      ['DELETE', ''],
    ] as const) {
      const answer = async (id: string) => {
        const res = await fx.app.inject({ method, url: `/v1/responses/${id}${path}` });
        const { message, ...error } = res.json().error as { message: string };
        // A long id is cut in the message (errors.ts bounds messages): compare its start.
        assert.ok(
          message.startsWith(`Response with id '${id.slice(0, 100)}`),
          `${method} ${path}: ${message.slice(0, 200)}`,
        );
        return { status: res.statusCode, error };
      };
      const short = await answer('resp_nope');
      assert.deepEqual(short, {
        status: 404,
        error: { type: 'invalid_request_error', param: 'response_id', code: 'not_found' },
      });
      for (const length of [101, 4096, MAX_PATH_PARAM_LENGTH - 100, MAX_PATH_PARAM_LENGTH]) {
        assert.deepEqual(
          await answer(`resp_${'x'.repeat(length - 5)}`),
          short,
          `${method} ${path}: an id of ${length} characters`,
        );
      }
    }
  });

  test('bounded store: the oldest response is evicted past the capacity (3 here)', async () => {
    answer('ok');
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await post({ input: `q${i}` })).json().id);
    const found = await Promise.all(
      ids.map(async (id) => (await fx.app.inject({ method: 'GET', url: `/v1/responses/${id}` })).statusCode),
    );
    assert.deepEqual(found, [404, 404, 200, 200, 200]);
  });

  test('max_output_tokens cut: status incomplete with the reason; refusals name the field', async () => {
    answer('Cut here', 'length');
    const r = (await post({ input: 'Go', max_output_tokens: 2 })).json();
    assert.equal(r.status, 'incomplete');
    assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
    const stream = parseEvents((await post({ input: 'Go', max_output_tokens: 2, stream: true })).payload);
    assert.equal(stream.at(-1)!.type, 'response.incomplete');
    // The message cut by the limit is itself `incomplete`, as in OpenAI's API: in the object, in the stream's
    // output_item.done and in the final response event.
    assert.equal(r.output[0].status, 'incomplete', JSON.stringify(r.output));
    const itemDone = stream.find((e) => e.type === 'response.output_item.done') as
      | { item: { status: string } }
      | undefined;
    assert.equal(itemDone?.item.status, 'incomplete');
    assert.equal(
      (stream.at(-1) as { response: { output: Array<{ status: string }> } }).response.output[0]!.status,
      'incomplete',
    );
    answer('Whole', 'stop');
    assert.equal((await post({ input: 'Go' })).json().output[0].status, 'completed');
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ input: 'x', tools: [{ type: 'web_search' }] }, 'tools[0].type'],
      [{ input: 'x', background: true }, 'background'],
      [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }, 'input[0].content[0].type'],
      [{ input: [{ type: 'computer_call' }] }, 'input[0].type'],
      [{ input: 'x', tool_choice: 'required' }, 'tool_choice'],
    ];
    for (const [body, param] of cases) {
      const res = await post(body);
      assert.equal(res.statusCode, 400, `${JSON.stringify(body)}: ${res.body}`);
      assert.equal(res.json().error.param, param, res.body);
    }
  });
});
