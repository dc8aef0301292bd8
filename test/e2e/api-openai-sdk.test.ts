/**
 * Issue #4 parameters end to end through the official `openai` client against `startGateway` with simulated
 * TokenSpeed and vLLM ranks: stop (string and list; never leaks; finish_reason stop), n > 1 (n choices with their
 * own indexes and finish reasons, summed usage, same seed → same texts), logprobs (finite values), logit_bias
 * accepted, and /tokenize + /detokenize over raw HTTP.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { openaiClient } from '../helpers/gateway.js';
import { startTestGateway, type TestGateway } from '../helpers/test-gateway.js';

for (const engine of ['tokenspeed', 'vllm'] as const) {
  describe(`issue #4 parameters via the openai SDK (${engine} sim)`, () => {
    let gateway: TestGateway;
    let client: OpenAI;

    before(async () => {
      gateway = await startTestGateway({ engine, sim: 2 });
      client = openaiClient(gateway);
    });
    after(() => gateway?.close());

    test('stop as a string and as a list: the text ends before the stop string', async () => {
      for (const stop of [' ', [' ', 'zzz']]) {
        const res = await client.completions.create({
          model: 'sim',
          prompt: 'Once upon a time',
          max_tokens: 40,
          seed: 3,
          stop,
        });
        const c = res.choices[0]!;
        assert.ok(!c.text.includes(' '), `stop text leaked: ${JSON.stringify(c.text)}`);
        assert.equal(c.finish_reason, 'stop');
      }
      const streamed = await client.chat.completions.create({
        model: 'sim',
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
      const req = {
        model: 'sim',
        messages: [{ role: 'user' as const, content: '你好 🎉' }],
        max_tokens: 12,
        n: 3,
        seed: 11,
      };
      const a = await client.chat.completions.create(req);
      const b = await client.chat.completions.create(req);
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
      const res = await client.chat.completions.create({
        model: 'sim',
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
          await fetch(`${gateway.url}${path}`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify(body),
          })
        ).json() as Promise<Record<string, unknown>>;
      const t = await post('/tokenize', { model: 'sim', prompt: '你好 🎉 world' });
      assert.equal(t.count, (t.tokens as number[]).length);
      assert.equal(typeof t.max_model_len, 'number');
      assert.deepEqual(await post('/detokenize', { tokens: t.tokens }), { prompt: '你好 🎉 world' });
    });
  });
}
