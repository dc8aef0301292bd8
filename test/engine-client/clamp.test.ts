/**
 * Stored load, release and the zero-on-empty clamp (dp-routing.md sections 8, 10, 11, 14.6).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { DpPolicy } from '../../src/engine-client/policy.js';
import { createLoadNoClampPolicy } from '../../src/engine-client/policies.js';
import { batch, drain, finishWithStaleReport, inFlight, load, req, row, setup } from './fakes.js';

/** The `load_no_clamp` ablation: the load policy with the release clamp switched off. */
const noClampPolicy = createLoadNoClampPolicy;

/**
 * Section 10.3 example: r0 holds "last", r1 holds "held"; r0's terminal batch for "last" still reports
 * running 3 / waiting 5 (requests r0 just finished). Returns where the next unpinned request goes, r0's stored load
 * and the final stream.
 */
async function emptiedRankScenario(policy?: DpPolicy) {
  const { client, link } = setup(2, policy ? { policy } : {});
  const result = await finishWithStaleReport(client, link, load(3, 5, 0.4));
  const storedR0 = client.rankStates()[0].load;
  const clampEvents = client.rankStates()[0].clampEvents;
  const next = await client.submit(req('next'));
  const out = { next: next.engineIndex, storedR0, clampEvents, result, inFlight: inFlight(client) };
  await client.close();
  return out;
}

test('an_emptied_rank_sheds_its_stale_queue_counts: the terminal batch is stored, then clamped in the same tick', async () => {
  const r = await emptiedRankScenario();
  assert.equal(r.result.error, undefined);
  assert.equal(r.result.outputs.length, 1);
  assert.equal(r.result.outputs[0].finishReason, 'stop');
  assert.deepEqual(r.storedR0, load(0, 0, 0.4), 'running and waiting zeroed, KV usage kept');
  assert.equal(r.clampEvents, 1, 'the batch finishing the first 7 left "last": no clamp there');
  assert.equal(r.next, 0, 'the emptied rank (score 0) is preferred over r1 holding real work (score 1)');
});

test('THE clamp test: with the clamp disabled the same stale "busy" snapshot drives the next request away', async () => {
  const withClamp = await emptiedRankScenario();
  const without = await emptiedRankScenario(noClampPolicy());
  assert.equal(withClamp.next, 0);
  assert.equal(without.next, 1, 'no clamp: r0 keeps scoring 8 from the stale 3/5 report and loses to r1 (1)');
  assert.deepEqual(without.storedR0, load(3, 5, 0.4));
  assert.equal(without.clampEvents, 0);
  assert.deepEqual(without.inFlight, [0, 2]);
});

test('the clamp also fires for a batch with no finished ids once the rank set is empty (release runs for every batch)', async () => {
  const { client, link } = setup(2);
  const s = await client.submit(req('gone'), { dpRank: 0 });
  s.cancel(); // r0's set exists and is now empty
  // The engine still emits a row for the aborted request (dropped) with a busy snapshot sampled before the abort.
  await link.deliverBatch(batch(0, [row('gone')], load(1, 2, 0.7)));
  assert.deepEqual(client.rankStates()[0].load, load(0, 0, 0.7));
  // A stats-only batch (no rows at all) is clamped too (its 2 requests are within the slack of a sole client, 14.3).
  await link.deliverBatch(batch(0, [], load(1, 1, 0.75)));
  assert.deepEqual(client.rankStates()[0].load, load(0, 0, 0.75));
  assert.equal(client.rankStates()[0].clampEvents, 2);
  await client.close();
});

test('no clamp while the rank still holds work: a non-empty set keeps the report as received', async () => {
  const { client, link } = setup(2);
  await client.submit(req('a'), { dpRank: 0 });
  await client.submit(req('b'), { dpRank: 0 });
  await link.deliverBatch(batch(0, [row('a', 'length')], load(3, 5, 0.6)));
  assert.deepEqual(client.rankStates()[0].load, load(3, 5, 0.6));
  assert.deepEqual(inFlight(client), [1, 0]);
  await client.close();
});

