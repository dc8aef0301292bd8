/**
 * `EngineCoreRequest` (engine-wire.md 5.2) and its sampling map (5.3): field order pinned byte for byte, in both
 * directions, plus the decoder's tolerance (short forms, extra trailing elements, float32/int floats, bigints).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_SAMPLING } from '../../../src/protocols/types.js';
import type { GenerateRequest, SamplingOptions } from '../../../src/protocols/types.js';
import {
  createVllmProtocol,
  decodeEngineCoreRequest,
  defaultVllmSamplingParams,
  encodeEngineCoreRequest,
  toEngineCoreRequest,
  ENGINE_CORE_REQUEST_LENGTH,
} from '../../../src/protocols/vllm/index.js';
import type { EngineCoreRequest, VllmSamplingParams } from '../../../src/protocols/vllm/index.js';
import { WireDecodeError, WireEncodeError } from '../../../src/wire/errors.js';
import { F64, bytesOf, fixmap, fixstr, hexOf, map16 } from './hex.js';
import { toPoolingParams } from '../../../src/protocols/vllm/pooling.js';

const encodeRejects = (fn: () => unknown, re: RegExp) =>
  assert.throws(
    fn,
    (e: unknown) => e instanceof WireEncodeError && re.test(e.message),
    `expected WireEncodeError ${re}`,
  );
const decodeRejects = (fn: () => unknown, re: RegExp) =>
  assert.throws(
    fn,
    (e: unknown) => e instanceof WireDecodeError && re.test(e.message),
    `expected WireDecodeError ${re}`,
  );

/**
 * The pinned ADD: request `vec-1`, prompt [1, 2, 3], max_tokens 8, temperature 0.5, top_p 0.9, everything else
 * default, arrival 1.7e9 s. Written out from the tables of 5.2/5.3 (computed, not captured upstream).
 */
const ADD_HEX =
  'dc0015' + // array16 of 21 elements (5.2: always full length)
  'a57665632d31' + // 0 request_id "vec-1"
  '93010203' + // 1 prompt_token_ids [1, 2, 3]
  'c0' + // 2 mm_features nil
  '8b' + // 3 sampling_params: map of 11 (the always-written keys, 5.3 order)
  'ab74656d7065726174757265cb3fe0000000000000' + // temperature 0.5 (float64)
  'a5746f705f70cb3feccccccccccccd' + // top_p 0.9
  'a5746f705f6b00' + // top_k 0 (−1 "disabled" → 0 "all tokens")
  'aa6d61785f746f6b656e7308' + // max_tokens 8
  'aa6d696e5f746f6b656e7300' + // min_tokens 0
  'a56d696e5f70cb0000000000000000' + // min_p 0.0
  'b16672657175656e63795f70656e616c7479cb0000000000000000' + // frequency_penalty 0.0
  'b070726573656e63655f70656e616c7479cb0000000000000000' + // presence_penalty 0.0
  'b272657065746974696f6e5f70656e616c7479cb3ff0000000000000' + // repetition_penalty 1.0
  'ae73746f705f746f6b656e5f69647390' + // stop_token_ids []
  'b35f616c6c5f73746f705f746f6b656e5f69647390' + // _all_stop_token_ids []
  'c0' + // 4 pooling_params nil
  'cb41d954fc40000000' + // 5 arrival_time 1.7e9 (float64)
  'c0c0c0c0c0' + // 6 lora_request, 7 cache_salt, 8 data_parallel_rank, 9 prompt_embeds, 10 prompt_is_token_ids
  '000000' + // 11 client_index, 12 current_wave, 13 priority
  'c0c2c0c0c0c2c0'; // 14 trace_headers, 15 resumable false, 16 external_req_id, 17 reasoning_ended,
//                      18 reasoning_parser_kwargs, 19 abort_immediately false, 20 session_id

