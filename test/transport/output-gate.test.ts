/**
 * The output receive gate of a real ZeroMQ link (src/transport/zmq-link.ts `outputGate`, output-gate.ts): while it
 * is paused the link takes no message off its output PULL (the engine's sends stay in ZeroMQ's pipe); on resume they
 * arrive in order; `close()` while paused ends `outputs()` and resolves (no hang).
 */
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { join } from 'node:path';
import type { OutputMessage } from '../../src/engine-client/link.js';
import { EngineDialer } from '../../src/transport/engine-dialer.js';
import { deriveEndpoints } from '../../src/transport/endpoints.js';
import { OutputGate } from '../../src/transport/output-gate.js';
import { ZmqEngineLink } from '../../src/transport/zmq-link.js';
import { freePort } from '../helpers/net.js';
import { freshDir, hangGuard, readyFor } from './helpers.js';

const GUARD_MS = 10_000;
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function gatedLink(gate: OutputGate) {
  const { dir, cleanup } = await freshDir();
  cleanups.push(cleanup);
  const endpoints = deriveEndpoints(`ipc://${join(dir, 'w')}`, `tcp://127.0.0.1:${await freePort()}`);
  const link = await ZmqEngineLink.bind({ endpoints, dpSize: 1, handshakeReceiveTimeoutMs: 5000, outputGate: gate });
  cleanups.push(() => link.close());
  const dialer = await EngineDialer.connect({
    handshakeAddress: endpoints.handshake,
    engineIndex: 0,
    readyResponse: readyFor(0),
    initTimeoutMs: 5000,
  });
  cleanups.push(() => dialer.close());
  await hangGuard(link.whenJoined(1), GUARD_MS, 'join');
  // Read outputs() into `got` from now on; `reading` settles when it ends.
  const got: OutputMessage[] = [];
  const reading = (async () => {
    for await (const m of link.outputs()) got.push(m);
  })();
  const received = (n: number, what: string) =>
    hangGuard(
      (async () => {
        while (got.length < n) await sleep(5);
      })(),
      GUARD_MS,
      what,
    );
  // One message through, so the loop is parked in receive() (the gate is checked before the next one).
  await dialer.sendOutput(Uint8Array.of(1));
  await received(1, 'first message');
  return { link, dialer, got, reading, received };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('a paused gate stops the output receive (messages wait in ZeroMQ); resume delivers them in order', async () => {
  const gate = new OutputGate();
  const { link, dialer, got, reading, received } = await gatedLink(gate);
  // Pausing holds back the messages after the one the parked receive() is waiting for.
  gate.pause();
  for (let i = 2; i <= 5; i++) await dialer.sendOutput(Uint8Array.of(i));
  await sleep(200);
  assert.ok(got.length <= 2, `paused: at most the receive already in progress completes (got ${got.length})`);
  const before = got.length;
  await sleep(200);
  assert.equal(got.length, before, 'nothing more while paused');
  gate.resume();
  await received(5, 'the held messages');
  assert.deepEqual(
    got.map((m) => (m.kind === 'frames' ? m.frames[0]![0] : m.kind)),
    [1, 2, 3, 4, 5],
  );
  await link.close();
  await hangGuard(reading, GUARD_MS, 'outputs() end');
});

test('close() while the gate is paused ends outputs(), resolves (no hang) and removes its waiter from the gate', async () => {
  const gate = new OutputGate();
  const { link, dialer, reading } = await gatedLink(gate);
  gate.pause();
  await dialer.sendOutput(Uint8Array.of(2)); // completes the receive in progress; the next one waits on the gate
  await dialer.sendOutput(Uint8Array.of(3));
  // Under load the loop may take a while to get there: wait for it (a hang guard, not a timing assertion).
  await hangGuard(
    (async () => {
      while (gate.waiting === 0) await sleep(5);
    })(),
    GUARD_MS,
    'the receive loop reaching the gate',
  );
  assert.equal(gate.waiting, 1, 'the receive loop waits on the gate');
  await hangGuard(link.close(), GUARD_MS, 'close() while paused');
  await hangGuard(reading, GUARD_MS, 'outputs() end while paused');
  assert.equal(gate.isPaused, true, "the shared gate is not the link's to open");
  assert.equal(gate.waiting, 0, 'a closed link leaves no waiter in the gate');
});
