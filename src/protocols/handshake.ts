/**
 * The startup handshake payloads (engine-wire.md sections 2.3-2.5; TokenSpeed `zmq_wire.py`, SMG
 * `protocol/handshake.rs`). All three are msgspec structs in the default **named map** encoding: string keys in
 * declaration order, nil values written (not omitted), unknown keys ignored on decode.
 *
 * - `WireReadyMessage` (HELLO / READY, engine → gateway, handshake socket): 4 keys (2.3).
 * - `WireHandshakeInitMessage` (INIT, gateway → engine): `addresses` (required) and `parallel_config` (2.4).
 * - `EngineCoreReadyResponse` (registration frame, engine → gateway, input socket): 19 keys, map16 (2.5), or the
 *   3-key short form older vLLM releases send (issue #14); decoded leniently (only `max_model_len` is required).
 *
 * Decoders throw `HandshakeDecodeError` naming the struct and key; encoders throw `WireEncodeError`.
 */
import type { ReadyResponse, ReadyResponseForm } from './types.js';
import {
  anyValue,
  bool,
  decodeMessage,
  encodeMessage,
  float,
  list,
  namedMap,
  nullable,
  safeInt,
  str,
  strMap,
  uint,
} from '../wire/codec.js';
import type { Codec, FieldSpec } from '../wire/codec.js';
import { HandshakeDecodeError, WireDecodeError, WireEncodeError } from '../wire/errors.js';
import { MsgpackReader } from '../wire/reader.js';

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
    throw new HandshakeDecodeError(
      'WireReadyMessage.status',
      `expected 'HELLO' or 'READY', got ${m.status === null ? 'nil' : `'${m.status}'`}`,
    );
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
    throw new HandshakeDecodeError(
      'WireHandshakeInitMessage.addresses.inputs',
      'empty: INIT must carry an input address',
    );
  }
  if (init.outputs.length === 0) {
    throw new HandshakeDecodeError(
      'WireHandshakeInitMessage.addresses.outputs',
      'empty: INIT must carry an output address',
    );
  }
}

// ---------------------------------------------------------------------------------------------------------------
// 2.5 EngineCoreReadyResponse

/**
 * The dtypes SMG's decoder accepts (engine-wire.md 2.5). The gateway accepts any string (issue #14: what a given vLLM
 * release writes there is not pinned down; vLLM writes `str(model_config.dtype)` without `torch.`), keeps it as
 * reported and logs one it does not know. It only matters for casting multimodal float tensors (5.5), unused by text.
 */
export const KNOWN_DTYPES: readonly string[] = Object.freeze(['float16', 'bfloat16', 'float32']);

/** True when `dtype` is one of `KNOWN_DTYPES`. */
export function isKnownDtype(dtype: string): boolean {
  return KNOWN_DTYPES.includes(dtype);
}

/** An informational value that did not have its declared type; `message` is the decode error (path included). */
class Unreadable {
  constructor(readonly message: string) {}
}

/** `T`, or `Unreadable` for a present value of the wrong type. */
type Lenient<T> = T | Unreadable;

/**
 * Decode-only wrapper for an informational key (issue #14: "nothing that only informs may block registration"): a
 * value that does not decode as `inner` is skipped and returned as `Unreadable`. Truncated bytes still throw (the
 * skip fails too): a frame that is not msgpack at all is not a ready response.
 */
function lenient<T>(inner: Codec<T>): Codec<Lenient<T>> {
  return {
    type: inner.type,
    decode(r, path) {
      const start = r.pos;
      try {
        return inner.decode(r, path);
      } catch (err) {
        if (!(err instanceof WireDecodeError)) throw err;
        r.pos = start;
        r.skip(path);
        return new Unreadable(err.message);
      }
    },
    encode() {
      throw new WireEncodeError('EngineCoreReadyResponse', 'lenient codecs are decode-only');
    },
  };
}

/** `EngineCoreReadyResponse` as the gateway decodes it: only `max_model_len` is strict (engine-wire.md 2.5). */
interface WireReadyResponseIn {
  max_model_len: number;
  num_gpu_blocks: Lenient<number | null>;
  prefix_granularity: Lenient<number | null>;
  dp_stats_address: Lenient<string | null>;
  dtype: Lenient<string | null>;
  multimodal_encoder_dtype: Lenient<string | null>;
  vllm_version: Lenient<string | null>;
  world_size: Lenient<number | null>;
  data_parallel_size: Lenient<number | null>;
  tensor_parallel_size: Lenient<number>;
  pipeline_parallel_size: Lenient<number>;
  decode_context_parallel_size: Lenient<number>;
  data_parallel_rank: Lenient<number>;
  max_num_seqs: Lenient<number>;
  max_num_batched_tokens: Lenient<number>;
  instance_id: Lenient<string>;
  kv_cache_size_tokens: Lenient<number | null>;
  kv_cache_max_concurrency: Lenient<number | null>;
  kv_events_config: Lenient<Record<string, unknown> | null>;
}