const sampling = (s: Partial<SamplingOptions> = {}): SamplingOptions => ({
  ...DEFAULT_SAMPLING,
  maxNewTokens: 8,
  temperature: 0.5,
  topP: 0.9,
  ...s,
});
const request = (s: Partial<SamplingOptions> = {}, extra: Partial<GenerateRequest> = {}): GenerateRequest => ({
  requestId: 'vec-1',
  promptTokenIds: [1, 2, 3],
  sampling: sampling(s),
  stream: true,
  returnLogprob: false,
  ...extra,
});

const BASE_MAP: Array<[string, string]> = [
  ['temperature', F64['0.5']],
  ['top_p', F64['0.9']],
  ['top_k', '00'],
  ['max_tokens', '08'],
  ['min_tokens', '00'],
  ['min_p', F64['0']],
  ['frequency_penalty', F64['0']],
  ['presence_penalty', F64['0']],
  ['repetition_penalty', F64['1']],
  ['stop_token_ids', '90'],
  ['_all_stop_token_ids', '90'],
];

/** ADD_HEX with the sampling map replaced and element 8 (`data_parallel_rank`) set. */
function addHex(map: Array<[string, string]>, rank = 'c0'): string {
  return (
    'dc0015a57665632d3193010203c0' +
    fixmap(map) +
    'c0' +
    F64['1.7e9'] +
    'c0c0' +
    rank +
    'c0c0' +
    '000000' +
    'c0c2c0c0c0c2c0'
  );
}

/** The logical value of ADD_HEX as the decoder returns it. */
const ADD_VALUE: EngineCoreRequest = {
  request_id: 'vec-1',
  prompt_token_ids: [1, 2, 3],
  mm_features: null,
  sampling_params: { ...defaultVllmSamplingParams(), temperature: 0.5, top_p: 0.9, top_k: 0, max_tokens: 8 },
  pooling_params: null,
  arrival_time: 1.7e9,
  lora_request: null,
  cache_salt: null,
  data_parallel_rank: null,
  prompt_embeds: null,
  prompt_is_token_ids: null,
  client_index: 0,
  current_wave: 0,
  priority: 0,
  trace_headers: null,
  resumable: false,
  external_req_id: null,
  reasoning_ended: null,
  reasoning_parser_kwargs: null,
  abort_immediately: false,
  session_id: null,
};

const fixedClock = () => 1.7e12; // ms

test('EngineCoreRequest pin: value in, hex out (protocol.encodeAdd and the struct encoder)', () => {
  assert.equal(addHex(BASE_MAP), ADD_HEX, 'the helper reproduces the literal pin');
  const protocol = createVllmProtocol({ now: fixedClock });
  assert.equal(hexOf(protocol.encodeAdd(request())), ADD_HEX);
  assert.equal(hexOf(encodeEngineCoreRequest(ADD_VALUE)), ADD_HEX);
  assert.equal(ENGINE_CORE_REQUEST_LENGTH, 21);
});

test('EngineCoreRequest pin: hex in, value out', () => {
  assert.deepStrictEqual(decodeEngineCoreRequest(bytesOf(ADD_HEX)), ADD_VALUE);
});

test('data_parallel_rank (index 8) carries the pinned rank of the AddTarget; negative or fractional ranks are refused', () => {
  const protocol = createVllmProtocol({ now: fixedClock });
  const hex = addHex(BASE_MAP, '03');
  assert.equal(hexOf(protocol.encodeAdd(request(), { dpRank: 3 })), hex);
  assert.equal(decodeEngineCoreRequest(bytesOf(hex)).data_parallel_rank, 3);
  assert.equal(hexOf(protocol.encodeAdd(request(), { dpRank: 300 })), addHex(BASE_MAP, 'cd012c'));
  assert.equal(hexOf(protocol.encodeAdd(request(), { dpRank: 0 })), addHex(BASE_MAP, '00'), 'rank 0 is a pin, not nil');
  assert.equal(hexOf(protocol.encodeAdd(request(), { dpRank: null })), ADD_HEX, 'unpinned: nil');
  assert.equal(hexOf(protocol.encodeAdd(request())), ADD_HEX, 'no target: nil');
  encodeRejects(
    () => protocol.encodeAdd(request(), { dpRank: -1 }),
    /data_parallel_rank: must be an integer ≥ 0, got -1/,
  );
  encodeRejects(() => protocol.encodeAdd(request(), { dpRank: 1.5 }), /data_parallel_rank/);
  encodeRejects(
    () => encodeEngineCoreRequest({ ...ADD_VALUE, data_parallel_rank: -2 }),
    /data_parallel_rank: must be ≥ 0/,
  );
});

