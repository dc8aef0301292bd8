/**
 * The load-signal guards of issue 12 (dp-routing.md 14.1-14.3, 14.5): TokenSpeed's running count scored without a
 * double count, report ageing, the dark-fleet fallback, and the sole-client guard that suspends zero-on-empty.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import {
  DEFAULT_LOAD_HORIZON_MS,
  createLoadPolicy,
  fleetScorer,
  isDarkFleet,
  loadScore,
  loadScorer,
  loadWeight,
  queuedRequests,
  type RankView,
} from '../../src/engine-client/policy.js';
import {
  ABORT_MAX_REPORTS,
  ABORT_QUIET_REPORTS,
  SOLE_CLIENT_AGREEING_REPORTS,
  SOLE_CLIENT_SLACK,
  soleClientVerdict,
  type SoleClientGuard,
} from '../../src/engine-client/routing-state.js';
import { EngineClient } from '../../src/engine-client/client.js';
import { RequestType } from '../../src/protocols/types.js';
import {
  decodeAbortPayload,
  decodeTokenizedGenerateReqInput,
  encodeBatchTokenIDOutSlim,
  tokenspeedProtocol,
} from '../../src/protocols/tokenspeed/index.js';
import { encodeSimBatch } from '../../src/sim/output.js';
import { SimScheduler, type SimRequest } from '../../src/sim/scheduler.js';
import { schedulerStatsOf } from '../../src/sim/vllm-wire.js';
import { loadFromSchedulerStats } from '../../src/protocols/vllm/stats.js';
import { FakeLink, batch, drain, inFlight, load, req, row, setup } from './fakes.js';
import { scriptedRequest } from '../sim/helpers.js';

const view = (engineIndex: number, inFlight: number, l: RankView['load'] = null, loadAgeMs?: number): RankView => ({
  engineIndex,
  inFlight,
  load: l,
  ...(loadAgeMs !== undefined ? { loadAgeMs } : {}),
});

function simReq(rid: string, promptLen: number): SimRequest {
  return scriptedRequest(
    rid,
    Array.from({ length: promptLen }, (_, i) => 100 * rid.charCodeAt(0) + i),
    5,
  );
}

test('14.2: a TokenSpeed backlog scores like the same vLLM backlog, pinned by what each simulated wire reports', () => {
  // Same rank state on both engines: 2 running, 3 waiting (max_running 2).
  const loads = (['tokenspeed', 'vllm'] as const).map((finishRules) => {
    const s = new SimScheduler({
      engineIndex: 0,
      maxRunning: 2,
      kvTotalPages: 100,
      maxModelLen: 4096,
      eosTokenIds: [999],
      finishRules,
    });
    for (const rid of ['a', 'b', 'c', 'd', 'e']) s.add(simReq(rid, 8));
    const plan = s.plan();
    const b = s.commit();
    assert.ok(b);
    if (finishRules === 'tokenspeed') {
      assert.deepEqual(
        [plan.tail.numRunning, plan.tail.numWaiting],
        [5, 3],
        'num_running counts the waiting ones too (4.9)',
      );
      return tokenspeedProtocol.decodeOutput([encodeSimBatch(b)]).load;
    }
    const stats = schedulerStatsOf({
      engineIndex: 0,
      rows: b.rows,
      tail: b.tail,
      state: s.state(),
      kvTotalPages: 100,
      stepCounter: 1,
      currentWave: 0,
    });
    assert.deepEqual([stats.num_running_reqs, stats.num_waiting_reqs], [2, 3], 'vLLM counts are disjoint (5.10)');
    return loadFromSchedulerStats(stats);
  });
  const [ts, vl] = loads;
  assert.ok(ts && vl);
  assert.equal(ts.runningIncludesWaiting, true);
  assert.equal(vl.runningIncludesWaiting, undefined);
  assert.equal(queuedRequests(ts), 5, 'max(5, 3): the 3 waiting are not counted twice');
  assert.equal(queuedRequests(vl), 5, '2 + 3');
  assert.equal(loadScore(view(0, 0, ts)), loadScore(view(1, 0, vl)), 'same backlog, same score');
  assert.equal(
    queuedRequests({ numRunning: 1, numWaiting: 4, kvCacheUsage: 0, runningIncludesWaiting: true }),
    4,
    'never below the queue',
  );
});

test('14.1 ageing: a report counts fully when fresh, linearly less with age, not at all at the horizon', () => {
  assert.equal(loadWeight(undefined, 1000), 1);
  assert.equal(loadWeight(null, 1000), 1);
  assert.equal(loadWeight(0, 1000), 1);
  assert.equal(loadWeight(250, 1000), 0.75);
  assert.equal(loadWeight(1000, 1000), 0);
  assert.equal(loadWeight(5000, 1000), 0);
  assert.equal(loadWeight(Number.NaN, 1000), 1);
  const score = loadScorer(1000);
  const busy = load(6, 4, 0.75); // queued 10, KV penalty 4 × 6 × 0.25 = 6
  assert.equal(score(view(0, 1, busy, 0)), 16);
  assert.equal(score(view(0, 1, busy, 500)), 8, 'half the queue and half the penalty');
  assert.equal(score(view(0, 1, busy, 1000)), 1, 'past the horizon: the own in-flight count alone');
  assert.equal(score(view(0, 3, load(6, 4, 0.4), 900)), 3, 'the in-flight floor still holds');
  assert.equal(DEFAULT_LOAD_HORIZON_MS, 5000);
  assert.throws(() => createLoadPolicy({ loadHorizonMs: 0 }), RangeError);
});

test('14.5 dark fleet: with no fresh report anywhere, join-shortest-queue on in-flight with rotating ties', () => {
  const stale = [
    view(0, 2, load(0, 0), 9000),
    view(1, 1, load(40, 40, 1), 9000),
    view(2, 1, null),
    view(3, 3, load(1, 0), 6000),
  ];
  assert.equal(isDarkFleet(stale, 5000), true);
  assert.deepEqual(stale.map(fleetScorer(stale, 5000)), [2, 1, 1, 3], 'own in-flight only');
  const policy = createLoadPolicy({ loadHorizonMs: 5000 });
  const picks = Array.from({ length: 4 }, () => policy.select(stale, req('x')));
  assert.deepEqual(picks, [1, 1, 2, 1], 'ranks 1 and 2 tie at 1; the scan start rotates 0, 1, 2, 3');
  const oneFresh = [...stale.slice(0, 3), view(3, 3, load(1, 0), 10)];
  assert.equal(isDarkFleet(oneFresh, 5000), false);
  assert.equal(isDarkFleet([], 5000), true);
});

test('14.1 / 14.5 through the client: a stale busy rank becomes eligible again as its report ages; nothing is ever refused', async () => {
  let now = 0;
  const { client, link } = setup(2, { policy: createLoadPolicy({ loadHorizonMs: 1000 }), now: () => now });
  const held = await client.submit(req('held'), { dpRank: 0 });
  await link.deliverBatch(batch(0, [row('held')], load(9, 0, 0.2))); // r0 reports 9 (8 of them someone else's)
  assert.equal((await client.submit(req('a'))).engineIndex, 1, 'fresh: r0 scores 9');
  now = 500;
  assert.equal(client.rankStates()[0].loadAgeMs, 500);
  assert.equal((await client.submit(req('b'))).engineIndex, 1, 'half-aged: r0 scores 4.5, r1 holds 1');
  now = 1000;
  // Dark fleet: r0's report is out, r1 never reported. JSQ on in-flight: r0 holds 1, r1 holds 2.
  assert.equal((await client.submit(req('c'))).engineIndex, 0);
  for (let i = 0; i < 6; i++) await client.submit(req(`d${i}`)); // always accepted, spread by in-flight
  assert.deepEqual(inFlight(client), [5, 5]);
  held.cancel();
  await client.close();
});

const IDLE: SoleClientGuard = { engaged: false, agreeing: 0, lastExcess: 0, engagements: 0, disengagements: 0 };

test('14.3 sole-client verdict: engages on a clear excess, not within lag or slack; disengages after agreeing reports', () => {
  const within = soleClientVerdict(IDLE, { reported: 10, own: 3, recentlyReleased: 5, aborting: 0 });
  assert.equal(within.transition, null, `excess 2 ≤ slack ${SOLE_CLIENT_SLACK}: recent releases explain it`);
  const foreign = soleClientVerdict(IDLE, { reported: 10, own: 3, recentlyReleased: 0, aborting: 0 });
  assert.equal(foreign.transition, 'engaged');
  assert.deepEqual(foreign.guard, { engaged: true, agreeing: 0, lastExcess: 7, engagements: 1, disengagements: 0 });
  let g = foreign.guard;
  for (let i = 1; i < SOLE_CLIENT_AGREEING_REPORTS; i++) {
    const r = soleClientVerdict(g, { reported: 3, own: 3, recentlyReleased: 0, aborting: 0 });
    assert.equal(r.transition, null);
    g = r.guard;
  }
  // A foreign report in between restarts the count.
  g = soleClientVerdict(g, { reported: 12, own: 3, recentlyReleased: 0, aborting: 0 }).guard;
  assert.equal(g.agreeing, 0);
  for (let i = 0; i < SOLE_CLIENT_AGREEING_REPORTS - 1; i++)
    g = soleClientVerdict(g, { reported: 2, own: 3, recentlyReleased: 0, aborting: 0 }).guard;
  const off = soleClientVerdict(g, { reported: 2, own: 3, recentlyReleased: 0, aborting: 0 });
  assert.equal(off.transition, 'disengaged');
  assert.deepEqual(
    { engaged: off.guard.engaged, engagements: off.guard.engagements, disengagements: off.guard.disengagements },
    { engaged: false, engagements: 1, disengagements: 1 },
  );
});

test("14.3 through the client: another client's work suspends zero-on-empty for that rank, with a log line; agreement resumes it", async () => {
  const lines: Array<Record<string, unknown>> = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  let now = 0;
  const { client, link } = setup(2, { logger, now: () => now });
  const mine = await client.submit(req('mine'), { dpRank: 1 });
  // r1 runs 24 requests of another client beside ours.
  await link.deliverBatch(batch(1, [row('mine')], load(25, 0, 0.6)));
  let s = client.rankStates()[1];
  assert.equal(s.soleClientGuard, true);
  assert.equal(s.guardEngagements, 1);
  const warn = lines.find((l) => l.level === 40 && /another client is using the engine/.test(String(l.msg)));
  assert.ok(warn, 'one warning when the guard engages');
  assert.deepEqual([warn.engineIndex, warn.reported, warn.own], [1, 25, 1]);
  // Our request finishes: the set empties, but the report is not erased.
  await link.deliverBatch(batch(1, [row('mine', 'stop')], load(25, 0, 0.6)));
  await drain(mine);
  s = client.rankStates()[1];
  assert.deepEqual(s.load, load(25, 0, 0.6), 'zero-on-empty suspended: the foreign work stays visible');
  assert.equal(s.clampEvents, 0);
  assert.equal((await client.submit(req('next'))).engineIndex, 0, 'r1 is avoided while its report is fresh');
  now = 6000; // past the default horizon: the report ages out instead, and r1 is tried again
  const probe = await client.submit(req('probe'));
  assert.equal(probe.engineIndex, 1);
  // The other client left: r1's reports agree with our count again.
  for (let i = 0; i < SOLE_CLIENT_AGREEING_REPORTS; i++)
    await link.deliverBatch(batch(1, [row('probe')], load(1, 0, 0.1)));
  s = client.rankStates()[1];
  assert.equal(s.soleClientGuard, false);
  assert.equal(s.guardDisengagements, 1);
  assert.ok(lines.some((l) => l.level === 30 && /zero-on-empty resumed/.test(String(l.msg))));
  await link.deliverBatch(batch(1, [row('probe', 'stop')], load(3, 0, 0.1)));
  assert.deepEqual(client.rankStates()[1].load, load(0, 0, 0.1), 'the clamp works again');
  assert.equal(client.rankStates()[0].soleClientGuard, false, 'r0 never showed foreign work');
  await client.close();
});

test('14.3: releases the engine has not seen yet (aborts, just-finished requests) do not look like another client', async () => {
  const { client, link } = setup(1);
  const streams = [];
  for (let i = 0; i < 10; i++) streams.push(await client.submit(req(`r${i}`)));
  for (const st of streams.slice(0, 8)) st.cancel(); // 8 ABORTs on their way
  // The next report still counts all 10 (sampled before the engine applied the aborts).
  await link.deliverBatch(batch(0, [row('r8'), row('r9')], load(10, 0, 0.3)));
  assert.equal(client.rankStates()[0].soleClientGuard, false);
  // And the one after that may still lag a round (TokenSpeed's overlap schedule, engine-wire.md 4.9).
  await link.deliverBatch(batch(0, [row('r8', 'stop'), row('r9', 'stop')], load(10, 0, 0.3)));
  assert.equal(client.rankStates()[0].soleClientGuard, false);
  assert.deepEqual(client.rankStates()[0].load, load(0, 0, 0.3), 'clamped as usual');
  await client.close();
});

/**
 * Issue 26: the real TokenSpeed wire between a fake link and the client. An ADD's rid and an ABORT's ids are decoded
 * with the real codecs; batches are real 14-element `BatchTokenIDOutSlim` payloads.
 */
