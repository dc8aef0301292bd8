/**
 * Schema combinators over `MsgpackReader` / `MsgpackWriter`: a `Codec<T>` decodes and encodes one declared type,
 * the way msgspec does for the engines' structs (engine-wire.md section 3).
 *
 * - Scalars: `int` (any integer format; bigint beyond ±(2^53−1)), `safeInt`/`uint` (numbers only), `float`
 *   (float64/float32/int in, float64 out), `bool`, `str`, `anyValue` (generic, via `@msgpack/msgpack`).
 * - Containers: `nullable`, `list`, `strMap`, `strOrStrList`, `nestedFloats`, `enumStr`.
 * - Structs: `positional` (msgspec `array_like`, optionally tagged, section 3.1-3.2: tag check, required prefix,
 *   defaults for absent trailing fields, extra trailing elements drained) and `namedMap` (msgspec's default map
 *   encoding: string keys in declaration order, unknown keys ignored, required keys enforced).
 * - `decodeMessage` / `encodeMessage`: one top-level value per frame; trailing characters rejected.
 *
 * Errors: decoders throw `WireDecodeError`, encoders `WireEncodeError`, both naming the field path.
 */
import { WireDecodeError, WireEncodeError } from './errors.js';
import { MsgpackReader } from './reader.js';
import type { WireInt } from './reader.js';
import { MsgpackWriter, describe } from './writer.js';

/** One declared wire type. `type` is its msgspec-style name, used in "expected X, got Y" messages. */
export interface Codec<T> {
  readonly type: string;
  /** Reads one value at `path`; `expected` overrides the type name in a mismatch message (used by `nullable`). */
  decode(r: MsgpackReader, path: string, expected?: string): T;
  /** Writes `value`; throws WireEncodeError naming `path` when the wire cannot carry it. */
  encode(w: MsgpackWriter, value: T, path: string): void;
}

/** Declared `int`: any msgpack integer format in (minimal or not), smallest form out. bigint beyond ±(2^53−1). */
export const int: Codec<WireInt> = {
  type: 'int',
  decode: (r, path, expected) => r.readInt(path, expected ?? 'int'),
  encode: (w, v, path) => w.writeInt(v, path),
};

/** Declared `int`, for values the gateway keeps as `number`: integers beyond ±(2^53−1) are refused on decode. */
export const safeInt: Codec<number> = {
  type: 'int',
  decode(r, path, expected) {
    const v = r.readInt(path, expected ?? 'int');
    if (typeof v === 'bigint') throw new WireDecodeError(path, `integer ${v} is beyond ±(2^53−1)`);
    return v;
  },
  encode: (w, v, path) => w.writeInt(v, path),
};

/** Declared unsigned `int` kept as `number`: negative values and values beyond 2^53−1 are refused on decode. */
export const uint: Codec<number> = {
  type: 'uint',
  decode(r, path, expected) {
    const v = safeInt.decode(r, path, expected ?? 'uint');
    if (v < 0) throw new WireDecodeError(path, `expected a non-negative integer, got ${v}`);
    return v;
  },
  encode(w, v, path) {
    if (typeof v === 'number' && v < 0) throw new WireEncodeError(path, `expected a non-negative integer, got ${v}`);
    w.writeInt(v, path);
  },
};

/** Declared `float`: float64, float32 or any integer in; always float64 (`cb`) out, even for 1.0. */
export const float: Codec<number> = {
  type: 'float',
  decode: (r, path, expected) => r.readFloat(path, expected ?? 'float'),
  encode: (w, v, path) => w.writeFloat64(v, path),
};

/** Declared `bool`: only `c2`/`c3`. */
export const bool: Codec<boolean> = {
  type: 'bool',
  decode: (r, path, expected) => r.readBool(path, expected ?? 'bool'),
  encode: (w, v, path) => w.writeBool(v, path),
};

/** Declared `str`: UTF-8 str only (bin refused). */
export const str: Codec<string> = {
  type: 'str',
  decode: (r, path, expected) => r.readStr(path, expected ?? 'str'),
  encode: (w, v, path) => w.writeStr(v, path),
};