test('sampling map: optional keys appear only when set, in declaration order (seed, logprobs, EOS, logit_bias)', () => {
  const warnings: string[] = [];
  const protocol = createVllmProtocol({
    now: fixedClock,
    eos: { primary: 5, extras: [7], tokenizerEosIds: [] },
    onWarning: (m) => warnings.push(m),
  });
  const req = request({ seed: 42, stopTokenIds: [7, 9], logitBias: { '42': -100, '-1': 5 } }, { returnLogprob: true });
  const map: Array<[string, string]> = [
    ['temperature', F64['0.5']],
    ['top_p', F64['0.9']],
    ['top_k', '00'],
    ['seed', '2a'],
    ['max_tokens', '08'],
    ['min_tokens', '00'],
    ['logprobs', '00'],
    ['min_p', F64['0']],
    ['frequency_penalty', F64['0']],
    ['presence_penalty', F64['0']],
    ['repetition_penalty', F64['1']],
    ['stop_token_ids', '920709'],
    ['_eos_token_id', '05'],
    ['_all_stop_token_ids', '93050709'],
    ['logit_bias', '812a' + F64['-100']],
  ];
  assert.equal(hexOf(protocol.encodeAdd(req)), addHex(map));
  assert.deepEqual(warnings, ['logit_bias: negative token id -1 dropped']);
  const decoded = decodeEngineCoreRequest(bytesOf(addHex(map))).sampling_params!;
  assert.equal(decoded.seed, 42);
  assert.equal(decoded.logprobs, 0);
  assert.deepEqual(decoded.stop_token_ids, [7, 9]);
  assert.equal(decoded._eos_token_id, 5);
  assert.deepEqual(decoded._all_stop_token_ids, [5, 7, 9]);
  assert.deepEqual(decoded.logit_bias, new Map([[42, -100]]));
});

test('sampling map: allowed_token_ids goes out as a list after logit_bias (vLLM SamplingParams order)', () => {
  const protocol = createVllmProtocol({ now: fixedClock });
  const map: Array<[string, string]> = [...BASE_MAP, ['allowed_token_ids', '930a14cd012c']];
  const req = request({ allowedTokenIds: [10, 20, 300] });
  assert.equal(hexOf(protocol.encodeAdd(req)), addHex(map));
  assert.deepEqual(decodeEngineCoreRequest(bytesOf(addHex(map))).sampling_params!.allowed_token_ids, [10, 20, 300]);
});

test('sampling map: ignore_eos drops _eos_token_id but keeps EOS in _all_stop_token_ids (gateway.md 7 row 2)', () => {
  const protocol = createVllmProtocol({ now: fixedClock, eos: { primary: 5, extras: [7], tokenizerEosIds: [] } });
  const map = BASE_MAP.map(([k, v]): [string, string] =>
    k === 'stop_token_ids' ? [k, '9109'] : k === '_all_stop_token_ids' ? [k, '93050709'] : [k, v],
  );
  assert.equal(hexOf(protocol.encodeAdd(request({ stopTokenIds: [9], ignoreEos: true }))), addHex(map));
});

