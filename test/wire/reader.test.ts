/** Unit tests of the typed msgpack reader (engine-wire.md 3.4-3.7). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { encode as mpEncode, ExtData } from '@msgpack/msgpack';
import { MsgpackReader, formatName, kindName } from '../../src/wire/reader.js';
import { WireDecodeError } from '../../src/wire/errors.js';

const r = (hex: string) => new MsgpackReader(Uint8Array.from(Buffer.from(hex, 'hex')));
const rejects = (fn: () => unknown, pattern: RegExp) =>
  assert.throws(fn, (e: unknown) => e instanceof WireDecodeError && pattern.test(e.message));

test('readInt: every integer format, minimal or not', () => {
  const cases: [string, number | bigint][] = [
    ['00', 0],
    ['7f', 127],
    ['ff', -1],
    ['e0', -32],
    ['cc80', 128],
    ['ccff', 255],
    ['cd0190', 400],
    ['ce40000000', 2 ** 30],
    ['cf0000000100000000', 2 ** 32],
    ['d080', -128],
    ['d18000', -32768],
    ['d280000000', -(2 ** 31)],
    ['d3ffffffffffffffff', -1],
    ['ce00000005', 5],
    ['cd0010', 16],
    ['cf0000000000000005', 5],
    ['cf001fffffffffffff', Number.MAX_SAFE_INTEGER],
    ['d3ffe0000000000001', Number.MIN_SAFE_INTEGER],
  ];
  for (const [hex, value] of cases) {
    const reader = r(hex);
    assert.equal(reader.readInt('x'), value, hex);
    reader.expectEnd('x');
  }
});

test('readInt: beyond ±(2^53−1) becomes a bigint, never a rounded number', () => {
  assert.equal(r('cf0020000000000000').readInt('x'), 2n ** 53n);
  assert.equal(r('cf0020000000000001').readInt('x'), 9007199254740993n);
  assert.equal(r('cfffffffffffffffff').readInt('x'), 2n ** 64n - 1n);
  assert.equal(r('d3ffe0000000000000').readInt('x'), -(2n ** 53n));
  assert.equal(r('d38000000000000000').readInt('x'), -(2n ** 63n));
});

test('readInt: refuses floats (even integral), bools, str, nil, naming the path', () => {
  rejects(() => r('cb4020000000000000').readInt('S.max_new_tokens'), /^S\.max_new_tokens: expected int, got float64$/);
  rejects(() => r('ca41000000').readInt('x'), /^x: expected int, got float32$/);
  rejects(() => r('c3').readInt('x[0]'), /^x\[0\]: expected int, got bool$/);
  rejects(() => r('a131').readInt('x'), /expected int, got str$/);
  rejects(() => r('c0').readInt('x', 'int | null'), /^x: expected int \| null, got nil$/);
});

test('readFloat: float64, float32 (float32 precision), ints; keeps -0.0, NaN, ±Infinity, subnormals', () => {
  assert.equal(r('cb3ff0000000000000').readFloat('x'), 1);
  assert.equal(r('ca3f666666').readFloat('x'), 0.8999999761581421);
  assert.equal(r('01').readFloat('x'), 1);
  assert.equal(r('cd0190').readFloat('x'), 400);
  assert.ok(Object.is(r('cb8000000000000000').readFloat('x'), -0));
  assert.ok(Number.isNaN(r('cb7ff8000000000000').readFloat('x')));
  assert.equal(r('cb7ff0000000000000').readFloat('x'), Infinity);
  assert.equal(r('cbfff0000000000000').readFloat('x'), -Infinity);
  assert.equal(r('cb8000000000000001').readFloat('x'), -5e-324);
  rejects(() => r('a131').readFloat('t'), /^t: expected float, got str$/);
  rejects(() => r('c2').readFloat('t'), /^t: expected float, got bool$/);
});

test('readBool: only c2/c3; integers 0/1 refused', () => {
  assert.equal(r('c3').readBool('x'), true);
  assert.equal(r('c2').readBool('x'), false);
  rejects(() => r('01').readBool('R.stream'), /^R\.stream: expected bool, got int$/);
  rejects(() => r('00').readBool('x'), /expected bool, got int/);
});

test('readStr: fixstr/str8/str16/str32, UTF-8; bin and invalid UTF-8 refused', () => {
  assert.equal(r('a3616263').readStr('x'), 'abc');
  assert.equal(r('a0').readStr('x'), '');
  assert.equal(r('d903616263').readStr('x'), 'abc');
  assert.equal(r('da0003616263').readStr('x'), 'abc');
  assert.equal(r('db00000003616263').readStr('x'), 'abc');
  assert.equal(r('a6e8ab8be6b182').readStr('x'), '請求');
  rejects(() => r('c403626164').readStr('R.rid'), /^R\.rid: expected str, got bin$/);
  rejects(() => r('a2c328').readStr('x'), /^x: str is not valid UTF-8$/);
  rejects(() => r('05').readStr('x'), /expected str, got int/);
});

test('array and map headers; a count larger than the remaining bytes is truncation', () => {
  assert.equal(r('93010203').readArrayHeader('x'), 3);
  assert.equal(r('dc0001' + '00').readArrayHeader('x'), 1);
  assert.equal(r('dd00000001' + '00').readArrayHeader('x'), 1);
  assert.equal(r('8100c0').readMapHeader('x'), 1);
  assert.equal(r('de000100c0').readMapHeader('x'), 1);
  rejects(() => r('ddffffffff00').readArrayHeader('x'), /^x: input data was truncated/);
  rejects(() => r('df0000000100').readMapHeader('x'), /truncated/);
  rejects(() => r('81a16b').readArrayHeader('x'), /^x: expected array, got map$/);
  rejects(() => r('93').readMapHeader('x'), /^x: expected map, got array$/);
});

test('truncation inside every multi-byte scalar is reported, not read past the end', () => {
  for (const hex of ['cc', 'cd01', 'ce000000', 'cf00000000000000', 'd0', 'd100', 'd2000000', 'd300']) {
    rejects(() => r(hex).readInt('x'), /^x: input data was truncated/);
  }
  rejects(() => r('cb3ff0').readFloat('x'), /truncated/);
  rejects(() => r('ca3f').readFloat('x'), /truncated/);
  rejects(() => r('a561').readStr('x'), /truncated/);
  rejects(() => r('d9').readStr('x'), /truncated/);
  rejects(() => r('').readBool('x'), /truncated/);
});

test('expectEnd rejects trailing characters', () => {
  const reader = r('0100');
  reader.readInt('x');
  rejects(
    () => reader.expectEnd('Root'),
    /^Root: trailing characters: 1 byte\(s\) after the top-level value at offset 1$/,
  );
});

test('skip consumes exactly one value of every kind', () => {
  const values: unknown[] = [
    null,
    true,
    false,
    0,
    -1,
    200,
    -200,
    70000,
    -70000,
    2 ** 40,
    -(2 ** 40),
    1.5,
    'x',
    'y'.repeat(40),
    'z'.repeat(300),
    'w'.repeat(70000),
    new Uint8Array(3),
    new Uint8Array(300),
    new Uint8Array(70000),
    [1, [2, [3]]],
    { a: { b: [1] } },
    new Array(20).fill(1),
    Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`k${i}`, i])),
    new ExtData(5, new Uint8Array(1)),
    new ExtData(5, new Uint8Array(2)),
    new ExtData(5, new Uint8Array(4)),
    new ExtData(5, new Uint8Array(8)),
    new ExtData(5, new Uint8Array(16)),
    new ExtData(5, new Uint8Array(3)),
    new ExtData(5, new Uint8Array(300)),
    new ExtData(5, new Uint8Array(70000)),
  ];
  for (const v of values) {
    const bytes = mpEncode(v);
    const withTail = new Uint8Array(bytes.length + 1);
    withTail.set(bytes);
    withTail[bytes.length] = 0x2a;
    const reader = new MsgpackReader(withTail);
    reader.skip('x');
    assert.equal(reader.pos, bytes.length, `skip ${Buffer.from(bytes.subarray(0, 4)).toString('hex')}`);
    assert.equal(reader.readInt('x'), 42);
  }
  rejects(() => r('c1').skip('x'), /invalid msgpack byte 0xc1/);
  rejects(() => r('9301').skip('x'), /truncated/);
});

test('skip is iterative: 100k nested arrays do not overflow the stack', () => {
  const depth = 100_000;
  const bytes = new Uint8Array(depth + 1).fill(0x91);
  bytes[depth] = 0x00;
  const reader = new MsgpackReader(bytes);
  reader.skip('x');
  reader.expectEnd('x');
});

test('readAny decodes generic values, narrowing safe 64-bit ints and keeping big ones as bigint', () => {
  const reader = r('83a16101a162cf0000000100000000a163cf0020000000000001');
  assert.deepStrictEqual(reader.readAny('x'), { a: 1, b: 2 ** 32, c: 9007199254740993n });
  assert.deepStrictEqual(r('92c40101d40501').readAny('x'), [Uint8Array.of(1), new ExtData(5, Uint8Array.of(1))]);
  rejects(() => r('81c001').readAny('P.cfg'), /^P\.cfg: undecodable value/);
});

test("formatName / kindName follow the vectors' `wire` vocabulary", () => {
  assert.equal(formatName(0x05), 'posfixint');
  assert.equal(formatName(0xff), 'negfixint');
  assert.equal(formatName(0xcd), 'uint16');
  assert.equal(formatName(0xdc), 'array16');
  assert.equal(formatName(0xc1), 'invalid');
  assert.equal(kindName(0xcf), 'int');
  assert.equal(kindName(0xcb), 'float64');
  assert.equal(kindName(0xa0), 'str');
  assert.equal(kindName(0xd9), 'str');
  assert.equal(kindName(0xc4), 'bin');
  assert.equal(kindName(0x90), 'array');
  assert.equal(kindName(0xde), 'map');
  assert.equal(kindName(0xc7), 'ext');
  assert.equal(kindName(0xc0), 'nil');
  assert.equal(kindName(0xc3), 'bool');
});
