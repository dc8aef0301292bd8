/**
 * Flow control of the router's front lanes (src/fronts/channel/outbox.ts `FrontOutboxes`, `onPressure`): a lane over its
 * high-water mark turns the pressure on; it goes off once every such lane is back to its low-water mark, or dropped
 * (forgotten, stuck, closed) at once; a pressure lasting `maxPressureMs` lets go of its lanes until they drain. With
 * the engine links' gate (src/transport/output-gate.ts) that pauses and resumes the engines' output receive.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Tag } from '../../src/fronts/channel/records.js';
import { FrontOutboxes, type FrontOutboxesOptions } from '../../src/fronts/channel/outbox.js';
import { OutputGate } from '../../src/transport/output-gate.js';

const KiB = 1024;
const turn = () => new Promise<void>((r) => setImmediate(r));
const refusedErr = () => Object.assign(new Error('full'), { code: 'EAGAIN' });

/** A fake front per key: refuses while `blocked`, else accepts (counting bytes). */
function harness(opts: FrontOutboxesOptions = {}) {
  const blocked = new Set<number>();
  const accepted = new Map<number, number>();
  const events: boolean[] = [];
  const stuck: number[] = [];
  const released: number[][] = [];
  const gate = new OutputGate();
  const outbox = new FrontOutboxes(
    (key, message) => {
      if (blocked.has(key)) return Promise.reject(refusedErr());
      accepted.set(key, (accepted.get(key) ?? 0) + message.length);
      return Promise.resolve();
    },
    (key) => stuck.push(key),
    {
      stuckAfterMs: 600_000,
      highWaterBytes: 64 * KiB,
      lowWaterBytes: 16 * KiB,
      onPressure: (paused) => {
        events.push(paused);
        if (paused) gate.pause();
        else gate.resume();
      },
      onPressureTimeout: (keys) => released.push(keys),
      ...opts,
    },
  );
  /** One turn's records of `bytes` for `key` (sealed at the end of the turn). */
  const fill = async (key: number, bytes: number): Promise<void> => {
    outbox.push(key, { tag: Tag.REPLY, callId: 1, ok: true, value: 'x'.repeat(bytes) });
    await turn();
  };
  return { outbox, blocked, accepted, events, stuck, released, gate, fill };
}

