/**
 * The pluggable DP policies of issue #5 part 1 (src/engine-client/policies.ts; dp-routing.md sections 9.2, 10.3).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createDpPolicy, DP_POLICY_NAMES, inFlightScore, type OracleSource } from '../../src/engine-client/policies.js';
import type { RankView } from '../../src/engine-client/policy.js';
import { batch, finishWithStaleReport, inFlight, load, req, row, setup } from './fakes.js';

const view = (engineIndex: number | null, inFlight: number, l: RankView['load'] = null): RankView => ({
  engineIndex,
  inFlight,
  load: l,
});

const r = req('x');

test('round_robin rotates 0,1,2,0,... whatever the load and in-flight counts', () => {
  const p = createDpPolicy('round_robin');
  assert.equal(p.name, 'round_robin');
  const ranks = [view(0, 50, load(9, 9, 0.9)), view(1, 0), view(2, 7)];
  const picks = Array.from({ length: 7 }, () => p.select(ranks, r));
  assert.deepEqual(picks, [0, 1, 2, 0, 1, 2, 0]);
  assert.throws(() => p.select([], r), RangeError);
});

test('inflight picks the lowest own in-flight count and ignores reported load', () => {
  const p = createDpPolicy('inflight');
  // r0 reports a huge queue but has own 1; r1 reports nothing but has own 2: inflight picks r0, load would pick r1.
  const ranks = [view(0, 1, load(20, 20, 0.9)), view(1, 2)];
  assert.equal(p.select(ranks, r), 0);
  assert.equal(createDpPolicy('load').select(ranks, r), 1);
  assert.equal(inFlightScore(view(null, 5)), 0, 'an engine without an index counts 0');
});

test('inflight rotates ties: all equal → 0, 1, 2, 0', () => {
  const p = createDpPolicy('inflight');
  const ranks = [view(0, 3), view(1, 3), view(2, 3)];
  assert.deepEqual(
    [0, 1, 2, 3].map(() => p.select(ranks, r)),
    [0, 1, 2, 0],
  );
  // A strictly lower rank wins whatever the scan start.
  const skew = [view(0, 3), view(1, 1), view(2, 3)];
  assert.deepEqual(
    [0, 1, 2].map(() => p.select(skew, r)),
    [1, 1, 1],
  );
});

test('load is the default scorer (9.4 KV example: r0 scores 17, r1 0) and keeps the clamp; load_no_clamp scores the same without it', () => {
  const ranks = [view(0, 1, load(3, 5, 0.8)), view(1, 0)];
  const l = createDpPolicy('load');
  const n = createDpPolicy('load_no_clamp');
  assert.equal(l.name, 'load');
  assert.equal(l.releaseClamp ?? true, true);
  assert.equal(n.name, 'load_no_clamp');
  assert.equal(n.releaseClamp, false);
  assert.equal(l.select(ranks, r), 1);
  assert.equal(n.select(ranks, r), 1);
  // Same rotation of ties as load: one call made above, so the scan now starts at 1.
  const ties = [view(0, 0), view(1, 0)];
  assert.deepEqual(
    [0, 1, 2].map(() => n.select(ties, r)),
    [1, 0, 1],
  );
});

test('oracle picks the least true outstanding tokens, even against the reported load', () => {
  const truth = new Map<number, number>([
    [0, 500],
    [1, 40],
    [2, 900],
  ]);
  const source: OracleSource = { outstandingTokens: (i) => truth.get(i) ?? 0 };
  const p = createDpPolicy('oracle', { oracle: source });
  assert.equal(p.name, 'oracle');
  // Reports claim r1 is the busiest; the truth says r1 holds the least work.
  const ranks = [view(0, 0, load(0, 0, 0)), view(1, 5, load(9, 9, 0.9)), view(2, 0)];
  assert.equal(p.select(ranks, r), 1);
  truth.set(1, 1000); // read at selection time, not cached
  assert.equal(p.select(ranks, r), 0);
  // Non-finite, negative and index-less values are never preferred.
  truth.set(0, Number.NaN);
  truth.set(1, -3);
  assert.equal(p.select(ranks, r), 2);
  assert.equal(p.select([view(null, 0), view(2, 0)], r), 1);
});

test('oracle rotates ties between equal outstanding work', () => {
  const p = createDpPolicy('oracle', { oracle: { outstandingTokens: () => 10 } });
  const ranks = [view(0, 0), view(1, 0)];
  assert.deepEqual(
    [0, 1, 2, 3].map(() => p.select(ranks, r)),
    [0, 1, 0, 1],
  );
});

test('createDpPolicy: unknown names list the valid ones; oracle needs a source; each call is independent', () => {
  assert.throws(
    () => createDpPolicy('least_loaded'),
    (e: unknown) =>
      e instanceof RangeError &&
      /unknown DP policy "least_loaded"/.test(e.message) &&
      DP_POLICY_NAMES.every((n) => e.message.includes(n)),
  );
  assert.throws(() => createDpPolicy('oracle'), /OracleSource/);
  const a = createDpPolicy('round_robin');
  const b = createDpPolicy('round_robin');
  const ranks = [view(0, 0), view(1, 0)];
  assert.equal(a.select(ranks, r), 0);
  assert.equal(a.select(ranks, r), 1);
  assert.equal(b.select(ranks, r), 0, 'b has its own counter');
});

test('load_no_clamp through the real EngineClient: the stale terminal report stays stored and drives the next request away', async () => {
  for (const name of ['load', 'load_no_clamp'] as const) {
    const { client, link } = setup(2, { policy: createDpPolicy(name) });
    const result = await finishWithStaleReport(client, link, load(3, 5, 0.4));
    assert.equal(result.error, undefined);
    const stored = client.rankStates()[0].load;
    const clampEvents = client.rankStates()[0].clampEvents;
    const next = await client.submit(req('next'));
    if (name === 'load') {
      assert.deepEqual(stored, load(0, 0, 0.4));
      assert.equal(clampEvents, 1);
      assert.equal(next.engineIndex, 0);
    } else {
      assert.deepEqual(stored, load(3, 5, 0.4), 'the stale 3/5 report is left in place');
      assert.equal(clampEvents, 0);
      assert.equal(next.engineIndex, 1, 'r0 scores 8 from the stale report, r1 scores 1');
      assert.deepEqual(inFlight(client), [0, 2]);
    }
    await client.close();
  }
});

test('round_robin through the real EngineClient sends a burst 0,1,0,1 regardless of a busy report', async () => {
  const { client, link } = setup(2, { policy: createDpPolicy('round_robin') });
  const a = await client.submit(req('a'));
  await link.deliverBatch(batch(0, [row('a')], load(30, 30, 0.9)));
  const picks = [a.engineIndex];
  for (const id of ['b', 'c', 'd']) picks.push((await client.submit(req(id))).engineIndex);
  assert.deepEqual(picks, [0, 1, 0, 1]);
  await client.close();
});
