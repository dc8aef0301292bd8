/**
 * A cursor-based, schema-driven msgpack reader (engine-wire.md sections 3.4-3.7).
 *
 * Why not a generic msgpack decoder: msgspec (the engines' codec) validates every scalar against the field's
 * declared type, and a generic decoder erases exactly the distinctions that matter: an integral float (`cb
 * 4020000000000000`, 8.0) must be refused where an int is declared (`inv_req_float_max_new_tokens`), a bool is not
 * an int (`inv_req_bool_token`), bin is not str (`inv_req_bin_rid`), and integers beyond ±(2^53−1) must become
 * `bigint` instead of being rounded (section 3.6). So each field is read with a typed method that checks the msgpack
 * format byte itself. Values whose declared type is `any` are handed to `@msgpack/msgpack` (`readAny`).
 *
 * Every method takes the field's `path` (e.g. `BatchTokenIDOutSlim.output_ids[0][1]`) and throws `WireDecodeError`
 * naming it. Truncated input is rejected ("input data was truncated"), as msgspec does.
 */
import { Decoder, ExtData } from '@msgpack/msgpack';
import { WireDecodeError } from './errors.js';

/** An integer field's value: a `number` inside ±(2^53−1), a `bigint` outside it (never rounded; section 3.6). */
export type WireInt = number | bigint;

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const MIN_SAFE = BigInt(Number.MIN_SAFE_INTEGER);

/** Returns `value` as a number when it is inside ±(2^53−1), otherwise the bigint unchanged. */
export function normalizeWireInt(value: bigint): WireInt {
  return value >= MIN_SAFE && value <= MAX_SAFE ? Number(value) : value;
}

/**
 * The msgpack format name of a head byte, as the golden vectors' `wire` trees spell it (`posfixint`, `uint16`,
 * `float64`, `fixstr`, `bin8`, `array16`, `nil`, `true`, ...). 0xc1 (never used) is `invalid`.
 */
export function formatName(head: number): string {
  if (head <= 0x7f) return 'posfixint';
  if (head <= 0x8f) return 'fixmap';
  if (head <= 0x9f) return 'fixarray';
  if (head <= 0xbf) return 'fixstr';
  if (head >= 0xe0) return 'negfixint';
  switch (head) {
    case 0xc0:
      return 'nil';
    case 0xc2:
      return 'false';
    case 0xc3:
      return 'true';
    case 0xc4:
      return 'bin8';
    case 0xc5:
      return 'bin16';
    case 0xc6:
      return 'bin32';
    case 0xc7:
      return 'ext8';
    case 0xc8:
      return 'ext16';
    case 0xc9:
      return 'ext32';
    case 0xca:
      return 'float32';
    case 0xcb:
      return 'float64';
    case 0xcc:
      return 'uint8';
    case 0xcd:
      return 'uint16';
    case 0xce:
      return 'uint32';
    case 0xcf:
      return 'uint64';
    case 0xd0:
      return 'int8';
    case 0xd1:
      return 'int16';
    case 0xd2:
      return 'int32';
    case 0xd3:
      return 'int64';
    case 0xd4:
      return 'fixext1';
    case 0xd5:
      return 'fixext2';
    case 0xd6:
      return 'fixext4';
    case 0xd7:
      return 'fixext8';
    case 0xd8:
      return 'fixext16';
    case 0xd9:
      return 'str8';
    case 0xda:
      return 'str16';
    case 0xdb:
      return 'str32';
    case 0xdc:
      return 'array16';
    case 0xdd:
      return 'array32';
    case 0xde:
      return 'map16';
    case 0xdf:
      return 'map32';
    default:
      return 'invalid';
  }
}

/** The logical kind of a head byte, for "expected X, got Y" messages: int, float32/float64, bool, nil, str, ... */
export function kindName(head: number): string {
  const f = formatName(head);
  if (f === 'posfixint' || f === 'negfixint' || /^u?int\d+$/.test(f)) return 'int';
  if (f === 'true' || f === 'false') return 'bool';
  if (f.endsWith('str') || /^str\d+$/.test(f)) return 'str';
  if (/^bin\d+$/.test(f)) return 'bin';
  if (f.endsWith('array') || /^array\d+$/.test(f)) return 'array';
  if (f.endsWith('map') || /^map\d+$/.test(f)) return 'map';
  if (f.includes('ext')) return 'ext';
  return f; // nil, float32, float64, invalid
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Generic decoder for `any`-typed values; int64/uint64 come back as bigint and are narrowed when safe. */
const anyDecoder = new Decoder({ useBigInt64: true });

/** Replaces safe bigints (from int64/uint64 formats) by numbers, recursively. */
function narrowBigInts(value: unknown): unknown {
  if (typeof value === 'bigint') return normalizeWireInt(value);
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) value[i] = narrowBigInts(value[i]);
    return value;
  }
  if (
    value !== null &&
    typeof value === 'object' &&
    !(value instanceof Uint8Array) &&
    !(value instanceof ExtData) &&
    !(value instanceof Date)
  ) {
    const obj = value as Record<string, unknown>;
    for (const k of Object.keys(obj)) obj[k] = narrowBigInts(obj[k]);
  }
  return value;
}

