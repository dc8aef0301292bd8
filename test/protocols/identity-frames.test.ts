/** Engine identity (engine-wire.md 1.5), request frames (1.6) and ENGINE_CORE_DEAD (1.7). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { compareIdentities, decodeEngineIdentity, encodeEngineIdentity } from '../../src/protocols/identity.js';
import { ENGINE_CORE_DEAD, isEngineCoreDead, parseRequestFrames } from '../../src/protocols/frames.js';
import { RequestType } from '../../src/protocols/types.js';
import { WireDecodeError } from '../../src/wire/errors.js';

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

test('encodeEngineIdentity: 2 bytes little-endian; RangeError outside 0..65535', () => {
  assert.equal(hex(encodeEngineIdentity(0)), '0000');
  assert.equal(hex(encodeEngineIdentity(1)), '0100');
  assert.equal(hex(encodeEngineIdentity(258)), '0201');
  assert.equal(hex(encodeEngineIdentity(65535)), 'ffff');
  for (const bad of [65536, -1, 1.5, NaN]) assert.throws(() => encodeEngineIdentity(bad), RangeError);
});

test('decodeEngineIdentity: the index for exactly 2 bytes, null for any other length', () => {
  for (const i of [0, 1, 255, 256, 258, 4660, 65535]) assert.equal(decodeEngineIdentity(encodeEngineIdentity(i)), i);
  assert.equal(decodeEngineIdentity(new Uint8Array(0)), null);
  assert.equal(decodeEngineIdentity(Uint8Array.of(1)), null);
  assert.equal(decodeEngineIdentity(Uint8Array.of(1, 0, 0)), null);
});

test('compareIdentities: lexicographic bytes, so 257 (01 01) sorts before 2 (02 00)', () => {
  const ids = [2, 257, 0, 1, 256].map(encodeEngineIdentity).sort(compareIdentities).map(decodeEngineIdentity);
  assert.deepEqual(ids, [0, 256, 1, 257, 2]);
  assert.equal(compareIdentities(Uint8Array.of(1), Uint8Array.of(1, 0)) < 0, true, 'a proper prefix sorts first');
  assert.equal(compareIdentities(Uint8Array.of(3, 4), Uint8Array.of(3, 4)), 0);
});

test('ENGINE_CORE_DEAD is the 16 ASCII bytes and isEngineCoreDead matches it exactly', () => {
  assert.equal(Buffer.from(ENGINE_CORE_DEAD).toString('ascii'), 'ENGINE_CORE_DEAD');
  assert.equal(isEngineCoreDead(Uint8Array.from(Buffer.from('ENGINE_CORE_DEAD'))), true);
  assert.equal(isEngineCoreDead(Uint8Array.from(Buffer.from('ENGINE_CORE_DEAF'))), false);
  assert.equal(isEngineCoreDead(Uint8Array.from(Buffer.from('ENGINE_CORE_DEAD!'))), false);
  assert.equal(isEngineCoreDead(new Uint8Array(0)), false);
});

test('parseRequestFrames: splits [type, payload, ...aux]', () => {
  const p = parseRequestFrames([Uint8Array.of(1), Uint8Array.of(0x90), Uint8Array.of(7)]);
  assert.equal(p.type, RequestType.ABORT);
  assert.deepEqual(p.payload, Uint8Array.of(0x90));
  assert.deepEqual(p.aux, [Uint8Array.of(7)]);
  assert.equal(parseRequestFrames([Uint8Array.of(2), Uint8Array.of(0x90)]).type, RequestType.START_DP_WAVE);
});

test('parseRequestFrames: frame errors, and a TokenSpeed engine that knows only ADD and ABORT', () => {
  const rejects = (frames: Uint8Array[], re: RegExp, allowed?: Parameters<typeof parseRequestFrames>[1]) =>
    assert.throws(
      () => parseRequestFrames(frames, allowed),
      (e: unknown) => e instanceof WireDecodeError && re.test(e.message),
    );
  rejects([], /got 0$/);
  rejects([Uint8Array.of(0)], /need at least 2 frames \(type, payload\), got 1$/);
  rejects([new Uint8Array(0), Uint8Array.of(0x90)], /type frame must be exactly 1 byte, got 0 bytes/);
  rejects([Uint8Array.of(0, 0), Uint8Array.of(0x90)], /type frame must be exactly 1 byte, got 2 bytes \(0000\)/);
  rejects([Uint8Array.of(0xff), Uint8Array.of(0x90)], /unknown request type byte 0xff/);
  rejects([Uint8Array.of(2), Uint8Array.of(0x90)], /unknown request type byte 0x02/, [
    RequestType.ADD,
    RequestType.ABORT,
  ]);
});
