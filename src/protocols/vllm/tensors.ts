/**
 * Tensors on the vLLM output wire (engine-wire.md 3.8, 5.6, 1.6; vLLM `serial_utils.py`, SMG `protocol/vllm/*.rs`):
 * - an ndarray is the strict 3-element array `[dtype: str, shape: list[uint], data]`, where `data` is msgpack
 *   **ext type 3** (raw little-endian buffer, inline) or an unsigned integer naming an **aux frame** (1-based: frame 0
 *   is the msgpack payload). Ext codes 1 and 2 (pickle, cloudpickle) and any other code are refused.
 * - `WireLogprobs` is the strict 4-element array `[token_ids [P, K+1] int, logprobs [P, K+1] float32, ranks [P] int,
 *   cu_num_generated_tokens nil]`. Column 0 of each row is the sampled token (rank `ranks[row]` ≥ 1); column j ≥ 1 is
 *   the j-th best candidate.
 *
 * Codecs here are built per message (`logprobsCodec(frames)`) because decoding needs the aux frames and encoding
 * may move large buffers into new aux frames.
 */
import { list, str, uint } from '../../wire/codec.js';
import type { Codec } from '../../wire/codec.js';
import { WireDecodeError, WireEncodeError } from '../../wire/errors.js';
import type { TokenCandidate } from '../types.js';

/** msgpack ext code of vLLM's raw buffer view (`CUSTOM_TYPE_RAW_VIEW`). */
export const EXT_RAW_VIEW = 3;
/** Reserved ext codes (`CUSTOM_TYPE_PICKLE` 1, `CUSTOM_TYPE_CLOUDPICKLE` 2): never decoded, always refused. */
export const EXT_PICKLE_CODES: readonly number[] = [1, 2];

/** One ndarray after decoding: its dtype string, shape and raw bytes (the inline ext-3 payload or the aux frame). */
export interface WireNdArray {
  dtype: string;
  shape: number[];
  data: Uint8Array;
}

/**
 * The aux frames of one output message. Decode: frames 1.. of the message (`aux[0]` is frame 1). Encode: buffers of
 * at least `auxThresholdBytes` bytes are appended here and referenced by index (default: every buffer inline).
 */
export interface TensorFrames {
  aux: Uint8Array[];
  /** Bytes; a buffer this large or larger goes to an aux frame on encode (vLLM/TokenSpeed use 256). */
  auxThresholdBytes?: number;
}

/**
 * Codec of one ndarray `[dtype, shape, data]` (strict length 3). Decode resolves `data` to bytes: ext 3 inline, or an
 * aux frame index in 1..aux.length. Throws WireDecodeError for another length, ext codes 1/2 (pickle) or any other
 * code, index 0 (the payload itself) or an index past the last aux frame. Encode writes ext 3, or appends the buffer
 * to `frames.aux` and writes its 1-based index when it reaches `auxThresholdBytes`.
 */
