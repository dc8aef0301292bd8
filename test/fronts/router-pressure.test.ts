/**
 * The router's flow control end to end over a real unix socket (src/fronts/router/router-service.ts `outputGate`,
 * outbox.ts): a front that stops reading while its streams get rows pauses the engines' output gate once its lane
 * passes the high-water mark, without being reported stuck; reading again resumes it; a front whose socket closes
 * resumes it at once.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { pino } from 'pino';
import { RemoteBackend } from '../../src/fronts/front/remote-backend.js';
import type { RouterServiceOptions } from '../../src/fronts/router/router-service.js';
import { OutputGate } from '../../src/transport/output-gate.js';
import { progressGuard } from '../helpers/async.js';
import { FakeBackend } from '../server/fake-backend.js';
import { openTwoFronts, streamedRequest, unhurriedOptions, until } from './two-fronts.js';

const log = pino({ level: 'silent' });
let nextId = 0;

async function setUp(prefix: string) {
  const stuck: number[] = [];
  const pressure: boolean[] = [];
  const gate = new OutputGate();
  const fake = new FakeBackend({ ranks: [0] });
  const options: RouterServiceOptions = {
    ...unhurriedOptions(fake, log),
    outputGate: gate,
    pressureHighBytes: 1024 * 1024,
    pressureLowBytes: 256 * 1024,
    onFrontStuck: (id) => stuck.push(id),
    onOutputPressure: (p) => pressure.push(p),
  };
  const two = await openTwoFronts(prefix, options, log);
  const placed = fake.nextSubmission();
  const stream = await new RemoteBackend(two.b, 0).submit(streamedRequest(`cmpl-p-${nextId++}`, 1_000_000));
  const sub = await placed;
  // Front 2 stops reading (and stays paused: its own slice logic would resume it).
  const down = (two.b as unknown as { sock: { pause(): unknown; resume: () => unknown; destroy(): void } }).sock;
  const ownResume = down.resume;
  down.pause();
  down.resume = () => down;
  // Reading again: the front's own resume works again (its slice logic pauses and resumes the socket as it reads).
  const resumeReading = (): void => {
    down.resume = ownResume;
    down.resume();
  };
  // ~250 KB of rows per turn until the lane holds more than 1 MiB beyond what the sockets hold.
  const ids = new Array<number>(50_000).fill(100_000);
  for (let i = 0; i < 400 && !gate.isPaused; i++) {
    sub.stream.push(ids);
    await new Promise((r) => setImmediate(r));
  }
  return { two, gate, stuck, pressure, stream, sub, ids, down, resumeReading };
}

test(
  'a front that stops reading pauses the output gate past the high-water mark (not stuck); reading again resumes it',
  { timeout: 120_000 },
  async () => {
    const t = await setUp('mgw-pressure-read-');
    try {
      assert.equal(t.gate.isPaused, true, 'paused once the lane passed 1 MiB');
      assert.deepEqual(t.pressure, [true]);
      assert.equal(t.two.service.pressureStats.pauses, 1);
      assert.deepEqual(t.stuck, [], 'a slow front is not reported stuck');
      // The front reads again (its stream is consumed): the lane drains and the gate opens. Draining the megabytes
      // held takes as long as the machine's load makes it: the wait fails only when the reader stops making progress.
      let consumed = 0;
      void (async () => {
        for await (const _ of t.stream) consumed++;
      })().catch(() => {});
      t.resumeReading();
      const open = Number.MAX_SAFE_INTEGER;
      await progressGuard(() => (t.gate.isPaused ? consumed : open), open, 20_000, 'outputs read by the resumed front');
      assert.deepEqual(t.pressure, [true, false]);
      assert.deepEqual(t.stuck, []);
    } finally {
      await t.two.close();
    }
  },
);

test(
  'a front whose socket closes while it holds the gate paused releases it at once',
  { timeout: 30_000 },
  async () => {
    const t = await setUp('mgw-pressure-closed-');
    try {
      assert.equal(t.gate.isPaused, true);
      t.down.destroy(); // the front's end: the router sees its socket close and drops the lane
      await until(() => !t.gate.isPaused, 'the resume after the close', 10_000);
      assert.deepEqual(t.pressure, [true, false]);
      assert.deepEqual(t.stuck, [2], 'the closed front is reported (the primary ends it)');
    } finally {
      await t.two.close();
    }
  },
);
