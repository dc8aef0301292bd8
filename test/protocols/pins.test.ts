/**
 * The four byte-for-byte pins of engine-wire.md section 6.1 (SMG's Rust codec tests, captured from TokenSpeed's
 * Python encoder) and the derived forms of 6.2, built from their logical values in code: encoding must give
 * exactly these bytes and decoding exactly these values. The hex strings are copied from the spec on purpose
 * (a pin), and cross-checked against the vector files they also live in.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadTokenSpeedVectors } from '../helpers/vectors.js';
import { DEFAULT_SAMPLING, RequestType } from '../../src/protocols/types.js';
import type { EngineBatch, GenerateRequest } from '../../src/protocols/types.js';
import { encodeEngineIdentity } from '../../src/protocols/identity.js';
import { parseRequestFrames } from '../../src/protocols/frames.js';
import {
  decodeBatchTokenIDOutSlim,
  decodeTokenizedGenerateReqInput,
  defaultSamplingParams,
  encodeAbortPayload,
  encodeBatchTokenIDOutSlim,
  encodeTokenizedGenerateReqInput,
  tokenspeedProtocol,
} from '../../src/protocols/tokenspeed/index.js';
import type { BatchTokenIDOutSlim, TokenizedGenerateReqInput } from '../../src/protocols/tokenspeed/index.js';

const hexOf = (b: Uint8Array) => Buffer.from(b).toString('hex');
const bytesOf = (h: string) => Uint8Array.from(Buffer.from(h, 'hex'));

const V1 =
  '9eb34261746368546f6b656e49444f7574536c696d91a57665632d3191920a0b91a66c656e6774689103910291019192cbbfe0000000000000cbbfd000000000000091920a0b01020564cd0190';
const V2 =
  '9ab34261746368546f6b656e49444f7574536c696d91a57665632d3191920a0b91a66c656e6774689103910291019192cbbfe0000000000000cbbfd000000000000091920a0b01';
const V3 =
  '99b34261746368546f6b656e49444f7574536c696d91a57665632d3191920a0b91a66c656e6774689103910291019192cbbfe0000000000000cbbfd000000000000091920a0b';
const V4 =
  'dc0018b9546f6b656e697a656447656e6572617465526571496e707574a57665632d31c0c093010203dc001d08c09102cb3fe0000000000000cb3feccccccccccccdce40000000cb0000000000000000cb0000000000000000cb0000000000000000cb3ff000000000000000c0c0c0c0c2c3c3c2c0c0c0c02ac0019000c3c3ff00c0c3c0c0c0c2cb0000000000000000c0c0c0c0c0c0c0c0';
const V4_PREFIX =
  '9bb9546f6b656e697a656447656e6572617465526571496e707574a57665632d31c0c093010203dc001d08c09102cb3fe0000000000000cb3feccccccccccccdce40000000cb0000000000000000cb0000000000000000cb0000000000000000cb3ff000000000000000c0c0c0c0c2c3c3c2c0c0c0c02ac0019000c3c3ff00c0c3';

/** The logical batch of V1-V3 (engine-wire.md 6.1), with the V1 tail. */
const V1_BATCH: BatchTokenIDOutSlim = {
  rids: ['vec-1'],
  output_ids: [[10, 11]],
  finished_reasons: ['length'],
  prompt_tokens: [3],
  completion_tokens: [2],
  cached_tokens: [1],
  output_token_logprobs_val: [[-0.5, -0.25]],
  output_token_logprobs_idx: [[10, 11]],
  engine_index: 1,
  num_running: 2,
  num_waiting: 5,
  kv_active_pages: 100,
  kv_total_pages: 400,
};

const expectedRow = {
  requestId: 'vec-1',
  newTokenIds: [10, 11],
  finishReason: 'length' as const,
  promptTokens: 3,
  completionTokens: 2,
  cachedTokens: 1,
  logprobs: [-0.5, -0.25],
};

/** The logical request of V4 (engine-wire.md 6.1 V4 table). */
function v4Request(): TokenizedGenerateReqInput {
  return {
    rid: 'vec-1',
    http_worker_ipc: null,
    input_text: null,
    input_ids: [1, 2, 3],
    sampling_params: {
      ...defaultSamplingParams(),
      max_new_tokens: 8,
      stop_token_ids: [2],
      temperature: 0.5,
      top_p: 0.9,
      top_k: 1073741824,
      seed: 42,
      stop_strs: [],
      is_normalized: true,
    },
    return_logprob: true,
    logprob_start_len: -1,
    top_logprobs_num: 0,
    token_ids_logprob: null,
    stream: true,
    input_embeds: null,
    session_params: null,
    custom_logit_processor: null,
    return_hidden_states: false,
    created_time: 0.0,
    bootstrap_host: null,
    bootstrap_port: null,
    bootstrap_room: null,
    input_multi_ids: null,
    input_extra_infos: null,
    input_ids_unpadded: null,
    multimodal_inputs: null,
    validation_error: null,
    data_parallel_rank: null,
  };
}

test('the pins equal the hex of their vector files', () => {
  const byName = new Map(loadTokenSpeedVectors().map((v) => [v.name, v.hex]));
  assert.equal(byName.get('out_slim14_smg_pin'), V1);
  assert.equal(byName.get('out_slim10_smg_pin'), V2);
  assert.equal(byName.get('out_slim9_smg_pin'), V3);
  assert.equal(byName.get('req_py_normalized_smg_pin'), V4);
});

