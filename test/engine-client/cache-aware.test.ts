/**
 * The `cache_aware` DP policy and its per-rank block-hash index (issue 12 part 2; dp-routing.md 14.11): the index's
 * LRU bound and rank death/rejoin, SGLang's balance rule, the expected-cost comparison (affinity, moving off a slow
 * or busy rank, queueing past the batch), the estimates it falls back to, and "no shared prefix → exactly `load`".
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  DEFAULT_OUTPUT_TOKENS,
  DEFAULT_PREFILL_ITL_PER_TOKEN,
  SGLANG_BALANCE_ABS_THRESHOLD,
  balanceAbsFor,
  cacheAwareChoice,
  createCacheAwarePolicy,
  expectedCostMs,
  expectedOutputTokens,
  hotRanks,
  indexShapeFor,
  isImbalanced,
  kvTokensOf,
  kvWaitMs,
  serviceEstimates,
  type ChoiceInputs,
} from '../../src/engine-client/cache-aware.js';
import type { EngineClient } from '../../src/engine-client/client.js';
import type { EngineClientError } from '../../src/engine-client/errors.js';
import { createDpPolicy } from '../../src/engine-client/policies.js';
import { createLoadPolicy, type RankView } from '../../src/engine-client/policy.js';
import { DEFAULT_INDEX_CAPACITY_BLOCKS, PrefixIndex } from '../../src/engine-client/prefix-index.js';
import type { RankService } from '../../src/engine-client/service-rates.js';
import { DEFAULT_SAMPLING, RequestType, type GenerateRequest } from '../../src/protocols/types.js';
import { prng } from '../helpers/prng.js';
import { batch, drain, inFlight, load, row, setup, states, tick, unreachable } from './fakes.js';

/** The client's service-rate tracker (private state of the group: its routing state's `rates`). */
function serviceRates(client: EngineClient): { view(r: number): RankService; trackedRequests: number } {
  type Inside = { g: { routing: { rates: { view(r: number): RankService; trackedRequests: number } } } };
  return (client as unknown as Inside).g.routing.rates;
}

const seq = (n: number, from: number): number[] => Array.from({ length: n }, (_, i) => from + i);

function prompt(requestId: string, promptTokenIds: number[], maxNewTokens: number | null = null): GenerateRequest {
  return {
    requestId,
    promptTokenIds,
    sampling: { ...DEFAULT_SAMPLING, maxNewTokens },
    stream: true,
    returnLogprob: false,
  };
}

const idle = (n: number): RankView[] =>
  Array.from({ length: n }, (_, i) => ({ engineIndex: i, inFlight: 0, load: null }));
const service = (
  itlMs: number | null,
  prefillMsPerToken: number | null = null,
  outputTokens: number | null = null,
): RankService => ({
  itlMs,
  prefillMsPerToken,
  outputTokens,
});

/** Two ranks, equal unless overridden; 2000-token prompt, rank 1 holds 1800 of it, rank 0 (load's pick) none. */
function choice(over: Partial<ChoiceInputs> = {}): ChoiceInputs {
  return {
    loads: [4, 4],
    matched: [0, 1800],
    promptTokens: 2000,
    outputTokens: 100,
    start: 0,
    estimates: [
      { itlMs: 10, prefillMsPerToken: 0.02 },
      { itlMs: 10, prefillMsPerToken: 0.02 },
    ],
    balanceAbsThreshold: 8,
    balanceRelThreshold: 1.5,
    maxNumSeqs: 32,
    ...over,
  };
}

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

