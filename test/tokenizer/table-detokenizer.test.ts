/**
 * The table-driven detokenizer (src/tokenizer/table-detokenizer.ts, token-text-table.ts, utf8-stream.ts) emits
 * exactly what the window detokenizer (IncrementalDetokenizer) emits, delta for delta, over random Qwen3 id sequences
 * and chunkings (seeded), and over hand-picked text: emoji, CJK, RTL, invalid UTF-8, BOM, special tokens skipped or
 * kept; the streaming UTF-8 decoder matches TextDecoder; tokenizers the table cannot express fall back.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { IncrementalDetokenizer, createDetokenizer } from '../../src/tokenizer/detokenizer.js';
import { TableDetokenizer } from '../../src/tokenizer/table-detokenizer.js';
import { StringList } from '../../src/tokenizer/string-list.js';
import { buildTokenTextTable, freshText } from '../../src/tokenizer/token-text-table.js';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import { Utf8StreamDecoder } from '../../src/tokenizer/utf8-stream.js';
import { prng } from '../helpers/prng.js';
import {
  byteTokenId,
  byteTokens,
  makeTempDir,
  qwen3,
  randomChunks,
  removeTempDirs,
  sentencePieceFiles,
} from './fixtures.js';

after(removeTempDirs);

const FFFD = '\uFFFD';

/** Runs `chunks` through a detokenizer: every push's delta, then finish()'s. */
function deltasOf(
  detok: { push(ids: readonly number[]): string; finish(): string },
  chunks: readonly (readonly number[])[],
): string[] {
  const out = chunks.map((c) => detok.push(c));
  out.push(detok.finish());
  return out;
}

/**
 * Asserts the table detokenizer's deltas equal the window detokenizer's for one token at a time and for `rounds`
 * random chunkings, with special tokens skipped and kept; and that the text equals one-shot decode.
 */
function assertSameDeltas(tok: GatewayTokenizer, ids: readonly number[], seed: number, what: string, rounds = 3): void {
  const random = prng(seed);
  for (const skipSpecialTokens of [true, false]) {
    const chunkings = [ids.map((id) => [id]), [ids.slice()]];
    for (let r = 0; r < rounds; r++) chunkings.push(randomChunks(ids, random));
    for (const [c, chunks] of chunkings.entries()) {
      const table = createDetokenizer(tok, { skipSpecialTokens });
      assert.ok(table instanceof TableDetokenizer);
      const expected = deltasOf(new IncrementalDetokenizer(tok, { skipSpecialTokens }), chunks);
      const actual = deltasOf(table, chunks);
      const where = `${what}, skipSpecialTokens ${skipSpecialTokens}, chunking ${c}, ids ${JSON.stringify(ids)}`;
      assert.deepEqual(actual, expected, where);
      assert.equal(table.text, tok.decodeWithLibrary(ids, { skipSpecialTokens }), where);
      assert.equal(tok.decode(ids, { skipSpecialTokens }), table.text, `decode: ${where}`);
      assert.equal(table.tokenCount, ids.length);
    }
  }
}

const SAMPLES = [
  'Hello, world! Plain English with numbers 12345 and punctuation; “quotes” — dashes.',
  '你好，世界！这是一个中文句子。日本語の文章もあります。한국어도 있어요.',
  '🤖🎉 Robots 🎉🤖 families 👩‍👩‍👧‍👦 flags 🏳️‍🌈🇯🇵 skin tones 👍🏽👋🏿 🫠🫡🪿',
  'RTL: עברית עם ניקוד שָׁלוֹם, العربية مع تشكيل مَرْحَبًا, and mixed ‏עברית English العربية‎ marks.',
  'Rare: 𠀀𠀁𠀂 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ꙮ 𓀀𓁐, combining a\u0300\u0301 Z\u0351\u0352, Devanagari क्षत्रिय, Thai ภาษาไทย.',
  '\uFEFFa text starting with a BOM, and a literal \uFFFD replacement character at the end \uFFFD',
  'def f(x):\n    return x ** 2  # 平方 ✓\n\n\t<think>not a token here</think>',
];