test('sampling map: top_k, penalties and min_p pass through as float64; an empty logit_bias is omitted', () => {
  const protocol = createVllmProtocol({ now: fixedClock });
  const req = request({
    topK: 20,
    minP: 0.25,
    frequencyPenalty: 1.5,
    presencePenalty: -100,
    repetitionPenalty: 0.5,
    logitBias: {},
  });
  const map = BASE_MAP.map(([k, v]): [string, string] => {
    switch (k) {
      case 'top_k':
        return [k, '14'];
      case 'min_p':
        return [k, F64['0.25']];
      case 'frequency_penalty':
        return [k, F64['1.5']];
      case 'presence_penalty':
        return [k, F64['-100']];
      case 'repetition_penalty':
        return [k, F64['0.5']];
      default:
        return [k, v];
    }
  });
  assert.equal(hexOf(protocol.encodeAdd(req)), addHex(map));
  // Integral values of float fields are still float64: temperature 1 is cb 3ff0..., never 01.
  const one = hexOf(protocol.encodeAdd(request({ temperature: 1, topP: 1 })));
  assert.ok(one.includes(fixstr('temperature') + F64['1']) && one.includes(fixstr('top_p') + F64['1']));
});

test('max_tokens is always sent: the remaining context when the request sets no limit (gateway.md 9.1)', () => {
  const protocol = createVllmProtocol({ now: fixedClock, maxModelLen: 100 });
  const map = BASE_MAP.map(([k, v]): [string, string] => (k === 'max_tokens' ? [k, '61'] : [k, v]));
  assert.equal(hexOf(protocol.encodeAdd(request({ maxNewTokens: null }))), addHex(map), '100 − 3 = 97');
  assert.equal(
    decodeEngineCoreRequest(protocol.encodeAdd(request({ maxNewTokens: 8 }))).sampling_params!.max_tokens,
    8,
  );
  const late = createVllmProtocol({ now: fixedClock, maxModelLen: () => 2 });
  assert.equal(
    decodeEngineCoreRequest(late.encodeAdd(request({ maxNewTokens: null }))).sampling_params!.max_tokens,
    0,
    'saturates at 0',
  );
  encodeRejects(
    () => createVllmProtocol({ now: fixedClock }).encodeAdd(request({ maxNewTokens: null })),
    /sampling_params\.max_tokens: no token limit and no max_model_len .*16 tokens/,
  );
  encodeRejects(
    () =>
      createVllmProtocol({ now: fixedClock, maxModelLen: () => undefined }).encodeAdd(request({ maxNewTokens: null })),
    /max_tokens/,
  );
});

test('encodeAdd refuses what the wire cannot carry, naming the field', () => {
  const p = createVllmProtocol({ now: fixedClock });
  encodeRejects(
    () => p.encodeAdd(request({}, { requestId: '' })),
    /EngineCoreRequest\.request_id: request id must be a non-empty string/,
  );
  encodeRejects(
    () => p.encodeAdd(request({}, { promptTokenIds: [1, -2] })),
    /prompt_token_ids\[1\]: token id must be an integer ≥ 0/,
  );
  encodeRejects(() => p.encodeAdd(request({}, { promptTokenIds: [1.5] })), /prompt_token_ids\[0\]/);
  encodeRejects(() => p.encodeAdd(request({ maxNewTokens: 2.5 })), /sampling_params\.max_tokens: expected an integer/);
  encodeRejects(() => p.encodeAdd(request({ maxNewTokens: -1 })), /max_tokens: -1 must be ≥ 0/);
  encodeRejects(() => p.encodeAdd(request({ topK: -2 })), /sampling_params\.top_k/);
  encodeRejects(
    () => p.encodeAdd(request({ temperature: NaN })),
    /sampling_params\.temperature: expected a finite number/,
  );
  encodeRejects(() => p.encodeAdd(request({ stopTokenIds: [3, -1] })), /stop_token_ids\[1\]: token id must be ≥ 0/);
  encodeRejects(() => p.encodeAdd(request({ seed: 2 ** 60 })), /sampling_params\.seed: expected an integer/);
  encodeRejects(
    () => p.encodeAdd(request({ logitBias: { abc: 1 } })),
    /logit_bias\["abc"\]: key must be a decimal token id/,
  );
  encodeRejects(() => p.encodeAdd(request({ logitBias: { '3': Infinity } })), /logit_bias\["3"\]/);
  encodeRejects(() => createVllmProtocol({ now: () => NaN }).encodeAdd(request()), /arrival_time/);
  encodeRejects(() => encodeEngineCoreRequest({ ...ADD_VALUE, prompt_embeds: [1] }), /prompt_embeds: must be nil/);
  encodeRejects(() => encodeEngineCoreRequest({ ...ADD_VALUE, client_index: 0.5 }), /EngineCoreRequest\.client_index/);
});

