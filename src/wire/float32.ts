/**
 * Float32 vectors as little-endian bytes: how torch lays out a float32 tensor's buffer (vLLM `pooling_output`,
 * docs/wire/vllm-pooling.md) and how the `--workers` channel carries a pooled vector (fronts/channel/records.ts).
 */

/** `v` as little-endian float32 bytes (4 per element), a copy. */
export function float32LeBytes(v: Float32Array): Uint8Array {
  const out = new Uint8Array(v.length * 4);
  const view = new DataView(out.buffer);
  for (let i = 0; i < v.length; i++) view.setFloat32(i * 4, v[i]!, true);
  return out;
}

/** The float32 values of little-endian `bytes` (a copy). Throws RangeError when the length is not a multiple of 4. */
export function float32sFromLe(bytes: Uint8Array): Float32Array {
  if (bytes.length % 4 !== 0) throw new RangeError(`${bytes.length} bytes are not a whole number of float32 values`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array(bytes.length / 4);
  for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(i * 4, true);
  return out;
}
