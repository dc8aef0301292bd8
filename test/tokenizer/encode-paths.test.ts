/**
 * The faster call paths through the library's encode (src/tokenizer/encode-paths.ts): each installed alone on a
 * fresh library instance encodes a mixed corpus to the library's own ids, and GatewayTokenizer installs all of them.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  execRegexSplit,
  flattenSequencePreTokenizer,
  loopEncodeText,
  plainBpeCacheReads,
} from '../../src/tokenizer/encode-paths.js';
import { mixedCorpus as corpus, qwen3, rawQwen3 as uncachedQwen3, type RawTokenizer } from './fixtures.js';

/** Asserts that `fast` and `raw` encode every corpus text to the same ids, twice (cold and warm caches). */
let referenceInstance: RawTokenizer | null = null;
/**
 * The library's own Qwen3, shared by the tests that only encode with it (~0.7 CPU-s per instance); a test that
 * changes its reference builds its own.
 */
const reference = (): RawTokenizer => (referenceInstance ??= uncachedQwen3());

function assertSameIds(fast: RawTokenizer, raw: RawTokenizer): void {
  for (let pass = 0; pass < 2; pass++) {
    for (const text of corpus()) {
      assert.deepEqual(
        fast.encode(text, { add_special_tokens: false }).ids,
        raw.encode(text, { add_special_tokens: false }).ids,
        `pass ${pass}: ${JSON.stringify(text.slice(0, 40))}`,
      );
      assert.deepEqual(
        fast.encode(text, { add_special_tokens: true }).ids,
        raw.encode(text, { add_special_tokens: true }).ids,
      );
    }
  }
}

/** The library objects of a GatewayTokenizer (reached into on purpose: the installs are own properties on them). */
async function internals(): Promise<{
  pre_tokenizer: { _call?: unknown; tokenizers: Array<{ pattern?: unknown }> };
  model: { cache: { get: unknown } };
}> {
  const tok = await qwen3();
  return (tok as unknown as { inner: never }).inner;
}

describe('flattened Sequence pre-tokenizer', () => {
  test('Qwen3 with the flattened Sequence (and without the word cache) encodes every text to the library ids', () => {
    const flat = uncachedQwen3();
    assert.equal(flattenSequencePreTokenizer(flat), true);
    const raw = reference();
    assertSameIds(flat, raw);
    // Called with a list of texts, the original path runs (same pre-tokens as the library's).
    const seq = flat.pre_tokenizer as (t: string | string[], o?: unknown) => string[];
    const rawSeq = raw.pre_tokenizer as (t: string | string[], o?: unknown) => string[];
    assert.deepEqual(seq(['Hello world', ' again']), rawSeq(['Hello world', ' again']));
    assert.deepEqual(seq('Hello world'), rawSeq('Hello world'));
  });

  test('GatewayTokenizer installs it on its Qwen3 Sequence (an own _call on the pre-tokenizer)', async () => {
    assert.ok(Object.hasOwn((await internals()).pre_tokenizer, '_call'), 'the Sequence has the flattened call path');
  });

  test('anything but a Sequence of library steps is left alone', () => {
    assert.equal(flattenSequencePreTokenizer({ pre_tokenizer: null }), false);
    assert.equal(flattenSequencePreTokenizer({ pre_tokenizer: { tokenizers: [] } }), false);
  });
});

