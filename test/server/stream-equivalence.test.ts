/**
 * Streaming equals non-streaming byte for byte (gateway.md 5 and 12) over a fake backend that emits emoji and CJK text
 * as single-byte tokens in random chunks, so characters are split mid-sequence across engine outputs: with and
 * without stop strings (emoji/CJK ones too), chat and completions, n = 1 and n = 2; never a U+FFFD.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { byteTokens, randomChunks } from '../tokenizer/fixtures.js';
import { choicesOf, parseSse, useApp } from './helpers.js';
import { prng } from '../helpers/prng.js';

const TEXTS = [
  'Grüße 🎉🤖 你好，世界！こんにちは 👩‍👩‍👧 done',
  '中文测试：停止之前的文字 🫠 — 𠀀𠀁 末尾',
  'ascii only, then 😀😀😀 and 한국어 텍스트.',
];
const STOPS: Array<string[] | undefined> = [undefined, ['世界'], ['🤖', '停止'], ['😀😀'], ['not-there', '末'], ['.']];

/** The text the gateway must return for `text` with `stop` (earliest match, stop excluded). */
function expectedText(text: string, stop: string[] | undefined): string {
  let cut = text.length;
  for (const s of stop ?? []) {
    const at = text.indexOf(s);
    if (at >= 0 && at < cut) cut = at;
  }
  return text.slice(0, cut);
}

/**
 * The text for `text` sent as one byte-level token per UTF-8 byte, with `stop` and `min_tokens` (vLLM's frontend rule,
 * PR #22014): an occurrence counts only when it ends after the text of the first `minTokens` tokens, i.e. the complete
 * characters of the first `minTokens` bytes (a character is emitted by the token that completes it).
 */
function expectedTextMinTokens(text: string, stop: string[], minTokens: number): string {
  const boundary = new TextDecoder().decode(new TextEncoder().encode(text).subarray(0, minTokens), {
    stream: true,
  }).length;
  let cut = text.length;
  for (const s of stop) {
    const at = text.indexOf(s, Math.max(0, boundary - s.length + 1));
    if (at >= 0 && at < cut) cut = at;
  }
  return text.slice(0, cut);
}

describe('streaming == non-streaming with characters split across byte-level tokens', () => {
  const fx = useApp();

  /** Every submit gets the byte tokens of `text` in chunks drawn from `seed` (the same chunks for every sub-request). */
  function scriptBytes(text: string, seed: number): void {
    const ids = byteTokens(fx.tokenizer, new TextEncoder().encode(text));
    fx.backend.onSubmit = (s) => {
      const chunks = randomChunks(ids, prng(seed + Number(s.request.requestId.endsWith('-1'))), 5);
      chunks.forEach((c, i) => s.stream.push(c, i === chunks.length - 1 ? 'length' : null));
    };
  }

  test('chat and completions over many seeds, texts and stop strings', { timeout: 60_000 }, async () => {
    let compared = 0;
    for (const [t, text] of TEXTS.entries()) {
      for (const stop of STOPS) {
        for (let seed = 1; seed <= 4; seed++) {
          for (const url of ['/v1/chat/completions', '/v1/completions']) {
            scriptBytes(text, seed * 100 + t);
            const base = url === '/v1/completions' ? { prompt: 'x' } : { messages: [{ role: 'user', content: 'x' }] };
            const body = { ...base, n: 2, ...(stop ? { stop } : {}) };
            const full = (await fx.app.inject({ method: 'POST', url, payload: body })).json();
            const streamed = parseSse(
              (await fx.app.inject({ method: 'POST', url, payload: { ...body, stream: true } })).body,
            );
            assert.equal(streamed.doneCount, 1);
            for (const index of [0, 1]) {
              const fullText: string = full.choices[index].message?.content ?? full.choices[index].text;
              let streamText = '';
              for (const ev of streamed.events) {
                for (const c of choicesOf(ev)) {
                  if (c.index !== index) continue;
                  streamText +=
                    (c.delta as { content?: string } | undefined)?.content ?? (c.text as string | undefined) ?? '';
                }
              }
              const what = `${url} text ${t} stop ${JSON.stringify(stop)} seed ${seed} index ${index}`;
              assert.equal(Buffer.compare(Buffer.from(streamText), Buffer.from(fullText)), 0, what);
              assert.equal(fullText, expectedText(text, stop), what);
              assert.ok(!streamText.includes('\uFFFD'), what);
              compared++;
            }
          }
        }
      }
    }
    assert.equal(compared, TEXTS.length * STOPS.length * 4 * 2 * 2);
  });

  test(
    'min_tokens: stop strings do not apply to the text of the first min_tokens tokens, streamed or not',
    { timeout: 60_000 },
    async () => {
      const stops = STOPS.filter((s): s is string[] => s !== undefined);
      let compared = 0;
      let changed = 0; // cases where min_tokens changes the result (so the rule is exercised)
      for (const [t, text] of TEXTS.entries()) {
        const bytes = new TextEncoder().encode(text).length;
        for (const stop of stops) {
          // Boundaries around the first occurrence's end, in bytes (= tokens), plus the whole text.
          const first = Math.min(...stop.map((s) => text.indexOf(s)).filter((i) => i >= 0), text.length);
          const end = new TextEncoder().encode(text.slice(0, first)).length + 4;
          for (const minTokens of [1, end - 3, end - 1, end, end + 2, bytes]) {
            if (minTokens < 0 || minTokens > bytes) continue;
            for (const url of ['/v1/chat/completions', '/v1/completions']) {
              scriptBytes(text, minTokens * 31 + t);
              const base = url === '/v1/completions' ? { prompt: 'x' } : { messages: [{ role: 'user', content: 'x' }] };
              const body = { ...base, n: 2, stop, min_tokens: minTokens, max_tokens: bytes + 5 };
              const full = (await fx.app.inject({ method: 'POST', url, payload: body })).json();
              const streamed = parseSse(
                (await fx.app.inject({ method: 'POST', url, payload: { ...body, stream: true } })).body,
              );
              const expected = expectedTextMinTokens(text, stop, minTokens);
              if (expected !== expectedText(text, stop)) changed++;
              for (const index of [0, 1]) {
                const fullText: string = full.choices[index].message?.content ?? full.choices[index].text;
                let streamText = '';
                for (const ev of streamed.events) {
                  for (const c of choicesOf(ev)) {
                    if (c.index === index)
                      streamText +=
                        (c.delta as { content?: string } | undefined)?.content ?? (c.text as string | undefined) ?? '';
                  }
                }
                const what = `${url} text ${t} stop ${JSON.stringify(stop)} min_tokens ${minTokens} index ${index}`;
                assert.equal(fullText, expected, what);
                assert.equal(Buffer.compare(Buffer.from(streamText), Buffer.from(fullText)), 0, what);
                assert.equal(
                  full.choices[index].finish_reason,
                  expected.length < text.length ? 'stop' : 'length',
                  what,
                );
                compared++;
              }
            }
          }
        }
      }
      assert.ok(compared > 100, `${compared} comparisons`);
      assert.ok(changed > 10, `min_tokens changes the outcome in ${changed} cases`);
    },
  );
});
