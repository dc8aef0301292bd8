/**
 * The group's KV-event view (src/engine-client/kv-cache-view.ts) and `cache_aware` on it (issue 29 parts 2-3): a
 * rank is scored by the exact index only while a subscriber is attached and its stream is complete and not silent;
 * the exact index wins over the approximate guess when the engine evicted a block or another client warmed a rank;
 * predict-on-route keeps a burst of turns on one rank; the prediction of the chosen rank is what the client compares
 * with the engine's `cached_tokens` (routing precision).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { createCacheAwarePolicy, servableCachedTokens } from '../../src/engine-client/cache-aware.js';
import { KvCacheView } from '../../src/engine-client/kv-cache-view.js';
import type { RankView } from '../../src/engine-client/policy.js';
import { ServiceRates, observePrecision, type RoutingPrecision } from '../../src/engine-client/service-rates.js';
import { tokenSpeedPageKeys } from '../../src/protocols/kv-events/block-keys.js';
import type { KvEvent, KvEventBatch } from '../../src/protocols/kv-events/codec.js';
import { DEFAULT_SAMPLING, type EngineOutputRow, type GenerateRequest } from '../../src/protocols/types.js';

const PAGE = 16;
const seq = (n: number, from: number): number[] => Array.from({ length: n }, (_, i) => from + i);
const request = (id: string, tokens: number[]): GenerateRequest => ({
  requestId: id,
  promptTokenIds: tokens,
  sampling: { ...DEFAULT_SAMPLING, maxNewTokens: 8 },
  stream: true,
  returnLogprob: false,
});
const idle = (n: number): RankView[] =>
  Array.from({ length: n }, (_, i) => ({ engineIndex: i, inFlight: 0, load: null }));

/** TokenSpeed `BlockStored` events for the full pages of `tokens`, as the engine announces them. */
function stored(tokens: number[]): KvEvent[] {
  const keys = tokenSpeedPageKeys(tokens, PAGE);
  return keys.map((k, i) => ({
    kind: 'stored',
    blockHashes: [k],
    parent: i === 0 ? null : keys[i - 1]!,
    tokenIds: tokens.slice(i * PAGE, (i + 1) * PAGE),
    blockSize: PAGE,
    loraName: null,
    medium: null,
    groupIdx: null,
    specKind: null,
    extraKeys: null,
  }));
}
const batch = (events: KvEvent[]): KvEventBatch => ({ ts: 0, events, rank: 0, unknownEvents: 0 });

describe('KvCacheView: when a rank is scored by the exact index', () => {
  test('only attached ranks are live; unsure and silent ranks are not until the stream is whole again', () => {
    const changes: string[] = [];
    const view = new KvCacheView({
      keying: 'tokenspeed',
      silenceMs: 1000,
      onLiveness: (rank, live) => changes.push(`${rank}:${live}`),
    });
    assert.equal(view.enabled, false);
    assert.equal(view.isLive(0, 0), false, 'no subscriber: the approximate index');
    view.attach(0, PAGE);
    view.attach(1, PAGE);
    assert.equal(view.enabled, true);
    assert.equal(view.isLive(0, 0), true);

    view.sureness(0, false, 'batches 3..4 were lost');
    assert.equal(view.isLive(0, 0), false);
    view.sureness(0, true, null);
    assert.equal(view.isLive(0, 0), true);

    const keys = view.promptKeys(seq(64, 1));
    view.noteRouted(1, keys, 100);
    assert.equal(view.isLive(1, 1100), true, 'within the silence bound');
    assert.equal(view.isLive(1, 1101), false, 'routed blocks unannounced past the bound: silent');
    view.apply(1, batch(stored(seq(64, 1))));
    assert.equal(view.isLive(1, 1200), true, 'a batch arrived: live again');
    assert.deepEqual(changes, ['0:false', '0:true', '1:false', '1:true']);
    assert.deepEqual(
      { unsure: view.counters.unsure, silent: view.counters.silent, batches: view.counters.batches },
      { unsure: 1, silent: 1, batches: 1 },
    );
  });

  test('the first block size seen keys the prompts; another size is left out; a publisher restart forgets the rank', () => {
    const view = new KvCacheView({ keying: 'tokenspeed', blockSize: 4 });
    view.attach(0, null);
    view.attach(1, null);
    assert.equal(view.blockSize, 4, 'the configured size until a rank says');
    view.apply(0, batch(stored(seq(48, 7))));
    assert.equal(view.blockSize, PAGE);
    assert.equal(view.cachedPrefixTokens(0, view.promptKeys(seq(50, 7)), 0), 48);
    // A rank announcing another block size (misconfigured, or not an engine) cannot re-key the group.
    const small = stored(seq(48, 7)).map((e) => (e.kind === 'stored' ? { ...e, blockSize: 1, tokenIds: [1] } : e));
    view.apply(1, batch(small));
    assert.equal(view.blockSize, PAGE);
    assert.equal(view.index.counters.skippedBlocks, 3);
    assert.equal(view.index.blockCount(1), 0);
    view.reset(0);
    assert.equal(view.cachedPrefixTokens(0, view.promptKeys(seq(50, 7)), 0), 0);
    assert.equal(view.counters.resets, 1);
  });
});

