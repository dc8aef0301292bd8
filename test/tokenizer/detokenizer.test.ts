import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { IncrementalDetokenizer, KEEP_TOKENS, MAX_WINDOW_TOKENS } from '../../src/tokenizer/detokenizer.js';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import {
  byteTokenId,
  byteTokens,
  makeTempDir,
  qwen3,
  randomChunks,
  removeTempDirs,
  SP_PIECES,
  sentencePieceFiles,
} from './fixtures.js';
import { prng } from '../helpers/prng.js';

after(removeTempDirs);

const FFFD = '\uFFFD';

/** Streams `chunks` through a fresh detokenizer; returns every delta (finish() last) and the detokenizer. */
function stream(tok: GatewayTokenizer, chunks: readonly (readonly number[])[], skipSpecialTokens?: boolean) {
  const detok = new IncrementalDetokenizer(tok, skipSpecialTokens === undefined ? {} : { skipSpecialTokens });
  const deltas = chunks.map((chunk) => detok.push(chunk));
  deltas.push(detok.finish());
  assert.equal(detok.text, deltas.join(''), 'text is the concatenation of the deltas');
  return { deltas, detok };
}

/** Asserts streaming one token at a time and in random chunks both equal the one-shot decode. */
function assertStreamsLikeDecode(
  tok: GatewayTokenizer,
  ids: readonly number[],
  seed: number,
  skipSpecialTokens?: boolean,
) {
  const expected = tok.decode(ids, skipSpecialTokens === undefined ? {} : { skipSpecialTokens });
  const single = stream(
    tok,
    ids.map((id) => [id]),
    skipSpecialTokens,
  );
  assert.equal(single.deltas.join(''), expected, 'one token at a time');
  const random = prng(seed);
  for (let round = 0; round < 3; round++) {
    const chunked = stream(tok, randomChunks(ids, random), skipSpecialTokens);
    assert.equal(chunked.deltas.join(''), expected, `random chunks, round ${round}`);
  }
  return single.deltas;
}

const TEXTS = [
  'Hello, world! This is a plain English sentence with punctuation; and numbers 12345.',
  '你好，世界！这是一个中文句子，包含标点符号。日本語の文章もあります。한국어도 있어요.',
  '🤖🎉 Robots party 🎉🤖 with families 👩‍👩‍👧‍👦 and flags 🏳️‍🌈🇯🇵 and skin tones 👍🏽👋🏿.',
  'Rare code points: 🫠🫡🪿 𠀀𠀁𠀂 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ꙮ 𓀀𓁐 — spanning several byte-level tokens each.',
  'Combining marks: a\u0300\u0301\u0302 o\u0308\u0304 Z\u0351\u0352\u0353\u0354 and Devanagari क्षत्रिय, Thai ภาษาไทย.',
  'Mixed: def f(x):\n    return x ** 2  # 平方 ✓\n\n\tTabs, naïve café, Ελληνικά, русский, עברית, العربية.',
  '𠀀'.repeat(40) + '🫠'.repeat(40),
];