describe('Split with exec', () => {
  test('Qwen3 with the exec split alone encodes every text to the library ids; the regex is left at lastIndex 0', () => {
    const fast = uncachedQwen3();
    assert.equal(execRegexSplit(fast), 1);
    assertSameIds(fast, reference());
    const split = (fast.pre_tokenizer as { tokenizers: Array<{ pattern: RegExp }> }).tokenizers[0]!;
    assert.equal(split.pattern.lastIndex, 0);
  });

  test('an empty match advances by one code point, as matchAll does', () => {
    const fast = uncachedQwen3();
    execRegexSplit(fast);
    const raw = uncachedQwen3();
    // Swap in a pattern that matches empty strings (and astral characters) in both.
    const steps = (t: RawTokenizer) =>
      (t.pre_tokenizer as { tokenizers: Array<{ pattern: RegExp; pre_tokenize_text(s: string): string[] }> })
        .tokenizers;
    for (const t of [fast, raw]) steps(t)[0]!.pattern = /x*|🚀/gu;
    for (const text of ['', 'axxb', '🚀a🚀', 'a\ud800b', 'xx🚀xx']) {
      assert.deepEqual(
        steps(fast)[0]!.pre_tokenize_text(text),
        steps(raw)[0]!.pre_tokenize_text(text),
        JSON.stringify(text),
      );
    }
  });

  test('GatewayTokenizer installs it on its Qwen3 Split step', async () => {
    assert.ok(Object.hasOwn((await internals()).pre_tokenizer.tokenizers[0]!, 'pre_tokenize_text'));
  });

  test('no Split step: nothing installed', () => {
    assert.equal(execRegexSplit({ pre_tokenizer: null }), 0);
  });
});

describe('plain BPE cache reads', () => {
  test('Qwen3 with plain cache reads alone encodes every text to the library ids, also with a tiny cache', () => {
    const fast = uncachedQwen3();
    assert.equal(plainBpeCacheReads(fast), true);
    assertSameIds(fast, reference());
    const tiny = uncachedQwen3();
    (tiny.model as { cache: { capacity: number } }).cache.capacity = 3;
    plainBpeCacheReads(tiny);
    assertSameIds(tiny, reference());
  });

  test('GatewayTokenizer installs it on its Qwen3 model; anything but a BPE model is left alone', async () => {
    assert.ok(Object.hasOwn((await internals()).model.cache, 'get'));
    assert.equal(plainBpeCacheReads({ pre_tokenizer: null, model: {} }), false);
  });
});

describe('encode_text in loops', () => {
  test('Qwen3 with the looped encode_text alone encodes every text to the library ids (tokens too)', () => {
    const fast = uncachedQwen3();
    assert.equal(loopEncodeText(fast), true);
    const raw = reference();
    assertSameIds(fast, raw);
    const tokensOf = (t: RawTokenizer, text: string) =>
      (t.encode(text, { add_special_tokens: false }) as unknown as { tokens: string[] }).tokens;
    for (const text of corpus()) assert.deepEqual(tokensOf(fast, text), tokensOf(raw, text));
  });

  test('added tokens with lstrip / rstrip trim their neighbours as the library does', () => {
    const fast = uncachedQwen3();
    loopEncodeText(fast);
    const raw = uncachedQwen3();
    for (const t of [fast, raw]) {
      const map = (t as unknown as { added_tokens_map: Map<string, { lstrip: boolean; rstrip: boolean }> })
        .added_tokens_map;
      map.get('<|im_end|>')!.lstrip = true;
      map.get('<|im_start|>')!.rstrip = true;
      map.get('<think>')!.lstrip = true;
      map.get('<think>')!.rstrip = true;
    }
    const texts = [
      '<|im_start|>  user\n hi  <|im_end|>\n<|im_start|>assistant\n',
      ' a <think> b </think>  <|im_end|><|im_end|>  <|im_start|>   ',
      '<|im_start|><|im_start|> x',
      ...corpus(),
    ];
    for (const text of texts) {
      assert.deepEqual(
        fast.encode(text, { add_special_tokens: false }).ids,
        raw.encode(text, { add_special_tokens: false }).ids,
        JSON.stringify(text.slice(0, 40)),
      );
    }
    assert.equal((fast as unknown as { encode_text(t: null): null }).encode_text(null), null);
  });

  test('GatewayTokenizer installs it; a second install, a lowercasing tokenizer or another object is left alone', async () => {
    const inner = (await qwen3()) as unknown as { inner: object };
    assert.ok(Object.hasOwn(inner.inner, 'encode_text'));
    assert.equal(loopEncodeText(inner.inner), false);
    assert.equal(loopEncodeText({}), false);
    const lowering = uncachedQwen3();
    (lowering as unknown as { do_lowercase_and_remove_accent: boolean }).do_lowercase_and_remove_accent = true;
    assert.equal(loopEncodeText(lowering), false);
  });
});