/**
 * The decoder's fields. Defaults: the keys the short form lacks and SMG required (`prefix_granularity`/`block_size`,
 * `dtype`, `vllm_version`, `world_size`, `data_parallel_size`) are null = not reported, and so is `num_gpu_blocks`
 * when absent; the keys SMG already treated as optional keep SMG's decoder defaults (0 for the parallel sizes, the
 * rank and the limits, `""`, null), not TokenSpeed's struct defaults (`DEFAULT_READY_RESPONSE`). `dtype` and
 * `vllm_version` accept nil as "not reported".
 */
const readyResponseInCodec = namedMap<WireReadyResponseIn>({
  name: 'EngineCoreReadyResponse',
  fields: [
    { name: 'max_model_len', codec: uint },
    { name: 'num_gpu_blocks', codec: lenient(uint), dflt: () => null },
    { name: 'prefix_granularity', codec: lenient(uint), dflt: () => null, aliases: ['block_size'] },
    { name: 'dp_stats_address', codec: lenient(nullable(str)), dflt: () => null },
    { name: 'dtype', codec: lenient(nullable(str)), dflt: () => null },
    { name: 'multimodal_encoder_dtype', codec: lenient(nullable(str)), dflt: () => null },
    { name: 'vllm_version', codec: lenient(nullable(str)), dflt: () => null },
    { name: 'world_size', codec: lenient(uint), dflt: () => null },
    { name: 'data_parallel_size', codec: lenient(uint), dflt: () => null },
    { name: 'tensor_parallel_size', codec: lenient(uint), dflt: () => 0 },
    { name: 'pipeline_parallel_size', codec: lenient(uint), dflt: () => 0 },
    { name: 'decode_context_parallel_size', codec: lenient(uint), dflt: () => 0 },
    { name: 'data_parallel_rank', codec: lenient(uint), dflt: () => 0 },
    { name: 'max_num_seqs', codec: lenient(uint), dflt: () => 0 },
    { name: 'max_num_batched_tokens', codec: lenient(safeInt), dflt: () => 0 },
    { name: 'instance_id', codec: lenient(str), dflt: () => '' },
    { name: 'kv_cache_size_tokens', codec: lenient(nullable(uint)), dflt: () => null },
    { name: 'kv_cache_max_concurrency', codec: lenient(nullable(float)), dflt: () => null },
    { name: 'kv_events_config', codec: lenient(nullable(strMap(anyValue))), dflt: () => null },
  ],
});

/** The keys of the short form (vLLM up to at least upstream 9aaf83ef, 2026-05-19), in the order vLLM writes them. */
export const SHORT_FORM_KEYS: readonly string[] = Object.freeze([
  'max_model_len',
  'num_gpu_blocks',
  'dp_stats_address',
]);

/** The keys the long form requires beyond the short form (SMG's decoder); alternatives share a row. */
const LONG_FORM_REQUIRED: readonly (readonly string[])[] = [
  ['prefix_granularity', 'block_size'],
  ['dtype'],
  ['vllm_version'],
  ['world_size'],
  ['data_parallel_size'],
];

/** Every key of the 19-key form that the short form does not have. */
const LONG_FORM_KEYS: ReadonlySet<string> = new Set([
  'prefix_granularity',
  'block_size',
  'dtype',
  'multimodal_encoder_dtype',
  'vllm_version',
  'world_size',
  'data_parallel_size',
  'tensor_parallel_size',
  'pipeline_parallel_size',
  'decode_context_parallel_size',
  'data_parallel_rank',
  'max_num_seqs',
  'max_num_batched_tokens',
  'instance_id',
  'kv_cache_size_tokens',
  'kv_cache_max_concurrency',
  'kv_events_config',
]);

/** The top-level keys of a map frame (values skipped). Throws WireDecodeError on a non-map or malformed frame. */
function mapKeys(bytes: Uint8Array, root: string): Set<string> {
  const r = new MsgpackReader(bytes);
  const n = r.readMapHeader(root);
  const keys = new Set<string>();
  for (let i = 0; i < n; i++) {
    const key = r.readStr(`${root}(key ${i})`);
    keys.add(key);
    r.skip(`${root}.${key}`);
  }
  return keys;
}

