import { afterEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { connect as netConnect, createServer } from 'node:net';
import { join } from 'node:path';
import { encode } from '@msgpack/msgpack';
import type { OutputMessage } from '../../src/engine-client/link.js';
import { ENGINE_CORE_DEAD } from '../../src/protocols/frames.js';
import { encodeReadyMessage, encodeReadyResponse } from '../../src/protocols/handshake.js';
import { encodeEngineIdentity } from '../../src/protocols/identity.js';
import { RequestType } from '../../src/protocols/types.js';
import { EngineDialer } from '../../src/transport/engine-dialer.js';
import { deriveEndpoints } from '../../src/transport/endpoints.js';
import type { EngineEndpoints } from '../../src/transport/endpoints.js';
import { ConfigError, HandshakeError, SendTimeoutError, TransportError } from '../../src/transport/errors.js';
import { ZmqEngineLink } from '../../src/transport/zmq-link.js';
import type { ZmqLinkOptions } from '../../src/transport/zmq-link.js';
import { freePort } from '../helpers/net.js';
import { freshDir, hangGuard, rawDealer, readyFor, recordingLogger, repoRootDir } from './helpers.js';

const GUARD_MS = 10_000;
const HELLO = encodeReadyMessage({ status: 'HELLO' });
const READY = encodeReadyMessage({ status: 'READY' });
const id = (i: number) => encodeEngineIdentity(i);

/** Everything a test opened, closed in afterEach even when the test fails. */
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function endpointsInFreshDir(): Promise<EngineEndpoints> {
  const { dir, cleanup } = await freshDir();
  cleanups.push(cleanup);
  return deriveEndpoints(`ipc://${join(dir, 'w')}`, `tcp://127.0.0.1:${await freePort()}`);
}

async function bindLink(dpSize: number, extra: Partial<ZmqLinkOptions> = {}) {
  const endpoints = await endpointsInFreshDir();
  const pending = await ZmqEngineLink.bind({ endpoints, dpSize, handshakeReceiveTimeoutMs: 5000, ...extra });
  cleanups.push(() => pending.close());
  return { endpoints, pending };
}

async function dial(handshakeAddress: string, engineIndex: number, extra: Partial<Parameters<typeof EngineDialer.connect>[0]> = {}) {
  const dialer = await EngineDialer.connect({ handshakeAddress, engineIndex, readyResponse: readyFor(engineIndex), initTimeoutMs: 5000, ...extra });
  cleanups.push(() => dialer.close());
  return dialer;
}

/** A bound link with `indices` dialled concurrently and the handshake complete. */
async function connected(indices: number[], extra: Partial<ZmqLinkOptions> = {}, dialExtra = {}) {
  const { endpoints, pending } = await bindLink(indices.length, extra);
  const handshake = pending.handshake();
  const dialers = await Promise.all(indices.map((i) => dial(endpoints.handshake, i, dialExtra)));
  const link = await hangGuard(handshake, GUARD_MS, 'handshake');
  return { endpoints, link, dialers };
}

/** Pulls the next `n` messages from an outputs() iterator. */
async function take(it: AsyncIterator<OutputMessage>, n: number): Promise<OutputMessage[]> {
  const got: OutputMessage[] = [];
  for (let i = 0; i < n; i++) {
    const r = await hangGuard(it.next(), GUARD_MS, `output message ${i}`);
    assert.equal(r.done, false, `outputs() ended after ${i} messages`);
    got.push(r.value);
  }
  return got;
}

/** Expect a handshake to fail with `stage` and a message matching `pattern`. */
async function expectHandshakeError(p: Promise<unknown>, stage: string, pattern: RegExp): Promise<HandshakeError> {
  let caught: unknown;
  await hangGuard(
    p.then(
      () => assert.fail('handshake should have failed'),
      (e: unknown) => {
        caught = e;
      },
    ),
    GUARD_MS,
    'failing handshake',
  );
  assert.ok(caught instanceof HandshakeError, `expected HandshakeError, got ${String(caught)}`);
  assert.equal(caught.stage, stage);
  assert.match(caught.message, pattern);
  return caught;
}

describe('handshake', () => {
  test('ranks registering with the short ready response (issue #14): decoded, and the form is in the registration log', async () => {
    const log = recordingLogger();
    const { link } = await connected([0, 1], { logger: log }, { readyForm: 'short', granularityKey: 'block_size' });
    assert.deepEqual(link.engines.map((e) => [e.ready.form, e.ready.maxModelLen, e.ready.numGpuBlocks, e.ready.dataParallelSize]), [
      ['short', 32768, 1000, null],
      ['short', 32769, 1000, null],
    ]);
    const registered = log.records.filter((r) => r.msg.includes('registered on the input socket'));
    assert.deepEqual(registered.map((r) => r.obj.readyForm), ['short', 'short']);
  });

  test('3 ranks starting in scrambled order [2, 0, 1] end up sorted 0, 1, 2 with their own ready responses', async () => {
    const log = recordingLogger();
    const { endpoints, link, dialers } = await connected([2, 0, 1], { logger: log });
    assert.deepEqual(link.engines.map((e) => e.engineIndex), [0, 1, 2]);
    assert.deepEqual(link.engines.map((e) => Buffer.from(e.identity).toString('hex')), ['0000', '0100', '0200']);
    assert.deepEqual(link.engines.map((e) => e.ready.maxModelLen), [32768, 32769, 32770]);
    assert.deepEqual(link.engines.map((e) => e.ready.instanceId), ['rank-0', 'rank-1', 'rank-2']);
    assert.deepEqual(dialers.map((d) => [d.inputAddress, d.outputAddress]), [0, 1, 2].map(() => [endpoints.input, endpoints.output]));
    assert.equal(log.records.filter((r) => r.msg.includes('HELLO received')).length, 3);
    // The handshake ROUTER is closed once the handshake is done: its port stops listening (zmq closes sockets on
    // its I/O thread, so poll until the port refuses; the hang guard bounds it).
    const port = Number(endpoints.handshake.split(':').pop());
    const probe = () =>
      new Promise<string>((resolve) => {
        const s = netConnect(port, '127.0.0.1');
        s.once('connect', () => {
          s.destroy();
          resolve('connected');
        });
        s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'));
      });
    const refused = await hangGuard(
      (async () => {
        for (;;) {
          const r = await probe();
          if (r === 'ECONNREFUSED') return r;
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
      })(),
      GUARD_MS,
      'handshake port to close',
    );
    assert.equal(refused, 'ECONNREFUSED');
  });

  test('identities sort by bytes, not by index: 257 (01 01) before 2 (02 00)', async () => {
    const { link } = await connected([2, 257]);
    assert.deepEqual(link.engines.map((e) => e.engineIndex), [257, 2]);
  });

  test('READY and registration of one rank may arrive before another rank says HELLO', async () => {
    const { endpoints, pending } = await bindLink(2);
    const handshake = pending.handshake();
    await dial(endpoints.handshake, 0); // HELLO, INIT, READY and registration of rank 0 all happen in phase A
    await dial(endpoints.handshake, 1);
    const link = await hangGuard(handshake, GUARD_MS, 'handshake');
    assert.deepEqual(link.engines.map((e) => e.engineIndex), [0, 1]);
  });

  test('a duplicate HELLO is an error; the sockets are closed so the worker can bind again', async () => {
    const { endpoints, pending } = await bindLink(2);
    const handshake = pending.handshake();
    const d = rawDealer(id(0));
    cleanups.push(() => d.close());
    d.connect(endpoints.handshake);
    await d.send(HELLO);
    await d.send(HELLO);
    await expectHandshakeError(handshake, 'HELLO', /duplicate HELLO from engine 0 \(identity 0000\)/);
    const again = await ZmqEngineLink.bind({ endpoints, dpSize: 1 });
    await again.close();
  });

  test('an unknown status is an error naming the identity', async () => {
    const { endpoints, pending } = await bindLink(1);
    const handshake = pending.handshake();
    const d = rawDealer(id(7));
    cleanups.push(() => d.close());
    d.connect(endpoints.handshake);
    await d.send(encode({ status: 'GOODBYE', local: true, headless: true, parallel_config_hash: null }));
    await expectHandshakeError(handshake, 'HELLO', /unexpected message from engine 7 .*status/);
  });

  test('a READY from an identity that never said HELLO is an error', async () => {
    const { endpoints, pending } = await bindLink(2);
    const handshake = pending.handshake();
    const d = rawDealer(id(3));
    cleanups.push(() => d.close());
    d.connect(endpoints.handshake);
    await d.send(READY);
    await expectHandshakeError(handshake, 'HELLO', /READY from engine 3 .*never said HELLO/);
  });

  test('a HELLO after all dpSize ranks said HELLO is an error (phase B)', async () => {
    const { endpoints, pending } = await bindLink(1);
    const handshake = pending.handshake();
    const d0 = rawDealer(id(0));
    const d1 = rawDealer(id(1));
    cleanups.push(() => d0.close(), () => d1.close());
    d0.connect(endpoints.handshake);
    await d0.send(HELLO);
    await hangGuard(d0.receive(), GUARD_MS, 'INIT'); // phase A is over for dpSize 1
    d1.connect(endpoints.handshake);
    await d1.send(HELLO);
    await expectHandshakeError(handshake, 'READY', /HELLO from engine 1 .*after all 1 expected ranks/);
  });

  test('a handshake message that is not exactly [identity, payload] is an error', async () => {
    const { endpoints, pending } = await bindLink(1);
    const handshake = pending.handshake();
    const d = rawDealer(id(0));
    cleanups.push(() => d.close());
    d.connect(endpoints.handshake);
    await d.send([HELLO, Uint8Array.of(0)]);
    await expectHandshakeError(handshake, 'HELLO', /expected 2 frames .*got 3 from engine 0/);
  });

  /** Rank `hsIndex` does HELLO/INIT/READY by hand; returns a DEALER for its registration. */
  async function handshakeByHand(endpoints: EngineEndpoints, hsIndex: number) {
    const d = rawDealer(id(hsIndex));
    cleanups.push(() => d.close());
    d.connect(endpoints.handshake);
    await d.send(HELLO);
    await hangGuard(d.receive(), GUARD_MS, 'INIT');
    await d.send(READY);
  }

  test('a registration from an identity that did not take part in the handshake is an error', async () => {
    const { endpoints, pending } = await bindLink(1);
    const handshake = pending.handshake();
    await handshakeByHand(endpoints, 0);
    const rogue = rawDealer(id(1));
    cleanups.push(() => rogue.close());
    rogue.connect(endpoints.input);
    await rogue.send(encodeReadyResponse(readyFor(1)));
    await expectHandshakeError(handshake, 'registration', /registration from unexpected engine 1 .*did not take part.*pending: engine 0/);
  });

  test('an empty or undecodable ready response is an error', async () => {
    for (const [payload, pattern] of [
      [new Uint8Array(0), /empty ready response from engine 0/],
      [encode({ num_gpu_blocks: 1, dtype: 'bfloat16' }), /ready response from engine 0 .*does not decode: .*missing required key 'max_model_len'/],
    ] as const) {
      const { endpoints, pending } = await bindLink(1);
      const handshake = pending.handshake();
      await handshakeByHand(endpoints, 0);
      const reg = rawDealer(id(0));
      cleanups.push(() => reg.close());
      reg.connect(endpoints.input);
      await reg.send(payload);
      await expectHandshakeError(handshake, 'registration', pattern);
    }
  });

  test('each receive is bounded by the handshake timeout and the error names the stage', async () => {
    {
      const { endpoints, pending } = await bindLink(2, { handshakeReceiveTimeoutMs: 100 });
      const e = await expectHandshakeError(pending.handshake(), 'HELLO', /timed out after 100 ms .*0 of 2 ranks said HELLO/);
      assert.ok(e.message.includes(endpoints.handshake));
      assert.equal(e.code, 'ETIMEDOUT');
    }
    {
      const { endpoints, pending } = await bindLink(1, { handshakeReceiveTimeoutMs: 100 });
      const handshake = pending.handshake();
      const d = rawDealer(id(4));
      cleanups.push(() => d.close());
      d.connect(endpoints.handshake);
      await d.send(HELLO);
      await expectHandshakeError(handshake, 'READY', /timed out after 100 ms .*READY still missing from engine 4/);
    }
    {
      const { endpoints, pending } = await bindLink(1, { handshakeReceiveTimeoutMs: 100 });
      const handshake = pending.handshake();
      await handshakeByHand(endpoints, 0);
      const e = await expectHandshakeError(handshake, 'registration', /timed out .*registration still missing from engine 0/);
      assert.ok(e.message.includes(endpoints.input));
    }
  });

  test('close() during the handshake aborts it; handshake() runs once', async () => {
    const { pending } = await bindLink(1);
    const handshake = pending.handshake();
    await assert.rejects(pending.handshake(), (e: unknown) => e instanceof TransportError && /can run once/.test(e.message));
    await pending.close();
    const e = await expectHandshakeError(handshake, 'HELLO', /link closed while waiting/);
    assert.equal(e.code, 'ELINKCLOSED');
    await pending.close();
  });

  test('bind validates its options and reports a busy handshake port, leaving nothing bound', async () => {
    const endpoints = await endpointsInFreshDir();
    await assert.rejects(ZmqEngineLink.bind({ endpoints, dpSize: 0 }), ConfigError);
    await assert.rejects(ZmqEngineLink.bind({ endpoints, dpSize: 1.5 }), /dpSize must be an integer/);
    await assert.rejects(ZmqEngineLink.bind({ endpoints, dpSize: 1, sendTimeoutMs: 0 }), /sendTimeoutMs/);
    const port = Number(endpoints.handshake.split(':').pop());
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(port, '127.0.0.1', resolve));
    try {
      await assert.rejects(
        ZmqEngineLink.bind({ endpoints, dpSize: 1 }),
        (e: unknown) => e instanceof TransportError && e.code === 'EADDRINUSE' && e.message.includes(`handshake ROUTER socket at ${endpoints.handshake}`),
      );
    } finally {
      await new Promise<void>((resolve) => blocker.close(() => resolve()));
    }
    // The input and output binds were released: binding again works.
    const again = await ZmqEngineLink.bind({ endpoints, dpSize: 1 });
    await again.close();
  });
});

describe('data path', () => {
  test('send delivers [type, payload] to the addressed rank, in FIFO order', async () => {
    const { link, dialers } = await connected([0, 1]);
    const [d0, d1] = dialers;
    const n = 50;
    const sends: Promise<void>[] = [];
    for (let i = 0; i < n; i++) {
      sends.push(link.send(id(i % 2), i % 3 === 0 ? RequestType.ABORT : RequestType.ADD, Uint8Array.of(0xcd, i >> 8, i & 0xff)));
    }
    await hangGuard(Promise.all(sends), GUARD_MS, 'sends');
    for (const [rank, dialer] of [[0, d0], [1, d1]] as const) {
      const it = dialer.requests()[Symbol.asyncIterator]();
      for (let i = rank; i < n; i += 2) {
        const r = await hangGuard(it.next(), GUARD_MS, `request ${i}`);
        assert.equal(r.done, false);
        assert.equal(r.value.type, i % 3 === 0 ? RequestType.ABORT : RequestType.ADD);
        assert.deepEqual([...r.value.payload], [0xcd, i >> 8, i & 0xff]);
      }
    }
  });

  test('outputs() yields pushed frames (aux frames kept), ENGINE_CORE_DEAD as dead, and keeps reading after it', async () => {
    const { link, dialers } = await connected([0]);
    const [d0] = dialers;
    const out = link.outputs()[Symbol.asyncIterator]();
    assert.throws(() => link.outputs(), /only once/);
    await d0.sendOutput(Uint8Array.of(0x93, 1, 2, 3));
    await d0.sendFrames([Uint8Array.of(0xc0), Uint8Array.of(9, 9)]);
    // A frame that merely starts like the sentinel is data.
    await d0.sendOutput(ENGINE_CORE_DEAD.subarray(0, 15));
    await d0.sendEngineCoreDead();
    await d0.sendOutput(Uint8Array.of(0xc2));
    const got = await take(out, 5);
    assert.deepEqual(got[0], { kind: 'frames', frames: [Buffer.from([0x93, 1, 2, 3])] });
    assert.deepEqual(got[1], { kind: 'frames', frames: [Buffer.from([0xc0]), Buffer.from([9, 9])] });
    assert.equal(got[2].kind, 'frames');
    assert.deepEqual(got[3], { kind: 'dead' });
    assert.deepEqual(got[4], { kind: 'frames', frames: [Buffer.from([0xc2])] });
  });

  test('a rank that goes away is reported as disconnect, and a send to it fails at once with EHOSTUNREACH', async () => {
    const { endpoints, link, dialers } = await connected([0, 1]);
    const out = link.outputs()[Symbol.asyncIterator]();
    await dialers[1].close();
    const got = await take(out, 2);
    assert.deepEqual(
      got.map((m) => (m.kind === 'disconnect' ? m.address : m.kind)).sort(),
      [endpoints.input, endpoints.output].sort(),
    );
    const e = await hangGuard(link.send(id(1), RequestType.ADD, Uint8Array.of(0xc0)).then(() => null, (err: unknown) => err), GUARD_MS, 'send');
    assert.ok(e instanceof TransportError && !(e instanceof SendTimeoutError), String(e));
    assert.equal(e.code, 'EHOSTUNREACH');
    assert.match(e.message, /engine 1 \(identity 0100\)/);
    // The other rank is unaffected.
    await link.send(id(0), RequestType.ADD, Uint8Array.of(0xc0));
    const r = await hangGuard(dialers[0].requests()[Symbol.asyncIterator]().next(), GUARD_MS, 'request');
    assert.equal(r.value?.type, RequestType.ADD);
  });

  test('a SIGKILLed engine process is reported as disconnect on the output PULL (no sentinel, no receive error)', async () => {
    const { endpoints, pending } = await bindLink(1);
    const handshake = pending.handshake();
    const child = spawn(process.execPath, ['--import', 'tsx', join(repoRootDir, 'test/transport/fixtures/dial-child.ts'), endpoints.handshake, '0'], {
      cwd: repoRootDir,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    cleanups.push(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    });
    const link = await hangGuard(handshake, 30_000, 'handshake with the child engine');
    const out = link.outputs()[Symbol.asyncIterator]();
    const [first] = await take(out, 1);
    assert.deepEqual(first, { kind: 'frames', frames: [Buffer.from([0xc0])] });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
    const got = await take(out, 2);
    assert.deepEqual(got.map((m) => m.kind), ['disconnect', 'disconnect']);
    assert.ok(got.some((m) => m.kind === 'disconnect' && m.address === endpoints.output));
  });

  test('a rank that stops reading: sends wait at the high-water mark, then SendTimeoutError', async () => {
    const { link } = await connected([0], { sendTimeoutMs: 150, sendHighWaterMark: 1 }, { inputReceiveHighWaterMark: 1 });
    const payload = new Uint8Array(64 * 1024);
    let error: unknown = null;
    let delivered = 0;
    for (; delivered < 5000 && error === null; delivered++) {
      error = await hangGuard(link.send(id(0), RequestType.ADD, payload).then(() => null, (e: unknown) => e), GUARD_MS, 'send');
    }
    assert.ok(error instanceof SendTimeoutError, `expected SendTimeoutError, got ${String(error)} after ${delivered} sends`);
    assert.ok(error instanceof TransportError);
    assert.equal(error.timeoutMs, 150);
    assert.match(error.message, /send to engine 0 \(identity 0000\) .*within 150 ms/);

    // The peer is still full: a send in progress and a queued one both fail with ELINKCLOSED on close().
    const inProgress = link.send(id(0), RequestType.ADD, payload);
    const queued = link.send(id(0), RequestType.ABORT, payload);
    const closing = link.close();
    await assert.rejects(inProgress, { code: 'ELINKCLOSED' });
    await assert.rejects(queued, { code: 'ELINKCLOSED' });
    await closing;
  });

  test('after a send timeout, the caller closes the link before the next queued send starts (dp-routing.md 12.3 rule 4)', async () => {
    const { link } = await connected([0, 1], { sendTimeoutMs: 150, sendHighWaterMark: 1 }, { inputReceiveHighWaterMark: 1 });
    const small = Uint8Array.of(0xc0);
    const big = new Uint8Array(64 * 1024);
    let outcome: { a: unknown; b: unknown } | null = null;
    for (let i = 0; i < 5000 && outcome === null; i++) {
      const a = link.send(id(0), RequestType.ADD, big); // rank 0 never reads: eventually times out
      const b = link.send(id(1), RequestType.ADD, small); // rank 1 is healthy: would go out at once
      const aSettled = a.then(
        () => null,
        (e: unknown) => {
          void link.close(); // what the engine client does, synchronously, on a send timeout
          return e;
        },
      );
      const aError = await hangGuard(aSettled, GUARD_MS, 'send a');
      const bResult = await hangGuard(b.then(() => null, (e: unknown) => e), GUARD_MS, 'send b');
      if (aError !== null) outcome = { a: aError, b: bResult };
      else assert.equal(bResult, null);
    }
    assert.ok(outcome !== null, 'rank 0 never reached its high-water mark');
    assert.ok(outcome.a instanceof SendTimeoutError, String(outcome.a));
    assert.ok(outcome.b instanceof TransportError && outcome.b.code === 'ELINKCLOSED', `queued send must not proceed: ${String(outcome.b)}`);
  });

  test('a receive failure on the output socket yields { kind: closed } and ends outputs()', async () => {
    const { link } = await connected([0]);
    // Close the PULL underneath the link (as a socket failure would): the pending receive rejects.
    (link as unknown as { output: { close(): void } }).output.close();
    const seen: OutputMessage[] = [];
    await hangGuard(
      (async () => {
        for await (const m of link.outputs()) seen.push(m);
      })(),
      GUARD_MS,
      'outputs() end',
    );
    assert.equal(seen.length, 1);
    const [closed] = seen;
    assert.ok(closed.kind === 'closed' && closed.error instanceof TransportError && closed.error.message.includes(link.endpoints.output), JSON.stringify(closed));
  });

  test('send rejects a type byte outside 0x00..0x03', async () => {
    const { link } = await connected([0]);
    await assert.rejects(link.send(id(0), 7 as never, Uint8Array.of(0xc0)), /request type 7/);
  });

  test('close() is idempotent, ends outputs() and rejects later sends', async () => {
    const { link } = await connected([0]);
    const drained = (async () => {
      const seen: OutputMessage[] = [];
      for await (const m of link.outputs()) seen.push(m);
      return seen;
    })();
    const first = link.close();
    const second = link.close();
    assert.equal(first, second);
    await first;
    assert.deepEqual(await hangGuard(drained, GUARD_MS, 'outputs() end'), []);
    await assert.rejects(link.send(id(0), RequestType.ADD, Uint8Array.of(0xc0)), (e: unknown) => e instanceof TransportError && e.code === 'ELINKCLOSED');
  });
});
