/**
 * Hostile inputs for the per-token fast path of a streamed choice (issue 9: `StreamShaper.textRecord`,
 * `ChoiceOutput.appendContent`): invalid UTF-8 from the engine (stray continuation bytes, 0xFF, truncated sequences
 * followed by ASCII, overlong forms, encoded surrogates) in random chunks. The fast path (no logprobs) must stream
 * exactly the text of the general path (logprobs requested, so every delta goes through `push` and `delta`), and both
 * exactly the non-streamed text, chat and completions, n = 1 and 2, with and without stop strings.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { prng } from '../helpers/prng.js';
import { byteTokens, randomChunks } from '../tokenizer/fixtures.js';
import { choicesOf, parseSse, useApp } from './helpers.js';

const BYTES: number[][] = [
  [0x41, 0xff, 0x42, 0x80, 0x43],
  [0xe6, 0x97, 0x41, 0x42, 0xf0, 0x9f, 0x98, 0x0a, 0x20],
  [0xc0, 0xaf, 0xed, 0xa0, 0x80, 0x78, 0xf4, 0x90, 0x80, 0x80],
  [0xf0, 0x9f, 0x90, 0x89, 0xf0, 0x9f, 0x90, 0x22, 0x5c, 0xe2, 0x80, 0xa8, 0xe9, 0xbe, 0x8d],
  [0xf0, 0x9f],
];
const STOPS: Array<string[] | undefined> = [undefined, ['\uFFFD'], ['B'], ['x\uFFFD']];

describe('fast path == general path == non-streamed, with invalid UTF-8 from the engine', () => {
  const fx = useApp();

  function script(bytes: number[], seed: number): void {
    const ids = byteTokens(fx.tokenizer, bytes);
    fx.backend.onSubmit = (s) => {
      const chunks = randomChunks(ids, prng(seed + Number(s.request.requestId.endsWith('-1'))), 4);
      chunks.forEach((c, i) =>
        s.stream.push(
          c,
          i === chunks.length - 1 ? 'length' : null,
          c.map(() => -0.5),
        ),
      );
    };
  }

  function streamedTexts(raw: string, n: number): string[] {
    const parsed = parseSse(raw);
    assert.equal(parsed.doneCount, 1);
    const out = Array.from({ length: n }, () => '');
    for (const ev of parsed.events) {
      for (const c of choicesOf(ev)) {
        out[c.index as number] +=
          (c.delta as { content?: string } | undefined)?.content ?? (c.text as string | undefined) ?? '';
      }
    }
    return out;
  }

  test('chat and completions, n 1 and 2, stop strings, random chunks', { timeout: 60_000 }, async () => {
    let compared = 0;
    let replaced = 0; // texts holding U+FFFD: the invalid bytes do reach the detokenizer's replacement
    for (const [b, bytes] of BYTES.entries()) {
      for (const stop of STOPS) {
        for (let seed = 1; seed <= 3; seed++) {
          for (const url of ['/v1/chat/completions', '/v1/completions']) {
            for (const n of [1, 2]) {
              const chat = url === '/v1/chat/completions';
              const base = {
                ...(chat ? { messages: [{ role: 'user', content: 'x' }] } : { prompt: 'x' }),
                n,
                ...(stop ? { stop } : {}),
              };
              const logprobs = chat ? { logprobs: true } : { logprobs: 0 };
              const what = `${url} bytes ${b} stop ${JSON.stringify(stop)} seed ${seed} n ${n}`;
              script(bytes, seed * 10 + b);
              const full = (await fx.app.inject({ method: 'POST', url, payload: base })).json();
              script(bytes, seed * 10 + b);
              const fast = streamedTexts(
                (await fx.app.inject({ method: 'POST', url, payload: { ...base, stream: true } })).body,
                n,
              );
              script(bytes, seed * 10 + b);
              const general = streamedTexts(
                (await fx.app.inject({ method: 'POST', url, payload: { ...base, ...logprobs, stream: true } })).body,
                n,
              );
              for (let i = 0; i < n; i++) {
                const fullText: string = full.choices[i].message?.content ?? full.choices[i].text;
                assert.equal(fast[i], general[i], `fast vs general: ${what} index ${i}`);
                assert.equal(fast[i], fullText, `streamed vs full: ${what} index ${i}`);
                if (fullText.includes('\uFFFD')) replaced++;
                compared++;
              }
            }
          }
        }
      }
    }
    assert.ok(replaced > 50, `${replaced} texts with U+FFFD`);
    assert.equal(compared, BYTES.length * STOPS.length * 3 * 2 * 3);
  });
});
