/** Handshake payloads beyond the golden vectors (engine-wire.md 2.3-2.5), and the ready-response forms of issue #14. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decode as mpDecode, encode as mpEncode } from '@msgpack/msgpack';
import {
  DEFAULT_READY_RESPONSE,
  KNOWN_DTYPES,
  SHORT_FORM_KEYS,
  assertInitAddresses,
  decodeHandshakeInit,
  decodeReadyMessage,
  decodeReadyResponse,
  encodeHandshakeInit,
  encodeReadyMessage,
  encodeReadyResponse,
  isKnownDtype,
  readyResponseForm,
} from '../../src/protocols/handshake.js';
import type { ReadyResponse } from '../../src/protocols/types.js';
import { HandshakeDecodeError, WireDecodeError, WireEncodeError } from '../../src/wire/errors.js';

const fromHex = (hex: string): Uint8Array => Uint8Array.from(Buffer.from(hex, 'hex'));
const hexOf = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');

const rejects = (fn: () => unknown, re: RegExp) =>
  assert.throws(
    fn,
    (e: unknown) => e instanceof HandshakeDecodeError && e instanceof WireDecodeError && re.test(e.message),
  );

/** SMG's mock engine default response (engine-wire.md 2.5), handy as a realistic non-default value. */
const MOCK: ReadyResponse = {
  maxModelLen: 1048576,
  numGpuBlocks: 0,
  prefixGranularity: 16,
  dtype: 'float32',
  vllmVersion: 'test-vllm-version',
  worldSize: 1,
  dataParallelSize: 1,
  tensorParallelSize: 1,
  pipelineParallelSize: 1,
  decodeContextParallelSize: 1,
  dataParallelRank: 0,
  maxNumSeqs: 256,
  maxNumBatchedTokens: 8192,
  instanceId: 'test-instance',
  kvCacheSizeTokens: null,
  kvCacheMaxConcurrency: 2.5,
};

test('ready message: HELLO is 53 bytes, explicit nulls are kept, other statuses are refused', () => {
  assert.equal(encodeReadyMessage({ status: 'HELLO' }).length, 53);
  const m = decodeReadyMessage(
    encodeReadyMessage({ status: 'READY', local: null, headless: false, parallelConfigHash: 'h' }),
  );
  assert.deepEqual(m, { status: 'READY', local: null, headless: false, parallelConfigHash: 'h' });
  rejects(
    () => decodeReadyMessage(mpEncode({ status: 'BYE' })),
    /^WireReadyMessage\.status: expected 'HELLO' or 'READY', got 'BYE'$/,
  );
  rejects(() => decodeReadyMessage(mpEncode({})), /^WireReadyMessage\.status: expected 'HELLO' or 'READY', got nil$/);
  rejects(
    () => decodeReadyMessage(mpEncode({ status: 'HELLO', local: 1 })),
    /^WireReadyMessage\.local: expected bool \| null, got int$/,
  );
  rejects(() => decodeReadyMessage(Uint8Array.of(0x45)), /^WireReadyMessage: expected map, got int$/);
  // Unknown keys are ignored.
  assert.equal(decodeReadyMessage(mpEncode({ future: [1, 2], status: 'HELLO' })).status, 'HELLO');
});

test('INIT: round trip, and the engine-side address check', () => {
  const init = decodeHandshakeInit(encodeHandshakeInit({ inputs: ['ipc:///a'], outputs: ['ipc:///b'] }));
  assert.deepEqual(init, {
    inputs: ['ipc:///a'],
    outputs: ['ipc:///b'],
    coordinatorInput: null,
    coordinatorOutput: null,
    frontendStatsPublishAddress: null,
    parallelConfig: {},
  });
  assertInitAddresses(init);
  rejects(() => assertInitAddresses({ ...init, outputs: [] }), /^WireHandshakeInitMessage\.addresses\.outputs: empty/);
  rejects(
    () => decodeHandshakeInit(mpEncode({ addresses: { inputs: [1] } })),
    /^WireHandshakeInitMessage\.addresses\.inputs\[0\]: expected str, got int$/,
  );
  assert.throws(() => encodeHandshakeInit({ inputs: [5 as unknown as string], outputs: [] }), WireEncodeError);
});