test('a batch without a load report (kv_total_pages == 0) changes no stored load', async () => {
  const { client, link } = setup(2);
  await client.submit(req('a'), { dpRank: 0 });
  await link.deliverBatch(batch(0, [row('a')], load(2, 1, 0.7)));
  assert.deepEqual(client.rankStates()[0].load, load(2, 1, 0.7));
  await link.deliverBatch(batch(0, [row('a'), row('a')]));
  assert.deepEqual(client.rankStates()[0].load, load(2, 1, 0.7));
  // A rank that never reported stays without a report after load-less batches.
  await client.submit(req('b'), { dpRank: 1 });
  await link.deliverBatch(batch(1, [row('b')]));
  assert.equal(client.rankStates()[1].load, null);
  await client.close();
});

test('each report overwrites the previous one (never merged)', async () => {
  const { client, link } = setup(1);
  await client.submit(req('a'));
  await link.deliverBatch(batch(0, [row('a')], load(9, 9, 0.9)));
  await link.deliverBatch(batch(0, [row('a')], load(1, 0, 0.2)));
  assert.deepEqual(client.rankStates()[0].load, load(1, 0, 0.2));
  await client.close();
});

test('retiring_one_request_twice_frees_only_its_own_slot (explicit abort, then dropping the stream)', async () => {
  const { client, link } = setup(2);
  const doomed = await client.submit(req('doomed'), { dpRank: 0 });
  await client.submit(req('held'), { dpRank: 0 });
  await client.abort('doomed');
  doomed.cancel();
  await client.abort('doomed');
  // A late terminal row for the retired id is dropped and releases nothing else.
  await link.deliverBatch(batch(0, [row('doomed', 'abort')]));
  assert.deepEqual(inFlight(client), [1, 0], 'held keeps its slot');
  const next = await client.submit(req('next'));
  assert.equal(next.engineIndex, 1, 'the next request goes to the other rank');
  assert.equal(link.aborts().length, 1);
  await client.close();
});

test('vLLM-style finished ids without a terminal row retire the request with a stream-closed error', async () => {
  const { client, link } = setup(1);
  const s = await client.submit(req('a'));
  await link.deliverBatch(batch(0, [row('a')], undefined, ['a']));
  const r = await drain(s);
  assert.equal(r.outputs.length, 1);
  assert.equal((r.error as { kind?: string }).kind, 'stream-closed');
  assert.match((r.error as Error).message, /"a"/);
  assert.deepEqual(inFlight(client), [0]);
  await client.close();
});

test("rank fidelity (14.6, issue 26): rows naming another rank's request are dropped, counted and ABORTed at the sender; the owner keeps its stream", async () => {
  const { client, link } = setup(2);
  const m = await client.submit(req('m'), { dpRank: 1 });
  await client.submit(req('other'), { dpRank: 0 });
  // A sender that misnames itself (or a rogue): the batch says rank 0 but "m" was sent to rank 1.
  await link.deliverBatch(batch(0, [row('m'), row('m', 'stop')], load(1, 0, 0.1)));
  assert.equal(client.stats.rankMismatches, 2);
  assert.deepEqual(inFlight(client), [1, 1], 'nothing retired: "m" still belongs to rank 1');
  assert.deepEqual(client.rankStates()[0].load, load(1, 0, 0.1), 'load stored under the batch rank (10.4)');
  assert.deepEqual(
    link.aborts().map((f) => [f.engineIndex, f.decoded]),
    [[0, ['m']]],
    'one ABORT, at the sender the batch names',
  );
  // The owner's own rows still reach it.
  await link.deliverBatch(batch(1, [row('m', 'stop', [5, 6])]));
  const r = await drain(m);
  assert.equal(r.error, undefined);
  assert.deepEqual(
    r.outputs.flatMap((o) => o.newTokenIds),
    [5, 6],
    "only the owner's tokens",
  );
  // A faithful batch counts nothing.
  await link.deliverBatch(batch(0, [row('other', 'stop')]));
  assert.equal(client.stats.rankMismatches, 2);
  assert.deepEqual(inFlight(client), [0, 0]);
  await client.close();
});