describe('IncrementalDetokenizer on Qwen3 (byte-level BPE)', () => {
  test('streaming equals one-shot decode, and no delta contains U+FFFD', async () => {
    const tok = await qwen3();
    let partialTokens = 0;
    TEXTS.forEach((text, i) => {
      const ids = tok.encode(text);
      // The sample really exercises characters split across tokens.
      partialTokens += ids.filter((id) => tok.decode([id]).includes(FFFD)).length;
      const deltas = assertStreamsLikeDecode(tok, ids, 1000 + i);
      assert.equal(deltas.join(''), tok.decode(ids));
      for (const delta of deltas) assert.ok(!delta.includes(FFFD), `delta ${JSON.stringify(delta)} of sample ${i}`);
    });
    assert.ok(partialTokens > 50, `only ${partialTokens} partial-character tokens`);
  });

  test('a character split over single-byte tokens is emitted whole, never as U+FFFD', async () => {
    const tok = await qwen3();
    const bytes = new TextEncoder().encode('a🤖中é');
    const ids = byteTokens(tok, bytes);
    const detok = new IncrementalDetokenizer(tok);
    const deltas = ids.map((id) => detok.push([id]));
    assert.deepEqual(deltas, ['a', '', '', '', '🤖', '', '', '中', '', 'é']);
    assert.equal(detok.finish(), '');
  });

  test('a long run of characters split over single-byte tokens crosses many window cuts exactly', async () => {
    const tok = await qwen3();
    const text = '中🤖é'.repeat(60) + 'x';
    const ids = byteTokens(tok, new TextEncoder().encode(text));
    assert.ok(ids.length > 20 * MAX_WINDOW_TOKENS);
    const deltas = assertStreamsLikeDecode(tok, ids, 7);
    assert.equal(deltas.join(''), text);
    for (const delta of deltas) assert.ok(!delta.includes(FFFD));
  });

  test('random token ids (arbitrary bytes, specials, added tokens) stream exactly like decode', async () => {
    const tok = await qwen3();
    const random = prng(42);
    const special = [151643, 151644, 151645, 151667, 151668, 151657];
    for (let trial = 0; trial < 40; trial++) {
      const length = 1 + Math.floor(random() * 60);
      const ids: number[] = [];
      for (let i = 0; i < length; i++) {
        const r = random();
        if (r < 0.1) ids.push(special[Math.floor(random() * special.length)]);
        else if (r < 0.55) ids.push(byteTokenId(tok, 0x80 + Math.floor(random() * 0x80)));
        else ids.push(Math.floor(random() * 151643));
      }
      assertStreamsLikeDecode(tok, ids, trial, true);
      assertStreamsLikeDecode(tok, ids, trial + 500, false);
    }
  });

  test('random valid byte sequences over single-byte tokens stream exactly and never show U+FFFD', async () => {
    const tok = await qwen3();
    const random = prng(9);
    const alphabet = ['a', ' ', 'é', '中', '🤖', '𠀀', '\u0301', 'ß', '\n'];
    for (let trial = 0; trial < 20; trial++) {
      let text = '';
      const length = 1 + Math.floor(random() * 50);
      for (let i = 0; i < length; i++) text += alphabet[Math.floor(random() * alphabet.length)];
      const ids = byteTokens(tok, new TextEncoder().encode(text));
      const deltas = assertStreamsLikeDecode(tok, ids, 77 + trial);
      assert.equal(deltas.join(''), text);
      for (const delta of deltas) assert.ok(!delta.includes(FFFD));
    }
  });

  test('a lone continuation byte is flushed as soon as a later character exists, or by finish()', async () => {
    const tok = await qwen3();
    const lone = byteTokenId(tok, 0x80);
    const [hello] = tok.encode('Hello');
    const detok = new IncrementalDetokenizer(tok);
    assert.equal(detok.push([lone]), '', 'could still be the end of an incomplete character');
    assert.equal(detok.push([hello]), `${FFFD}Hello`);
    assert.equal(detok.push([lone]), '');
    assert.equal(detok.finish(), FFFD);
    assert.equal(detok.text, tok.decode([lone, hello, lone]));
    assert.equal(detok.finish(), '', 'finish is idempotent');
    assert.throws(() => detok.push([hello]), /after finish/);
  });

  test('an incomplete character cut off by the end of the stream flushes as one U+FFFD, like decode', async () => {
    const tok = await qwen3();
    const ids = byteTokens(tok, [0x61, 0xf0, 0x9f, 0xa4]); // 'a' + the first 3 bytes of 🤖
    const { deltas } = stream(
      tok,
      ids.map((id) => [id]),
    );
    assert.deepEqual(deltas, ['a', '', '', '', FFFD]);
    assert.equal(deltas.join(''), tok.decode(ids));
  });

  test('an unbounded run of invalid bytes keeps flushing with a bounded window (SGLang PR #34852)', async () => {
    const tok = await qwen3();
    const lone = byteTokenId(tok, 0xbf);
    const n = 2000;
    const detok = new IncrementalDetokenizer(tok);
    for (let i = 1; i <= n; i++) {
      detok.push([lone]);
      assert.equal(detok.text.length, i - 1, 'everything but the last U+FFFD is out');
    }
    assert.equal(detok.finish(), FFFD);
    assert.equal(detok.text, FFFD.repeat(n));
    assert.equal(detok.text, tok.decode(new Array(n).fill(lone)));
    assert.ok(detok.decodedTokens <= n * (MAX_WINDOW_TOKENS + 1), `work ${detok.decodedTokens}`);
  });

  test('special tokens are skipped by default and kept with skipSpecialTokens false', async () => {
    const tok = await qwen3();
    const ids = [...tok.encode('<think>\nhmm\n</think>\n\nHi 🤖'), 151645, 151643];
    assert.equal(
      stream(
        tok,
        ids.map((id) => [id]),
      ).deltas.join(''),
      '<think>\nhmm\n</think>\n\nHi 🤖',
    );
    assert.equal(stream(tok, [ids], false).deltas.join(''), '<think>\nhmm\n</think>\n\nHi 🤖<|im_end|><|endoftext|>');
    assertStreamsLikeDecode(tok, ids, 5, false);
  });

  test('a skipped special token between the bytes of one character does not break it', async () => {
    const tok = await qwen3();
    const ids = byteTokens(tok, new TextEncoder().encode('🤖'));
    const withSpecial = [ids[0], ids[1], 151645, ids[2], ids[3]];
    const skipped = stream(
      tok,
      withSpecial.map((id) => [id]),
    );
    assert.equal(skipped.deltas.join(''), '🤖');
    const kept = stream(
      tok,
      withSpecial.map((id) => [id]),
      false,
    );
    assert.equal(kept.deltas.join(''), tok.decode(withSpecial, { skipSpecialTokens: false }));
    assert.equal(kept.deltas.join(''), `${FFFD}<|im_end|>${FFFD}${FFFD}`);
  });

  test('an invalid id throws a RangeError and consumes nothing of that push', async () => {
    const tok = await qwen3();
    const detok = new IncrementalDetokenizer(tok);
    assert.equal(detok.push(tok.encode('Hello')), 'Hello');
    assert.throws(() => detok.push([1879, 10_000_000]), { name: 'InvalidTokenIdError', message: /index 1/ });
    assert.equal(detok.push([1879]), ' world');
    assert.equal(detok.finish(), '');
    assert.equal(detok.tokenCount, 2);
  });

  test('empty pushes are harmless', async () => {
    const tok = await qwen3();
    const detok = new IncrementalDetokenizer(tok);
    assert.equal(detok.push([]), '');
    assert.equal(detok.finish(), '');
    assert.equal(detok.text, '');
    assert.equal(detok.decodedTokens, 0);
  });

  test('work per token is bounded: 5000 tokens one at a time cost O(n) decoded tokens, not O(n^2)', async () => {
    const tok = await qwen3();
    const base = tok.encode(TEXTS.join(' '));
    const ids: number[] = [];
    while (ids.length < 5000) ids.push(...base);
    ids.length = 5000;

    const measure = (n: number) => {
      const detok = new IncrementalDetokenizer(tok);
      for (let i = 0; i < n; i++) detok.push([ids[i]]);
      detok.finish();
      assert.equal(detok.text, tok.decode(ids.slice(0, n)));
      return detok.decodedTokens;
    };
    const small = measure(1000);
    const large = measure(5000);
    const perTokenLimit = MAX_WINDOW_TOKENS + KEEP_TOKENS; // one window decode plus the amortised cut-back decode
    assert.ok(large <= 5000 * perTokenLimit, `5000 tokens decoded ${large} token ids`);
    // Linear: 5x the tokens costs ~5x the work (a quadratic window would cost ~25x).
    assert.ok(large / small < 5.5, `work ratio ${large / small}`);
    assert.ok(large < (5000 * 5000) / 100, 'far below the quadratic cost of re-decoding everything');
  });
});

