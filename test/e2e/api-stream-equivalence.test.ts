/**
 * End to end through the real stack (`startGateway` with two simulated TokenSpeed ranks): for many seeds and prompts
 * with emoji and CJK, the streamed text equals the non-streamed text byte for byte (gateway.md 5 and 12), also with
 * stop strings (gateway.md 6) and with n = 2 (gateway.md 10: seeds s + i, so a repeated request returns the same n
 * texts). The simulated text is ASCII; split multi-byte characters are covered by test/server/stream-equivalence.
 * Also `min_tokens` with stop strings (issue #14; min-tokens-helpers.ts); the vLLM family runs the same check in
 * vllm-short-ready.test.ts.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startTestGateway, type TestGateway } from '../helpers/test-gateway.js';
import { parseSse } from '../server/helpers.js';
import { checkMinTokensStops } from './min-tokens-helpers.js';

const PROMPTS = ['Tell me a story 🐉 about 龍 and 🎉.', '你好，请介绍一下你自己。😀', 'Plain ASCII prompt.'];

describe('streaming == non-streaming through a gateway over 2 simulated ranks', () => {
  let gateway: TestGateway;

  before(async () => {
    gateway = await startTestGateway({ sim: 2 });
  });
  after(() => gateway?.close());

  async function post(path: string, body: Record<string, unknown>): Promise<{ status: number; text: string }> {
    const res = await fetch(`${gateway.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: res.status, text: await res.text() };
  }

  /** Per choice index: [text, finish_reason] of a non-streaming response. */
  function fullChoices(raw: string): Array<[string, string]> {
    const body = JSON.parse(raw) as {
      choices: Array<{ index: number; text?: string; message?: { content: string }; finish_reason: string }>;
    };
    return body.choices.map((c) => [c.message?.content ?? c.text ?? '', c.finish_reason]);
  }

  /** Per choice index: [concatenated text, terminal finish_reason] of an SSE response. */
  function streamedChoices(raw: string, n: number): Array<[string, string]> {
    const { events, doneCount } = parseSse(raw);
    assert.equal(doneCount, 1);
    const out: Array<[string, string]> = Array.from({ length: n }, () => ['', '']);
    for (const ev of events) {
      for (const c of ev.choices as Array<{
        index: number;
        text?: string;
        delta?: { content?: string };
        finish_reason: string | null;
      }>) {
        out[c.index]![0] += c.delta?.content ?? c.text ?? '';
        if (c.finish_reason !== null) out[c.index]![1] = c.finish_reason;
      }
    }
    return out;
  }

  test('many seeds, prompts, endpoints, stop strings and n', { timeout: 120_000 }, async () => {
    let compared = 0;
    for (const [p, prompt] of PROMPTS.entries()) {
      for (let seed = 0; seed < 6; seed++) {
        const chat = seed % 2 === 0;
        const path = chat ? '/v1/chat/completions' : '/v1/completions';
        const n = seed % 3 === 0 ? 2 : 1;
        const body: Record<string, unknown> = {
          ...(chat ? { messages: [{ role: 'user', content: prompt }] } : { prompt }),
          seed: seed * 7919 + p,
          max_tokens: 40,
          n,
          ...(seed >= 3 ? { stop: ['e ', 'the'] } : {}),
        };
        const full = await post(path, body);
        assert.equal(full.status, 200, full.text);
        const again = await post(path, body);
        const streamed = await post(path, { ...body, stream: true });
        assert.equal(streamed.status, 200, streamed.text);
        const a = fullChoices(full.text);
        assert.equal(a.length, n);
        assert.deepEqual(fullChoices(again.text), a, 'the same seed gives the same n texts');
        assert.deepEqual(streamedChoices(streamed.text, n), a, `${path} prompt ${p} seed ${seed}`);
        for (const [text] of a) {
          assert.ok(!text.includes('\uFFFD'));
          if (seed >= 3)
            assert.ok(!text.includes('e ') && !text.includes('the'), `stop text leaked: ${JSON.stringify(text)}`);
        }
        if (n === 2) assert.notEqual(a[0]![0], a[1]![0], 'seeds s and s + 1 give different choices');
        compared += n;
      }
    }
    assert.ok(compared >= 20);
  });

  test(
    'min_tokens: stop strings do not apply before min_tokens tokens (TokenSpeed ranks), streamed or not',
    { timeout: 120_000 },
    async () => {
      const checked = await checkMinTokensStops(gateway.url, 'sim', { prompts: PROMPTS.slice(0, 2), seeds: [3, 11] });
      assert.equal(checked, 2 * 2 * 2 * 2 * 2);
    },
  );
});