test('ready response: all 19 keys in map16, both granularity spellings, round trip', () => {
  const bytes = encodeReadyResponse(MOCK);
  assert.equal(Buffer.from(bytes.subarray(0, 3)).toString('hex'), 'de0013');
  assert.deepEqual(decodeReadyResponse(bytes), { ...MOCK, form: 'long' });
  const vllm = encodeReadyResponse(MOCK, { granularityKey: 'block_size' });
  assert.ok(Buffer.from(vllm).includes(Buffer.from('block_size')));
  assert.ok(!Buffer.from(vllm).includes(Buffer.from('prefix_granularity')));
  assert.deepEqual(decodeReadyResponse(vllm), { ...MOCK, form: 'long' });
  assert.deepEqual(decodeReadyResponse(encodeReadyResponse(DEFAULT_READY_RESPONSE)), {
    ...DEFAULT_READY_RESPONSE,
    form: 'long',
  });
  assert.ok(Object.isFrozen(DEFAULT_READY_RESPONSE));
  // The long form carries every key: an unknown (null) value cannot be written in it.
  assert.throws(
    () => encodeReadyResponse({ ...MOCK, dataParallelSize: null }),
    /data_parallel_size: not reported \(null\)/,
  );
});

/**
 * Golden bytes of the short form (issue #14), built by hand from the msgpack spec, not produced by any encoder: a
 * fixmap header `8N` (N entries), then per key a fixstr `a0 | len` followed by the key's UTF-8 bytes, then the value
 * (`cd` + 2 bytes big-endian = uint16, `c0` = nil, `a0 | len` + bytes = fixstr). Keys in the order vLLM releases up
 * to at least 9aaf83ef write them: `max_model_len`, `num_gpu_blocks`, `dp_stats_address`. Each byte string is also
 * decoded with @msgpack/msgpack, an independent decoder, to prove the hand assembly is what it says.
 */
const SHORT_FORM_HEX = [
  '83', // fixmap, 3 entries
  'ad' + '6d61785f6d6f64656c5f6c656e',
  'cd8000', // fixstr(13) "max_model_len": uint16 32768
  'ae' + '6e756d5f6770755f626c6f636b73',
  'cd6072', // fixstr(14) "num_gpu_blocks": uint16 24690
  'b0' + '64705f73746174735f61646472657373',
  'c0', // fixstr(16) "dp_stats_address": nil
].join('');
/** The same three keys with a `dp_stats_address` string (the coordinator's stats address in vLLM's own setup). */
const SHORT_FORM_WITH_ADDRESS_HEX = [
  '83',
  'ad' + '6d61785f6d6f64656c5f6c656e',
  'cd1000', // "max_model_len": uint16 4096
  'ae' + '6e756d5f6770755f626c6f636b73',
  '00', // "num_gpu_blocks": posfixint 0
  'b0' + '64705f73746174735f61646472657373',
  'b3' + '7463703a2f2f31302e302e302e313a35353730', // fixstr(19) "tcp://10.0.0.1:5570"
].join('');

/** What the gateway makes of a short-form response: the 3 keys, null = not reported for what it lacks. */
function shortDecoded(maxModelLen: number, numGpuBlocks: number): ReadyResponse {
  return {
    form: 'short',
    maxModelLen,
    numGpuBlocks,
    prefixGranularity: null,
    dtype: null,
    vllmVersion: null,
    worldSize: null,
    dataParallelSize: null,
    tensorParallelSize: 0,
    pipelineParallelSize: 0,
    decodeContextParallelSize: 0,
    dataParallelRank: 0,
    maxNumSeqs: 0,
    maxNumBatchedTokens: 0,
    instanceId: '',
    kvCacheSizeTokens: null,
    kvCacheMaxConcurrency: null,
  };
}

