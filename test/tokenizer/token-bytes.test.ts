/**
 * The longest-token bound (src/tokenizer/token-bytes.ts): L for Qwen3, the lower bound never above the real token
 * count, and every tokenizer shape for which no bound can be claimed.
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import { analyzeTokenByteBound, normalizedByteLength } from '../../src/tokenizer/token-bytes.js';
import type { JsonObject } from '../../src/tokenizer/model-files.js';
import { prng } from '../helpers/prng.js';
import { makeTempDir, qwen3, removeTempDirs, sentencePieceFiles } from './fixtures.js';

after(removeTempDirs);

describe('GatewayTokenizer.maxTokenBytes / minTokenCount (Qwen3)', () => {
  test('L is 128 bytes (the token of 128 spaces) and the bound is tight on runs of spaces', async () => {
    const tok = await qwen3();
    assert.equal(tok.maxTokenBytes, 128);
    assert.equal(tok.minTokenCount(''), 0);
    assert.equal(tok.minTokenCount('a'), 1);
    for (const n of [128, 7808, 7809]) {
      const spaces = ' '.repeat(n);
      assert.equal(tok.minTokenCount(spaces), Math.ceil(n / 128));
      assert.ok(tok.minTokenCount(spaces) <= tok.encode(spaces).length);
    }
    assert.equal(tok.encode(' '.repeat(7808)).length, 61, 'reached: 61 tokens of 128 spaces');
    assert.throws(() => tok.minTokenCount(42 as unknown as string), TypeError);
  });

  test('the bound never exceeds the real token count (seeded texts: ASCII, CJK, emoji, NFD, special tokens)', async () => {
    const tok = await qwen3();
    const random = prng(20240611);
    const pieces = [
      ' ',
      '    ',
      '\n',
      'hello',
      ' world',
      '中文',
      '한국어',
      '😀',
      'e\u0301',
      '\u1100\u1161\u11a8',
      'ﬁ',
      '<|im_start|>',
      '<|im_end|>',
      '<think>',
      'Ġ',
      '\t',
      '1234567',
      'a'.repeat(40),
      ' '.repeat(300),
      '\u0000',
    ];
    for (let i = 0; i < 300; i++) {
      let text = '';
      const parts = 1 + Math.floor(random() * 60);
      for (let j = 0; j < parts; j++) text += pieces[Math.floor(random() * pieces.length)];
      const bound = tok.minTokenCount(text);
      const actual = tok.encode(text, { addSpecialTokens: true }).length;
      assert.ok(bound <= actual, `bound ${bound} > ${actual} tokens for ${JSON.stringify(text.slice(0, 80))}`);
    }
  });

  test('measured after NFC, as the tokenizer normalizes: decomposed text counts its composed bytes', async () => {
    const tok = await qwen3();
    const decomposed = '\u1100\u1161\u11a8'.repeat(1000); // 9 bytes each, 3 once composed to '각'
    assert.equal(normalizedByteLength(decomposed, ['NFC']), 3000);
    assert.equal(tok.minTokenCount(decomposed), Math.ceil(3000 / 128));
    assert.ok(tok.minTokenCount(decomposed) <= tok.encode(decomposed).length);
  });
});

/** A minimal byte-level BPE tokenizer.json: the 256 byte characters plus `extra` tokens. */
function byteLevelJson(extra: string[] = [], patch: JsonObject = {}): JsonObject {
  const vocab: Record<string, number> = {};
  let next = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    vocab[String.fromCodePoint(printable ? b : next++)] = b;
  }
  extra.forEach((t, i) => (vocab[t] = 256 + i));
  return {
    added_tokens: [{ id: 1000, content: '<|end|>', lstrip: false, rstrip: false, normalized: false, special: true }],
    normalizer: { type: 'NFC' },
    pre_tokenizer: {
      type: 'Sequence',
      pretokenizers: [{ type: 'Split', pattern: { Regex: '\\s+' }, behavior: 'Isolated' }, { type: 'ByteLevel' }],
    },
    model: { type: 'BPE', vocab, merges: [] },
    ...patch,
  };
}

