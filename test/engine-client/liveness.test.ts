/**
 * Engine-death detection and its scope (issue #8 part 1; dp-routing.md 6 and 14.8), over the fake link:
 * - a `disconnect` hint or ENGINE_CORE_DEAD makes the client probe every rank with an empty ABORT (engine-wire.md
 *   4.7); a probe, or any other send, refused with EHOSTUNREACH names the dead rank;
 * - in a dense group only that rank's requests fail (no ABORT to it), it leaves the scoring set, the policy forgets
 *   it, and its siblings keep serving; an unpinned ADD refused that way is placed on another rank instead;
 * - ENGINE_CORE_DEAD is tied to the rank whose identity then vanishes; when none does by the last probe round, a rank
 *   holding requests that went quiet since is stalled, and otherwise nothing fails (issue 26: never group scope);
 * - per-rank silence watchdogs: a rank holding requests and silent for `silenceTimeoutMs` is dead.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RequestType, type GenerateRequest } from '../../src/protocols/types.js';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { PROBE_SCHEDULE_MS, REVIVAL_PROBE_INTERVAL_MS } from '../../src/engine-client/client.js';
import { createLoadPolicy, type DpPolicy } from '../../src/engine-client/policy.js';
import {
  FakeSendTimeoutError,
  FakeTransportError,
  batch,
  drain,
  inFlight,
  req,
  row,
  setup,
  states,
  tick,
  unreachable,
  type FakeLink,
} from './fakes.js';

const DISCONNECT = { kind: 'disconnect', address: 'ipc:///tmp/mgw/w-output.sock' } as const;
const LAST_ROUND = PROBE_SCHEDULE_MS[PROBE_SCHEDULE_MS.length - 1]!;

/** Probe frames: ABORT with the empty list. */
function probes(link: FakeLink): number[] {
  return link
    .aborts()
    .filter((f) => Array.isArray(f.decoded) && f.decoded.length === 0)
    .map((f) => f.engineIndex);
}

/** A load policy that records its hooks (interface A). */
function recordingPolicy(): DpPolicy & { dispatched: Array<[number, string]>; forgotten: number[] } {
  const base = createLoadPolicy();
  const dispatched: Array<[number, string]> = [];
  const forgotten: number[] = [];
  return {
    name: base.name,
    releaseClamp: true,
    select: (ranks, request) => base.select(ranks, request),
    onDispatch: (rank: number, r: GenerateRequest) => void dispatched.push([rank, r.requestId]),
    forgetRank: (rank: number) => void forgotten.push(rank),
    dispatched,
    forgotten,
  };
}

test('probe schedule: rounds at 20/200/1000/3000 ms after a disconnect, in identity order; live ranks keep serving', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  assert.deepEqual(PROBE_SCHEDULE_MS, [20, 200, 1000, 3000]);
  const { client, link } = setup(3);
  const s = await client.submit(req('a'));
  await link.deliver(DISCONNECT);
  assert.deepEqual(probes(link), [], 'no round at once: an ENGINE_CORE_DEAD pushed before the exit is read first');
  t.mock.timers.tick(20);
  assert.deepEqual(probes(link), [0, 1, 2]);
  t.mock.timers.tick(180);
  assert.equal(probes(link).length, 6);
  await link.deliver(DISCONNECT); // a new hint restarts the series
  t.mock.timers.tick(10_000);
  assert.equal(probes(link).length, 18, '4 more rounds for the second hint, none left from the first');
  await tick();
  assert.deepEqual(states(client), ['ready', 'ready', 'ready']);
  assert.equal(client.stats.abortsSent, 0, 'probes are not request aborts');
  await link.deliverBatch(batch(0, [row('a', 'stop')]));
  assert.equal((await drain(s)).error, undefined);
  await client.close();
});