test('golden: the short ready response (3 keys) decodes; what it lacks is null (not reported) or the SMG default', () => {
  const bytes = fromHex(SHORT_FORM_HEX);
  assert.deepEqual(mpDecode(bytes), { max_model_len: 32768, num_gpu_blocks: 24690, dp_stats_address: null });
  assert.deepEqual(decodeReadyResponse(bytes), shortDecoded(32768, 24690));
  const withAddress = fromHex(SHORT_FORM_WITH_ADDRESS_HEX);
  assert.deepEqual(mpDecode(withAddress), {
    max_model_len: 4096,
    num_gpu_blocks: 0,
    dp_stats_address: 'tcp://10.0.0.1:5570',
  });
  assert.deepEqual(decodeReadyResponse(withAddress), shortDecoded(4096, 0));
  // The encoder's short form (what a simulated rank with `--ready-response short` sends) is these very bytes.
  assert.equal(
    hexOf(encodeReadyResponse({ ...MOCK, maxModelLen: 32768, numGpuBlocks: 24690 }, { form: 'short' })),
    SHORT_FORM_HEX,
  );
});

/**
 * Golden bytes of a long form with extra unknown keys, built by hand like the short form: a map16 header `de 001b`
 * (27 entries), then fixstr keys and values (`cd` uint16, `ce` uint32, `cb` float64, `c2` false, `c0` nil, posfixint
 * `00`-`7f`, fixstr values). The keys and their order are those of vLLM's current `_make_ready_response`
 * (`vllm/v1/engine/core.py`), which writes 8 keys the gateway does not know (marked "unknown"): `mamba_block_size`,
 * `supports_lora`, `max_loras`, `coord_store_port`, `coordinator_input_address`, `coordinator_output_address`,
 * `weight_transfer_backend`, `enable_sleep_mode`, `supports_draft_weight_updates`.
 */
const LONG_FORM_EXTRA_KEYS: Array<[key: string, value: string]> = [
  ['ad6d61785f6d6f64656c5f6c656e', 'cd8000'], // max_model_len: uint16 32768
  ['ae6e756d5f6770755f626c6f636b73', 'cd6072'], // num_gpu_blocks: uint16 24690
  ['aa626c6f636b5f73697a65', '10'], // block_size: posfixint 16
  ['b06d616d62615f626c6f636b5f73697a65', 'c0'], // mamba_block_size: nil (unknown)
  ['b064705f73746174735f61646472657373', 'c0'], // dp_stats_address: nil
  ['a56474797065', 'a862666c6f61743136'], // dtype: fixstr "bfloat16"
  ['ac766c6c6d5f76657273696f6e', 'a6302e32332e30'], // vllm_version: fixstr "0.23.0"
  ['aa776f726c645f73697a65', '01'], // world_size: 1
  ['b2646174615f706172616c6c656c5f73697a65', '02'], // data_parallel_size: 2
  ['b46b765f63616368655f73697a655f746f6b656e73', 'ce00060720'], // kv_cache_size_tokens: uint32 395040
  ['b86b765f63616368655f6d61785f636f6e63757272656e6379', 'cb3ff8000000000000'], // kv_cache_max_concurrency: float64 1.5
  ['b474656e736f725f706172616c6c656c5f73697a65', '01'], // tensor_parallel_size: 1
  ['b6706970656c696e655f706172616c6c656c5f73697a65', '01'], // pipeline_parallel_size: 1
  ['bc6465636f64655f636f6e746578745f706172616c6c656c5f73697a65', '01'], // decode_context_parallel_size: 1
  ['b2646174615f706172616c6c656c5f72616e6b', '01'], // data_parallel_rank: 1
  ['ac6d61785f6e756d5f73657173', 'cd0100'], // max_num_seqs: uint16 256
  ['b66d61785f6e756d5f626174636865645f746f6b656e73', 'cd2000'], // max_num_batched_tokens: uint16 8192
  ['ab696e7374616e63655f6964', 'a6766c6c6d2d30'], // instance_id: fixstr "vllm-0"
  ['ad737570706f7274735f6c6f7261', 'c2'], // supports_lora: false (unknown)
  ['a96d61785f6c6f726173', '00'], // max_loras: 0 (unknown)
  ['b0636f6f72645f73746f72655f706f7274', 'c0'], // coord_store_port: nil (unknown)
  ['b9636f6f7264696e61746f725f696e7075745f61646472657373', 'c0'], // coordinator_input_address: nil (unknown)
  ['ba636f6f7264696e61746f725f6f75747075745f61646472657373', 'c0'], // coordinator_output_address: nil (unknown)
  ['b06b765f6576656e74735f636f6e666967', 'c0'], // kv_events_config: nil
  ['b77765696768745f7472616e736665725f6261636b656e64', 'c0'], // weight_transfer_backend: nil (unknown)
  ['b1656e61626c655f736c6565705f6d6f6465', 'c2'], // enable_sleep_mode: false (unknown)
  ['bd737570706f7274735f64726166745f7765696768745f75706461746573', 'c2'], // supports_draft_weight_updates: false (unknown)
];