export function ndArrayCodec(frames: TensorFrames): Codec<WireNdArray> {
  const shapeCodec = list(uint);
  return {
    type: 'ndarray',
    decode(r, path, expected) {
      const n = r.readArrayHeader(path, expected ?? 'array');
      if (n !== 3) throw new WireDecodeError(path, `ndarray must be [dtype, shape, data] (3 elements), got ${n}`);
      const dtype = str.decode(r, `${path}.dtype`);
      const shape = shapeCodec.decode(r, `${path}.shape`);
      const dataPath = `${path}.data`;
      const kind = r.peekKind(dataPath);
      let data: Uint8Array;
      if (kind === 'ext') {
        const ext = r.readExt(dataPath);
        if (EXT_PICKLE_CODES.includes(ext.type)) {
          throw new WireDecodeError(dataPath, `ext type ${ext.type} (pickle) is refused`);
        }
        if (ext.type !== EXT_RAW_VIEW)
          throw new WireDecodeError(dataPath, `unknown ext type ${ext.type} (expected 3, raw view)`);
        data = ext.data;
      } else if (kind === 'int') {
        const index = uint.decode(r, dataPath);
        if (index === 0)
          throw new WireDecodeError(dataPath, 'aux frame index 0 names the payload itself (aux frames are 1-based)');
        if (index > frames.aux.length) {
          throw new WireDecodeError(
            dataPath,
            `aux frame index ${index} is out of range (the message has ${frames.aux.length} aux frame(s))`,
          );
        }
        data = frames.aux[index - 1];
      } else {
        throw new WireDecodeError(dataPath, `expected ext (raw view) or an aux frame index, got ${kind}`);
      }
      return { dtype, shape, data };
    },
    encode(w, v, path) {
      w.writeArrayHeader(3);
      str.encode(w, v.dtype, `${path}.dtype`);
      shapeCodec.encode(w, v.shape, `${path}.shape`);
      if (!(v.data instanceof Uint8Array)) throw new WireEncodeError(`${path}.data`, 'expected a Uint8Array');
      if (v.data.length >= (frames.auxThresholdBytes ?? Infinity)) {
        frames.aux.push(v.data);
        w.writeInt(frames.aux.length, `${path}.data`);
      } else {
        w.writeExt(EXT_RAW_VIEW, v.data);
      }
    },
  };
}

/** Element type of a dtype string the gateway decodes (engine-wire.md 3.8). */
interface DtypeInfo {
  kind: 'int' | 'float';
  size: 4 | 8;
  littleEndian: boolean;
}

/**
 * Parses a dtype: optional byte-order prefix `<` (little), `>` (big), `=` (native, little on supported hosts) or `|`,
 * then `i4`/`int32`, `i8`/`int64` or `f4`/`float32`. Returns null for anything else.
 */
export function parseDtype(dtype: string): DtypeInfo | null {
  let s = dtype;
  let littleEndian = true;
  if (s.length > 0 && '<>=|'.includes(s[0])) {
    littleEndian = s[0] !== '>';
    s = s.slice(1);
  }
  switch (s) {
    case 'i4':
    case 'int32':
      return { kind: 'int', size: 4, littleEndian };
    case 'i8':
    case 'int64':
      return { kind: 'int', size: 8, littleEndian };
    case 'f4':
    case 'float32':
      return { kind: 'float', size: 4, littleEndian };
    default:
      return null;
  }
}

/** Reads every element of `a` as numbers, checking dtype kind and byte length (count × element size). */
function elementsOf(a: WireNdArray, kind: 'int' | 'float', path: string): number[] {
  const info = parseDtype(a.dtype);
  if (info === null) throw new WireDecodeError(`${path}.dtype`, `unsupported dtype '${a.dtype}'`);
  if (info.kind !== kind) {
    throw new WireDecodeError(
      `${path}.dtype`,
      `expected ${kind === 'int' ? 'an integer' : 'a float'} dtype, got '${a.dtype}'`,
    );
  }
  const count = a.shape.reduce((x, y) => x * y, 1);
  if (!Number.isSafeInteger(count) || count * info.size !== a.data.length) {
    throw new WireDecodeError(
      `${path}.data`,
      `buffer has ${a.data.length} bytes but shape [${a.shape.join(', ')}] of ` +
        `${a.dtype} needs ${count * info.size}`,
    );
  }
  const view = new DataView(a.data.buffer, a.data.byteOffset, a.data.byteLength);
  const out = new Array<number>(count);
  for (let i = 0; i < count; i++) {
    const at = i * info.size;
    if (info.kind === 'float') out[i] = view.getFloat32(at, info.littleEndian);
    else if (info.size === 4) out[i] = view.getInt32(at, info.littleEndian);
    else {
      const big = view.getBigInt64(at, info.littleEndian);
      if (big > BigInt(Number.MAX_SAFE_INTEGER) || big < BigInt(Number.MIN_SAFE_INTEGER)) {
        throw new WireDecodeError(`${path}.data[${i}]`, `integer ${big} is beyond ±(2^53−1)`);
      }
      out[i] = Number(big);
    }
  }
  return out;
}

