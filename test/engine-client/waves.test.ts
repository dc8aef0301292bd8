/**
 * Lockstep waves (dp-routing.md section 13; engine-wire.md 5.7, 5.12): detection, the wave clock, `wake_group()`
 * after every successful ADD, `observe_wave`, the SMG tests named in 13.4 (PR #2078 and follow-ups), the 2-rank
 * timeline of 13.4, and the submit rollback of a failed wake (section 3 step 6).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { RequestType, type EngineBatch, type WaveEvent } from '../../src/protocols/types.js';
import { WaveClock } from '../../src/engine-client/waves.js';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { prng } from '../helpers/prng.js';
import {
  FakeSendTimeoutError,
  FakeTransportError,
  READY,
  batch,
  drain,
  inFlight,
  makeEngines,
  req,
  row,
  setup,
  unreachable,
  type SentFrame,
} from './fakes.js';

/** A lockstep group of `n` ranks (every ready response says data_parallel_size = n) over a vLLM-like protocol. */
function lockstep(n = 2, opts: Parameters<typeof setup>[1] = {}) {
  return setup(makeEngines(n, { dataParallelSize: n }), { waves: true, ...opts });
}

/** A wave notification batch from `rank` (engine-wire.md 5.8: an otherwise empty envelope). */
function waveBatch(rank: number, kind: WaveEvent['kind'], wave: number): EngineBatch {
  return { engineIndex: rank, outputs: [], finishedRequestIds: [], wave: { kind, wave } };
}

/** [type, engineIndex, decoded] of each frame, for compact order assertions. */
function frames(sent: readonly SentFrame[]): [string, number, unknown][] {
  const name = (t: number) =>
    t === RequestType.ADD
      ? 'ADD'
      : t === RequestType.ABORT
        ? 'ABORT'
        : t === RequestType.START_DP_WAVE
          ? 'WAVE'
          : `?${t}`;
  return sent.map((f) => [
    name(f.type),
    f.engineIndex,
    f.type === RequestType.ADD ? (f.decoded as { rid: string }).rid : f.decoded,
  ]);
}

test('WaveClock: lockstep iff ANY rank reports data_parallel_size > 1; clock starts at 0; bump, observe, saturation', () => {
  const dense = new WaveClock(makeEngines(3));
  assert.equal(dense.lockstep, false);
  assert.equal(dense.value, null, 'no clock without lockstep');
  assert.equal(dense.bump(), null);
  assert.equal(dense.observe({ kind: 'start', wave: 4 }), 'ignored');

  const mixed = makeEngines(3);
  mixed[2] = { ...mixed[2], ready: { ...READY, dataParallelSize: 2 } };
  const c = new WaveClock(mixed);
  assert.equal(c.lockstep, true, 'one rank is enough (13.1)');
  assert.equal(c.value, 0);
  assert.equal(c.bump(), 1);
  assert.equal(c.observe({ kind: 'complete', wave: 7 }), 'updated');
  assert.equal(c.value, 8, 'complete(w) → max(clock, w + 1)');
  assert.equal(c.observe({ kind: 'complete', wave: 2 }), 'updated');
  assert.equal(c.value, 8, 'never goes back');
  assert.equal(c.observe({ kind: 'start', wave: 20 }), 'wake');
  assert.equal(c.value, 20, 'start(w) → max(clock, w); the wake then bumps');
  assert.equal(c.observe({ kind: 'start', wave: 3 }), 'wake');
  assert.equal(c.value, 20);
  assert.equal(c.bump(), 21);
  c.observe({ kind: 'complete', wave: Number.MAX_SAFE_INTEGER });
  assert.equal(c.bump(), Number.MAX_SAFE_INTEGER, 'saturates instead of losing precision');
});

test('SMG first_submit_wakes_the_paused_lockstep_group: ADD, then [1, nil] to every rank in list order, holder included', async () => {
  const { client, link } = lockstep(3);
  assert.equal(client.lockstep, true);
  assert.equal(client.waveClock, 0);
  const s = await client.submit(req('a'), { dpRank: 1 });
  assert.deepEqual(frames(link.sent), [
    ['ADD', 1, 'a'],
    ['WAVE', 0, [1, null]],
    ['WAVE', 1, [1, null]],
    ['WAVE', 2, [1, null]],
  ]);
  assert.equal(client.waveClock, 1);
  await link.deliverBatch(batch(1, [row('a', 'stop')]));
  assert.equal((await drain(s)).outputs.length, 1);
  await client.close();
});