test("dense: a probe refused with EHOSTUNREACH kills only that rank; its requests fail, its siblings' do not; nothing is ABORTed", async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const policy = recordingPolicy();
  const { client, link } = setup(3, { policy });
  const onDead = [await client.submit(req('d1'), { dpRank: 1 }), await client.submit(req('d2'), { dpRank: 1 })];
  const onLive = [await client.submit(req('l0'), { dpRank: 0 }), await client.submit(req('l2'), { dpRank: 2 })];
  const events: string[] = [];
  client.on('rank', (i, state, cause) => events.push(`${i}:${state}:${cause}`));
  link.sendHook = (f) => {
    if (f.engineIndex === 1) throw unreachable(1);
  };
  await link.deliver(DISCONNECT);
  t.mock.timers.tick(20);
  await tick();
  const errors = await Promise.all(onDead.map(async (s) => (await drain(s)).error as EngineClientError));
  assert.equal(errors[0], errors[1], 'one error object for the rank');
  assert.equal(errors[0]!.kind, 'engine-dead');
  assert.equal(errors[0]!.dpRank, 1);
  assert.match(
    errors[0]!.message,
    /DP rank 1 is gone: liveness probe \(empty ABORT\) to DP rank 1 failed with EHOSTUNREACH/,
  );
  assert.deepEqual(states(client), ['ready', 'dead', 'ready']);
  assert.deepEqual(events, ['1:dead:peer-unreachable']);
  assert.deepEqual(inFlight(client), [1, 0, 1]);
  assert.equal(client.rankStates()[1]!.load, null, 'its stored load is dropped');
  assert.deepEqual(client.stats.rankDeaths, { 'peer-unreachable': 1 });
  assert.deepEqual(client.rankStates()[1]!.deaths, { 'peer-unreachable': 1 });
  assert.deepEqual(client.stats.failures, {}, 'no group-scope failure');
  assert.deepEqual(policy.forgotten, [1]);
  assert.equal(link.aborts().filter((f) => (f.decoded as string[]).length > 0).length, 0, 'no ABORT anywhere');
  assert.equal(client.status(), 'degraded');
  link.sendHook = null;
  // New requests go to the survivors only; the dead rank is not offered to the policy.
  for (let i = 0; i < 4; i++) await client.submit(req(`new${i}`));
  assert.deepEqual(link.addsPerRank(), [3, 2, 3]);
  assert.ok(policy.dispatched.every(([rank, id]) => rank !== 1 || id.startsWith('d')));
  await assert.rejects(client.submit(req('pin'), { dpRank: 1 }), {
    kind: 'unavailable',
    message: /DP rank 1 cannot take requests now: it is dead/,
  });
  for (const s of onLive) s.cancel();
  await client.close();
});

test('ENGINE_CORE_DEAD is tied to the rank whose identity vanishes next (cause engine-core-dead)', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2);
  const a = await client.submit(req('a'), { dpRank: 0 });
  const b = await client.submit(req('b'), { dpRank: 1 });
  await link.deliver({ kind: 'dead' });
  assert.deepEqual(states(client), ['ready', 'ready'], 'the sentinel alone names no rank');
  link.sendHook = (f) => {
    if (f.engineIndex === 0) throw unreachable(0);
  };
  t.mock.timers.tick(20);
  await tick();
  const e = (await drain(a)).error as EngineClientError;
  assert.match(e.message, /DP rank 0 died: ENGINE_CORE_DEAD was received and its identity is gone/);
  assert.deepEqual(client.stats.rankDeaths, { 'engine-core-dead': 1 });
  t.mock.timers.tick(10_000);
  await tick();
  assert.deepEqual(client.stats.failures, {}, 'the sentinel was accounted for: no group fallback');
  assert.deepEqual(states(client), ['dead', 'ready']);
  b.cancel();
  await client.close();
});

test('ENGINE_CORE_DEAD that no rank can be tied to (issue 26): every rank still answers and streams, so nothing fails; it is counted', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  let now = 0;
  const { client, link } = setup(2, { now: () => now });
  const failed: EngineClientError[] = [];
  client.on('failed', (err) => failed.push(err));
  const streams = [await client.submit(req('a'), { dpRank: 0 }), await client.submit(req('b'), { dpRank: 1 })];
  await link.deliver({ kind: 'dead' }); // a rogue process, or a rank that did not exit after all
  for (let ms = 0; ms < LAST_ROUND; ms += 500) {
    now += 500;
    t.mock.timers.tick(500);
    await link.deliverBatch(batch(0, [row('a')]));
    await link.deliverBatch(batch(1, [row('b')]));
    await tick();
  }
  await tick();
  assert.deepEqual(states(client), ['ready', 'ready']);
  assert.deepEqual(client.stats.failures, {}, 'no group-scope failure');
  assert.equal(client.stats.unattributedSentinels, 1);
  assert.equal(failed.length, 0);
  await link.deliverBatch(batch(0, [row('a', 'stop')]));
  await link.deliverBatch(batch(1, [row('b', 'stop')]));
  const results = await Promise.all(streams.map(drain));
  assert.deepEqual(
    results.map((r) => [r.error, r.outputs.at(-1)?.finishReason]),
    [
      [undefined, 'stop'],
      [undefined, 'stop'],
    ],
  );
  await client.close();
});

