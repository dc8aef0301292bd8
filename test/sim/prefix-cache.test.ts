/**
 * The simulated ranks' prefix cache (issue 12 part 1; src/sim/prefix-cache.ts, src/sim/scheduler.ts): chained
 * 16-token block hashes, hits skip prefill time and pages, generated tokens' full blocks are cached too, LRU eviction
 * bounded by the KV pages with in-use blocks never evicted, and `cached_tokens` on both wires.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { blockHashes, hashBlock, ROOT_BLOCK_HASH } from '../../src/protocols/block-hash.js';
import { decodeBatchTokenIDOutSlim } from '../../src/protocols/tokenspeed/output.js';
import { decodeEngineCoreOutputs } from '../../src/protocols/vllm/index.js';
import { SimPrefixCache } from '../../src/sim/prefix-cache.js';
import { SimScheduler, type SchedulerConfig, type SimBatch, type SimRow } from '../../src/sim/scheduler.js';
import { encodeSimBatch } from '../../src/sim/output.js';
import { scriptedRequest as req } from './helpers.js';
import { createVllmSimWire } from '../../src/sim/vllm-wire.js';
import type { SimStep } from '../../src/sim/wire.js';

/** Token ids `from, from + 1, …` (n of them). */
const seq = (n: number, from: number): number[] => Array.from({ length: n }, (_, i) => from + i);

function sched(over: Partial<SchedulerConfig> = {}): SimScheduler {
  return new SimScheduler({
    engineIndex: 0,
    maxRunning: 8,
    kvTotalPages: 64,
    maxModelLen: 8192,
    eosTokenIds: [999],
    stepTime: { baseMs: 4, perPrefillTokenMs: 0.5, perDecodeTokenMs: 1 },
    ...over,
  });
}

/** Run rounds until idle; every batch in order. */
function drain(s: SimScheduler): SimBatch[] {
  const out: SimBatch[] = [];
  for (let i = 0; i < 1000 && s.hasWork(); i++) {
    const p = s.plan();
    if (p.admission) out.push(p.admission);
    const b = s.commit();
    if (b) out.push(b);
  }
  assert.equal(s.hasWork(), false, 'drained');
  return out;
}

const rowsOf = (batches: SimBatch[], rid: string): SimRow[] =>
  batches.flatMap((b) => b.rows.filter((r) => r.rid === rid));

test('block hashes: chained over full 16-token blocks; equal prefixes give equal hashes, a partial block none', () => {
  const a = seq(40, 1);
  const h = blockHashes(a);
  assert.equal(h.length, 2, '40 tokens = 2 full blocks + 8 tokens');
  assert.equal(h[0], hashBlock(ROOT_BLOCK_HASH, a, 0, 16));
  assert.equal(h[1], hashBlock(h[0], a, 16, 16));
  assert.deepEqual(blockHashes([...a.slice(0, 32), 77, 78]), h, 'a different tail keeps the full blocks');
  const b = [...a];
  b[3] = 12345;
  const hb = blockHashes(b);
  assert.notEqual(hb[0], h[0]);
  assert.notEqual(hb[1], h[1], 'the chain carries an earlier difference into every later block');
  assert.deepEqual(blockHashes(a.slice(16)).length, 1);
  assert.notEqual(blockHashes(a.slice(16))[0], h[1], 'the same tokens after another parent hash differently');
  for (const x of h) assert.ok(Number.isSafeInteger(x) && x >= 0);
  assert.throws(() => blockHashes(a, 0), RangeError);
});

test('page pool: hits are shared, idle blocks are evicted LRU tail first, in-use blocks never', () => {
  const c = new SimPrefixCache(4);
  // Holder 1 computes blocks A, B (2 private pages promoted) and holds a private tail page.
  c.allocate(3);
  assert.equal(c.promote(101), true);
  assert.equal(c.promote(102), true);
  assert.deepEqual(c.counts(), { inUse: 3, idle: 0, evictions: 0 });
  assert.deepEqual(c.match([101, 102, 103]), { blocks: 2, idle: 0 });
  // Holder 2 shares A and B: one private page only.
  c.acquire([101, 102], 2);
  c.allocate(1);
  assert.equal(c.availablePages(), 0);
  assert.throws(() => c.allocate(1), RangeError, 'no free page, nothing idle: in-use blocks are not evictable');
  c.release(1, [101, 102]); // holder 1 done: A and B still referenced by holder 2
  assert.deepEqual(c.counts(), { inUse: 3, idle: 0, evictions: 0 });
  c.release(1, [101, 102]); // holder 2 done: both idle, B (the tail) released first
  assert.deepEqual(c.counts(), { inUse: 0, idle: 2, evictions: 0 });
  assert.deepEqual(c.match([101, 102]), { blocks: 2, idle: 2 }, 'idle blocks still hit');
  c.allocate(3); // 2 free pages + 1 eviction: B (released first) goes, A stays
  assert.deepEqual(c.counts(), { inUse: 3, idle: 1, evictions: 1 });
  assert.deepEqual(c.match([101, 102]), { blocks: 1, idle: 1 });
  assert.deepEqual(c.match([102]), { blocks: 0, idle: 0 });
  // A duplicate block computed by another holder is merged into the resident one (its private page freed).
  assert.equal(c.promote(101), true);
  assert.deepEqual(c.counts(), { inUse: 3, idle: 0, evictions: 1 });
  const off = new SimPrefixCache(4, false);
  off.allocate(1);
  assert.equal(off.promote(101), false);
  assert.deepEqual(off.match([101]), { blocks: 0, idle: 0 });
});

