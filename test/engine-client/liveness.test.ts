/**
 * Engine-death detection beyond the sentinel (issue #3 part 4; dp-routing.md 6 and 14.8):
 * - a `disconnect` hint makes the client probe every rank with an empty ABORT (engine-wire.md 4.7); a probe, or any
 *   other send, refused with EHOSTUNREACH (the input ROUTER has `mandatory` on) fails the engine group;
 * - per-rank silence watchdogs: a rank holding in-flight requests that stays silent for `silenceTimeoutMs` fails
 *   the group even while other ranks keep talking.
 * Every failure ends every live request with the same engine-dead error and closes the client for good.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RequestType } from '../../src/protocols/types.js';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { PROBE_SCHEDULE_MS, type EngineClient } from '../../src/engine-client/client.js';
import type { RequestStream } from '../../src/engine-client/request-stream.js';
import {
  FakeSendTimeoutError,
  FakeTransportError,
  batch,
  drain,
  inFlight,
  req,
  row,
  setup,
  tick,
  unreachable,
  type FakeLink,
} from './fakes.js';

const DISCONNECT = { kind: 'disconnect', address: 'ipc:///tmp/mgw/w-output.sock' } as const;

/** Every stream ended with the same engine-dead error; the client is closed and counted `cause` once. */
async function assertGroupFailed(client: EngineClient, streams: RequestStream[], cause: string): Promise<EngineClientError> {
  const errors = await Promise.all(streams.map(async (s) => (await drain(s)).error));
  const first = errors[0];
  assert.ok(first instanceof EngineClientError, `expected an EngineClientError, got ${String(first)}`);
  assert.equal(first.kind, 'engine-dead');
  for (const e of errors) assert.equal(e, first, 'every stream gets the same error');
  assert.equal(client.isAlive(), false);
  assert.equal(client.registeredCount, 0);
  assert.ok(inFlight(client).every((n) => n === 0), 'in-flight sets emptied');
  assert.deepEqual(client.stats.failures, { [cause]: 1 });
  await assert.rejects(client.submit(req('after')), { kind: 'client-closed' });
  return first;
}

/** Probe frames: ABORT with the empty list. */
function probes(link: FakeLink): number[] {
  return link.aborts().filter((f) => Array.isArray(f.decoded) && f.decoded.length === 0).map((f) => f.engineIndex);
}

test('disconnect → empty ABORT probes to every rank in list order, at 20/200/1000 ms; live ranks keep serving', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  assert.deepEqual(PROBE_SCHEDULE_MS, [20, 200, 1000]);
  const { client, link } = setup(3);
  const s = await client.submit(req('a'));
  await link.deliver(DISCONNECT);
  assert.deepEqual(probes(link), [], 'no round at once: an ENGINE_CORE_DEAD pushed before the exit is read first');
  t.mock.timers.tick(19);
  assert.equal(probes(link).length, 0);
  t.mock.timers.tick(1);
  assert.deepEqual(probes(link), [0, 1, 2], 'the first round at 20 ms, in list order');
  t.mock.timers.tick(180);
  assert.equal(probes(link).length, 6);
  await link.deliver(DISCONNECT); // a new hint restarts the series: the pending 1000 ms round is replaced
  assert.equal(probes(link).length, 6);
  t.mock.timers.tick(10_000);
  assert.equal(probes(link).length, 15, '3 more rounds for the second hint, none left from the first');
  await tick();
  assert.equal(client.isAlive(), true);
  assert.equal(client.stats.abortsSent, 0, 'probes are not request aborts');
  await link.deliverBatch(batch(0, [row('a', 'stop')]));
  assert.equal((await drain(s)).error, undefined);
  await client.close();
});

test('a rank that vanishes only after the first probe round is caught by a later round (libzmq drops the pipe lazily)', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2);
  const s = await client.submit(req('a'));
  let gone = false;
  link.sendHook = (f) => {
    if (gone && f.type === RequestType.ABORT && f.engineIndex === 1) throw unreachable(1);
  };
  await link.deliver(DISCONNECT);
  t.mock.timers.tick(20);
  await tick();
  assert.equal(client.isAlive(), true, 'the first round was still accepted');
  gone = true;
  t.mock.timers.tick(180);
  await tick();
  await assertGroupFailed(client, [s], 'peer-unreachable');
  assert.equal(probes(link).length, 4);
  t.mock.timers.tick(10_000);
  assert.equal(probes(link).length, 4, 'fail_all cleared the pending rounds');
  await client.close();
});

test('close() cancels pending probe rounds', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2);
  await link.deliver(DISCONNECT);
  await client.close();
  t.mock.timers.tick(10_000);
  assert.equal(probes(link).length, 0, 'every round was still pending and none went out');
});

