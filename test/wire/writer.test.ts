/** Unit tests of the schema-driven msgpack writer: msgspec's encoding choices (engine-wire.md 3.5, 3.7, 3.9). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decode as mpDecode } from '@msgpack/msgpack';
import { MsgpackWriter } from '../../src/wire/writer.js';
import { MsgpackReader } from '../../src/wire/reader.js';
import { WireEncodeError } from '../../src/wire/errors.js';
import { prng } from '../helpers/prng.js';

const hex = (fn: (w: MsgpackWriter) => void) => {
  const w = new MsgpackWriter(1); // start tiny so growth is exercised
  fn(w);
  return Buffer.from(w.finish()).toString('hex');
};
const rejects = (fn: () => unknown, pattern: RegExp) =>
  assert.throws(fn, (e: unknown) => e instanceof WireEncodeError && pattern.test(e.message));

test('writeInt: the smallest form at every boundary (unsigned forms for non-negative values)', () => {
  const cases: [number | bigint, string][] = [
    [0, '00'],
    [8, '08'],
    [127, '7f'],
    [128, 'cc80'],
    [255, 'ccff'],
    [256, 'cd0100'],
    [400, 'cd0190'],
    [65535, 'cdffff'],
    [65536, 'ce00010000'],
    [2 ** 30, 'ce40000000'],
    [2 ** 32 - 1, 'ceffffffff'],
    [2 ** 32, 'cf0000000100000000'],
    [Number.MAX_SAFE_INTEGER, 'cf001fffffffffffff'],
    [-1, 'ff'],
    [-32, 'e0'],
    [-33, 'd0df'],
    [-128, 'd080'],
    [-129, 'd1ff7f'],
    [-32768, 'd18000'],
    [-32769, 'd2ffff7fff'],
    [-(2 ** 31), 'd280000000'],
    [-(2 ** 31) - 1, 'd3ffffffff7fffffff'],
    [2n ** 64n - 1n, 'cfffffffffffffffff'],
    [-(2n ** 63n), 'd38000000000000000'],
    [9007199254740993n, 'cf0020000000000001'],
    [5n, '05'],
    [-5n, 'fb'],
    [70000n, 'ce00011170'],
    [-0, '00'],
  ];
  for (const [v, h] of cases)
    assert.equal(
      hex((w) => w.writeInt(v, 'x')),
      h,
      String(v),
    );
});

test('writeInt: refuses non-integers, unsafe numbers and out-of-range bigints, naming the path', () => {
  rejects(() => hex((w) => w.writeInt(1.5, 'S.top_k')), /^S\.top_k: expected an integer, got 1\.5$/);
  rejects(() => hex((w) => w.writeInt(NaN, 'x')), /expected an integer/);
  rejects(() => hex((w) => w.writeInt(2 ** 60, 'x')), /beyond ±\(2\^53−1\).*pass a bigint/);
  rejects(() => hex((w) => w.writeInt(2n ** 64n, 'x')), /outside the msgpack range/);
  rejects(() => hex((w) => w.writeInt(-(2n ** 63n) - 1n, 'x')), /outside the msgpack range/);
  rejects(() => hex((w) => w.writeInt('5' as unknown as number, 'x')), /expected an integer, got string/);
});

test('writeFloat64: always cb, even for integral values; keeps -0.0, NaN and ±Infinity', () => {
  assert.equal(
    hex((w) => w.writeFloat64(1, 'x')),
    'cb3ff0000000000000',
  );
  assert.equal(
    hex((w) => w.writeFloat64(0, 'x')),
    'cb0000000000000000',
  );
  assert.equal(
    hex((w) => w.writeFloat64(-0, 'x')),
    'cb8000000000000000',
  );
  assert.equal(
    hex((w) => w.writeFloat64(0.9, 'x')),
    'cb3feccccccccccccd',
  );
  assert.equal(
    hex((w) => w.writeFloat64(NaN, 'x')),
    'cb7ff8000000000000',
  );
  assert.equal(
    hex((w) => w.writeFloat64(Infinity, 'x')),
    'cb7ff0000000000000',
  );
  assert.equal(
    hex((w) => w.writeFloat64(-Infinity, 'x')),
    'cbfff0000000000000',
  );
  rejects(
    () => hex((w) => w.writeFloat64(null as unknown as number, 'S.temperature')),
    /^S\.temperature: expected a number/,
  );
});

test('writeStr: the smallest header at each boundary; UTF-8 byte length counts; lone surrogates refused', () => {
  const header = (n: number) => hex((w) => w.writeStr('a'.repeat(n), 'x')).slice(0, 10);
  assert.equal(header(0), 'a0');
  assert.equal(header(31).slice(0, 2), 'bf');
  assert.equal(header(32).slice(0, 4), 'd920');
  assert.equal(header(255).slice(0, 4), 'd9ff');
  assert.equal(header(256).slice(0, 6), 'da0100');
  assert.equal(header(1024).slice(0, 6), 'da0400'); // the longest string tried as ASCII first
  assert.equal(header(1025).slice(0, 6), 'da0401');
  assert.equal(header(65535).slice(0, 6), 'daffff');
  assert.equal(header(65536), 'db00010000');
  assert.equal(
    hex((w) => w.writeStr('請求', 'x')),
    'a6e8ab8be6b182',
  );
  assert.equal(
    hex((w) => w.writeStr('𝔘', 'x')),
    'a4f09d9498',
  );
  rejects(() => hex((w) => w.writeStr('a\ud800b', 'R.rid')), /^R\.rid: string contains a lone surrogate/);
  rejects(() => hex((w) => w.writeStr(5 as unknown as string, 'x')), /expected a string, got number 5/);
});

test('writeStr: short ASCII strings (written without TextEncoder) and strings that turn non-ASCII late give the UTF-8 bytes', () => {
  const expected = (s: string): string => {
    const bytes = Buffer.from(s, 'utf8');
    const n = bytes.length;
    const head =
      n <= 31
        ? (0xa0 | n).toString(16)
        : n <= 0xff
          ? `d9${n.toString(16).padStart(2, '0')}`
          : `da${n.toString(16).padStart(4, '0')}`;
    return head + bytes.toString('hex');
  };
  for (const length of [0, 1, 30, 31, 32, 100, 254, 255, 256]) {
    const ascii = 'x'.repeat(length);
    assert.equal(
      hex((w) => w.writeStr(ascii, 'x')),
      expected(ascii),
      `ascii ${length}`,
    );
    for (const at of [0, Math.floor(length / 2), Math.max(0, length - 1)]) {
      // A non-ASCII character after `at` ASCII ones: the fast path gives up, the bytes written so far are dropped.
      const mixed = `${'y'.repeat(at)}é${'z'.repeat(Math.max(0, length - at - 1))}`;
      assert.equal(
        hex((w) => {
          w.writeStr(mixed, 'x');
          w.writeStr('ok', 'x');
        }),
        expected(mixed) + expected('ok'),
        `mixed ${length}/${at}`,
      );
    }
  }
  assert.equal(
    hex((w) => {
      w.writeStr('\u007f\u0000', 'x');
    }),
    'a27f00',
  );
});

test('array, map and bin headers: the smallest form at each boundary', () => {
  assert.equal(
    hex((w) => w.writeArrayHeader(0)),
    '90',
  );
  assert.equal(
    hex((w) => w.writeArrayHeader(15)),
    '9f',
  );
  assert.equal(
    hex((w) => w.writeArrayHeader(16)),
    'dc0010',
  );
  assert.equal(
    hex((w) => w.writeArrayHeader(17)),
    'dc0011',
  );
  assert.equal(
    hex((w) => w.writeArrayHeader(29)),
    'dc001d',
  );
  assert.equal(
    hex((w) => w.writeArrayHeader(65536)),
    'dd00010000',
  );
  assert.equal(
    hex((w) => w.writeMapHeader(15)),
    '8f',
  );
  assert.equal(
    hex((w) => w.writeMapHeader(19)),
    'de0013',
  );
  assert.equal(
    hex((w) => w.writeMapHeader(65536)),
    'df00010000',
  );
  assert.equal(
    hex((w) => w.writeBin(Uint8Array.of(1, 2))),
    'c4020102',
  );
  assert.equal(hex((w) => w.writeBin(new Uint8Array(256))).slice(0, 6), 'c50100');
  assert.equal(hex((w) => w.writeBin(new Uint8Array(65536))).slice(0, 10), 'c600010000');
});

test('writeAny: integers stay integers at every size, non-integers are float64, bigints are ints', () => {
  assert.equal(
    hex((w) => w.writeAny({ a: [1, 2 ** 32, 1.5, null, true, 'x'], b: 2n ** 63n }, 'x')),
    '82a16196' +
      '01' +
      'cf0000000100000000' +
      'cb3ff8000000000000' +
      'c0' +
      'c3' +
      'a178' +
      'a162' +
      'cf8000000000000000',
  );
  assert.equal(
    hex((w) => w.writeAny(new Map([[1, 'a']]), 'x')),
    '8101a161',
  );
  assert.equal(
    hex((w) => w.writeAny(undefined, 'x')),
    'c0',
  );
  assert.equal(
    hex((w) => w.writeAny(NaN, 'x')),
    'cb7ff8000000000000',
  );
  rejects(() => hex((w) => w.writeAny({ f: () => 1 }, 'C')), /^C\["f"\]: cannot encode function as msgpack$/);
  rejects(() => hex((w) => w.writeAny(new Date(0), 'C')), /^C: cannot encode Date/);
  const cyclic: unknown[] = [];
  cyclic.push(cyclic);
  rejects(() => hex((w) => w.writeAny(cyclic, 'C')), /deeper than 512 levels/);
});

test('property: writeAny output decodes with @msgpack/msgpack to the same value, and skip consumes it exactly', () => {
  const rand = prng(1234);
  const pick = <T>(xs: T[]) => xs[Math.floor(rand() * xs.length)];
  const gen = (depth: number): unknown => {
    const kind =
      depth > 3
        ? pick(['int', 'float', 'str', 'bool', 'nil'])
        : pick(['int', 'float', 'str', 'bool', 'nil', 'arr', 'map']);
    switch (kind) {
      case 'int': {
        const mag = pick([0x7f, 0xff, 0xffff, 0xffffffff, Number.MAX_SAFE_INTEGER]);
        const v = Math.floor(rand() * mag);
        return rand() < 0.3 ? -v : v;
      }
      case 'float':
        return (rand() - 0.5) * 10 ** Math.floor(rand() * 20) + 0.5;
      case 'str':
        return 'é'.repeat(Math.floor(rand() * 5)) + 'x'.repeat(pick([0, 5, 40, 300]));
      case 'bool':
        return rand() < 0.5;
      case 'nil':
        return null;
      case 'arr':
        return Array.from({ length: pick([0, 3, 15, 16, 20]) }, () => gen(depth + 1));
      default:
        return Object.fromEntries(Array.from({ length: pick([0, 2, 16]) }, (_, i) => [`k${i}`, gen(depth + 1)]));
    }
  };
  for (let i = 0; i < 300; i++) {
    const value = gen(0);
    const w = new MsgpackWriter();
    w.writeAny(value, 'v');
    const bytes = w.finish();
    assert.deepStrictEqual(mpDecode(bytes), value);
    const reader = new MsgpackReader(bytes);
    reader.skip('v');
    reader.expectEnd('v');
    assert.deepStrictEqual(new MsgpackReader(bytes).readAny('v'), value);
  }
});

test('ext values: smallest header per size, signed type code, and the reader returns type and payload', () => {
  const cases: Array<[number, string]> = [
    [1, 'd4'],
    [2, 'd5'],
    [4, 'd6'],
    [8, 'd7'],
    [16, 'd8'],
    [3, 'c703'],
    [300, 'c8012c'],
    [70_000, 'c900011170'],
  ];
  for (const [n, header] of cases) {
    const data = Uint8Array.from({ length: n }, (_, i) => i & 0xff);
    for (const type of [3, -1]) {
      const w = new MsgpackWriter();
      w.writeExt(type, data);
      const bytes = w.finish();
      const typeHex = (type & 0xff).toString(16).padStart(2, '0');
      assert.equal(
        Buffer.from(bytes.subarray(0, header.length / 2 + 1)).toString('hex'),
        header + typeHex,
        `size ${n}`,
      );
      const r = new MsgpackReader(bytes);
      const ext = r.readExt('$');
      assert.equal(ext.type, type);
      assert.deepEqual([...ext.data], [...data]);
      r.expectEnd('$');
    }
  }
  assert.throws(
    () => new MsgpackReader(Uint8Array.from([0xc7, 0x05, 0x03, 0x01])).readExt('$.data'),
    /\$\.data: input data was truncated/,
  );
  assert.throws(() => new MsgpackReader(Uint8Array.from([0x01])).readExt('$.data'), /\$\.data: expected ext, got int/);
});

test('writeStr: ASCII (every char below 0x80, controls and DEL included) and mixed strings give their UTF-8 bytes', () => {
  const all = Array.from({ length: 128 }, (_, i) => String.fromCharCode(i)).join('');
  for (const text of [all, `${all}é`, `é${all}`, 'x'.repeat(1023) + '請', '\u007f\u0080']) {
    const bytes = Buffer.from(text, 'utf8');
    assert.deepEqual(
      mpDecode(
        Buffer.from(
          hex((w) => w.writeStr(text, 'x')),
          'hex',
        ),
      ),
      text,
    );
    assert.ok(hex((w) => w.writeStr(text, 'x')).endsWith(bytes.toString('hex')));
  }
});

test('take: a copy of the message, the writer emptied for the next one; reset empties it', () => {
  const w = new MsgpackWriter(4);
  w.writeStr('first', 'x');
  const first = w.take();
  w.writeStr('second message', 'x');
  assert.equal(Buffer.from(first).toString('hex'), 'a56669727374');
  w.reset();
  w.writeNil();
  assert.equal(Buffer.from(w.take()).toString('hex'), 'c0');
  assert.equal(Buffer.from(first).toString('hex'), 'a56669727374');
});
