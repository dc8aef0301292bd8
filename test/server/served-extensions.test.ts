/**
 * vLLM's request extensions that reach the engine (issue 31 part 4): `bad_words` becomes the token sequences vLLM's
 * frontend makes (the word, and the word after a space when that tokenizes differently), `thinking_token_budget` the
 * engine's thinking budget, `truncate_prompt_tokens` keeps the prompt's last k tokens (-1: as many as the context
 * leaves room for); TokenSpeed groups refuse `bad_words` (their request has no such field). Bad values are 400s
 * naming the field.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { badWordsTokenIds } from '../../src/server/params.js';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import { FakeBackend } from './fake-backend.js';
import { useApp } from './helpers.js';

test('bad_words: each word bare, and after a space when that is another token sequence of the same length', async () => {
  const tok = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  const seqs = badWordsTokenIds(tok, [' hello', 'world'])!;
  const bare = tok.encode('hello', { addSpecialTokens: false });
  const spaced = tok.encode(' hello', { addSpecialTokens: false });
  assert.deepEqual(seqs[0], bare, 'leading spaces are stripped first');
  assert.ok(
    seqs.some((s) => JSON.stringify(s) === JSON.stringify(spaced)) ===
      (spaced[0] !== bare[0] && spaced.length === bare.length),
  );
  assert.equal(badWordsTokenIds(tok, null), null);
  assert.throws(() => badWordsTokenIds(tok, ['']), /bad_words/);
  assert.throws(() => badWordsTokenIds(tok, 'x'), /bad_words/);
});

describe('extensions on the routes (vLLM group)', () => {
  const vllm = new FakeBackend();
  vllm.reservedContextTokens = 0;
  const fx = useApp({
    backend: vllm,
    groups: [{ worker: 'ipc:///tmp/vllm', name: 'vllm', engine: 'vllm', backend: vllm }],
  });
  const complete = (extra: Record<string, unknown>) =>
    fx.app.inject({
      method: 'POST',
      url: '/v1/completions',
      payload: { prompt: 'one two three four five', max_tokens: 2, ...extra },
    });
  const last = () => fx.backend.submissions.at(-1)!.request;

  test('bad_words, thinking_token_budget and truncate_prompt_tokens reach the engine request', async () => {
    fx.backend.onSubmit = (sub) => sub.stream.pushAll([11, 12], 'length');
    const full = (await complete({})).statusCode;
    assert.equal(full, 200);
    const whole = last().promptTokenIds;
    assert.equal(
      (await complete({ bad_words: ['three'], thinking_token_budget: 16, truncate_prompt_tokens: 2 })).statusCode,
      200,
    );
    const r = last();
    assert.deepEqual(r.promptTokenIds, whole.slice(-2), 'the last two prompt tokens');
    assert.equal(r.sampling.thinkingTokenBudget, 16);
    assert.ok((r.sampling.badWordsTokenIds ?? []).length >= 1);
    for (const [body, param] of [
      [{ thinking_token_budget: -1 }, 'thinking_token_budget'],
      [{ truncate_prompt_tokens: 0 }, 'truncate_prompt_tokens'],
      [{ bad_words: [3] }, 'bad_words'],
    ] as const) {
      const res = await complete(body);
      assert.equal(res.statusCode, 400, JSON.stringify(body));
      assert.equal(res.json().error.param, param);
    }
  });
});

describe('bad_words on a TokenSpeed group', () => {
  const fx = useApp();
  test('is refused, naming the field', async () => {
    const res = await fx.app.inject({
      method: 'POST',
      url: '/v1/completions',
      payload: { prompt: 'x', max_tokens: 2, bad_words: ['y'] },
    });
    assert.equal(res.statusCode, 400);
    assert.equal(res.json().error.param, 'bad_words');
  });
});

describe('echo and continuous usage stats', () => {
  const fx = useApp();
  const sse = (payload: string) =>
    payload
      .split('\n\n')
      .filter((r) => r.startsWith('data: ') && r !== 'data: [DONE]')
      .map((r) => JSON.parse(r.slice(6)) as Record<string, any>); // eslint-disable-line @typescript-eslint/no-explicit-any -- parsed chunks

  test("echo: the prompt starts every choice (buffered) or is each choice's first chunk (streamed)", async () => {
    fx.backend.onSubmit = (sub) =>
      sub.stream.pushAll(fx.tokenizer.encode(' and more', { addSpecialTokens: false }), 'length');
    const full = await fx.app.inject({
      method: 'POST',
      url: '/v1/completions',
      payload: { prompt: 'Once upon', echo: true, max_tokens: 3 },
    });
    assert.equal(full.statusCode, 200, full.body);
    assert.equal(full.json().choices[0].text, 'Once upon and more');
    const streamed = await fx.app.inject({
      method: 'POST',
      url: '/v1/completions',
      payload: { prompt: 'Once upon', echo: true, max_tokens: 3, stream: true },
    });
    const chunks = sse(streamed.body);
    assert.equal(chunks[0]!.choices[0].text, 'Once upon');
    assert.equal(chunks.map((c) => c.choices[0]?.text ?? '').join(''), 'Once upon and more');
    const ids = fx.tokenizer.encode('Hello', { addSpecialTokens: false });
    const fromIds = await fx.app.inject({
      method: 'POST',
      url: '/v1/completions',
      payload: { prompt: ids, echo: true, max_tokens: 3 },
    });
    assert.ok(fromIds.json().choices[0].text.startsWith('Hello'));
  });

  test('continuous_usage_stats: every chunk carries the usage so far, the last one the total', async () => {
    fx.backend.onSubmit = (sub) => sub.stream.pushAll([11, 12, 13], 'length');
    const res = await fx.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      payload: {
        messages: [{ role: 'user', content: 'Hi' }],
        max_tokens: 3,
        stream: true,
        stream_options: { include_usage: true, continuous_usage_stats: true },
      },
    });
    assert.equal(res.statusCode, 200);
    const chunks = sse(res.body);
    assert.ok(
      chunks.every((c) => c.usage !== null && typeof c.usage.prompt_tokens === 'number'),
      'usage on every chunk',
    );
    const completions = chunks.map((c) => c.usage.completion_tokens as number);
    assert.deepEqual(
      [...completions].sort((a, b) => a - b),
      completions,
      'never decreasing',
    );
    assert.equal(completions.at(-1), 3);
    // Each content chunk counts one more token (the pre-built text records would freeze the first chunk's usage).
    const withText = chunks.filter((c) => (c.choices[0]?.delta?.content ?? '') !== '');
    assert.ok(withText.length >= 2, `${withText.length} content chunks`);
    assert.deepEqual(
      withText.map((c) => c.usage.completion_tokens),
      withText.map((_, i) => i + 1),
    );
  });
});

describe("a request's own chat_template", () => {
  const trusting = useApp({ output: { trustRequestChatTemplate: true } });
  const plain = useApp();
  const chat = (fx: typeof plain, chat_template: unknown) =>
    fx.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      payload: { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2, chat_template },
    });

  test('renders the prompt with --trust-request-chat-template; refused without it, or when it does not parse', async () => {
    trusting.backend.onSubmit = (sub) => sub.stream.pushAll([11], 'length');
    const ok = await chat(trusting, '{% for m in messages %}<<{{ m.content }}>>{% endfor %}');
    assert.equal(ok.statusCode, 200, ok.body);
    const prompt = trusting.backend.submissions.at(-1)!.request.promptTokenIds;
    assert.equal(trusting.tokenizer.decode(prompt, { skipSpecialTokens: false }), '<<Hi>>');
    const broken = await chat(trusting, '{% for m in messages %}');
    assert.equal(broken.statusCode, 400);
    assert.equal(broken.json().error.param, 'chat_template');
    const refused = await chat(plain, '{{ messages }}');
    assert.equal(refused.statusCode, 400);
    assert.match(refused.json().error.message, /--trust-request-chat-template/);
  });
});

describe('return_token_ids', () => {
  const fx = useApp();
  const sseChunks = (payload: string) =>
    payload
      .split('\n\n')
      .filter((r) => r.startsWith('data: ') && r !== 'data: [DONE]')
      .map((r) => JSON.parse(r.slice(6)) as Record<string, any>); // eslint-disable-line @typescript-eslint/no-explicit-any -- parsed chunks

  test("the prompt ids and every choice's ids, buffered and streamed, chat and completions", async () => {
    const ids = fx.tokenizer.encode(' one two three', { addSpecialTokens: false });
    fx.backend.onSubmit = (sub) => sub.stream.pushAll(ids, 'length');
    for (const [url, extra] of [
      ['/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }] }],
      ['/v1/completions', { prompt: 'Count' }],
    ] as const) {
      const full = await fx.app.inject({
        method: 'POST',
        url,
        payload: { ...extra, max_tokens: 3, return_token_ids: true },
      });
      assert.equal(full.statusCode, 200, full.body);
      const body = full.json();
      assert.deepEqual(body.prompt_token_ids, fx.backend.submissions.at(-1)!.request.promptTokenIds);
      assert.deepEqual(body.choices[0].token_ids, ids);
      const streamed = await fx.app.inject({
        method: 'POST',
        url,
        payload: { ...extra, max_tokens: 3, return_token_ids: true, stream: true },
      });
      const chunks = sseChunks(streamed.body);
      assert.deepEqual(chunks[0]!.prompt_token_ids, body.prompt_token_ids, 'in the first chunk');
      assert.ok(
        chunks.slice(1).every((c) => c.prompt_token_ids === undefined),
        'only there',
      );
      assert.deepEqual(
        chunks.flatMap((c) => c.choices[0]?.token_ids ?? []),
        ids,
      );
    }
    const plain = await fx.app.inject({
      method: 'POST',
      url: '/v1/completions',
      payload: { prompt: 'x', max_tokens: 3 },
    });
    assert.equal(plain.json().prompt_token_ids, undefined);
    assert.equal(plain.json().choices[0].token_ids, undefined);
  });
});