test('index shape from the ready response: the engine granularity (at least 16), its KV size, capped, and its batch size', () => {
  assert.deepEqual(indexShapeFor({ prefixGranularity: 16, numGpuBlocks: 2048, maxNumSeqs: 32 }), {
    blockTokens: 16,
    capacityBlocks: 2048,
    maxNumSeqs: 32,
    kvTotalTokens: 32_768,
  });
  assert.deepEqual(indexShapeFor({ prefixGranularity: 1, numGpuBlocks: 160_000 }), {
    blockTokens: 16,
    capacityBlocks: 10_000,
    maxNumSeqs: null,
    kvTotalTokens: 160_000,
  });
  assert.deepEqual(indexShapeFor({ prefixGranularity: 64, numGpuBlocks: 10 ** 7, maxNumSeqs: 0 }), {
    blockTokens: 64,
    capacityBlocks: DEFAULT_INDEX_CAPACITY_BLOCKS,
    maxNumSeqs: null,
    kvTotalTokens: 64 * 10 ** 7,
  });
  assert.deepEqual(indexShapeFor({ prefixGranularity: 0, numGpuBlocks: 0 }), {
    blockTokens: 16,
    capacityBlocks: 1,
    maxNumSeqs: null,
    kvTotalTokens: null,
  });
  assert.deepEqual(
    indexShapeFor({ prefixGranularity: null, numGpuBlocks: null, maxNumSeqs: null }),
    { blockTokens: 16, capacityBlocks: DEFAULT_INDEX_CAPACITY_BLOCKS, maxNumSeqs: null, kvTotalTokens: null },
    'a short ready response',
  );
});

test("SGLang's balance rule: imbalanced only past both the absolute and the relative threshold, over all ranks", () => {
  assert.equal(isImbalanced([8, 0], 8, 1.5), false, 'exactly abs above an idle rank: balanced');
  assert.equal(isImbalanced([9, 0, 3], 8, 1.5), true, 'an idle rank makes any excess relative');
  assert.equal(isImbalanced([30, 20], 8, 1.5), false, '10 more, but only 1.5×');
  assert.equal(isImbalanced([31, 20, 25], 8, 1.5), true);
  assert.equal(isImbalanced([100], 8, 1.5), false, 'one rank is never imbalanced');
  assert.equal(balanceAbsFor(256), SGLANG_BALANCE_ABS_THRESHOLD, "SGLang's 64 at vLLM's default batch of 256");
  assert.equal(balanceAbsFor(32), 8, 'a quarter of the batch');
  assert.equal(balanceAbsFor(2), 1, 'at least one request');
  assert.equal(balanceAbsFor(null), SGLANG_BALANCE_ABS_THRESHOLD, "unknown batch: SGLang's default");
  assert.equal(balanceAbsFor(0), SGLANG_BALANCE_ABS_THRESHOLD);
});

test("expected cost: the prefill stalls the whole batch, the decode runs at the rank's ITL, past the batch it queues", () => {
  const base = { uncachedTokens: 1000, prefillMsPerToken: 0.02, load: 4, outputTokens: 100, itlMs: 10, maxNumSeqs: 32 };
  assert.equal(
    expectedCostMs(base),
    1000 * 0.02 * 5 + 100 * 10,
    '20 ms prefill × (4 others + itself) + 1000 ms of decode',
  );
  assert.equal(expectedCostMs({ ...base, uncachedTokens: 0 }), 1000);
  assert.equal(
    expectedCostMs({ ...base, load: 40 }),
    20 * 33 + 1000 * (1 + 9 / 32),
    'the stall counts the batch only; 9 requests queue ahead',
  );
  assert.equal(
    expectedCostMs({ ...base, load: 40, maxNumSeqs: Number.POSITIVE_INFINITY }),
    20 * 41 + 1000,
    'unknown batch size: no queue',
  );
  assert.equal(
    expectedCostMs({ ...base, itlMs: Number.NaN, uncachedTokens: -5 }),
    0,
    'non-finite or negative inputs count as 0',
  );
});

