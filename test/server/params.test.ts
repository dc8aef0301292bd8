/**
 * Unit tests of parameter translation (gateway.md 8-9), validation-error formatting and the rank header.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DEFAULT_SAMPLING } from '../../src/protocols/types.js';
import { ApiError } from '../../src/server/errors.js';
import {
  buildSampling,
  parseAllowedTokenIds,
  parseLogitBias,
  rejectUnsupported,
  TOP_K_DISABLED,
} from '../../src/server/params.js';
import { parseDpRankHeader } from '../../src/server/pin.js';
import { formatValidationErrors, pathToParam } from '../../src/server/validation.js';

/** TokenSpeed-like: max_model_len 100, usable context 98 (engine-wire.md 4.4: the engine reserves 2). */
const ctx = {
  promptTokens: 10,
  maxModelLen: 100,
  contextTokenLimit: 98,
  vocabSize: 1000,
  promptParam: 'prompt' as const,
};

function throws400(fn: () => unknown, param: string, message?: RegExp): void {
  assert.throws(
    fn,
    (e: unknown) =>
      e instanceof ApiError && e.statusCode === 400 && e.param === param && (!message || message.test(e.message)),
  );
}

test('buildSampling: defaults, the remaining-context default limit and precedence', () => {
  const s = buildSampling({}, ctx);
  assert.deepEqual(s, { ...DEFAULT_SAMPLING, stopTokenIds: [], maxNewTokens: 88 });
  assert.equal(buildSampling({ max_tokens: 5 }, ctx).maxNewTokens, 5);
  assert.equal(buildSampling({ max_tokens: 5, max_completion_tokens: 7 }, ctx).maxNewTokens, 7);
  assert.equal(buildSampling({ max_tokens: null, max_completion_tokens: null }, ctx).maxNewTokens, 88);
  throws400(() => buildSampling({}, { ...ctx, promptTokens: 0 }), 'prompt');
});

test("buildSampling: admission against the usable context (max_model_len − the engine's reserve), not max_model_len", () => {
  // prompt + explicit limit may fill the usable context exactly, not one token more.
  assert.equal(buildSampling({ max_tokens: 88 }, ctx).maxNewTokens, 88);
  throws400(
    () => buildSampling({ max_tokens: 89 }, ctx),
    'max_tokens',
    /maximum context length is 98 tokens \(max_model_len 100 less 2 the engine reserves\)\. However, you requested 99 tokens \(10 in the prompt, 89 in the completion\)/,
  );
  throws400(() => buildSampling({ max_completion_tokens: 90 }, ctx), 'max_completion_tokens', /requested 100 tokens/);
  // The last prompt length that still gets a completion, and its default limit of 1 token.
  assert.equal(buildSampling({}, { ...ctx, promptTokens: 97 }).maxNewTokens, 1);
  throws400(
    () => buildSampling({}, { ...ctx, promptTokens: 98 }),
    'prompt',
    /resulted in 98 tokens, which leaves no room/,
  );
  throws400(
    () => buildSampling({ max_tokens: 1 }, { ...ctx, promptTokens: 99 }),
    'prompt',
    /maximum context length is 98 tokens/,
  );
  const err = (() => {
    try {
      buildSampling({}, { ...ctx, promptTokens: 98 });
    } catch (e) {
      return e as ApiError;
    }
  })();
  assert.equal(err?.toBody().error.code, 'context_length_exceeded');
  // No reserve (a vLLM-like engine): the limit is max_model_len and the message has no parenthesis.
  const vllm = { ...ctx, contextTokenLimit: 100 };
  assert.equal(buildSampling({}, vllm).maxNewTokens, 90);
  throws400(
    () => buildSampling({ max_tokens: 91 }, vllm),
    'max_tokens',
    /maximum context length is 100 tokens\. However/,
  );
});