/** Declared `any`: decoded generically by `@msgpack/msgpack` (see `MsgpackReader.readAny`), written by `writeAny`. */
export const anyValue: Codec<unknown> = {
  type: 'any',
  decode: (r, path) => r.readAny(path),
  encode: (w, v, path) => w.writeAny(v, path),
};

/** `X | None`: nil or X. */
export function nullable<T>(inner: Codec<T>): Codec<T | null> {
  const type = `${inner.type} | null`;
  return {
    type,
    decode(r, path, expected) {
      if (r.peekIsNil(path)) {
        r.pos++;
        return null;
      }
      return inner.decode(r, path, expected ?? type);
    },
    encode(w, v, path) {
      if (v === null || v === undefined) w.writeNil();
      else inner.encode(w, v, path);
    },
  };
}

/** `list[X]` (also `set[X]`, which travels as an array in the sender's order; section 3.7). */
export function list<T>(item: Codec<T>): Codec<T[]> {
  return {
    type: `list[${item.type}]`,
    decode(r, path, expected) {
      const n = r.readArrayHeader(path, expected ?? 'array');
      const out: T[] = [];
      for (let i = 0; i < n; i++) out.push(item.decode(r, `${path}[${i}]`));
      return out;
    },
    encode(w, v, path) {
      if (!Array.isArray(v)) throw new WireEncodeError(path, `expected an array, got ${describe(v)}`);
      w.writeArrayHeader(v.length);
      // Token-id lists: a safe integer is written at once (nothing to refuse, so no element path to build).
      const ints = item === (int as Codec<unknown>) || item === (safeInt as Codec<unknown>);
      for (let i = 0; i < v.length; i++) {
        const x = v[i];
        if (ints && typeof x === 'number' && Number.isSafeInteger(x)) w.writeInt(x, path);
        else item.encode(w, x, `${path}[${i}]`);
      }
    },
  };
}

/** Sets `obj[key] = value` as an own enumerable property, even for the key `__proto__`. */
function setOwn(obj: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__') {
    Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
  } else {
    obj[key] = value;
  }
}

/** `dict[str, X]`, as a plain object (key order = wire order; a repeated key keeps the last value). */
export function strMap<T>(value: Codec<T>): Codec<Record<string, T>> {
  return {
    type: `dict[str, ${value.type}]`,
    decode(r, path, expected) {
      const n = r.readMapHeader(path, expected ?? 'map');
      const out: Record<string, T> = {};
      for (let i = 0; i < n; i++) {
        const key = r.readStr(`${path}(key ${i})`);
        setOwn(out, key, value.decode(r, `${path}[${JSON.stringify(key)}]`));
      }
      return out;
    },
    encode(w, v, path) {
      if (v === null || typeof v !== 'object' || Array.isArray(v)) {
        throw new WireEncodeError(path, `expected an object, got ${describe(v)}`);
      }
      const entries = Object.entries(v);
      w.writeMapHeader(entries.length);
      for (const [k, x] of entries) {
        w.writeStr(k, path);
        value.encode(w, x, `${path}[${JSON.stringify(k)}]`);
      }
    },
  };
}

/** `str | list[str]` (TokenSpeed `rid`, `stop`, `stop_strs`). */
export const strOrStrList: Codec<string | string[]> = {
  type: 'str | array',
  decode(r, path, expected) {
    const kind = r.peekKind(path);
    if (kind === 'str') return r.readStr(path);
    if (kind === 'array') return list(str).decode(r, path);
    throw new WireDecodeError(path, `expected ${expected ?? 'str | array'}, got ${kind}`);
  },
  encode(w, v, path) {
    if (typeof v === 'string') w.writeStr(v, path);
    else list(str).encode(w, v, path);
  },
};

/** Nested lists of floats of any depth (TokenSpeed `input_embeds`: `list[list[float]]` or `list[list[list[float]]]`). */
export type NestedFloats = Array<number | NestedFloats>;