test('balance bound per rank: hot = past both thresholds against the idlest; imbalanced exactly when one is hot', () => {
  assert.deepEqual(hotRanks([9, 0, 3], 8, 1.5), [true, false, false]);
  assert.deepEqual(hotRanks([31, 20, 25, 29], 8, 1.5), [true, false, false, false], '29 is 9 more but only 1.45×');
  assert.deepEqual(hotRanks([5, 5], 0, 1), [false, false], 'equal loads are never hot');
  assert.deepEqual(hotRanks([7], 0, 1), [false]);
  const rand = prng(7);
  for (let i = 0; i < 200; i++) {
    const loads = Array.from({ length: 1 + Math.floor(rand() * 5) }, () => Math.floor(rand() * 40));
    const abs = Math.floor(rand() * 10);
    const rel = 1 + rand();
    const max = Math.max(...loads);
    const min = Math.min(...loads);
    const sglang = loads.length > 1 && max - min > abs && max > rel * min;
    assert.equal(isImbalanced(loads, abs, rel), sglang, `SGLang's max/min rule, case ${i}`);
    assert.equal(hotRanks(loads, abs, rel)[loads.indexOf(min)], false, 'the idlest rank is never hot');
  }
});

test('KV pressure: no wait while the request and the batch growth fit; past the free space, the time to free the shortage', () => {
  const c = { uncachedTokens: 1000, prefillMsPerToken: 0.02, load: 10, outputTokens: 100, itlMs: 10, maxNumSeqs: 32 };
  assert.equal(kvWaitMs(c), 0, 'unknown KV space');
  // need 1000 + 100, reserve 10 × 100 / 2 = 500: 1600 tokens.
  assert.equal(kvWaitMs({ ...c, kvFreeTokens: 1600, kvUsedTokens: 30_000 }), 0, 'exactly fits');
  assert.equal(
    kvWaitMs({ ...c, kvFreeTokens: 600, kvUsedTokens: 20_000 }),
    (1000 / 20_000) * 100 * 10,
    'shortage 1000 of 20 000 in use',
  );
  assert.equal(
    kvWaitMs({ ...c, load: 100, kvFreeTokens: 0, kvUsedTokens: 32_000 }),
    ((1100 + 1600) / 32_000) * 1000,
    'the reserve counts the batch only (32)',
  );
  assert.equal(
    kvWaitMs({ ...c, kvFreeTokens: -5, kvUsedTokens: 0 }),
    ((1600 + 0) / 16) * 1000,
    'nothing in use yet: one block at least',
  );
  assert.equal(
    expectedCostMs({ ...c, kvFreeTokens: 600, kvUsedTokens: 20_000 }),
    expectedCostMs(c) + 50,
    'the cost adds the wait',
  );
  assert.deepEqual(kvTokensOf(null, 32_768), { kvFreeTokens: Number.POSITIVE_INFINITY, kvUsedTokens: 0 }, 'no report');
  assert.deepEqual(
    kvTokensOf(load(4, 2, 0.75), null),
    { kvFreeTokens: Number.POSITIVE_INFINITY, kvUsedTokens: 0 },
    'unknown size',
  );
  assert.deepEqual(kvTokensOf(load(4, 2, 0.75), 32_768), { kvFreeTokens: 8192, kvUsedTokens: 24_576 });
  assert.deepEqual(
    kvTokensOf(load(4, 2, 0.75), 32_768, 0.5),
    { kvFreeTokens: 20_480, kvUsedTokens: 12_288 },
    'an ageing report counts less',
  );
  assert.deepEqual(
    kvTokensOf(load(4, 2, 0.75), 32_768, 0),
    { kvFreeTokens: Number.POSITIVE_INFINITY, kvUsedTokens: 0 },
    'past the horizon',
  );
  assert.deepEqual(
    kvTokensOf(load(0, 0, 0.9), 32_768),
    { kvFreeTokens: 32_768, kvUsedTokens: 0 },
    'a clamped idle rank: nothing in use',
  );
});

