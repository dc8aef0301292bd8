/** Unit tests of the schema combinators: positional and named-map structs (engine-wire.md 3.1-3.2). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  anyValue,
  bool,
  decodeMessage,
  encodeMessage,
  enumStr,
  float,
  int,
  list,
  namedMap,
  nestedFloats,
  nullable,
  positional,
  safeInt,
  str,
  strMap,
  strOrStrList,
  uint,
  wireEqual,
} from '../../src/wire/codec.js';
import type { WireInt } from '../../src/wire/reader.js';
import { MsgpackWriter } from '../../src/wire/writer.js';
import { WireDecodeError, WireEncodeError } from '../../src/wire/errors.js';

const b = (hex: string) => Uint8Array.from(Buffer.from(hex, 'hex'));
const h = (bytes: Uint8Array) => Buffer.from(bytes).toString('hex');
const decodeRejects = (fn: () => unknown, pattern: RegExp) =>
  assert.throws(fn, (e: unknown) => e instanceof WireDecodeError && pattern.test(e.message));
const encodeRejects = (fn: () => unknown, pattern: RegExp) =>
  assert.throws(fn, (e: unknown) => e instanceof WireEncodeError && pattern.test(e.message));

interface Demo {
  id: string;
  count: WireInt;
  ratio: number;
  tags: string[] | null;
}

const demo = positional<Demo>({
  name: 'Demo',
  tag: 'Demo',
  fields: [
    { name: 'id', codec: str },
    { name: 'count', codec: int, dflt: () => 0 },
    { name: 'ratio', codec: float, dflt: () => 1.0 },
    { name: 'tags', codec: nullable(list(str)), dflt: () => null },
  ],
});

test('positional: layout (tag, minimum length through the last required field, full length)', () => {
  assert.equal(demo.minLength, 2);
  assert.equal(demo.fullLength, 5);
  assert.deepEqual(demo.defaults(), { count: 0, ratio: 1, tags: null });
});

test('positional: a short array takes defaults; extra trailing elements are drained', () => {
  assert.deepStrictEqual(decodeMessage(demo, b('92a444656d6fa161')), { id: 'a', count: 0, ratio: 1, tags: null });
  // 7 elements: two unknown trailing values (a map and an array) are skipped.
  assert.deepStrictEqual(decodeMessage(demo, b('97a444656d6fa16105cb3fe000000000000091a17881a16b01920102')), {
    id: 'a',
    count: 5,
    ratio: 0.5,
    tags: ['x'],
  });
});

test('positional: too short, wrong tag, untagged, map form, trailing bytes', () => {
  decodeRejects(
    () => decodeMessage(demo, b('91a444656d6f')),
    /^Demo: expected array of at least length 2, got 1 \(required field id missing\)$/,
  );
  decodeRejects(() => decodeMessage(demo, b('90')), /^Demo: expected array of at least length 2, got 0$/);
  decodeRejects(() => decodeMessage(demo, b('92a3446578a161')), /^Demo\._tag: invalid tag 'Dex' \(expected 'Demo'\)$/);
  decodeRejects(() => decodeMessage(demo, b('9201a161')), /^Demo\._tag: invalid tag: expected str 'Demo', got int$/);
  decodeRejects(() => decodeMessage(demo, b('81a26964a161')), /^Demo: expected array, got map$/);
  decodeRejects(() => decodeMessage(demo, b('92a444656d6fa161c0')), /^Demo: trailing characters/);
  decodeRejects(() => decodeMessage(demo, b('93a444656d6fa161cb40')), /^Demo\.count: expected int, got float64$/);
  decodeRejects(
    () => decodeMessage(demo, b('95a444656d6fa16100cb3ff000000000000091c0')),
    /^Demo\.tags\[0\]: expected str, got nil$/,
  );
});

test('positional encode: full form, prefix form, defaults filled in, non-default trailing field refused', () => {
  const value: Demo = { id: 'a', count: 5, ratio: 1, tags: null };
  assert.equal(h(encodeMessage(demo, value)), '95a444656d6fa16105cb3ff0000000000000c0');
  const w = new MsgpackWriter();
  demo.encodeWith(w, value, 'Demo', { length: 3 });
  assert.equal(h(w.finish()), '93a444656d6fa16105');
  const w2 = new MsgpackWriter();
  demo.encodeWith(w2, { id: 'a' } as Demo, 'Demo', { length: 5 });
  assert.equal(h(w2.finish()), '95a444656d6fa16100cb3ff0000000000000c0');
  encodeRejects(
    () => demo.encodeWith(new MsgpackWriter(), { ...value, tags: ['t'] }, 'Demo', { length: 4 }),
    /^Demo\.tags: holds a non-default value but the 4-element form of Demo ends before it$/,
  );
  encodeRejects(() => demo.encodeWith(new MsgpackWriter(), value, 'Demo', { length: 1 }), /between 2 and 5/);
  encodeRejects(() => demo.encodeWith(new MsgpackWriter(), value, 'Demo', { length: 6 }), /between 2 and 5/);
  encodeRejects(() => encodeMessage(demo, { count: 1 } as unknown as Demo), /^Demo\.id: required field is missing$/);
  encodeRejects(() => encodeMessage(demo, { ...value, count: 1.5 }), /^Demo\.count: expected an integer, got 1\.5$/);
  encodeRejects(() => encodeMessage(demo, null as unknown as Demo), /^Demo: expected a Demo object/);
});

interface Hello {
  status: string | null;
  size: number;
  extra: Record<string, unknown>;
}

const hello = namedMap<Hello>({
  name: 'Hello',
  fields: [
    { name: 'status', codec: nullable(str), dflt: () => null },
    { name: 'size', codec: uint, aliases: ['block_size'] },
    { name: 'extra', codec: strMap(anyValue), dflt: () => ({}) },
  ],
});

test('namedMap: declaration-order encode with nil values; decode ignores unknown keys and accepts aliases', () => {
  assert.equal(
    h(encodeMessage(hello, { status: null, size: 3, extra: {} })),
    '83a6737461747573c0a473697a6503a5657874726180',
  );
  assert.deepStrictEqual(decodeMessage(hello, b('82a5667574757292c0c0a473697a6503')), {
    status: null,
    size: 3,
    extra: {},
  });
  assert.deepStrictEqual(decodeMessage(hello, b('81aa626c6f636b5f73697a6510')), { status: null, size: 16, extra: {} });
  decodeRejects(
    () => decodeMessage(hello, b('81a6737461747573a141')),
    /^Hello: missing required key 'size' or 'block_size'$/,
  );
  decodeRejects(
    () => decodeMessage(hello, b('81a473697a65ff')),
    /^Hello\.size: expected a non-negative integer, got -1$/,
  );
  decodeRejects(() => decodeMessage(hello, b('810103')), /^Hello\(key 0\): expected str, got int$/);
  decodeRejects(() => decodeMessage(hello, b('93')), /^Hello: expected map, got array$/);
});

test('strMap: `__proto__` is an ordinary own key, never the prototype', () => {
  const m = decodeMessage(strMap(float), b('81a95f5f70726f746f5f5fcb3ff0000000000000'));
  assert.equal(Object.getPrototypeOf(m), Object.prototype);
  assert.deepEqual(Object.keys(m), ['__proto__']);
  assert.equal(Object.getOwnPropertyDescriptor(m, '__proto__')?.value, 1);
});

test('nullable / scalar codecs name the union in mismatch messages', () => {
  decodeRejects(
    () => decodeMessage(nullable(int), b('cb4020000000000000'), 'S.max_new_tokens'),
    /^S\.max_new_tokens: expected int \| null, got float64$/,
  );
  assert.equal(decodeMessage(nullable(int), b('c0')), null);
  decodeRejects(() => decodeMessage(strOrStrList, b('05'), 'R.rid'), /^R\.rid: expected str \| array, got int$/);
  decodeRejects(
    () => decodeMessage(nullable(strOrStrList), b('c403626164'), 'R.rid'),
    /^R\.rid: expected str \| array \| null, got bin$/,
  );
  assert.deepEqual(decodeMessage(strOrStrList, b('92a161a162')), ['a', 'b']);
  decodeRejects(() => decodeMessage(safeInt, b('cf0020000000000001'), 'x'), /^x: integer 9007199254740993 is beyond/);
  decodeRejects(() => decodeMessage(bool, b('01'), 'x'), /^x: expected bool, got int$/);
});

test('enumStr refuses values outside the set on both sides', () => {
  const dtype = enumStr(['float16', 'bfloat16', 'float32'] as const);
  assert.equal(decodeMessage(dtype, b('a7666c6f61743136')), 'float16');
  decodeRejects(() => decodeMessage(dtype, b('a4696e7438'), 'R.dtype'), /^R\.dtype: invalid value 'int8'/);
  encodeRejects(() => encodeMessage(dtype, 'int8' as 'float16', 'R.dtype'), /^R\.dtype: invalid value 'int8'/);
});

test('nestedFloats: arrays of floats at any depth, always float64 out', () => {
  const v = decodeMessage(nestedFloats, b('92920102' + '9191cb3fe0000000000000'));
  assert.deepStrictEqual(v, [[1, 2], [[0.5]]]);
  assert.equal(h(encodeMessage(nestedFloats, [[1]])), '9191cb3ff0000000000000');
  decodeRejects(() => decodeMessage(nestedFloats, b('91a161'), 'E'), /^E\[0\]: expected float \| array, got str$/);
});

test('wireEqual: Object.is for primitives, structural for arrays/objects, bigint equals integral number', () => {
  assert.ok(wireEqual(NaN, NaN));
  assert.ok(!wireEqual(0, -0));
  assert.ok(wireEqual(5n, 5));
  assert.ok(!wireEqual(5n, 5.5));
  assert.ok(wireEqual([1, { a: [null] }], [1, { a: [null] }]));
  assert.ok(!wireEqual([1], [1, 2]));
  assert.ok(!wireEqual({ a: 1 }, { b: 1 }));
  assert.ok(!wireEqual(null, {}));
});