describe('analyzeTokenByteBound', () => {
  test('byte-level BPE: L counts characters (one byte each), added tokens by their UTF-8 content', () => {
    assert.deepEqual(analyzeTokenByteBound(byteLevelJson(['ĠĠĠ', 'Ã©Ã©'])), {
      maxTokenBytes: 7,
      forms: ['NFC'],
      reason: null,
    });
    assert.equal(analyzeTokenByteBound(byteLevelJson(['abcdefghij'])).maxTokenBytes, 10);
    const forms = analyzeTokenByteBound(
      byteLevelJson([], { normalizer: { type: 'Sequence', normalizers: [{ type: 'NFKC' }, { type: 'NFD' }] } }),
    );
    assert.deepEqual(forms.forms, ['NFKC', 'NFD']);
    assert.equal(analyzeTokenByteBound(byteLevelJson([], { normalizer: null })).reason, null);
  });

  test('byte-fallback BPE (no ByteLevel): L is the longest UTF-8 entry, a safe over-estimate', () => {
    const vocab: Record<string, number> = {};
    for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`] = b;
    vocab['▁the'] = 256; // 6 UTF-8 bytes for 4 bytes of text
    const bound = analyzeTokenByteBound({
      normalizer: null,
      pre_tokenizer: { type: 'Metaspace' },
      model: { type: 'BPE', vocab, merges: [], byte_fallback: true },
    });
    assert.equal(bound.maxTokenBytes, 6);
  });

  test('no bound where a token could cover more than its bytes or text could vanish', () => {
    const cases: Array<[string, JsonObject, RegExp]> = [
      ['WordPiece', { model: { type: 'WordPiece', vocab: { a: 0 } } }, /not BPE/],
      ['Lowercase', byteLevelJson([], { normalizer: { type: 'Lowercase' } }), /Lowercase can shrink/],
      [
        'NFC then Strip',
        byteLevelJson([], { normalizer: { type: 'Sequence', normalizers: [{ type: 'NFC' }, { type: 'Strip' }] } }),
        /Strip/,
      ],
      [
        'Whitespace pre-tokenizer',
        byteLevelJson([], {
          pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'WhitespaceSplit' }, { type: 'ByteLevel' }] },
        }),
        /may drop text/,
      ],
      [
        'Split Removed',
        byteLevelJson([], {
          pre_tokenizer: {
            type: 'Sequence',
            pretokenizers: [{ type: 'Split', behavior: 'Removed' }, { type: 'ByteLevel' }],
          },
        }),
        /Removed/,
      ],
      ['truncation', byteLevelJson([], { truncation: { max_length: 8 } }), /truncation/],
      [
        'lstrip added token',
        byteLevelJson([], { added_tokens: [{ id: 9, content: '<m>', lstrip: true }] }),
        /strips whitespace/,
      ],
      ['no byte coverage', byteLevelJson([], { pre_tokenizer: { type: 'Metaspace' } }), /does not cover every byte/],
    ];
    for (const [name, json, reason] of cases) {
      const b = analyzeTokenByteBound(json);
      assert.equal(b.maxTokenBytes, Infinity, name);
      assert.match(b.reason ?? '', reason, name);
    }
    const missing = byteLevelJson();
    delete ((missing.model as JsonObject).vocab as Record<string, number>)['Ġ'];
    assert.match(analyzeTokenByteBound(missing).reason ?? '', /byte token "Ġ" is missing/);
  });

  test('a tokenizer without a provable bound loads with L = Infinity and a bound of 0', async () => {
    const tok = await GatewayTokenizer.load(await makeTempDir(sentencePieceFiles()));
    assert.equal(tok.maxTokenBytes, Infinity, 'Prepend/Replace normalizers are not trusted');
    assert.equal(tok.minTokenCount('Hello world '.repeat(100)), 0);
  });
});
