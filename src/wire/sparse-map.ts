/**
 * A named-map struct codec whose encoder **omits** fields (engine-wire.md 3.1, 3.9 rule 4, 5.3): vLLM's Python
 * structs drop default values on encode (msgspec `omit_defaults`), and SMG writes the non-optional keys of the
 * vLLM sampling map always and the optional ones only when they hold a value. Decoding is exactly `namedMap`'s
 * (string keys, unknown keys skipped, absent keys defaulted, absent required keys refused).
 *
 * Kept beside its only user; it is generic and could move to `src/wire/codec.ts`.
 */
import { namedMap } from './codec.js';
import type { Codec, FieldSpec } from './codec.js';
import { WireEncodeError } from './errors.js';
import { describe } from './writer.js';

/** One field of a sparse map: a `FieldSpec` plus the rule that leaves its key out of the encoded map. */
export type SparseFieldSpec<T, K extends keyof T = keyof T> = K extends keyof T
  ? FieldSpec<T, K> & {
      /** True ⇒ the key is not written. Absent ⇒ the key is always written. `undefined` values are always omitted. */
      readonly omit?: (value: T[K]) => boolean;
    }
  : never;

/** Omit rule for optional fields: nil-valued keys are left out (engine-wire.md 5.3). */
export const omitNull = (value: unknown): boolean => value === null;

/**
 * A map struct whose keys are written in declaration order, each one unless its `omit` rule says otherwise.
 * Encode throws WireEncodeError naming the field when a required field is missing or a value does not fit its codec.
 * Decode throws WireDecodeError as `namedMap` does.
 */
export function sparseMap<T>(spec: { name: string; fields: readonly SparseFieldSpec<T>[] }): Codec<T> {
  const { name, fields } = spec;
  const inner = namedMap<T>({ name, fields: fields as readonly FieldSpec<T>[] });
  return {
    type: name,
    decode: inner.decode,
    encode(w, value, path) {
      if (value === null || typeof value !== 'object') {
        throw new WireEncodeError(path, `expected a ${name} object, got ${describe(value)}`);
      }
      const v = value as Record<string, unknown>;
      const present: Array<[string, Codec<unknown>, unknown]> = [];
      for (const f of fields) {
        const key = f.name as string;
        const x = v[key];
        if (x === undefined) {
          if (f.dflt === undefined) throw new WireEncodeError(`${path}.${key}`, 'required field is missing');
          continue;
        }
        const omit = f.omit as ((x: unknown) => boolean) | undefined;
        if (omit !== undefined && omit(x)) continue;
        present.push([key, f.codec as Codec<unknown>, x]);
      }
      w.writeMapHeader(present.length);
      for (const [key, codec, x] of present) {
        w.writeStr(key, `${path}.${key}`);
        codec.encode(w, x, `${path}.${key}`);
      }
    },
  };
}
