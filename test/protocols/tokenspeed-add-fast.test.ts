/**
 * The ADD encoder's prefix-form fast path (request.ts `writePrefixFast`, issue 9): for every request it takes, the
 * bytes equal what the schema codec (`tokenizedGenerateReqInputCodec.encodeWith`, 11 elements) writes; a request it
 * does not take (a set `logit_bias`, a bigint, a non-default tail field, a lone surrogate, a wrong type) gets the
 * codec's result or the codec's error. The golden vectors go through it in vectors.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  encodeTokenizedGenerateReqInput,
  tokenizedGenerateReqInputCodec,
  tokenspeedProtocol,
  toTokenizedGenerateReqInput,
} from '../../src/protocols/tokenspeed/index.js';
import type { TokenizedGenerateReqInput } from '../../src/protocols/tokenspeed/index.js';
import type { GenerateRequest } from '../../src/protocols/types.js';
import { MsgpackWriter } from '../../src/wire/writer.js';
import { prng as rng } from '../helpers/prng.js';

/** The codec's own encoding of the prefix form, or the error it throws. */
function viaCodec(req: TokenizedGenerateReqInput): { bytes: string } | { error: string } {
  const w = new MsgpackWriter(64);
  try {
    tokenizedGenerateReqInputCodec.encodeWith(w, req, 'TokenizedGenerateReqInput', { length: 11 });
    return { bytes: Buffer.from(w.finish()).toString('hex') };
  } catch (err) {
    return { error: `${(err as Error).name}: ${(err as Error).message}` };
  }
}

function viaEncoder(req: TokenizedGenerateReqInput): { bytes: string } | { error: string } {
  try {
    return { bytes: Buffer.from(encodeTokenizedGenerateReqInput(req)).toString('hex') };
  } catch (err) {
    return { error: `${(err as Error).name}: ${(err as Error).message}` };
  }
}

function randomRequest(r: () => number): GenerateRequest {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const ints = (n: number, max: number) => Array.from({ length: n }, () => Math.floor(r() * max));
  return {
    requestId: pick(['chatcmpl-' + 'ab'.repeat(16), 'cmpl-x', 'rid-é-ünïcode', 'x'.repeat(40), 'y'.repeat(300)]),
    promptTokenIds: ints(pick([0, 1, 17, 200, 70000]), pick([100, 300, 70000, 151669, 2 ** 33])),
    sampling: {
      maxNewTokens: pick([null, 0, 1, 127, 128, 255, 65535, 65536, 2 ** 31]),
      minNewTokens: pick([0, 0, 1]),
      temperature: pick([0, 1e-7, 0.7, 1, 2]),
      topP: pick([1, 0.95, 0.5]),
      topK: pick([-1, 1, 40, 127]),
      minP: pick([0, 0.1]),
      frequencyPenalty: pick([0, -2, 1.5]),
      presencePenalty: pick([0, 0.5]),
      repetitionPenalty: pick([1, 1.1, 0]),
      stopTokenIds: ints(pick([0, 1, 2, 5]), pick([200, 151669])),
      ignoreEos: r() < 0.5,
      skipSpecialTokens: r() < 0.5,
      spacesBetweenSpecialTokens: r() < 0.5,
      seed: pick([null, 0, 42, 2 ** 32 + 5]),
      logitBias: pick([null, null, null, { '5': 1.5, '17': -100 }]),
      structuredOutput: pick([
        null,
        null,
        {
          constraint: { kind: 'json', schema: { type: 'object' } },
          disableAnyWhitespace: false,
          disableAdditionalProperties: false,
          whitespacePattern: null,
        },
        {
          constraint: { kind: 'regex', pattern: 'a+' },
          disableAnyWhitespace: false,
          disableAdditionalProperties: false,
          whitespacePattern: null,
        },
        {
          constraint: { kind: 'grammar', grammar: 'root ::= "x"' },
          disableAnyWhitespace: false,
          disableAdditionalProperties: false,
          whitespacePattern: null,
        },
      ] as GenerateRequest['sampling']['structuredOutput'][]),
    },
    stream: r() < 0.5,
    returnLogprob: r() < 0.3,
  };
}

test('every request the gateway builds encodes to the schema codec’s bytes (2000 random requests)', () => {
  const r = rng(9);
  for (let i = 0; i < 2000; i++) {
    const request = randomRequest(r);
    if (request.sampling.maxNewTokens !== null && request.sampling.minNewTokens > request.sampling.maxNewTokens)
      request.sampling.minNewTokens = 0;
    const req = toTokenizedGenerateReqInput(request);
    assert.deepEqual(viaEncoder(req), viaCodec(req), `request ${i}`);
  }
});

