/**
 * Hand-written msgpack hex for the vLLM pins (engine-wire.md section 5). Deliberately independent of the encoder
 * under test: only fixstr keys and the few headers the vectors use are computed here, every value byte is written
 * out in the tests.
 */

/** Lowercase hex of bytes. */
export const hexOf = (b: Uint8Array): string => Buffer.from(b).toString('hex');
/** Bytes of a hex string (spaces allowed). */
export const bytesOf = (h: string): Uint8Array => Uint8Array.from(Buffer.from(h.replace(/\s+/g, ''), 'hex'));

/** fixstr of an ASCII string up to 31 bytes: `a0|len` then the bytes. */
export function fixstr(s: string): string {
  if (s.length > 31 || !/^[\x20-\x7e]*$/.test(s)) throw new Error(`fixstr helper: ${s}`);
  return (0xa0 | s.length).toString(16) + Buffer.from(s, 'ascii').toString('hex');
}

/** A fixmap (≤ 15 pairs) of `[key, valueHex]` pairs, keys as fixstr, in the given order. */
export function fixmap(pairs: ReadonlyArray<readonly [string, string]>): string {
  if (pairs.length > 15) throw new Error('fixmap helper: more than 15 pairs');
  return (0x80 | pairs.length).toString(16) + pairs.map(([k, v]) => fixstr(k) + v.replace(/\s+/g, '')).join('');
}

/** A fixarray (≤ 15 elements) of element hex strings. */
export function fixarray(items: readonly string[]): string {
  if (items.length > 15) throw new Error('fixarray helper: more than 15 items');
  return (0x90 | items.length).toString(16) + items.map((x) => x.replace(/\s+/g, '')).join('');
}

/** float64 hex `cb` + 8 bytes for the few values used. */
export const F64 = {
  '0': 'cb0000000000000000',
  '0.25': 'cb3fd0000000000000',
  '0.5': 'cb3fe0000000000000',
  '0.9': 'cb3feccccccccccccd',
  '1': 'cb3ff0000000000000',
  '1.5': 'cb3ff8000000000000',
  '-100': 'cbc059000000000000',
  '1.7e9': 'cb41d954fc40000000',
} as const;

/** A map16 (`de` + 16-bit count) of `[key, valueHex]` pairs, keys as fixstr, in the given order. */
export function map16(pairs: ReadonlyArray<readonly [string, string]>): string {
  return (
    'de' +
    pairs.length.toString(16).padStart(4, '0') +
    pairs.map(([k, v]) => fixstr(k) + v.replace(/\s+/g, '')).join('')
  );
}