test('ENGINE_CORE_DEAD no vanished identity explains (issue 26): the rank holding requests that went quiet since is taken out as stalled; the rest keep serving', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  let now = 0;
  const { client, link } = setup(2, { now: () => now, rankStallTimeoutMs: 100_000 });
  const a = await client.submit(req('a'), { dpRank: 0 });
  const b = await client.submit(req('b'), { dpRank: 1 });
  await link.deliver({ kind: 'dead' });
  for (let ms = 0; ms < LAST_ROUND; ms += 500) {
    now += 500;
    t.mock.timers.tick(500);
    await link.deliverBatch(batch(0, [row('a')])); // rank 0 keeps streaming; rank 1 says nothing
    await tick();
  }
  await tick();
  const e = (await drain(b)).error as EngineClientError;
  assert.equal(e.kind, 'rank-stalled');
  assert.match(e.message, /DP rank 1 sent no output for 3000 ms after ENGINE_CORE_DEAD arrived/);
  assert.deepEqual(states(client), ['ready', 'stalled']);
  assert.deepEqual(client.stats.failures, {});
  assert.equal(client.stats.unattributedSentinels, 0);
  assert.ok(
    link.aborts().some((f) => f.engineIndex === 1 && JSON.stringify(f.decoded) === '["b"]'),
    'its request is ABORTed there',
  );
  await link.deliverBatch(batch(1, [])); // it speaks: back in rotation
  assert.deepEqual(states(client), ['ready', 'ready']);
  await link.deliverBatch(batch(0, [row('a', 'stop')]));
  assert.equal((await drain(a)).error, undefined);
  await client.close();
});

test('ENGINE_CORE_DEAD read after its rank was already found gone (a clean exit seen first) is tied to that rank: no group failure', async (t) => {
  // A rank that exits cleanly pushes ENGINE_CORE_DEAD on the output socket and then closes its sockets; the gateway
  // may notice the vanished identity (a disconnect hint and a probe, or an ADD refused) before it reads the sentinel.
  // Seen with SIGTERMed simulated ranks under load: 3 s later the whole group failed and its healthy ranks were
  // marked dead for good (they are alive, so they never dial in again).
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2);
  const failed: EngineClientError[] = [];
  client.on('failed', (err) => failed.push(err));
  const a = await client.submit(req('a'), { dpRank: 0 });
  const b = await client.submit(req('b'), { dpRank: 1 });
  link.sendHook = (f) => {
    if (f.engineIndex === 0) throw unreachable(0);
  };
  await link.deliver(DISCONNECT);
  t.mock.timers.tick(20);
  await tick();
  assert.equal(((await drain(a)).error as EngineClientError).kind, 'engine-dead');
  assert.deepEqual(states(client), ['dead', 'ready']);
  await link.deliver({ kind: 'dead' }); // the sentinel the exiting rank pushed, read late
  t.mock.timers.tick(10_000);
  await tick();
  await tick();
  assert.deepEqual(client.stats.failures, {}, 'no group-scope failure');
  assert.equal(failed.length, 0);
  assert.deepEqual(states(client), ['dead', 'ready'], 'the healthy rank stays in rotation');
  await link.deliverBatch(batch(1, [row('b', 'stop')]));
  assert.equal((await drain(b)).error, undefined, "the healthy rank's request finishes normally");
  await client.close();
});

test('an unpinned ADD refused with EHOSTUNREACH marks the rank dead and goes to another ready rank', async () => {
  const { client, link } = setup(2);
  link.sendHook = (f) => {
    if (f.type === RequestType.ADD && f.engineIndex === 0) throw unreachable(0);
  };
  const s = await client.submit(req('a')); // the scan starts at rank 0
  assert.equal(s.engineIndex, 1);
  assert.deepEqual(
    link.adds().map((f) => f.engineIndex),
    [0, 1],
  );
  assert.deepEqual(states(client), ['dead', 'ready']);
  assert.deepEqual(inFlight(client), [0, 1]);
  await link.deliverBatch(batch(1, [row('a', 'stop')]));
  assert.equal((await drain(s)).error, undefined);
  assert.equal(client.rankStates()[1]!.dispatchedUnpinned, 1);
  await client.close();
});

