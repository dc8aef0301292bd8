import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { cacheByteLevelWords } from '../../src/tokenizer/pre-token-cache.js';
import { mixedCorpus as corpus, qwen3, rawQwen3 as uncachedQwen3, type RawTokenizer as Raw } from './fixtures.js';

describe('byte-level pre-token cache', () => {
  let rawInstance: Raw | null = null;
  const uncached = () => (rawInstance ??= uncachedQwen3());

  test('Qwen3 encodes every text to the ids of the uncached library, cold and warm', async () => {
    const tok = await qwen3();
    const raw = uncached();
    const texts = corpus();
    for (let pass = 0; pass < 2; pass++) {
      for (const text of texts) {
        assert.deepEqual(
          tok.encode(text),
          raw.encode(text, { add_special_tokens: false }).ids,
          `pass ${pass}: ${JSON.stringify(text.slice(0, 40))}`,
        );
        assert.deepEqual(
          tok.encode(text, { addSpecialTokens: true }),
          raw.encode(text, { add_special_tokens: true }).ids,
        );
      }
    }
  });

  test('Qwen3 has one cached step; a cache smaller than the words of the texts evicts and still gives the same ids', () => {
    const cached = uncachedQwen3();
    assert.equal(cacheByteLevelWords(cached, 3), 1);
    const raw = uncached();
    for (const text of [...corpus(), ...corpus().reverse()]) {
      assert.deepEqual(
        cached.encode(text, { add_special_tokens: false }).ids,
        raw.encode(text, { add_special_tokens: false }).ids,
      );
    }
  });

  test('GatewayTokenizer installs the cache on its Qwen3 tokenizer (the wrapper is an own property of the step)', async () => {
    const tok = await qwen3();
    // Reaches into the library object on purpose: without the install, the step's method is its prototype's. The
    // library's steps are callable objects (functions).
    const inner = (tok as unknown as { inner: { pre_tokenizer: { tokenizers?: unknown[] } } }).inner;
    const steps = inner.pre_tokenizer.tokenizers ?? [inner.pre_tokenizer];
    const wordFed = steps.filter(
      (s): s is { use_regex: boolean } =>
        (typeof s === 'object' || typeof s === 'function') &&
        s !== null &&
        (s as { use_regex?: unknown }).use_regex === false,
    );
    assert.equal(wordFed.length, 1, 'Qwen3 has one word-fed byte-level step');
    assert.ok(Object.hasOwn(wordFed[0]!, 'pre_tokenize_text'), 'its pre_tokenize_text is the cache wrapper');
  });

  test('a tokenizer without a word-fed byte-level step is left alone', () => {
    assert.equal(cacheByteLevelWords({ pre_tokenizer: null }), 0);
    assert.equal(cacheByteLevelWords({ pre_tokenizer: { tokenizers: [] } }), 0);
  });
});
