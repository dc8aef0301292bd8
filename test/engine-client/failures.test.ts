/**
 * Failure handling (dp-routing.md section 6): each trigger ends every live stream with the same error of the right
 * kind, clears every in-flight set (stored loads kept), closes the client for good and emits `failed` once.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { RequestType } from '../../src/protocols/types.js';
import type { EngineClient } from '../../src/engine-client/client.js';
import { EngineClientError, type EngineClientErrorKind } from '../../src/engine-client/errors.js';
import type { RequestStream } from '../../src/engine-client/request-stream.js';
import {
  FakeSendTimeoutError,
  FakeTransportError,
  batch,
  drain,
  inFlight,
  load,
  makeEngines,
  req,
  row,
  setup,
  tick,
  type FakeLink,
} from './fakes.js';

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
  const streams = [
    await client.submit(req('s0')),
    await client.submit(req('s1')),
    await client.submit(req('s2')),
  ];
  await link.deliverBatch(batch(0, [row('s0')], load(2, 1, 0.6)));
  return { client, link, streams, failed };
}

/** Every stream ended with the same error (identity) of `kind`; client closed for good; sets empty. */
async function assertFailedAll(scene: Scene, kind: EngineClientErrorKind, cause: string): Promise<EngineClientError> {
  const { client, link, streams, failed } = scene;
  const errors: unknown[] = [];
  for (const s of streams) errors.push((await drain(s)).error);
  const first = errors[0];
  assert.ok(first instanceof EngineClientError, `expected an EngineClientError, got ${String(first)}`);
  assert.equal(first.kind, kind);
  for (const e of errors) assert.equal(e, first, 'every stream gets the same error');
  assert.equal(client.isAlive(), false);
  assert.equal(client.registeredCount, 0);
  assert.deepEqual(inFlight(client), [0, 0]);
  assert.deepEqual(client.rankStates()[0].load, load(2, 1, 0.6), 'stored load is kept');
  assert.equal(failed.length, 1);
  assert.equal(failed[0], first);
  assert.deepEqual(client.stats.failures, { [cause]: 1 });
  await assert.rejects(client.submit(req('after')), { kind: 'client-closed', message: /shutting down/ });
  await tick();
  assert.equal(link.closed, true, 'the link is closed for good');
  await client.close();
  return first;
}

test('ENGINE_CORE_DEAD → engine-dead for every live stream', async () => {
  const scene = await liveScene();
  const pending = scene.streams[1][Symbol.asyncIterator]().next(); // a reader blocked in next()
  await scene.link.deliver({ kind: 'dead' });
  await assert.rejects(pending, { kind: 'engine-dead' });
  // That stream's error was consumed by the pending read; check the others.
  scene.streams.splice(1, 1);
  const e = await assertFailedAll(scene, 'engine-dead', 'engine-core-dead');
  assert.match(e.message, /ENGINE_CORE_DEAD/);
});

test('output socket closed → transport error carrying the cause', async () => {
  const scene = await liveScene();
  const cause = new Error('socket ETERM');
  await scene.link.deliver({ kind: 'closed', error: cause });
  const e = await assertFailedAll(scene, 'transport', 'output-closed');
  assert.equal(e.cause, cause);
  assert.match(e.message, /ETERM/);
});