function tokenspeedSetup(ranks: number, now: () => number) {
  const link = new FakeLink(ranks, (type, payload) =>
    type === RequestType.ABORT ? decodeAbortPayload(payload) : { rid: decodeTokenizedGenerateReqInput(payload).rid },
  );
  const client = new EngineClient({ protocol: tokenspeedProtocol, link, now });
  return { client, link };
}

/** A TokenSpeed batch from `rank`: one running row (one token) per rid, and the load tail (running, waiting, 1000 pages). */
function slim(rank: number, rids: readonly string[], running: number, kvActive = 300): Uint8Array {
  const n = rids.length;
  return encodeBatchTokenIDOutSlim(
    {
      rids: [...rids],
      output_ids: rids.map(() => [7]),
      finished_reasons: rids.map(() => ''),
      prompt_tokens: rids.map(() => 3),
      completion_tokens: rids.map(() => 1),
      cached_tokens: rids.map(() => 0),
      output_token_logprobs_val: rids.map(() => []),
      output_token_logprobs_idx: rids.map(() => []),
      engine_index: rank,
      num_running: running,
      num_waiting: 0,
      kv_active_pages: n === 0 ? 0 : kvActive,
      kv_total_pages: 1000,
    },
    { form: 14 },
  );
}

test("issue 26: a burst of client disconnects is the gateway's own load while the engine applies the ABORTs; the rank keeps its share", async () => {
  let now = 0;
  const { client, link } = tokenspeedSetup(2, () => now);
  const gone = Array.from({ length: 16 }, (_, i) => `gone-${i}`);
  const stay = Array.from({ length: 4 }, (_, i) => `stay-${i}`);
  const goneStreams = [];
  for (const id of gone) goneStreams.push(await client.submit(req(id), { dpRank: 0 }));
  for (const id of stay) await client.submit(req(id), { dpRank: 1 });
  const deliver = (frame: Uint8Array) => link.deliver({ kind: 'frames', frames: [frame] });
  await deliver(slim(0, gone, 16));
  await deliver(slim(1, stay, 4));
  // The 16 clients disconnect one after another while the engine keeps stepping every 5 ms: it applies the ABORTs
  // ~0.1 s later, and until then every batch still carries their rows and counts them running (engine-wire.md 4.7, 4.9).
  for (let i = 0; i < gone.length; i++) {
    goneStreams[i]!.cancel();
    now += 5;
    await deliver(slim(0, gone, 16));
  }
  for (let step = 0; step < 20; step++) {
    now += 5;
    await deliver(slim(0, gone, 16));
    await deliver(slim(1, stay, 4));
  }
  // The ABORTs are applied; the rank has nothing left to run and goes quiet (no further batch, engine-wire.md 4.9).
  const aborted = new Set(link.aborts().flatMap((f) => f.decoded as string[]));
  assert.deepEqual([...aborted].sort(), [...gone].sort(), 'each disconnect sent its ABORT');
  const r0 = client.rankStates()[0]!;
  assert.equal(r0.soleClientGuard, false, "its own ABORTed requests are not another client's work");
  assert.equal(r0.guardEngagements, 0);
  assert.deepEqual(
    r0.load,
    { ...load(0, 0, 0.3), runningIncludesWaiting: true },
    'zero-on-empty held through the late batches',
  );
  // 0.1 s after the burst, 32 unpinned requests: r0 (idle) takes its share; r1 holds 4.
  now += 100;
  const picks = [0, 0];
  for (let i = 0; i < 32; i++) picks[(await client.submit(req(`new-${i}`))).engineIndex!]! += 1;
  assert.ok(
    picks[0]! >= 16,
    `the idle rank takes at least half of the new requests, got ${picks[0]} of 32 (${picks[1]} on r1)`,
  );
  await client.close();
});