describe('TableDetokenizer on Qwen3 equals IncrementalDetokenizer delta for delta', () => {
  test('Qwen3 has a table; its id flags agree with the tokenizer', async () => {
    const tok = await qwen3();
    const table = tok.tokenTextTable;
    assert.ok(table !== null, String(tok.tokenTextTableReason));
    assert.equal(tok.tokenTextTableReason, null);
    assert.equal(table.vocabSize, tok.vocabSize);
    const world = tok.tokenToId('Ġworld')!;
    assert.equal(table.fresh[world], undefined, 'a token text is computed on first use, not at load');
    assert.equal(freshText(table, world), ' world');
    assert.equal(table.fresh[world], ' world', 'and kept');
    assert.equal(table.fresh[151645], '<|im_end|>', 'an added token has its content from the start');
    assert.equal(freshText(table, byteTokenId(tok, 0xe4)), null, 'a lead byte alone ends inside a character');
    assert.equal(table.fresh[byteTokenId(tok, 0xe4)], null, 'and null is kept');
    for (const id of [151643, 151645, 151657, 151667, 151668]) {
      assert.equal((table.flags[id]! & 4) !== 0, tok.isSpecialToken(id), `special flag of ${id}`);
      assert.equal(table.flags[id]! & 2, 2, `added flag of ${id}`);
    }
  });

  test('hand-picked texts: emoji, CJK, RTL, rare code points, BOM, a literal U+FFFD', async () => {
    const tok = await qwen3();
    SAMPLES.forEach((text, i) => {
      assertSameDeltas(tok, tok.encode(text), 100 + i, `sample ${i}`);
      assertSameDeltas(tok, byteTokens(tok, new TextEncoder().encode(text)), 200 + i, `sample ${i} as single bytes`);
    });
  });

  test('invalid UTF-8: lone continuations, truncated, overlong, surrogates, above U+10FFFF, C0/C1/F5..FF', async () => {
    const tok = await qwen3();
    const cases: number[][] = [
      [0x80],
      [0x61, 0x80, 0x62],
      [0xe4, 0xb8],
      [0xe4, 0xb8, 0x61],
      [0xf0, 0x9f, 0xa4],
      [0xf0, 0x9f, 0xa4, 0xf0, 0x9f, 0xa4, 0x96],
      [0xe0, 0x80, 0x80],
      [0xed, 0xa0, 0x80],
      [0xf4, 0x90, 0x80, 0x80],
      [0xc0, 0xaf, 0xc1, 0xbf],
      [0xf5, 0xff, 0xfe, 0x61],
      [0xef, 0xbb, 0xbf, 0x61],
      [0xef, 0xbf, 0xbd],
      [0xef, 0xbf, 0xbd, 0xe4],
      [0x80, 0xe4],
      [
        0xbf, 0xbf, 0xbf, 0xbf, 0xbf, 0xbf, 0xbf, 0xbf, 0xbf, 0xbf, 0xbf, 0xbf, 0xbf, 0xbf, 0xbf, 0xbf, 0xbf, 0xbf,
        0xbf, 0x61,
      ],
    ];
    cases.forEach((bytes, i) =>
      assertSameDeltas(tok, byteTokens(tok, bytes), 300 + i, `bytes ${bytes.map((b) => b.toString(16)).join(' ')}`),
    );
  });

  test('special and added tokens inside characters and between texts, skipped and kept', async () => {
    const tok = await qwen3();
    const robot = byteTokens(tok, new TextEncoder().encode('🤖'));
    const zhong = byteTokens(tok, new TextEncoder().encode('中'));
    const sequences = [
      [robot[0]!, robot[1]!, 151645, robot[2]!, robot[3]!],
      [zhong[0]!, 151667, zhong[1]!, zhong[2]!],
      [...tok.encode('<think>\nhmm\n</think>\n\nHi 🤖'), 151645, 151643],
      [151644, 151644, robot[0]!, 151643],
      [robot[0]!, 0xbf, 151645],
    ];
    sequences.forEach((ids, i) => assertSameDeltas(tok, ids, 400 + i, `sequence ${i}`));
  });

  test(
    'property: seeded random id sequences over the whole vocabulary, every chunking',
    { timeout: 120_000 },
    async () => {
      const tok = await qwen3();
      const random = prng(20260611);
      const addedIds = Array.from({ length: tok.vocabSize - 151643 }, (_, i) => 151643 + i);
      const texts = SAMPLES.map((t) => tok.encode(t));
      for (let trial = 0; trial < 300; trial++) {
        const ids: number[] = [];
        const length = 1 + Math.floor(random() * 70);
        while (ids.length < length) {
          const r = random();
          if (r < 0.08) ids.push(addedIds[Math.floor(random() * addedIds.length)]!);
          else if (r < 0.45) ids.push(byteTokenId(tok, 0x80 + Math.floor(random() * 0x80)));
          else if (r < 0.55) {
            const text = texts[Math.floor(random() * texts.length)]!;
            const at = Math.floor(random() * text.length);
            ids.push(...text.slice(at, at + 1 + Math.floor(random() * 8)));
          } else ids.push(Math.floor(random() * tok.vocabSize));
        }
        assertSameDeltas(tok, ids, trial, `trial ${trial}`, 2);
      }
    },
  );

  test("an invalid id throws the tokenizer's RangeError and consumes nothing of that push", async () => {
    const tok = await qwen3();
    const detok = createDetokenizer(tok);
    assert.equal(detok.push(tok.encode('Hello')), 'Hello');
    assert.throws(() => detok.push([1879, 10_000_000]), {
      name: 'InvalidTokenIdError',
      message: /token id 10000000 at index 1/,
    });
    assert.throws(() => detok.push([1879, 1.5]), { name: 'InvalidTokenIdError', message: /index 1/ });
    assert.throws(() => detok.push([-1]), RangeError);
    assert.throws(() => detok.push(['5' as unknown as number]), RangeError);
    assert.throws(() => detok.push('x' as unknown as number[]), TypeError);
    assert.equal(detok.push([1879]), ' world');
    assert.equal(detok.finish(), '');
    assert.equal(detok.finish(), '', 'finish is idempotent');
    assert.equal(detok.tokenCount, 2);
    assert.throws(() => detok.push([1879]), /after finish/);
  });
});

