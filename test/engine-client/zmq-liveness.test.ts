/**
 * Death detection over real ZeroMQ sockets (issue #3 part 4; dp-routing.md 14.8): when a rank's process goes away
 * without ENGINE_CORE_DEAD, zeromq reports `disconnect` (src/transport/zmq-link.ts), the client probes every rank
 * with an empty ABORT, the input ROUTER (mandatory routing) refuses the probe to the vanished identity with
 * EHOSTUNREACH, and the engine group fails: every in-flight request ends with engine-dead, at once, not after the
 * 300 s silence watchdog. Timing is never asserted; the hang guards only bound a broken run.
 */
import { afterEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { RequestType } from '../../src/protocols/types.js';
import { EngineClient } from '../../src/engine-client/client.js';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { EngineDialer } from '../../src/transport/engine-dialer.js';
import { deriveEndpoints } from '../../src/transport/endpoints.js';
import { ZmqEngineLink } from '../../src/transport/zmq-link.js';
import { freePort } from '../helpers/net.js';
import { freshDir, hangGuard } from '../helpers/async.js';
import { repoRoot } from '../helpers/shared.js';
import { readyFor } from '../transport/helpers.js';
import { JsonProtocol, drain, req } from './fakes.js';

const GUARD_MS = 20_000;
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function boundLink(dpSize: number) {
  const { dir, cleanup } = await freshDir('mgw-ec-');
  cleanups.push(cleanup);
  const endpoints = deriveEndpoints(`ipc://${join(dir, 'w')}`, `tcp://127.0.0.1:${await freePort()}`);
  const pending = await ZmqEngineLink.bind({ endpoints, dpSize, handshakeReceiveTimeoutMs: GUARD_MS });
  cleanups.push(() => pending.close());
  return { endpoints, pending };
}

async function dial(handshakeAddress: string, engineIndex: number): Promise<EngineDialer> {
  const dialer = await EngineDialer.connect({ handshakeAddress, engineIndex, readyResponse: readyFor(engineIndex), initTimeoutMs: GUARD_MS });
  cleanups.push(() => dialer.close());
  return dialer;
}

function clientOver(link: ZmqEngineLink): EngineClient {
  const client = new EngineClient({ protocol: new JsonProtocol(), link });
  cleanups.push(() => client.close());
  return client;
}

/** Waits for the next request the rank receives. */
async function nextRequest(dialer: EngineDialer) {
  const r = await hangGuard(dialer.requests()[Symbol.asyncIterator]().next(), GUARD_MS, 'request at the rank');
  assert.equal(r.done, false);
  return r.value;
}

test('a rank that goes away (in process): disconnect → probe → EHOSTUNREACH → every request fails with engine-dead', async () => {
  const { endpoints, pending } = await boundLink(2);
  const handshake = pending.handshake();
  const dialers = await Promise.all([dial(endpoints.handshake, 0), dial(endpoints.handshake, 1)]);
  const client = clientOver(await hangGuard(handshake, GUARD_MS, 'handshake'));
  const onDead = await client.submit(req('on-dead'), { dpRank: 1 });
  const onLive = await client.submit(req('on-live'), { dpRank: 0 });
  assert.equal((await nextRequest(dialers[1])).type, RequestType.ADD);

  const failed = new Promise<EngineClientError>((resolve) => client.once('failed', resolve));
  await dialers[1].close();
  const error = await hangGuard(failed, GUARD_MS, 'group failure after the rank went away');
  assert.equal(error.kind, 'engine-dead');
  assert.match(error.message, /DP rank 1 .*EHOSTUNREACH/);
  for (const s of [onDead, onLive]) assert.equal((await drain(s)).error, error, 'every request ends with the same error');
  assert.equal(client.isAlive(), false);
  assert.deepEqual(client.stats.failures, { 'peer-unreachable': 1 });
  assert.deepEqual(client.rankStates().map((r) => r.inFlight), [0, 0]);
});

test('a SIGKILLed rank process (no sentinel): the group fails without waiting for the silence watchdog', async () => {
  const { endpoints, pending } = await boundLink(2);
  const handshake = pending.handshake();
  const child = spawn(process.execPath, ['--import', 'tsx', join(repoRoot, 'test/transport/fixtures/dial-child.ts'), endpoints.handshake, '1'], {
    cwd: repoRoot,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  cleanups.push(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  await dial(endpoints.handshake, 0);
  const client = clientOver(await hangGuard(handshake, GUARD_MS, 'handshake with the child rank'));
  const s = await client.submit(req('held-by-child'), { dpRank: 1 });

  const failed = new Promise<EngineClientError>((resolve) => client.once('failed', resolve));
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
  const error = await hangGuard(failed, GUARD_MS, 'group failure after SIGKILL');
  assert.equal(error.kind, 'engine-dead');
  assert.equal((await drain(s)).error, error);
  assert.deepEqual(client.stats.failures, { 'peer-unreachable': 1 });
});
