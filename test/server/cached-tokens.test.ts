/**
 * `usage.prompt_tokens_details.cached_tokens` (issue 12 part 1): the prefix-cache hit the engine reports for a request
 * (TokenSpeed `cached_tokens`, vLLM `prefill_stats.num_cached_tokens`; engine-wire.md 4.8, 5.9) reaches the OpenAI
 * usage object, streaming (the include_usage chunk) and not, on both routes; with n > 1 the prompt and its cached
 * tokens are counted once.
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { parseSse, useApp } from './helpers.js';

describe('usage.prompt_tokens_details.cached_tokens', () => {
  const fx = useApp();
  let ids: number[];

  before(() => {
    ids = fx.tokenizer.encode('Cached prefix, fresh answer.', { addSpecialTokens: false });
    fx.backend.onSubmit = (s) => {
      s.stream.cachedTokens = 48;
      s.stream.pushAll(ids, 'stop');
    };
  });

  const post = (url: string, payload: Record<string, unknown>) => fx.app.inject({ method: 'POST', url, payload });

  test("non-streaming chat and completions report the engine's cached tokens", async () => {
    const chat = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }] });
    assert.equal(chat.statusCode, 200, chat.body);
    assert.deepEqual(chat.json().usage.prompt_tokens_details, { cached_tokens: 48 });
    const cmpl = await post('/v1/completions', { prompt: 'Once upon a time', max_tokens: 20 });
    assert.equal(cmpl.statusCode, 200, cmpl.body);
    assert.deepEqual(cmpl.json().usage.prompt_tokens_details, { cached_tokens: 48 });
  });

  test('streaming with include_usage: the usage chunk carries them', async () => {
    for (const [url, body] of [
      ['/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }] }],
      ['/v1/completions', { prompt: 'Once upon a time' }],
    ] as const) {
      const res = await post(url, { ...body, stream: true, stream_options: { include_usage: true } });
      const usage = parseSse(res.body).events.at(-1)!.usage as { prompt_tokens_details: unknown };
      assert.deepEqual(usage.prompt_tokens_details, { cached_tokens: 48 }, url);
    }
  });

  test("n = 3: the shared prompt's cached tokens are counted once", async () => {
    const res = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], n: 3 });
    assert.equal(res.statusCode, 200, res.body);
    const usage = res.json().usage;
    assert.equal(usage.completion_tokens, 3 * ids.length);
    assert.deepEqual(usage.prompt_tokens_details, { cached_tokens: 48 });
  });
});
