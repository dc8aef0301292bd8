/**
 * DP rank selection through the client (dp-routing.md sections 9, 14.7): worked examples, pinning, burst balance.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { batch, inFlight, load, req, row, setup } from './fakes.js';

test('a_cold_burst_spreads_across_engines: two concurrent requests on 2 fresh ranks land one per rank', async () => {
  const { client, link } = setup(2);
  const [a, b] = await Promise.all([client.submit(req('A')), client.submit(req('B'))]);
  assert.equal(a.engineIndex, 0);
  assert.equal(b.engineIndex, 1);
  assert.deepEqual(link.addsPerRank(), [1, 1]);
  assert.deepEqual(inFlight(client), [1, 1]);
  await client.close();
});

test('9.4 KV pressure through the client: r0 (3/5, kv 0.8, own 1) loses to an unreported r1', async () => {
  const { client, link } = setup(2);
  await client.submit(req('A'), { dpRank: 0 });
  await link.deliverBatch(batch(0, [row('A')], load(3, 5, 0.8)));
  const b = await client.submit(req('B'));
  assert.equal(b.engineIndex, 1);
  await client.close();
});

test('unpinned_requests_prefer_the_least_loaded_engine (r0 reports 3/5 plus one live request)', async () => {
  const { client, link } = setup(2);
  await client.submit(req('live'), { dpRank: 0 });
  await link.deliverBatch(batch(0, [row('live')], load(3, 5, 0.1)));
  for (const id of ['u1', 'u2', 'u3']) {
    const s = await client.submit(req(id));
    assert.equal(s.engineIndex, 1, `${id} should avoid the busy rank`);
  }
  await client.close();
});

test('9.4 floor beats a stale report; a never-selected rank is not clamped by its own batches', async () => {
  const { client, link } = setup(2);
  for (const id of ['p1', 'p2', 'p3', 'p4']) await client.submit(req(id), { dpRank: 0 });
  await link.deliverBatch(batch(0, [], load(0, 0, 0))); // stale "idle" report; own is 4
  // r1 was never selected: no in-flight entry, so its report must survive (no clamp, section 10.2 step 2).
  await link.deliverBatch(batch(1, [], load(2, 1, 0.9)));
  assert.deepEqual(client.rankStates()[1].load, load(2, 1, 0.9));
  const s = await client.submit(req('x'));
  assert.equal(s.engineIndex, 0, 'r0 scores 4 < 5.4');
  await client.close();
});

test('a report never lowers a rank below its own in-flight count (14.14 target 3)', async () => {
  const { client, link } = setup(2);
  for (const id of ['p1', 'p2', 'p3']) await client.submit(req(id), { dpRank: 0 });
  await link.deliverBatch(batch(0, [], load(0, 0, 0)));
  const picks: (number | null)[] = [];
  for (const id of ['u1', 'u2', 'u3']) picks.push((await client.submit(req(id))).engineIndex);
  assert.deepEqual(picks, [1, 1, 1]);
  await client.close();
});

test('failed_submit_releases_its_reservation: a duplicate id fails before any reservation, leaking nothing', async () => {
  const { client, link } = setup(2);
  await client.submit(req('live'), { dpRank: 0 });
  // Make r1 look busy so that a (wrong) reservation for the duplicate would have picked r0 and, on rollback,
  // released the live request's slot.
  await client.submit(req('r1-work'), { dpRank: 1 });
  await link.deliverBatch(batch(1, [row('r1-work')], load(5, 0, 0)));
  await assert.rejects(client.submit(req('live')), (e: unknown) => {
    assert.ok(e instanceof EngineClientError);
    assert.equal(e.kind, 'duplicate-request-id');
    assert.equal(e.requestId, 'live');
    assert.match(e.message, /live/);
    return true;
  });
  assert.deepEqual(inFlight(client), [1, 1], 'the live request keeps its slot');
  assert.equal(link.adds().length, 2, 'nothing was sent for the duplicate');
  const next = await client.submit(req('next'));
  assert.equal(next.engineIndex, 0, 'r0 (own 1) beats r1 (report 5)');
  await client.close();
});

test('a failed duplicate on idle ranks does not advance the scan start; the next request takes the idle rank', async () => {
  const { client } = setup(2);
  await client.submit(req('a'));
  await assert.rejects(client.submit(req('a')), { kind: 'duplicate-request-id' });
  const b = await client.submit(req('b'));
  assert.equal(b.engineIndex, 1);
  assert.deepEqual(inFlight(client), [1, 1]);
  await client.close();
});

test('pinned: goes to the named rank, is reserved there, and does not advance the scan start (9.1)', async () => {
  const { client, link } = setup(2);
  const p = await client.submit(req('pin'), { dpRank: 1 });
  assert.equal(p.engineIndex, 1);
  assert.equal(link.sent[0].engineIndex, 1);
  assert.deepEqual(inFlight(client), [0, 1]);
  const x = await client.submit(req('x')); // scan start 0: r0 (0) < r1 (1)
  assert.equal(x.engineIndex, 0);
  const y = await client.submit(req('y')); // scan start 1: tie 1/1 → r1, first in this scan
  assert.equal(y.engineIndex, 1, 'the pin must not have advanced the scan start');
  const states = client.rankStates();
  assert.equal(states[1].dispatchedPinned, 1);
  assert.equal(states[1].dispatchedUnpinned, 1);
  assert.equal(states[0].dispatchedUnpinned, 1);
  await client.close();
});

test('pinned to a rank the group does not have: invalid-dp-rank naming the rank and the rank count; nothing leaks', async () => {
  const { client, link } = setup(2);
  for (const bad of [2, 7, -1, 0.5]) {
    await assert.rejects(client.submit(req('p'), { dpRank: bad }), (e: unknown) => {
      assert.ok(e instanceof EngineClientError);
      assert.equal(e.kind, 'invalid-dp-rank');
      assert.equal(e.dpRank, bad);
      assert.equal(e.engineCount, 2);
      assert.deepEqual(e.validRanks, [0, 1]);
      assert.match(e.message, new RegExp(`DP rank ${String(bad).replace('.', '\\.')} does not exist: .*2 rank`));
      return true;
    });
  }
  assert.equal(link.sent.length, 0);
  assert.equal(client.registeredCount, 0);
  const s = await client.submit(req('p')); // the id is free again
  assert.equal(s.engineIndex, 0);
  await client.close();
});

test('no rank joined yet: unpinned submit fails with unavailable naming every rank state (issue #8)', async () => {
  const { client } = setup(0, { dpSize: 2 });
  await assert.rejects(client.submit(req('a')), (e: unknown) => {
    assert.ok(e instanceof EngineClientError);
    assert.equal(e.kind, 'unavailable');
    assert.match(e.message, /no DP rank of this engine group can take requests now \(rank 0 joining, rank 1 joining\)/);
    return true;
  });
  assert.equal(client.registeredCount, 0);
  await client.close();
});

test('burst balance: N concurrent requests over R idle ranks land within ±1 per rank (14.7)', async () => {
  for (const ranks of [1, 2, 3, 4, 5, 8]) {
    for (const n of [1, 2, 7, 8, 10, 13, 32]) {
      const { client, link } = setup(ranks);
      await Promise.all(Array.from({ length: n }, (_, i) => client.submit(req(`r${i}`))));
      const counts = link.addsPerRank();
      assert.equal(
        counts.reduce((a, b) => a + b, 0),
        n,
      );
      assert.ok(Math.max(...counts) - Math.min(...counts) <= 1, `N=${n} R=${ranks}: ${counts.join('/')}`);
      assert.deepEqual(inFlight(client), counts);
      await client.close();
    }
  }
});

test('14.7: 8 concurrent requests on 2 fresh ranks give 4/4', async () => {
  const { client, link } = setup(2);
  await Promise.all(Array.from({ length: 8 }, (_, i) => client.submit(req(`r${i}`))));
  assert.deepEqual(link.addsPerRank(), [4, 4]);
  await client.close();
});

test('14.7: 8 requests on 4 ranks with an all-zero report injected after the third give 2/2/2/2', async () => {
  const { client, link } = setup(4);
  await Promise.all([0, 1, 2].map((i) => client.submit(req(`r${i}`))));
  for (let r = 0; r < 4; r++) await link.deliverBatch(batch(r, [], load(0, 0, 0)));
  await Promise.all([3, 4, 5, 6, 7].map((i) => client.submit(req(`r${i}`))));
  assert.deepEqual(link.addsPerRank(), [2, 2, 2, 2]);
  assert.deepEqual(inFlight(client), [2, 2, 2, 2]);
  await client.close();
});

test('14.7: 10 requests in 5 pairs with equal reports between pairs give 5/5', async () => {
  const { client, link } = setup(2);
  for (let pair = 0; pair < 5; pair++) {
    await Promise.all([client.submit(req(`p${pair}a`)), client.submit(req(`p${pair}b`))]);
    const own = inFlight(client);
    assert.equal(own[0], own[1]);
    for (let r = 0; r < 2; r++) await link.deliverBatch(batch(r, [], load(own[r], 0, 0.3)));
  }
  assert.deepEqual(link.addsPerRank(), [5, 5]);
  await client.close();
});

test('a custom DpPolicy decides the unpinned rank; an out-of-range answer fails the submit without leaking', async () => {
  let answer = 1;
  const seen: number[][] = [];
  const { client, link } = setup(3, {
    policy: {
      name: 'fixed',
      select(ranks) {
        seen.push(ranks.map((r) => r.inFlight));
        return answer;
      },
    },
  });
  const a = await client.submit(req('a'));
  assert.equal(a.engineIndex, 1);
  answer = 3;
  await assert.rejects(client.submit(req('b')), RangeError);
  assert.deepEqual(inFlight(client), [0, 1, 0]);
  assert.equal(link.adds().length, 1);
  assert.deepEqual(seen, [
    [0, 0, 0],
    [0, 1, 0],
  ]);
  await client.close();
});
