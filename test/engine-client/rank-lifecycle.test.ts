/**
 * Ranks joining, rejoining, stalling and failing as a lockstep unit (issue #8 parts 1-4), through the engine client
 * over the fake link (which plays the handshake service: `join`, `hello`, `joinFailed`).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RequestType, type GenerateRequest, type WaveEvent } from '../../src/protocols/types.js';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { createLoadPolicy, type DpPolicy } from '../../src/engine-client/policy.js';
import { batch, drain, inFlight, load, makeEngines, req, row, setup, states, tick, unreachable } from './fakes.js';

/** A load policy recording its interface-A hooks. */
function recordingPolicy(): DpPolicy & { dispatched: Array<[number, string]>; forgotten: number[] } {
  const base = createLoadPolicy();
  const dispatched: Array<[number, string]> = [];
  const forgotten: number[] = [];
  return {
    name: 'recording',
    select: (ranks, request) => base.select(ranks, request),
    onDispatch: (rank: number, r: GenerateRequest) => void dispatched.push([rank, r.requestId]),
    forgetRank: (rank: number) => void forgotten.push(rank),
    dispatched,
    forgotten,
  };
}

test('a dense group serves once one rank joined; later ranks enter rotation as they arrive; statuses follow', async () => {
  const { client, link } = setup(0, { dpSize: 3 });
  let all = false;
  void client.whenAllJoined().then(() => (all = true));
  assert.equal(client.status(), 'starting');
  assert.equal(client.canServe(), false);
  await assert.rejects(client.submit(req('early')), { kind: 'unavailable' });
  link.join(1);
  assert.equal(client.status(), 'degraded');
  assert.deepEqual(states(client), ['joining', 'ready', 'joining']);
  const a = await client.submit(req('a'));
  assert.equal(a.engineIndex, 1, 'the only ready rank');
  assert.equal(client.maxModelLen, 4097, "the first joined rank's max_model_len");
  link.join(0);
  link.join(2);
  await tick();
  assert.equal(all, true);
  assert.equal(client.status(), 'ok');
  const b = await client.submit(req('b'));
  assert.notEqual(b.engineIndex, 1, 'a new rank takes the work (rank 1 is busy)');
  assert.equal(client.maxModelLen, 4096, 'rank 0 (first in identity order) now decides');
  a.cancel();
  b.cancel();
  await client.close();
});

test('rejoin: a dead rank says HELLO (joining) and joins again with a fresh stored load, an empty in-flight set and a new epoch', async () => {
  const policy = recordingPolicy();
  const { client, link } = setup(2, { policy });
  const r1 = await client.submit(req('x'), { dpRank: 1 });
  await link.deliverBatch(batch(1, [row('x')], load(5, 3, 0.7)));
  link.sendHook = (f) => {
    if (f.engineIndex === 1 && f.type === RequestType.ABORT) throw unreachable(1);
  };
  r1.cancel(); // the ABORT is refused: rank 1 is gone
  await tick();
  assert.deepEqual(states(client), ['ready', 'dead']);
  link.sendHook = null;
  assert.equal(await link.hello(1), true, 'a dead slot lets a HELLO in at once');
  assert.deepEqual(states(client), ['ready', 'joining']);
  link.join(1);
  const st = client.rankStates()[1]!;
  assert.equal(st.state, 'ready');
  assert.equal(st.load, null, 'fresh stored load');
  assert.equal(st.inFlight, 0);
  assert.equal(st.rejoins, 1);
  assert.deepEqual(policy.forgotten, [1, 1], 'forgotten at its death and at its rejoin');
  const s = await client.submit(req('y'), { dpRank: 1 });
  assert.ok(
    policy.dispatched.some(([rank, id]) => rank === 1 && id === 'y'),
    'onDispatch for a pinned request too',
  );
  await link.deliverBatch(batch(1, [row('y', 'stop')]));
  assert.equal((await drain(s)).error, undefined);
  await client.close();
});

test('a HELLO for an index a live rank holds: the holder is probed; still answering → refused; refused EHOSTUNREACH → let in', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2);
  const held = await client.submit(req('held'), { dpRank: 0 });
  const answer = link.hello(0);
  for (let i = 0; i < 5; i++) {
    t.mock.timers.tick(5000);
    await tick();
  }
  assert.equal(await answer, false, 'two engines claim index 0: the newcomer is refused');
  assert.ok(
    link.aborts().filter((f) => f.engineIndex === 0 && (f.decoded as string[]).length === 0).length >= 1,
    'the holder was probed',
  );
  assert.deepEqual(states(client), ['ready', 'ready']);

  link.sendHook = (f) => {
    if (f.engineIndex === 0) throw unreachable(0);
  };
  const second = link.hello(0);
  t.mock.timers.tick(20);
  await tick();
  await tick();
  assert.equal(await second, true, 'the holder is gone: the newcomer is let in');
  assert.deepEqual(states(client), ['joining', 'ready']);
  assert.equal(
    ((await drain(held)).error as EngineClientError).kind,
    'engine-dead',
    "the old process's request failed",
  );
  link.sendHook = null;
  link.join(0);
  assert.deepEqual(states(client), ['ready', 'ready']);
  await client.close();
});