test('golden: a long ready response with 9 unknown keys decodes; the unknown keys are ignored', () => {
  const bytes = fromHex('de001b' + LONG_FORM_EXTRA_KEYS.map(([k, v]) => k + v).join(''));
  const generic = mpDecode(bytes) as Record<string, unknown>;
  assert.equal(Object.keys(generic).length, 27);
  assert.equal(generic.supports_draft_weight_updates, false);
  assert.equal(generic.kv_cache_max_concurrency, 1.5);
  assert.deepEqual(decodeReadyResponse(bytes), {
    form: 'long',
    maxModelLen: 32768,
    numGpuBlocks: 24690,
    prefixGranularity: 16,
    dtype: 'bfloat16',
    vllmVersion: '0.23.0',
    worldSize: 1,
    dataParallelSize: 2,
    tensorParallelSize: 1,
    pipelineParallelSize: 1,
    decodeContextParallelSize: 1,
    dataParallelRank: 1,
    maxNumSeqs: 256,
    maxNumBatchedTokens: 8192,
    instanceId: 'vllm-0',
    kvCacheSizeTokens: 395040,
    kvCacheMaxConcurrency: 1.5,
  });
  // Unknown keys may carry any msgpack value, nested ones included.
  const nested = mpEncode({ future: { a: [1, { b: 'x' }], c: new Uint8Array([1, 2]) }, max_model_len: 8, more: [[]] });
  assert.equal(decodeReadyResponse(nested).maxModelLen, 8);
});

test('ready response forms: short, partial (some of the later keys), long; unknown keys do not count', () => {
  assert.equal(readyResponseForm(new Set(SHORT_FORM_KEYS)), 'short');
  assert.equal(readyResponseForm(new Set([...SHORT_FORM_KEYS, 'some_future_key'])), 'short');
  assert.equal(readyResponseForm(new Set([...SHORT_FORM_KEYS, 'dtype'])), 'partial');
  assert.equal(readyResponseForm(new Set([...SHORT_FORM_KEYS, 'dtype', 'vllm_version'])), 'partial');
  assert.equal(
    readyResponseForm(
      new Set(['max_model_len', 'block_size', 'dtype', 'vllm_version', 'world_size', 'data_parallel_size']),
    ),
    'long',
  );
  assert.equal(
    readyResponseForm(
      new Set(['max_model_len', 'prefix_granularity', 'dtype', 'vllm_version', 'world_size', 'data_parallel_size']),
    ),
    'long',
  );
  // A release in between (dtype only, then dtype + vllm_version) decodes as partial, with what it sent.
  const partial = decodeReadyResponse(
    mpEncode({
      max_model_len: 2048,
      num_gpu_blocks: 7,
      dp_stats_address: null,
      dtype: 'float16',
      vllm_version: '0.10.1',
    }),
  );
  assert.equal(partial.form, 'partial');
  assert.equal(partial.dtype, 'float16');
  assert.equal(partial.vllmVersion, '0.10.1');
  assert.equal(partial.dataParallelSize, null);
});

