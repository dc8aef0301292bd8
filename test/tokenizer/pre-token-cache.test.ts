import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { Tokenizer } from '@huggingface/tokenizers';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import { cacheByteLevelWords, flattenSequencePreTokenizer, PRE_TOKEN_CACHE_MAX_WORD_LENGTH } from '../../src/tokenizer/pre-token-cache.js';
import { qwen3 } from './fixtures.js';
import { prng } from '../helpers/prng.js';

type Raw = { encode(text: string, o: { add_special_tokens: boolean }): { ids: number[] }; pre_tokenizer: unknown };

/** A new instance of the library's own tokenizer for the Qwen3 files, without the cache. */
function uncachedQwen3(): Raw {
  const dir = GatewayTokenizer.defaultDir();
  const json = JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8'));
  const config = JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8'));
  return new (Tokenizer as unknown as new (j: object, c: object) => Raw)(json, config);
}

/** Texts covering what the byte-level mapping sees: scripts, emoji, combining marks, whitespace runs, special tokens. */
function corpus(): string[] {
  const random = prng(7);
  const pieces = [
    'Tell me about the weather and the river.', ' the', 'The', "don't", "I'll", '42', '3.14159', 'naïve café', 'e\u0301',
    '日本語のテキスト', '中文分词', 'Привет, мир', 'مرحبا', '👩‍👩‍👧 🚀', '\t\t', '   ', '\n\n\n', '\r\n', 'x'.repeat(300),
    ' '.repeat(PRE_TOKEN_CACHE_MAX_WORD_LENGTH + 3), '<|im_start|>', '<|im_end|>', '<think>', '</think>', '<tool_call>',
    'function_name(arg1, arg2)', '{"a": [1, 2, 3]}', '\u00a0non-breaking', '\u{10FFFF}', '\ud800', 'ÀÉÎÕÜ',
  ];
  const texts = [...pieces];
  for (let i = 0; i < 200; i++) {
    const n = 1 + Math.floor(random() * 8);
    texts.push(Array.from({ length: n }, () => pieces[Math.floor(random() * pieces.length)]).join(random() < 0.5 ? ' ' : ''));
  }
  return texts;
}

describe('byte-level pre-token cache', () => {
  let rawInstance: Raw | null = null;
  const uncached = () => (rawInstance ??= uncachedQwen3());

  test('Qwen3 encodes every text to the ids of the uncached library, cold and warm', async () => {
    const tok = await qwen3();
    const raw = uncached();
    const texts = corpus();
    for (let pass = 0; pass < 2; pass++) {
      for (const text of texts) {
        assert.deepEqual(tok.encode(text), raw.encode(text, { add_special_tokens: false }).ids, `pass ${pass}: ${JSON.stringify(text.slice(0, 40))}`);
        assert.deepEqual(tok.encode(text, { addSpecialTokens: true }), raw.encode(text, { add_special_tokens: true }).ids);
      }
    }
  });

  test('Qwen3 has one cached step; a cache smaller than the words of the texts evicts and still gives the same ids', () => {
    const cached = uncachedQwen3();
    assert.equal(cacheByteLevelWords(cached, 3), 1);
    const raw = uncached();
    for (const text of [...corpus(), ...corpus().reverse()]) {
      assert.deepEqual(cached.encode(text, { add_special_tokens: false }).ids, raw.encode(text, { add_special_tokens: false }).ids);
    }
  });

  test('GatewayTokenizer installs the cache on its Qwen3 tokenizer (the wrapper is an own property of the step)', async () => {
    const tok = await qwen3();
    // Reaches into the library object on purpose: without the install, the step's method is its prototype's. The
    // library's steps are callable objects (functions).
    const inner = (tok as unknown as { inner: { pre_tokenizer: { tokenizers?: unknown[] } } }).inner;
    const steps = inner.pre_tokenizer.tokenizers ?? [inner.pre_tokenizer];
    const wordFed = steps.filter((s): s is { use_regex: boolean } => (typeof s === 'object' || typeof s === 'function') && s !== null && (s as { use_regex?: unknown }).use_regex === false);
    assert.equal(wordFed.length, 1, 'Qwen3 has one word-fed byte-level step');
    assert.ok(Object.hasOwn(wordFed[0]!, 'pre_tokenize_text'), 'its pre_tokenize_text is the cache wrapper');
  });

  test('a tokenizer without a word-fed byte-level step is left alone', () => {
    assert.equal(cacheByteLevelWords({ pre_tokenizer: null }), 0);
    assert.equal(cacheByteLevelWords({ pre_tokenizer: { tokenizers: [] } }), 0);
  });
});

describe('flattened Sequence pre-tokenizer', () => {
  test('Qwen3 with the flattened Sequence (and without the word cache) encodes every text to the library ids', () => {
    const flat = uncachedQwen3();
    assert.equal(flattenSequencePreTokenizer(flat), true);
    const raw = uncachedQwen3();
    for (const text of corpus()) {
      assert.deepEqual(flat.encode(text, { add_special_tokens: false }).ids, raw.encode(text, { add_special_tokens: false }).ids, JSON.stringify(text.slice(0, 40)));
      assert.deepEqual(flat.encode(text, { add_special_tokens: true }).ids, raw.encode(text, { add_special_tokens: true }).ids);
    }
    // Called with a list of texts, the original path runs (same pre-tokens as the library's).
    const seq = flat.pre_tokenizer as (t: string | string[], o?: unknown) => string[];
    const rawSeq = raw.pre_tokenizer as (t: string | string[], o?: unknown) => string[];
    assert.deepEqual(seq(['Hello world', ' again']), rawSeq(['Hello world', ' again']));
    assert.deepEqual(seq('Hello world'), rawSeq('Hello world'));
  });

  test('GatewayTokenizer installs it on its Qwen3 Sequence (an own _call on the pre-tokenizer)', async () => {
    const tok = await qwen3();
    const inner = (tok as unknown as { inner: { pre_tokenizer: object } }).inner;
    assert.ok(Object.hasOwn(inner.pre_tokenizer, '_call'), 'the Sequence has the flattened call path');
  });

  test('anything but a Sequence of library steps is left alone', () => {
    assert.equal(flattenSequencePreTokenizer({ pre_tokenizer: null }), false);
    assert.equal(flattenSequencePreTokenizer({ pre_tokenizer: { tokenizers: [] } }), false);
  });
});