test('toEngineCoreRequest: arrival_time in seconds, stream has no vLLM field, the prompt is copied', () => {
  const prompt = [4, 5];
  const wire = toEngineCoreRequest(request({}, { promptTokenIds: prompt, stream: false }), { arrivalTime: 12.5 });
  assert.equal(wire.arrival_time, 12.5);
  assert.notEqual(wire.prompt_token_ids, prompt);
  assert.deepEqual(wire.prompt_token_ids, [4, 5]);
  const streamed = toEngineCoreRequest(request({}, { promptTokenIds: prompt, stream: true }), { arrivalTime: 12.5 });
  assert.deepStrictEqual(streamed, wire);
});

test('priority (index 13): the band value on the wire, 0 when it names none', () => {
  const p = createVllmProtocol({ now: () => 1 });
  const at13 = (bytes: Uint8Array) => decodeEngineCoreRequest(bytes).priority;
  assert.equal(at13(p.encodeAdd(request())), 0);
  assert.equal(at13(p.encodeAdd(request({}, { priority: -1 }))), -1);
  assert.equal(at13(p.encodeAdd(request({}, { priority: 1 }))), 1);
  encodeRejects(() => p.encodeAdd(request({}, { priority: 0.5 })), /priority/);
});

test('trace_headers (index 14): the W3C headers of the request span, nil when the request is not traced', () => {
  const p = createVllmProtocol({ now: () => 1 });
  const at14 = (bytes: Uint8Array) => decodeEngineCoreRequest(bytes).trace_headers;
  assert.equal(at14(p.encodeAdd(request())), null);
  const trace = { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', tracestate: 'k=v' };
  assert.deepEqual(at14(p.encodeAdd(request({}, { trace }))), trace);
  encodeRejects(() => p.encodeAdd(request({}, { trace: { traceparent: 1 as never } })), /trace_headers/);
});

test('decode: vLLM short forms (6 required elements), the 20-element pre-session_id form, extra trailing elements', () => {
  const head = 'a5766563 2d31 93010203 c0 80 c0'.replace(/\s+/g, '') + F64['1.7e9'];
  const six = decodeEngineCoreRequest(bytesOf('96' + head));
  assert.deepStrictEqual(six, { ...ADD_VALUE, sampling_params: defaultVllmSamplingParams() });
  assert.equal(six.sampling_params!.max_tokens, 16, 'an empty map decodes to max_tokens 16 (5.3)');
  const twenty = ADD_HEX.replace(/^dc0015/, 'dc0014').replace(/c0$/, '');
  assert.deepStrictEqual(decodeEngineCoreRequest(bytesOf(twenty)), ADD_VALUE);
  const longer = ADD_HEX.replace(/^dc0015/, 'dc0017') + 'a378797a' + '82a161c0a16293c0c0c0';
  assert.deepStrictEqual(decodeEngineCoreRequest(bytesOf(longer)), ADD_VALUE);
  decodeRejects(
    () => decodeEngineCoreRequest(bytesOf('95' + head.slice(0, -18))),
    /EngineCoreRequest: expected array of at least length 6, got 5 \(required field arrival_time missing\)/,
  );
  decodeRejects(() => decodeEngineCoreRequest(bytesOf(ADD_HEX + '00')), /trailing characters/);
  decodeRejects(() => decodeEngineCoreRequest(bytesOf(ADD_HEX.slice(0, -4))), /truncated/);
  decodeRejects(() => decodeEngineCoreRequest(bytesOf('81a161c0')), /EngineCoreRequest: expected array, got map/);
});

test('decode: the sparse sampling map of SMG test decodes_sampling_params_with_omitted_defaults', () => {
  const map = fixmap([
    ['stop_token_ids', '91ce0002505b'],
    ['skip_reading_prefix_cache', 'c2'],
  ]); // [151643], false
  const hex = '96a5766563 2d31 90 c0'.replace(/\s+/g, '') + map + 'c0' + F64['0'];
  const sp = decodeEngineCoreRequest(bytesOf(hex)).sampling_params!;
  const expected: VllmSamplingParams = {
    ...defaultVllmSamplingParams(),
    stop_token_ids: [151643],
    skip_reading_prefix_cache: false,
  };
  assert.deepStrictEqual(sp, expected);
  assert.deepEqual([sp.temperature, sp.top_p, sp.top_k, sp.max_tokens], [1, 1, 0, 16]);
});

test('decode: float fields accept float32 and integers; int fields refuse floats; unknown keys are skipped', () => {
  const map = fixmap([
    ['temperature', 'ca3f000000'],
    ['top_p', '01'],
    ['min_p', 'ca3e800000'],
    ['future_key', '93c0c0c0'],
  ]);
  const hex = '96a5766563 2d31 90 c0'.replace(/\s+/g, '') + map + 'c0' + 'ca4ecaa7e2';
  const r = decodeEngineCoreRequest(bytesOf(hex));
  assert.equal(r.sampling_params!.temperature, 0.5);
  assert.equal(r.sampling_params!.top_p, 1);
  assert.equal(r.sampling_params!.min_p, 0.25);
  assert.equal(r.arrival_time, 1.7e9, 'float32 arrival time (exactly representable here)');
  decodeRejects(
    () =>
      decodeEngineCoreRequest(
        bytesOf('96a5766563 2d31 90 c0'.replace(/\s+/g, '') + fixmap([['max_tokens', F64['1']]]) + 'c0' + F64['0']),
      ),
    /sampling_params\.max_tokens: expected int, got float64/,
  );
  decodeRejects(
    () =>
      decodeEngineCoreRequest(
        bytesOf('96a5766563 2d31 90 c0'.replace(/\s+/g, '') + fixmap([['temperature', 'a131']]) + 'c0' + F64['0']),
      ),
    /sampling_params\.temperature: expected float, got str/,
  );
  decodeRejects(
    () => decodeEngineCoreRequest(bytesOf('9601' + '90c080c0' + F64['0'])),
    /EngineCoreRequest\.request_id: expected str, got int/,
  );
});

test('bigint safety: integers beyond ±(2^53−1) decode as bigint and re-encode in the same smallest form', () => {
  const seed = 'cf0020000000000001'; // 2^53 + 1
  const map = fixmap([
    ['seed', seed],
    ['stop_token_ids', '91ce00010000'],
  ]);
  const hex = '96a5766563 2d31 91cf0000000100000000 c0'.replace(/\s+/g, '') + map + 'c0' + F64['0'];
  const r = decodeEngineCoreRequest(bytesOf(hex));
  assert.equal(r.sampling_params!.seed, 9007199254740993n);
  assert.deepEqual(r.prompt_token_ids, [4294967296]);
  assert.deepEqual(r.sampling_params!.stop_token_ids, [65536]);
  const again = decodeEngineCoreRequest(encodeEngineCoreRequest(r));
  assert.deepStrictEqual(again, r);
  assert.ok(hexOf(encodeEngineCoreRequest(r)).includes(fixstr('seed') + seed));
});

test('structured_outputs, repetition_detection, LoRA and the other optional fields round-trip', () => {
  const full: EngineCoreRequest = {
    ...ADD_VALUE,
    mm_features: [],
    sampling_params: {
      ...ADD_VALUE.sampling_params!,
      thinking_token_budget: 4,
      prompt_logprobs: 1,
      repetition_detection: { max_pattern_size: 8, min_pattern_size: 0, min_count: 3 },
      allowed_token_ids: [1, 2],
      _bad_words_token_ids: [[5, 6]],
      logprob_token_ids: [9],
      structured_outputs: {
        json: { type: 'object' },
        regex: null,
        choice: null,
        grammar: null,
        json_object: null,
        structural_tag: null,
        disable_any_whitespace: true,
        disable_additional_properties: false,
        whitespace_pattern: null,
        _backend: 'guidance',
      },
      skip_reading_prefix_cache: true,
      extra_args: { k: 'v' },
    },
    lora_request: {
      lora_name: 'a',
      lora_int_id: 1,
      lora_path: '/p',
      base_model_name: null,
      tensorizer_config_dict: null,
      load_inplace: false,
      is_3d_lora_weight: false,
    },
    cache_salt: 'salt',
    prompt_is_token_ids: [true],
    client_index: 2,
    current_wave: 3,
    priority: -1,
    trace_headers: { traceparent: 'x' },
    resumable: true,
    external_req_id: 'ext',
    reasoning_ended: false,
    reasoning_parser_kwargs: { chat_template_kwargs: { enable_thinking: true } },
    abort_immediately: true,
    session_id: 's',
  };
  assert.deepStrictEqual(decodeEngineCoreRequest(encodeEngineCoreRequest(full)), full);
});

test('EngineCoreRequest pin with every field distinct: each index 0..20 lands in its own field (both directions)', () => {
  const hex =
    'dc0015' +
    'a172' + // 0 request_id "r"
    '9101' + // 1 prompt_token_ids [1]
    '90' + // 2 mm_features []
    'c0' + // 3 sampling_params nil
    '9ac3c0c0c0a5656d626564c2c2c0c002' + // 4 pooling_params: PoolingParams(task="embed", use_activation=True, ...)
    F64['1.5'] + // 5 arrival_time 1.5
    '97a16101a22f70c0c0c2c2' + // 6 lora_request ["a", 1, "/p", nil, nil, false, false]
    'a173' + // 7 cache_salt "s"
    '02' + // 8 data_parallel_rank 2
    'c0' + // 9 prompt_embeds nil (the gateway never sends anything else)
    '91c3' + // 10 prompt_is_token_ids [true]
    '03' +
    '04' +
    '05' + // 11 client_index 3, 12 current_wave 4, 13 priority 5
    '81a174a175' + // 14 trace_headers {t: "u"}
    'c3' + // 15 resumable true
    'a178' + // 16 external_req_id "x"
    'c0' + // 17 reasoning_ended nil (three bool-ish fields, three different values)
    fixmap([['chat_template_kwargs', '80']]) + // 18 reasoning_parser_kwargs
    'c2' + // 19 abort_immediately false
    'a17a'; // 20 session_id "z"
  const value: EngineCoreRequest = {
    request_id: 'r',
    prompt_token_ids: [1],
    mm_features: [],
    sampling_params: null,
    pooling_params: toPoolingParams({ task: 'embed', dimensions: null, normalize: true }),
    arrival_time: 1.5,
    lora_request: {
      lora_name: 'a',
      lora_int_id: 1,
      lora_path: '/p',
      base_model_name: null,
      tensorizer_config_dict: null,
      load_inplace: false,
      is_3d_lora_weight: false,
    },
    cache_salt: 's',
    data_parallel_rank: 2,
    prompt_embeds: null,
    prompt_is_token_ids: [true],
    client_index: 3,
    current_wave: 4,
    priority: 5,
    trace_headers: { t: 'u' },
    resumable: true,
    external_req_id: 'x',
    reasoning_ended: null,
    reasoning_parser_kwargs: { chat_template_kwargs: {} },
    abort_immediately: false,
    session_id: 'z',
  };
  assert.deepStrictEqual(decodeEngineCoreRequest(bytesOf(hex)), value);
  assert.equal(hexOf(encodeEngineCoreRequest(value)), hex);
  const embeds = hex.replace(/02c091c3/, '02a16591c3');
  assert.equal(decodeEngineCoreRequest(bytesOf(embeds)).prompt_embeds, 'e', 'index 9 is prompt_embeds');
});

test('sampling map pin with all 24 keys set: declaration order of 5.3, both directions', () => {
  const hex = map16([
    ['temperature', F64['0.5']],
    ['top_p', F64['0.9']],
    ['top_k', '05'],
    ['seed', '2a'],
    ['max_tokens', '08'],
    ['min_tokens', '01'],
    ['thinking_token_budget', '02'],
    ['logprobs', 'ff'],
    ['prompt_logprobs', '00'],
    ['min_p', F64['0.25']],
    ['frequency_penalty', F64['1.5']],
    ['presence_penalty', F64['-100']],
    ['repetition_penalty', F64['1']],
    [
      'repetition_detection',
      fixmap([
        ['max_pattern_size', '04'],
        ['min_pattern_size', '01'],
        ['min_count', '02'],
      ]),
    ],
    ['stop_token_ids', '9107'],
    ['_eos_token_id', '05'],
    ['_all_stop_token_ids', '920507'],
    ['logit_bias', '8101' + F64['0.5']],
    ['allowed_token_ids', '9101'],
    ['_bad_words_token_ids', '91920203'],
    [
      'structured_outputs',
      fixmap([
        ['regex', 'a2612b'],
        ['_backend', 'a867756964616e6365'],
      ]),
    ],
    ['logprob_token_ids', '9104'],
    ['skip_reading_prefix_cache', 'c2'],
    ['extra_args', '81a17801'],
  ]);
  const value: VllmSamplingParams = {
    temperature: 0.5,
    top_p: 0.9,
    top_k: 5,
    seed: 42,
    max_tokens: 8,
    min_tokens: 1,
    thinking_token_budget: 2,
    logprobs: -1,
    prompt_logprobs: 0,
    min_p: 0.25,
    frequency_penalty: 1.5,
    presence_penalty: -100,
    repetition_penalty: 1,
    repetition_detection: { max_pattern_size: 4, min_pattern_size: 1, min_count: 2 },
    stop_token_ids: [7],
    _eos_token_id: 5,
    _all_stop_token_ids: [5, 7],
    logit_bias: new Map([[1, 0.5]]),
    allowed_token_ids: [1],
    _bad_words_token_ids: [[2, 3]],
    structured_outputs: {
      json: null,
      regex: 'a+',
      choice: null,
      grammar: null,
      json_object: null,
      structural_tag: null,
      disable_any_whitespace: false,
      disable_additional_properties: false,
      whitespace_pattern: null,
      _backend: 'guidance',
    },
    logprob_token_ids: [4],
    skip_reading_prefix_cache: false,
    extra_args: { x: 1 },
  };
  const req = (map: string) => '96a172' + '90' + 'c0' + map + 'c0' + F64['0'];
  assert.deepStrictEqual(decodeEngineCoreRequest(bytesOf(req(hex))).sampling_params, value);
  const encoded = hexOf(
    encodeEngineCoreRequest({
      ...ADD_VALUE,
      request_id: 'r',
      prompt_token_ids: [],
      arrival_time: 0,
      sampling_params: value,
    }),
  );
  assert.ok(encoded.startsWith('dc0015a17290c0' + hex + 'c0' + F64['0']), encoded);
});
