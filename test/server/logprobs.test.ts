/**
 * logprobs / top_logprobs (k ≤ 20 on chat, ≤ 5 on completions, ≤ 1 on TokenSpeed groups; non-finite values → −9999,
 * streaming == non-streaming) and
 * logit_bias (validated, clamped, forwarded) through the routes over a fake backend (gateway.md 8, 11.2, 12).
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { finiteLogprob, parseLogprobs } from '../../src/server/logprobs.js';
import { choicesOf, parseSse, useApp } from './helpers.js';

const VALUES = [-0.25, -Infinity, NaN, -12345, -1.5];

test('finiteLogprob and parseLogprobs', () => {
  assert.deepEqual(VALUES.map(finiteLogprob), [-0.25, -9999, -9999, -9999, -1.5]);
  assert.equal(parseLogprobs({}, 'chat'), null);
  assert.equal(parseLogprobs({ logprobs: false, top_logprobs: 0 }, 'chat'), null);
  assert.equal(parseLogprobs({ logprobs: true }, 'chat'), 0);
  assert.equal(parseLogprobs({ logprobs: true, top_logprobs: 1 }, 'chat'), 1);
  assert.equal(parseLogprobs({ logprobs: 0 }, 'completions'), 0);
  assert.equal(parseLogprobs({ logprobs: 1 }, 'completions'), 1);
  assert.throws(() => parseLogprobs({ top_logprobs: 1 }, 'chat'), /requires 'logprobs'/);
  assert.equal(parseLogprobs({ logprobs: true, top_logprobs: 20 }, 'chat'), 20);
  assert.equal(parseLogprobs({ logprobs: 5 }, 'completions'), 5);
  assert.throws(() => parseLogprobs({ logprobs: true, top_logprobs: 21 }, 'chat'), /at most 20/);
  assert.throws(() => parseLogprobs({ logprobs: 6 }, 'completions'), /at most 5/);
  assert.throws(() => parseLogprobs({ logprobs: -1 }, 'completions'), /≥ 0/);
  assert.throws(() => parseLogprobs({ logprobs: true }, 'completions'), /integer/);
});

describe('logprobs and logit_bias over the routes', () => {
  const fx = useApp();
  let ids: number[];

  before(async () => {
    ids = fx.tokenizer
      .encode('Hi 你好 there, how are you doing today?', { addSpecialTokens: false })
      .slice(0, VALUES.length);
    assert.equal(ids.length, VALUES.length);
    fx.backend.onSubmit = (s) =>
      ids.forEach((id, i) => s.stream.push([id], i === ids.length - 1 ? 'length' : null, [VALUES[i]!]));
  });

  const post = (url: string, payload: Record<string, unknown>) => fx.app.inject({ method: 'POST', url, payload });
  const tok = (id: number) => fx.tokenizer.decode([id], { skipSpecialTokens: false });
  const expectedValues = VALUES.map(finiteLogprob);

  test('chat: content entries with finite values; top_logprobs = [sampled] for k = 1; streamed entries equal', async () => {
    const body = { messages: [{ role: 'user', content: 'x' }], logprobs: true, top_logprobs: 1 };
    const res = await post('/v1/chat/completions', body);
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(fx.backend.submissions.at(-1)!.request.returnLogprob, true);
    const content = res.json().choices[0].logprobs.content as Array<Record<string, unknown>>;
    assert.deepEqual(
      content.map((c) => c.logprob),
      expectedValues,
    );
    assert.deepEqual(
      content.map((c) => c.token),
      ids.map(tok),
    );
    for (const c of content) {
      assert.deepEqual(c.bytes, [...Buffer.from(c.token as string, 'utf8')]);
      assert.deepEqual(c.top_logprobs, [{ token: c.token, logprob: c.logprob, bytes: c.bytes }]);
    }
    const { events } = parseSse((await post('/v1/chat/completions', { ...body, stream: true })).body);
    const streamed = events.flatMap((e) => {
      const lp = choicesOf(e)[0]?.logprobs as { content: unknown[] } | null | undefined;
      return lp ? lp.content : [];
    });
    assert.deepEqual(streamed, content);
    const k0 = (await post('/v1/chat/completions', { ...body, top_logprobs: 0 })).json().choices[0].logprobs.content;
    assert.deepEqual(
      k0.map((c: { top_logprobs: unknown[] }) => c.top_logprobs),
      VALUES.map(() => []),
    );
    const none = await post('/v1/chat/completions', { messages: body.messages });
    assert.equal(none.json().choices[0].logprobs, null);
    assert.equal(fx.backend.submissions.at(-1)!.request.returnLogprob, false);
  });

  test('completions: tokens, token_logprobs, text_offset, top_logprobs; streamed equal', async () => {
    const res = await post('/v1/completions', { prompt: 'x', logprobs: 1 });
    const lp = res.json().choices[0].logprobs;
    assert.deepEqual(lp.tokens, ids.map(tok));
    assert.deepEqual(lp.token_logprobs, expectedValues);
    let off = 0;
    assert.deepEqual(
      lp.text_offset,
      ids.map((id) => ((off += tok(id).length), off - tok(id).length)),
    );
    assert.deepEqual(
      lp.top_logprobs,
      ids.map((id, i) => ({ [tok(id)]: expectedValues[i] })),
    );
    const { events } = parseSse((await post('/v1/completions', { prompt: 'x', logprobs: 1, stream: true })).body);
    const merged = {
      text_offset: [] as number[],
      token_logprobs: [] as number[],
      tokens: [] as string[],
      top_logprobs: [] as unknown[],
    };
    for (const e of events) {
      const l = choicesOf(e)[0]?.logprobs as typeof merged | null;
      if (!l) continue;
      for (const key of Object.keys(merged) as Array<keyof typeof merged>) (merged[key] as unknown[]).push(...l[key]);
    }
    assert.deepEqual(merged, lp);
    const k0 = (await post('/v1/completions', { prompt: 'x', logprobs: 0 })).json().choices[0].logprobs;
    assert.deepEqual(
      k0.top_logprobs,
      VALUES.map(() => null),
    );
  });

  test('logit_bias reaches the engine request normalized and clamped; bad keys → 400', async () => {
    const res = await post('/v1/completions', { prompt: 'x', logit_bias: { '0042': 200, '7': -3 } });
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(fx.backend.submissions.at(-1)!.request.sampling.logitBias, { '42': 100, '7': -3 });
    await post('/v1/completions', { prompt: 'x', logit_bias: {} });
    assert.equal(fx.backend.submissions.at(-1)!.request.sampling.logitBias, null);
    const bad = await post('/v1/completions', { prompt: 'x', logit_bias: { [String(fx.tokenizer.vocabSize)]: 1 } });
    assert.equal(bad.statusCode, 400);
    assert.equal(bad.json().error.param, 'logit_bias');
  });
});
