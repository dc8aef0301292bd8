/**
 * `RecentIds` (src/collections/recent-ids.ts): the last `perGeneration` ids added are always remembered, at most
 * `2 × perGeneration` are, ids never added are not (bar a 32-bit fingerprint collision), memory never grows.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RecentIds, fingerprint } from '../../src/collections/recent-ids.js';

test('remembers the last perGeneration ids, forgets what is two generations old', () => {
  const ids = new RecentIds(1000);
  for (let i = 0; i < 1000; i++) ids.add(`chatcmpl-${i}`);
  for (let i = 0; i < 1000; i++) assert.ok(ids.has(`chatcmpl-${i}`), `id ${i}`);
  for (let i = 1000; i < 2500; i++) ids.add(`chatcmpl-${i}`);
  // 2500 added with 1000 per generation: 0..1999 rolled over twice; 2000..2499 current, 1000..1999 previous.
  for (let i = 1500; i < 2500; i++) assert.ok(ids.has(`chatcmpl-${i}`), `the last 1000 (id ${i})`);
  let forgotten = 0;
  for (let i = 0; i < 1000; i++) if (!ids.has(`chatcmpl-${i}`)) forgotten++;
  assert.equal(forgotten, 1000, 'ids two generations old are gone');
});

test('ids never added are unknown (no false positive over 100 000 probes against a full window)', () => {
  const ids = new RecentIds(4096);
  for (let i = 0; i < 8191; i++) ids.add(`cmpl-${i}-0`);
  let hits = 0;
  for (let i = 0; i < 100_000; i++) if (ids.has(`rogue-${i}`)) hits++;
  assert.equal(hits, 0);
  assert.ok(!ids.has(''));
});

test('adding an id twice counts once; fingerprints are never 0; bad sizes are refused', () => {
  const ids = new RecentIds(2);
  ids.add('a');
  ids.add('a');
  ids.add('b'); // the generation holds 2: turns over, 'a' and 'b' now in the previous one
  ids.add('c');
  assert.ok(ids.has('a') && ids.has('b') && ids.has('c'));
  ids.add('d'); // turns over again: 'a' and 'b' are forgotten
  assert.ok(!ids.has('a') && !ids.has('b') && ids.has('c') && ids.has('d'));
  assert.notEqual(fingerprint(''), 0);
  assert.throws(() => new RecentIds(0), RangeError);
  assert.throws(() => new RecentIds(1.5), RangeError);
});
