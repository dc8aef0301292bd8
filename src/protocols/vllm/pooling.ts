/**
 * Pooling (embedding) requests on the vLLM EngineCore wire (docs/wire/vllm-pooling.md):
 * - a pooling request is an ordinary `EngineCoreRequest` whose `sampling_params` (index 3) is nil and whose
 *   `pooling_params` (index 4) is vLLM's `PoolingParams`, an `array_like` msgspec struct (a positional array in the
 *   declaration order of `vllm/pooling_params.py`);
 * - its one output is terminal (`finish_reason` 0, stop; `RequestOutputKind.FINAL_ONLY` is the only kind vLLM allows
 *   for pooling) and carries the pooled tensor in `pooling_output` (index 4 of `EngineCoreOutput`), written by
 *   vLLM's `MsgpackEncoder._encode_tensor` (`vllm/v1/serial_utils.py`) as `[torch dtype name, shape, data]`, the same
 *   ndarray form as the logprob tensors (tensors.ts).
 *
 * The field order is the one of vLLM's `PoolingParams` since `late_interaction_params` was added and
 * `truncate_prompt_tokens`/`normalize` were removed (10 fields; SMG `crates/engine_zmq_client/src/protocol/vllm/
 * pooling.rs` pins its bytes against vLLM's encoder). Older vLLM trees declare other orders (a leading
 * `truncate_prompt_tokens`); an engine from such a tree refuses this array. docs/wire/vllm-pooling.md lists them.
 */
import { anyValue, bool, int, list, nullable, positional, str } from '../../wire/codec.js';
import { WireDecodeError } from '../../wire/errors.js';
import { float32LeBytes } from '../../wire/float32.js';
import type { WireInt } from '../../wire/reader.js';
import type { PoolingOptions } from '../types.js';
import type { WireNdArray } from './tensors.js';

/** vLLM `RequestOutputKind.FINAL_ONLY`: the only output kind a pooling request may have (`PoolingParams.__post_init__`). */
export const OUTPUT_KIND_FINAL_ONLY = 2;

/** vLLM `PoolingParams`, wire order (see the module comment). */
export interface PoolingParams {
  /** 0: apply the pooler's activation (for `embed`: L2-normalize). vLLM's frontend resolves nil to true. */
  use_activation: boolean | null;
  /** 1: Matryoshka truncation of the embedding (elements), nil for the model's full size. */
  dimensions: WireInt | null;
  step_tag_id: WireInt | null;
  returned_token_ids: WireInt[] | null;
  /** 4: the pooling task (`embed`, `classify`, `token_embed`, ...). */
  task: string | null;
  requires_token_ids: boolean;
  skip_reading_prefix_cache: boolean | null;
  late_interaction_params: unknown;
  extra_kwargs: unknown;
  /** 9: `RequestOutputKind` as an int; 2 (FINAL_ONLY) for pooling. */
  output_kind: WireInt;
}

/** The `PoolingParams` codec: every field has vLLM's default, so a short array decodes. */
export const poolingParamsCodec = positional<PoolingParams>({
  name: 'PoolingParams',
  fields: [
    { name: 'use_activation', codec: nullable(bool), dflt: () => null },
    { name: 'dimensions', codec: nullable(int), dflt: () => null },
    { name: 'step_tag_id', codec: nullable(int), dflt: () => null },
    { name: 'returned_token_ids', codec: nullable(list(int)), dflt: () => null },
    { name: 'task', codec: nullable(str), dflt: () => null },
    { name: 'requires_token_ids', codec: bool, dflt: () => false },
    { name: 'skip_reading_prefix_cache', codec: nullable(bool), dflt: () => null },
    { name: 'late_interaction_params', codec: anyValue, dflt: () => null },
    { name: 'extra_kwargs', codec: anyValue, dflt: () => null },
    { name: 'output_kind', codec: int, dflt: () => OUTPUT_KIND_FINAL_ONLY },
  ],
});

/**
 * The `PoolingParams` the gateway sends for `opts`: what vLLM's frontend hands the engine after `verify` for an
 * `embed` request (`use_activation` resolved, `skip_reading_prefix_cache` false: a sequence embedding may reuse the
 * prefix cache), with `dimensions` when the client asked for fewer.
 */
export function toPoolingParams(opts: PoolingOptions): PoolingParams {
  return {
    use_activation: opts.normalize,
    dimensions: opts.dimensions,
    step_tag_id: null,
    returned_token_ids: null,
    task: opts.task,
    requires_token_ids: false,
    skip_reading_prefix_cache: false,
    late_interaction_params: null,
    extra_kwargs: null,
    output_kind: OUTPUT_KIND_FINAL_ONLY,
  };
}

/** Float dtypes a pooled tensor may have (torch dtype names, as `_encode_tensor` writes them). */
const FLOAT_DTYPES = ['float32', 'float16', 'bfloat16', 'float64'] as const;

/**
 * The values of a pooled tensor as float32, row-major: a rank-1 tensor is one embedding (`embed`), any other rank is
 * refused (the gateway only asks for sequence embeddings). `float32`, `float64`, `float16` and `bfloat16` decode;
 * torch writes little-endian. Throws WireDecodeError naming `path` for another dtype or rank, or a byte length that
 * does not match the shape.
 */
export function pooledVector(a: WireNdArray, path: string): Float32Array {
  const dtype = a.dtype as (typeof FLOAT_DTYPES)[number];
  if (!FLOAT_DTYPES.includes(dtype))
    throw new WireDecodeError(`${path}.dtype`, `expected a float dtype (${FLOAT_DTYPES.join(', ')}), got '${a.dtype}'`);
  if (a.shape.length !== 1)
    throw new WireDecodeError(`${path}.shape`, `expected a rank-1 embedding, got shape [${a.shape.join(', ')}]`);
  const n = a.shape[0]!;
  const size = dtype === 'float64' ? 8 : dtype === 'float32' ? 4 : 2;
  if (a.data.length !== n * size)
    throw new WireDecodeError(`${path}.data`, `${a.data.length} bytes do not hold ${n} × ${dtype}`);
  const view = new DataView(a.data.buffer, a.data.byteOffset, a.data.byteLength);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    if (dtype === 'float32') out[i] = view.getFloat32(i * 4, true);
    else if (dtype === 'float64') out[i] = view.getFloat64(i * 8, true);
    else if (dtype === 'float16') out[i] = halfToFloat(view.getUint16(i * 2, true));
    else out[i] = new Float32Array(new Uint32Array([view.getUint16(i * 2, true) << 16]).buffer)[0]!;
  }
  return out;
}

/** An IEEE 754 half-precision value as a number. */
function halfToFloat(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * 2 ** -14 * (frac / 1024);
  if (exp === 0x1f) return frac === 0 ? sign * Infinity : NaN;
  return sign * 2 ** (exp - 15) * (1 + frac / 1024);
}

/** A float32 vector as the ndarray `_encode_tensor` writes for it (the simulated rank's side): little-endian bytes. */
export function float32NdArray(v: Float32Array): WireNdArray {
  return { dtype: 'float32', shape: [v.length], data: float32LeBytes(v) };
}