test('page pool: long runs of seeded releases, hits and evictions evict exactly what a plain LRU list would', () => {
  // The reference: reference counts plus an array of idle hashes, least recently released first.
  const total = 40;
  const pool = new SimPrefixCache(total);
  const refs = new Map<number, number>();
  let idle: number[] = [];
  let privatePages = 0;
  let evictions = 0;
  let seed = 7;
  const rand = (n: number): number => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return seed % n;
  };
  const held: number[][] = [];
  for (let step = 0; step < 20_000; step++) {
    const inUse = privatePages + [...refs.values()].filter((r) => r > 0).length;
    const op = rand(3);
    if (op === 0 && inUse < total) {
      // A holder computes up to 3 blocks (from a small hash space, so blocks are shared and hit again).
      const blocks = Array.from({ length: 1 + rand(Math.min(3, total - inUse)) }, () => rand(120));
      const mine: number[] = [];
      for (const h of blocks) {
        if (mine.includes(h)) continue;
        pool.allocate(1);
        while (privatePages + [...refs.values()].filter((r) => r > 0).length + idle.length + 1 > total) {
          refs.delete(idle.shift()!);
          evictions += 1;
        }
        privatePages += 1;
        pool.promote(h);
        privatePages -= 1;
        const r = refs.get(h);
        if (r === 0) idle = idle.filter((x) => x !== h);
        refs.set(h, (r ?? 0) + 1);
        mine.push(h);
      }
      held.push(mine);
    } else if (op === 1 && held.length > 0) {
      const mine = held.splice(rand(held.length), 1)[0]!;
      pool.release(0, mine);
      for (let i = mine.length - 1; i >= 0; i--) {
        const r = refs.get(mine[i]!)! - 1;
        refs.set(mine[i]!, r);
        if (r === 0) idle.push(mine[i]!);
      }
    } else if (op === 2 && held.length > 0) {
      // A newcomer takes a reference on resident blocks (a hit), reviving idle ones.
      const h = rand(120);
      if (refs.has(h)) {
        pool.acquire([h], 1);
        if (refs.get(h) === 0) idle = idle.filter((x) => x !== h);
        refs.set(h, refs.get(h)! + 1);
        held.push([h]);
      }
    }
    if (step % 97 === 0) {
      for (let h = 0; h < 120; h++)
        assert.equal(pool.match([h]).blocks, refs.has(h) ? 1 : 0, `step ${step}: block ${h}`);
      assert.deepEqual(pool.counts(), {
        inUse: privatePages + [...refs.values()].filter((r) => r > 0).length,
        idle: idle.length,
        evictions,
      });
    }
  }
  assert.ok(evictions > 1000, `evictions exercised: ${evictions}`);
});

test('a repeated prompt hits its cached blocks: fewer prefill tokens, a shorter step, cached_tokens reported', () => {
  const s = sched();
  const prompt = seq(100, 1); // 6 full blocks + 4 tokens
  s.add(req('first', prompt));
  const p1 = s.plan();
  assert.equal(p1.prefillTokens, 100);
  assert.deepEqual([p1.cacheRequests, p1.cacheQueryTokens, p1.cacheHitTokens], [1, 100, 0]);
  s.commit();
  drain(s);
  assert.equal(s.state().activePages, 0);
  assert.equal(s.state().cachedPages, 6, 'the 6 full prompt blocks stay cached (the 102-token sequence has no 7th)');
  assert.equal(s.cachedPrefixTokens(prompt), 96);

  s.add(req('second', prompt));
  const p2 = s.plan();
  assert.equal(p2.prefillTokens, 4, 'only the partial tail block is computed');
  assert.equal(p2.cacheHitTokens, 96);
  assert.ok(p2.stepTimeMs < p1.stepTimeMs);
  assert.equal(s.state().activePages, 7, 'the hit blocks are in use again, not newly allocated');
  assert.equal(s.state().cachedPages, 0);
  const rows = [...(s.commit()?.rows ?? []), ...drain(s).flatMap((b) => b.rows)];
  assert.ok(rows.every((r) => r.cachedTokens === 96));
  assert.equal(rows[0].prefillTokens, 4);
  assert.equal(s.state().cacheHitTokens, 96);
});

