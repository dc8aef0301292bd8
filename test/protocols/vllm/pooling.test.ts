/**
 * Pooling on the vLLM wire (docs/wire/vllm-pooling.md): the `PoolingParams` array the gateway sends for an embedding
 * (pinned against the bytes vLLM's own msgspec encoder wrote, as SMG's `protocol/vllm/pooling.rs` records them), the
 * ADD of a pooling request (nil sampling map), and the pooled tensor of `pooling_output` in every float dtype torch
 * may write, through the output decoder with an aux frame.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_SAMPLING, type GenerateRequest } from '../../../src/protocols/types.js';
import {
  decodeEngineCoreRequest,
  encodeEngineCoreRequest,
  engineCoreOutputsToEngineBatch,
  decodeEngineCoreOutputs,
  encodeEngineCoreOutputsFrames,
  defaultEngineCoreOutputs,
  defaultEngineCoreOutput,
  toEngineCoreRequest,
} from '../../../src/protocols/vllm/index.js';
import {
  float32NdArray,
  poolingParamsCodec,
  pooledVector,
  toPoolingParams,
} from '../../../src/protocols/vllm/pooling.js';
import { encodeMessage, decodeMessage } from '../../../src/wire/codec.js';
import { WireDecodeError } from '../../../src/wire/errors.js';
import { bytesOf, hexOf } from './hex.js';

/**
 * `msgspec.msgpack.encode(PoolingParams(task="embed", use_activation=True, skip_reading_prefix_cache=False))`: the
 * params vLLM's frontend hands EngineCore for an embedding after `verify` (10 elements: use_activation true, nil
 * dimensions, step_tag_id, returned_token_ids, task "embed", requires_token_ids false, skip_reading_prefix_cache
 * false, nil late_interaction_params and extra_kwargs, output_kind 2).
 */
const VLLM_EMBED_PARAMS = '9ac3c0c0c0a5656d626564c2c2c0c002';

test('PoolingParams of an embedding: the bytes vLLM encodes, both directions', () => {
  const params = toPoolingParams({ task: 'embed', dimensions: null, normalize: true });
  assert.equal(hexOf(encodeMessage(poolingParamsCodec, params)), VLLM_EMBED_PARAMS);
  assert.deepEqual(decodeMessage(poolingParamsCodec, bytesOf(VLLM_EMBED_PARAMS)), params);
  // A Matryoshka size goes at index 1; a shorter array (an older encoder's tail left out) decodes with the defaults.
  const sized = encodeMessage(poolingParamsCodec, toPoolingParams({ task: 'embed', dimensions: 64, normalize: true }));
  assert.equal(hexOf(sized).slice(0, 6), '9ac340');
  const short = decodeMessage(poolingParamsCodec, bytesOf('92c040'));
  assert.equal(short.dimensions, 64);
  assert.equal(short.task, null);
  assert.equal(short.output_kind, 2);
});

test('a pooling request is an ADD with nil sampling_params and the PoolingParams at index 4', () => {
  const req: GenerateRequest = {
    requestId: 'embd-1',
    promptTokenIds: [9707, 11],
    sampling: { ...DEFAULT_SAMPLING, maxNewTokens: 0 },
    stream: false,
    returnLogprob: false,
    pooling: { task: 'embed', dimensions: 32, normalize: true },
  };
  const wire = toEngineCoreRequest(req, { arrivalTime: 1 });
  assert.equal(wire.sampling_params, null);
  assert.equal(wire.pooling_params?.task, 'embed');
  assert.equal(wire.pooling_params?.dimensions, 32);
  const back = decodeEngineCoreRequest(encodeEngineCoreRequest(wire));
  assert.deepEqual(back.pooling_params, wire.pooling_params);
  assert.equal(back.sampling_params, null);
});

test('pooledVector decodes float32, float64, float16 and bfloat16 little-endian, and refuses the rest', () => {
  const values = [0.5, -1.25, 3];
  assert.deepEqual([...pooledVector(float32NdArray(Float32Array.from(values)), 'p')], values);
  const f64 = new Uint8Array(24);
  values.forEach((v, i) => new DataView(f64.buffer).setFloat64(i * 8, v, true));
  assert.deepEqual([...pooledVector({ dtype: 'float64', shape: [3], data: f64 }, 'p')], values);
  // float16: 0.5 = 0x3800, -1.25 = 0xbd00, 3 = 0x4200; bfloat16: the high halves of the float32 values.
  const f16 = Uint8Array.of(0x00, 0x38, 0x00, 0xbd, 0x00, 0x42);
  assert.deepEqual([...pooledVector({ dtype: 'float16', shape: [3], data: f16 }, 'p')], values);
  const bf16 = Uint8Array.of(0x00, 0x3f, 0xa0, 0xbf, 0x40, 0x40);
  assert.deepEqual([...pooledVector({ dtype: 'bfloat16', shape: [3], data: bf16 }, 'p')], values);
  assert.throws(() => pooledVector({ dtype: 'int64', shape: [1], data: new Uint8Array(8) }, 'p'), WireDecodeError);
  assert.throws(() => pooledVector({ dtype: 'float32', shape: [1, 2], data: new Uint8Array(8) }, 'p'), /rank-1/);
  assert.throws(() => pooledVector({ dtype: 'float32', shape: [3], data: new Uint8Array(8) }, 'p'), /8 bytes/);
});

test("pooling_output reaches the seam as the row's pooled vector, from an aux frame as vLLM sends a large tensor", () => {
  const vector = Float32Array.from({ length: 100 }, (_, i) => i / 100);
  const msg = defaultEngineCoreOutputs();
  msg.outputs = [
    { ...defaultEngineCoreOutput('embd-1', []), pooling_output: float32NdArray(vector), finish_reason: 0 },
  ];
  const frames = encodeEngineCoreOutputsFrames(msg, { auxThresholdBytes: 256 });
  assert.equal(frames.length, 2, 'a 400-byte tensor goes to an aux frame');
  const batch = engineCoreOutputsToEngineBatch(decodeEngineCoreOutputs(frames));
  assert.equal(batch.outputs[0]!.finishReason, 'stop');
  assert.deepEqual([...batch.outputs[0]!.pooled!], [...vector]);
  // Generation outputs carry none.
  const plain = defaultEngineCoreOutputs();
  plain.outputs = [defaultEngineCoreOutput('r', [5])];
  assert.equal(
    engineCoreOutputsToEngineBatch(decodeEngineCoreOutputs([encodeEngineCoreOutputsFrames(plain)[0]!])).outputs[0]!
      .pooled,
    undefined,
  );
});