/**
 * Total size in bytes of the msgpack values whose size the first byte fixes, by that byte (0: not such a value):
 * uint/int 8-64, float 32/64, fixext 1-16 (the msgpack spec's formats table).
 */
const FIXED_SIZE = (() => {
  const t = new Uint8Array(256);
  const sizes: Array<[number, number[]]> = [
    [2, [0xcc, 0xd0]],
    [3, [0xcd, 0xd1, 0xd4]],
    [4, [0xd5]],
    [5, [0xca, 0xce, 0xd2]],
    [6, [0xd6]],
    [9, [0xcb, 0xcf, 0xd3]],
    [10, [0xd7]],
    [18, [0xd8]],
  ];
  for (const [size, heads] of sizes) for (const h of heads) t[h] = size;
  return t;
})();

/** bin, str and ext with a length field: its size in bytes, and the type byte an ext adds after it. */
const LENGTH_PREFIXED: ReadonlyMap<number, readonly [lengthBytes: 1 | 2 | 4, typeBytes: 0 | 1]> = new Map([
  [0xc4, [1, 0]],
  [0xd9, [1, 0]],
  [0xc5, [2, 0]],
  [0xda, [2, 0]],
  [0xc6, [4, 0]],
  [0xdb, [4, 0]],
  [0xc7, [1, 1]],
  [0xc8, [2, 1]],
  [0xc9, [4, 1]],
]);

/**
 * Reads one msgpack buffer front to back. `pos` is the offset of the next unread byte.
 * Construct one per frame; call `expectEnd` after the top-level value to reject trailing characters.
 */
export class MsgpackReader {
  /** The whole frame being read. */
  readonly bytes: Uint8Array;
  /** Offset of the next unread byte. */
  pos = 0;
  private readonly view: DataView;

