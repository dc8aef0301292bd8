/** Buffers carved for channel messages (src/fronts/channel/message-slab.ts, issue 9). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeDown } from '../../src/fronts/channel/decode.js';
import { DownMessage } from '../../src/fronts/channel/messages.js';
import { Tag } from '../../src/fronts/channel/records.js';
import { MessageSlab } from '../../src/fronts/channel/message-slab.js';

/** Whether two views share any byte of the same ArrayBuffer. */
function overlap(a: Uint8Array, b: Uint8Array): boolean {
  return a.buffer === b.buffer && a.byteOffset < b.byteOffset + b.length && b.byteOffset < a.byteOffset + a.length;
}

test(
  'MessageSlab: buffers taken never share a byte, until the slab runs out and a new one starts',
  { timeout: 5000 },
  () => {
    const slab = new MessageSlab(4096);
    const taken: Buffer[] = [];
    for (let i = 0; i < 40; i++) taken.push(slab.take(100 + i * 7));
    for (let i = 0; i < taken.length; i++) {
      assert.ok(taken[i]!.length >= 100 + i * 7);
      for (let j = 0; j < i; j++) assert.ok(!overlap(taken[i]!, taken[j]!), `take ${i} overlaps take ${j}`);
    }
    assert.ok(new Set(taken.map((b) => b.buffer)).size > 1, 'a full slab is replaced by a new one');
    // Over a quarter of the slab: a buffer of its own.
    const big = slab.take(2000);
    assert.equal(big.byteOffset, 0);
    assert.equal(big.buffer.byteLength, 2000);
  },
);

test(
  'MessageSlab: trim hands back the unused tail of the latest buffer only; kept bytes are never handed out again',
  { timeout: 5000 },
  () => {
    const slab = new MessageSlab(4096);
    const a = slab.take(500);
    a.fill(0xaa, 0, 40);
    slab.trim(a, 40);
    const b = slab.take(500);
    assert.equal(b.byteOffset, a.byteOffset + 40, 'the tail of a is reused');
    b.fill(0xbb);
    assert.ok(
      a.subarray(0, 40).every((x) => x === 0xaa),
      'the kept bytes of a are untouched',
    );
    const c = slab.take(100);
    slab.trim(b, 10); // b is no longer the latest: nothing is handed back
    const d = slab.take(100);
    assert.ok(!overlap(d, b) && !overlap(d, c));
    slab.trim(Buffer.alloc(10), 0); // a buffer of another origin: a no-op
    assert.ok(!overlap(slab.take(100), d));
  },
);

test(
  'DownMessages carved from one slab decode to their own records after later messages are built',
  { timeout: 5000 },
  () => {
    const slab = new MessageSlab(8192);
    const finished: Uint8Array[] = [];
    for (let m = 0; m < 30; m++) {
      const msg = new DownMessage(64, slab); // small on purpose: some grow out of their carve
      for (let r = 0; r < 1 + (m % 7) * 5; r++)
        msg.push({ tag: Tag.SUBMITTED, handle: m * 1000 + r, engineIndex: r % 3, budget: null });
      finished.push(msg.finish());
    }
    for (let m = 0; m < finished.length; m++) {
      const records = decodeDown(finished[m]!);
      assert.equal(records.length, 1 + (m % 7) * 5);
      records.forEach((rec, r) =>
        assert.deepStrictEqual(rec, { tag: Tag.SUBMITTED, handle: m * 1000 + r, engineIndex: r % 3, budget: null }),
      );
    }
  },
);
