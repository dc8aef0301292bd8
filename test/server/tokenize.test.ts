/**
 * /tokenize and /detokenize as vLLM has them (no engine involved): prompt and messages forms, their
 * add_special_tokens / add_generation_prompt defaults, the round trip with emoji and CJK, and the 400s/404.
 */
import { DEFAULT_TOKENIZE_BODY_LIMIT_BYTES } from '../../src/server/edge-options.js';
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { MODEL_ID, useApp } from './helpers.js';

describe('/tokenize and /detokenize', () => {
  const fx = useApp();

  const post = (url: string, payload: Record<string, unknown>) => fx.app.inject({ method: 'POST', url, payload });

  test('prompt: tokens, count and max_model_len; round trip through /detokenize', async () => {
    const text = 'Hello 世界 🎉 — ok';
    const res = await post('/tokenize', { model: MODEL_ID, prompt: text });
    assert.equal(res.statusCode, 200, res.body);
    const body = res.json();
    assert.deepEqual(body.tokens, fx.tokenizer.encode(text, { addSpecialTokens: true }));
    assert.equal(body.count, body.tokens.length);
    assert.equal(body.max_model_len, fx.backend.maxModelLen);
    assert.equal(body.token_strs, null);
    const back = await post('/detokenize', { tokens: body.tokens });
    assert.equal(back.statusCode, 200, back.body);
    assert.deepEqual(back.json(), { prompt: text });
    assert.equal(fx.backend.submissions.length, 0, 'no engine request');
  });

  test("return_token_strs: each token's vocabulary string, for a short and a long (off-loop) prompt", async () => {
    const short = (await post('/tokenize', { prompt: 'Hello world', return_token_strs: true })).json();
    assert.deepEqual(short.token_strs, ['Hello', 'Ġworld']);
    const text = 'Hello world. '.repeat(2000);
    const long = await post('/tokenize', { prompt: text, return_token_strs: true });
    assert.equal(long.statusCode, 200, long.body);
    const body = long.json();
    assert.equal(body.token_strs.length, body.count);
    assert.deepEqual(body.token_strs.slice(0, 3), ['Hello', 'Ġworld', '.']);
  });

  test('messages: the chat template with add_generation_prompt (default true) and no added specials', async () => {
    const messages = [{ role: 'user', content: '你好' }];
    const res = await post('/tokenize', { messages });
    const expected = fx.tokenizer.encode(
      fx.tokenizer.applyChatTemplate([{ role: 'user', content: '你好' }], { addGenerationPrompt: true }),
      {
        addSpecialTokens: false,
      },
    );
    assert.deepEqual(res.json().tokens, expected);
    const noGen = (await post('/tokenize', { messages, add_generation_prompt: false })).json();
    assert.ok(noGen.count < res.json().count, 'without the assistant opener the prompt is shorter');
    const decoded = (await post('/detokenize', { tokens: res.json().tokens })).json().prompt;
    assert.match(decoded, /<\|im_start\|>user\n你好<\|im_end\|>\n<\|im_start\|>assistant\n/);
  });

  test('refusals: both or neither input, bad token ids, unknown model, unknown nested fields (top-level ones are ignored)', async () => {
    assert.equal((await post('/tokenize', {})).statusCode, 400);
    assert.equal(
      (await post('/tokenize', { prompt: 'a', messages: [{ role: 'user', content: 'b' }] })).statusCode,
      400,
    );
    assert.equal(
      (await post('/tokenize', { prompt: 'a', add_generation_prompt: true })).json().error.param,
      'add_generation_prompt',
    );
    const bad = await post('/detokenize', { tokens: [1, fx.tokenizer.vocabSize] });
    assert.equal(bad.statusCode, 400);
    assert.equal(bad.json().error.param, 'tokens');
    assert.equal((await post('/detokenize', { tokens: [-1] })).statusCode, 400);
    assert.equal((await post('/tokenize', { model: 'other', prompt: 'a' })).statusCode, 404);
    // An unknown top-level field is ignored, as vLLM does (unknown-fields.ts); one inside a message is refused.
    const ignored = await post('/tokenize', { prompt: 'a', frobnicate: 1 });
    assert.equal(ignored.statusCode, 200, ignored.body);
    assert.equal(ignored.json().count, (await post('/tokenize', { prompt: 'a' })).json().count);
    const nested = await post('/tokenize', { messages: [{ role: 'user', content: 'b', frobnicate: 1 }] });
    assert.equal(nested.statusCode, 400);
    assert.equal(nested.json().error.param, 'messages[0].frobnicate');
  });

  test('bodies over the tokenize limit (default 1 MiB, issue 26 part 5) are refused with 413 naming it, before they are parsed', async () => {
    const big = 'x'.repeat(DEFAULT_TOKENIZE_BODY_LIMIT_BYTES);
    for (const [url, payload] of [
      ['/tokenize', { prompt: big }],
      ['/detokenize', { tokens: Array.from({ length: DEFAULT_TOKENIZE_BODY_LIMIT_BYTES / 2 }, () => 1) }],
    ] as const) {
      const res = await post(url, payload);
      assert.equal(res.statusCode, 413, url);
      assert.equal(res.json().error.code, 'request_too_large');
      assert.match(res.json().error.message, /--tokenize-body-limit/);
    }
    // Just under it is served; and the generation routes keep the general body limit. The text is words: one
    // million-letter word costs the pure-JS BPE ~28 CPU-s (superlinear in a word's length), ordinary text ~0.5 s.
    const words = 'The quick brown fox jumps over the lazy dog. '
      .repeat(DEFAULT_TOKENIZE_BODY_LIMIT_BYTES / 45)
      .slice(0, DEFAULT_TOKENIZE_BODY_LIMIT_BYTES - 100);
    assert.equal((await post('/tokenize', { prompt: words })).statusCode, 200);
    assert.notEqual(
      (await fx.app.inject({ method: 'POST', url: '/v1/completions', payload: { model: 'other', prompt: big } }))
        .statusCode,
      413,
    );
  });
});
