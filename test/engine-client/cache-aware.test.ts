/**
 * The `cache_aware` DP policy and its per-rank block-hash index (issue 12 part 2; dp-routing.md 14.11): the index's
 * LRU bound and rank death/rejoin, affinity, the balance bound, and "no shared prefix → exactly `load`".
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  DEFAULT_BALANCE_ABS_THRESHOLD, DEFAULT_BALANCE_REL_THRESHOLD, affinityScore, createCacheAwarePolicy, indexShapeFor,
  withinBalanceBound,
} from '../../src/engine-client/cache-aware.js';
import { PROBE_SCHEDULE_MS } from '../../src/engine-client/client.js';
import { createDpPolicy } from '../../src/engine-client/policies.js';
import { createLoadPolicy, type RankView } from '../../src/engine-client/policy.js';
import { DEFAULT_INDEX_CAPACITY_BLOCKS, PrefixIndex } from '../../src/engine-client/prefix-index.js';
import { DEFAULT_SAMPLING, type GenerateRequest } from '../../src/protocols/types.js';
import { prng } from '../helpers/prng.js';
import { batch, inFlight, load, row, setup, states, tick } from './fakes.js';

const seq = (n: number, from: number): number[] => Array.from({ length: n }, (_, i) => from + i);

function prompt(requestId: string, promptTokenIds: number[]): GenerateRequest {
  return { requestId, promptTokenIds, sampling: { ...DEFAULT_SAMPLING }, stream: true, returnLogprob: false };
}

const idle = (n: number): RankView[] => Array.from({ length: n }, (_, i) => ({ engineIndex: i, inFlight: 0, load: null }));

test('index: leading-block match per rank; LRU bound evicts the least recently sent prompt, tail first; forget drops a rank', () => {
  const index = new PrefixIndex({ capacityBlocks: 6 });
  const a = index.hashes(seq(64, 1)); // 4 blocks
  const b = index.hashes(seq(64, 1000));
  assert.equal(a.length, 4);
  index.record(0, a);
  assert.equal(index.match(0, a), 4);
  assert.equal(index.match(1, a), 0, 'another rank knows nothing');
  assert.equal(index.match(0, index.hashes([...seq(40, 1), 5, 5, 5, 5, 5, 5, 5, 5])), 2, 'a shared 32-token head');
  index.record(0, b); // 8 blocks > 6: a's two oldest entries (its tail) go
  assert.equal(index.size(0), 6);
  assert.equal(index.match(0, b), 4);
  assert.equal(index.match(0, a), 2, 'a keeps its head: its tail was recorded first, so it was older');
  index.record(0, a.slice(0, 2)); // a's head is used again: now b's tail is the oldest
  index.record(0, index.hashes(seq(32, 5000)));
  assert.equal(index.match(0, a), 2);
  assert.equal(index.match(0, b), 2);
  index.forget(0);
  assert.equal(index.size(0), 0);
  assert.equal(index.match(0, a), 0);
  assert.throws(() => new PrefixIndex({ capacityBlocks: 0 }), RangeError);
});

test('index shape from the ready response: the engine granularity (at least 16) and its KV size, capped', () => {
  assert.deepEqual(indexShapeFor({ prefixGranularity: 16, numGpuBlocks: 2048 }), { blockTokens: 16, capacityBlocks: 2048 });
  assert.deepEqual(indexShapeFor({ prefixGranularity: 1, numGpuBlocks: 160_000 }), { blockTokens: 16, capacityBlocks: 10_000 });
  assert.deepEqual(indexShapeFor({ prefixGranularity: 64, numGpuBlocks: 10 ** 7 }), { blockTokens: 64, capacityBlocks: DEFAULT_INDEX_CAPACITY_BLOCKS });
  assert.deepEqual(indexShapeFor({ prefixGranularity: 0, numGpuBlocks: 0 }), { blockTokens: 16, capacityBlocks: 1 });
  assert.deepEqual(indexShapeFor({ prefixGranularity: null, numGpuBlocks: null }), { blockTokens: 16, capacityBlocks: DEFAULT_INDEX_CAPACITY_BLOCKS }, 'a short ready response');
});

test('balance bound: affinity counts only while a rank is not past both the absolute and the relative bound', () => {
  const abs = DEFAULT_BALANCE_ABS_THRESHOLD;
  const rel = DEFAULT_BALANCE_REL_THRESHOLD;
  assert.equal(withinBalanceBound(abs, 0, abs, rel), true, 'exactly abs above an idle rank is still within');
  assert.equal(withinBalanceBound(abs + 1, 0, abs, rel), false);
  assert.equal(withinBalanceBound(30, 20, abs, rel), true, '10 more, but only 1.5×: within');
  assert.equal(withinBalanceBound(31, 20, abs, rel), false, 'past both');
  assert.equal(affinityScore(5, 1024, true, 256), 1);
  assert.equal(affinityScore(5, 1024, false, 256), 5);
});

test('affinity: a prompt sharing a cached prefix goes back to the rank that has it; a fresh one goes by load', () => {
  const policy = createCacheAwarePolicy();
  const ranks = idle(4);
  const system = seq(512, 1);
  const first = prompt('a', [...system, ...seq(40, 9000)]);
  const r1 = policy.select(ranks, first);
  policy.onDispatch?.(r1, first);
  // Rank r1 is now busier (in flight) than the others, but holds 512 matching tokens: 2 load units of credit.
  const busier = ranks.map((v) => (v.engineIndex === r1 ? { ...v, inFlight: 1 } : v));
  for (let i = 0; i < 4; i++) {
    assert.equal(policy.select(busier, prompt(`b${i}`, [...system, ...seq(30, 7000 + 100 * i)])), r1, 'the shared system prompt wins');
  }
  assert.notEqual(policy.select(busier, prompt('c', seq(600, 50_000))), r1, 'no shared prefix: the least loaded rank');
});

test('the balance bound in action: affinity yields to load once the holder is too far ahead, so no hotspot forms', () => {
  const policy = createCacheAwarePolicy({ balanceAbsThreshold: 4, balanceRelThreshold: 1.5 });
  const doc = seq(4096, 1); // 4096 matching tokens: 16 load units, more than any load difference here
  const warm = prompt('warm', doc);
  policy.onDispatch?.(0, warm);
  const at = (held: number): RankView[] => [
    { engineIndex: 0, inFlight: held, load: null },
    { engineIndex: 1, inFlight: 2, load: null },
  ];
  assert.equal(policy.select(at(6), prompt('q1', [...doc, 1])), 0, '6 vs 2: 4 more, within the absolute bound');
  assert.equal(policy.select(at(7), prompt('q2', [...doc, 2])), 1, '7 vs 2: past both bounds, load wins');
  assert.equal(policy.select(at(3), prompt('q3', [...doc, 3])), 0);
});

test('without any shared prefix cache_aware chooses exactly what load chooses (same score, same rotation)', () => {
  const rand = prng(12);
  const aware = createCacheAwarePolicy();
  const plain = createLoadPolicy();
  for (let i = 0; i < 300; i++) {
    const ranks: RankView[] = Array.from({ length: 4 }, (_, r) => ({
      engineIndex: r,
      inFlight: Math.floor(rand() * 6),
      load: rand() < 0.7 ? load(Math.floor(rand() * 8), Math.floor(rand() * 4), rand()) : null,
      loadAgeMs: rand() < 0.2 ? 6000 : 10,
    }));
    const request = prompt(`r${i}`, seq(20 + Math.floor(rand() * 200), 100_000 * (i + 1)));
    const a = aware.select(ranks, request);
    aware.onDispatch?.(a, request);
    assert.equal(a, plain.select(ranks, request), `selection ${i}`);
  }
});

test('through the client: pinned and unpinned dispatches feed the index; a dead group forgets every rank', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const policy = createCacheAwarePolicy();
  const { client, link } = setup(3, { policy });
  const doc = seq(2048, 1);
  await client.submit(prompt('pinned', [...doc, 1]), { dpRank: 2 });
  assert.equal(policy.index.size(2), 128, 'a pinned request warms its rank');
  const next = await client.submit(prompt('q', [...doc, 2]));
  assert.equal(next.engineIndex, 2, 'in flight 1 there, but 2048 cached tokens');
  assert.deepEqual(inFlight(client), [0, 0, 2]);
  await link.deliverBatch(batch(2, [row('pinned', 'stop'), row('q', 'stop')], load(2, 0, 0.5)));
  // ENGINE_CORE_DEAD that no rank can be tied to by the last probe round (issue #8): group scope, every rank dead.
  await link.deliver({ kind: 'dead' });
  t.mock.timers.tick(PROBE_SCHEDULE_MS[PROBE_SCHEDULE_MS.length - 1]!);
  await tick();
  await tick();
  assert.deepEqual(states(client), ['dead', 'dead', 'dead']);
  assert.equal(policy.index.size(2), 0, 'the group died: its caches are gone');
  await client.close();
});

test('forgetRank (a rank that died or rejoined): its affinity is gone, the other ranks keep theirs', () => {
  const policy = createDpPolicy('cache_aware');
  const a = prompt('a', seq(1024, 1));
  const b = prompt('b', seq(1024, 5000));
  policy.onDispatch?.(0, a);
  policy.onDispatch?.(1, b);
  const ranks = idle(3).map((v) => ({ ...v, inFlight: 1 }));
  assert.equal(policy.select(ranks, prompt('a2', [...a.promptTokenIds, 9])), 0);
  policy.forgetRank?.(0);
  assert.equal(policy.select(ranks, prompt('b2', [...b.promptTokenIds, 9])), 1);
  const after = policy.select(ranks, prompt('a3', [...a.promptTokenIds, 9]));
  assert.equal(after, 2, 'no affinity left for a: all tie at 1, the rotating scan starts at 2');
});
