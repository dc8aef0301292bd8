/**
 * The START_DP_WAVE payload (request type `02`; engine-wire.md 5.7, 5.12; dp-routing.md 13; vLLM `core.py`,
 * `coordinator.py`): a 2-element array `[wave, exclude_engine_index]` that the engine unpacks positionally. The
 * gateway sends `[wave, nil]` (nil excludes no rank, as vLLM's own coordinator does) to **every** rank of a lockstep
 * group. Wave 9 is `92 09 c0` (engine-wire.md 6.2; SMG test `start_wave_encodes_a_nil_excluded_rank`).
 */
import { int, nullable } from '../../wire/codec.js';
import { WireDecodeError, WireEncodeError } from '../../wire/errors.js';
import { MsgpackReader } from '../../wire/reader.js';
import type { WireInt } from '../../wire/reader.js';
import { MsgpackWriter } from '../../wire/writer.js';

/** The decoded payload. `wave` is the u64 wave clock (bigint beyond 2^53−1). */
export interface StartDpWave {
  wave: WireInt;
  /** The rank that needs no wake, or null (what the gateway always sends). */
  excludeEngineIndex: WireInt | null;
}

const U64_MAX = (1n << 64n) - 1n;
const ROOT = 'StartDpWave';

/**
 * Encodes `[wave, exclude]`; `exclude` defaults to nil. Throws WireEncodeError for a wave that is not an integer in
 * [0, 2^64−1] or an exclusion that is not nil or an integer ≥ 0.
 */
export function encodeStartDpWave(wave: WireInt, excludeEngineIndex: WireInt | null = null): Uint8Array {
  const isUint = (v: unknown): boolean =>
    (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) || (typeof v === 'bigint' && v >= 0n && v <= U64_MAX);
  if (!isUint(wave))
    throw new WireEncodeError(`${ROOT}.wave`, `expected an integer in [0, 2^64−1], got ${String(wave)}`);
  if (excludeEngineIndex !== null && !isUint(excludeEngineIndex)) {
    throw new WireEncodeError(
      `${ROOT}.exclude_engine_index`,
      `expected nil or an integer ≥ 0, got ${String(excludeEngineIndex)}`,
    );
  }
  const w = new MsgpackWriter(16);
  w.writeArrayHeader(2);
  int.encode(w, wave, `${ROOT}.wave`);
  nullable(int).encode(w, excludeEngineIndex, `${ROOT}.exclude_engine_index`);
  return w.finish();
}

/**
 * Decodes a START_DP_WAVE payload as the engine unpacks it: exactly 2 elements (Python tuple unpacking tolerates
 * neither fewer nor more), an integer wave ≥ 0, then nil or an integer ≥ 0. Throws WireDecodeError naming the field,
 * on truncation and on trailing bytes.
 */
export function decodeStartDpWave(bytes: Uint8Array): StartDpWave {
  const r = new MsgpackReader(bytes);
  const n = r.readArrayHeader(ROOT);
  if (n !== 2)
    throw new WireDecodeError(ROOT, `expected an array of exactly 2 elements [wave, exclude_engine_index], got ${n}`);
  const wave = int.decode(r, `${ROOT}.wave`);
  if (wave < 0) throw new WireDecodeError(`${ROOT}.wave`, `must be ≥ 0, got ${wave}`);
  const excludeEngineIndex = nullable(int).decode(r, `${ROOT}.exclude_engine_index`);
  if (excludeEngineIndex !== null && excludeEngineIndex < 0) {
    throw new WireDecodeError(`${ROOT}.exclude_engine_index`, `must be ≥ 0, got ${excludeEngineIndex}`);
  }
  r.expectEnd(ROOT);
  return { wave, excludeEngineIndex };
}
