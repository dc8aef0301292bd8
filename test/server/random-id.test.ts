/**
 * Request and response ids (src/server/random-id.ts): 32 lower-case hex digits, 128 random bits, none repeated across
 * the pool's refills.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { randomHexId } from '../../src/server/random-id.js';

test('ids are 32 lower-case hex digits, all different across many refills of the pool', { timeout: 10_000 }, () => {
  const ids = Array.from({ length: 5000 }, () => randomHexId()); // ~20 pools of 256 ids
  for (const id of ids) assert.match(id, /^[0-9a-f]{32}$/);
  assert.equal(new Set(ids).size, ids.length);
});

test('every digit position takes every hex digit (no fixed version or variant digit)', { timeout: 10_000 }, () => {
  const seen = Array.from({ length: 32 }, () => new Set<string>());
  for (let i = 0; i < 2000; i++) {
    const id = randomHexId();
    for (let p = 0; p < 32; p++) seen[p]!.add(id[p]!);
  }
  // 2000 draws of a uniform digit miss one of 16 with probability 16 × (15/16)^2000, about 10^-55.
  for (let p = 0; p < 32; p++) assert.equal(seen[p]!.size, 16, `position ${p}`);
});