test('a pinned ADD refused with EHOSTUNREACH fails with engine-dead; the other rank is untouched', async () => {
  const { client, link } = setup(2);
  const other = await client.submit(req('other'), { dpRank: 0 });
  link.sendHook = (f) => {
    if (f.type === RequestType.ADD && f.engineIndex === 1) throw unreachable(1);
  };
  await assert.rejects(client.submit(req('a'), { dpRank: 1 }), (e: unknown) => {
    assert.ok(e instanceof EngineClientError);
    assert.equal(e.kind, 'engine-dead');
    assert.match(e.message, /DP rank 1 is gone: sending request "a" to DP rank 1 failed with EHOSTUNREACH/);
    return true;
  });
  assert.equal(client.registeredCount, 1);
  assert.deepEqual(states(client), ['ready', 'dead']);
  await link.deliverBatch(batch(0, [row('other', 'stop')]));
  assert.equal((await drain(other)).error, undefined);
  await client.close();
});

test('when every rank refuses, the request fails with unavailable after trying each once', async () => {
  const { client, link } = setup(3);
  link.sendHook = (f) => {
    if (f.type === RequestType.ADD) throw unreachable(f.engineIndex);
  };
  await assert.rejects(client.submit(req('a')), { kind: 'unavailable' });
  assert.equal(link.adds().length, 3);
  assert.equal(client.status(), 'unavailable');
  await assert.rejects(client.submit(req('b')), { kind: 'unavailable', message: /rank 0 dead \(peer-unreachable\)/ });
  await client.close();
});

test('an ADD send timeout marks the rank dead (send-timeout) and the request goes elsewhere', async () => {
  const { client, link } = setup(2);
  link.sendHook = (f) => {
    if (f.type === RequestType.ADD && f.engineIndex === 0) throw new FakeSendTimeoutError();
  };
  const s = await client.submit(req('a'));
  assert.equal(s.engineIndex, 1);
  assert.deepEqual(client.stats.rankDeaths, { 'send-timeout': 1 });
  s.cancel();
  await client.close();
});

test('an ADD failing with a plain transport error only rolls back (section 3 step 5)', async () => {
  const { client, link } = setup(2);
  link.sendHook = (f) => {
    if (f.type === RequestType.ADD) throw new FakeTransportError('boom', 'EFAULT');
  };
  await assert.rejects(client.submit(req('a')), { kind: 'transport' });
  assert.deepEqual(states(client), ['ready', 'ready']);
  assert.equal(client.registeredCount, 0);
  await client.close();
});

test('an ABORT refused with EHOSTUNREACH kills that rank; the explicit abort reports it', async () => {
  const { client, link } = setup(2);
  const a = await client.submit(req('a'), { dpRank: 1 });
  const b = await client.submit(req('b'), { dpRank: 1 });
  const c = await client.submit(req('c'), { dpRank: 0 });
  link.sendHook = (f) => {
    if (f.type === RequestType.ABORT && f.engineIndex === 1) throw unreachable(1);
  };
  await assert.rejects(client.abort('a'), {
    kind: 'engine-dead',
    message: /DP rank 1 is gone: ABORT of 1 request\(s\) to DP rank 1 failed/,
  });
  assert.equal(
    ((await drain(a)).error as EngineClientError).kind,
    'stream-closed',
    'the aborted stream was retired first',
  );
  assert.equal(((await drain(b)).error as EngineClientError).kind, 'engine-dead');
  assert.deepEqual(states(client), ['ready', 'dead']);
  c.cancel();
  await client.close();
});

test('close() cancels pending probe rounds', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2);
  await link.deliver(DISCONNECT);
  await client.close();
  t.mock.timers.tick(10_000);
  assert.equal(probes(link).length, 0);
});

// ---------------------------------------------------------------------------------------------------------------
// Per-rank silence (dp-routing.md 14.8): the rank is dead, its siblings serve on