test('output stream ending → client-closed "engine output stream ended"', async () => {
  const scene = await liveScene();
  scene.link.endOutputs();
  await tick();
  const e = await assertFailedAll(scene, 'client-closed', 'output-ended');
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

test('an ADD send timeout fails every registered request with engine-dead; queued sends fail with client-closed', async () => {
  const scene = await liveScene();
  const { client, link } = scene;
  let rejectSlow!: (e: Error) => void;
  let resolveQueued!: () => void;
  link.sendHook = (f) => {
    const rid = (f.decoded as { rid?: string }).rid;
    if (rid === 'slow') return new Promise<void>((_, rej) => (rejectSlow = rej));
    if (rid === 'queued') return new Promise<void>((res) => (resolveQueued = res));
  };
  const slow = client.submit(req('slow'));
  const queued = client.submit(req('queued'));
  rejectSlow(new FakeSendTimeoutError());
  await assert.rejects(slow, (e: unknown) => {
    assert.ok(e instanceof EngineClientError);
    assert.equal(e.kind, 'engine-dead');
    assert.match(e.message, /timed out/);
    return true;
  });
  resolveQueued();
  await assert.rejects(queued, { kind: 'client-closed', message: /shutting down.*timed out/ });
  await assertFailedAll(scene, 'engine-dead', 'send-timeout');
});

test('an ABORT send timeout also fails the client with engine-dead', async () => {
  const scene = await liveScene();
  scene.link.sendHook = (f) => {
    if (f.type === RequestType.ABORT) throw new FakeSendTimeoutError();
  };
  const victim = scene.streams.pop()!;
  victim.cancel();
  await tick();
  await assertFailedAll(scene, 'engine-dead', 'send-timeout');
});

test('an ABORT transport failure fails the client instead of leaving it half-alive (14.8)', async () => {
  const scene = await liveScene();
  scene.link.sendHook = (f) => {
    if (f.type === RequestType.ABORT) throw new FakeTransportError('socket closed');
  };
  const victim = scene.streams.pop()!;
  await assert.rejects(scene.client.abort(victim.requestId), { kind: 'transport' });
  await assertFailedAll(scene, 'transport', 'abort-send-failed');
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

test('two bad messages, a good one, two bad ones: the count resets; a third consecutive one fails the client', async () => {
  const scene = await liveScene();
  const { client, link } = scene;
  const bad = (text: string) => link.deliver({ kind: 'frames', frames: [enc.encode(text)] });
  await bad('x1');
  await bad('{"engineIndex": 0}');
  await link.deliverBatch(batch(0, [row('s0')]));
  await bad('x2');
  await bad('x3');
  assert.equal(client.isAlive(), true);
  assert.equal(client.stats.decodeErrors, 4);
  await bad('{"engineIndex": 0, "outputs": 7, "finishedRequestIds": []}');
  assert.equal(client.stats.decodeErrors, 5);
  const e = await assertFailedAll(scene, 'decode', 'decode-errors');
  assert.match(e.message, /3 consecutive/);
  assert.match(e.message, /FakeBatch\.outputs: expected array/, 'names the last decode error');
});

test('client-wide silence watchdog (section 6): engines without an engine index are watched by dispatcher activity', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  // 3-byte identities decode to no engine index: no in-flight set, no per-rank watchdog; only the client-wide one.
  const engines = makeEngines(2).map((e, i) => ({ ...e, identity: Uint8Array.of(i, 0, 0), engineIndex: null }));
  const { client, link } = setup(engines, { silenceTimeoutMs: 1000 });
  const failed: EngineClientError[] = [];
  client.on('failed', (e) => failed.push(e));
  const s = await client.submit(req('s0'));
  t.mock.timers.tick(600);
  await link.deliverBatch(batch(0, [row('s0')])); // any batch re-arms it
  t.mock.timers.tick(999);
  assert.equal(client.isAlive(), true, 'activity at 600 ms re-armed the watchdog');
  t.mock.timers.tick(1);
  const e = (await drain(s)).error as EngineClientError;
  assert.equal(e.kind, 'engine-dead');
  assert.match(e.message, /no engine output for 1000 ms while 1 request/);
  assert.deepEqual(client.stats.failures, { watchdog: 1 });
  assert.equal(failed.length, 1);
  await client.close();
});

test('silence watchdog: idle with nothing registered never fires; the clock starts with the first request', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(1, { silenceTimeoutMs: 1000 });
  t.mock.timers.tick(5000);
  assert.equal(client.isAlive(), true);
  const s = await client.submit(req('a'));
  t.mock.timers.tick(999);
  assert.equal(client.isAlive(), true);
  await link.deliverBatch(batch(0, [row('a', 'stop')])); // registry empties → disarmed
  t.mock.timers.tick(10_000);
  assert.equal(client.isAlive(), true);
  assert.equal((await drain(s)).outputs.length, 1);
  const b = await client.submit(req('b'));
  t.mock.timers.tick(1000);
  assert.equal(client.isAlive(), false);
  assert.equal(((await drain(b)).error as EngineClientError).kind, 'engine-dead');
  await client.close();
});

test('the default silence timeout is 300 000 ms', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client } = setup(1);
  const s = await client.submit(req('a'));
  t.mock.timers.tick(299_999);
  assert.equal(client.isAlive(), true);
  t.mock.timers.tick(1);
  assert.equal(client.isAlive(), false);
  assert.equal(((await drain(s)).error as EngineClientError).kind, 'engine-dead');
  await client.close();
});

test('a throwing failed-listener does not break fail_all', async () => {
  const scene = await liveScene();
  scene.client.on('failed', () => {
    throw new Error('listener bug');
  });
  await scene.link.deliver({ kind: 'dead' });
  await assertFailedAll(scene, 'engine-dead', 'engine-core-dead');
});