test('a new process joining with the index of a ready rank replaces it (cause replaced)', async () => {
  const { client, link } = setup(2);
  const old = await client.submit(req('old'), { dpRank: 1 });
  link.join(1);
  const e = (await drain(old)).error as EngineClientError;
  assert.equal(e.kind, 'engine-dead');
  assert.match(e.message, /DP rank 1 was replaced/);
  assert.deepEqual(client.rankStates()[1]!.deaths, { replaced: 1 });
  assert.equal(client.rankStates()[1]!.state, 'ready');
  await client.close();
});

test("a rank rejoining as a fresh process drops the old process's sole-client guard evidence, keeping the counts", async () => {
  let now = 0;
  const { client, link } = setup(1, { now: () => now });
  const mine = await client.submit(req('mine'));
  await link.deliverBatch(batch(0, [row('mine')], load(25, 0, 0.6))); // another client's 24 requests beside ours
  assert.equal(client.rankStates()[0]!.soleClientGuard, true);
  now = 1000;
  link.join(0); // a new process with the same index: the old one's reports say nothing about it
  assert.equal(((await drain(mine)).error as EngineClientError).kind, 'engine-dead');
  const st = client.rankStates()[0]!;
  assert.deepEqual(
    [st.soleClientGuard, st.guardEngagements, st.guardDisengagements, st.loadAgeMs, st.load],
    [false, 1, 1, null, null],
    'guard off (counted as a disengagement), no stored report, no age',
  );
  await client.close();
});

test('a rank that dies and then fails its new handshake is dead again (handshake-timeout)', async () => {
  const { client, link } = setup(1);
  const s = await client.submit(req('a'));
  link.sendHook = () => {
    throw unreachable(0);
  };
  s.cancel();
  await tick();
  link.sendHook = null;
  assert.deepEqual(states(client), ['dead']);
  assert.equal(await link.hello(0), true);
  assert.deepEqual(states(client), ['joining']);
  link.joinFailed(0);
  assert.deepEqual(
    client.rankStates().map((r) => [r.state, r.cause]),
    [['dead', 'handshake-timeout']],
  );
  await client.close();
});

test('stall: a ready rank holding requests and silent for the stall timeout leaves rotation; its requests end; it comes back when it speaks', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2, { rankStallTimeoutMs: 2000 });
  const talker = await client.submit(req('talk'), { dpRank: 0 });
  const stuck = [await client.submit(req('s1'), { dpRank: 1 }), await client.submit(req('s2'), { dpRank: 1 })];
  for (let i = 0; i < 3; i++) {
    t.mock.timers.tick(700);
    await link.deliverBatch(batch(0, [row('talk')]));
  }
  await tick();
  const errors = await Promise.all(stuck.map(async (s) => (await drain(s)).error as EngineClientError));
  assert.equal(errors[0]!.kind, 'rank-stalled');
  assert.equal(errors[0]!.dpRank, 1);
  assert.match(
    errors[0]!.message,
    /DP rank 1 stalled: it sent no output for 2000 ms while holding 2 in-flight request\(s\)/,
  );
  assert.deepEqual(states(client), ['ready', 'stalled']);
  assert.equal(client.rankStates()[1]!.stalls, 1);
  assert.equal(client.rankStates()[1]!.cause, 'stall');
  assert.deepEqual(inFlight(client), [1, 0]);
  assert.deepEqual(
    link.aborts().map((f) => [f.engineIndex, f.decoded]),
    [[1, ['s1', 's2']]],
    'ABORTs queued to the stalled rank',
  );
  assert.equal(client.status(), 'degraded');
  const fresh = await client.submit(req('fresh'));
  assert.equal(fresh.engineIndex, 0, 'new requests avoid the stalled rank');
  await assert.rejects(client.submit(req('pin'), { dpRank: 1 }), { kind: 'unavailable', message: /it is stalled/ });

  // It speaks again: back in rotation; its rows for the requests it no longer owns are dropped, counted, ABORTed once.
  await link.deliverBatch(batch(1, [row('s1'), row('s2', 'stop')]));
  assert.deepEqual(states(client), ['ready', 'ready']);
  assert.equal(client.stats.orphanOutputs, 2);
  await link.deliverBatch(batch(1, [row('s1')]));
  assert.equal(client.stats.orphanOutputs, 2, 'counted once per id');
  assert.deepEqual(
    link.aborts().map((f) => [f.engineIndex, f.decoded]),
    [
      [1, ['s1', 's2']],
      [1, ['s1']],
    ],
    's1 ABORTed again once; s2 had finished',
  );
  const pinned = await client.submit(req('pin2'), { dpRank: 1 });
  await link.deliverBatch(batch(1, [row('pin2', 'stop')]));
  assert.equal((await drain(pinned)).error, undefined);
  talker.cancel();
  fresh.cancel();
  await client.close();
});