test('per-rank silence: a silent rank holding requests dies (rank-silent) while another rank keeps talking', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2, { silenceTimeoutMs: 1000, rankStallTimeoutMs: 5000 });
  const talker = await client.submit(req('talk'), { dpRank: 0 });
  const mute = await client.submit(req('mute'), { dpRank: 1 });
  for (let t0 = 0; t0 < 900; t0 += 300) {
    t.mock.timers.tick(300);
    await link.deliverBatch(batch(0, [row('talk')]));
  }
  t.mock.timers.tick(99);
  assert.deepEqual(states(client), ['ready', 'ready'], '999 ms of silence from rank 1');
  t.mock.timers.tick(1);
  const e = (await drain(mute)).error as EngineClientError;
  assert.equal(e.kind, 'engine-dead');
  assert.match(e.message, /DP rank 1 sent no output for 1000 ms while holding 1 in-flight request/);
  assert.deepEqual(states(client), ['ready', 'dead']);
  await link.deliverBatch(batch(0, [row('talk', 'stop')]));
  assert.equal((await drain(talker)).error, undefined, 'the sibling was untouched');
  await client.close();
});

test('per-rank silence: counts from when the rank got work; rows naming another rank do not prove the owner alive (14.6, issue 26)', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2, { silenceTimeoutMs: 1000, rankStallTimeoutMs: 5000 });
  const talker = await client.submit(req('talk'), { dpRank: 0 });
  for (let i = 0; i < 10; i++) {
    t.mock.timers.tick(500);
    await link.deliverBatch(batch(0, [row('talk')]));
  }
  const late = await client.submit(req('late'), { dpRank: 1 }); // rank 1's clock starts now, not at the start
  t.mock.timers.tick(600);
  await link.deliverBatch(batch(0, [row('late'), row('talk')])); // a batch naming rank 0 with rank 1's request
  assert.equal(client.stats.rankMismatches, 1);
  assert.deepEqual(
    link
      .aborts()
      .filter((f) => f.engineIndex === 0)
      .map((f) => f.decoded),
    [['late']],
    'ABORTed at the sender',
  );
  assert.deepEqual(states(client), ['ready', 'ready']);
  t.mock.timers.tick(400);
  assert.deepEqual(
    states(client),
    ['ready', 'dead'],
    'rank 1 silent for 1000 ms: the misnamed row did not count for it',
  );
  const r = await drain(late);
  assert.equal((r.error as EngineClientError).kind, 'engine-dead');
  assert.equal(r.outputs.length, 0, 'the misnamed row never reached the request');
  talker.cancel();
  await client.close();
});

test('per-rank silence: the default is 300 000 ms (with the stall timeout raised above it)', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2, { rankStallTimeoutMs: 1_000_000 });
  await client.submit(req('talk'), { dpRank: 0 });
  const mute = await client.submit(req('mute'), { dpRank: 1 });
  for (let i = 0; i < 3; i++) {
    t.mock.timers.tick(100_000);
    await link.deliverBatch(batch(0, [row('talk')]));
  }
  assert.match(((await drain(mute)).error as Error).message, /DP rank 1 sent no output for 300000 ms/);
  await client.close();
});

test('a dead rank that answers again (issue 26) is probed back into rotation as the same process, and told to drop what it was failed with', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2);
  const a = await client.submit(req('a'), { dpRank: 0 });
  let gone = true;
  link.sendHook = (f) => {
    if (f.engineIndex === 0 && gone) throw unreachable(0);
  };
  await link.deliver(DISCONNECT); // e.g. its connection was cut for a moment
  t.mock.timers.tick(20);
  await tick();
  assert.equal(((await drain(a)).error as EngineClientError).kind, 'engine-dead');
  assert.deepEqual(states(client), ['dead', 'ready']);
  // Still gone: the revival probes fail at no cost and the rank stays dead.
  for (let i = 0; i < 4; i++) {
    t.mock.timers.tick(REVIVAL_PROBE_INTERVAL_MS);
    await tick();
  }
  assert.deepEqual(states(client), ['dead', 'ready']);
  assert.ok(probes(link).filter((r) => r === 0).length >= 4, 'probed every interval');
  // Its engine is connected again (the same process): the next probe is accepted.
  gone = false;
  t.mock.timers.tick(REVIVAL_PROBE_INTERVAL_MS);
  await tick();
  await tick();
  assert.deepEqual(states(client), ['ready', 'ready']);
  assert.equal(client.rankStates()[0]!.state, 'ready');
  assert.equal(client.stats.revivals, 1);
  assert.equal(client.rankStates()[0]!.rejoins, 0, 'not a new handshake');
  assert.deepEqual(
    link
      .aborts()
      .filter((f) => f.engineIndex === 0 && (f.decoded as string[]).length > 0)
      .map((f) => f.decoded),
    [['a']],
    'the request failed at its death is ABORTed there once',
  );
  const b = await client.submit(req('b'), { dpRank: 0 });
  await link.deliverBatch(batch(0, [row('b', 'stop')]));
  assert.equal((await drain(b)).error, undefined, 'it serves again');
  await client.close();
});