test('V1 (14 elements, 77 bytes): encode, decode, rank 1, load (2, 5, 0.25)', () => {
  assert.equal(V1.length / 2, 77);
  assert.equal(hexOf(encodeBatchTokenIDOutSlim(V1_BATCH, { form: 14 })), V1);
  assert.equal(hexOf(encodeBatchTokenIDOutSlim(V1_BATCH)), V1, 'the 14-element form is the default');
  assert.deepStrictEqual(decodeBatchTokenIDOutSlim(bytesOf(V1)), V1_BATCH);
  const expected: EngineBatch = {
    engineIndex: 1,
    outputs: [expectedRow],
    finishedRequestIds: ['vec-1'],
    load: { numRunning: 2, numWaiting: 5, kvCacheUsage: 0.25, runningIncludesWaiting: true },
  };
  assert.deepStrictEqual(tokenspeedProtocol.decodeOutput([bytesOf(V1)]), expected);
});

test('V2 (10 elements, 71 bytes): rank 1 and no load', () => {
  const batch = { ...V1_BATCH, num_running: 0, num_waiting: 0, kv_active_pages: 0, kv_total_pages: 0 };
  assert.equal(V2.length / 2, 71);
  assert.equal(hexOf(encodeBatchTokenIDOutSlim(batch, { form: 10 })), V2);
  assert.deepStrictEqual(decodeBatchTokenIDOutSlim(bytesOf(V2)), batch);
  const out = tokenspeedProtocol.decodeOutput([bytesOf(V2)]);
  assert.deepStrictEqual(out, { engineIndex: 1, outputs: [expectedRow], finishedRequestIds: ['vec-1'] });
  assert.equal('load' in out, false);
});

test('V3 (9 elements, 70 bytes): rank 0 (default) and no load', () => {
  const batch = { ...V1_BATCH, engine_index: 0, num_running: 0, num_waiting: 0, kv_active_pages: 0, kv_total_pages: 0 };
  assert.equal(V3.length / 2, 70);
  assert.equal(hexOf(encodeBatchTokenIDOutSlim(batch, { form: 9 })), V3);
  assert.deepStrictEqual(decodeBatchTokenIDOutSlim(bytesOf(V3)), batch);
  assert.deepStrictEqual(tokenspeedProtocol.decodeOutput([bytesOf(V3)]), {
    engineIndex: 0,
    outputs: [expectedRow],
    finishedRequestIds: ['vec-1'],
  });
});

test('V1 cannot be squeezed into the 9/10-element forms without losing its tail', () => {
  assert.throws(() => encodeBatchTokenIDOutSlim(V1_BATCH, { form: 10 }), /BatchTokenIDOutSlim\.num_running/);
  assert.throws(() => encodeBatchTokenIDOutSlim(V1_BATCH, { form: 9 }), /BatchTokenIDOutSlim\.engine_index/);
});

test('V4 (full 24-element request, 152 bytes): encode and decode', () => {
  assert.equal(V4.length / 2, 152);
  assert.equal(hexOf(encodeTokenizedGenerateReqInput(v4Request(), { form: 'full' })), V4);
  assert.deepStrictEqual(decodeTokenizedGenerateReqInput(bytesOf(V4)), v4Request());
});

test('6.2: the 11-element prefix of V4 (129 bytes) is the prefix encoding and decodes to the same request', () => {
  assert.equal(V4_PREFIX.length / 2, 129);
  assert.equal(hexOf(encodeTokenizedGenerateReqInput(v4Request(), { form: 'prefix' })), V4_PREFIX);
  assert.equal(hexOf(encodeTokenizedGenerateReqInput(v4Request())), V4_PREFIX, 'prefix is the default form');
  assert.deepStrictEqual(decodeTokenizedGenerateReqInput(bytesOf(V4_PREFIX)), v4Request());
});

test('6.2: encodeAdd of the V4 request (as the HTTP layer hands it over) emits exactly the prefix form', () => {
  const request: GenerateRequest = {
    requestId: 'vec-1',
    promptTokenIds: [1, 2, 3],
    sampling: { ...DEFAULT_SAMPLING, maxNewTokens: 8, stopTokenIds: [2], temperature: 0.5, topP: 0.9, seed: 42 },
    stream: true,
    returnLogprob: true,
  };
  assert.equal(hexOf(tokenspeedProtocol.encodeAdd(request)), V4_PREFIX);
});

test('6.2: the other computed messages (ADD frames for engine 0, ABORT req-1)', () => {
  const frames = [encodeEngineIdentity(0), Uint8Array.of(RequestType.ADD), bytesOf(V4)];
  assert.deepEqual(frames.map(hexOf).slice(0, 2), ['0000', '00']);
  const parsed = parseRequestFrames(frames.slice(1));
  assert.equal(parsed.type, RequestType.ADD);
  assert.equal(hexOf(parsed.payload), V4);
  assert.equal(hexOf(encodeAbortPayload(['req-1'])), '91a57265712d31');
  assert.equal(hexOf(tokenspeedProtocol.encodeAbort(['req-1'])), '91a57265712d31');
});