describe('cache_aware on the exact index', () => {
  const doc = seq(320, 1000); // 20 pages

  test('an evicted prefix is no longer followed; the rank another client warmed is', () => {
    let now = 0;
    const view = new KvCacheView({ keying: 'tokenspeed', predictTtlMs: 0 });
    view.attach(0, PAGE);
    view.attach(1, PAGE);
    const policy = createCacheAwarePolicy({ kvCache: view, now: () => now });
    // The approximate index remembers rank 0 (the first request went there)...
    const first = request('a', [...doc, 1]);
    assert.equal(policy.select(idle(2), first), 0);
    policy.onDispatch!(0, first);
    // ...but rank 1 announced the document (another client's request), and rank 0 never did.
    view.apply(1, batch(stored(doc)));
    now = 10;
    const second = request('b', [...doc, 2]);
    assert.equal(policy.select(idle(2), second), 1, 'the rank that really holds the prefix');
    policy.onDispatch!(1, second);
    assert.equal(policy.predictedCachedTokens!(second), 320);
  });

  test('an unsure rank falls back to the approximate index', () => {
    const view = new KvCacheView({ keying: 'tokenspeed', predictTtlMs: 0 });
    view.attach(0, PAGE);
    view.attach(1, PAGE);
    const policy = createCacheAwarePolicy({ kvCache: view, now: () => 0 });
    const first = request('a', [...doc, 1]);
    assert.equal(policy.select(idle(2), first), 0);
    policy.onDispatch!(0, first);
    policy.predictedCachedTokens!(first);
    const second = request('b', [...doc, 2]);
    assert.equal(policy.select(idle(2), second), 1, 'live and empty: rank 0 holds nothing announced (scan moves on)');
    policy.predictedCachedTokens!(second);
    view.sureness(0, false, 'lost batches');
    const third = request('c', [...doc, 3]);
    assert.equal(policy.select(idle(2), third), 0, 'unsure: the approximate index remembers rank 0');
    policy.onDispatch!(0, third);
    assert.equal(policy.predictedCachedTokens!(third), 320);
  });

  test('predict-on-route: a burst of turns lands on one rank before the engine announced anything', () => {
    let now = 0;
    const view = new KvCacheView({ keying: 'tokenspeed', predictTtlMs: 5000 });
    view.attach(0, PAGE);
    view.attach(1, PAGE);
    const policy = createCacheAwarePolicy({ kvCache: view, now: () => now });
    const ranks: number[] = [];
    for (let turn = 0; turn < 4; turn++) {
      now += 5;
      const r = request(`t${turn}`, [...doc, turn]);
      const rank = policy.select(idle(2), r);
      policy.onDispatch!(rank, r);
      policy.predictedCachedTokens!(r);
      ranks.push(rank);
    }
    assert.deepEqual(new Set(ranks).size, 1, `one rank: ${ranks}`);
    now += 6000;
    const late = request('late', [...doc, 9]);
    policy.select(idle(2), late);
    policy.onDispatch!(0, late);
    assert.equal(policy.predictedCachedTokens!(late), 0, 'the prediction expired and nothing was announced');
  });

  test('a prediction never exceeds what an engine can serve from cache (the last prompt token is computed)', () => {
    assert.equal(servableCachedTokens(320, 320, 16), 304);
    assert.equal(servableCachedTokens(320, 321, 16), 320);
    assert.equal(servableCachedTokens(0, 1, 16), 0);
  });
});

describe('routing precision: predictions against the engine’s cached_tokens', () => {
  test('the first row that reports cached_tokens settles a request, once', () => {
    const rates = new ServiceRates();
    const sample = rates.dispatched(0, 'r', 400, 0);
    sample.predictedCachedTokens = 320;
    const row = (cached: number | null, finish: EngineOutputRow['finishReason'] = null): EngineOutputRow =>
      ({ requestId: 'r', newTokenIds: [1], finishReason: finish, cachedTokens: cached }) as EngineOutputRow;
    rates.observeRow(0, sample, row(null), 1);
    assert.equal(rates.precision.requests, 0, 'no report yet (vLLM: only the first output carries prefill_stats)');
    rates.observeRow(0, sample, row(288), 2);
    rates.observeRow(0, sample, row(288, 'length'), 3);
    const want: RoutingPrecision = { requests: 1, predictedTokens: 320, confirmedTokens: 288, reportedTokens: 288 };
    assert.deepEqual(rates.precision, want);
    const p: RoutingPrecision = { requests: 0, predictedTokens: 0, confirmedTokens: 0, reportedTokens: 0 };
    observePrecision(p, 0, 64);
    assert.deepEqual(p, { requests: 1, predictedTokens: 0, confirmedTokens: 0, reportedTokens: 64 });
  });
});
