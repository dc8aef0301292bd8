/**
 * How the gateway names the engines' KV blocks as they appear on the KV-event streams (docs/reference/kv-events.md
 * section 4), and TokenSpeed's block hash, which the gateway can compute for any prompt.
 *
 * A block hash travels either as an unsigned 64-bit integer (TokenSpeed always; vLLM with
 * `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`, its default) or as raw digest bytes (vLLM with that variable 0, and every
 * CPU-offload connector event, so one stream can mix both). Both become one string key, `u:` and 16 hex digits or
 * `b:` and the bytes in hex, so an index can hold them in one Map without BigInt arithmetic.
 *
 * Pure; no I/O.
 */

/** A block hash as the gateway keys it: `u:<16 lowercase hex digits>` (u64) or `b:<lowercase hex>` (digest bytes). */
export type BlockKey = string;

const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0'));

/** The key of the u64 `hi · 2^32 + lo` (`hi`, `lo`: unsigned 32-bit integers). */
export function u64Key(hi: number, lo: number): BlockKey {
  return `u:${(hi >>> 0).toString(16).padStart(8, '0')}${(lo >>> 0).toString(16).padStart(8, '0')}`;
}

/**
 * The key of an integer hash as the msgpack reader returns it (a number within ±(2^53−1), else a bigint), or null when
 * it is not in 0..2^64−1 (no engine sends a negative block hash).
 */
export function intBlockKey(value: number | bigint): BlockKey | null {
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value) || value < 0) return null;
    return u64Key(Math.floor(value / 2 ** 32), value % 2 ** 32);
  }
  if (value < 0n || value > 0xffff_ffff_ffff_ffffn) return null;
  return u64Key(Number(value >> 32n), Number(value & 0xffff_ffffn));
}

/** The key of a digest-bytes hash. */
export function bytesBlockKey(bytes: Uint8Array): BlockKey {
  let hex = 'b:';
  for (const b of bytes) hex += HEX[b];
  return hex;
}

// FNV-1a 64 (offset basis 14695981039346656037 = 0xcbf29ce484222325, prime 1099511628211 = 0x100000001b3), kept as two
// unsigned 32-bit halves: `lo * 0x1b3` stays below 2^41, so every product here is exact in a double.
const FNV_OFFSET_HI = 0xcbf29ce4;
const FNV_OFFSET_LO = 0x84222325;
const FNV_PRIME_LO = 0x1b3;

/**
 * TokenSpeed's KV-event hash of each full page of `tokenIds` (pages of `pageSize` tokens from token 0; a partial tail
 * page has none), chained: FNV-1a 64 over one byte (1 with a parent, else 0), the parent hash as u64 little-endian
 * (pages after the first), the page's token count as u64 little-endian, then each token id as int32 little-endian.
 * Source: TokenSpeed f4d8ec6e `tokenspeed-scheduler/csrc/scheduler/kv_cache_events.cpp` `HashKvBlock` and
 * `scheduler.cpp` `registerKvEventPrefixPages`; checked against the engine's own vectors (test/vectors/kv-events,
 * `ts_hash_chain_*`). About 30 ns per token.
 * @throws RangeError when `pageSize` is not an integer ≥ 1.
 */
export function tokenSpeedPageKeys(tokenIds: readonly number[], pageSize: number): BlockKey[] {
  if (!Number.isInteger(pageSize) || pageSize < 1)
    throw new RangeError(`page size must be an integer ≥ 1, got ${pageSize}`);
  const keys: BlockKey[] = [];
  let parentHi = 0;
  let parentLo = 0;
  for (let start = 0; start + pageSize <= tokenIds.length; start += pageSize) {
    let hi = FNV_OFFSET_HI;
    let lo = FNV_OFFSET_LO;
    // One byte into the hash: xor into the low byte, then multiply by the prime modulo 2^64.
    const feed = (byte: number): void => {
      lo = (lo ^ byte) >>> 0;
      const low = lo * FNV_PRIME_LO;
      hi = (Math.imul(hi, FNV_PRIME_LO) + (lo << 8) + Math.floor(low / 2 ** 32)) >>> 0;
      lo = low >>> 0;
    };
    const feed32 = (v: number): void => {
      feed(v & 0xff);
      feed((v >>> 8) & 0xff);
      feed((v >>> 16) & 0xff);
      feed((v >>> 24) & 0xff);
    };
    const first = start === 0;
    feed(first ? 0 : 1);
    if (!first) {
      feed32(parentLo);
      feed32(parentHi);
    }
    feed32(pageSize);
    feed32(0);
    for (let i = start; i < start + pageSize; i++) feed32(tokenIds[i]! | 0);
    keys.push(u64Key(hi, lo));
    [parentHi, parentLo] = [hi, lo];
  }
  return keys;
}
