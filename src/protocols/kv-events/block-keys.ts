/**
 * How the gateway names the engines' KV blocks as they appear on the KV-event streams (docs/reference/kv-events.md
 * section 4), and TokenSpeed's block hash, which the gateway can compute for any prompt.
 *
 * A block hash travels either as an unsigned 64-bit integer (TokenSpeed always; vLLM with
 * `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`, its default) or as raw digest bytes (vLLM with that variable 0, and every
 * CPU-offload connector event, so one stream can mix both). Both become one short string key, so an index can hold
 * them in one Map without BigInt arithmetic: `u` and the u64's four 16-bit halves as UTF-16 code units (5 characters,
 * one allocation, no hex formatting: the events of a busy rank make thousands per second), or the bytes two per code
 * unit after `b` (an even count) or `c` (an odd count: the last code unit holds one byte). Opaque: `blockKeyHex`
 * shows one.
 *
 * Pure; no I/O.
 */

/** A block hash as the gateway keys it (see the module comment; `blockKeyHex` for display). */
export type BlockKey = string;

const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0'));

/** The key of the u64 `hi · 2^32 + lo` (`hi`, `lo`: unsigned 32-bit integers). */
export function u64Key(hi: number, lo: number): BlockKey {
  return String.fromCharCode(0x75, hi >>> 16, hi & 0xffff, lo >>> 16, lo & 0xffff);
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
  let key = bytes.length % 2 === 0 ? 'b' : 'c';
  let i = 0;
  for (; i + 1 < bytes.length; i += 2) key += String.fromCharCode((bytes[i]! << 8) | bytes[i + 1]!);
  if (i < bytes.length) key += String.fromCharCode(bytes[i]!);
  return key;
}

/** A key as text: `u:` and 16 hex digits, or `b:` and the bytes in hex (logs, tests). */
export function blockKeyHex(key: BlockKey): string {
  let hex = key[0] === 'u' ? 'u:' : 'b:';
  for (let i = 1; i < key.length; i++) {
    const c = key.charCodeAt(i);
    hex += key[0] === 'c' && i === key.length - 1 ? HEX[c & 0xff] : HEX[c >>> 8]! + HEX[c & 0xff]!;
  }
  return hex;
}

const FNV_OFFSET_HI = 0xcbf29ce4;
const FNV_OFFSET_LO = 0x84222325;
const FNV_PRIME_LO = 0x1b3;

/**
 * FNV-1a 64 (offset basis 0xcbf29ce484222325, prime 0x100000001b3: xor a byte in, multiply modulo 2^64), kept as two
 * unsigned 32-bit halves so no BigInt is made per byte: `lo * 0x1b3` stays below 2^41, exact in a double. Also the
 * handshake-port hash of ../../transport/endpoints.ts.
 */
export class Fnv1a64 {
  hi = FNV_OFFSET_HI;
  lo = FNV_OFFSET_LO;

  /** One byte (0..255) into the hash. */
  byte(b: number): void {
    const lo = (this.lo ^ b) >>> 0;
    const low = lo * FNV_PRIME_LO;
    this.hi = (Math.imul(this.hi, FNV_PRIME_LO) + (lo << 8) + Math.floor(low / 2 ** 32)) >>> 0;
    this.lo = low >>> 0;
  }

  /** The low 32 bits of `v` (an integer; negative ones as two's complement), little-endian. */
  u32le(v: number): void {
    this.byte(v & 0xff);
    this.byte((v >>> 8) & 0xff);
    this.byte((v >>> 16) & 0xff);
    this.byte((v >>> 24) & 0xff);
  }

  /** The hash, 0..2^64−1. */
  value(): bigint {
    return (BigInt(this.hi) << 32n) | BigInt(this.lo);
  }
}

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
    const h = new Fnv1a64();
    const first = start === 0;
    h.byte(first ? 0 : 1);
    if (!first) {
      h.u32le(parentLo);
      h.u32le(parentHi);
    }
    h.u32le(pageSize);
    h.u32le(0);
    for (let i = start; i < start + pageSize; i++) h.u32le(tokenIds[i]! | 0);
    keys.push(u64Key(h.hi, h.lo));
    [parentHi, parentLo] = [h.hi, h.lo];
  }
  return keys;
}