/** Codec for `NestedFloats`: the top level is an array; each element is an array (recursively) or a float. */
export const nestedFloats: Codec<NestedFloats> = {
  type: 'list[float] (nested)',
  decode(r, path, expected) {
    const n = r.readArrayHeader(path, expected ?? 'array');
    const out: NestedFloats = [];
    for (let i = 0; i < n; i++) {
      const p = `${path}[${i}]`;
      out.push(r.peekKind(p) === 'array' ? nestedFloats.decode(r, p) : r.readFloat(p, 'float | array'));
    }
    return out;
  },
  encode(w, v, path) {
    if (!Array.isArray(v)) throw new WireEncodeError(path, `expected an array, got ${describe(v)}`);
    w.writeArrayHeader(v.length);
    v.forEach((x, i) => {
      if (Array.isArray(x)) nestedFloats.encode(w, x, `${path}[${i}]`);
      else w.writeFloat64(x, `${path}[${i}]`);
    });
  },
};

/** A str restricted to `values` (e.g. the ready response's `dtype`). */
export function enumStr<T extends string>(values: readonly T[]): Codec<T> {
  const isMember = (s: string): s is T => (values as readonly string[]).includes(s);
  const allowed = values.map((v) => `'${v}'`).join(', ');
  return {
    type: 'str',
    decode(r, path, expected) {
      const s = r.readStr(path, expected);
      if (!isMember(s)) throw new WireDecodeError(path, `invalid value '${s}' (expected one of ${allowed})`);
      return s;
    },
    encode(w, v, path) {
      if (!isMember(v)) throw new WireEncodeError(path, `invalid value '${String(v)}' (expected one of ${allowed})`);
      w.writeStr(v, path);
    },
  };
}

/** One field of a struct: its name, its codec and, when it may be absent, a factory for its default. */
export type FieldSpec<T, K extends keyof T = keyof T> = K extends keyof T
  ? {
      readonly name: K;
      readonly codec: Codec<T[K]>;
      /** Absent ⇒ the field is required. A factory so mutable defaults (`[]`, `{}`) are never shared. */
      readonly dflt?: () => T[K];
      /** namedMap only: other keys accepted for this field on decode (e.g. `block_size`). */
      readonly aliases?: readonly string[];
    }
  : never;

/** Structural equality for defaults: primitives (NaN and -0 by `Object.is`), arrays and plain objects. */
export function wireEqual(a: unknown, b: unknown): boolean {
  if (Object.is(a, b)) return true;
  if (typeof a === 'bigint' || typeof b === 'bigint') {
    const intLike = (x: unknown): x is number | bigint =>
      typeof x === 'bigint' || (typeof x === 'number' && Number.isInteger(x));
    return intLike(a) && intLike(b) && BigInt(a) === BigInt(b);
  }
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((x, i) => wireEqual(x, b[i]));
  }
  if (
    a !== null &&
    b !== null &&
    typeof a === 'object' &&
    typeof b === 'object' &&
    !Array.isArray(a) &&
    !Array.isArray(b)
  ) {
    const ka = Object.keys(a);
    const kb = Object.keys(b);
    return (
      ka.length === kb.length &&
      ka.every((k) => wireEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]))
    );
  }
  return false;
}

/** Options of `PositionalCodec.encodeWith`. */
export interface PositionalEncodeOptions<T> {
  /** Total element count including the tag (default: all fields). Fields past it must hold their defaults. */
  length?: number;
  /** Per-field encoder overrides (e.g. to write a nested struct in a prefix form). */
  fieldEncoders?: { [K in keyof T]?: (w: MsgpackWriter, value: T[K], path: string) => void };
}

/** A positional struct codec plus its layout. */
export interface PositionalCodec<T> extends Codec<T> {
  readonly fields: readonly FieldSpec<T>[];
  readonly tag: string | undefined;
  /** Minimum element count (tag included): through the last required field. */
  readonly minLength: number;
  /** Element count of the full form (tag included). */
  readonly fullLength: number;
  /** A fresh value holding every field's default; throws if some field is required. */
  defaults(): Partial<T>;
  encodeWith(w: MsgpackWriter, value: T, path: string, opts?: PositionalEncodeOptions<T>): void;
}