/** `elementsOf` reshaped into `rows` rows of `cols` columns. */
function toRows(flat: number[], rows: number, cols: number): number[][] {
  const out: number[][] = [];
  for (let i = 0; i < rows; i++) out.push(flat.slice(i * cols, (i + 1) * cols));
  return out;
}

/**
 * `WireLogprobs` as the gateway uses it: P rows (positions), each with K+1 columns (column 0 = the sampled token).
 * `cu_num_generated_tokens` is always null (non-nil is a decode error, engine-wire.md 5.6).
 */
export interface VllmLogprobs {
  /** [P][K+1] token ids ≥ 0. */
  token_ids: number[][];
  /** [P][K+1] natural-log probabilities (float32 precision; −Infinity/NaN possible). */
  logprobs: number[][];
  /** [P] rank of each row's column-0 token, ≥ 1. */
  ranks: number[];
  cu_num_generated_tokens: null;
}

/** The sampled token's logprob of each position (column 0 of every row; gateway.md 11.2). */
export function sampledLogprobs(l: VllmLogprobs): number[] {
  return l.logprobs.map((row) => row[0]);
}

/**
 * The ranked candidates of each position: columns 1..K of every row (column j is the j-th best token, engine-wire.md
 * 5.6), as `{id, logprob}` in rank order; [] per row when K = 0. Pure.
 */
export function candidateLogprobs(l: VllmLogprobs): TokenCandidate[][] {
  return l.token_ids.map((ids, row) => ids.slice(1).map((id, j) => ({ id, logprob: l.logprobs[row]![j + 1]! })));
}

/** Shape check shared by decode and encode; returns the problem or null. */
function logprobsShapeProblem(tokShape: number[], lpShape: number[], rankShape: number[]): string | null {
  if (tokShape.length !== 2) return `token_ids must be 2-D [P, K+1], got shape [${tokShape.join(', ')}]`;
  if (lpShape.length !== 2 || lpShape[0] !== tokShape[0] || lpShape[1] !== tokShape[1]) {
    return `logprobs shape [${lpShape.join(', ')}] differs from token_ids shape [${tokShape.join(', ')}]`;
  }
  if (rankShape.length !== 1 || rankShape[0] !== tokShape[0]) {
    return `ranks shape [${rankShape.join(', ')}] must be [${tokShape[0]}] (one rank per row)`;
  }
  if (tokShape[0] > 0 && tokShape[1] === 0) return `${tokShape[0]} row(s) with zero columns`;
  return null;
}

/** A little-endian buffer of `values` as int64 (`int64` dtype) or float32. */
function packElements(values: number[], dtype: 'int64' | 'float32', path: string): Uint8Array {
  const size = dtype === 'int64' ? 8 : 4;
  const buf = new Uint8Array(values.length * size);
  const view = new DataView(buf.buffer);
  values.forEach((v, i) => {
    if (dtype === 'float32') {
      if (typeof v !== 'number') throw new WireEncodeError(`${path}[${i}]`, `expected a number, got ${typeof v}`);
      view.setFloat32(i * 4, v, true);
    } else {
      if (!Number.isSafeInteger(v)) throw new WireEncodeError(`${path}[${i}]`, `expected an integer, got ${String(v)}`);
      view.setBigInt64(i * 8, BigInt(v), true);
    }
  });
  return buf;
}

/**
 * Codec of `WireLogprobs` (strict length 4) for one message's frames. Decode throws WireDecodeError naming the field
 * for: another length; an ndarray error (see `ndArrayCodec`); an unsupported dtype or a float/int dtype mismatch;
 * a buffer whose length is not count × element size; token_ids not 2-D; logprobs of a different shape; ranks not [P]
 * (ragged arrays); P > 0 rows with zero columns; a negative token id; a rank < 1; a non-nil
 * `cu_num_generated_tokens`. Encode writes int64 token ids and ranks and float32 logprobs (throws WireEncodeError
 * on ragged rows, a rank < 1, a non-nil `cu_num_generated_tokens`).
 */
