/**
 * A schema-driven msgpack writer with msgspec's encoding choices (engine-wire.md sections 3.4, 3.5, 3.7, 3.9):
 * the smallest integer form at every size (8 → `08`, 400 → `cd 0190`, 2^32 → `cf 0000000100000000`), float64 for
 * every declared float field whatever its runtime value (1.0 → `cb 3ff0000000000000`), and the smallest
 * str/array/map header. The caller's schema picks the method, never the runtime value, because JavaScript has one
 * `number` type.
 *
 * Why not `@msgpack/msgpack`'s encoder, even for `any` values: it writes an integral `number` as an int (wrong
 * for a float field), and in its `useBigInt64` mode it writes safe integers at or above 2^32 as float64 and every
 * bigint as a 9-byte int64/uint64, which breaks "int fields stay msgpack integers, in the smallest form, at every
 * size" (section 3.4). `writeAny` therefore applies the same rules as the typed methods.
 *
 * Methods take the field's `path` and throw `WireEncodeError` naming it on a value the wire cannot carry.
 */
import { WireEncodeError } from './errors.js';
import type { WireInt } from './reader.js';

const U64_MAX = (1n << 64n) - 1n;
const I64_MIN = -(1n << 63n);
const utf8 = new TextEncoder();
/** With the `u` flag a surrogate pair is one code point, so this matches only unpaired surrogates. */
const LONE_SURROGATE = /[\uD800-\uDFFF]/u;
/** Longest string `writeStr` tries to write as ASCII without `TextEncoder` (a str8 header covers ≤ 255 bytes). */
const ASCII_FAST_MAX = 255;

/**
 * A copy of `buf`'s first `used` bytes in a buffer at least twice as large with room for `extra` more (doubling), for
 * growable writers (this one, fronts/channel/messages.ts `DownMessage`).
 */
export function grownBuffer(buf: Uint8Array, used: number, extra: number): Uint8Array {
  let size = Math.max(1, buf.length) * 2;
  while (size < used + extra) size *= 2;
  const next = new Uint8Array(size);
  next.set(buf.subarray(0, used));
  return next;
}

/** Appends msgpack values to a growable buffer; `finish()` returns the bytes written. */
export class MsgpackWriter {
  private buf: Uint8Array;
  private view: DataView;
  private pos = 0;

  /** `initialCapacity` in bytes (grows by doubling). */
  constructor(initialCapacity = 256) {
    this.buf = new Uint8Array(initialCapacity);
    this.view = new DataView(this.buf.buffer);
  }