/**
 * A msgspec `array_like` struct (engine-wire.md 3.1-3.2). With `tag`, element 0 must be exactly that string
 * ("invalid tag"); then field i is element i (+1 when tagged). Decode: an array shorter than `minLength` is
 * refused ("expected array of at least length K, got M" naming the first missing required field), absent
 * trailing fields take their defaults, extra trailing elements are drained and dropped. A map is refused
 * ("expected array, got map", `inv_req_map_form`).
 * Encode: all fields, or the first `length` elements (`encodeWith`), refusing to drop a non-default field.
 */
export function positional<T>(spec: {
  name: string;
  tag?: string;
  fields: readonly FieldSpec<T>[];
}): PositionalCodec<T> {
  const { name, tag, fields } = spec;
  const offset = tag === undefined ? 0 : 1;
  let required = 0;
  fields.forEach((f, i) => {
    if (f.dflt === undefined) required = i + 1;
  });
  const minLength = offset + required;
  const fullLength = offset + fields.length;
  // `${path}.${field}` of every field for the last `path` encoded (a message's root path repeats message after
  // message), so an encode builds no path strings.
  let pathsOf: { path: string; paths: string[] } = { path: '', paths: [] };
  const fieldPaths = (path: string): string[] => {
    if (pathsOf.path !== path || pathsOf.paths.length !== fields.length) {
      pathsOf = { path, paths: fields.map((f) => `${path}.${f.name as string}`) };
    }
    return pathsOf.paths;
  };

  const codec: PositionalCodec<T> = {
    type: name,
    fields,
    tag,
    minLength,
    fullLength,
    defaults() {
      const out: Record<string, unknown> = {};
      for (const f of fields) {
        if (f.dflt === undefined) continue;
        out[f.name as string] = f.dflt();
      }
      return out as Partial<T>;
    },
    decode(r, path, expected) {
      const n = r.readArrayHeader(path, expected ?? 'array');
      if (n < minLength) {
        const missing = fields[Math.max(0, n - offset)]?.name as string | undefined;
        throw new WireDecodeError(
          path,
          `expected array of at least length ${minLength}, got ${n}` +
            (missing !== undefined && n >= offset ? ` (required field ${missing} missing)` : ''),
        );
      }
      if (tag !== undefined) {
        const tagPath = `${path}._tag`;
        const kind = r.peekKind(tagPath);
        if (kind !== 'str') throw new WireDecodeError(tagPath, `invalid tag: expected str '${tag}', got ${kind}`);
        const got = r.readStr(tagPath);
        if (got !== tag) throw new WireDecodeError(tagPath, `invalid tag '${got}' (expected '${tag}')`);
      }
      const out: Record<string, unknown> = {};
      fields.forEach((f, i) => {
        const fieldName = f.name as string;
        out[fieldName] = i + offset < n ? f.codec.decode(r, `${path}.${fieldName}`) : f.dflt!();
      });
      for (let i = fullLength; i < n; i++) r.skip(`${path}[${i}]`);
      return out as T;
    },
    encode(w, value, path) {
      codec.encodeWith(w, value, path);
    },
    encodeWith(w, value, path, opts = {}) {
      if (value === null || typeof value !== 'object') {
        throw new WireEncodeError(path, `expected a ${name} object, got ${describe(value)}`);
      }
      const length = opts.length ?? fullLength;
      if (!Number.isInteger(length) || length < minLength || length > fullLength) {
        throw new WireEncodeError(
          path,
          `cannot encode ${name} with ${length} elements ` + `(between ${minLength} and ${fullLength})`,
        );
      }
      const v = value as Record<string, unknown>;
      for (let i = Math.max(0, length - offset); i < fields.length; i++) {
        const fieldName = fields[i]!.name as string;
        if (!wireEqual(v[fieldName], fields[i]!.dflt!())) {
          throw new WireEncodeError(
            `${path}.${fieldName}`,
            `holds a non-default value but the ${length}-element ` + `form of ${name} ends before it`,
          );
        }
      }
      w.writeArrayHeader(length);
      if (tag !== undefined) w.writeStr(tag, `${path}._tag`);
      const overrides = (opts.fieldEncoders ?? {}) as Record<
        string,
        ((w: MsgpackWriter, x: unknown, p: string) => void) | undefined
      >;
      const paths = fieldPaths(path);
      for (let i = 0; i + offset < length; i++) {
        const f = fields[i];
        const fieldName = f.name as string;
        const p = paths[i]!;
        const x = v[fieldName];
        if (x === undefined && f.dflt === undefined) throw new WireEncodeError(p, 'required field is missing');
        const fieldValue = x === undefined ? f.dflt!() : x;
        const override = overrides[fieldName];
        if (override !== undefined) override(w, fieldValue, p);
        else (f.codec as Codec<unknown>).encode(w, fieldValue, p);
      }
    },
  };
  return codec;
}