test('disconnect + a probe refused with EHOSTUNREACH → the rank is dead: every request fails with engine-dead', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2);
  const failed: EngineClientError[] = [];
  client.on('failed', (e) => failed.push(e));
  const streams = [await client.submit(req('a')), await client.submit(req('b')), await client.submit(req('c'))];
  link.sendHook = (f) => {
    if (f.type === RequestType.ABORT && f.engineIndex === 1) throw unreachable(1);
  };
  await link.deliver(DISCONNECT);
  t.mock.timers.tick(PROBE_SCHEDULE_MS[0]!);
  await tick();
  const e = await assertGroupFailed(client, streams, 'peer-unreachable');
  assert.match(e.message, /liveness probe \(empty ABORT\) to DP rank 1 after a peer disconnect at ipc:\/\/\/tmp\/mgw\/w-output\.sock failed/);
  assert.match(e.message, /EHOSTUNREACH/);
  assert.equal(failed.length, 1);
  assert.equal(failed[0], e);
  assert.equal(link.closed, true);
  await client.close();
});

test('an idle group is probed too, so health turns unhealthy before the next request', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2);
  link.sendHook = (f) => {
    if (f.engineIndex === 0) throw unreachable(0);
  };
  await link.deliver(DISCONNECT);
  t.mock.timers.tick(PROBE_SCHEDULE_MS[0]!);
  await tick();
  assert.equal(client.isAlive(), false);
  assert.deepEqual(client.stats.failures, { 'peer-unreachable': 1 });
  await client.close();
});

test('a probe that times out fails the group (send-timeout); any other probe failure too (probe-send-failed)', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  for (const [err, cause, kind] of [
    [new FakeSendTimeoutError(), 'send-timeout', 'engine-dead'],
    [new FakeTransportError('socket broke', 'EFAULT'), 'probe-send-failed', 'transport'],
  ] as const) {
    const { client, link } = setup(2);
    const s = await client.submit(req('a'));
    link.sendHook = (f) => {
      if (f.type === RequestType.ABORT) throw err;
    };
    await link.deliver(DISCONNECT);
    t.mock.timers.tick(PROBE_SCHEDULE_MS[0]!);
    await tick();
    assert.equal(((await drain(s)).error as EngineClientError).kind, kind);
    assert.deepEqual(client.stats.failures, { [cause]: 1 });
    await client.close();
  }
});

test('a probe after the client closed is ignored', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2);
  let reject!: (e: Error) => void;
  link.sendHook = () => new Promise<void>((_, rej) => (reject = rej));
  await link.deliver(DISCONNECT);
  t.mock.timers.tick(PROBE_SCHEDULE_MS[0]!);
  await tick();
  assert.equal(probes(link).length, 2, 'the probe round is in flight when the client closes');
  await client.close();
  reject(unreachable(1));
  await tick();
  assert.deepEqual(client.stats.failures, {}, 'close() is not a failure');
});

test('an ADD refused with EHOSTUNREACH fails the group with engine-dead (not a mere rollback)', async () => {
  const { client, link } = setup(2);
  const other = await client.submit(req('other'), { dpRank: 0 });
  link.sendHook = (f) => {
    if (f.type === RequestType.ADD && f.engineIndex === 1) throw unreachable(1);
  };
  await assert.rejects(client.submit(req('a'), { dpRank: 1 }), (e: unknown) => {
    assert.ok(e instanceof EngineClientError);
    assert.equal(e.kind, 'engine-dead');
    assert.match(e.message, /sending request "a" to DP rank 1 failed: the rank is gone \(EHOSTUNREACH/);
    return true;
  });
  await assertGroupFailed(client, [other], 'peer-unreachable');
  await client.close();
});

test('an ADD failing with a plain transport error still only rolls back (section 3 step 5)', async () => {
  const { client, link } = setup(2);
  link.sendHook = (f) => {
    if (f.type === RequestType.ADD) throw new FakeTransportError('boom', 'EFAULT');
  };
  await assert.rejects(client.submit(req('a')), { kind: 'transport' });
  assert.equal(client.isAlive(), true);
  await client.close();
});

test('an ABORT refused with EHOSTUNREACH fails the group with engine-dead', async () => {
  const { client, link } = setup(2);
  const a = await client.submit(req('a'), { dpRank: 1 });
  const b = await client.submit(req('b'), { dpRank: 0 });
  link.sendHook = (f) => {
    if (f.type === RequestType.ABORT) throw unreachable(1);
  };
  await assert.rejects(client.abort('a'), { kind: 'engine-dead', message: /ABORT to DP rank 1 failed: the rank is gone/ });
  assert.equal(((await drain(a)).error as EngineClientError).kind, 'stream-closed', 'the aborted stream was retired first');
  await assertGroupFailed(client, [b], 'peer-unreachable');
  await client.close();
});

// ---------------------------------------------------------------------------------------------------------------
// Per-rank silence (dp-routing.md 14.8)

test('per-rank watchdog: a silent rank holding requests fails the group while another rank keeps talking', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2, { silenceTimeoutMs: 1000 });
  const talker = await client.submit(req('talk'), { dpRank: 0 });
  const mute = await client.submit(req('mute'), { dpRank: 1 });
  for (let t0 = 0; t0 < 900; t0 += 300) {
    t.mock.timers.tick(300);
    await link.deliverBatch(batch(0, [row('talk')])); // rank 0 is alive; resets the client-wide watchdog too
  }
  t.mock.timers.tick(99);
  assert.equal(client.isAlive(), true, '999 ms of silence from rank 1');
  t.mock.timers.tick(1);
  const e = await assertGroupFailed(client, [talker, mute], 'rank-silent');
  assert.match(e.message, /DP rank 1 sent no output for 1000 ms while holding 1 in-flight request/);
  await client.close();
});

