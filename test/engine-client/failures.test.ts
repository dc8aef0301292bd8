/**
 * Group-scope failure handling (dp-routing.md section 6; issue #8 part 1): faults of the shared output socket that no
 * frame pins on one rank end every live stream of the group with the same error of the right kind, clear every
 * in-flight set, tell every connected rank to ABORT what it held, count the cause and emit `failed`. A failed or
 * ended output socket also closes the client for good; the group silence watchdog marks every rank dead instead (they
 * come back when they answer again). Undecodable output never fails the group (issue 26): only a rank that went quiet
 * meanwhile is blamed. Send failures are a rank's own (liveness.test.ts).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { RequestType } from '../../src/protocols/types.js';
import type { EngineClient } from '../../src/engine-client/client.js';
import { EngineClientError, type EngineClientErrorKind } from '../../src/engine-client/errors.js';
import type { RequestStream } from '../../src/engine-client/request-stream.js';
import { FakeTransportError, batch, drain, inFlight, load, req, row, setup, tick, type FakeLink } from './fakes.js';

const enc = new TextEncoder();

interface Scene {
  client: EngineClient;
  link: FakeLink;
  streams: RequestStream[];
  failed: EngineClientError[];
}

/** Two ranks, three live requests (one with a pending read), a stored load on r0. */
async function liveScene(opts: { silenceTimeoutMs?: number } = {}): Promise<Scene> {
  const { client, link } = setup(2, opts);
  const failed: EngineClientError[] = [];
  client.on('failed', (e) => failed.push(e));
  const streams = [await client.submit(req('s0')), await client.submit(req('s1')), await client.submit(req('s2'))];
  await link.deliverBatch(batch(0, [row('s0')], load(2, 1, 0.6)));
  return { client, link, streams, failed };
}

/**
 * Every stream ended with the same error (identity) of `kind`; sets empty; `failed` once; the cause counted; with
 * `closedForGood` the client refuses new submits with client-closed, else every rank is dead and submits get
 * `unavailable`.
 */
async function assertFailedAll(
  scene: Scene,
  kind: EngineClientErrorKind,
  cause: string,
  closedForGood: boolean,
): Promise<EngineClientError> {
  const { client, link, streams, failed } = scene;
  const errors: unknown[] = [];
  for (const s of streams) errors.push((await drain(s)).error);
  const first = errors[0];
  assert.ok(first instanceof EngineClientError, `expected an EngineClientError, got ${String(first)}`);
  assert.equal(first.kind, kind);
  for (const e of errors) assert.equal(e, first, 'every stream gets the same error');
  assert.equal(client.registeredCount, 0);
  assert.deepEqual(inFlight(client), [0, 0]);
  assert.equal(failed.length, 1);
  assert.equal(failed[0], first);
  assert.deepEqual(client.stats.failures, { [cause]: 1 });
  assert.deepEqual(
    client.rankStates().map((r) => r.state),
    ['dead', 'dead'],
  );
  assert.equal(client.canServe(), false);
  assert.equal(client.status(), 'unavailable');
  const aborted = link
    .aborts()
    .filter((f) => (f.decoded as string[]).length > 0)
    .map((f) => [f.engineIndex, f.decoded]);
  assert.deepEqual(
    aborted,
    [
      [0, ['s0', 's2']],
      [1, ['s1']],
    ],
    'each rank is told to drop what it held',
  );
  if (closedForGood) {
    assert.equal(client.isAlive(), false);
    await assert.rejects(client.submit(req('after')), { kind: 'client-closed', message: /shutting down/ });
    await tick();
    assert.equal(link.closed, true, 'the link is closed for good');
  } else {
    assert.equal(client.isAlive(), true);
    await assert.rejects(client.submit(req('after')), { kind: 'unavailable' });
  }
  await client.close();
  return first;
}

test('output socket closed → transport error carrying the cause; the client closes for good', async () => {
  const scene = await liveScene();
  const pending = scene.streams[1][Symbol.asyncIterator]().next(); // a reader blocked in next()
  const cause = new Error('socket ETERM');
  await scene.link.deliver({ kind: 'closed', error: cause });
  await assert.rejects(pending, { kind: 'transport' });
  const rest = { ...scene, streams: [scene.streams[0]!, scene.streams[2]!] };
  const e = await assertFailedAll(rest, 'transport', 'output-closed', true);
  assert.equal(e.cause, cause);
  assert.match(e.message, /ETERM/);
});