test('buildSampling: top_k spellings and range edges', () => {
  assert.equal(buildSampling({ top_k: 0 }, ctx).topK, -1);
  assert.equal(buildSampling({ top_k: -1 }, ctx).topK, -1);
  assert.equal(buildSampling({ top_k: 127 }, ctx).topK, 127);
  assert.equal(buildSampling({ top_k: TOP_K_DISABLED }, ctx).topK, TOP_K_DISABLED);
  throws400(() => buildSampling({ top_k: 128 }, ctx), 'top_k');
  assert.equal(buildSampling({ top_p: 1 }, ctx).topP, 1);
  assert.equal(buildSampling({ repetition_penalty: 0 }, ctx).repetitionPenalty, 0);
  assert.equal(buildSampling({ temperature: 0 }, ctx).temperature, 0);
  throws400(() => buildSampling({ seed: 2 ** 60 }, ctx), 'seed');
  throws400(() => buildSampling({ stop_token_ids: [1000] }, ctx), 'stop_token_ids');
});

test('allowed_token_ids: token ids of the vocabulary, deduplicated, into the sampling options; else 400', () => {
  assert.deepEqual(buildSampling({ allowed_token_ids: [3, 1, 3] } as never, ctx).allowedTokenIds, [3, 1]);
  assert.equal(buildSampling({}, ctx).allowedTokenIds, undefined);
  assert.equal(parseAllowedTokenIds(null, 1000), null);
  throws400(() => parseAllowedTokenIds([], 1000), 'allowed_token_ids', /non-empty list/);
  throws400(() => parseAllowedTokenIds([1, 1000], 1000), 'allowed_token_ids', /allowed_token_ids\[1\] is 1000/);
  throws400(() => parseAllowedTokenIds([1.5], 1000), 'allowed_token_ids');
  throws400(() => parseAllowedTokenIds('1,2', 1000), 'allowed_token_ids');
});

test('rejectUnsupported: no-op values pass, real values are refused by name', () => {
  rejectUnsupported({
    stop: null,
    n: 1,
    logprobs: false,
    tools: [],
    tool_choice: 'none',
    response_format: { type: 'text' },
    logit_bias: {},
  });
  rejectUnsupported({
    stop: '\n',
    n: 3,
    include_stop_str_in_output: true,
    tool_choice: 'auto',
    response_format: { type: 'json_object' },
  }); // served now
  throws400(() => rejectUnsupported({ functions: [{ name: 'f' }] }), 'functions');
});

test('pathToParam and the validation formatter', () => {
  assert.equal(pathToParam(''), '');
  assert.equal(pathToParam('/messages/0/content'), 'messages[0].content');
  assert.equal(pathToParam('/stream_options/include_usage'), 'stream_options.include_usage');
  const e = formatValidationErrors(
    [
      {
        keyword: 'additionalProperties',
        instancePath: '',
        schemaPath: '#',
        params: { additionalProperty: 'foo' },
        message: 'x',
      },
    ],
    'body',
  );
  assert.equal(e.statusCode, 400);
  assert.equal(e.param, 'foo');
  const r = formatValidationErrors(
    [
      {
        keyword: 'required',
        instancePath: '/stream_options',
        schemaPath: '#',
        params: { missingProperty: 'x' },
        message: 'x',
      },
    ],
    'body',
  );
  assert.equal(r.param, 'stream_options.x');
});

test('parseDpRankHeader', () => {
  const engines = [0, 2];
  assert.equal(parseDpRankHeader(undefined, engines), undefined);
  assert.equal(parseDpRankHeader('', engines), undefined);
  assert.equal(parseDpRankHeader('2', engines), 2);
  assert.equal(parseDpRankHeader(' 0 ', engines), 0);
  assert.throws(() => parseDpRankHeader('1', engines), /one of 0, 2.*got "1"/);
  assert.throws(() => parseDpRankHeader('0x1', engines), /got "0x1"/);
  assert.throws(() => parseDpRankHeader(['0', '2'], engines), ApiError);
});

test('parseLogitBias: canonical keys in [0, vocab), clamped finite values, empty → null', () => {
  assert.equal(parseLogitBias(undefined, 1000), null);
  assert.equal(parseLogitBias({}, 1000), null);
  assert.deepEqual(parseLogitBias({ '007': 5, '999': -150, '3': 0.5 }, 1000), { '7': 5, '999': -100, '3': 0.5 });
  for (const bad of [{ '1000': 1 }, { '-1': 1 }, { abc: 1 }, { '1.5': 1 }, { '2': 'x' }, { '2': null }, [1]]) {
    throws400(() => parseLogitBias(bad, 1000), 'logit_bias');
  }
});