test('per-rank watchdog: silence counts from when the rank got work, not from its last output long ago', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2, { silenceTimeoutMs: 1000 });
  const talker = await client.submit(req('talk'), { dpRank: 0 });
  for (let i = 0; i < 10; i++) {
    t.mock.timers.tick(500);
    await link.deliverBatch(batch(0, [row('talk')]));
  }
  const late = await client.submit(req('late'), { dpRank: 1 }); // rank 1 idle for 5 s, then busy
  t.mock.timers.tick(500);
  await link.deliverBatch(batch(0, [row('talk')]));
  t.mock.timers.tick(499);
  assert.equal(client.isAlive(), true);
  t.mock.timers.tick(1);
  await assertGroupFailed(client, [talker, late], 'rank-silent');
  await client.close();
});

test('per-rank watchdog: output resets it; an idle rank is never watched; cancels do not re-arm it', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2, { silenceTimeoutMs: 1000 });
  const talker = await client.submit(req('talk'), { dpRank: 0 });
  const x = await client.submit(req('x'), { dpRank: 1 });
  const y = await client.submit(req('y'), { dpRank: 1 });
  t.mock.timers.tick(800);
  await link.deliverBatch(batch(1, [row('x', 'stop')])); // rank 1 alive at 800: its timer restarts
  await link.deliverBatch(batch(0, [row('talk')]));
  assert.equal((await drain(x)).outputs.length, 1);
  t.mock.timers.tick(500);
  await link.deliverBatch(batch(0, [row('talk')]));
  y.cancel(); // a client cancel at 1300 empties rank 1 and disarms its timer; it is not a sign of life
  await tick();
  t.mock.timers.tick(5000 - 1300);
  assert.equal(client.isAlive(), false, 'rank 0 itself went silent after 1300 + 1000 ms');
  assert.match((((await drain(talker)).error) as Error).message, /DP rank 0 sent no output/);
  assert.deepEqual(client.stats.failures, { 'rank-silent': 1 }, 'rank 1 (idle since 1300) never fired');
  await client.close();
});

test('per-rank watchdog: a cancel does not reset a rank that still holds other requests', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2, { silenceTimeoutMs: 1000 });
  const talker = await client.submit(req('talk'), { dpRank: 0 });
  const a = await client.submit(req('a'), { dpRank: 1 });
  const b = await client.submit(req('b'), { dpRank: 1 });
  t.mock.timers.tick(600);
  a.cancel();
  await link.deliverBatch(batch(0, [row('talk')]));
  t.mock.timers.tick(399);
  assert.equal(client.isAlive(), true);
  t.mock.timers.tick(1);
  const e = await assertGroupFailed(client, [talker, b], 'rank-silent');
  assert.match(e.message, /DP rank 1 .* holding 1 in-flight request/);
  await client.close();
});

test('per-rank watchdog: rows for a rank\'s requests prove it alive even when the batch misnames its rank (14.6)', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2, { silenceTimeoutMs: 1000 });
  const a = await client.submit(req('a'), { dpRank: 1 });
  for (let i = 0; i < 5; i++) {
    t.mock.timers.tick(600);
    await link.deliverBatch(batch(0, [row('a')])); // the 9-element TokenSpeed layout always says rank 0
  }
  assert.equal(client.isAlive(), true);
  assert.equal(client.stats.rankMismatches, 5);
  await link.deliverBatch(batch(0, [row('a', 'stop')]));
  assert.equal((await drain(a)).error, undefined);
  await client.close();
});

test('per-rank watchdog: the default is 300 000 ms and close() disarms every timer', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2);
  await client.submit(req('talk'), { dpRank: 0 });
  const mute = await client.submit(req('mute'), { dpRank: 1 });
  for (let i = 0; i < 3; i++) {
    t.mock.timers.tick(100_000);
    await link.deliverBatch(batch(0, [row('talk')]));
  }
  assert.equal(client.isAlive(), false, 'rank 1 silent for 300 s');
  assert.match(((await drain(mute)).error as Error).message, /DP rank 1 sent no output for 300000 ms/);
  const again = setup(2, { silenceTimeoutMs: 1000 });
  await again.client.submit(req('z'), { dpRank: 1 });
  await again.client.close();
  t.mock.timers.tick(10_000);
  assert.deepEqual(again.client.stats.failures, {});
});