const until = async (cond: () => boolean, what: string): Promise<void> => {
  const deadline = Date.now() + 5000;
  while (!cond()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
};

test('a lane over the high-water mark pauses the gate; it resumes only once the lane is back to the low-water mark', async () => {
  const h = harness();
  h.outbox.open(1);
  h.outbox.open(2);
  h.blocked.add(1);
  // Lane 1 behind: its records merge into one open message until it reaches 256 KiB, so each 300 KiB turn is sealed.
  await h.fill(1, 30 * KiB); // first message, refused: queued
  assert.equal(h.gate.isPaused, false, '30 KiB < 64 KiB high-water mark');
  await h.fill(1, 300 * KiB);
  assert.ok(h.outbox.queuedBytes(1) > 64 * KiB);
  assert.equal(h.gate.isPaused, true, 'over the high-water mark: paused');
  assert.equal(h.outbox.pressured, true);
  assert.deepEqual(h.events, [true]);
  // The other front is served meanwhile and holds nothing.
  await h.fill(2, 1 * KiB);
  await until(() => (h.accepted.get(2) ?? 0) > 0, 'front 2 served');
  assert.equal(h.gate.isPaused, true);
  // The gate's waiters resume with it.
  let woke = false;
  void h.gate.wait().then(() => (woke = true));
  h.blocked.delete(1);
  await until(() => !h.gate.isPaused, 'the resume');
  await turn();
  assert.equal(woke, true);
  assert.equal(h.outbox.queuedBytes(1), 0);
  assert.deepEqual(h.events, [true, false]);
  assert.equal(h.outbox.pressureStats.pauses, 1);
  assert.deepEqual(h.stuck, [], 'a slow front is not stuck');
  h.outbox.close();
});

test('between the marks the pressure stays on (hysteresis); it goes off at the low-water mark', async () => {
  // The socket accepts a message only when the test says so (`accept`), so the lane drains one message at a time.
  const waiting: Array<() => void> = [];
  const events: boolean[] = [];
  const outbox = new FrontOutboxes(
    () => new Promise<void>((resolve) => waiting.push(resolve)),
    () => {},
    { highWaterBytes: 600 * KiB, lowWaterBytes: 300 * KiB, onPressure: (p) => events.push(p) },
  );
  const fill = async (bytes: number) => {
    outbox.push(1, { tag: Tag.REPLY, callId: 1, ok: true, value: 'x'.repeat(bytes) });
    await turn();
  };
  const accept = async () => {
    waiting.shift()!();
    await turn();
  };
  outbox.open(1);
  await fill(1 * KiB); // being sent
  await fill(260 * KiB); // a lane behind seals at 256 KiB: one message per fill
  await fill(260 * KiB);
  assert.deepEqual(events, [], `${outbox.queuedBytes(1)} bytes: under the high-water mark`);
  await fill(260 * KiB);
  assert.deepEqual(events, [true], `${outbox.queuedBytes(1)} bytes: over`);
  await accept(); // the 1 KiB one
  await accept();
  assert.ok(outbox.queuedBytes(1) > 300 * KiB && outbox.queuedBytes(1) < 600 * KiB);
  assert.deepEqual(events, [true], 'between the marks: still on');
  await accept();
  assert.ok(outbox.queuedBytes(1) <= 300 * KiB);
  assert.deepEqual(events, [true, false], 'at the low-water mark: off');
  outbox.close();
});

test('a lane holding the pressure that is forgotten (front gone) releases it at once, in the same step', async () => {
  const h = harness();
  h.outbox.open(1);
  h.outbox.open(2);
  h.blocked.add(1);
  await h.fill(1, 1 * KiB);
  await h.fill(1, 300 * KiB);
  assert.equal(h.gate.isPaused, true);
  h.outbox.forget(1);
  assert.equal(h.gate.isPaused, false, 'resumed synchronously by forget');
  assert.deepEqual(h.events, [true, false]);
  h.outbox.close();
});

test('a lane over the hard bound (stuck) releases the pressure; close() releases it too', async () => {
  const h = harness({ maxQueuedBytes: 512 * KiB });
  h.outbox.open(1);
  h.outbox.open(2);
  h.blocked.add(1);
  h.blocked.add(2);
  await h.fill(1, 1 * KiB);
  await h.fill(1, 300 * KiB);
  await h.fill(2, 1 * KiB);
  await h.fill(2, 300 * KiB);
  assert.equal(h.gate.isPaused, true);
  await h.fill(1, 300 * KiB); // 600 KiB > 512 KiB: stuck
  assert.deepEqual(h.stuck, [1]);
  assert.equal(h.gate.isPaused, true, 'lane 2 still holds it');
  h.outbox.close();
  assert.equal(h.gate.isPaused, false, 'close() resumes');
  assert.deepEqual(h.events, [true, false]);
});

test('a pressure lasting maxPressureMs lets go of its lanes; they hold nothing until back under the low-water mark', async () => {
  const h = harness({ maxPressureMs: 50 });
  h.outbox.open(1);
  h.blocked.add(1);
  await h.fill(1, 1 * KiB);
  await h.fill(1, 300 * KiB);
  assert.equal(h.gate.isPaused, true);
  await until(() => !h.gate.isPaused, 'the pressure timeout');
  assert.deepEqual(h.released, [[1]]);
  assert.equal(h.outbox.pressureStats.timeouts, 1);
  await h.fill(1, 300 * KiB);
  assert.equal(h.gate.isPaused, false, 'a released lane does not pause again while it is still behind');
  h.blocked.delete(1);
  await until(() => h.outbox.queuedBytes(1) === 0, 'lane 1 drained');
  h.blocked.add(1);
  await h.fill(1, 1 * KiB);
  await h.fill(1, 300 * KiB);
  assert.equal(h.gate.isPaused, true, 'once drained, the lane can pause again');
  assert.deepEqual(h.events, [true, false, true]);
  h.outbox.close();
});

test('bad marks and a non-positive maxPressureMs are a RangeError', () => {
  assert.throws(
    () =>
      new FrontOutboxes(
        async () => {},
        () => {},
        { highWaterBytes: 10, lowWaterBytes: 10 },
      ),
    RangeError,
  );
  assert.throws(
    () =>
      new FrontOutboxes(
        async () => {},
        () => {},
        { maxPressureMs: 0 },
      ),
    RangeError,
  );
});

test('OutputGate: wait() resolves at once when open, at resume() when paused; pause/resume say whether they changed it', async () => {
  const gate = new OutputGate();
  await gate.wait();
  assert.equal(gate.pause(), true);
  assert.equal(gate.pause(), false);
  let n = 0;
  const waits = [gate.wait().then(() => n++), gate.wait().then(() => n++)];
  await turn();
  assert.equal(n, 0);
  assert.equal(gate.resume(), true);
  assert.equal(gate.resume(), false);
  await Promise.all(waits);
  assert.equal(n, 2);
});