/** Which form a ready response with these keys is (see `ReadyResponseForm`). Pure. */
export function readyResponseForm(keys: ReadonlySet<string>): ReadyResponseForm {
  if (LONG_FORM_REQUIRED.every((alternatives) => alternatives.some((k) => keys.has(k)))) return 'long';
  for (const k of keys) if (LONG_FORM_KEYS.has(k)) return 'partial';
  return 'short';
}

/** `EngineCoreReadyResponse` as TokenSpeed writes it (19 keys, this order; engine-wire.md 2.5), for encoding. */
interface WireEngineCoreReadyResponse {
  max_model_len: number;
  num_gpu_blocks: number;
  prefix_granularity: number;
  dp_stats_address: string | null;
  dtype: string;
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

const readyResponseFields: readonly FieldSpec<WireEngineCoreReadyResponse>[] = [
  { name: 'max_model_len', codec: uint },
  { name: 'num_gpu_blocks', codec: uint },
  { name: 'prefix_granularity', codec: uint },
  { name: 'dp_stats_address', codec: nullable(str) },
  { name: 'dtype', codec: str },
  { name: 'multimodal_encoder_dtype', codec: nullable(str) },
  { name: 'vllm_version', codec: str },
  { name: 'world_size', codec: uint },
  { name: 'data_parallel_size', codec: uint },
  { name: 'tensor_parallel_size', codec: uint },
  { name: 'pipeline_parallel_size', codec: uint },
  { name: 'decode_context_parallel_size', codec: uint },
  { name: 'data_parallel_rank', codec: uint },
  { name: 'max_num_seqs', codec: uint },
  { name: 'max_num_batched_tokens', codec: safeInt },
  { name: 'instance_id', codec: str },
  { name: 'kv_cache_size_tokens', codec: nullable(uint) },
  { name: 'kv_cache_max_concurrency', codec: nullable(float) },
  { name: 'kv_events_config', codec: nullable(strMap(anyValue)) },
];

const readyResponseCodec = namedMap<WireEngineCoreReadyResponse>({
  name: 'EngineCoreReadyResponse',
  fields: readyResponseFields,
});

/** The vLLM spelling: the same fields with `block_size` in place of `prefix_granularity` (encode only). */
const readyResponseBlockSizeCodec = namedMap<Record<string, unknown>>({
  name: 'EngineCoreReadyResponse',
  fields: readyResponseFields.map((f) =>
    f.name === 'prefix_granularity' ? { ...f, name: 'block_size' } : f,
  ) as unknown as readonly FieldSpec<Record<string, unknown>>[],
});

/** The short form (encode only): `max_model_len`, `num_gpu_blocks`, `dp_stats_address`, in vLLM's order. */
interface WireShortReadyResponse {
  max_model_len: number;
  num_gpu_blocks: number;
  dp_stats_address: string | null;
}

const shortReadyResponseCodec = namedMap<WireShortReadyResponse>({
  name: 'EngineCoreReadyResponse',
  fields: [
    { name: 'max_model_len', codec: uint },
    { name: 'num_gpu_blocks', codec: uint },
    { name: 'dp_stats_address', codec: nullable(str) },
  ],
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

/** `value`, or a WireEncodeError naming `key` when it is null (the long form carries every key). */
function reported<T>(value: T | null, key: string): T {
  if (value === null)
    throw new WireEncodeError(`EngineCoreReadyResponse.${key}`, 'not reported (null), but the long form carries it');
  return value;
}

/**
 * Encodes a ready response (`dp_stats_address` and `multimodal_encoder_dtype` nil; `kv_events_config` as `kvEventsConfig`
 * says, nil when absent, as TokenSpeed and vLLM at 9aaf83ef always send it).
 * - `form: 'long'` (default): all 19 keys in TokenSpeed order (map16 `de 0013`); `granularityKey` picks the spelling
 *   of key 3 (`prefix_granularity`, TokenSpeed, default; `block_size`, vLLM).
 * - `form: 'short'`: the three keys of vLLM releases up to at least 9aaf83ef (`max_model_len`, `num_gpu_blocks`,
 *   `dp_stats_address`; fixmap `83`); everything else is left out. A null `numGpuBlocks` is written as 0, as vLLM
 *   writes `num_gpu_blocks or 0`.
 * Throws WireEncodeError on a negative or non-integral count, or (long form) a field that is null.
 */
export function encodeReadyResponse(
  r: ReadyResponse,
  opts: { granularityKey?: 'prefix_granularity' | 'block_size'; form?: 'long' | 'short' } = {},
): Uint8Array {
  if (opts.form === 'short') {
    return encodeMessage(shortReadyResponseCodec, {
      max_model_len: r.maxModelLen,
      num_gpu_blocks: r.numGpuBlocks ?? 0,
      dp_stats_address: null,
    });
  }
  const wire: WireEngineCoreReadyResponse = {
    max_model_len: r.maxModelLen,
    num_gpu_blocks: reported(r.numGpuBlocks, 'num_gpu_blocks'),
    prefix_granularity: reported(r.prefixGranularity, opts.granularityKey ?? 'prefix_granularity'),
    dp_stats_address: null,
    dtype: reported(r.dtype, 'dtype'),
    multimodal_encoder_dtype: null,
    vllm_version: reported(r.vllmVersion, 'vllm_version'),
    world_size: reported(r.worldSize, 'world_size'),
    data_parallel_size: reported(r.dataParallelSize, 'data_parallel_size'),
    tensor_parallel_size: r.tensorParallelSize,
    pipeline_parallel_size: r.pipelineParallelSize,
    decode_context_parallel_size: r.decodeContextParallelSize,
    data_parallel_rank: r.dataParallelRank,
    max_num_seqs: r.maxNumSeqs,
    max_num_batched_tokens: r.maxNumBatchedTokens,
    instance_id: r.instanceId,
    kv_cache_size_tokens: r.kvCacheSizeTokens,
    kv_cache_max_concurrency: r.kvCacheMaxConcurrency,
    kv_events_config: r.kvEventsConfig ?? null,
  };
  if (opts.granularityKey === 'block_size') {
    const { prefix_granularity, ...rest } = wire;
    return encodeMessage(readyResponseBlockSizeCodec, { ...rest, block_size: prefix_granularity });
  }
  return encodeMessage(readyResponseCodec, wire);
}

/**
 * Decodes a registration frame (engine-wire.md 2.5), any form (issue #14): the 19-key long form (TokenSpeed; vLLM
 * after 9aaf83ef, with `block_size`), the 3-key short form (`max_model_len`, `num_gpu_blocks`, `dp_stats_address`;
 * vLLM up to at least 9aaf83ef), anything in between, and any map with extra unknown keys (ignored).
 *
 * Only `max_model_len` (a uint) is required: the gateway cannot admit requests without it. Every other key only
 * informs and never blocks registration: absent → the default of `WireReadyResponseIn` (null = not reported for the
 * keys the short form lacks, see `ReadyResponse`); present with the wrong type → treated as absent and described in
 * `notes`. `dtype` is kept as reported, known or not (`isKnownDtype`). The result's `form` says which form it was.
 * Throws HandshakeDecodeError on a frame that is not a msgpack map with string keys, truncated bytes, trailing bytes,
 * or a missing or mistyped `max_model_len`.
 */
export function decodeReadyResponse(bytes: Uint8Array): ReadyResponse {
  const m = asHandshakeError(() => decodeMessage(readyResponseInCodec, bytes));
  const keys = asHandshakeError(() => mapKeys(bytes, 'EngineCoreReadyResponse'));
  const notes: string[] = [];
  const value = <T>(v: Lenient<T>, unknown: T): T => {
    if (!(v instanceof Unreadable)) return v;
    notes.push(`${v.message} (treated as not reported)`);
    return unknown;
  };
  const out: ReadyResponse = {
    form: readyResponseForm(keys),
    maxModelLen: m.max_model_len,
    numGpuBlocks: value(m.num_gpu_blocks, null),
    prefixGranularity: value(m.prefix_granularity, null),
    dtype: value(m.dtype, null),
    vllmVersion: value(m.vllm_version, null),
    worldSize: value(m.world_size, null),
    dataParallelSize: value(m.data_parallel_size, null),
    tensorParallelSize: value(m.tensor_parallel_size, 0),
    pipelineParallelSize: value(m.pipeline_parallel_size, 0),
    decodeContextParallelSize: value(m.decode_context_parallel_size, 0),
    dataParallelRank: value(m.data_parallel_rank, 0),
    maxNumSeqs: value(m.max_num_seqs, 0),
    maxNumBatchedTokens: value(m.max_num_batched_tokens, 0),
    instanceId: value(m.instance_id, ''),
    kvCacheSizeTokens: value(m.kv_cache_size_tokens, null),
    kvCacheMaxConcurrency: value(m.kv_cache_max_concurrency, null),
  };
  // Decoded and type-checked, not carried: a wrong type is still worth a note.
  value(m.dp_stats_address, null);
  value(m.multimodal_encoder_dtype, null);
  const kvEvents = value(m.kv_events_config, null);
  if (kvEvents !== null) out.kvEventsConfig = kvEvents;
  if (notes.length > 0) out.notes = notes;
  return out;
}
