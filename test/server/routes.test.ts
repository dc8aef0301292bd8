/**
 * OpenAI route shapes over a fake backend (gateway.md sections 9, 12, 13, 14): ids, finish_reason always present,
 * [DONE] once, usage chunk, streaming == non-streaming text, prompt rendering, parameter translation, pinning.
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { MODEL_ID, choicesOf, parseSse, streamedText, useApp } from './helpers.js';

const REPLY = 'Hello there! Ünïcödé ✓ 你好 🎉 done.';

describe('OpenAI routes', () => {
  const fx = useApp();
  let replyIds: number[];

  before(async () => {
    replyIds = fx.tokenizer.encode(REPLY, { addSpecialTokens: false });
    fx.backend.onSubmit = (s) => s.stream.pushAll(replyIds, 'stop');
  });

  const chat = (body: Record<string, unknown>, headers: Record<string, string> = {}) =>
    fx.app.inject({ method: 'POST', url: '/v1/chat/completions', payload: body, headers });
  const completions = (body: Record<string, unknown>, headers: Record<string, string> = {}) =>
    fx.app.inject({ method: 'POST', url: '/v1/completions', payload: body, headers });

  test('non-streaming chat: shape, text, usage, rendered prompt and default limit', async () => {
    const messages = [
      { role: 'system', content: 'Be brief.' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Hi' },
          { type: 'text', text: 'there' },
        ],
      },
    ];
    const res = await chat({ model: MODEL_ID, messages, user: 'someone' }, { 'x-request-id': 'client-id-1' });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    assert.match(body.id, /^chatcmpl-[0-9a-f]{32}$/);
    assert.equal(body.object, 'chat.completion');
    assert.equal(body.model, MODEL_ID);
    assert.equal(typeof body.created, 'number');
    assert.equal(typeof body.system_fingerprint, 'string');
    assert.equal(body.choices.length, 1);
    assert.deepEqual(body.choices[0], {
      index: 0,
      message: { role: 'assistant', content: REPLY },
      logprobs: null,
      finish_reason: 'stop',
      stop_reason: null,
    });
    const sub = fx.backend.submissions.at(-1)!;
    const expectedPrompt = fx.tokenizer.encode(
      fx.tokenizer.applyChatTemplate(
        [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'Hi\nthere' },
        ],
        { addGenerationPrompt: true },
      ),
      { addSpecialTokens: false },
    );
    assert.deepEqual(sub.request.promptTokenIds, expectedPrompt);
    assert.deepEqual(body.usage, {
      prompt_tokens: expectedPrompt.length,
      completion_tokens: replyIds.length,
      total_tokens: expectedPrompt.length + replyIds.length,
      prompt_tokens_details: { cached_tokens: 0 },
    });
    // The engine request id is minted by the gateway, never the client's; the client's id is echoed.
    assert.equal(sub.request.requestId, body.id);
    assert.notEqual(sub.request.requestId, 'client-id-1');
    assert.equal(res.headers['x-request-id'], 'client-id-1');
    assert.equal(sub.request.stream, false);
    // The default limit is the remaining usable context: max_model_len − 2 (TokenSpeed's clamp, engine-wire.md 4.4).
    assert.equal(sub.request.sampling.maxNewTokens, fx.backend.maxModelLen! - 2 - expectedPrompt.length);
    assert.equal(sub.dpRank, undefined);
  });

  test('streaming chat: role chunk, finish_reason null until the last chunk, [DONE] once, same text', async () => {
    const res = await chat({ model: MODEL_ID, messages: [{ role: 'user', content: 'Hi' }], stream: true });
    assert.equal(res.statusCode, 200);
    assert.match(String(res.headers['content-type']), /^text\/event-stream/);
    const { events, doneCount } = parseSse(res.body);
    assert.equal(doneCount, 1);
    assert.ok(events.length >= 3);
    const ids = new Set(events.map((e) => e.id));
    assert.equal(ids.size, 1);
    assert.match(String(events[0]!.id), /^chatcmpl-/);
    assert.deepEqual(choicesOf(events[0]!)[0]!.delta, { role: 'assistant', content: '' });
    events.forEach((ev, i) => {
      assert.equal(ev.object, 'chat.completion.chunk');
      assert.ok(!('usage' in ev), 'no usage field without include_usage');
      const c = choicesOf(ev)[0]!;
      assert.ok('finish_reason' in c, `chunk ${i} omits finish_reason`);
      assert.equal(c.finish_reason, i === events.length - 1 ? 'stop' : null);
    });
    assert.equal(streamedText(events), REPLY);
    assert.equal(fx.backend.submissions.at(-1)!.request.stream, true);
  });

  test('stream_options.include_usage: every chunk has usage null, then one chunk with choices [] and usage', async () => {
    const res = await chat({
      messages: [{ role: 'user', content: 'Hi' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const { events, doneCount } = parseSse(res.body);
    assert.equal(doneCount, 1);
    const last = events.at(-1)!;
    assert.deepEqual(last.choices, []);
    const usage = last.usage as { prompt_tokens: number; completion_tokens: number; total_tokens: number };
    assert.equal(usage.completion_tokens, replyIds.length);
    assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
    for (const ev of events.slice(0, -1)) assert.equal(ev.usage, null);
    assert.equal(events.filter((e) => Array.isArray(e.choices) && (e.choices as unknown[]).length === 0).length, 1);
    assert.equal(choicesOf(events.at(-2)!)[0]!.finish_reason, 'stop');
  });

  test('completions: string prompt, streaming and not, same text; cmpl- ids and text_completion objects', async () => {
    const plain = await completions({ model: MODEL_ID, prompt: 'Once upon a time', max_tokens: 50 });
    assert.equal(plain.statusCode, 200, plain.body);
    const body = plain.json();
    assert.match(body.id, /^cmpl-/);
    assert.equal(body.object, 'text_completion');
    assert.deepEqual(body.choices, [
      { index: 0, text: REPLY, logprobs: null, finish_reason: 'stop', stop_reason: null },
    ]);
    const promptIds = fx.tokenizer.encode('Once upon a time', { addSpecialTokens: true });
    assert.deepEqual(fx.backend.submissions.at(-1)!.request.promptTokenIds, promptIds);
    assert.equal(fx.backend.submissions.at(-1)!.request.sampling.maxNewTokens, 50);
    assert.equal(body.usage.prompt_tokens, promptIds.length);

    const streamed = await completions({ prompt: ['Once upon a time'], stream: true });
    const { events, doneCount } = parseSse(streamed.body);
    assert.equal(doneCount, 1);
    for (const [i, ev] of events.entries()) {
      assert.equal(ev.object, 'text_completion');
      assert.equal(choicesOf(ev)[0]!.finish_reason, i === events.length - 1 ? 'stop' : null);
    }
    assert.equal(streamedText(events), REPLY);
  });

  test('completions: token-id prompts are sent as they are', async () => {
    const res = await completions({ prompt: [1, 2, 3] });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(fx.backend.submissions.at(-1)!.request.promptTokenIds, [1, 2, 3]);
    const nested = await completions({ prompt: [[4, 5]] });
    assert.equal(nested.statusCode, 200, nested.body);
    assert.deepEqual(fx.backend.submissions.at(-1)!.request.promptTokenIds, [4, 5]);
  });

  test('sampling parameters are translated; max_completion_tokens wins over max_tokens', async () => {
    const res = await chat({
      messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 10,
      max_completion_tokens: 20,
      temperature: 0.5,
      top_p: 0.9,
      top_k: 40,
      min_p: 0.05,
      presence_penalty: 0.5,
      frequency_penalty: -0.5,
      repetition_penalty: 1.1,
      seed: 1234,
      stop_token_ids: [5, 7, 5],
      ignore_eos: true,
      skip_special_tokens: false,
      min_tokens: 3,
      n: 1,
      logprobs: false,
      stop: null,
      tools: [],
    });
    assert.equal(res.statusCode, 200, res.body);
    const s = fx.backend.submissions.at(-1)!.request.sampling;
    assert.equal(s.maxNewTokens, 20);
    assert.equal(s.temperature, 0.5);
    assert.equal(s.topP, 0.9);
    assert.equal(s.topK, 40);
    assert.equal(s.minP, 0.05);
    assert.equal(s.presencePenalty, 0.5);
    assert.equal(s.frequencyPenalty, -0.5);
    assert.equal(s.repetitionPenalty, 1.1);
    assert.equal(s.seed, 1234);
    assert.deepEqual(s.stopTokenIds, [5, 7]);
    assert.equal(s.ignoreEos, true);
    assert.equal(s.skipSpecialTokens, false);
    assert.equal(s.minNewTokens, 3);
  });

  test('a stop token that ends the choice is counted but its text is not emitted', async () => {
    const stopId = fx.tokenizer.encode('!', { addSpecialTokens: false })[0]!;
    const ids = fx.tokenizer.encode('Hi there', { addSpecialTokens: false });
    fx.backend.onSubmit = (s) => s.stream.pushAll([...ids, stopId], 'stop');
    try {
      const res = await completions({ prompt: 'x', stop_token_ids: [stopId] });
      const body = res.json();
      assert.equal(body.choices[0].text, 'Hi there');
      assert.equal(body.usage.completion_tokens, ids.length + 1);
      assert.equal(body.choices[0].stop_reason, stopId, "vLLM's stop_reason: the stop token's id");
      // Streamed: the terminal chunk says it too.
      const streamed = parseSse((await completions({ prompt: 'x', stop_token_ids: [stopId], stream: true })).body);
      const withChoices = streamed.events.filter((e) => choicesOf(e).length > 0);
      const last = choicesOf(withChoices.at(-1)!)[0]! as Record<string, unknown>;
      assert.deepEqual([last.finish_reason, last.stop_reason], ['stop', stopId]);
      // A stop string the gateway matched: its text.
      const matched = await completions({ prompt: 'x', stop: ['there'] });
      assert.deepEqual(
        [matched.json().choices[0].finish_reason, matched.json().choices[0].stop_reason],
        ['stop', 'there'],
      );
      // A length finish keeps the last token's text.
      fx.backend.onSubmit = (s) => s.stream.pushAll([...ids, stopId], 'length');
      const res2 = await completions({ prompt: 'x', stop_token_ids: [stopId] });
      assert.equal(res2.json().choices[0].text, 'Hi there!');
      assert.equal(res2.json().choices[0].finish_reason, 'length');
      assert.equal(res2.json().choices[0].stop_reason, null);
    } finally {
      fx.backend.onSubmit = (s) => s.stream.pushAll(replyIds, 'stop');
    }
  });

  test('multi-byte characters split across outputs stream without U+FFFD and equal the full text', async () => {
    const text = '🎉🎉 日本語 ✓';
    const ids = fx.tokenizer.encode(text, { addSpecialTokens: false });
    fx.backend.onSubmit = (s) => s.stream.pushAll(ids, 'length');
    try {
      const res = await completions({ prompt: 'x', stream: true });
      const { events } = parseSse(res.body);
      const deltas = events.map((e) => String(choicesOf(e)[0]!.text));
      for (const d of deltas) assert.ok(!d.includes('\uFFFD'), `delta with U+FFFD: ${JSON.stringify(d)}`);
      assert.equal(deltas.join(''), text);
    } finally {
      fx.backend.onSubmit = (s) => s.stream.pushAll(replyIds, 'stop');
    }
  });

  test('X-data-parallel-rank pins the rank; a bad value is a 400 naming the valid ranks', async () => {
    const ok = await chat({ messages: [{ role: 'user', content: 'Hi' }] }, { 'X-Data-Parallel-Rank': '1' });
    assert.equal(ok.statusCode, 200, ok.body);
    assert.equal(fx.backend.submissions.at(-1)!.dpRank, 1);
    const before = fx.backend.submissions.length;
    for (const bad of ['7', 'abc', '-1', '1.5']) {
      const res = await chat({ messages: [{ role: 'user', content: 'Hi' }] }, { 'x-data-parallel-rank': bad });
      assert.equal(res.statusCode, 400, `value ${bad}`);
      const err = res.json().error;
      assert.equal(err.type, 'invalid_request_error');
      assert.equal(err.param, 'X-data-parallel-rank');
      assert.match(err.message, /one of 0, 1/);
    }
    assert.equal(fx.backend.submissions.length, before, 'nothing submitted for a bad pin');
  });

  test('x-gateway-inference-objective and x-gateway-fairness-id: band and tenant reach the submit; bad values are refused', async () => {
    const messages = [{ role: 'user', content: 'Hi' }];
    const plain = await chat({ messages });
    assert.equal(plain.statusCode, 200, plain.body);
    assert.equal(fx.backend.submissions.at(-1)!.request.priority, undefined, 'standard: nothing added');
    const bulk = await chat({ messages }, { 'X-Gateway-Inference-Objective': 'sheddable' });
    assert.equal(bulk.statusCode, 200, bulk.body);
    assert.equal(fx.backend.submissions.at(-1)!.request.priority, 1);
    assert.deepEqual(fx.backend.submissions.at(-1)!.flow, { tenant: 'default', band: 2 }, 'the flow ticket');
    const named = await chat({ messages }, { 'x-gateway-fairness-id': 'team-a' });
    assert.equal(named.statusCode, 200, named.body);
    assert.deepEqual(fx.backend.submissions.at(-1)!.flow, { tenant: 'team-a', band: 1 });
    const badId = await chat({ messages }, { 'x-gateway-fairness-id': 'has space' });
    assert.equal(badId.statusCode, 400, badId.body);
    assert.equal(badId.json().error.code, 'invalid_fairness_id');
    const before = fx.backend.submissions.length;
    const raised = await chat({ messages }, { 'x-gateway-inference-objective': 'critical' });
    assert.equal(raised.statusCode, 403, raised.body);
    assert.equal(raised.json().error.code, 'priority_not_allowed');
    const unknown = await completions({ prompt: 'x' }, { 'x-gateway-inference-objective': 'urgent' });
    assert.equal(unknown.statusCode, 400, unknown.body);
    assert.equal(unknown.json().error.param, 'x-gateway-inference-objective');
    assert.equal(fx.backend.submissions.length, before, 'nothing submitted for a refused band');
  });

  test('n > 1: a sub-request refused at once ends the request at once, its siblings withdrawn', async () => {
    const backend = fx.backend;
    const submit = backend.submit.bind(backend);
    const seen: string[] = [];
    backend.submitGate = new Promise<void>(() => {}); // the siblings wait (as in flow control's queue) until aborted
    backend.submit = (request, options) => {
      seen.push(request.requestId);
      if (request.requestId.endsWith('-1')) {
        return Promise.reject(new EngineClientError('overloaded', 'the queue of this tenant is full'));
      }
      return submit(request, options);
    };
    try {
      const res = await completions({ prompt: 'x', n: 3, max_tokens: 2 });
      assert.equal(res.statusCode, 429, res.body);
      assert.equal(res.json().error.code, 'overloaded');
      assert.equal(seen.length, 3);
    } finally {
      backend.submit = submit;
      backend.submitGate = null;
    }
  });

  test('per-tenant accounting: the tokens equal the usage the answers reported; refusals count for the tenant', async () => {
    const metric = async (name: string, labels: string): Promise<number> => {
      const text = (await fx.app.inject({ method: 'GET', url: '/metrics' })).body;
      const line = text
        .split('\n')
        .find((l) => l.startsWith(`${name}{`) && labels.split(',').every((x) => l.includes(x)));
      return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
    };
    const team = 'billing-test-a';
    const sums = { prompt: 0, completion: 0 };
    for (const body of [
      { prompt: 'one', max_tokens: 3 },
      { prompt: 'two words', max_tokens: 5, n: 2 },
    ]) {
      const res = await completions(body, { 'x-gateway-fairness-id': team });
      assert.equal(res.statusCode, 200, res.body);
      sums.prompt += res.json().usage.prompt_tokens;
      sums.completion += res.json().usage.completion_tokens;
    }
    const tenant = `tenant="${team}"`;
    assert.equal(await metric('model_gateway_tenant_tokens_total', `${tenant},kind="prompt"`), sums.prompt);
    assert.equal(await metric('model_gateway_tenant_tokens_total', `${tenant},kind="completion"`), sums.completion);
    assert.equal(await metric('model_gateway_tenant_requests_total', `${tenant},status="200"`), 2);
    const refused = await completions(
      { prompt: 'x' },
      { 'x-gateway-fairness-id': team, 'x-gateway-inference-objective': 'critical' },
    );
    assert.equal(refused.statusCode, 403);
    assert.equal(await metric('model_gateway_tenant_requests_total', `${tenant},status="403"`), 1);
  });

  test('chat_template_kwargs reach the template (Qwen3 enable_thinking)', async () => {
    const messages = [{ role: 'user', content: 'Hi' }];
    const res = await chat({ messages, chat_template_kwargs: { enable_thinking: false } });
    assert.equal(res.statusCode, 200, res.body);
    const withKwargs = fx.tokenizer.encode(
      fx.tokenizer.applyChatTemplate(messages, {
        addGenerationPrompt: true,
        templateKwargs: { enable_thinking: false },
      }),
      { addSpecialTokens: false },
    );
    const without = fx.tokenizer.encode(fx.tokenizer.applyChatTemplate(messages, { addGenerationPrompt: true }), {
      addSpecialTokens: false,
    });
    assert.notDeepEqual(withKwargs, without, 'the kwarg changes the rendering');
    assert.deepEqual(fx.backend.submissions.at(-1)!.request.promptTokenIds, withKwargs);
  });

  test('GET /v1/models lists the served model with max_model_len', async () => {
    const res = await fx.app.inject({ method: 'GET', url: '/v1/models' });
    assert.equal(res.statusCode, 200);
    const body = res.json();
    assert.equal(body.object, 'list');
    assert.equal(body.data.length, 1);
    assert.equal(body.data[0].id, MODEL_ID);
    assert.equal(body.data[0].object, 'model');
    assert.equal(body.data[0].max_model_len, fx.backend.maxModelLen);
    assert.equal(typeof body.data[0].owned_by, 'string');
  });
});