test('revival probes stop when the dead rank says HELLO (a new process joins through its handshake)', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2);
  let gone = true;
  link.sendHook = (f) => {
    if (f.engineIndex === 1 && gone) throw unreachable(1);
  };
  await assert.rejects(client.submit(req('a'), { dpRank: 1 }), { kind: 'engine-dead' });
  assert.equal(await link.hello(1), true);
  assert.deepEqual(states(client), ['ready', 'joining']);
  gone = false;
  const before = probes(link).length;
  t.mock.timers.tick(5 * REVIVAL_PROBE_INTERVAL_MS);
  await tick();
  assert.equal(probes(link).length, before, 'a joining rank is not probed');
  assert.deepEqual(states(client), ['ready', 'joining']);
  link.join(1);
  assert.deepEqual(states(client), ['ready', 'ready']);
  assert.equal(client.rankStates()[1]!.rejoins, 1);
  assert.equal(client.stats.revivals, 0);
  await client.close();
});

test('a rank declared dead by its silence comes back only once it speaks again, then answers a probe (issue 26)', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2, { silenceTimeoutMs: 1000, rankStallTimeoutMs: 100_000 });
  const a = await client.submit(req('a'), { dpRank: 0 });
  t.mock.timers.tick(1000);
  assert.equal(((await drain(a)).error as EngineClientError).kind, 'engine-dead');
  assert.deepEqual(states(client), ['dead', 'ready']);
  // Hung (SIGSTOP) ranks hold their socket, so a probe would be accepted: not enough while it says nothing.
  for (let i = 0; i < 4; i++) {
    t.mock.timers.tick(REVIVAL_PROBE_INTERVAL_MS);
    await tick();
  }
  assert.deepEqual(states(client), ['dead', 'ready']);
  assert.equal(probes(link).filter((r) => r === 0).length, 0, 'not even probed while silent');
  await link.deliverBatch(batch(0, [row('a')])); // resumed (SIGCONT): it streams the request it was running
  t.mock.timers.tick(REVIVAL_PROBE_INTERVAL_MS);
  await tick();
  await tick();
  assert.deepEqual(states(client), ['ready', 'ready'], 'the same process, back');
  assert.equal(client.rankStates()[0]!.revivals, 1);
  assert.deepEqual(
    link
      .aborts()
      .filter((f) => f.engineIndex === 0 && (f.decoded as string[]).length > 0)
      .map((f) => f.decoded),
    [['a']],
  );
  await client.close();
});

test('ENGINE_CORE_DEAD is not tied to a rank whose new process joined since its identity vanished (issue 26)', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2);
  let gone0 = true;
  let gone1 = false;
  link.sendHook = (f) => {
    if (f.engineIndex === 0 && gone0) throw unreachable(0);
    if (f.engineIndex === 1 && gone1) throw unreachable(1);
  };
  const a = await client.submit(req('a'), { dpRank: 0 }).catch((e: unknown) => e);
  assert.ok(a instanceof EngineClientError, 'rank 0 was SIGKILLed: found gone');
  assert.equal(await link.hello(0), true);
  gone0 = false;
  link.join(0); // a new process of rank 0, 1.5 s later
  const b = await client.submit(req('b'), { dpRank: 1 });
  gone1 = true; // rank 1 is SIGTERMed: it pushes ENGINE_CORE_DEAD and closes its sockets
  await link.deliver({ kind: 'dead' });
  t.mock.timers.tick(20);
  await tick();
  const e = (await drain(b)).error as EngineClientError;
  assert.match(e.message, /DP rank 1 died: ENGINE_CORE_DEAD was received/);
  assert.deepEqual(states(client), ['ready', 'dead']);
  assert.deepEqual(client.stats.rankDeaths, { 'peer-unreachable': 1, 'engine-core-dead': 1 });
  await client.close();
});