test('choice: a holder whose KV cache cannot take the request and its batch growth loses it to one that can', () => {
  // 2000-token prompt, 1900 of it on rank 1 (10 requests); rank 0 (load's pick, 4 requests) holds none; 100 output
  // tokens at 10 ms: 1200 ms on rank 0 (2000 × 0.02 × 5 of prefill stalls), 1022 ms on rank 1 (100 × 0.02 × 11).
  const base = choice({ matched: [0, 1900], loads: [4, 10] });
  assert.equal(cacheAwareChoice(base).position, 1);
  const empty = { kvFreeTokens: 32_768, kvUsedTokens: 0 };
  // Rank 1 needs 100 + 100 + 10 × 50 = 700 tokens. With 200 free of 32 000 in use it waits 500 / 32 000 × 1000 ms.
  assert.deepEqual(cacheAwareChoice({ ...base, kv: [empty, { kvFreeTokens: 200, kvUsedTokens: 32_000 }] }), {
    position: 1,
    reason: 'affinity',
  });
  // Full, with 3000 in use: 700 / 3000 × 1000 = 233 ms more, 1255 ms against 1200.
  assert.deepEqual(cacheAwareChoice({ ...base, kv: [empty, { kvFreeTokens: 0, kvUsedTokens: 3000 }] }), {
    position: 0,
    reason: 'load-cheaper',
  });
  assert.throws(() => cacheAwareChoice({ ...base, kv: [empty] }), RangeError);
});

test("choice: a prompt nobody holds leaves load's pick only when that pick has no KV space for it", () => {
  const equal = { itlMs: 10, prefillMsPerToken: 0.02 };
  const three = (over: Partial<ChoiceInputs>): ChoiceInputs =>
    choice({ loads: [2, 4, 6], matched: [0, 0, 0], estimates: [equal, equal, equal], ...over });
  const room = { kvFreeTokens: 30_000, kvUsedTokens: 2768 };
  const full = { kvFreeTokens: 500, kvUsedTokens: 32_268 };
  assert.deepEqual(cacheAwareChoice(three({ kv: [room, room, room] })), { position: 0, reason: 'no-better-match' });
  // Rank 0 needs 2000 + 100 + 2 × 50 = 2200 tokens and has 500: a 53 ms wait; on rank 1 two more requests stall 80 ms more.
  assert.deepEqual(cacheAwareChoice(three({ kv: [full, room, room] })), { position: 0, reason: 'load-cheaper' });
  // With 2000 in use it frees slower: 1700 / 2000 × 1000 = 850 ms; rank 1 has room: the cheapest that fits.
  assert.deepEqual(cacheAwareChoice(three({ kv: [{ kvFreeTokens: 500, kvUsedTokens: 2000 }, room, room] })), {
    position: 1,
    reason: 'kv-short',
  });
  assert.deepEqual(
    cacheAwareChoice(three({ loads: [2, 11, 4], kv: [{ kvFreeTokens: 500, kvUsedTokens: 2000 }, room, room] })),
    { position: 2, reason: 'kv-short' },
    'a hot rank is still out',
  );
});

test("estimates: unmeasured ranks get the measured ones' mean ITL and the pooled prefill ratio; priors before anything", () => {
  assert.deepEqual(
    serviceEstimates([null, undefined]),
    [
      { itlMs: 1, prefillMsPerToken: DEFAULT_PREFILL_ITL_PER_TOKEN },
      { itlMs: 1, prefillMsPerToken: DEFAULT_PREFILL_ITL_PER_TOKEN },
    ],
    'nothing measured: equal ranks, costs in steps',
  );
  const e = serviceEstimates([service(4, 0.02), service(8), null]);
  assert.deepEqual(e[0], { itlMs: 4, prefillMsPerToken: 0.02 });
  assert.deepEqual(e[1], { itlMs: 8, prefillMsPerToken: 0.04 }, 'a slower rank prefills slower by the same factor');
  assert.deepEqual(e[2], { itlMs: 6, prefillMsPerToken: 0.03 });
  assert.equal(expectedOutputTokens([null], null), DEFAULT_OUTPUT_TOKENS);
  assert.equal(expectedOutputTokens([service(4, null, 50), service(4, null, 150), null], null), 100);
  assert.equal(expectedOutputTokens([service(4, null, 50)], 20), 20, "never more than the request's own limit");
});

