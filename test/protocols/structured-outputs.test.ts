/**
 * Structured-output constraints and top-k logprobs on both wires (issue #11; engine-wire.md 4.4, 5.3, 5.6;
 * gateway.md 8): the engine-neutral constraint onto vLLM `structured_outputs` (round trip through the sampling map
 * codec, `_backend` derived) and onto TokenSpeed's grammar fields (choice → an escaped regex alternation, JSON object →
 * the `{"type":"object"}` schema, vLLM-only options refused); `logprobs = k` on the vLLM request and ranked candidates
 * read back from the output tensors.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DEFAULT_SAMPLING, type GenerateRequest, type StructuredOutput } from '../../src/protocols/types.js';
import {
  toTokenSpeedGrammar,
  toTokenizedGenerateReqInput,
  tokenSpeedStructuredOutputProblem,
} from '../../src/protocols/tokenspeed/index.js';
import {
  decodeEngineCoreRequest,
  encodeEngineCoreRequest,
  toEngineCoreRequest,
} from '../../src/protocols/vllm/request.js';
import { candidateLogprobs } from '../../src/protocols/vllm/tensors.js';
import { WireEncodeError } from '../../src/wire/errors.js';

const so = (constraint: StructuredOutput['constraint'], opts: Partial<StructuredOutput> = {}): StructuredOutput => ({
  constraint,
  disableAnyWhitespace: false,
  disableAdditionalProperties: false,
  whitespacePattern: null,
  ...opts,
});

const request = (structuredOutput: StructuredOutput | null, extra: Partial<GenerateRequest> = {}): GenerateRequest => ({
  requestId: 'r1',
  promptTokenIds: [1, 2, 3],
  sampling: { ...DEFAULT_SAMPLING, stopTokenIds: [], maxNewTokens: 8, structuredOutput },
  stream: true,
  returnLogprob: false,
  ...extra,
});

const vllmRoundTrip = (r: GenerateRequest) =>
  decodeEngineCoreRequest(encodeEngineCoreRequest(toEngineCoreRequest(r, { arrivalTime: 1 }))).sampling_params!;

test('vLLM: every constraint kind reaches structured_outputs, with _backend and the options', () => {
  const schema = { type: 'object', properties: { a: { type: 'integer' } } };
  const cases: Array<[StructuredOutput, Record<string, unknown>]> = [
    [so({ kind: 'json', schema }), { json: schema, _backend: 'guidance' }],
    [so({ kind: 'json_object' }), { json_object: true }],
    [so({ kind: 'regex', pattern: '[0-9]+' }), { regex: '[0-9]+' }],
    [so({ kind: 'choice', choices: ['yes', 'no'] }), { choice: ['yes', 'no'] }],
    [so({ kind: 'grammar', grammar: 'root ::= "a"' }), { grammar: 'root ::= "a"' }],
    [
      so({ kind: 'structural_tag', tag: '{"type":"structural_tag"}' }),
      { structural_tag: '{"type":"structural_tag"}', _backend: 'xgrammar' },
    ],
    [
      so({ kind: 'json_object' }, { disableAnyWhitespace: true, whitespacePattern: ' ?' }),
      { disable_any_whitespace: true, whitespace_pattern: ' ?' },
    ],
  ];
  for (const [input, expected] of cases) {
    const got = vllmRoundTrip(request(input)).structured_outputs as unknown as Record<string, unknown>;
    for (const [k, v] of Object.entries(expected)) assert.deepEqual(got[k], v, `${input.constraint.kind}.${k}`);
  }
  assert.equal(vllmRoundTrip(request(null)).structured_outputs, null, 'no constraint: key absent');
});

test('TokenSpeed: grammar fields, exactly one set; equivalents for choice and JSON object; options refused', () => {
  assert.deepEqual(toTokenSpeedGrammar(so({ kind: 'json', schema: { type: 'string' } })), {
    json_schema: '{"type":"string"}',
    regex: null,
    ebnf: null,
    structural_tag: null,
  });
  assert.equal(toTokenSpeedGrammar(so({ kind: 'json', schema: 'not json {' })).json_schema, 'not json {');
  assert.equal(toTokenSpeedGrammar(so({ kind: 'json_object' })).json_schema, '{"type":"object"}');
  const choice = toTokenSpeedGrammar(so({ kind: 'choice', choices: ['a.b', 'c|d', '(x)'] })).regex!;
  assert.equal(choice, '(a\\.b|c\\|d|\\(x\\))');
  for (const s of ['a.b', 'c|d', '(x)']) assert.match(s, new RegExp(`^${choice}$`));
  assert.doesNotMatch('aXb', new RegExp(`^${choice}$`));
  assert.equal(toTokenSpeedGrammar(so({ kind: 'grammar', grammar: 'g' })).ebnf, 'g');
  assert.equal(toTokenSpeedGrammar(so({ kind: 'structural_tag', tag: 't' })).structural_tag, 't');
  const sp = toTokenizedGenerateReqInput(request(so({ kind: 'regex', pattern: 'x+' }))).sampling_params;
  assert.equal(sp.regex, 'x+');
  assert.equal(sp.json_schema, null);
  assert.match(
    tokenSpeedStructuredOutputProblem(so({ kind: 'json_object' }, { disableAdditionalProperties: true }))!,
    /disable_additional_properties/,
  );
  assert.throws(() => toTokenSpeedGrammar(so({ kind: 'json_object' }, { whitespacePattern: ' ' })), WireEncodeError);
});

test('top-k logprobs: vLLM sends logprobs = k; TokenSpeed refuses k > 0; candidates are columns 1..K in rank order', () => {
  assert.equal(vllmRoundTrip(request(null, { returnLogprob: true, topLogprobs: 5 })).logprobs, 5);
  assert.equal(vllmRoundTrip(request(null, { returnLogprob: true })).logprobs, 0);
  assert.throws(
    () => toTokenizedGenerateReqInput(request(null, { returnLogprob: true, topLogprobs: 2 })),
    /top_logprobs_num/,
  );
  const candidates = candidateLogprobs({
    token_ids: [
      [7, 7, 9],
      [4, 5, 4],
    ],
    logprobs: [
      [-0.1, -0.1, -2],
      [-1, -0.5, -1],
    ],
    ranks: [1, 2],
    cu_num_generated_tokens: null,
  });
  assert.deepEqual(candidates, [
    [
      { id: 7, logprob: -0.1 },
      { id: 9, logprob: -2 },
    ],
    [
      { id: 5, logprob: -0.5 },
      { id: 4, logprob: -1 },
    ],
  ]);
});