describe('GatewayTokenizer.decode with a table', () => {
  test('decodes from the table, never through the library (whose decode builds the whole vocabulary)', async () => {
    const tok = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
    const inner = (tok as unknown as { inner: { decode: (...a: unknown[]) => string } }).inner;
    const ids = [...tok.encode('Hello 你好 🤖'), 151645];
    const want = tok.decodeWithLibrary(ids, { skipSpecialTokens: false });
    inner.decode = () => assert.fail('the library decode was called');
    assert.equal(tok.decode(ids, { skipSpecialTokens: false }), want);
    assert.equal(tok.decode(ids), want.replace('<|im_end|>', ''));
    assert.throws(() => tok.decodeWithLibrary(ids), /the library decode was called/);
    assert.throws(() => tok.decode([1, -1]), { name: 'InvalidTokenIdError', message: /index 1/ });
  });
});

describe('tokenizers the table cannot express', () => {
  test('a SentencePiece byte-fallback decoder chain falls back to the window detokenizer', async () => {
    const tok = await GatewayTokenizer.load(await makeTempDir(sentencePieceFiles()));
    assert.equal(tok.tokenTextTable, null);
    assert.match(tok.tokenTextTableReason ?? '', /decoder Sequence is not ByteLevel/);
    assert.ok(createDetokenizer(tok) instanceof IncrementalDetokenizer);
  });

  test('buildTokenTextTable names why: no decoder, end_of_word_suffix, a lone surrogate', () => {
    const source = (json: Record<string, unknown>, strings: string[] = ['a']) => ({
      tokenizerJson: json,
      vocabSize: strings.length,
      tokenString: (id: number) => strings[id],
      isSpecial: () => false,
    });
    assert.match(buildTokenTextTable(source({})).reason ?? '', /decoder none is not ByteLevel/);
    assert.match(buildTokenTextTable(source({ decoder: { type: 'Metaspace' } })).reason ?? '', /Metaspace/);
    assert.match(
      buildTokenTextTable(source({ decoder: { type: 'ByteLevel' }, model: { end_of_word_suffix: '</w>' } })).reason ??
        '',
      /end_of_word_suffix/,
    );
    assert.match(
      buildTokenTextTable(source({ decoder: { type: 'ByteLevel' } }, ['a', '\ud83d'])).reason ?? '',
      /token 1 has a lone UTF-16 surrogate/,
    );
    const ok = buildTokenTextTable(
      source({ decoder: { type: 'ByteLevel' }, model: { end_of_word_suffix: '' } }, ['a', '\ud83d\ude00']),
    );
    assert.equal(ok.reason, null);
  });

  test('built from a vocabulary list (the load cache): the same table or refusal as token by token', async () => {
    const byteLevel = { decoder: { type: 'ByteLevel' } };
    const cases: Array<[string, Record<string, unknown>, string[], Set<number>]> = [
      ['plain', byteLevel, ['a', 'Ġthe', '', 'ĊĊ', '中', '\ud83d\ude00x'], new Set([2])],
      [
        // An added token's content repeated at another id: both ids are added tokens, as content equality says.
        'added, twice',
        {
          ...byteLevel,
          added_tokens: [
            { id: 3, content: '<|end|>' },
            { id: 4, content: '<x>' },
            { id: 6, content: '\ud83d\ude00' },
          ],
        },
        ['a', '<|end|>', 'b', '<|end|>', '<x>', '<|end|>b', '\ud83d\ude00', 'c'],
        new Set([3]),
      ],
      ['a lone high surrogate', byteLevel, ['a', 'b\ud83d'], new Set()],
      ['a lone low surrogate', byteLevel, ['\ude00a'], new Set()],
      [
        'a lone surrogate in an added token',
        { ...byteLevel, added_tokens: [{ content: '\ud83d' }] },
        ['\ud83d'],
        new Set(),
      ],
    ];
    for (const [what, json, strings, special] of cases) {
      const source = {
        tokenizerJson: json,
        vocabSize: strings.length,
        tokenString: (id: number) => strings[id],
        isSpecial: (id: number) => special.has(id),
      };
      const byToken = buildTokenTextTable(source);
      const byList = buildTokenTextTable({ ...source, vocabList: StringList.fromStrings(strings) });
      assert.deepEqual(byList, byToken, what);
    }
    // Qwen3: the load cache's list against the library's id → token strings.
    const tok = await qwen3();
    const inner = (tok as unknown as { inner: { id_to_token(id: number): string | undefined } }).inner;
    const strings = Array.from({ length: tok.vocabSize }, (_, id) => inner.id_to_token(id));
    assert.ok(strings.every((s) => typeof s === 'string'));
    const source = {
      tokenizerJson: JSON.parse(
        await readFile(join(GatewayTokenizer.defaultDir(), 'tokenizer.json'), 'utf8'),
      ) as Record<string, unknown>,
      vocabSize: tok.vocabSize,
      tokenString: (id: number) => strings[id],
      isSpecial: (id: number) => tok.isSpecialToken(id),
    };
    const byToken = buildTokenTextTable(source);
    assert.equal(byToken.reason, null);
    assert.deepEqual(
      buildTokenTextTable({ ...source, vocabList: StringList.fromStrings(strings as string[]) }),
      byToken,
    );
  });

  test('a vocabulary character outside the byte alphabet decodes as byte 0, like the library', async () => {
    const vocab: Record<string, number> = { a: 0, 中: 1, aĠ: 2 };
    const dir = await makeTempDir({
      'tokenizer.json': {
        added_tokens: [
          {
            id: 3,
            content: '<|end|>',
            single_word: false,
            lstrip: false,
            rstrip: false,
            normalized: false,
            special: true,
          },
        ],
        normalizer: null,
        pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
        post_processor: null,
        decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
        model: { type: 'BPE', vocab, merges: [] },
      },
      'tokenizer_config.json': { eos_token: '<|end|>' },
    });
    const tok = await GatewayTokenizer.load(dir);
    assert.ok(tok.tokenTextTable !== null);
    for (const ids of [[1], [0, 1, 2], [2, 3, 1, 0]]) assertSameDeltas(tok, ids, 7, `ids ${ids}`);
    assert.equal(tok.decode([0, 1, 2]), 'a\u0000a ');
  });
});