test('choice: a prefix holder wins while loads are balanced; the balance rule hands it back to load (no hotspot)', () => {
  assert.deepEqual(cacheAwareChoice(choice()), { position: 1, reason: 'affinity' });
  assert.deepEqual(
    cacheAwareChoice(choice({ loads: [2, 10] })),
    { position: 1, reason: 'affinity' },
    '8 more: within abs',
  );
  assert.deepEqual(
    cacheAwareChoice(choice({ loads: [2, 11] })),
    { position: 0, reason: 'imbalanced' },
    'past both: load wins',
  );
  const three = [...choice().estimates, choice().estimates[0]!];
  assert.deepEqual(
    cacheAwareChoice(choice({ loads: [2, 3, 11], matched: [0, 1800, 0], estimates: three })),
    { position: 1, reason: 'affinity' },
    'the bound is per rank: a third rank past it does not turn affinity off for a holder within it',
  );
  assert.deepEqual(
    cacheAwareChoice(choice({ loads: [2, 11, 4], matched: [0, 1800, 1200], estimates: three })),
    { position: 2, reason: 'imbalanced' },
    'the best holder is hot: the next holder within the bound gets it',
  );
  assert.deepEqual(cacheAwareChoice(choice({ matched: [0, 0] })), { position: 0, reason: 'no-better-match' });
  assert.deepEqual(
    cacheAwareChoice(choice({ matched: [1800, 1800] })),
    { position: 0, reason: 'no-better-match' },
    "load's pick holds it too",
  );
  assert.deepEqual(
    cacheAwareChoice(choice({ matched: [0, 0], start: 1 })),
    { position: 1, reason: 'no-better-match' },
    "load's rotating tie-break",
  );
});

test('choice: a request moves off a clearly slower rank when re-prefilling costs less than its slower decode there', () => {
  const slow = { itlMs: 20, prefillMsPerToken: 0.04 };
  const fast = { itlMs: 10, prefillMsPerToken: 0.02 };
  // 100 output tokens: 1000 ms more decode on the slow rank, against 2000 × 0.02 × 5 = 200 ms of re-prefill stalls.
  assert.deepEqual(cacheAwareChoice(choice({ estimates: [fast, slow] })), { position: 0, reason: 'load-cheaper' });
  // A 6000-token shared prompt and a 20-token answer: the re-prefill (6000 × 0.02 × 5 = 600 ms) costs more than the
  // slower decode (200 ms), so it stays.
  assert.deepEqual(
    cacheAwareChoice(choice({ estimates: [fast, slow], promptTokens: 6000, matched: [0, 5900], outputTokens: 20 })),
    { position: 1, reason: 'affinity' },
  );
  // Busier, same speed: the rank's measured ITL shows it (4 → 12 requests, 10 → 11 ms), still cheaper than 200 ms.
  assert.deepEqual(
    cacheAwareChoice(choice({ loads: [4, 12], estimates: [fast, { itlMs: 11, prefillMsPerToken: 0.022 }] })).position,
    1,
  );
  // Past its batch: 6 requests queue ahead on a rank of 8 slots, ≈ 6/8 of its decode time more; moving is cheaper.
  assert.deepEqual(cacheAwareChoice(choice({ loads: [2, 13], maxNumSeqs: 8, balanceAbsThreshold: 64 })), {
    position: 0,
    reason: 'load-cheaper',
  });
});

test('the policy end to end: measured rates in the views decide; without them a match wins while balanced', () => {
  const policy = createCacheAwarePolicy({ maxNumSeqs: 32 });
  const history = seq(2000, 1);
  policy.onDispatch?.(1, prompt('t0', history));
  const views = (s1: RankService | null): RankView[] => [
    { engineIndex: 0, inFlight: 3, load: null, service: service(10, 0.02, 100) },
    { engineIndex: 1, inFlight: 4, load: null, service: s1 },
  ];
  assert.equal(
    policy.select(views(null), prompt('t1', [...history, 5])),
    1,
    'an unmeasured rank counts as average: affinity',
  );
  assert.equal(policy.select(views(service(10, 0.02, 100)), prompt('t2', [...history, 5])), 1);
  assert.equal(
    policy.select(views(service(20, 0.04, 100)), prompt('t3', [...history, 5])),
    0,
    'a 2× slower holder loses the turn',
  );
  assert.equal(
    policy.select(views(service(20, 0.04, 100)), prompt('t4', [...history, 5], 10)),
    1,
    'unless the answer is short (max 10)',
  );
  assert.deepEqual(policy.stats, {
    'no-better-match': 0,
    imbalanced: 0,
    'load-cheaper': 1,
    affinity: 3,
    'kv-short': 0,
  });
  assert.throws(() => createCacheAwarePolicy({ balanceRelThreshold: 0.5 }), RangeError);
  assert.throws(() => createCacheAwarePolicy({ balanceAbsThreshold: -1 }), RangeError);
});