test('SMG every_wake_names_a_wave_the_ranks_will_accept: a model group under random parks and late notices', async () => {
  // The group model of engine-wire.md 5.12: ranks share wave W; a START naming w < W is ignored (fatal here: the
  // holder would step alone and vLLM would kill it at its RPC timeout); parked + START(w ≥ W) → W = w, running;
  // draining parks the group and increments W, and the wave_complete(W − 1) notice reaches the client late.
  const rand = prng(20260813);
  const { client, link } = lockstep(2);
  const group = { wave: 0, running: false };
  const notices: number[] = [];
  const accepted: number[] = [];
  link.sendHook = (f) => {
    if (f.type !== RequestType.START_DP_WAVE) return;
    const [w] = f.decoded as [number, null];
    assert.ok(w >= group.wave, `START_DP_WAVE [${w}, nil] is below the ranks' wave ${group.wave}: it would be ignored`);
    accepted.push(w);
    if (!group.running) {
      group.wave = w;
      group.running = true;
    }
  };
  let n = 0;
  for (let step = 0; step < 300; step++) {
    const r = rand();
    if (r < 0.4) {
      const id = `q${n++}`;
      const s = await client.submit(req(id));
      assert.equal(group.running, true, 'after a submit the group is running: the request makes progress');
      await link.deliverBatch(batch(link.rankOf(id), [row(id, 'stop')]));
      await drain(s);
    } else if (r < 0.7 && group.running) {
      group.running = false; // drained: every rank parks and moves to the next wave
      group.wave += 1;
      notices.push(group.wave - 1);
    } else if (notices.length > 0) {
      const i = Math.floor(rand() * notices.length); // notices arrive late and out of order
      const [w] = notices.splice(i, 1);
      await link.deliverBatch(waveBatch(Math.floor(rand() * 2), 'complete', w));
    }
  }
  assert.ok(n > 50 && accepted.length === 2 * n, `${n} submits, ${accepted.length} wave frames`);
  for (let i = 2; i < accepted.length; i += 2) {
    assert.ok(accepted[i] > accepted[i - 2], 'every wake names a higher wave than the previous one');
  }
  await client.close();
});

test('SMG independent_ranks_are_never_woken: data_parallel_size 1 everywhere → no START_DP_WAVE, no clock', async () => {
  const { client, link } = setup(makeEngines(2), { waves: true }); // the protocol could send waves; the group is dense
  assert.equal(client.lockstep, false);
  assert.equal(client.waveClock, null);
  for (const id of ['a', 'b', 'c']) await client.submit(req(id));
  assert.deepEqual(
    link.sent.map((f) => f.type),
    [RequestType.ADD, RequestType.ADD, RequestType.ADD],
  );
  assert.equal(link.waves().length, 0);
  await client.close();
});

test('SMG a_ranks_start_wave_request_wakes_the_whole_group: start(w) → clock max(clock, w), broadcast clock + 1', async () => {
  const { client, link } = lockstep(2);
  await link.deliverBatch(waveBatch(1, 'start', 5));
  assert.deepEqual(frames(link.sent), [
    ['WAVE', 0, [6, null]],
    ['WAVE', 1, [6, null]],
  ]);
  assert.equal(client.waveClock, 6);
  await link.deliverBatch(waveBatch(0, 'start', 2)); // an old wave: the clock stays, the wake still goes out
  assert.deepEqual(frames(link.waves().slice(2)), [
    ['WAVE', 0, [7, null]],
    ['WAVE', 1, [7, null]],
  ]);
  assert.equal(client.isAlive(), true);
  await client.close();
});

test('SMG wave_complete_updates_the_clock_without_waking: complete(7) → clock 8, nothing sent; the next wake sends 9', async () => {
  const { client, link } = lockstep(2);
  await link.deliverBatch(waveBatch(0, 'complete', 7));
  assert.equal(link.sent.length, 0, 'no wake on wave complete');
  assert.equal(client.waveClock, 8);
  await link.deliverBatch(waveBatch(1, 'complete', 3));
  assert.equal(client.waveClock, 8, 'a stale notice does not move the clock back');
  await client.submit(req('a'));
  assert.deepEqual(
    link.waves().map((f) => f.decoded),
    [
      [9, null],
      [9, null],
    ],
  );
  await client.close();
});