test('output stream ending → client-closed "engine output stream ended"', async () => {
  const scene = await liveScene();
  scene.link.endOutputs();
  await tick();
  const e = await assertFailedAll(scene, 'client-closed', 'output-ended', true);
  assert.match(e.message, /engine output stream ended/);
});

test('a disconnect hint is logged with its address, without claiming which socket it came from', async () => {
  const lines: Array<{ msg: string; address?: string }> = [];
  const logger = pino({ level: 'warn' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  const { client, link } = setup(2, { logger });
  // The link reports input-ROUTER disconnects too (src/transport/zmq-link.ts); this address is the input socket's.
  await link.deliver({ kind: 'disconnect', address: 'ipc:///tmp/gw/input.sock' });
  const hint = lines.find((l) => l.address === 'ipc:///tmp/gw/input.sock');
  assert.ok(hint, `no log line names the address: ${JSON.stringify(lines)}`);
  assert.match(hint.msg, /engine peer disconnected/);
  assert.match(hint.msg, /ipc:\/\/\/tmp\/gw\/input\.sock/);
  assert.doesNotMatch(hint.msg, /output socket/);
  assert.equal(client.isAlive(), true);
  await client.close();
});

test('a disconnect hint alone fails nothing', async () => {
  const scene = await liveScene();
  await scene.link.deliver({ kind: 'disconnect', address: 'ipc:///tmp/x' });
  assert.equal(scene.client.isAlive(), true);
  await scene.client.close();
});

test('an ABORT transport failure (not EHOSTUNREACH, not a timeout) is logged; nothing else fails (14.8: nothing exits)', async () => {
  const scene = await liveScene();
  scene.link.sendHook = (f) => {
    if (f.type === RequestType.ABORT) throw new FakeTransportError('socket closed');
  };
  const victim = scene.streams.pop()!;
  await assert.rejects(scene.client.abort(victim.requestId), { kind: 'transport' });
  assert.deepEqual(
    scene.client.rankStates().map((r) => r.state),
    ['ready', 'ready'],
  );
  assert.equal(scene.client.registeredCount, 2);
  await scene.client.close();
});

test('one undecodable message is logged, counted and skipped', async () => {
  const scene = await liveScene();
  const { client, link, streams } = scene;
  await link.deliver({ kind: 'frames', frames: [enc.encode('{not json')] });
  assert.equal(client.isAlive(), true);
  assert.equal(client.stats.decodeErrors, 1);
  await link.deliverBatch(batch(1, [row('s1', 'stop')]));
  const r = await drain(streams[1]);
  assert.equal(r.error, undefined);
  assert.equal(r.outputs[0].finishReason, 'stop');
  await client.close();
});

test('undecodable messages in a row while the ranks holding requests keep streaming (issue 26): counted, skipped, nothing fails', async () => {
  let now = 0;
  const { client, link } = setup(2, { now: () => now });
  const failed: EngineClientError[] = [];
  client.on('failed', (e) => failed.push(e));
  const a = await client.submit(req('a'), { dpRank: 0 });
  const b = await client.submit(req('b'), { dpRank: 1 });
  for (let i = 0; i < 20; i++) {
    now += 500; // 10 s of a rogue sender's garbage, 5 frames at a time, between the ranks' own batches
    for (let j = 0; j < 5; j++) await link.deliver({ kind: 'frames', frames: [enc.encode(`garbage ${i}.${j}`)] });
    await link.deliverBatch(batch(0, [row('a')]));
    await link.deliverBatch(batch(1, [row('b')]));
  }
  assert.equal(client.stats.decodeErrors, 100);
  assert.deepEqual(
    client.rankStates().map((r) => r.state),
    ['ready', 'ready'],
  );
  assert.deepEqual(client.stats.failures, {});
  assert.equal(failed.length, 0);
  await link.deliverBatch(batch(0, [row('a', 'stop')]));
  await link.deliverBatch(batch(1, [row('b', 'stop')]));
  for (const s of [a, b]) {
    const r = await drain(s);
    assert.equal(r.error, undefined);
    assert.equal(r.outputs.length, 21);
  }
  await client.close();
});

test('a rank holding requests that sends nothing decodable for 3 s while undecodable messages arrive is stalled with a decode error; back when it decodes', async () => {
  let now = 0;
  const lines: Array<Record<string, unknown>> = [];
  const logger = pino({ level: 'warn' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  const { client, link } = setup(2, { now: () => now, logger, rankStallTimeoutMs: 100_000 });
  const a = await client.submit(req('a'), { dpRank: 0 });
  const b = await client.submit(req('b'), { dpRank: 1 });
  // Rank 1 answers in a layout the gateway cannot read (version skew): only its garbage arrives; rank 0 streams.
  for (let i = 0; i < 8; i++) {
    now += 500;
    await link.deliverBatch(batch(0, [row('a')]));
    await link.deliver({ kind: 'frames', frames: [enc.encode('{"not": "a batch"')] });
  }
  const e = (await drain(b)).error as EngineClientError;
  assert.equal(e.kind, 'decode');
  assert.equal(e.dpRank, 1);
  assert.match(e.message, /DP rank 1 sent no decodable output for 3000 ms while holding 1 request\(s\)/);
  assert.deepEqual(
    client.rankStates().map((r) => r.state),
    ['ready', 'stalled'],
  );
  assert.equal(client.stats.decodeSuspects, 1);
  assert.deepEqual(client.stats.failures, {}, 'no group failure');
  assert.equal(client.stats.decodeErrors, 8);
  assert.equal(
    lines.filter((l) => /undecodable engine output/.test(String(l.msg))).length,
    1,
    'one skip line per interval, not one per frame',
  );
  assert.ok(
    link.aborts().some((f) => f.engineIndex === 1 && JSON.stringify(f.decoded) === '["b"]'),
    'its request ABORTed there',
  );
  await link.deliverBatch(batch(1, []));
  assert.deepEqual(
    client.rankStates().map((r) => r.state),
    ['ready', 'ready'],
    'a decodable batch brings it back',
  );
  await link.deliverBatch(batch(0, [row('a', 'stop')]));
  assert.equal((await drain(a)).error, undefined);
  await client.close();
});

test("silence: with every rank silent, the holder's own watchdog fires first and names it (the group watchdog is a backstop)", async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(2, { silenceTimeoutMs: 1000, rankStallTimeoutMs: 100_000 });
  const s = await client.submit(req('s0'));
  t.mock.timers.tick(600);
  await link.deliverBatch(batch(1, [])); // re-arms the group watchdog, not rank 0's
  t.mock.timers.tick(400);
  const e = (await drain(s)).error as EngineClientError;
  assert.equal(e.kind, 'engine-dead');
  assert.match(e.message, /DP rank 0 sent no output for 1000 ms/);
  assert.deepEqual(
    client.rankStates().map((r) => r.state),
    ['dead', 'ready'],
  );
  assert.deepEqual(client.stats.failures, {}, 'no group-scope failure');
  await client.close();
});

test('silence watchdog: idle with nothing registered never fires; the clock starts with the first request', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(1, { silenceTimeoutMs: 1000 });
  const dead = () => client.rankStates()[0]!.state === 'dead';
  t.mock.timers.tick(5000);
  assert.equal(dead(), false);
  const s = await client.submit(req('a'));
  t.mock.timers.tick(999);
  assert.equal(dead(), false);
  await link.deliverBatch(batch(0, [row('a', 'stop')])); // nothing in flight → disarmed
  t.mock.timers.tick(10_000);
  assert.equal(dead(), false);
  assert.equal((await drain(s)).outputs.length, 1);
  const b = await client.submit(req('b'));
  t.mock.timers.tick(1000);
  assert.equal(dead(), true);
  assert.equal(((await drain(b)).error as EngineClientError).kind, 'engine-dead');
  await client.close();
});

test('the default silence timeout is 300 000 ms (the stall timeout raised above it)', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client } = setup(1, { rankStallTimeoutMs: 1_000_000 });
  const s = await client.submit(req('a'));
  t.mock.timers.tick(299_999);
  assert.equal(client.rankStates()[0]!.state, 'ready');
  t.mock.timers.tick(1);
  assert.equal(client.rankStates()[0]!.state, 'dead');
  assert.equal(((await drain(s)).error as EngineClientError).kind, 'engine-dead');
  await client.close();
});

test('a throwing failed-listener does not break fail_all', async () => {
  const scene = await liveScene();
  scene.client.on('failed', () => {
    throw new Error('listener bug');
  });
  await scene.link.deliver({ kind: 'closed', error: new Error('boom') });
  await assertFailedAll(scene, 'transport', 'output-closed', true);
});
