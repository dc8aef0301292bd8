/** Handshake payloads beyond the golden vectors (engine-wire.md 2.3-2.5). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { encode as mpEncode } from '@msgpack/msgpack';
import {
  DEFAULT_READY_RESPONSE, assertInitAddresses, decodeHandshakeInit, decodeReadyMessage, decodeReadyResponse,
  encodeHandshakeInit, encodeReadyMessage, encodeReadyResponse,
} from '../../src/protocols/handshake.js';
import type { ReadyResponse } from '../../src/protocols/types.js';
import { HandshakeDecodeError, WireDecodeError, WireEncodeError } from '../../src/wire/errors.js';

const rejects = (fn: () => unknown, re: RegExp) =>
  assert.throws(fn, (e: unknown) => e instanceof HandshakeDecodeError && e instanceof WireDecodeError && re.test(e.message));

/** SMG's mock engine default response (engine-wire.md 2.5), handy as a realistic non-default value. */
const MOCK: ReadyResponse = {
  maxModelLen: 1048576, numGpuBlocks: 0, prefixGranularity: 16, dtype: 'float32', vllmVersion: 'test-vllm-version',
  worldSize: 1, dataParallelSize: 1, tensorParallelSize: 1, pipelineParallelSize: 1, decodeContextParallelSize: 1,
  dataParallelRank: 0, maxNumSeqs: 256, maxNumBatchedTokens: 8192, instanceId: 'test-instance',
  kvCacheSizeTokens: null, kvCacheMaxConcurrency: 2.5,
};

test('ready message: HELLO is 53 bytes, explicit nulls are kept, other statuses are refused', () => {
  assert.equal(encodeReadyMessage({ status: 'HELLO' }).length, 53);
  const m = decodeReadyMessage(encodeReadyMessage({ status: 'READY', local: null, headless: false, parallelConfigHash: 'h' }));
  assert.deepEqual(m, { status: 'READY', local: null, headless: false, parallelConfigHash: 'h' });
  rejects(() => decodeReadyMessage(mpEncode({ status: 'BYE' })), /^WireReadyMessage\.status: expected 'HELLO' or 'READY', got 'BYE'$/);
  rejects(() => decodeReadyMessage(mpEncode({})), /^WireReadyMessage\.status: expected 'HELLO' or 'READY', got nil$/);
  rejects(() => decodeReadyMessage(mpEncode({ status: 'HELLO', local: 1 })), /^WireReadyMessage\.local: expected bool \| null, got int$/);
  rejects(() => decodeReadyMessage(Uint8Array.of(0x45)), /^WireReadyMessage: expected map, got int$/);
  // Unknown keys are ignored.
  assert.equal(decodeReadyMessage(mpEncode({ future: [1, 2], status: 'HELLO' })).status, 'HELLO');
});

test('INIT: round trip, and the engine-side address check', () => {
  const init = decodeHandshakeInit(encodeHandshakeInit({ inputs: ['ipc:///a'], outputs: ['ipc:///b'] }));
  assert.deepEqual(init, {
    inputs: ['ipc:///a'], outputs: ['ipc:///b'], coordinatorInput: null, coordinatorOutput: null,
    frontendStatsPublishAddress: null, parallelConfig: {},
  });
  assertInitAddresses(init);
  rejects(() => assertInitAddresses({ ...init, outputs: [] }), /^WireHandshakeInitMessage\.addresses\.outputs: empty/);
  rejects(() => decodeHandshakeInit(mpEncode({ addresses: { inputs: [1] } })),
    /^WireHandshakeInitMessage\.addresses\.inputs\[0\]: expected str, got int$/);
  assert.throws(() => encodeHandshakeInit({ inputs: [5 as unknown as string], outputs: [] }), WireEncodeError);
});

test('ready response: all 19 keys in map16, both granularity spellings, round trip', () => {
  const bytes = encodeReadyResponse(MOCK);
  assert.equal(Buffer.from(bytes.subarray(0, 3)).toString('hex'), 'de0013');
  assert.deepEqual(decodeReadyResponse(bytes), MOCK);
  const vllm = encodeReadyResponse(MOCK, { granularityKey: 'block_size' });
  assert.ok(Buffer.from(vllm).includes(Buffer.from('block_size')));
  assert.ok(!Buffer.from(vllm).includes(Buffer.from('prefix_granularity')));
  assert.deepEqual(decodeReadyResponse(vllm), MOCK);
  assert.deepEqual(decodeReadyResponse(encodeReadyResponse(DEFAULT_READY_RESPONSE)), DEFAULT_READY_RESPONSE);
  assert.ok(Object.isFrozen(DEFAULT_READY_RESPONSE));
});

test('ready response: a sparse map with only the required keys; optional keys take the decoder defaults', () => {
  const sparse = mpEncode({
    max_model_len: 4096, num_gpu_blocks: 10, block_size: 16, dtype: 'float16', vllm_version: '0.22.0', world_size: 1,
    data_parallel_size: 2, unknown_future_key: { a: 1 }, max_num_batched_tokens: -1,
  });
  assert.deepEqual(decodeReadyResponse(sparse), {
    maxModelLen: 4096, numGpuBlocks: 10, prefixGranularity: 16, dtype: 'float16', vllmVersion: '0.22.0', worldSize: 1,
    dataParallelSize: 2, tensorParallelSize: 0, pipelineParallelSize: 0, decodeContextParallelSize: 0,
    dataParallelRank: 0, maxNumSeqs: 0, maxNumBatchedTokens: -1, instanceId: '', kvCacheSizeTokens: null,
    kvCacheMaxConcurrency: null,
  });
});

test('ready response: missing required keys, bad dtype and mistyped values name the key', () => {
  const full: Record<string, unknown> = {
    max_model_len: 1, num_gpu_blocks: 1, prefix_granularity: 1, dtype: 'bfloat16', vllm_version: 'v', world_size: 1,
    data_parallel_size: 1,
  };
  for (const key of Object.keys(full)) {
    const partial: Record<string, unknown> = { ...full };
    delete partial[key];
    const names = key === 'prefix_granularity' ? "'prefix_granularity' or 'block_size'" : `'${key}'`;
    rejects(() => decodeReadyResponse(mpEncode(partial)), new RegExp(`^EngineCoreReadyResponse: missing required key ${names}$`));
  }
  rejects(() => decodeReadyResponse(mpEncode({ ...full, dtype: 'int8' })), /^EngineCoreReadyResponse\.dtype: invalid value 'int8'/);
  rejects(() => decodeReadyResponse(mpEncode({ ...full, max_model_len: 1.5 })), /^EngineCoreReadyResponse\.max_model_len: expected uint, got float64$/);
  rejects(() => decodeReadyResponse(mpEncode({ ...full, world_size: -1 })), /world_size: expected a non-negative integer/);
  rejects(() => decodeReadyResponse(mpEncode({ ...full, kv_events_config: 5 })), /kv_events_config: expected dict\[str, any\] \| null, got int$/);
  assert.throws(() => encodeReadyResponse({ ...MOCK, maxModelLen: -5 }), /max_model_len: expected a non-negative integer/);
});
