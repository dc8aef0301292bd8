/**
 * The startup handshake payloads (engine-wire.md sections 2.3-2.5; TokenSpeed `zmq_wire.py`, SMG
 * `protocol/handshake.rs`). All three are msgspec structs in the default **named map** encoding: string keys in
 * declaration order, nil values written (not omitted), unknown keys ignored on decode.
 *
 * - `WireReadyMessage` (HELLO / READY, engine → gateway, handshake socket): 4 keys (2.3).
 * - `WireHandshakeInitMessage` (INIT, gateway → engine): `addresses` (required) and `parallel_config` (2.4).
 * - `EngineCoreReadyResponse` (registration frame, engine → gateway, input socket): 19 keys, map16 (2.5).
 *
 * Decoders throw `HandshakeDecodeError` naming the struct and key; encoders throw `WireEncodeError`.
 */
import type { ReadyResponse } from './types.js';
import {
  anyValue, bool, decodeMessage, encodeMessage, enumStr, float, list, namedMap, nullable, safeInt, str, strMap, uint,
} from '../wire/codec.js';
import type { Codec, FieldSpec } from '../wire/codec.js';
import { HandshakeDecodeError, WireDecodeError } from '../wire/errors.js';

/** Runs a decoder and re-throws any `WireDecodeError` as a `HandshakeDecodeError` with the same path and problem. */
function asHandshakeError<T>(decode: () => T): T {
  try {
    return decode();
  } catch (err) {
    if (err instanceof WireDecodeError && !(err instanceof HandshakeDecodeError)) {
      throw new HandshakeDecodeError(err.path, err.problem);
    }
    throw err;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// 2.3 WireReadyMessage

/** `WireReadyMessage` as it travels (engine-wire.md 2.3): every key optional, nil by default. */
interface WireReadyMessage {
  status: string | null;
  local: boolean | null;
  headless: boolean | null;
  parallel_config_hash: string | null;
}

const readyMessageCodec = namedMap<WireReadyMessage>({
  name: 'WireReadyMessage',
  fields: [
    { name: 'status', codec: nullable(str), dflt: () => null },
    { name: 'local', codec: nullable(bool), dflt: () => null },
    { name: 'headless', codec: nullable(bool), dflt: () => null },
    { name: 'parallel_config_hash', codec: nullable(str), dflt: () => null },
  ],
});

/** A decoded HELLO or READY (engine-wire.md 2.3). */
export interface ReadyMessage {
  status: 'HELLO' | 'READY';
  local: boolean | null;
  headless: boolean | null;
  parallelConfigHash: string | null;
}

/**
 * Encodes HELLO or READY as TokenSpeed does: all four keys in order, `local` and `headless` default to true,
 * `parallel_config_hash` to nil (HELLO is 53 bytes, vector `hs_hello`; READY `hs_ready`).
 */
export function encodeReadyMessage(msg: {
  status: 'HELLO' | 'READY';
  local?: boolean | null;
  headless?: boolean | null;
  parallelConfigHash?: string | null;
}): Uint8Array {
  return encodeMessage(readyMessageCodec, {
    status: msg.status,
    local: msg.local === undefined ? true : msg.local,
    headless: msg.headless === undefined ? true : msg.headless,
    parallel_config_hash: msg.parallelConfigHash ?? null,
  });
}

/**
 * Decodes HELLO or READY. Throws HandshakeDecodeError on malformed bytes, a mistyped key, or any `status` other
 * than `"HELLO"` / `"READY"` (nil included; engine-wire.md 2.3).
 */
export function decodeReadyMessage(bytes: Uint8Array): ReadyMessage {
  const m = asHandshakeError(() => decodeMessage(readyMessageCodec, bytes));
  if (m.status !== 'HELLO' && m.status !== 'READY') {
    throw new HandshakeDecodeError('WireReadyMessage.status',
      `expected 'HELLO' or 'READY', got ${m.status === null ? 'nil' : `'${m.status}'`}`);
  }
  return { status: m.status, local: m.local, headless: m.headless, parallelConfigHash: m.parallel_config_hash };
}

// ---------------------------------------------------------------------------------------------------------------
// 2.4 WireHandshakeInitMessage

/** vLLM's `EngineZmqAddresses`, as TokenSpeed declares it (engine-wire.md 2.4). */
interface WireAddresses {
  inputs: string[];
  outputs: string[];
  coordinator_input: string | null;
  coordinator_output: string | null;
  frontend_stats_publish_address: string | null;
}

interface WireHandshakeInitMessage {
  addresses: WireAddresses;
  parallel_config: Record<string, unknown>;
}

const addressesCodec = namedMap<WireAddresses>({
  name: 'EngineZmqAddresses',
  fields: [
    { name: 'inputs', codec: list(str), dflt: () => [] },
    { name: 'outputs', codec: list(str), dflt: () => [] },
    { name: 'coordinator_input', codec: nullable(str), dflt: () => null },
    { name: 'coordinator_output', codec: nullable(str), dflt: () => null },
    { name: 'frontend_stats_publish_address', codec: nullable(str), dflt: () => null },
  ],
});

const initCodec = namedMap<WireHandshakeInitMessage>({
  name: 'WireHandshakeInitMessage',
  fields: [
    { name: 'addresses', codec: addressesCodec },
    { name: 'parallel_config', codec: strMap(anyValue), dflt: () => ({}) },
  ],
});

/** A decoded INIT (engine-wire.md 2.4). The engine uses `inputs[0]` and `outputs[0]`. */
export interface HandshakeInit {
  inputs: string[];
  outputs: string[];
  coordinatorInput: string | null;
  coordinatorOutput: string | null;
  frontendStatsPublishAddress: string | null;
  /** Opaque to the engine (TokenSpeed ignores it). */
  parallelConfig: Record<string, unknown>;
}

/**
 * Encodes INIT in msgspec's full form (vector `hs_init_msgspec`): `addresses` with all five keys (the three
 * coordinator/stats addresses as nil) and an empty `parallel_config`. The gateway sends one input and one output
 * address, the same to every rank. Throws WireEncodeError on a non-string address.
 */
export function encodeHandshakeInit(addresses: { inputs: string[]; outputs: string[] }): Uint8Array {
  return encodeMessage(initCodec, {
    addresses: {
      inputs: addresses.inputs,
      outputs: addresses.outputs,
      coordinator_input: null,
      coordinator_output: null,
      frontend_stats_publish_address: null,
    },
    parallel_config: {},
  });
}

/**
 * Decodes INIT as the engine does (TokenSpeed `zmq_wire.decode_init`): unknown keys ignored at both levels
 * (`hs_init_unknown_keys`), absent keys defaulted (`hs_init_minimal`). Throws HandshakeDecodeError when
 * `addresses` is missing (`inv_hs_init_no_addresses`) or `inputs`/`outputs` is not a list of str
 * (`inv_hs_init_inputs_string`). An empty list decodes (`inv_hs_init_empty_inputs`): the caller must refuse it.
 */
export function decodeHandshakeInit(bytes: Uint8Array): HandshakeInit {
  const m = asHandshakeError(() => decodeMessage(initCodec, bytes));
  return {
    inputs: m.addresses.inputs,
    outputs: m.addresses.outputs,
    coordinatorInput: m.addresses.coordinator_input,
    coordinatorOutput: m.addresses.coordinator_output,
    frontendStatsPublishAddress: m.addresses.frontend_stats_publish_address,
    parallelConfig: m.parallel_config,
  };
}

/**
 * The engine-side check after decoding INIT (TokenSpeed `connect_msgpack_engine`): both `inputs` and `outputs`
 * must carry at least one address, else startup aborts (`inv_hs_init_empty_inputs`). Throws HandshakeDecodeError
 * naming the empty list.
 */
export function assertInitAddresses(init: HandshakeInit): void {
  if (init.inputs.length === 0) {
    throw new HandshakeDecodeError('WireHandshakeInitMessage.addresses.inputs', 'empty: INIT must carry an input address');
  }
  if (init.outputs.length === 0) {
    throw new HandshakeDecodeError('WireHandshakeInitMessage.addresses.outputs', 'empty: INIT must carry an output address');
  }
}

// ---------------------------------------------------------------------------------------------------------------
// 2.5 EngineCoreReadyResponse

const DTYPES = ['float16', 'bfloat16', 'float32'] as const;

/** `EngineCoreReadyResponse` as it travels, TokenSpeed key order (engine-wire.md 2.5). */
interface WireEngineCoreReadyResponse {
  max_model_len: number;
  num_gpu_blocks: number;
  prefix_granularity: number;
  dp_stats_address: string | null;
  dtype: ReadyResponse['dtype'];
  multimodal_encoder_dtype: string | null;
  vllm_version: string;
  world_size: number;
  data_parallel_size: number;
  tensor_parallel_size: number;
  pipeline_parallel_size: number;
  decode_context_parallel_size: number;
  data_parallel_rank: number;
  max_num_seqs: number;
  max_num_batched_tokens: number;
  instance_id: string;
  kv_cache_size_tokens: number | null;
  kv_cache_max_concurrency: number | null;
  kv_events_config: Record<string, unknown> | null;
}

/**
 * The 19 fields. "Required" (no default) follows SMG's gateway decoder, and the defaults of optional keys are
 * the decoder's (0 for the parallel sizes), not TokenSpeed's struct defaults (`DEFAULT_READY_RESPONSE`).
 */
const readyResponseFields: readonly FieldSpec<WireEngineCoreReadyResponse>[] = [
  { name: 'max_model_len', codec: uint },
  { name: 'num_gpu_blocks', codec: uint },
  { name: 'prefix_granularity', codec: uint, aliases: ['block_size'] },
  { name: 'dp_stats_address', codec: nullable(str), dflt: () => null },
  { name: 'dtype', codec: enumStr(DTYPES) },
  { name: 'multimodal_encoder_dtype', codec: nullable(str), dflt: () => null },
  { name: 'vllm_version', codec: str },
  { name: 'world_size', codec: uint },
  { name: 'data_parallel_size', codec: uint },
  { name: 'tensor_parallel_size', codec: uint, dflt: () => 0 },
  { name: 'pipeline_parallel_size', codec: uint, dflt: () => 0 },
  { name: 'decode_context_parallel_size', codec: uint, dflt: () => 0 },
  { name: 'data_parallel_rank', codec: uint, dflt: () => 0 },
  { name: 'max_num_seqs', codec: uint, dflt: () => 0 },
  { name: 'max_num_batched_tokens', codec: safeInt, dflt: () => 0 },
  { name: 'instance_id', codec: str, dflt: () => '' },
  { name: 'kv_cache_size_tokens', codec: nullable(uint), dflt: () => null },
  { name: 'kv_cache_max_concurrency', codec: nullable(float), dflt: () => null },
  { name: 'kv_events_config', codec: nullable(strMap(anyValue)), dflt: () => null },
];

const readyResponseCodec = namedMap<WireEngineCoreReadyResponse>({
  name: 'EngineCoreReadyResponse',
  fields: readyResponseFields,
});

/** The vLLM spelling: the same fields with `block_size` in place of `prefix_granularity` (encode only). */
const readyResponseBlockSizeCodec = namedMap<Record<string, unknown>>({
  name: 'EngineCoreReadyResponse',
  fields: readyResponseFields.map((f) =>
    f.name === 'prefix_granularity' ? { ...f, name: 'block_size', aliases: [] } : f,
  ) as unknown as readonly FieldSpec<Record<string, unknown>>[],
});

/** TokenSpeed's `EngineCoreReadyResponse` struct defaults (engine-wire.md 2.5 "TokenSpeed default" column). */
export const DEFAULT_READY_RESPONSE: Readonly<ReadyResponse> = Object.freeze({
  maxModelLen: 0,
  numGpuBlocks: 0,
  prefixGranularity: 0,
  dtype: 'bfloat16',
  vllmVersion: '',
  worldSize: 1,
  dataParallelSize: 1,
  tensorParallelSize: 1,
  pipelineParallelSize: 1,
  decodeContextParallelSize: 1,
  dataParallelRank: 0,
  maxNumSeqs: 0,
  maxNumBatchedTokens: 0,
  instanceId: '',
  kvCacheSizeTokens: null,
  kvCacheMaxConcurrency: null,
});

/**
 * Encodes a ready response with all 19 keys in TokenSpeed order (map16 `de 0013`); `dp_stats_address`,
 * `multimodal_encoder_dtype` and `kv_events_config` are nil. `granularityKey` picks the spelling of key 3
 * (`prefix_granularity`, TokenSpeed, default; `block_size`, vLLM). Throws WireEncodeError on a negative or
 * non-integral count or an unknown dtype.
 */
export function encodeReadyResponse(
  r: ReadyResponse,
  opts: { granularityKey?: 'prefix_granularity' | 'block_size' } = {},
): Uint8Array {
  const wire: WireEngineCoreReadyResponse = {
    max_model_len: r.maxModelLen,
    num_gpu_blocks: r.numGpuBlocks,
    prefix_granularity: r.prefixGranularity,
    dp_stats_address: null,
    dtype: r.dtype,
    multimodal_encoder_dtype: null,
    vllm_version: r.vllmVersion,
    world_size: r.worldSize,
    data_parallel_size: r.dataParallelSize,
    tensor_parallel_size: r.tensorParallelSize,
    pipeline_parallel_size: r.pipelineParallelSize,
    decode_context_parallel_size: r.decodeContextParallelSize,
    data_parallel_rank: r.dataParallelRank,
    max_num_seqs: r.maxNumSeqs,
    max_num_batched_tokens: r.maxNumBatchedTokens,
    instance_id: r.instanceId,
    kv_cache_size_tokens: r.kvCacheSizeTokens,
    kv_cache_max_concurrency: r.kvCacheMaxConcurrency,
    kv_events_config: null,
  };
  if (opts.granularityKey === 'block_size') {
    const { prefix_granularity, ...rest } = wire;
    return encodeMessage(readyResponseBlockSizeCodec, { ...rest, block_size: prefix_granularity });
  }
  return encodeMessage(readyResponseCodec as Codec<WireEngineCoreReadyResponse>, wire);
}

/**
 * Decodes a registration frame the way SMG's gateway decoder does (engine-wire.md 2.5): required keys
 * `max_model_len`, `num_gpu_blocks`, `prefix_granularity` (or `block_size`), `dtype` (only float16, bfloat16,
 * float32), `vllm_version`, `world_size`, `data_parallel_size`; optional keys default to 0 / "" / null; unknown keys
 * ignored; `max_num_batched_tokens` signed. Throws HandshakeDecodeError naming the key.
 */
export function decodeReadyResponse(bytes: Uint8Array): ReadyResponse {
  const m = asHandshakeError(() => decodeMessage(readyResponseCodec, bytes));
  return {
    maxModelLen: m.max_model_len,
    numGpuBlocks: m.num_gpu_blocks,
    prefixGranularity: m.prefix_granularity,
    dtype: m.dtype,
    vllmVersion: m.vllm_version,
    worldSize: m.world_size,
    dataParallelSize: m.data_parallel_size,
    tensorParallelSize: m.tensor_parallel_size,
    pipelineParallelSize: m.pipeline_parallel_size,
    decodeContextParallelSize: m.decode_context_parallel_size,
    dataParallelRank: m.data_parallel_rank,
    maxNumSeqs: m.max_num_seqs,
    maxNumBatchedTokens: m.max_num_batched_tokens,
    instanceId: m.instance_id,
    kvCacheSizeTokens: m.kv_cache_size_tokens,
    kvCacheMaxConcurrency: m.kv_cache_max_concurrency,
  };
}