test('ready response: only max_model_len is required; informational keys never block registration', () => {
  // The smallest registration: max_model_len alone.
  const minimal = decodeReadyResponse(mpEncode({ max_model_len: 1024 }));
  assert.deepEqual(minimal, { ...shortDecoded(1024, 0), numGpuBlocks: null });
  rejects(
    () => decodeReadyResponse(mpEncode({ num_gpu_blocks: 1 })),
    /^EngineCoreReadyResponse: missing required key 'max_model_len'$/,
  );
  rejects(
    () => decodeReadyResponse(mpEncode({ max_model_len: 1.5 })),
    /^EngineCoreReadyResponse\.max_model_len: expected uint, got float64$/,
  );
  rejects(() => decodeReadyResponse(mpEncode({ max_model_len: -1 })), /max_model_len: expected a non-negative integer/);
  rejects(
    () => decodeReadyResponse(Uint8Array.of(0x93, 0x01, 0x02, 0x03)),
    /^EngineCoreReadyResponse: expected map, got array$/,
  );
  // Truncated bytes are still an error, even inside an informational value.
  rejects(() => decodeReadyResponse(fromHex('82ad6d61785f6d6f64656c5f6c656e01a56474797065a8626666')), /truncated/);

  // An unknown dtype is kept as reported (the gateway logs it once); nil means not reported.
  const odd = decodeReadyResponse(mpEncode({ max_model_len: 1, dtype: 'float8_e4m3fn' }));
  assert.equal(odd.dtype, 'float8_e4m3fn');
  assert.equal(isKnownDtype('float8_e4m3fn'), false);
  assert.ok(KNOWN_DTYPES.every(isKnownDtype));
  assert.equal(odd.notes, undefined);
  assert.equal(decodeReadyResponse(mpEncode({ max_model_len: 1, dtype: null, vllm_version: null })).dtype, null);

  // Mistyped informational keys: treated as not reported (or the SMG default), each described in `notes`.
  const r = decodeReadyResponse(
    mpEncode({
      max_model_len: 4096,
      num_gpu_blocks: 'many',
      block_size: -16,
      dtype: 16,
      vllm_version: 22,
      world_size: -1,
      data_parallel_size: '2',
      tensor_parallel_size: 1.5,
      instance_id: 7,
      kv_events_config: 5,
      dp_stats_address: 1,
      max_num_batched_tokens: -1,
    }),
  );
  assert.equal(r.form, 'long');
  assert.equal(r.maxModelLen, 4096);
  assert.deepEqual(
    [
      r.numGpuBlocks,
      r.prefixGranularity,
      r.dtype,
      r.vllmVersion,
      r.worldSize,
      r.dataParallelSize,
      r.tensorParallelSize,
      r.instanceId,
    ],
    [null, null, null, null, null, null, 0, ''],
  );
  assert.equal(r.maxNumBatchedTokens, -1, 'signed, as SMG decodes it');
  assert.deepEqual(r.notes, [
    'EngineCoreReadyResponse.num_gpu_blocks: expected uint, got str (treated as not reported)',
    'EngineCoreReadyResponse.block_size: expected a non-negative integer, got -16 (treated as not reported)',
    'EngineCoreReadyResponse.dtype: expected str | null, got int (treated as not reported)',
    'EngineCoreReadyResponse.vllm_version: expected str | null, got int (treated as not reported)',
    'EngineCoreReadyResponse.world_size: expected a non-negative integer, got -1 (treated as not reported)',
    'EngineCoreReadyResponse.data_parallel_size: expected uint, got str (treated as not reported)',
    'EngineCoreReadyResponse.tensor_parallel_size: expected uint, got float64 (treated as not reported)',
    'EngineCoreReadyResponse.instance_id: expected str, got int (treated as not reported)',
    'EngineCoreReadyResponse.dp_stats_address: expected str | null, got int (treated as not reported)',
    'EngineCoreReadyResponse.kv_events_config: expected dict[str, any] | null, got int (treated as not reported)',
  ]);
  assert.throws(
    () => encodeReadyResponse({ ...MOCK, maxModelLen: -5 }),
    /max_model_len: expected a non-negative integer/,
  );
});
