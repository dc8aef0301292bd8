/** fan-out.ts: sub-request ids, seeds s + i with wrap-around, and the merge's early-exit cleanup (gateway.md 10). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mergeChoices, subRequestIds, subRequestSeed } from '../../src/server/fan-out.js';
import { makeUsage, type GenerationEvent } from '../../src/server/generation.js';

test('sub-request ids and seeds', () => {
  assert.deepEqual(subRequestIds('r1', 1), ['r1']);
  assert.deepEqual(subRequestIds('r1', 3), ['r1-0', 'r1-1', 'r1-2']);
  assert.equal(subRequestSeed(null, 3), null);
  assert.deepEqual([0, 1, 2].map((i) => subRequestSeed(41, i)), [41, 42, 43]);
  const max = Number.MAX_SAFE_INTEGER;
  assert.deepEqual([0, 1, 2].map((i) => subRequestSeed(max - 1, i)), [max - 1, max, 0]);
});

test('mergeChoices: interleaves with indexes; a consumer that stops early stops and closes every choice', async () => {
  const closed: number[] = [];
  async function* choice(i: number, count: number): AsyncGenerator<GenerationEvent, void, undefined> {
    try {
      for (let k = 0; k < count; k++) yield { type: 'delta', text: `${i}:${k}`, logprobs: [] };
      yield { type: 'finish', text: '', finishReason: 'stop', usage: makeUsage(1, count), logprobs: [], cachedTokens: 0 };
    } finally {
      closed.push(i);
    }
  }
  const all: string[] = [];
  for await (const ev of mergeChoices([choice(0, 2), choice(1, 1)], () => assert.fail('no early stop'))) {
    all.push(`${ev.index}/${ev.type}`);
  }
  assert.deepEqual(all.filter((e) => e.startsWith('0/')), ['0/delta', '0/delta', '0/finish']);
  assert.deepEqual(all.filter((e) => e.startsWith('1/')), ['1/delta', '1/finish']);
  closed.length = 0;
  let stopped = 0;
  for await (const ev of mergeChoices([choice(0, 5), choice(1, 5)], () => stopped++)) {
    assert.equal(ev.type, 'delta');
    break;
  }
  await new Promise((r) => setImmediate(r));
  assert.equal(stopped, 1);
  assert.deepEqual(closed.sort(), [0, 1], 'every unfinished choice ran its finally (its stream is cancelled)');
});
