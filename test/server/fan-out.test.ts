/** fan-out.ts: sub-request ids and seeds s + i with wrap-around (gateway.md 10). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { subRequestIds, subRequestSeed } from '../../src/server/fan-out.js';

test('sub-request ids and seeds', () => {
  assert.deepEqual(subRequestIds('r1', 1), ['r1']);
  assert.deepEqual(subRequestIds('r1', 3), ['r1-0', 'r1-1', 'r1-2']);
  assert.equal(subRequestSeed(null, 3), null);
  assert.deepEqual(
    [0, 1, 2].map((i) => subRequestSeed(41, i)),
    [41, 42, 43],
  );
  const max = Number.MAX_SAFE_INTEGER;
  assert.deepEqual(
    [0, 1, 2].map((i) => subRequestSeed(max - 1, i)),
    [max - 1, max, 0],
  );
});