test('stall: a rank whose requests were all ABORTed gets a one-token revival request; its answer brings it back into rotation', async (t) => {
  // TokenSpeed sends nothing for requests a client aborted (engine-wire.md 4.7), so a stalled rank that recovers (a
  // long prefill, a transient wedge) would otherwise never speak again and never get work: out of rotation for good
  // (seen with simulated ranks: SIGSTOP past the stall timeout, SIGCONT, the rank stayed stalled; two such ranks
  // left the gateway answering 503 to everything with both engines idle and healthy).
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2, { rankStallTimeoutMs: 2000 });
  const talker = await client.submit(req('talk'), { dpRank: 0 });
  const stuck = await client.submit(req('s1'), { dpRank: 1 });
  for (let i = 0; i < 3; i++) {
    t.mock.timers.tick(700);
    await link.deliverBatch(batch(0, [row('talk')]));
  }
  await tick();
  assert.equal(((await drain(stuck)).error as EngineClientError).kind, 'rank-stalled');
  assert.deepEqual(states(client), ['ready', 'stalled']);
  const sentToStalled = link.sent.filter((f) => f.engineIndex === 1).map((f) => f.type);
  assert.deepEqual(
    sentToStalled,
    [RequestType.ADD, RequestType.ABORT, RequestType.ADD],
    'the ABORT, then one revival ADD behind it',
  );
  const revival = link.adds().filter((f) => f.engineIndex === 1)[1]!.decoded as { rid: string; prompt: number[] };
  assert.equal(revival.prompt.length, 1, 'a one-token prompt');
  assert.equal(client.registeredCount, 1, 'the revival request is not a client request');
  await link.deliverBatch(batch(1, [row(revival.rid, 'length')]));
  assert.deepEqual(states(client), ['ready', 'ready']);
  assert.equal(client.stats.orphanOutputs, 0);
  assert.deepEqual(inFlight(client), [1, 0]);
  talker.cancel();
  await client.close();
});

test('an ordinary late row after a client cancel is dropped silently (not an orphan)', async () => {
  const { client, link } = setup(1);
  const s = await client.submit(req('a'));
  s.cancel();
  await link.deliverBatch(batch(0, [row('a')]));
  assert.equal(client.stats.orphanOutputs, 0);
  assert.equal(link.aborts().length, 1);
  await client.close();
});

// ---------------------------------------------------------------------------------------------------------------
// Lockstep groups fail as a unit and are rebuilt (dp-routing.md 13)

function lockstep(n: number, opts: Parameters<typeof setup>[1] = {}) {
  return setup(makeEngines(n, { dataParallelSize: n }), { waves: true, ...opts });
}

function waveBatch(rank: number, kind: WaveEvent['kind'], wave: number) {
  return { engineIndex: rank, outputs: [], finishedRequestIds: [], wave: { kind, wave } };
}

test('lockstep: a group serves only once every rank joined', async () => {
  const { client, link } = setup([], { waves: true, dpSize: 2 });
  link.join({ ...makeEngines(1, { dataParallelSize: 2 })[0]! });
  assert.equal(client.lockstep, true, 'detected from the first ready response');
  assert.equal(client.status(), 'starting');
  await assert.rejects(client.submit(req('a')), {
    kind: 'unavailable',
    message: /a lockstep group needs every rank ready/,
  });
  link.join({ ...makeEngines(2, { dataParallelSize: 2 })[1]! });
  assert.equal(client.status(), 'ok');
  (await client.submit(req('b'))).cancel();
  await client.close();
});

