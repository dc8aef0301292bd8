/**
 * Token ids as the engine client checks them (issue 26 part 4): `tokenIdMask` (src/tokenizer/token-id-mask.ts) marks
 * exactly the ids `GatewayTokenizer.isTokenId` accepts, with or without the detokenizer's table, holes in the
 * vocabulary included; an id that is not a token id raises the typed `InvalidTokenIdError` (still a RangeError) from
 * `validateTokenIds`, `decode` and both detokenizers.
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { InvalidTokenIdError } from '../../src/tokenizer/errors.js';
import { IncrementalDetokenizer, createDetokenizer } from '../../src/tokenizer/detokenizer.js';
import { TableDetokenizer } from '../../src/tokenizer/table-detokenizer.js';
import { tokenIdMask } from '../../src/tokenizer/token-id-mask.js';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import { makeTempDir, qwen3, removeTempDirs, sentencePieceFiles } from './fixtures.js';

after(removeTempDirs);

/** A byte-level BPE tokenizer whose ids 1 and 3 name no token (vocabulary a=0, b=2, added <|end|>=4). */
async function holedByteLevel(): Promise<GatewayTokenizer> {
  const dir = await makeTempDir({
    'tokenizer.json': {
      added_tokens: [
        {
          id: 4,
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
      model: { type: 'BPE', vocab: { a: 0, b: 2 }, merges: [] },
    },
    'tokenizer_config.json': { eos_token: '<|end|>' },
  });
  return GatewayTokenizer.load(dir);
}

/** The SentencePiece fixture with its first piece (id 259) removed: a hole inside the vocabulary. */
async function holedSentencePiece(): Promise<GatewayTokenizer> {
  const files = sentencePieceFiles() as { 'tokenizer.json': { model: { vocab: Record<string, number> } } };
  const vocab = files['tokenizer.json'].model.vocab;
  const first = Object.keys(vocab).find((k) => vocab[k] === 259)!;
  delete vocab[first];
  return GatewayTokenizer.load(await makeTempDir(files));
}

describe('tokenIdMask', () => {
  test('Qwen3: every id 0..151668 is a token id (from the table), nothing past it', async () => {
    const tok = await qwen3();
    const mask = tokenIdMask(tok);
    assert.equal(mask.length, tok.vocabSize);
    assert.equal(mask.length, 151_669);
    assert.ok(mask.every((v) => v === 1));
    for (const id of [-1, 151_669, 1e9, 0.5, NaN]) assert.equal(mask[id as number], undefined, String(id));
    // The same mask without the table (one isTokenId per id).
    const viaTokenizer = tokenIdMask({
      vocabSize: tok.vocabSize,
      tokenTextTable: null,
      isTokenId: (id) => tok.isTokenId(id),
    });
    assert.deepEqual(viaTokenizer, mask);
  });

  test('holes in the vocabulary are 0, with the table (byte-level) and without (SentencePiece)', async () => {
    const bl = await holedByteLevel();
    assert.ok(bl.tokenTextTable !== null);
    assert.deepEqual([...tokenIdMask(bl)], [1, 0, 1, 0, 1]);
    const sp = await holedSentencePiece();
    assert.equal(sp.tokenTextTable, null);
    const mask = tokenIdMask(sp);
    assert.equal(mask.length, sp.vocabSize);
    assert.equal(mask[259], 0);
    for (let id = 0; id < sp.vocabSize; id++) assert.equal(mask[id] === 1, sp.isTokenId(id), `id ${id}`);
  });
});

describe('InvalidTokenIdError', () => {
  test('validateTokenIds, decode and both detokenizers raise it, naming the id and its position', async () => {
    const bl = await holedByteLevel();
    const check = (fn: () => unknown, tokenId: unknown, index: number) =>
      assert.throws(fn, (err: unknown) => {
        assert.ok(err instanceof InvalidTokenIdError);
        assert.ok(err instanceof RangeError, 'still a RangeError');
        assert.equal(err.tokenId, tokenId);
        assert.equal(err.index, index);
        assert.match(err.message, new RegExp(`token id ${String(tokenId)} at index ${index} is not in the vocabulary`));
        return true;
      });
    check(() => bl.validateTokenIds([0, 2, 3]), 3, 2);
    check(() => bl.decode([1]), 1, 0);
    const table = createDetokenizer(bl);
    assert.ok(table instanceof TableDetokenizer);
    check(() => table.push([0, 7]), 7, 1);
    assert.equal(table.push([0]), 'a', 'nothing of the refused push was consumed');
    const sp = await holedSentencePiece();
    const window = createDetokenizer(sp);
    assert.ok(window instanceof IncrementalDetokenizer);
    check(() => window.push([259]), 259, 0);
    assert.equal(bl.isTokenId(2), true);
    assert.equal(bl.isTokenId('2'), false);
  });
});