test('the policy end to end: the KV term reads the stored reports against the KV size from the ready response', () => {
  const history = seq(2000, 1);
  const views: RankView[] = [
    { engineIndex: 0, inFlight: 4, load: load(4, 0, 0), service: service(10, 0.02, 100) },
    { engineIndex: 1, inFlight: 10, load: load(10, 0, 1), service: service(10, 0.02, 100) },
  ];
  const pick = (kvTotalTokens: number | null): number => {
    const policy = createCacheAwarePolicy({ maxNumSeqs: 32, kvTotalTokens });
    policy.onDispatch?.(1, prompt('t0', history));
    return policy.select(views, prompt('t1', [...history, 5]));
  };
  assert.equal(pick(null), 1, 'KV size unknown: the holder (1000 ms against 1200)');
  // Rank 1's cache is full: 601 tokens short of 2500 in use, 240 ms of waiting; rank 0 has room for all 2301.
  assert.equal(pick(2500), 0);
  assert.throws(() => createCacheAwarePolicy({ kvTotalTokens: 0 }), RangeError);
});

test('the balance rule in action through the policy: affinity yields to load once the holder is too far ahead', () => {
  const policy = createCacheAwarePolicy({ balanceAbsThreshold: 4, balanceRelThreshold: 1.5 });
  const doc = seq(4096, 1);
  policy.onDispatch?.(0, prompt('warm', doc));
  const at = (held: number): RankView[] => [
    { engineIndex: 0, inFlight: held, load: null },
    { engineIndex: 1, inFlight: 2, load: null },
  ];
  assert.equal(policy.select(at(6), prompt('q1', [...doc, 1])), 0, '6 vs 2: 4 more, within the absolute bound');
  assert.equal(policy.select(at(7), prompt('q2', [...doc, 2])), 1, '7 vs 2: past both bounds, load wins');
  assert.equal(policy.select(at(3), prompt('q3', [...doc, 3])), 0);
});

test('without any shared prefix cache_aware chooses exactly what load chooses (same score, same rotation), whatever the rates', () => {
  const rand = prng(12);
  const aware = createCacheAwarePolicy({ maxNumSeqs: 8 });
  const plain = createLoadPolicy();
  for (let i = 0; i < 300; i++) {
    const ranks: RankView[] = Array.from({ length: 4 }, (_, r) => ({
      engineIndex: r,
      inFlight: Math.floor(rand() * 12),
      load: rand() < 0.7 ? load(Math.floor(rand() * 8), Math.floor(rand() * 4), rand()) : null,
      loadAgeMs: rand() < 0.2 ? 6000 : 10,
      service:
        rand() < 0.8
          ? service(1 + rand() * 30, rand() < 0.5 ? rand() * 0.1 : null, rand() < 0.5 ? rand() * 300 : null)
          : null,
    }));
    const request = prompt(`r${i}`, seq(20 + Math.floor(rand() * 200), 100_000 * (i + 1)));
    const a = aware.select(ranks, request);
    aware.onDispatch?.(a, request);
    assert.equal(a, plain.select(ranks, request), `selection ${i}`);
  }
});

