import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import { Prng } from '../../src/sim/prng.js';
import { DEFAULT_CORPUS, TextModel, seedToUint32 } from '../../src/sim/text.js';
import type { TokenSource } from '../../src/sim/scheduler.js';

let tokenizer: GatewayTokenizer;
let model: TextModel;

before(async () => {
  tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  model = new TextModel(tokenizer);
});

/** Draws until EOS (allowStop always true) or `limit` tokens. */
function generate(src: TokenSource, eos: number, limit = 2000, allowStop = true): number[] {
  const out: number[] = [];
  for (let i = 0; i < limit; i++) {
    const t = src.next({ allowStop });
    out.push(t.tokenId);
    if (t.tokenId === eos) break;
  }
  return out;
}

test('Prng and seedToUint32 are deterministic and in range', () => {
  const a = new Prng(42);
  const b = new Prng(42);
  const xs = Array.from({ length: 100 }, () => a.next());
  assert.deepEqual(
    xs,
    Array.from({ length: 100 }, () => b.next()),
  );
  assert.ok(xs.every((x) => x >= 0 && x < 1));
  assert.notDeepEqual(
    xs,
    Array.from({ length: 100 }, () => new Prng(43).next()),
  );
  assert.equal(seedToUint32(-1), 0xffffffff);
  assert.equal(seedToUint32(2n ** 40n + 5n), 5);
  assert.equal(seedToUint32(7.9), 7);
});

test('same seed + same prompt → same tokens; another seed or prompt → different tokens', () => {
  const eos = model.eosTokenId;
  const a = generate(model.createSource(1234, [1, 2, 3]), eos);
  const b = generate(model.createSource(1234, [1, 2, 3]), eos);
  assert.deepEqual(a, b);
  assert.equal(a.at(-1), eos, 'ends with EOS when stopping is allowed');
  const outputs = new Set<string>();
  for (let s = 0; s < 8; s++) outputs.add(generate(model.createSource(s, [1, 2, 3]), eos).join(','));
  assert.ok(outputs.size >= 7, `8 seeds gave only ${outputs.size} distinct outputs`);
  assert.notDeepEqual(generate(model.createSource(1234, [9, 9, 9]), eos), a);
});

test('the generated text is readable through the real tokenizer', () => {
  const eos = model.eosTokenId;
  assert.deepEqual(tokenizer.eosTokenIds.includes(eos), true);
  for (let seed = 0; seed < 20; seed++) {
    const ids = generate(model.createSource(seed, [seed]), eos);
    const text = tokenizer.decode(ids, { skipSpecialTokens: true });
    assert.ok(!text.includes('\uFFFD'), `U+FFFD in ${JSON.stringify(text)}`);
    assert.ok(text.length > 20, `too short: ${JSON.stringify(text)}`);
    const nonAscii = [...text].filter((c) => c.charCodeAt(0) > 0x7e && c !== '\n').length;
    assert.equal(nonAscii, 0, JSON.stringify(text));
    const words = text.split(/\s+/).filter((w) => w !== '');
    const wordy = words.filter((w) => /^[A-Za-z][A-Za-z'-]*[.,;]?$/.test(w)).length;
    assert.ok(wordy / words.length > 0.9, `not mostly words: ${JSON.stringify(text)}`);
    // every sentence comes from the corpus
    for (const s of text.split(/(?<=[.!?])\s+/))
      assert.ok(DEFAULT_CORPUS.includes(s.trim()), `unknown sentence ${JSON.stringify(s)}`);
  }
});

test('allowStop=false never yields EOS (ignore_eos, min_new_tokens) and keeps producing text', () => {
  const eos = model.eosTokenId;
  const ids = generate(model.createSource(5, [1]), eos, 600, false);
  assert.equal(ids.length, 600);
  assert.ok(!ids.includes(eos));
  const text = tokenizer.decode(ids);
  assert.ok(!text.includes('\uFFFD'));
});

test('TextModel refuses an empty corpus and a tokenizer without EOS', () => {
  assert.throws(() => new TextModel(tokenizer, { corpus: [] }), /empty corpus/);
  assert.throws(() => new TextModel({ encode: () => [1], eosTokenIds: [] }), /EOS/);
});

test('a repeated prompt is decoded once and answered as a fresh model answers it (a prompt declaring tools included)', () => {
  let decodes = 0;
  const counting = {
    encode: (text: string, opts?: { addSpecialTokens?: boolean }) => tokenizer.encode(text, opts),
    decode: (ids: readonly number[], opts?: { skipSpecialTokens?: boolean }) => {
      decodes += 1;
      return tokenizer.decode(ids, opts);
    },
    eosTokenIds: tokenizer.eosTokenIds,
  };
  const cached = new TextModel(counting);
  const prompt = tokenizer.encode('<tools>[{"name": "get_weather"}]</tools> What is the weather in Paris?');
  const other = tokenizer.encode('Tell me about the river.');
  const a = generate(cached.createSource(7, prompt), tokenizer.eosTokenIds[0]!, 40);
  const b = generate(cached.createSource(7, prompt), tokenizer.eosTokenIds[0]!, 40);
  generate(cached.createSource(7, other), tokenizer.eosTokenIds[0]!, 5);
  const again = generate(cached.createSource(9, prompt), tokenizer.eosTokenIds[0]!, 40);
  assert.equal(decodes, 2, 'each distinct prompt decoded once');
  assert.deepEqual(a, b);
  assert.deepEqual(a, generate(new TextModel(tokenizer).createSource(7, prompt), tokenizer.eosTokenIds[0]!, 40));
  assert.deepEqual(again, generate(new TextModel(tokenizer).createSource(9, prompt), tokenizer.eosTokenIds[0]!, 40));
});
