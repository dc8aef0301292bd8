/**
 * The simulated ranks' KV events (issue 29 part 4): the scheduler records its prefix cache's stores and evictions in
 * order (scheduler.ts `takeKvEvents`; reuse records nothing), the publisher names blocks as each engine does
 * (TokenSpeed: its FNV-1a 64 page chain, which the gateway recomputes; vLLM: a per-process seeded value, so only
 * the token ids lead back to the prompt), and a real PUB + replay ROUTER pair serves a gateway subscriber: live
 * batches in seq order, and a replay from 0 for a subscriber that joined late.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import pino from 'pino';
import { ROOT_BLOCK_HASH, hashBlock } from '../../src/protocols/block-hash.js';
import { tokenSpeedPageKeys, intBlockKey } from '../../src/protocols/kv-events/block-keys.js';
import type { KvEventBatch } from '../../src/protocols/kv-events/codec.js';
import { parseKvEventsConfig } from '../../src/protocols/kv-events/config.js';
import { SimBlockNamer, SimKvPublisher } from '../../src/sim/kv-events.js';
import { SimScheduler, type SimKvEvent, type SimRequest } from '../../src/sim/scheduler.js';
import { KvEventSubscriber } from '../../src/transport/kv-event-subscriber.js';
import { waitFor } from '../helpers/async.js';
import { freePortRange } from '../helpers/net.js';
import { scriptedRequest } from './helpers.js';

const seq = (n: number, from: number): number[] => Array.from({ length: n }, (_, i) => from + i);

const req = (rid: string, promptTokenIds: number[]): SimRequest => scriptedRequest(rid, promptTokenIds, 1);

function run(s: SimScheduler, r: SimRequest): SimKvEvent[] {
  s.add(r, 0);
  for (let i = 0; i < 100 && s.hasWork(); i++) {
    s.plan();
    s.commit();
  }
  return s.takeKvEvents();
}

describe('scheduler KV events', () => {
  test('stores in order with their parents; a prefix hit stores only the new blocks; evictions come first', () => {
    const s = new SimScheduler({
      engineIndex: 0,
      maxRunning: 4,
      kvTotalPages: 6,
      maxModelLen: 8192,
      eosTokenIds: [999],
      kvEvents: true,
    });
    const doc = seq(48, 1);
    const first = run(s, req('a', [...doc, 7]));
    const h0 = hashBlock(ROOT_BLOCK_HASH, doc, 0, 16);
    const h1 = hashBlock(h0, doc, 16, 16);
    const h2 = hashBlock(h1, doc, 32, 16);
    assert.deepEqual(
      first.map((e) => (e.kind === 'stored' ? [e.hash, e.parent, e.tokens.length] : e)),
      [
        [h0, null, 16],
        [h1, h0, 16],
        [h2, h1, 16],
      ],
    );
    assert.deepEqual(run(s, req('b', [...doc, 8])), [], 'reuse announces nothing');
    // 6 pages, 3 free and 3 idle blocks: a 5-page prompt evicts two idle blocks (the last of the prefix first)
    // before it stores its own.
    const other = run(s, req('c', [...seq(64, 900), 1]));
    const kinds = other.map((e) => e.kind);
    assert.deepEqual(
      other.slice(0, 2).map((e) => [e.kind, e.kind === 'cleared' ? null : e.hash]),
      [
        ['removed', h2],
        ['removed', h1],
      ],
    );
    assert.deepEqual(kinds.slice(2), ['stored', 'stored', 'stored', 'stored']);
  });

  test('a prefix-cache reset: refused while a request holds blocks, then every idle block in one event', () => {
    const s = new SimScheduler({
      engineIndex: 0,
      maxRunning: 4,
      kvTotalPages: 64,
      maxModelLen: 8192,
      eosTokenIds: [999],
      kvEvents: true,
    });
    run(s, req('a', [...seq(32, 1), 7]));
    s.add(req('b', [...seq(32, 1), 8]), 0);
    s.plan(); // admitted: it holds the two cached blocks
    assert.equal(s.resetPrefixCache(), false);
    s.commit();
    while (s.hasWork()) {
      s.plan();
      s.commit();
    }
    s.takeKvEvents();
    assert.equal(s.resetPrefixCache(), true);
    const [cleared] = s.takeKvEvents();
    assert.equal(cleared?.kind, 'cleared');
    assert.equal(cleared?.kind === 'cleared' ? cleared.hashes.length : 0, 2);
    assert.equal(s.cachedPrefixTokens(seq(32, 1)), 0, 'nothing is cached any more');
  });
});

describe('block names', () => {
  const tokens = seq(48, 11);
  const events = (): SimKvEvent[] => {
    const h0 = hashBlock(ROOT_BLOCK_HASH, tokens, 0, 16);
    const h1 = hashBlock(h0, tokens, 16, 16);
    return [
      { kind: 'stored', hash: h0, parent: null, tokens: tokens.slice(0, 16) },
      { kind: 'stored', hash: h1, parent: h0, tokens: tokens.slice(16, 32) },
      { kind: 'removed', hash: h1 },
      { kind: 'removed', hash: 12345 },
    ];
  };

  test('TokenSpeed: the engine’s page hash chain, which the gateway computes from the prompt', () => {
    const out = new SimBlockNamer('tokenspeed').translate(events(), 16);
    const keys = tokenSpeedPageKeys(tokens, 16);
    const named = out.filter((e) => e.kind === 'stored').map((e) => intBlockKey(e.hashes[0] as bigint));
    assert.deepEqual(named, keys.slice(0, 2));
    assert.equal(out.length, 3, 'a removal of a block never stored is not announced');
  });

  test('a reset: vLLM announces AllBlocksCleared, TokenSpeed removes each page it announced', () => {
    const stores = events().slice(0, 2);
    const hashes = stores.map((e) => (e.kind === 'stored' ? e.hash : 0));
    const reset: SimKvEvent = { kind: 'cleared', hashes: [...hashes, 999] };
    const vllm = new SimBlockNamer('vllm', 1n).translate([...stores, reset], 16);
    assert.deepEqual(vllm.at(-1), { kind: 'cleared' });
    const ts = new SimBlockNamer('tokenspeed').translate([...stores, reset], 16);
    const last = ts.at(-1)!;
    assert.equal(last.kind, 'removed');
    assert.deepEqual(
      last.kind === 'removed' ? last.hashes.map((h) => intBlockKey(h as bigint)) : [],
      tokenSpeedPageKeys(tokens, 16).slice(0, 2),
    );
  });

  test('vLLM: seeded per process, so two processes name one block differently', () => {
    const a = new SimBlockNamer('vllm', 1n).translate(events(), 16);
    const b = new SimBlockNamer('vllm', 2n).translate(events(), 16);
    const first = (x: typeof a) => (x[0]!.kind === 'stored' ? x[0]!.hashes[0] : null);
    assert.notEqual(first(a), first(b));
    assert.ok((first(a) as bigint) < 2n ** 64n);
  });
});

describe('publisher over real ZeroMQ', { timeout: 20_000 }, () => {
  test('live batches reach a subscriber; one that joins late gets the earlier ones by replay', async () => {
    const [events, replay] = [await freePortRange(1), await freePortRange(1)];
    const config = parseKvEventsConfig({
      enable_kv_cache_events: true,
      endpoint: `tcp://*:${events}`,
      replay_endpoint: `tcp://*:${replay}`,
      topic: 'kv',
    });
    const log = pino({ level: 'silent' });
    const pub = await SimKvPublisher.bind(config, 0, 'tokenspeed', 16, log);
    const tokens = seq(64, 3);
    let parent: number | null = null;
    let h = ROOT_BLOCK_HASH;
    for (let i = 0; i < 4; i++) {
      h = hashBlock(h, tokens, i * 16, 16);
      pub.publish([{ kind: 'stored', hash: h, parent, tokens: tokens.slice(i * 16, i * 16 + 16) }]);
      parent = h;
    }
    const applied: Array<{ rank: number; batch: KvEventBatch }> = [];
    const sure: boolean[] = [];
    const sub = new KvEventSubscriber({
      rank: 0,
      eventsAddress: `tcp://127.0.0.1:${events}`,
      replayAddress: `tcp://127.0.0.1:${replay}`,
      topic: 'kv',
      sink: {
        apply: (rank, batch) => applied.push({ rank, batch }),
        reset: () => assert.fail('no restart'),
        sureness: (_, s) => sure.push(s),
      },
      logger: log,
    });
    sub.start();
    try {
      await waitFor(() => applied.length === 4, 'the four batches published before the subscriber connected', 10_000);
      pub.publish([{ kind: 'removed', hash: h }]);
      await waitFor(() => applied.length === 5, 'a live batch', 10_000);
      const stores = applied.slice(0, 4).map((a) => a.batch.events[0]);
      assert.deepEqual(
        stores.map((e) => (e?.kind === 'stored' ? e.blockHashes[0] : null)),
        tokenSpeedPageKeys(tokens, 16),
      );
      assert.equal(applied[4]!.batch.events[0]!.kind, 'removed');
      assert.deepEqual(sure, [], 'never unsure');
      assert.ok(pub.stats.replays >= 1);
    } finally {
      await sub.close();
      await pub.close();
    }
  });
});