test('SMG wave_notifications_from_independent_ranks_are_ignored: logged, nothing sent, no clock', async () => {
  const lines: Array<{ msg: string; level: number }> = [];
  const logger = pino({ level: 'warn' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  const { client, link } = setup(makeEngines(2), { waves: true, logger });
  await link.deliverBatch(waveBatch(0, 'complete', 7));
  await link.deliverBatch(waveBatch(1, 'start', 5));
  assert.equal(link.sent.length, 0);
  assert.equal(client.waveClock, null);
  assert.equal(
    lines.filter((l) => /wave notification .*not lockstep ignored/.test(l.msg)).length,
    2,
    JSON.stringify(lines),
  );
  await client.submit(req('a'));
  assert.equal(link.waves().length, 0);
  assert.equal(client.isAlive(), true);
  await client.close();
});

test('13.4 timeline (2 lockstep ranks): 0 → pinned r1 wakes 1 → r0 wakes 2 → r0 reports complete 7 → clock 8 → next wake 9', async () => {
  const { client, link, protocol } = lockstep(2);
  assert.equal(client.waveClock, 0, '1. connect: clock 0');
  await client.submit(req('r1'), { dpRank: 1 });
  assert.deepEqual(
    frames(link.sent),
    [
      ['ADD', 1, 'r1'],
      ['WAVE', 0, [1, null]],
      ['WAVE', 1, [1, null]],
    ],
    '2.',
  );
  assert.deepEqual(protocol.addTargets[0], { dpRank: 1 }, 'the pin reaches the payload (vLLM data_parallel_rank)');
  // 3. The group drains and parks (ranks move to wave 2); the client has not seen wave_complete yet.
  await client.submit(req('r2'), { dpRank: 0 });
  assert.deepEqual(
    frames(link.sent.slice(3)),
    [
      ['ADD', 0, 'r2'],
      ['WAVE', 0, [2, null]],
      ['WAVE', 1, [2, null]],
    ],
    '4. accepted because 2 ≥ 2',
  );
  await link.deliverBatch(waveBatch(0, 'complete', 7));
  assert.equal(client.waveClock, 8, '5.');
  await client.submit(req('r3'));
  assert.deepEqual(
    link
      .waves()
      .slice(4)
      .map((f) => f.decoded),
    [
      [9, null],
      [9, null],
    ],
    '6.',
  );
  await client.close();
});

test('a TokenSpeed-like protocol (no wave message) in a group reporting data_parallel_size 2: the clock ticks, nothing is sent', async () => {
  const { client, link } = setup(makeEngines(2, { dataParallelSize: 2 }));
  assert.equal(client.lockstep, true);
  await client.submit(req('a'));
  await client.submit(req('b'));
  assert.equal(client.waveClock, 2);
  assert.deepEqual(
    link.sent.map((f) => f.type),
    [RequestType.ADD, RequestType.ADD],
  );
  await client.close();
});

test('the AddTarget names the pinned rank, null when the client chose it', async () => {
  const { client, protocol } = setup(2);
  await client.submit(req('a'));
  await client.submit(req('b'), { dpRank: 1 });
  await client.submit(req('c'), { dpRank: 0 });
  assert.deepEqual(protocol.addTargets, [{ dpRank: null }, { dpRank: 1 }, { dpRank: 0 }]);
  await client.close();
});

test('a failed wake rolls the submit back (section 3 step 6): entry removed, slot released, ABORT sent, error returned', async () => {
  const { client, link } = lockstep(2);
  const other = await client.submit(req('other'), { dpRank: 0 });
  link.sendHook = (f) => {
    if (f.type === RequestType.START_DP_WAVE && f.engineIndex === 1) throw new FakeTransportError('socket hiccup');
  };
  await assert.rejects(client.submit(req('a'), { dpRank: 1 }), (e: unknown) => {
    assert.ok(e instanceof EngineClientError);
    assert.equal(e.kind, 'transport');
    assert.match(e.message, /START_DP_WAVE \[2, nil\] to DP rank 1 failed: socket hiccup/);
    return true;
  });
  assert.equal(client.isAlive(), true, 'a non-fatal wake failure fails only this submit');
  assert.equal(client.registeredCount, 1);
  assert.deepEqual(inFlight(client), [1, 0]);
  const aborts = link.aborts();
  assert.equal(aborts.length, 1);
  assert.equal(aborts[0].engineIndex, 1, 'the ABORT goes to the holder');
  assert.deepEqual(aborts[0].decoded, ['a']);
  assert.equal(client.rankStates()[1].dispatchedPinned, 0, 'not counted as dispatched');
  link.sendHook = null;
  await client.submit(req('b'), { dpRank: 1 });
  assert.deepEqual(
    link
      .waves()
      .slice(-2)
      .map((f) => f.decoded),
    [
      [3, null],
      [3, null],
    ],
    'the clock kept moving',
  );
  await link.deliverBatch(batch(0, [row('other', 'stop')]));
  assert.equal((await drain(other)).error, undefined);
  await client.close();
});

test('a wake that times out: that rank is dead, so the lockstep group fails as a unit; the survivor gets ABORTs (issue #8)', async () => {
  const { client, link } = lockstep(2);
  const live = await client.submit(req('live'), { dpRank: 1 });
  link.sendHook = (f) => {
    if (f.type === RequestType.START_DP_WAVE && f.engineIndex === 0) throw new FakeSendTimeoutError();
  };
  await assert.rejects(client.submit(req('a')), {
    kind: 'engine-dead',
    message: /DP rank 0 is not reading its input: START_DP_WAVE \[2, nil\] to DP rank 0 timed out/,
  });
  assert.equal(((await drain(live)).error as EngineClientError).kind, 'engine-dead');
  assert.deepEqual(client.stats.failures, { 'send-timeout': 1 });
  assert.deepEqual(client.stats.rankDeaths, { 'send-timeout': 1 });
  assert.deepEqual(inFlight(client), [0, 0]);
  assert.deepEqual(
    client.rankStates().map((r) => r.state),
    ['dead', 'ready'],
  );
  assert.equal(client.isAlive(), true, 'the client lives on; the group serves again once rank 0 rejoins');
  assert.equal(client.canServe(), false, 'a lockstep group needs every rank');
  assert.deepEqual(
    link
      .aborts()
      .filter((f) => f.engineIndex === 1)
      .map((f) => f.decoded),
    [['live']],
    'rank 1 is told to drop what it held (a went to dead rank 0: no ABORT there)',
  );
  await client.close();
});

test('a wake refused with EHOSTUNREACH marks that rank dead and fails the group; the fatal failure wins over a plain one', async () => {
  const { client, link } = lockstep(3);
  link.sendHook = (f) => {
    if (f.type !== RequestType.START_DP_WAVE) return;
    if (f.engineIndex === 0) throw new FakeTransportError('other failure');
    if (f.engineIndex === 2) throw unreachable(2);
  };
  await assert.rejects(client.submit(req('a')), (e: unknown) => {
    assert.ok(e instanceof EngineClientError);
    assert.equal(e.kind, 'engine-dead');
    assert.match(e.message, /DP rank 2 is gone: START_DP_WAVE \[1, nil\] to DP rank 2 failed with EHOSTUNREACH/);
    return true;
  });
  assert.deepEqual(client.stats.failures, { 'peer-unreachable': 1 });
  assert.deepEqual(
    client.rankStates().map((r) => r.state),
    ['ready', 'ready', 'dead'],
  );
  await client.close();
});

test("a wake the dispatcher starts (start_wave) that fails fails the group's requests: nobody else could report it (14.8)", async () => {
  const { client, link } = lockstep(2);
  const s = await client.submit(req('a'));
  const failed: EngineClientError[] = [];
  client.on('failed', (e) => failed.push(e));
  link.sendHook = (f) => {
    if (f.type === RequestType.START_DP_WAVE) throw new FakeTransportError('socket broke');
  };
  await link.deliverBatch(waveBatch(0, 'start', 4));
  const r = await drain(s);
  assert.equal((r.error as EngineClientError).kind, 'transport');
  assert.match((r.error as Error).message, /START_DP_WAVE \[5, nil\]/);
  assert.deepEqual(client.stats.failures, { 'wave-send-failed': 1 });
  assert.equal(failed.length, 1);
  await client.close();
});

test('a request aborted while its ADD is pending is not woken for', async () => {
  const { client, link } = lockstep(2);
  let release!: () => void;
  link.sendHook = (f) => {
    if (f.type === RequestType.ADD) return new Promise<void>((r) => (release = r));
  };
  const ac = new AbortController();
  const p = client.submit(req('a'), { signal: ac.signal });
  ac.abort(new Error('client went away'));
  release();
  await assert.rejects(p, /client went away/);
  assert.equal(link.waves().length, 0);
  assert.deepEqual(
    link.aborts().map((f) => f.decoded),
    [['a']],
  );
  await client.close();
});