test('a fully cached, block-aligned prompt still computes its last block (at least one token is computed)', () => {
  const s = sched();
  const prompt = seq(32, 1);
  s.add(req('a', prompt));
  drain(s);
  s.add(req('b', prompt));
  const p = s.plan();
  assert.equal(p.cacheHitTokens, 16, 'floor((32 - 1) / 16) = 1 block may hit');
  assert.equal(p.prefillTokens, 16);
});

test('generated tokens fill blocks that are cached too: the next turn of a conversation hits prompt and answer', () => {
  const s = sched();
  const turn1 = seq(20, 1);
  s.add(req('t1', turn1, 30, 7000));
  const batches = drain(s);
  const answer = rowsOf(batches, 't1').flatMap((r) => r.outputIds);
  assert.equal(answer.length, 30);
  // 50 tokens = 3 full blocks (48 tokens): the prompt's 20 and the first 28 generated ones.
  const turn2 = [...turn1, ...answer, ...seq(30, 9000)];
  assert.equal(s.cachedPrefixTokens(turn2), 48);
  s.add(req('t2', turn2));
  const p = s.plan();
  assert.equal(p.cacheHitTokens, 48);
  assert.equal(p.prefillTokens, turn2.length - 48);
});

test('the cache is bounded by the KV pages: distinct prompts evict the least recently used blocks', () => {
  const s = sched({ kvTotalPages: 8 });
  const a = seq(64, 1); // 4 blocks (5 pages while running)
  const b = seq(64, 1000);
  s.add(req('a', a));
  drain(s);
  assert.equal(s.cachedPrefixTokens(a), 64);
  s.add(req('b', b));
  drain(s);
  assert.equal(s.cachedPrefixTokens(b), 64);
  assert.ok(s.state().cachedPages <= 8);
  assert.ok(s.cachedPrefixTokens(a) < 64, 'b needed pages: a lost blocks to eviction');
  assert.ok(s.state().cacheEvictions > 0);
  // Eviction takes a prefix's tail first: what is left of `a` is its head.
  const left = s.cachedPrefixTokens(a);
  assert.equal(s.cachedPrefixTokens(a.slice(0, left)), left);
});

test('blocks of a running request are not evicted for an admission; the newcomer waits instead', () => {
  const s = sched({ kvTotalPages: 6, maxRunning: 4 });
  s.add(req('long', seq(64, 1), 20)); // 5 pages, running for 20 rounds
  s.plan();
  s.commit();
  s.add(req('other', seq(40, 500), 2)); // needs 3 pages; only 1 is free and nothing is idle
  const p = s.plan();
  assert.equal(p.plannedCount, 1, 'other waits');
  assert.equal(s.cachedPrefixTokens(seq(64, 1)), 64, 'long keeps every block');
  s.commit();
});

test('prefixCaching false: nothing is hashed, hit or kept', () => {
  const s = sched({ prefixCaching: false });
  const prompt = seq(100, 1);
  s.add(req('a', prompt));
  drain(s);
  assert.equal(s.state().cachedPages, 0);
  s.add(req('b', prompt));
  assert.equal(s.plan().prefillTokens, 100);
  assert.equal(s.cachedPrefixTokens(prompt), 0);
});

test('wires: TokenSpeed cached_tokens column; vLLM prefill_stats and prefix_cache_stats since the last step', () => {
  const s = sched();
  const prompt = seq(50, 1);
  s.add(req('a', prompt));
  drain(s);
  s.add(req('b', prompt));
  s.plan();
  const batch = s.commit();
  assert.ok(batch);
  const slim = decodeBatchTokenIDOutSlim(encodeSimBatch(batch));
  assert.deepEqual(slim.cached_tokens, [48]);

  const wire = createVllmSimWire({
    enableOutputLogprobs: false,
    tokens: () => ({ next: () => ({ tokenId: 1, logprob: 0 }) }),
  });
  const step = (b: SimBatch): SimStep => ({
    engineIndex: 0,
    rows: b.rows,
    tail: b.tail,
    state: s.state(),
    kvTotalPages: 64,
    stepCounter: 1,
    currentWave: 0,
  });
  const first = decodeEngineCoreOutputs(wire.encodeStep(step(batch)) ?? []);
  const out = first.outputs[0];
  assert.deepEqual(
    [
      out.prefill_stats?.num_prompt_tokens,
      out.prefill_stats?.num_cached_tokens,
      out.prefill_stats?.num_local_cached_tokens,
      out.prefill_stats?.num_computed_tokens,
    ],
    [50, 48, 48, 2],
  );
  const pcs = first.scheduler_stats?.prefix_cache_stats;
  assert.deepEqual([pcs?.requests, pcs?.queries, pcs?.hits], [2, 100, 48], 'both admissions since the rank started');
  const next = s.plan();
  const again = decodeEngineCoreOutputs(
    wire.encodeStep(step(s.commit() ?? { engineIndex: 0, rows: [], tail: next.tail })) ?? [],
  );
  const pcs2 = again.scheduler_stats?.prefix_cache_stats;
  assert.deepEqual([pcs2?.requests, pcs2?.queries, pcs2?.hits], [0, 0, 0], 'nothing looked up since');
});