  constructor(bytes: Uint8Array) {
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  /** Bytes not read yet. */
  get remaining(): number {
    return this.bytes.length - this.pos;
  }

  /** Throws "input data was truncated" unless `n` more bytes are available. */
  private need(n: number, path: string): void {
    if (this.bytes.length - this.pos < n) {
      throw new WireDecodeError(
        path,
        `input data was truncated (needed ${n} byte(s) at offset ${this.pos}, ` +
          `${this.bytes.length - this.pos} left)`,
      );
    }
  }

  /** The head byte of the next value, without consuming it. Throws when the input is exhausted. */
  peekHead(path: string): number {
    this.need(1, path);
    return this.bytes[this.pos];
  }

  /** True when the next value is nil (does not consume it). */
  peekIsNil(path: string): boolean {
    return this.peekHead(path) === 0xc0;
  }

  /** The logical kind of the next value (`int`, `float64`, `str`, `array`, ...), without consuming it. */
  peekKind(path: string): string {
    return kindName(this.peekHead(path));
  }

  private mismatch(path: string, expected: string, head: number): WireDecodeError {
    return new WireDecodeError(path, `expected ${expected}, got ${kindName(head)}`);
  }

  private u8(): number {
    return this.bytes[this.pos++];
  }

  private u16(): number {
    const v = this.view.getUint16(this.pos);
    this.pos += 2;
    return v;
  }

  private u32(): number {
    const v = this.view.getUint32(this.pos);
    this.pos += 4;
    return v;
  }

  /** Reads nil. Throws unless the next value is nil. */
  readNil(path: string, expected = 'nil'): null {
    const head = this.peekHead(path);
    if (head !== 0xc0) throw this.mismatch(path, expected, head);
    this.pos++;
    return null;
  }

  /** Reads a bool (`c2`/`c3` only; integers 0/1 are refused, `inv_req_stream_int`). */
  readBool(path: string, expected = 'bool'): boolean {
    const head = this.peekHead(path);
    if (head === 0xc2 || head === 0xc3) {
      this.pos++;
      return head === 0xc3;
    }
    throw this.mismatch(path, expected, head);
  }

  /**
   * Reads an integer in any msgpack integer format, minimal or not (`ce 00000005` is 5). Floats (even integral),
   * bools and strings are refused. Returns a number inside ±(2^53−1), else a bigint.
   */
  readInt(path: string, expected = 'int'): WireInt {
    const head = this.peekHead(path);
    if (head <= 0x7f) {
      this.pos++;
      return head;
    }
    if (head >= 0xe0) {
      this.pos++;
      return head - 0x100;
    }
    switch (head) {
      case 0xcc:
        this.need(2, path);
        this.pos++;
        return this.u8();
      case 0xcd:
        this.need(3, path);
        this.pos++;
        return this.u16();
      case 0xce:
        this.need(5, path);
        this.pos++;
        return this.u32();
      case 0xcf: {
        this.need(9, path);
        const v = this.view.getBigUint64(this.pos + 1);
        this.pos += 9;
        return normalizeWireInt(v);
      }
      case 0xd0:
        this.need(2, path);
        {
          const v = this.view.getInt8(this.pos + 1);
          this.pos += 2;
          return v;
        }
      case 0xd1:
        this.need(3, path);
        {
          const v = this.view.getInt16(this.pos + 1);
          this.pos += 3;
          return v;
        }
      case 0xd2:
        this.need(5, path);
        {
          const v = this.view.getInt32(this.pos + 1);
          this.pos += 5;
          return v;
        }
      case 0xd3: {
        this.need(9, path);
        const v = this.view.getBigInt64(this.pos + 1);
        this.pos += 9;
        return normalizeWireInt(v);
      }
      default:
        throw this.mismatch(path, expected, head);
    }
  }

  /**
   * Reads a float: float64, float32 (widened, keeping float32 precision) or any integer (msgspec accepts an int
   * where a float is declared, `gw_req_sampling_prefix4`). -0.0, subnormals, ±Infinity and NaN are kept.
   */
  readFloat(path: string, expected = 'float'): number {
    const head = this.peekHead(path);
    if (head === 0xcb) {
      this.need(9, path);
      const v = this.view.getFloat64(this.pos + 1);
      this.pos += 9;
      return v;
    }
    if (head === 0xca) {
      this.need(5, path);
      const v = this.view.getFloat32(this.pos + 1);
      this.pos += 5;
      return v;
    }
    if (kindName(head) === 'int') return Number(this.readInt(path, expected));
    throw this.mismatch(path, expected, head);
  }

  /**
   * Reads one msgpack ext value (fixext1..16, ext8/16/32): its signed type code and a view of its payload (no copy).
   * Used by vLLM's inline tensors (engine-wire.md 3.8). Throws WireDecodeError naming `path` for any other format or
   * a truncated value.
   */
  readExt(path: string): { type: number; data: Uint8Array } {
    this.need(1, path);
    const head = this.bytes[this.pos];
    let headerLen: number;
    let len: number;
    if (head >= 0xd4 && head <= 0xd8) {
      headerLen = 1;
      len = 1 << (head - 0xd4);
    } else if (head === 0xc7) {
      this.need(2, path);
      headerLen = 2;
      len = this.bytes[this.pos + 1];
    } else if (head === 0xc8) {
      this.need(3, path);
      headerLen = 3;
      len = this.view.getUint16(this.pos + 1);
    } else if (head === 0xc9) {
      this.need(5, path);
      headerLen = 5;
      len = this.view.getUint32(this.pos + 1);
    } else {
      throw this.mismatch(path, 'ext', head);
    }
    this.need(headerLen + 1 + len, path);
    const type = this.view.getInt8(this.pos + headerLen);
    const start = this.pos + headerLen + 1;
    this.pos = start + len;
    return { type, data: this.bytes.subarray(start, start + len) };
  }

  /** Reads a str header and returns the payload length; positions the cursor at the payload. */
  private strLength(path: string, expected: string): number {
    const head = this.peekHead(path);
    if (head >= 0xa0 && head <= 0xbf) {
      this.pos++;
      return head & 0x1f;
    }
    if (head === 0xd9) {
      this.need(2, path);
      this.pos++;
      return this.u8();
    }
    if (head === 0xda) {
      this.need(3, path);
      this.pos++;
      return this.u16();
    }
    if (head === 0xdb) {
      this.need(5, path);
      this.pos++;
      return this.u32();
    }
    throw this.mismatch(path, expected, head);
  }

  /** Reads a UTF-8 str (fixstr, str8/16/32). bin is refused (`inv_req_bin_rid`), as is invalid UTF-8. */
  readStr(path: string, expected = 'str'): string {
    const start = this.pos;
    const n = this.strLength(path, expected);
    this.need(n, path);
    try {
      const s = utf8.decode(this.bytes.subarray(this.pos, this.pos + n));
      this.pos += n;
      return s;
    } catch {
      this.pos = start;
      throw new WireDecodeError(path, 'str is not valid UTF-8');
    }
  }

  /**
   * Reads an array header (fixarray, array16, array32) and returns the element count. A count larger than the
   * bytes left (each element takes at least one byte) is reported as truncation before anything is allocated.
   */
  readArrayHeader(path: string, expected = 'array'): number {
    const head = this.peekHead(path);
    let n: number;
    if (head >= 0x90 && head <= 0x9f) {
      this.pos++;
      n = head & 0x0f;
    } else if (head === 0xdc) {
      this.need(3, path);
      this.pos++;
      n = this.u16();
    } else if (head === 0xdd) {
      this.need(5, path);
      this.pos++;
      n = this.u32();
    } else {
      throw this.mismatch(path, expected, head);
    }
    this.need(n, path);
    return n;
  }

  /** Reads a map header (fixmap, map16, map32) and returns the number of key/value pairs. */
  readMapHeader(path: string, expected = 'map'): number {
    const head = this.peekHead(path);
    let n: number;
    if (head >= 0x80 && head <= 0x8f) {
      this.pos++;
      n = head & 0x0f;
    } else if (head === 0xde) {
      this.need(3, path);
      this.pos++;
      n = this.u16();
    } else if (head === 0xdf) {
      this.need(5, path);
      this.pos++;
      n = this.u32();
    } else {
      throw this.mismatch(path, expected, head);
    }
    this.need(2 * n, path);
    return n;
  }

  /**
   * Skips one complete value of any type (used to drain unknown trailing elements and unknown map keys,
   * engine-wire.md 3.2). Iterative, so deeply nested input cannot overflow the stack. Throws on truncation or the
   * never-used byte 0xc1. Not delegated to `@msgpack/msgpack`: its `decode` refuses bytes after the value and
   * `decodeMulti` does not report where a value ends, so the cursor could not continue after the skipped element.
   */
  skip(path: string): void {
    let pending = 1;
    while (pending > 0) {
      pending--;
      const head = this.peekHead(path);
      if (head <= 0x7f || head >= 0xe0 || head === 0xc0 || head === 0xc2 || head === 0xc3) {
        this.pos++;
      } else if (head <= 0x8f) {
        pending += 2 * this.readMapHeader(path);
      } else if (head <= 0x9f) {
        pending += this.readArrayHeader(path);
      } else if (head <= 0xbf) {
        this.skipBytes(1 + (head & 0x1f), path);
      } else if (head === 0xdc || head === 0xdd) {
        pending += this.readArrayHeader(path);
      } else if (head === 0xde || head === 0xdf) {
        pending += 2 * this.readMapHeader(path);
      } else if (FIXED_SIZE[head] !== 0) {
        this.skipBytes(FIXED_SIZE[head]!, path);
      } else {
        this.skipLengthPrefixed(head, path);
      }
    }
  }

  /** Skip a bin, str 8/16/32 or ext 8/16/32 value at `pos` (`head` its first byte); throws on any other byte. */
  private skipLengthPrefixed(head: number, path: string): void {
    const form = LENGTH_PREFIXED.get(head);
    if (form === undefined)
      throw new WireDecodeError(path, `invalid msgpack byte 0x${head.toString(16)} at offset ${this.pos}`);
    const [lengthBytes, typeBytes] = form;
    this.need(1 + lengthBytes, path);
    const length =
      lengthBytes === 1
        ? this.bytes[this.pos + 1]!
        : lengthBytes === 2
          ? this.view.getUint16(this.pos + 1)
          : this.view.getUint32(this.pos + 1);
    this.skipBytes(1 + lengthBytes + typeBytes + length, path);
  }

  private skipBytes(n: number, path: string): void {
    this.need(n, path);
    this.pos += n;
  }

  /**
   * Reads one value whose declared type is `any` (custom_params values, multimodal inputs, handshake sub-maps)
   * with `@msgpack/msgpack`: maps become plain objects (string or number keys), bin becomes Uint8Array, unknown ext
   * types become `ExtData`, integers beyond ±(2^53−1) become bigint. Throws WireDecodeError naming `path`.
   */
  readAny(path: string): unknown {
    const start = this.pos;
    this.skip(path);
    try {
      return narrowBigInts(anyDecoder.decode(this.bytes.subarray(start, this.pos)));
    } catch (err) {
      this.pos = start;
      throw new WireDecodeError(path, `undecodable value: ${(err as Error).message}`);
    }
  }

  /** Throws "trailing characters" unless the whole buffer was consumed (engine-wire.md 3.2, `inv_req_trailing_bytes`). */
  expectEnd(path: string): void {
    if (this.pos !== this.bytes.length) {
      throw new WireDecodeError(
        path,
        `trailing characters: ${this.bytes.length - this.pos} byte(s) after the ` +
          `top-level value at offset ${this.pos}`,
      );
    }
  }
}