describe('IncrementalDetokenizer on a SentencePiece byte-fallback tokenizer', () => {
  test('streaming equals decode for random piece/byte/special sequences (leading-space strip, byte runs)', async () => {
    const tok = await GatewayTokenizer.load(await makeTempDir(sentencePieceFiles()));
    const pieces = SP_PIECES.map((p) => tok.tokenToId(p)!);
    const random = prng(2024);
    const zhong = [0xe4, 0xb8, 0xad].map((b) => 3 + b);
    for (let trial = 0; trial < 40; trial++) {
      const ids: number[] = [];
      const length = 1 + Math.floor(random() * 50);
      for (let i = 0; i < length; i++) {
        const r = random();
        if (r < 0.1) ids.push(Math.floor(random() * 3));
        else if (r < 0.3) ids.push(...zhong);
        else if (r < 0.5) ids.push(3 + Math.floor(random() * 256));
        else ids.push(pieces[Math.floor(random() * pieces.length)]);
      }
      assertStreamsLikeDecode(tok, ids, trial, true);
      assertStreamsLikeDecode(tok, ids, trial + 100, false);
    }
  });

  test('the first piece loses its leading space exactly as in one-shot decode', async () => {
    const tok = await GatewayTokenizer.load(await makeTempDir(sentencePieceFiles()));
    const hello = tok.tokenToId('▁Hello')!;
    const world = tok.tokenToId('▁world')!;
    const ids = [1, hello, world, ...Array.from({ length: 30 }, (_, i) => (i % 2 ? world : hello))];
    const { deltas } = stream(
      tok,
      ids.map((id) => [id]),
    );
    assert.deepEqual(deltas.slice(0, 4), ['', 'Hello', ' world', ' Hello']);
    assert.equal(deltas.join(''), tok.decode(ids));
  });
});
