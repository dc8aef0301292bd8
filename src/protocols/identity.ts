/**
 * Engine identity: the ZMQ routing id of a rank (engine-wire.md section 1.5).
 *
 * The identity is the engine index as an unsigned 16-bit little-endian integer, exactly 2 bytes (TokenSpeed packs
 * it with `struct.pack('<H', index)`; vLLM's `EngineCoreProc` does the same). Vectors `identity_engine_0`,
 * `identity_engine_1`, `identity_engine_258`, `identity_engine_65535`.
 */

/** The largest engine index a 2-byte identity can carry. */
export const MAX_ENGINE_INDEX = 0xffff;

/**
 * Encodes an engine index as its 2-byte little-endian routing identity (0 → `00 00`, 258 → `02 01`).
 * Throws RangeError when `engineIndex` is not an integer in 0..65535 (a programming error; SMG asserts).
 */
export function encodeEngineIdentity(engineIndex: number): Uint8Array {
  if (!Number.isInteger(engineIndex) || engineIndex < 0 || engineIndex > MAX_ENGINE_INDEX) {
    throw new RangeError(`engine index must be an integer in 0..${MAX_ENGINE_INDEX}, got ${engineIndex}`);
  }
  return Uint8Array.of(engineIndex & 0xff, engineIndex >>> 8);
}

/**
 * Decodes a routing identity into its engine index, or null when the identity is not exactly 2 bytes
 * (such an engine can receive requests but cannot be pinned and has no tracked load; engine-wire.md 1.5).
 */
export function decodeEngineIdentity(identity: Uint8Array): number | null {
  if (identity.length !== 2) return null;
  return identity[0] | (identity[1] << 8);
}

/**
 * Orders identities lexicographically by bytes, as SMG keeps its connected engines (engine-wire.md 1.5
 * "Engine order"): negative when `a` sorts first, 0 when equal, positive otherwise. A proper prefix sorts
 * first. Note `01 01` (257) sorts before `02 00` (2).
 */
export function compareIdentities(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    if (a[i] !== b[i]) return a[i] - b[i];
  }
  return a.length - b.length;
}