export function logprobsCodec(frames: TensorFrames): Codec<VllmLogprobs> {
  const nd = ndArrayCodec(frames);
  return {
    type: 'WireLogprobs',
    decode(r, path, expected) {
      const n = r.readArrayHeader(path, expected ?? 'array');
      if (n !== 4) {
        throw new WireDecodeError(
          path,
          `WireLogprobs must be [token_ids, logprobs, ranks, cu_num_generated_tokens] ` + `(4 elements), got ${n}`,
        );
      }
      const tok = nd.decode(r, `${path}.token_ids`);
      const lp = nd.decode(r, `${path}.logprobs`);
      const rk = nd.decode(r, `${path}.ranks`);
      const cuPath = `${path}.cu_num_generated_tokens`;
      if (!r.peekIsNil(cuPath)) throw new WireDecodeError(cuPath, `must be nil, got ${r.peekKind(cuPath)}`);
      r.pos++;
      const problem = logprobsShapeProblem(tok.shape, lp.shape, rk.shape);
      if (problem !== null) throw new WireDecodeError(path, problem);
      const [rows, cols] = tok.shape;
      const tokens = elementsOf(tok, 'int', `${path}.token_ids`);
      const negative = tokens.findIndex((t) => t < 0);
      if (negative >= 0)
        throw new WireDecodeError(`${path}.token_ids.data[${negative}]`, `token id ${tokens[negative]} is negative`);
      const ranks = elementsOf(rk, 'int', `${path}.ranks`);
      const badRank = ranks.findIndex((x) => x < 1);
      if (badRank >= 0)
        throw new WireDecodeError(`${path}.ranks.data[${badRank}]`, `rank ${ranks[badRank]} must be ≥ 1`);
      return {
        token_ids: toRows(tokens, rows, cols),
        logprobs: toRows(elementsOf(lp, 'float', `${path}.logprobs`), rows, cols),
        ranks,
        cu_num_generated_tokens: null,
      };
    },
    encode(w, v, path) {
      if (
        v === null ||
        typeof v !== 'object' ||
        !Array.isArray(v.token_ids) ||
        !Array.isArray(v.logprobs) ||
        !Array.isArray(v.ranks)
      ) {
        throw new WireEncodeError(path, 'expected { token_ids, logprobs, ranks } arrays');
      }
      if (v.cu_num_generated_tokens !== null && v.cu_num_generated_tokens !== undefined) {
        throw new WireEncodeError(`${path}.cu_num_generated_tokens`, 'must be nil');
      }
      const rows = v.token_ids.length;
      const cols = rows === 0 ? 0 : v.token_ids[0].length;
      const shapeOf = (m: number[][]) =>
        m.every((row) => Array.isArray(row) && row.length === cols) ? [m.length, cols] : [m.length, -1];
      const problem = logprobsShapeProblem(shapeOf(v.token_ids), shapeOf(v.logprobs), [v.ranks.length]);
      if (problem !== null || shapeOf(v.token_ids)[1] < 0) {
        throw new WireEncodeError(path, problem ?? 'token_ids rows differ in length (ragged)');
      }
      const badRank = v.ranks.findIndex((x) => !(x >= 1));
      if (badRank >= 0) throw new WireEncodeError(`${path}.ranks[${badRank}]`, `rank ${v.ranks[badRank]} must be ≥ 1`);
      w.writeArrayHeader(4);
      nd.encode(
        w,
        { dtype: 'int64', shape: [rows, cols], data: packElements(v.token_ids.flat(), 'int64', `${path}.token_ids`) },
        `${path}.token_ids`,
      );
      nd.encode(
        w,
        { dtype: 'float32', shape: [rows, cols], data: packElements(v.logprobs.flat(), 'float32', `${path}.logprobs`) },
        `${path}.logprobs`,
      );
      nd.encode(
        w,
        { dtype: 'int64', shape: [rows], data: packElements(v.ranks, 'int64', `${path}.ranks`) },
        `${path}.ranks`,
      );
      w.writeNil();
    },
  };
}
