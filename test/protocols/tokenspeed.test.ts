/** TokenSpeed messages beyond the golden vectors (engine-wire.md 4.3-4.9). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_SAMPLING } from '../../src/protocols/types.js';
import type { GenerateRequest, SamplingOptions } from '../../src/protocols/types.js';
import {
  TOP_K_DISABLED,
  batchToEngineBatch,
  createTokenSpeedProtocol,
  decodeAbortPayload,
  decodeTokenizedGenerateReqInput,
  defaultSamplingParams,
  encodeAbortPayload,
  encodeBatchTokenIDOutSlim,
  encodeTokenizedGenerateReqInput,
  engineAdmissionError,
  normalizeSamplingParams,
  toFinishReason,
  toTokenSpeedSamplingParams,
  toTokenizedGenerateReqInput,
  tokenspeedProtocol,
  validateSamplingParams,
  TOKENSPEED_RESERVED_CONTEXT_TOKENS,
} from '../../src/protocols/tokenspeed/index.js';
import type { BatchTokenIDOutSlim, TokenSpeedSamplingParams } from '../../src/protocols/tokenspeed/index.js';
import { WireDecodeError, WireEncodeError } from '../../src/wire/errors.js';

const encodeRejects = (fn: () => unknown, re: RegExp) =>
  assert.throws(fn, (e: unknown) => e instanceof WireEncodeError && re.test(e.message));
const decodeRejects = (fn: () => unknown, re: RegExp) =>
  assert.throws(fn, (e: unknown) => e instanceof WireDecodeError && re.test(e.message));

const request = (sampling: Partial<SamplingOptions> = {}, extra: Partial<GenerateRequest> = {}): GenerateRequest => ({
  requestId: 'r-1',
  promptTokenIds: [5, 6],
  sampling: { ...DEFAULT_SAMPLING, ...sampling },
  stream: false,
  returnLogprob: false,
  ...extra,
});

test('reservedContextTokens: 2, from the engine clamp (context_len − 1) − prompt_len − 1 (engine-wire.md 4.4)', () => {
  assert.equal(TOKENSPEED_RESERVED_CONTEXT_TOKENS, 2);
  assert.equal(tokenspeedProtocol.reservedContextTokens, 2);
  assert.equal(createTokenSpeedProtocol({ vocabSize: 10 }).reservedContextTokens, 2);
  // The clamp's bound for prompt + completion: with max_model_len 100 a prompt of 90 gets at most 8 new tokens.
  const maxModelLen = 100,
    promptLen = 90;
  const clamp = maxModelLen - 1 - promptLen - 1;
  assert.equal(promptLen + clamp, maxModelLen - tokenspeedProtocol.reservedContextTokens);
});

test('normalizeSamplingParams: the four gateway steps, and idempotence', () => {
  const raw: TokenSpeedSamplingParams = { ...defaultSamplingParams(), stop_token_ids: [], temperature: 0, stop: ['x'] };
  const n = normalizeSamplingParams(raw);
  assert.equal(n.stop_token_ids, null);
  assert.equal(n.temperature, 1);
  assert.equal(n.top_k, 1, 'greedy');
  assert.deepEqual(n.stop_strs, []);
  assert.equal(n.stop_str_max_len, 0);
  assert.equal(n.is_normalized, true);
  assert.deepEqual(raw.stop_token_ids, [], 'input not mutated');
  assert.deepStrictEqual(normalizeSamplingParams(n), n);
  const neg = normalizeSamplingParams({ ...defaultSamplingParams(), temperature: -0.5 });
  assert.deepEqual([neg.temperature, neg.top_k], [1, 1]);
  const topk = normalizeSamplingParams({ ...defaultSamplingParams(), temperature: 0.7 });
  assert.deepEqual([topk.temperature, topk.top_k], [0.7, TOP_K_DISABLED]);
  assert.deepStrictEqual(normalizeSamplingParams(topk), topk);
  assert.equal(normalizeSamplingParams({ ...defaultSamplingParams(), top_k: 5, temperature: 1e-6 }).top_k, 5);
  for (const t of [0, 1e-7, 0.3, 1, 2]) {
    for (const k of [-1, 1, 40, TOP_K_DISABLED]) {
      const once = normalizeSamplingParams({
        ...defaultSamplingParams(),
        temperature: t,
        top_k: k,
        stop_token_ids: [1],
      });
      assert.deepStrictEqual(normalizeSamplingParams(once), once, `t=${t} k=${k}`);
    }
  }
});

test('toTokenSpeedSamplingParams: maps every SamplingOptions field (4.4 "gateway sends")', () => {
  const s: SamplingOptions = {
    maxNewTokens: 100,
    minNewTokens: 2,
    temperature: 0.8,
    topP: 0.95,
    topK: 20,
    minP: 0.05,
    frequencyPenalty: 0.1,
    presencePenalty: -0.2,
    repetitionPenalty: 1.1,
    stopTokenIds: [7, 9],
    ignoreEos: true,
    skipSpecialTokens: false,
    spacesBetweenSpecialTokens: false,
    seed: 1234,
    logitBias: { '42': -100 },
  };
  assert.deepStrictEqual(toTokenSpeedSamplingParams(s), {
    max_new_tokens: 100,
    stop: null,
    stop_token_ids: [7, 9],
    temperature: 0.8,
    top_p: 0.95,
    top_k: 20,
    min_p: 0.05,
    frequency_penalty: 0.1,
    presence_penalty: -0.2,
    repetition_penalty: 1.1,
    min_new_tokens: 2,
    json_schema: null,
    regex: null,
    ebnf: null,
    structural_tag: null,
    ignore_eos: true,
    skip_special_tokens: false,
    spaces_between_special_tokens: false,
    no_stop_trim: false,
    thinking_budget: null,
    custom_params: null,
    stream_interval: null,
    logit_bias: { '42': -100 },
    seed: 1234,
    logprobs: null,
    n: 1,
    stop_strs: [],
    stop_str_max_len: 0,
    is_normalized: true,
  });
  const d = toTokenSpeedSamplingParams(DEFAULT_SAMPLING);
  assert.deepEqual([d.top_k, d.stop_token_ids, d.max_new_tokens, d.seed], [TOP_K_DISABLED, null, null, null]);
});

test('validateSamplingParams: every check of the 4.6 table names its field', () => {
  const ok = toTokenSpeedSamplingParams(DEFAULT_SAMPLING);
  validateSamplingParams(ok);
  const cases: [Partial<TokenSpeedSamplingParams>, RegExp][] = [
    [{ temperature: -1 }, /\.temperature: /],
    [{ temperature: NaN }, /\.temperature: /],
    [{ top_p: 0 }, /\.top_p: 0 is outside \(0, 1\]/],
    [{ top_p: 1.01 }, /\.top_p: /],
    [{ min_p: -0.1 }, /\.min_p: /],
    [{ min_p: 1.5 }, /\.min_p: /],
    [{ top_k: 0 }, /\.top_k: 0 is not/],
    [{ top_k: 128 }, /\.top_k: 128 is not/],
    [{ top_k: -2 }, /\.top_k: /],
    [{ frequency_penalty: 2.5 }, /\.frequency_penalty: /],
    [{ presence_penalty: -2.5 }, /\.presence_penalty: /],
    [{ repetition_penalty: -0.1 }, /\.repetition_penalty: /],
    [{ repetition_penalty: 2.1 }, /\.repetition_penalty: /],
    [{ max_new_tokens: -1 }, /\.max_new_tokens: -1 must be ≥ 0/],
    [{ min_new_tokens: -1 }, /\.min_new_tokens: -1 must be ≥ 0/],
    [{ max_new_tokens: 4, min_new_tokens: 9 }, /\.min_new_tokens: 9 exceeds max_new_tokens 4/],
    [{ logit_bias: { '-1': 1 } }, /\.logit_bias\["-1"\]: key must be a decimal token id/],
    [{ logit_bias: { abc: 1 } }, /\.logit_bias\["abc"\]/],
    [{ logit_bias: { '5': Infinity } }, /\.logit_bias\["5"\]: bias Infinity must be a finite number/],
    [{ logprobs: 5 }, /\.logprobs: 5 must be nil or 0/],
    [{ json_schema: '{}', regex: 'a' }, /\.regex: at most one grammar may be set \(got json_schema, regex\)/],
    [{ regex: 'a', ebnf: 'b' }, /\.ebnf: /],
    [{ n: 2 }, /\.n: 2 must be 1/],
    [{ n: 0 }, /\.n: 0 must be 1/],
  ];
  for (const [patch, re] of cases) {
    encodeRejects(() => validateSamplingParams({ ...ok, ...patch }), re);
  }
  for (const patch of [
    { top_k: -1 },
    { top_k: 1 },
    { top_k: 127 },
    { top_k: 2n ** 30n },
    { logprobs: 0 },
    { max_new_tokens: 0, min_new_tokens: 0 },
    { temperature: 0 },
    { json_schema: '{}', structural_tag: 't' },
  ]) {
    validateSamplingParams({ ...ok, ...patch });
  }
  validateSamplingParams({ ...ok, logit_bias: { '31999': 1 } }, { vocabSize: 32000 });
  encodeRejects(
    () => validateSamplingParams({ ...ok, logit_bias: { '32000': 1 } }, { vocabSize: 32000 }),
    /logit_bias\["32000"\]: key must be a decimal token id in \[0, 32000\)/,
  );
});

test('encodeAdd: the 11-element prefix with the full 29-element normalized SamplingParams', () => {
  const bytes = tokenspeedProtocol.encodeAdd(
    request({ temperature: 0, maxNewTokens: 16 }, { stream: true, returnLogprob: true }),
  );
  assert.equal(bytes[0], 0x9b, 'fixarray of 11');
  const decoded = decodeTokenizedGenerateReqInput(bytes);
  assert.equal(decoded.rid, 'r-1');
  assert.deepEqual(decoded.input_ids, [5, 6]);
  assert.equal(decoded.stream, true);
  assert.equal(decoded.return_logprob, true);
  assert.equal(decoded.logprob_start_len, -1);
  assert.deepEqual([decoded.sampling_params.temperature, decoded.sampling_params.top_k], [1, 1], 'greedy');
  assert.equal(decoded.sampling_params.is_normalized, true);
  assert.equal(decoded.data_parallel_rank, null, 'no rank field is sent');
  const samplingHeader = Buffer.from(bytes).indexOf(Buffer.from('dc001d', 'hex'));
  assert.ok(samplingHeader > 0, 'SamplingParams is sent in full (dc 001d)');
  // Fields past element 10 are defaults, so the full form decodes to the same request.
  const req = toTokenizedGenerateReqInput(request());
  assert.deepStrictEqual(decodeTokenizedGenerateReqInput(encodeTokenizedGenerateReqInput(req, { form: 'full' })), req);
});

test('encodeAdd: refuses what TokenSpeed would silently abort or cannot decode, naming the field', () => {
  encodeRejects(
    () => tokenspeedProtocol.encodeAdd(request({ topP: 0 })),
    /^TokenizedGenerateReqInput\.sampling_params\.top_p: /,
  );
  encodeRejects(() => tokenspeedProtocol.encodeAdd(request({ topK: 0 })), /sampling_params\.top_k: 0/);
  encodeRejects(() => tokenspeedProtocol.encodeAdd(request({ topK: 200 })), /sampling_params\.top_k: 200/);
  encodeRejects(
    () => tokenspeedProtocol.encodeAdd(request({ maxNewTokens: 3, minNewTokens: 5 })),
    /sampling_params\.min_new_tokens/,
  );
  encodeRejects(
    () => tokenspeedProtocol.encodeAdd(request({ maxNewTokens: 2.5 })),
    /sampling_params\.max_new_tokens: expected an integer, got 2\.5/,
  );
  encodeRejects(() => tokenspeedProtocol.encodeAdd(request({ seed: -1 })), /sampling_params\.seed: seed must be ≥ 0/);
  encodeRejects(
    () => tokenspeedProtocol.encodeAdd(request({ stopTokenIds: [1, 2.5] })),
    /sampling_params\.stop_token_ids\[1\]/,
  );
  encodeRejects(
    () => tokenspeedProtocol.encodeAdd(request({}, { promptTokenIds: [1, -3] })),
    /^TokenizedGenerateReqInput\.input_ids\[1\]: token id must be an integer ≥ 0, got -3$/,
  );
  encodeRejects(
    () => tokenspeedProtocol.encodeAdd(request({}, { requestId: '' })),
    /^TokenizedGenerateReqInput\.rid: /,
  );
  encodeRejects(
    () => tokenspeedProtocol.encodeAdd(request({}, { requestId: 'a\udc00' })),
    /\.rid: string contains a lone surrogate/,
  );
  encodeRejects(
    () => tokenspeedProtocol.encodeAdd(request({ logitBias: { x: 1 } })),
    /sampling_params\.logit_bias\["x"\]/,
  );
  const withVocab = createTokenSpeedProtocol({ vocabSize: 100 });
  withVocab.encodeAdd(request({ logitBias: { '99': 1 } }));
  encodeRejects(() => withVocab.encodeAdd(request({ logitBias: { '100': 1 } })), /logit_bias\["100"\]: .*\[0, 100\)/);
});

test('encodeAdd: every ADD is its own copy, also after an encode that failed half-way', () => {
  const first = tokenspeedProtocol.encodeAdd(request({}, { requestId: 'first', promptTokenIds: [1, 2, 3] }));
  const firstHex = Buffer.from(first).toString('hex');
  encodeRejects(() => tokenspeedProtocol.encodeAdd(request({}, { requestId: 'a\udc00' })), /lone surrogate/);
  const second = tokenspeedProtocol.encodeAdd(request({}, { requestId: 'second', promptTokenIds: [9] }));
  assert.equal(Buffer.from(first).toString('hex'), firstHex);
  assert.notEqual(first.buffer, second.buffer);
  assert.equal(decodeTokenizedGenerateReqInput(first).rid, 'first');
  assert.deepEqual(decodeTokenizedGenerateReqInput(second).input_ids, [9]);
  assert.equal(decodeTokenizedGenerateReqInput(second).rid, 'second');
});

test('request encoder: forms and the 25th element', () => {
  const req = toTokenizedGenerateReqInput(request());
  assert.equal(encodeTokenizedGenerateReqInput(req, { form: 'full' })[2], 24);
  const withRank = { ...req, data_parallel_rank: 3 };
  const bytes = encodeTokenizedGenerateReqInput(withRank, { form: 'full' });
  assert.equal(bytes[2], 25);
  assert.equal(decodeTokenizedGenerateReqInput(bytes).data_parallel_rank, 3);
  encodeRejects(
    () => encodeTokenizedGenerateReqInput(withRank),
    /\.data_parallel_rank: holds a non-default value but the 11-element form/,
  );
  encodeRejects(
    () => encodeTokenizedGenerateReqInput({ ...req, validation_error: 'no' }),
    /\.validation_error: holds a non-default value/,
  );
  encodeRejects(() => encodeTokenizedGenerateReqInput(req, { form: 5 }), /between 6 and 25/);
  const room = { ...req, bootstrap_room: 9007199254740993n };
  assert.equal(
    decodeTokenizedGenerateReqInput(encodeTokenizedGenerateReqInput(room, { form: 'full' })).bootstrap_room,
    9007199254740993n,
  );
});

const batch = (rows: Partial<BatchTokenIDOutSlim> = {}): BatchTokenIDOutSlim => ({
  rids: ['a', 'b'],
  output_ids: [[1], []],
  finished_reasons: ['', 'weird'],
  prompt_tokens: [3, 4],
  completion_tokens: [1, 9],
  cached_tokens: [0, 2],
  output_token_logprobs_val: [[-0.5], []],
  output_token_logprobs_idx: [[1], []],
  engine_index: 3,
  num_running: 0,
  num_waiting: 0,
  kv_active_pages: 0,
  kv_total_pages: 0,
  ...rows,
});

test('decodeOutput: unknown finish strings map to stop (reported), aux frames ignored, no load when kv_total_pages is 0', () => {
  const seen: string[] = [];
  const protocol = createTokenSpeedProtocol({ onUnknownFinishReason: (raw) => seen.push(raw) });
  const out = protocol.decodeOutput([encodeBatchTokenIDOutSlim(batch()), Uint8Array.of(1, 2, 3)]);
  assert.equal(out.engineIndex, 3);
  assert.deepEqual(
    out.outputs.map((o) => o.finishReason),
    [null, 'stop'],
  );
  assert.deepEqual(out.finishedRequestIds, ['b']);
  assert.equal('load' in out, false);
  assert.deepEqual(seen, ['weird']);
  for (const reason of ['stop', 'length', 'abort', 'error'] as const) assert.equal(toFinishReason(reason), reason);
  assert.equal(toFinishReason(''), null);
  decodeRejects(() => tokenspeedProtocol.decodeOutput([]), /^BatchTokenIDOutSlim: output message has no frames$/);
});

test('load tail: kv usage is active/total, counts overlap, bigint load beyond 2^53 is refused', () => {
  const out = batchToEngineBatch(batch({ num_running: 7, num_waiting: 3, kv_active_pages: 1, kv_total_pages: 3 }));
  assert.deepEqual(
    out.load,
    { numRunning: 7, numWaiting: 3, kvCacheUsage: 1 / 3, runningIncludesWaiting: true },
    'the two counts overlap (4.9)',
  );
  const big = batchToEngineBatch(batch({ kv_active_pages: 2n ** 60n, kv_total_pages: 2n ** 61n }));
  assert.equal(big.load?.kvCacheUsage, 0.5);
  decodeRejects(
    () => batchToEngineBatch(batch({ num_running: 2n ** 60n, kv_total_pages: 1 })),
    /^BatchTokenIDOutSlim\.num_running: integer/,
  );
  decodeRejects(
    () => tokenspeedProtocol.decodeOutput([encodeBatchTokenIDOutSlim(batch({ output_ids: [[2n ** 60n], []] }))]),
    /^BatchTokenIDOutSlim\.output_ids\[0\]\[0\]: integer 1152921504606846976 is beyond/,
  );
});

test('ragged columns are refused on encode and on decode, naming the column', () => {
  encodeRejects(
    () => encodeBatchTokenIDOutSlim(batch({ cached_tokens: [0] })),
    /^BatchTokenIDOutSlim\.cached_tokens: column has 1 entries but rids has 2$/,
  );
  decodeRejects(
    () => batchToEngineBatch(batch({ output_token_logprobs_idx: [[]] })),
    /^BatchTokenIDOutSlim\.output_token_logprobs_idx: ragged columns/,
  );
  encodeRejects(
    () => encodeBatchTokenIDOutSlim(batch({ output_ids: [[1.5], []] })),
    /^BatchTokenIDOutSlim\.output_ids\[0\]\[0\]: expected an integer/,
  );
});

test('abort payload: list[str] only', () => {
  assert.deepEqual(decodeAbortPayload(encodeAbortPayload(['a', '請求'])), ['a', '請求']);
  encodeRejects(() => encodeAbortPayload([1 as unknown as string]), /^AbortPayload\[0\]: expected a string/);
  decodeRejects(() => decodeAbortPayload(Uint8Array.of(0x91)), /^AbortPayload: input data was truncated/);
});

test('engineAdmissionError: the engine-side decision used by the simulator', () => {
  const req = toTokenizedGenerateReqInput(request());
  assert.equal(engineAdmissionError(req), null);
  assert.equal(engineAdmissionError({ ...req, validation_error: 'nope' }), 'nope');
  assert.match(
    engineAdmissionError({ ...req, return_logprob: true }, { enableOutputLogprobs: false }) ?? '',
    /--enable-output-logprobs/,
  );
  assert.match(engineAdmissionError({ ...req, sampling_params: { ...req.sampling_params, n: 2 } }) ?? '', /^n=2/);
  assert.match(
    engineAdmissionError({ ...req, session_params: { id: 's', rid: null, offset: null, replace: null } }) ?? '',
    /session id s/,
  );
  // Un-normalized params get the engine's decode-time rewrite first: a negative temperature becomes greedy.
  const raw = { ...defaultSamplingParams(), temperature: -1 };
  assert.equal(engineAdmissionError({ ...req, sampling_params: raw }), null);
  assert.match(engineAdmissionError({ ...req, sampling_params: { ...raw, is_normalized: true } }) ?? '', /temperature/);
});