test("issue 26: ABORTed requests stop explaining a rank's load once its reports go quiet about them; foreign load still engages the guard", async () => {
  const now = 0; // report counts decide here, not time: the clock stays put
  const { client, link } = tokenspeedSetup(1, () => now);
  const deliver = (frame: Uint8Array) => link.deliver({ kind: 'frames', frames: [frame] });
  const ids = ['a', 'b', 'c', 'd', 'e'];
  const streams = [];
  for (const id of ids) streams.push(await client.submit(req(id)));
  for (const s of streams) s.cancel();
  // Rows for the aborted ids keep coming: they explain the report (5 running, 0 in flight).
  for (let i = 0; i < 10; i++) await deliver(slim(0, ids, 5));
  assert.equal(client.rankStates()[0]!.soleClientGuard, false);
  // The engine dropped them, but the rank keeps reporting 5 running through a live request: not ours.
  const mine = await client.submit(req('mine'));
  for (let i = 0; i < ABORT_QUIET_REPORTS; i++) await deliver(slim(0, ['mine'], 6));
  assert.equal(
    client.rankStates()[0]!.soleClientGuard,
    false,
    `within ${ABORT_QUIET_REPORTS} quiet reports the ABORTs may still lag`,
  );
  await deliver(slim(0, ['mine'], 6));
  assert.equal(client.rankStates()[0]!.soleClientGuard, true, 'then the 5 are load the gateway cannot explain');
  mine.cancel();
  await client.close();
});