test('lockstep: one rank dies → every request of the group fails, the survivor gets ABORTs; rebuilt once it rejoins, clock kept', async () => {
  const { client, link } = lockstep(2);
  const failed: EngineClientError[] = [];
  client.on('failed', (e) => failed.push(e));
  const on0 = await client.submit(req('r0'), { dpRank: 0 });
  const on1 = await client.submit(req('r1'), { dpRank: 1 });
  await link.deliverBatch(waveBatch(0, 'complete', 6)); // clock → 7
  assert.equal(client.waveClock, 7);
  link.sendHook = (f) => {
    if (f.engineIndex === 1 && f.type === RequestType.ABORT) throw unreachable(1);
  };
  on1.cancel(); // its ABORT finds rank 1 gone
  await tick();
  link.sendHook = null;
  const e = (await drain(on0)).error as EngineClientError;
  assert.equal(e.kind, 'engine-dead');
  assert.match(e.message, /DP rank 1 is gone/);
  assert.equal(failed.length, 1);
  assert.deepEqual(client.stats.failures, { 'peer-unreachable': 1 });
  assert.deepEqual(states(client), ['ready', 'dead']);
  assert.deepEqual(
    link
      .aborts()
      .filter((f) => f.engineIndex === 0)
      .map((f) => f.decoded),
    [['r0']],
    'the survivor drops what it held',
  );
  assert.equal(client.canServe(), false);
  assert.equal(client.status(), 'unavailable');
  await assert.rejects(client.submit(req('x')), { kind: 'unavailable' });
  link.join({ ...makeEngines(2, { dataParallelSize: 2 })[1]! });
  assert.equal(client.status(), 'ok');
  assert.equal(client.waveClock, 7, 'rank 0 survived with its wave number: the clock never moves backwards');
  const s = await client.submit(req('after'));
  assert.deepEqual(
    link
      .waves()
      .slice(-2)
      .map((f) => f.decoded),
    [
      [8, null],
      [8, null],
    ],
  );
  s.cancel();
  await client.close();
});

test('lockstep: when every rank is a new process the wave clock restarts at 0; one at a time it is kept', async () => {
  const { client, link } = lockstep(2);
  await link.deliverBatch(waveBatch(0, 'complete', 6));
  assert.equal(client.waveClock, 7);
  const engines = makeEngines(2, { dataParallelSize: 2 });
  link.join(engines[0]!); // replaces rank 0 while rank 1 survives
  assert.equal(client.status(), 'ok', 'rank 1 never left, so the group serves again at once');
  assert.equal(client.waveClock, 7, 'rank 1 keeps its wave number: the clock is kept');
  // Rank 0 goes (its ABORT is refused): the group is down; then both ranks come back as new processes.
  link.sendHook = (f) => {
    if (f.type === RequestType.ABORT) throw unreachable(f.engineIndex);
  };
  const s = await client.submit(req('t0'), { dpRank: 0 });
  s.cancel();
  await tick();
  link.sendHook = null;
  assert.deepEqual(states(client), ['dead', 'ready'], 'rank 0 is gone; the group is down');
  await assert.rejects(client.submit(req('pinned'), { dpRank: 1 }), {
    kind: 'unavailable',
    message: /lockstep group is not serving/,
  });
  link.join(engines[1]!); // rank 1 replaced too
  assert.deepEqual(states(client), ['dead', 'ready']);
  link.join(engines[0]!);
  assert.equal(client.status(), 'ok');
  assert.equal(client.waveClock, 0, 'every rank is a process that joined after the failure: the clock restarts at 0');
  await client.close();
});

test('lockstep: a stalled rank fails the group (its peers wait on it); the group serves again when it speaks', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = lockstep(2, { rankStallTimeoutMs: 1000 });
  const a = await client.submit(req('a'), { dpRank: 0 });
  const b = await client.submit(req('b'), { dpRank: 1 });
  t.mock.timers.tick(500);
  await link.deliverBatch(batch(0, [row('a')]));
  t.mock.timers.tick(500);
  await tick();
  assert.equal(((await drain(b)).error as EngineClientError).kind, 'rank-stalled');
  assert.equal(((await drain(a)).error as EngineClientError).kind, 'rank-stalled');
  assert.deepEqual(states(client), ['ready', 'stalled']);
  assert.deepEqual(
    link
      .aborts()
      .map((f) => [f.engineIndex, f.decoded])
      .sort(),
    [
      [0, ['a']],
      [1, ['b']],
    ],
  );
  assert.equal(client.canServe(), false);
  await link.deliverBatch(batch(1, []));
  assert.equal(client.canServe(), true);
  await client.close();
});

// ---------------------------------------------------------------------------------------------------------------
// Shutdown after a drain

test('shutdown(message): live requests end with client-closed carrying the message; their ranks get ABORTs', async () => {
  const { client, link } = setup(2);
  const a = await client.submit(req('a'), { dpRank: 0 });
  const b = await client.submit(req('b'), { dpRank: 1 });
  await client.shutdown('the shutdown grace of 10 ms ran out');
  for (const s of [a, b]) {
    const e = (await drain(s)).error as EngineClientError;
    assert.equal(e.kind, 'client-closed');
    assert.match(e.message, /the shutdown grace of 10 ms ran out/);
  }
  assert.deepEqual(
    link.aborts().map((f) => [f.engineIndex, f.decoded]),
    [
      [0, ['a']],
      [1, ['b']],
    ],
  );
  assert.equal(client.isAlive(), false);
  await assert.rejects(client.submit(req('late')), {
    kind: 'client-closed',
    message: /the shutdown grace of 10 ms ran out/,
  });
});
