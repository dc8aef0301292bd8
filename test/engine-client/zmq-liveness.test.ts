/**
 * Death detection and rejoin over real ZeroMQ sockets (issue #3 part 4, issue #8; dp-routing.md 14.8): when a rank's
 * process goes away without ENGINE_CORE_DEAD, zeromq reports `disconnect` (src/transport/zmq-link.ts), the client
 * probes every rank with an empty ABORT, the input ROUTER (mandatory routing) refuses the probe to the vanished
 * identity with EHOSTUNREACH, and that rank is dead: its in-flight requests end with engine-dead at once (not after
 * the 300 s silence watchdog) while the other rank's keep going; a new process with the same index then dials the
 * same handshake socket and serves again. Timing is never asserted; the hang guards only bound a broken run.
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
import { nodeEntry } from '../helpers/entry.js';
import { freshDir, hangGuard } from '../helpers/async.js';
import { repoRoot } from '../helpers/vectors.js';
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
  const link = await ZmqEngineLink.bind({ endpoints, dpSize, handshakeReceiveTimeoutMs: GUARD_MS });
  cleanups.push(() => link.close());
  return { endpoints, link };
}

async function dial(handshakeAddress: string, engineIndex: number): Promise<EngineDialer> {
  const dialer = await EngineDialer.connect({
    handshakeAddress,
    engineIndex,
    readyResponse: readyFor(engineIndex),
    initTimeoutMs: GUARD_MS,
  });
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

/** Resolves when `rank` reaches `state` (a `rank` event). */
function rankState(client: EngineClient, rank: number, state: string): Promise<void> {
  return new Promise((resolve) => {
    if (client.rankStates().find((r) => r.engineIndex === rank)?.state === state) return resolve();
    const on = (i: number, s: string) => {
      if (i === rank && s === state) {
        client.off('rank', on);
        resolve();
      }
    };
    client.on('rank', on);
  });
}

test('a rank that goes away (in process): disconnect → probe → EHOSTUNREACH → only its requests fail; a new process rejoins', async () => {
  const { endpoints, link } = await boundLink(2);
  const client = clientOver(link);
  const dialers = await Promise.all([dial(endpoints.handshake, 0), dial(endpoints.handshake, 1)]);
  await hangGuard(client.whenAllJoined(), GUARD_MS, 'joins');
  const onDead = await client.submit(req('on-dead'), { dpRank: 1 });
  const onLive = await client.submit(req('on-live'), { dpRank: 0 });
  assert.equal((await nextRequest(dialers[1]!)).type, RequestType.ADD);

  const dead = rankState(client, 1, 'dead');
  await dialers[1]!.close();
  await hangGuard(dead, GUARD_MS, 'rank 1 found dead after it went away');
  const error = (await drain(onDead)).error as EngineClientError;
  assert.equal(error.kind, 'engine-dead');
  assert.match(error.message, /DP rank 1 .*EHOSTUNREACH/);
  assert.deepEqual(client.stats.rankDeaths, { 'peer-unreachable': 1 });
  assert.deepEqual(
    client.rankStates().map((r) => r.inFlight),
    [1, 0],
  );
  assert.equal(client.status(), 'degraded');

  // The same engine index dials the same handshake again (a restart) and takes work.
  await dial(endpoints.handshake, 1);
  await hangGuard(rankState(client, 1, 'ready'), GUARD_MS, 'rank 1 rejoined');
  assert.equal(client.rankStates()[1]!.rejoins, 1);
  onLive.cancel();
  const again = await client.submit(req('again'), { dpRank: 1 });
  assert.equal(again.engineIndex, 1);
  again.cancel();
});

test('a SIGKILLed rank process (no sentinel): that rank is dead without waiting for the silence watchdog', async () => {
  const { endpoints, link } = await boundLink(2);
  const client = clientOver(link);
  const child = spawn(
    process.execPath,
    [...nodeEntry(new URL('../transport/fixtures/dial-child.ts', import.meta.url)), endpoints.handshake, '1'],
    {
      cwd: repoRoot,
      stdio: ['ignore', 'ignore', 'inherit'],
    },
  );
  cleanups.push(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  await dial(endpoints.handshake, 0);
  await hangGuard(client.whenAllJoined(), GUARD_MS, 'handshake with the child rank');
  const s = await client.submit(req('held-by-child'), { dpRank: 1 });

  const dead = rankState(client, 1, 'dead');
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
  await hangGuard(dead, GUARD_MS, 'rank 1 dead after SIGKILL');
  assert.equal(((await drain(s)).error as EngineClientError).kind, 'engine-dead');
  assert.deepEqual(client.stats.rankDeaths, { 'peer-unreachable': 1 });
  assert.equal(client.rankStates()[0]!.state, 'ready');
});