test('through the client: pinned and unpinned dispatches feed the index; a dead group forgets every rank', async () => {
  const policy = createCacheAwarePolicy();
  const { client, link } = setup(3, { policy });
  const doc = seq(2048, 1);
  await client.submit(prompt('pinned', [...doc, 1]), { dpRank: 2 });
  assert.equal(policy.index.size(2), 128, 'a pinned request warms its rank');
  const next = await client.submit(prompt('q', [...doc, 2]));
  assert.equal(next.engineIndex, 2, 'in flight 1 there, but 2048 cached tokens');
  assert.deepEqual(inFlight(client), [0, 0, 2]);
  await link.deliverBatch(batch(2, [row('pinned', 'stop'), row('q', 'stop')], load(2, 0, 0.5)));
  // The group's output socket fails (issue #8): group scope, every rank dead.
  await link.deliver({ kind: 'closed', error: new Error('output socket failed') });
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

test('through the client: rates measured from the rows move a conversation off the slow rank, not off an equal one', async () => {
  let now = 0;
  const policy = createCacheAwarePolicy({ maxNumSeqs: 32 });
  const { client, link } = setup(2, { policy, now: () => now });
  // Warm both ranks' rates: rank 0 streams a token every 10 ms, rank 1 every 20 ms (2× slower).
  const w0 = await client.submit(prompt('w0', seq(16, 900_000)), { dpRank: 0 });
  const w1 = await client.submit(prompt('w1', seq(16, 800_000)), { dpRank: 1 });
  for (let t = 1; t <= 20; t++) {
    now = t * 10;
    await link.deliverBatch(batch(0, [row('w0', t === 20 ? 'length' : null)]));
    if (t % 2 === 0) await link.deliverBatch(batch(1, [row('w1', t === 20 ? 'length' : null)]));
  }
  await drain(w0);
  await drain(w1);
  const rates = (i: number): RankService => serviceRates(client).view(i);
  assert.ok(Math.abs(rates(0).itlMs! - 10) < 1e-9 && Math.abs(rates(1).itlMs! - 20) < 1e-9, 'ITL from the row gaps');
  // Turn 1 of two conversations, one on each rank (pinned), then their turn 2 unpinned. Requests have produced 20,
  // 10 and 100 tokens so far: about 57 expected from the next one.
  const history = (c: number): number[] => seq(2000, 1 + 10_000 * c);
  for (const [c, r] of [
    [1, 0],
    [2, 1],
  ] as const) {
    const s = await client.submit(prompt(`c${c}-t1`, history(c)), { dpRank: r });
    await link.deliverBatch(
      batch(r, [
        row(
          `c${c}-t1`,
          'length',
          Array.from({ length: 100 }, () => 7),
        ),
      ]),
    ); // a 100-token answer
    await drain(s);
  }
  // Two other requests on the slow rank (its requests last longer), one on the fast one: load's pick is rank 0.
  const others = [
    await client.submit(prompt('o1', seq(16, 700_000)), { dpRank: 1 }),
    await client.submit(prompt('o2', seq(16, 710_000)), { dpRank: 1 }),
  ];
  const t2a = await client.submit(prompt('c1-t2', [...history(1), 7, 7], 100));
  assert.equal(t2a.engineIndex, 0, 'its history is on the fast rank: it stays');
  const t2b = await client.submit(prompt('c2-t2', [...history(2), 7, 7], 100));
  assert.equal(
    t2b.engineIndex,
    0,
    'its history is on the slow rank: 100 tokens at 20 ms cost more than re-prefilling 2000',
  );
  assert.equal(policy.index.match(0, policy.index.hashes(history(2))), 125, 'its history now lives on rank 0 too');
  const c3 = await client.submit(prompt('c3-t1', history(3)), { dpRank: 1 });
  const t2c = await client.submit(prompt('c3-t2', [...history(3), 7, 8], 2));
  assert.equal(t2c.engineIndex, 1, 'a 2-token answer is cheaper where the history is, slow or not');
  for (const s of [...others, t2a, t2b, c3, t2c]) s.cancel();
  await client.close();
});

test("a rank's death and rejoin through the client: its index, sole-client guard, stored load and age, and rates are reset; others keep theirs", async () => {
  let now = 0;
  const policy = createCacheAwarePolicy();
  const { client, link } = setup(2, { policy, now: () => now });
  const doc = seq(1024, 1);
  const keep = await client.submit(prompt('keep', [...doc, 1]), { dpRank: 0 });
  const gone = await client.submit(prompt('gone', [...doc, 2]), { dpRank: 1 });
  now = 10;
  await link.deliverBatch(batch(0, [row('keep')], load(1, 0, 0.1)));
  await link.deliverBatch(batch(1, [row('gone')], load(25, 0, 0.6))); // another client's 24 requests on rank 1
  now = 20;
  await link.deliverBatch(batch(1, [row('gone')]));
  await link.deliverBatch(batch(0, [row('keep')]));
  const rates = serviceRates(client);
  assert.equal(client.rankStates()[1]!.soleClientGuard, true);
  assert.ok(Math.abs(rates.view(1).itlMs! - 10) < 1e-9);
  assert.equal(policy.index.size(1), 64);
  link.sendHook = (f) => {
    if (f.engineIndex === 1 && f.type === RequestType.ABORT) throw unreachable(1);
  };
  gone.cancel(); // the ABORT is refused: rank 1 is gone
  await tick();
  assert.deepEqual(states(client), ['ready', 'dead']);
  const dead = client.rankStates()[1]!;
  assert.deepEqual(
    [dead.soleClientGuard, dead.load, dead.loadAgeMs, dead.inFlight],
    [false, null, null, 0],
    'death: guard off, no stored load, no age',
  );
  assert.equal(policy.index.size(1), 0, "death: the dead rank's cache is gone");
  assert.equal(rates.view(1).itlMs, null, 'death: its rates are forgotten');
  assert.equal(policy.index.size(0), 64, 'the survivor keeps its index');
  assert.ok(Math.abs(rates.view(0).itlMs! - 10) < 1e-9, 'and its rates');
  assert.equal(rates.trackedRequests, 1, "only the survivor's request is still tracked");
  link.sendHook = null;
  assert.equal(await link.hello(1), true);
  link.join(1);
  const back = client.rankStates()[1]!;
  assert.deepEqual([back.state, back.soleClientGuard, back.load, back.loadAgeMs], ['ready', false, null, null]);
  // Rank 1 is now idle and knows nothing: a request sharing doc still goes to rank 0 (1 in flight, 1024 cached).
  const next = await client.submit(prompt('next', [...doc, 3]));
  assert.equal(next.engineIndex, 0);
  const fresh = await client.submit(prompt('fresh', seq(600, 50_000)));
  assert.equal(fresh.engineIndex, 1, 'no shared prefix: the idle rejoined rank');
  assert.equal(policy.index.size(1), 37, 'the rejoined rank is indexed afresh from its first request');
  keep.cancel();
  next.cancel();
  fresh.cancel();
  await client.close();
});

test("a new process taking a ready rank's index (replaced, no death seen first): index, guard, stored load, age and rates reset", async () => {
  let now = 0;
  const policy = createCacheAwarePolicy();
  const { client, link } = setup(2, { policy, now: () => now });
  const doc = seq(1024, 1);
  const old = await client.submit(prompt('old', [...doc, 1]), { dpRank: 1 });
  now = 10;
  await link.deliverBatch(batch(1, [row('old')], load(25, 0, 0.6))); // another client's work: the guard engages
  now = 20;
  await link.deliverBatch(batch(1, [row('old')]));
  const rates = serviceRates(client);
  assert.equal(client.rankStates()[1]!.soleClientGuard, true);
  assert.ok(Math.abs(rates.view(1).itlMs! - 10) < 1e-9);
  assert.equal(policy.index.size(1), 64);
  now = 30;
  link.join(1);
  assert.equal(((await drain(old)).error as EngineClientError).kind, 'engine-dead');
  const st = client.rankStates()[1]!;
  assert.deepEqual([st.state, st.soleClientGuard, st.load, st.loadAgeMs, st.inFlight], ['ready', false, null, null, 0]);
  assert.equal(policy.index.size(1), 0, "the old process's cache is gone");
  assert.deepEqual(rates.view(1), { itlMs: null, prefillMsPerToken: null, outputTokens: null }, 'its rates are gone');
  assert.equal(rates.trackedRequests, 0);
  await client.close();
});