  private ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    this.buf = grownBuffer(this.buf, this.pos, n);
    this.view = new DataView(this.buf.buffer);
  }

  private u8(v: number): void {
    this.ensure(1);
    this.buf[this.pos++] = v;
  }

  private headU8(head: number, v: number): void {
    this.ensure(2);
    this.buf[this.pos++] = head;
    this.buf[this.pos++] = v;
  }

  private headU16(head: number, v: number): void {
    this.ensure(3);
    this.buf[this.pos] = head;
    this.view.setUint16(this.pos + 1, v);
    this.pos += 3;
  }

  private headU32(head: number, v: number): void {
    this.ensure(5);
    this.buf[this.pos] = head;
    this.view.setUint32(this.pos + 1, v);
    this.pos += 5;
  }

  /** Writes raw bytes as they are (no header). */
  writeRaw(bytes: Uint8Array): void {
    this.ensure(bytes.length);
    this.buf.set(bytes, this.pos);
    this.pos += bytes.length;
  }

  /** Writes nil (`c0`). */
  writeNil(): void {
    this.u8(0xc0);
  }

  /** Writes `c3`/`c2`. Throws WireEncodeError when `value` is not a boolean. */
  writeBool(value: boolean, path: string): void {
    if (typeof value !== 'boolean') throw new WireEncodeError(path, `expected boolean, got ${describe(value)}`);
    this.u8(value ? 0xc3 : 0xc2);
  }

  /**
   * Writes an integer in its smallest msgpack form (unsigned forms for non-negative values, as msgspec does).
   * Accepts a safe-integer `number` or a `bigint` in [−2^63, 2^64−1]. Throws WireEncodeError for a non-integral,
   * non-finite or unsafe number (pass a bigint) and for a bigint out of range.
   */
  writeInt(value: WireInt, path: string): void {
    if (typeof value === 'number') {
      if (!Number.isSafeInteger(value)) {
        throw new WireEncodeError(
          path,
          Number.isInteger(value)
            ? `integer ${value} is beyond ±(2^53−1) and may already be rounded; pass a bigint`
            : `expected an integer, got ${value}`,
        );
      }
      if (value >= 0) {
        if (value < 0x80) this.u8(value);
        else if (value < 0x100) this.headU8(0xcc, value);
        else if (value < 0x10000) this.headU16(0xcd, value);
        else if (value < 0x100000000) this.headU32(0xce, value);
        else this.writeBig(BigInt(value));
      } else {
        if (value >= -0x20) this.u8(value + 0x100);
        else if (value >= -0x80) this.headU8(0xd0, value & 0xff);
        else if (value >= -0x8000) this.headU16(0xd1, value & 0xffff);
        else if (value >= -0x80000000) this.headU32(0xd2, value >>> 0);
        else this.writeBig(BigInt(value));
      }
      return;
    }
    if (typeof value === 'bigint') {
      if (value > U64_MAX || value < I64_MIN) {
        throw new WireEncodeError(path, `integer ${value} is outside the msgpack range [−2^63, 2^64−1]`);
      }
      if (value >= -0x80000000n && value < 0x100000000n) {
        this.writeInt(Number(value), path);
      } else {
        this.writeBig(value);
      }
      return;
    }
    throw new WireEncodeError(path, `expected an integer, got ${describe(value)}`);
  }

  /** uint64 (`cf`) or int64 (`d3`) for values outside the 32-bit forms. */
  private writeBig(value: bigint): void {
    this.ensure(9);
    if (value >= 0n) {
      this.buf[this.pos] = 0xcf;
      this.view.setBigUint64(this.pos + 1, value);
    } else {
      this.buf[this.pos] = 0xd3;
      this.view.setBigInt64(this.pos + 1, value);
    }
    this.pos += 9;
  }

  /**
   * Writes float64 (`cb`) whatever the value: 1 → `cb 3ff0000000000000`; -0.0, NaN and ±Infinity are kept
   * (section 3.5). Throws WireEncodeError when `value` is not a number.
   */
  writeFloat64(value: number, path: string): void {
    if (typeof value !== 'number') throw new WireEncodeError(path, `expected a number, got ${describe(value)}`);
    this.ensure(9);
    this.buf[this.pos] = 0xcb;
    this.view.setFloat64(this.pos + 1, value);
    this.pos += 9;
  }

  /**
   * Writes a UTF-8 str with the smallest header (fixstr ≤ 31 bytes, `d9` ≤ 255, `da` ≤ 65535, else `db`).
   * Throws WireEncodeError for a non-string or a string with a lone surrogate (not encodable as UTF-8).
   */
  writeStr(value: string, path: string): void {
    if (typeof value !== 'string') throw new WireEncodeError(path, `expected a string, got ${describe(value)}`);
    if (value.length <= ASCII_FAST_MAX && this.tryAscii(value)) return;
    if (LONE_SURROGATE.test(value))
      throw new WireEncodeError(path, 'string contains a lone surrogate (not valid UTF-8)');
    const bytes = utf8.encode(value);
    const n = bytes.length;
    if (n <= 31) this.u8(0xa0 | n);
    else if (n <= 0xff) this.headU8(0xd9, n);
    else if (n <= 0xffff) this.headU16(0xda, n);
    else this.headU32(0xdb, n);
    this.writeRaw(bytes);
  }

  /**
   * Writes a short all-ASCII string (UTF-8 = its char codes, no surrogates) straight into the buffer with the header
   * `writeStr` would choose (≤ 255 bytes: fixstr or `d9`), without allocating; returns false (nothing written) when
   * `value` has a non-ASCII character. The hot case: request ids, finish reasons, map keys.
   */
  private tryAscii(value: string): boolean {
    const n = value.length;
    this.ensure(n + 2);
    let p = this.pos + (n <= 31 ? 1 : 2);
    for (let i = 0; i < n; i++) {
      const c = value.charCodeAt(i);
      if (c >= 0x80) return false;
      this.buf[p++] = c;
    }
    if (n <= 31) this.buf[this.pos] = 0xa0 | n;
    else {
      this.buf[this.pos] = 0xd9;
      this.buf[this.pos + 1] = n;
    }
    this.pos = p;
    return true;
  }

  /** Writes bin with the smallest header (`c4`/`c5`/`c6`). */
  writeBin(value: Uint8Array): void {
    const n = value.length;
    if (n <= 0xff) this.headU8(0xc4, n);
    else if (n <= 0xffff) this.headU16(0xc5, n);
    else this.headU32(0xc6, n);
    this.writeRaw(value);
  }

  /** Writes an ext value with the smallest header (fixext for 1/2/4/8/16 bytes, else `c7`/`c8`/`c9`); `type` is signed. */
  writeExt(type: number, data: Uint8Array): void {
    const n = data.length;
    const fixed = [1, 2, 4, 8, 16].indexOf(n);
    if (fixed >= 0) this.u8(0xd4 + fixed);
    else if (n <= 0xff) this.headU8(0xc7, n);
    else if (n <= 0xffff) this.headU16(0xc8, n);
    else this.headU32(0xc9, n);
    this.u8(type & 0xff);
    this.writeRaw(data);
  }

  /** Writes an array header for `n` elements (fixarray ≤ 15, `dc` ≤ 65535, else `dd`). */
  writeArrayHeader(n: number): void {
    if (n <= 15) this.u8(0x90 | n);
    else if (n <= 0xffff) this.headU16(0xdc, n);
    else this.headU32(0xdd, n);
  }

  /** Writes a map header for `n` pairs (fixmap ≤ 15, `de` ≤ 65535, else `df`). */
  writeMapHeader(n: number): void {
    if (n <= 15) this.u8(0x80 | n);
    else if (n <= 0xffff) this.headU16(0xde, n);
    else this.headU32(0xdf, n);
  }

  /**
   * Writes a value whose declared type is `any`: null/undefined → nil, boolean, number (safe integer → smallest
   * int, anything else, -0 included → float64), bigint → smallest int, string, Uint8Array → bin, Array → array, Map or plain
   * object → map (object keys as str). Throws WireEncodeError (naming the nested path) for anything else
   * (functions, symbols, class instances) and for cycles deeper than 512 levels.
   */
  writeAny(value: unknown, path: string, depth = 0): void {
    if (depth > 512) throw new WireEncodeError(path, 'value nested deeper than 512 levels (cycle?)');
    if (value === null || value === undefined) return this.writeNil();
    switch (typeof value) {
      case 'boolean':
        return this.writeBool(value, path);
      case 'number':
        return Number.isSafeInteger(value) && !Object.is(value, -0)
          ? this.writeInt(value, path)
          : this.writeFloat64(value, path);
      case 'bigint':
        return this.writeInt(value, path);
      case 'string':
        return this.writeStr(value, path);
      default:
        break;
    }
    if (value instanceof Uint8Array) return this.writeBin(value);
    if (Array.isArray(value)) {
      this.writeArrayHeader(value.length);
      value.forEach((v, i) => this.writeAny(v, `${path}[${i}]`, depth + 1));
      return;
    }
    if (value instanceof Map) {
      this.writeMapHeader(value.size);
      for (const [k, v] of value) {
        this.writeAny(k, `${path}(key)`, depth + 1);
        this.writeAny(v, `${path}[${JSON.stringify(String(k))}]`, depth + 1);
      }
      return;
    }
    if (typeof value === 'object' && isPlainObject(value)) {
      const entries = Object.entries(value);
      this.writeMapHeader(entries.length);
      for (const [k, v] of entries) {
        this.writeStr(k, path);
        this.writeAny(v, `${path}[${JSON.stringify(k)}]`, depth + 1);
      }
      return;
    }
    throw new WireEncodeError(path, `cannot encode ${describe(value)} as msgpack`);
  }

  /** The bytes written so far (a copy-free view of exactly that length). */
  finish(): Uint8Array {
    return this.buf.subarray(0, this.pos);
  }

  /**
   * The bytes written so far as a copy of their own, and the writer emptied for the next message (its buffer kept).
   * For a writer reused across messages: the copy stays valid whatever is written next.
   */
  take(): Uint8Array {
    const out = this.buf.slice(0, this.pos);
    this.pos = 0;
    return out;
  }

  /** Empties the writer (its buffer kept), e.g. after an encode that threw half-way. */
  reset(): void {
    this.pos = 0;
  }
}

function isPlainObject(value: object): boolean {
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** A short description of a value's runtime type for error messages. */
export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'number') return `number ${value}`;
  if (typeof value === 'object') return (value as object).constructor?.name ?? 'object';
  return typeof value;
}
