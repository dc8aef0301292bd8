/**
 * The router's flow control end to end over a real unix socket (src/fronts/router-service.ts `outputGate`,
 * outbox.ts): a front that stops reading while its streams get rows pauses the engines' output gate once its lane
 * passes the high-water mark, without being reported stuck; reading again resumes it; a front whose socket closes
 * resumes it at once.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { pino } from 'pino';
import { RemoteBackend } from '../../src/fronts/remote-backend.js';
import type { RouterServiceOptions } from '../../src/fronts/router-service.js';
import { DEFAULT_SAMPLING, type GenerateRequest } from '../../src/protocols/types.js';
import { ResponsesStore } from '../../src/server/responses/store.js';
import { OutputGate } from '../../src/transport/output-gate.js';
import { FakeBackend } from '../server/fake-backend.js';
import { openTwoFronts } from './two-fronts.js';

const log = pino({ level: 'silent' });
let nextId = 0;
const req = (): GenerateRequest => ({
  requestId: `cmpl-p-${nextId++}`,
  promptTokenIds: [1, 2, 3],
  sampling: { ...DEFAULT_SAMPLING, maxNewTokens: 1_000_000 },
  stream: true,
  returnLogprob: false,
});

const until = async (cond: () => boolean, what: string): Promise<void> => {
  const deadline = Date.now() + 10_000;
  while (!cond()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
};

async function setUp(prefix: string) {
  const stuck: number[] = [];
  const pressure: boolean[] = [];
  const gate = new OutputGate();
  const fake = new FakeBackend({ ranks: [0] });
  const options: RouterServiceOptions = {
    groups: [{ worker: 'ipc:///fake', engine: 'tokenspeed', backend: fake as never }],
    store: new ResponsesStore(),
    maxConcurrentRequests: 0,
    logger: log,
    snapshotIntervalMs: 600_000,
    sendTimeoutMs: 600_000,
    outputGate: gate,
    pressureHighBytes: 1024 * 1024,
    pressureLowBytes: 256 * 1024,
    onFrontStuck: (id) => stuck.push(id),
    onOutputPressure: (p) => pressure.push(p),
  };
  const two = await openTwoFronts(prefix, options, log);
  const placed = fake.nextSubmission();
  const stream = await new RemoteBackend(two.b, 0).submit(req());
  const sub = await placed;
  // Front 2 stops reading (and stays paused: its own slice logic would resume it).
  const down = (two.b as unknown as { sock: { pause(): unknown; resume: () => unknown; destroy(): void } }).sock;
  const resumeReading = down.resume.bind(down);
  down.pause();
  down.resume = () => down;
  // ~250 KB of rows per turn until the lane holds more than 1 MiB beyond what the sockets hold.
  const ids = new Array<number>(50_000).fill(100_000);
  for (let i = 0; i < 400 && !gate.isPaused; i++) {
    sub.stream.push(ids);
    await new Promise((r) => setImmediate(r));
  }
  return { two, gate, stuck, pressure, stream, sub, ids, down, resumeReading };
}

test('a front that stops reading pauses the output gate past the high-water mark (not stuck); reading again resumes it', { timeout: 30_000 }, async () => {
  const t = await setUp('mgw-pressure-read-');
  try {
    assert.equal(t.gate.isPaused, true, 'paused once the lane passed 1 MiB');
    assert.deepEqual(t.pressure, [true]);
    assert.equal(t.two.service.pressureStats.pauses, 1);
    assert.deepEqual(t.stuck, [], 'a slow front is not reported stuck');
    // The front reads again (its stream is consumed): the lane drains and the gate opens.
    void (async () => {
      for await (const _ of t.stream) void _;
    })().catch(() => {});
    t.resumeReading();
    await until(() => !t.gate.isPaused, 'the resume');
    assert.deepEqual(t.pressure, [true, false]);
    assert.deepEqual(t.stuck, []);
  } finally {
    await t.two.close();
  }
});

test('a front whose socket closes while it holds the gate paused releases it at once', { timeout: 30_000 }, async () => {
  const t = await setUp('mgw-pressure-closed-');
  try {
    assert.equal(t.gate.isPaused, true);
    t.down.destroy(); // the front's end: the router sees its socket close and drops the lane
    await until(() => !t.gate.isPaused, 'the resume after the close');
    assert.deepEqual(t.pressure, [true, false]);
    assert.deepEqual(t.stuck, [2], 'the closed front is reported (the primary ends it)');
  } finally {
    await t.two.close();
  }
});