describe('Utf8StreamDecoder', () => {
  test('equals TextDecoder (fatal false, BOM kept) over random bytes split at random points', () => {
    const random = prng(77);
    const reference = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });
    const interesting = [
      0x00, 0x61, 0x7f, 0x80, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xa0, 0xed, 0x9f, 0xef, 0xbb, 0xbf, 0xf0, 0x90, 0xf4,
      0x8f, 0xf5, 0xff,
    ];
    for (let trial = 0; trial < 2000; trial++) {
      const bytes = Uint8Array.from({ length: Math.floor(random() * 24) }, () =>
        random() < 0.6 ? interesting[Math.floor(random() * interesting.length)]! : Math.floor(random() * 256),
      );
      const decoder = new Utf8StreamDecoder();
      let text = '';
      let at = 0;
      while (at < bytes.length) {
        const end = Math.min(bytes.length, at + Math.floor(random() * 5));
        text += decoder.write(bytes, at, end);
        at = end;
      }
      text += decoder.flush();
      assert.equal(text, reference.decode(bytes), `bytes ${Buffer.from(bytes).toString('hex')}`);
      assert.equal(decoder.pending, false);
    }
  });

  test('pending is true exactly while a sequence is incomplete', () => {
    const decoder = new Utf8StreamDecoder();
    const bytes = new TextEncoder().encode('🤖');
    assert.equal(decoder.write(bytes, 0, 3), '');
    assert.equal(decoder.pending, true);
    assert.equal(decoder.write(bytes, 3, 4), '🤖');
    assert.equal(decoder.pending, false);
    assert.equal(decoder.write(Uint8Array.of(0xe4), 0, 1), '');
    assert.equal(decoder.flush(), FFFD);
    assert.equal(decoder.pending, false);
  });
});
