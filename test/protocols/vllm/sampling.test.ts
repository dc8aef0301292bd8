/**
 * The vLLM sampling map's pieces (engine-wire.md 5.3): EOS handling (gateway.md 7), the omission rules, structured
 * outputs, logit_bias with integer keys.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_SAMPLING } from '../../../src/protocols/types.js';
import {
  NO_EOS,
  applyEosTokenIds,
  defaultStructuredOutputs,
  defaultVllmSamplingParams,
  logitBiasCodec,
  resolveEosConfig,
  structuredOutputsCodec,
  toVllmSamplingParams,
  vllmSamplingParamsCodec,
} from '../../../src/protocols/vllm/index.js';
import type { StructuredOutputsParams } from '../../../src/protocols/vllm/index.js';
import { decodeMessage, encodeMessage } from '../../../src/wire/codec.js';
import { WireDecodeError, WireEncodeError } from '../../../src/wire/errors.js';
import { F64, bytesOf, fixmap, hexOf } from './hex.js';

test('resolveEosConfig: config.json first, generation_config.json extras, tokenizer fallback (gateway.md 7)', () => {
  assert.deepEqual(
    resolveEosConfig({ configEosTokenId: 5, generationConfigEosTokenId: [5, 7, 9], tokenizerEosIds: [999] }),
    { primary: 5, extras: [7, 9], tokenizerEosIds: [999] },
  );
  assert.deepEqual(resolveEosConfig({ generationConfigEosTokenId: [7, 9], tokenizerEosIds: [] }), {
    primary: 7,
    extras: [9],
    tokenizerEosIds: [],
  });
  assert.deepEqual(resolveEosConfig({ tokenizerEosIds: [151645, 151643] }), {
    primary: 151645,
    extras: [151643],
    tokenizerEosIds: [151645, 151643],
  });
  const warnings: string[] = [];
  assert.deepEqual(
    resolveEosConfig({ configEosTokenId: 'x', tokenizerEosIds: [2], onWarning: (m) => warnings.push(m) }),
    { primary: 2, extras: [], tokenizerEosIds: [2] },
  );
  assert.equal(warnings.length, 1);
  assert.match(warnings[0], /config\.json: eos_token_id "x"/);
  assert.deepEqual(resolveEosConfig({ tokenizerEosIds: [] }), { primary: null, extras: [], tokenizerEosIds: [] });
});

test('applyEosTokenIds: the two table rows and SMG eos_backstop_appends_tokenizer_ids_without_duplicates', () => {
  const eos = { primary: 5, extras: [7], tokenizerEosIds: [] };
  assert.deepEqual(applyEosTokenIds([7, 9], false, eos), {
    stop_token_ids: [7, 9],
    _eos_token_id: 5,
    _all_stop_token_ids: [5, 7, 9],
  });
  assert.deepEqual(applyEosTokenIds([9], true, eos), {
    stop_token_ids: [9],
    _eos_token_id: null,
    _all_stop_token_ids: [5, 7, 9],
  });
  const tok = { primary: 999, extras: [], tokenizerEosIds: [999] };
  assert.deepEqual(applyEosTokenIds([7], false, tok).stop_token_ids, [7, 999]);
  assert.deepEqual(applyEosTokenIds([999], false, tok).stop_token_ids, [999]);
  assert.deepEqual(applyEosTokenIds([3, 3, 1], false, NO_EOS), {
    stop_token_ids: [3, 1],
    _eos_token_id: null,
    _all_stop_token_ids: [1, 3],
  });
  assert.deepEqual(
    applyEosTokenIds([20, 3], false, { primary: 100, extras: [2], tokenizerEosIds: [] })._all_stop_token_ids,
    [2, 3, 20, 100],
    'numeric sort, not lexicographic',
  );
});

test('toVllmSamplingParams: the DEFAULT_SAMPLING request and a fully set one', () => {
  assert.deepStrictEqual(toVllmSamplingParams({ ...DEFAULT_SAMPLING, maxNewTokens: 4 }, { promptTokens: 2 }), {
    ...defaultVllmSamplingParams(),
    max_tokens: 4,
  });
  const p = toVllmSamplingParams(
    {
      maxNewTokens: 100,
      minNewTokens: 2,
      temperature: 0.8,
      topP: 0.95,
      topK: 20,
      minP: 0.05,
      frequencyPenalty: 0.1,
      presencePenalty: -0.2,
      repetitionPenalty: 1.1,
      stopTokenIds: [13],
      ignoreEos: false,
      skipSpecialTokens: false,
      spacesBetweenSpecialTokens: false,
      seed: 7,
      logitBias: { '42': -100 },
    },
    { promptTokens: 2, logprobs: 3, eos: { primary: 2, extras: [], tokenizerEosIds: [2] } },
  );
  assert.deepStrictEqual(p, {
    ...defaultVllmSamplingParams(),
    temperature: 0.8,
    top_p: 0.95,
    top_k: 20,
    seed: 7,
    max_tokens: 100,
    min_tokens: 2,
    logprobs: 3,
    min_p: 0.05,
    frequency_penalty: 0.1,
    presence_penalty: -0.2,
    repetition_penalty: 1.1,
    stop_token_ids: [13, 2],
    _eos_token_id: 2,
    _all_stop_token_ids: [2, 13],
    logit_bias: new Map([[42, -100]]),
  });
  assert.throws(
    () => toVllmSamplingParams({ ...DEFAULT_SAMPLING, maxNewTokens: 4 }, { promptTokens: 2, logprobs: -2 }),
    (e: unknown) => e instanceof WireEncodeError && /SamplingParams\.logprobs/.test(e.message),
  );
});

test('sampling map encoder: always-written keys only for the defaults, every optional key when set', () => {
  const base = encodeMessage(vllmSamplingParamsCodec, defaultVllmSamplingParams());
  assert.equal(
    hexOf(base),
    fixmap([
      ['temperature', F64['1']],
      ['top_p', F64['1']],
      ['top_k', '00'],
      ['max_tokens', '10'],
      ['min_tokens', '00'],
      ['min_p', F64['0']],
      ['frequency_penalty', F64['0']],
      ['presence_penalty', F64['0']],
      ['repetition_penalty', F64['1']],
      ['stop_token_ids', '90'],
      ['_all_stop_token_ids', '90'],
    ]),
  );
  assert.deepStrictEqual(decodeMessage(vllmSamplingParamsCodec, base), defaultVllmSamplingParams());
  assert.deepStrictEqual(
    decodeMessage(vllmSamplingParamsCodec, bytesOf('80')),
    defaultVllmSamplingParams(),
    'every key optional',
  );
  const all = {
    ...defaultVllmSamplingParams(),
    seed: 1,
    thinking_token_budget: 2,
    logprobs: -1,
    prompt_logprobs: 0,
    repetition_detection: { max_pattern_size: 4, min_pattern_size: 1, min_count: 2 },
    _eos_token_id: 3,
    logit_bias: new Map([[1, 0.5]]),
    allowed_token_ids: [1],
    _bad_words_token_ids: [[2, 3]],
    structured_outputs: { ...defaultStructuredOutputs(), regex: 'a+' },
    logprob_token_ids: [4],
    skip_reading_prefix_cache: false,
    extra_args: { x: 1 },
  };
  const bytes = encodeMessage(vllmSamplingParamsCodec, all);
  assert.equal(hexOf(bytes).slice(0, 6), 'de0018', '24 keys: map16');
  const decoded = decodeMessage(vllmSamplingParamsCodec, bytes);
  assert.deepStrictEqual(decoded, { ...all, structured_outputs: { ...all.structured_outputs, _backend: 'guidance' } });
});

test('repetition_detection: min_pattern_size defaults to 0; the other two keys are required', () => {
  const sp = decodeMessage(
    vllmSamplingParamsCodec,
    bytesOf(
      fixmap([
        [
          'repetition_detection',
          fixmap([
            ['max_pattern_size', '08'],
            ['min_count', '03'],
          ]),
        ],
      ]),
    ),
  );
  assert.deepEqual(sp.repetition_detection, { max_pattern_size: 8, min_pattern_size: 0, min_count: 3 });
  assert.throws(
    () =>
      decodeMessage(
        vllmSamplingParamsCodec,
        bytesOf(fixmap([['repetition_detection', fixmap([['max_pattern_size', '08']])]])),
      ),
    (e: unknown) => e instanceof WireDecodeError && /missing required key 'min_count'/.test(e.message),
  );
});

test('structured_outputs: one constraint, options only when true, _backend always (xgrammar for structural tags)', () => {
  const so = (p: Partial<StructuredOutputsParams>): StructuredOutputsParams => ({
    ...defaultStructuredOutputs(),
    ...p,
  });
  assert.equal(
    hexOf(encodeMessage(structuredOutputsCodec, so({ json: { type: 'object' } }))),
    fixmap([
      ['json', fixmap([['type', 'a66f626a656374']])],
      ['_backend', 'a867756964616e6365'],
    ]),
  );
  assert.equal(
    hexOf(
      encodeMessage(
        structuredOutputsCodec,
        so({ structural_tag: '{}', disable_any_whitespace: true, _backend: 'outlines' }),
      ),
    ),
    fixmap([
      ['structural_tag', 'a27b7d'],
      ['disable_any_whitespace', 'c3'],
      ['_backend', 'a8786772616d6d6172'],
    ]),
    'the held _backend is ignored on encode',
  );
  assert.equal(
    hexOf(encodeMessage(structuredOutputsCodec, so({ json_object: true, whitespace_pattern: ' ' }))),
    fixmap([
      ['json_object', 'c3'],
      ['whitespace_pattern', 'a120'],
      ['_backend', 'a867756964616e6365'],
    ]),
  );
  const enc = (p: Partial<StructuredOutputsParams>, re: RegExp) =>
    assert.throws(
      () => encodeMessage(structuredOutputsCodec, so(p)),
      (e: unknown) => e instanceof WireEncodeError && re.test(e.message),
    );
  enc({}, /exactly one constraint key is required/);
  enc({ regex: 'a', grammar: 'g' }, /exactly one constraint key is allowed; got regex, grammar/);
  enc({ json_object: false }, /json_object must be true/);
  const dec = (hex: string, re: RegExp) =>
    assert.throws(
      () => decodeMessage(structuredOutputsCodec, bytesOf(hex)),
      (e: unknown) => e instanceof WireDecodeError && re.test(e.message),
    );
  dec(fixmap([['_backend', 'a867756964616e6365']]), /got none/);
  dec(
    fixmap([
      ['regex', 'a161'],
      ['choice', '91a162'],
    ]),
    /got regex, choice/,
  );
  dec(fixmap([['json_object', 'c2']]), /json_object must be true/);
  assert.deepEqual(
    decodeMessage(
      structuredOutputsCodec,
      bytesOf(
        fixmap([
          ['choice', '92a161a162'],
          ['_backend', 'a178'],
        ]),
      ),
    ),
    so({ choice: ['a', 'b'], _backend: 'x' }),
    "a peer's _backend is kept as received (and ignored)",
  );
});

test('logit_bias: integer keys in wire order, float values of either width', () => {
  const hex = '83' + '2a' + F64['-100'] + 'cd0190' + 'ca3e800000' + '05' + '01';
  const m = decodeMessage(logitBiasCodec, bytesOf(hex));
  assert.deepEqual(
    [...m],
    [
      [42, -100],
      [400, 0.25],
      [5, 1],
    ],
  );
  assert.equal(
    hexOf(encodeMessage(logitBiasCodec, m)),
    '83' + '2a' + F64['-100'] + 'cd0190' + F64['0.25'] + '05' + F64['1'],
  );
  assert.throws(
    () => decodeMessage(logitBiasCodec, bytesOf('81a13101')),
    (e: unknown) => e instanceof WireDecodeError && /expected int, got str/.test(e.message),
    'string keys are refused',
  );
});