test('the protocol’s encodeAdd gives the same bytes as the codec for the common chat request', () => {
  const request: GenerateRequest = {
    requestId: 'chatcmpl-0123456789abcdef0123456789abcdef',
    promptTokenIds: [
      151644, 872, 198, 40451, 752, 911, 279, 9104, 323, 279, 14796, 13, 151645, 198, 151644, 77091, 198,
    ],
    sampling: {
      maxNewTokens: 1,
      minNewTokens: 0,
      temperature: 1,
      topP: 1,
      topK: -1,
      minP: 0,
      frequencyPenalty: 0,
      presencePenalty: 0,
      repetitionPenalty: 1,
      stopTokenIds: [151645, 151643],
      ignoreEos: true,
      skipSpecialTokens: true,
      spacesBetweenSpecialTokens: true,
      seed: null,
      logitBias: null,
      structuredOutput: null,
    },
    stream: true,
    returnLogprob: false,
  };
  const expected = viaCodec(toTokenizedGenerateReqInput(request));
  assert.ok('bytes' in expected);
  assert.equal(Buffer.from(tokenspeedProtocol.encodeAdd(request)).toString('hex'), expected.bytes);
});

test('requests the fast path leaves to the codec get the codec’s bytes or its error', () => {
  const base = toTokenizedGenerateReqInput(randomRequest(rng(1)));
  const variants: Array<[string, TokenizedGenerateReqInput]> = [
    ['logit_bias set', { ...base, sampling_params: { ...base.sampling_params, logit_bias: { '3': 0.5 } } }],
    ['custom_params set', { ...base, sampling_params: { ...base.sampling_params, custom_params: { a: 1 } } }],
    ['bigint seed', { ...base, sampling_params: { ...base.sampling_params, seed: 2n ** 63n } }],
    ['bigint token id', { ...base, input_ids: [1, 2n ** 40n, 3] }],
    [
      'an absent sampling field',
      { ...base, sampling_params: { ...base.sampling_params, temperature: undefined as unknown as number } },
    ],
    [
      'an absent optional field',
      { ...base, sampling_params: { ...base.sampling_params, regex: undefined as unknown as null } },
    ],
    ['a float token id', { ...base, input_ids: [1, 2.5] }],
    ['a negative zero created_time', { ...base, created_time: -0 }],
    ['a non-default tail field', { ...base, validation_error: 'bad' }],
    ['an undefined tail field', { ...base, bootstrap_host: undefined as unknown as null }],
    ['a list rid', { ...base, rid: ['a', 'b'] }],
    ['a lone surrogate in the rid', { ...base, rid: 'x\ud800y' }],
    ['an unsafe integer', { ...base, logprob_start_len: 2 ** 60 }],
    [
      'a string temperature',
      { ...base, sampling_params: { ...base.sampling_params, temperature: '1' as unknown as number } },
    ],
    [
      'stop strings as a list',
      { ...base, sampling_params: { ...base.sampling_params, stop_strs: ['a', 'bc'], stop: 'x' } },
    ],
    [
      'a non-string stop string',
      { ...base, sampling_params: { ...base.sampling_params, stop_strs: ['a', 3 as unknown as string] } },
    ],
    ['token_ids_logprob set', { ...base, token_ids_logprob: [1, 2] }],
    ['input_text set', { ...base, input_text: 'hello' }],
  ];
  for (const [name, req] of variants) assert.deepEqual(viaEncoder(req), viaCodec(req), name);
  // After a refused or handed-over encode the shared writer starts clean.
  assert.deepEqual(viaEncoder(base), viaCodec(base));
});

test('the common request takes the fast path (no codec walk); one it leaves to the codec does not', (t) => {
  // The byte-equality tests above would pass with the fast path removed: this one sees which path ran.
  const codec = tokenizedGenerateReqInputCodec as { encodeWith: typeof tokenizedGenerateReqInputCodec.encodeWith };
  const walk = codec.encodeWith;
  let walks = 0;
  codec.encodeWith = function (...args) {
    walks++;
    return walk.apply(this, args);
  };
  t.after(() => {
    codec.encodeWith = walk;
  });
  const base = toTokenizedGenerateReqInput(randomRequest(rng(1)));
  const common = { ...base, sampling_params: { ...base.sampling_params, logit_bias: null, custom_params: null } };
  encodeTokenizedGenerateReqInput(common);
  assert.equal(walks, 0, 'the common ADD is written by writePrefixFast');
  encodeTokenizedGenerateReqInput({
    ...common,
    sampling_params: { ...common.sampling_params, logit_bias: { '3': 0.5 } },
  });
  assert.equal(walks, 1, 'a set logit_bias goes through the codec');
});