/**
 * A msgspec struct in its default map encoding (engine-wire.md 3.1): string keys, written in declaration order
 * with every field present (nil values included); on decode unknown keys are skipped, aliases accepted, absent
 * optional fields defaulted, and an absent required field refused ("missing required key 'x'").
 * Field names are the wire keys.
 */
export function namedMap<T>(spec: { name: string; fields: readonly FieldSpec<T>[] }): Codec<T> {
  const { name, fields } = spec;
  const byKey = new Map<string, FieldSpec<T>>();
  for (const f of fields) {
    byKey.set(f.name as string, f);
    for (const a of f.aliases ?? []) byKey.set(a, f);
  }
  return {
    type: name,
    decode(r, path, expected) {
      const n = r.readMapHeader(path, expected ?? 'map');
      const out: Record<string, unknown> = {};
      for (let i = 0; i < n; i++) {
        const key = r.readStr(`${path}(key ${i})`);
        const f = byKey.get(key);
        if (f === undefined) {
          r.skip(`${path}.${key}`);
          continue;
        }
        out[f.name as string] = f.codec.decode(r, `${path}.${key}`);
      }
      for (const f of fields) {
        const fieldName = f.name as string;
        if (Object.hasOwn(out, fieldName)) continue;
        if (f.dflt === undefined) {
          const names = [fieldName, ...(f.aliases ?? [])].map((k) => `'${k}'`).join(' or ');
          throw new WireDecodeError(path, `missing required key ${names}`);
        }
        out[fieldName] = f.dflt();
      }
      // Declaration order, whatever the wire order was.
      const ordered: Record<string, unknown> = {};
      for (const f of fields) ordered[f.name as string] = out[f.name as string];
      return ordered as T;
    },
    encode(w, value, path) {
      if (value === null || typeof value !== 'object') {
        throw new WireEncodeError(path, `expected a ${name} object, got ${describe(value)}`);
      }
      const v = value as Record<string, unknown>;
      w.writeMapHeader(fields.length);
      for (const f of fields) {
        const fieldName = f.name as string;
        const p = `${path}.${fieldName}`;
        const x = v[fieldName];
        if (x === undefined && f.dflt === undefined) throw new WireEncodeError(p, 'required field is missing');
        w.writeStr(fieldName, p);
        (f.codec as Codec<unknown>).encode(w, x === undefined ? f.dflt!() : x, p);
      }
    },
  };
}

/**
 * Decodes one frame holding exactly one value of `codec`'s type. `root` names the struct in error paths.
 * Throws WireDecodeError on any type mismatch, truncation, or trailing characters.
 */
export function decodeMessage<T>(codec: Codec<T>, bytes: Uint8Array, root: string = codec.type): T {
  const r = new MsgpackReader(bytes);
  const value = codec.decode(r, root);
  r.expectEnd(root);
  return value;
}

/** Encodes one value of `codec`'s type as a complete frame. Throws WireEncodeError naming the field. */
export function encodeMessage<T>(codec: Codec<T>, value: T, root: string = codec.type): Uint8Array {
  const w = new MsgpackWriter();
  codec.encode(w, value, root);
  return w.finish();
}