test('issue 26: a report explained without the ABORTed requests forgets them at once; an engine that ignores ABORTs is not explained forever', async () => {
  const now = 0; // report counts decide here, not time: the clock stays put
  const { client, link } = tokenspeedSetup(1, () => now);
  const deliver = (frame: Uint8Array) => link.deliver({ kind: 'frames', frames: [frame] });
  const first = await client.submit(req('x'));
  const kept = await client.submit(req('kept'));
  first.cancel();
  await deliver(slim(0, ['x', 'kept'], 2));
  await deliver(slim(0, ['kept'], 1)); // the engine let go of x: explained by the one request in flight
  await deliver(slim(0, ['kept'], 9)); // 8 more now are another client's
  assert.equal(client.rankStates()[0]!.soleClientGuard, true, 'x no longer excuses foreign load');
  kept.cancel();
  await client.close();

  // An engine that keeps streaming an ABORTed request: it explains the load for ABORT_MAX_REPORTS reports only.
  const other = tokenspeedSetup(1, () => now);
  const many = Array.from({ length: 6 }, (_, i) => `m${i}`);
  const streams = [];
  for (const id of many) streams.push(await other.client.submit(req(id)));
  for (const s of streams) s.cancel();
  for (let i = 0; i < ABORT_MAX_REPORTS; i++) await other.link.deliver({ kind: 'frames', frames: [slim(0, many, 6)] });
  assert.equal(other.client.rankStates()[0]!.soleClientGuard, false);
  await other.link.deliver({ kind: 'frames', frames: [slim(0, many, 6)] });
  assert.equal(
    other.client.rankStates()[0]!.soleClientGuard,
    true,
    'still streaming after ABORT_MAX_REPORTS reports: not honouring the ABORT',
  );
  await other.client.close();
});
