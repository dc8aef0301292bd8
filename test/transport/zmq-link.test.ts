/**
 * The gateway's socket set over real ZeroMQ (src/transport/zmq-link.ts, handshake-service.ts; engine-wire.md 1-2;
 * issue #8 parts 2, 4 and 5): the handshake service keeps accepting ranks for the link's life, refuses every
 * malformed or out-of-order message without stopping (logged, counted by reason, no slot taken), bounds each stage
 * of a rank's handshake, and the data path keeps per-rank send order without letting a stuck rank hold the others.
 * Hang guards only; nothing asserts a duration.
 */
import { afterEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { lstat } from 'node:fs/promises';
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
import { ConfigError, SendTimeoutError, TransportError } from '../../src/transport/errors.js';
import { ZmqEngineLink } from '../../src/transport/zmq-link.js';
import type { ZmqLinkOptions } from '../../src/transport/zmq-link.js';
import { freePort } from '../helpers/net.js';
import { nodeEntry } from '../helpers/entry.js';
import { freshDir, hangGuard, rawDealer, readyFor, recordingLogger, repoRootDir } from './helpers.js';

const GUARD_MS = 30_000; // a hang guard: generous for a loaded machine
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
  const link = await ZmqEngineLink.bind({ endpoints, dpSize, handshakeReceiveTimeoutMs: 5000, ...extra });
  cleanups.push(() => link.close());
  return { endpoints, link };
}

async function dial(
  handshakeAddress: string,
  engineIndex: number,
  extra: Partial<Parameters<typeof EngineDialer.connect>[0]> = {},
) {
  const dialer = await EngineDialer.connect({
    handshakeAddress,
    engineIndex,
    readyResponse: readyFor(engineIndex),
    initTimeoutMs: 5000,
    ...extra,
  });
  cleanups.push(() => dialer.close());
  return dialer;
}

/** A bound link with `indices` dialled concurrently and all of them joined. */
async function connected(
  indices: number[],
  extra: Partial<ZmqLinkOptions> = {},
  dialExtra = {},
  dpSize = indices.length,
) {
  const { endpoints, link } = await bindLink(dpSize, extra);
  const dialers = await Promise.all(indices.map((i) => dial(endpoints.handshake, i, dialExtra)));
  await hangGuard(link.whenJoined(indices.length), GUARD_MS, 'joins');
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

/** Poll `cond` every 10 ms (hang guard only). */
async function until(cond: () => boolean, what: string): Promise<void> {
  await hangGuard(
    (async () => {
      while (!cond()) await new Promise((r) => setTimeout(r, 10));
    })(),
    GUARD_MS,
    what,
  );
}

/** A raw DEALER with `identity` connected to `address`. */
function rawAt(address: string, identity: Uint8Array) {
  const d = rawDealer(identity);
  cleanups.push(() => d.close());
  rawPeers.push(d);
  d.connect(address);
  return d;
}

/** The raw peers `rawAt` made and not yet closed. */
const rawPeers: Array<{ close(): void; closed: boolean }> = [];

/**
 * Close every raw peer: a real rank that dials next must not find a raw peer holding its identity on the input
 * ROUTER, which only a registration right after READY may take over (handshake-service.ts; under load the handover
 * window could close first, and the rank would not join).
 */
function closeRawPeers(): void {
  for (const d of rawPeers.splice(0)) if (!d.closed) d.close();
}

describe('handshake service', () => {
  test('ranks registering with the short ready response (issue #14): decoded, and the form is in the registration log', async () => {
    const log = recordingLogger();
    const { link } = await connected([0, 1], { logger: log }, { readyForm: 'short', granularityKey: 'block_size' });
    assert.deepEqual(
      link.engines.map((e) => [e.ready.form, e.ready.maxModelLen, e.ready.numGpuBlocks, e.ready.dataParallelSize]),
      [
        ['short', 32768, 1000, null],
        ['short', 32769, 1000, null],
      ],
    );
    const registered = log.records.filter((r) => r.msg.includes('registered on the input socket'));
    assert.deepEqual(registered.map((r) => r.obj.readyForm).sort(), ['short', 'short']);
  });

  test('3 ranks in scrambled order join sorted with their own ready responses; the handshake ROUTER stays bound', async () => {
    const log = recordingLogger();
    const { endpoints, link, dialers } = await connected([2, 0, 1], { logger: log });
    assert.deepEqual(
      link.engines.map((e) => e.engineIndex),
      [0, 1, 2],
    );
    assert.deepEqual(
      link.engines.map((e) => Buffer.from(e.identity).toString('hex')),
      ['0000', '0100', '0200'],
    );
    assert.deepEqual(
      link.engines.map((e) => e.ready.maxModelLen),
      [32768, 32769, 32770],
    );
    assert.deepEqual(
      dialers.map((d) => [d.inputAddress, d.outputAddress]),
      [0, 1, 2].map(() => [endpoints.input, endpoints.output]),
    );
    assert.equal(log.records.filter((r) => r.msg.includes('HELLO received')).length, 3);
    const port = Number(endpoints.handshake.split(':').pop());
    const reachable = await new Promise<boolean>((resolve) => {
      const s = netConnect(port, '127.0.0.1');
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
    });
    assert.equal(reachable, true, 'a rank that restarts later can still dial the handshake port');
  });

  test('identities sort by bytes, not by index: 257 (01 01) before 2 (02 00)', async () => {
    const { link } = await connected([2, 257], {}, {}, 258);
    assert.deepEqual(
      link.engines.map((e) => e.engineIndex),
      [257, 2],
    );
  });

  test('READY and registration of one rank may arrive before another rank says HELLO', async () => {
    const { endpoints, link } = await bindLink(2);
    await dial(endpoints.handshake, 0);
    await hangGuard(link.whenJoined(1), GUARD_MS, 'rank 0');
    await dial(endpoints.handshake, 1);
    await hangGuard(link.whenJoined(2), GUARD_MS, 'rank 1');
    assert.deepEqual(
      link.engines.map((e) => e.engineIndex),
      [0, 1],
    );
  });

  test('malformed, out-of-order and out-of-range messages are logged, counted and ignored; a real rank joins afterwards', async () => {
    const log = recordingLogger();
    const { endpoints, link } = await bindLink(6, { logger: log });
    const hs = endpoints.handshake;
    // One peer (identity) per message: two live peers with one identity would hand the connection over. The real
    // ranks that join afterwards (4 and 5) use identities no raw peer held: a closed peer leaves the ROUTER in its I/O
    // thread, after close() returns, and under load a rank dialling with that identity would still find it there.
    await rawAt(hs, id(0)).send(Uint8Array.of(0xc1, 0x00)); // garbage
    await rawAt(hs, id(1)).send(encode({ status: 'GOODBYE', local: true, headless: true, parallel_config_hash: null }));
    await rawAt(hs, id(2)).send([HELLO, Uint8Array.of(0)]); // multi-frame
    await rawAt(hs, id(3)).send(READY); // READY before HELLO
    await rawAt(
      hs,
      Uint8Array.from({ length: 13 }, (_, i) => i + 1),
    ).send(HELLO); // 13-byte identity
    await rawAt(hs, id(6)).send(HELLO); // index ≥ dpSize
    await rawAt(hs, id(9)).send(HELLO);
    await rawAt(endpoints.input, id(1)).send(encodeReadyResponse(readyFor(1))); // registration nobody expects
    const expected = {
      undecodable: 2,
      'frame-count': 1,
      'unexpected-ready': 1,
      'bad-identity': 1,
      'index-out-of-range': 2,
      'unexpected-registration': 1,
    };
    await until(() => Object.values(link.handshakeRejected).reduce((a, b) => a + b, 0) === 8, 'all 8 counted');
    assert.deepEqual({ ...link.handshakeRejected }, expected);
    const lines = log.records.filter((r) => r.level === 'warn' && /ignored/.test(r.msg));
    assert.equal(lines.length, 8);
    assert.ok(
      lines.some((r) =>
        /identity 0102030405060708090a0b0c0d \(no engine index\).*routing identity is 13 bytes/.test(r.msg),
      ),
      'names the peer and the problem',
    );
    assert.ok(lines.some((r) => /engine 9 \(identity 0900\).*engine index 9 is outside 0\.\.5/.test(r.msg)));
    assert.equal(link.engines.length, 0, 'nothing took a slot');
    closeRawPeers();
    const dialers = await Promise.all([dial(hs, 4), dial(hs, 5)]);
    await hangGuard(link.whenJoined(2), GUARD_MS, 'real ranks join');
    assert.equal(dialers.length, 2);
    assert.deepEqual(
      link.engines.map((e) => e.engineIndex),
      [4, 5],
    );
  });

  test('a duplicate READY and empty / undecodable ready responses are refused; the rank can still finish', async () => {
    const { endpoints, link } = await bindLink(1);
    const d = rawAt(endpoints.handshake, id(0));
    await d.send(HELLO);
    await hangGuard(d.receive(), GUARD_MS, 'INIT');
    await d.send(READY);
    await d.send(READY);
    const reg = rawAt(endpoints.input, id(0));
    await reg.send(new Uint8Array(0));
    await reg.send(encode({ num_gpu_blocks: 1, dtype: 'bfloat16' })); // no max_model_len: not even the short form
    await until(() => Object.keys(link.handshakeRejected).length === 3, 'three refusals');
    assert.deepEqual(
      { ...link.handshakeRejected },
      { 'unexpected-ready': 1, 'empty-ready-response': 1, 'undecodable-ready-response': 1 },
    );
    assert.equal(link.engines.length, 0);
    await reg.send(encodeReadyResponse(readyFor(0)));
    await hangGuard(link.whenJoined(1), GUARD_MS, 'join');
    assert.equal(link.engines[0]!.ready.instanceId, 'rank-0');
  });

  test("each stage of a rank's handshake is bounded: a rank that never finishes goes back to not joined and may dial again", async () => {
    const log = recordingLogger();
    const { endpoints, link } = await bindLink(1, { handshakeReceiveTimeoutMs: 100, logger: log });
    const d = rawAt(endpoints.handshake, id(0));
    await d.send(HELLO);
    await hangGuard(d.receive(), GUARD_MS, 'INIT');
    await until(() => link.handshakeRejected['handshake-timeout'] === 1, 'the stage timed out');
    assert.ok(log.records.some((r) => /no READY and the registration within 100 ms/.test(r.msg)));
    assert.equal(link.engines.length, 0);
    await dial(endpoints.handshake, 0);
    await hangGuard(link.whenJoined(1), GUARD_MS, 'join on the second attempt');
  });

  test("a HELLO again mid-handshake restarts that rank's handshake (a rank restarting while loading)", async () => {
    const { endpoints, link } = await bindLink(1);
    const first = rawAt(endpoints.handshake, id(0));
    await first.send(HELLO);
    await hangGuard(first.receive(), GUARD_MS, 'first INIT');
    first.close();
    await dial(endpoints.handshake, 0); // the restarted process: same identity, full handshake
    await hangGuard(link.whenJoined(1), GUARD_MS, 'join');
  });

  test('an oversized handshake frame never reaches the gateway (the peer is dropped); the service keeps serving', async () => {
    const { endpoints, link } = await bindLink(1, { maxMessageBytes: { handshake: 1024 } });
    const big = rawAt(endpoints.handshake, id(0));
    await big.send(new Uint8Array(1024 * 1024));
    await dial(endpoints.handshake, 0);
    await hangGuard(link.whenJoined(1), GUARD_MS, 'join');
    assert.deepEqual({ ...link.handshakeRejected }, {}, 'the big frame was never read');
  });

  test('with no engine client attached, an index that already joined is refused (duplicate-live-index)', async () => {
    const { endpoints, link } = await connected([0]);
    const d = rawAt(endpoints.handshake, id(0));
    await d.send(HELLO);
    await until(() => link.handshakeRejected['duplicate-live-index'] === 1, 'refused');
  });

  test('bind validates its options, reports a busy handshake port and a live owner; nothing is left bound or on disk', async () => {
    const endpoints = await endpointsInFreshDir();
    await assert.rejects(ZmqEngineLink.bind({ endpoints, dpSize: 0 }), ConfigError);
    await assert.rejects(ZmqEngineLink.bind({ endpoints, dpSize: 1.5 }), /dpSize must be an integer/);
    await assert.rejects(ZmqEngineLink.bind({ endpoints, dpSize: 1, sendTimeoutMs: 0 }), /sendTimeoutMs/);
    await assert.rejects(
      ZmqEngineLink.bind({ endpoints, dpSize: 1, maxMessageBytes: { output: 0 } }),
      /maxMessageBytes\.output/,
    );
    const port = Number(endpoints.handshake.split(':').pop());
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(port, '127.0.0.1', resolve));
    try {
      await assert.rejects(
        ZmqEngineLink.bind({ endpoints, dpSize: 1 }),
        (e: unknown) =>
          e instanceof TransportError &&
          e.code === 'EADDRINUSE' &&
          e.message.includes(`handshake ROUTER socket at ${endpoints.handshake}`),
      );
    } finally {
      await new Promise<void>((resolve) => blocker.close(() => resolve()));
    }
    await assert.rejects(
      lstat(endpoints.input.slice('ipc://'.length)),
      { code: 'ENOENT' },
      'the failed bind removed its socket files',
    );
    const first = await ZmqEngineLink.bind({ endpoints, dpSize: 1 });
    try {
      await assert.rejects(
        ZmqEngineLink.bind({ endpoints, dpSize: 1 }),
        (e: unknown) => e instanceof ConfigError && /in use: a live process accepts connections/.test(e.message),
      );
      assert.ok(
        (await lstat(endpoints.input.slice('ipc://'.length))).isSocket(),
        "the live link's socket file is left alone",
      );
    } finally {
      await first.close();
    }
    await assert.rejects(
      lstat(endpoints.output.slice('ipc://'.length)),
      { code: 'ENOENT' },
      'close() removed its socket files',
    );
  });
});

describe('data path', () => {
  test('send delivers [type, payload] to the addressed rank, in order per rank', async () => {
    const { link, dialers } = await connected([0, 1]);
    const [d0, d1] = dialers;
    const n = 50;
    const sends: Promise<void>[] = [];
    for (let i = 0; i < n; i++) {
      sends.push(
        link.send(id(i % 2), i % 3 === 0 ? RequestType.ABORT : RequestType.ADD, Uint8Array.of(0xcd, i >> 8, i & 0xff)),
      );
    }
    await hangGuard(Promise.all(sends), GUARD_MS, 'sends');
    for (const [rank, dialer] of [
      [0, d0],
      [1, d1],
    ] as const) {
      const it = dialer!.requests()[Symbol.asyncIterator]();
      for (let i = rank; i < n; i += 2) {
        const r = await hangGuard(it.next(), GUARD_MS, `request ${i}`);
        assert.equal(r.done, false);
        assert.equal(r.value.type, i % 3 === 0 ? RequestType.ABORT : RequestType.ADD);
        assert.deepEqual([...r.value.payload], [0xcd, i >> 8, i & 0xff]);
      }
    }
  });

  test('sends queued in one event-loop turn reach the socket together at the end of the turn, in order', async () => {
    const { link, dialers } = await connected([0]);
    // Reaches into the link on purpose: what is asserted is when the sends leave the per-rank queues.
    const queued = () => (link as unknown as { sendQueues: { size: number } }).sendQueues.size;
    const sends = [1, 2, 3].map((i) => link.send(id(0), RequestType.ADD, Uint8Array.of(i)));
    // Plenty of microtask hops (a send that starts at once completes within a few): still queued in this turn.
    for (let i = 0; i < 50; i++) await Promise.resolve();
    assert.equal(queued(), 3, 'nothing left the queues during the turn the sends were queued in');
    await hangGuard(Promise.all(sends), GUARD_MS, 'sends');
    assert.equal(queued(), 0);
    const it = dialers[0]!.requests()[Symbol.asyncIterator]();
    for (const i of [1, 2, 3]) {
      const r = await hangGuard(it.next(), GUARD_MS, `request ${i}`);
      assert.deepEqual([...r.value.payload], [i]);
    }
  });

  test('outputs() yields pushed frames (aux frames kept), ENGINE_CORE_DEAD as dead, and keeps reading after it', async () => {
    const { link, dialers } = await connected([0]);
    const [d0] = dialers;
    const out = link.outputs()[Symbol.asyncIterator]();
    assert.throws(() => link.outputs(), /only once/);
    await d0!.sendOutput(Uint8Array.of(0x93, 1, 2, 3));
    await d0!.sendFrames([Uint8Array.of(0xc0), Uint8Array.of(9, 9)]);
    await d0!.sendOutput(ENGINE_CORE_DEAD.subarray(0, 15)); // merely starts like the sentinel: data
    await d0!.sendEngineCoreDead();
    await d0!.sendOutput(Uint8Array.of(0xc2));
    const got = await take(out, 5);
    assert.deepEqual(got[0], { kind: 'frames', frames: [Buffer.from([0x93, 1, 2, 3])] });
    assert.deepEqual(got[1], { kind: 'frames', frames: [Buffer.from([0xc0]), Buffer.from([9, 9])] });
    assert.equal(got[2]!.kind, 'frames');
    assert.deepEqual(got[3], { kind: 'dead' });
    assert.deepEqual(got[4], { kind: 'frames', frames: [Buffer.from([0xc2])] });
  });

  test('a rank that goes away is reported as disconnect, and a send to it fails at once with EHOSTUNREACH', async () => {
    const { endpoints, link, dialers } = await connected([0, 1]);
    const out = link.outputs()[Symbol.asyncIterator]();
    await dialers[1]!.close();
    const got = await take(out, 2);
    assert.deepEqual(
      got.map((m) => (m.kind === 'disconnect' ? m.address : m.kind)).sort(),
      [endpoints.input, endpoints.output].sort(),
    );
    // ZeroMQ reports the disconnect from the socket's monitor, and drops the peer from the ROUTER's table in its I/O
    // thread: the two are not ordered, and on a loaded machine a send right after the report still found the peer (it
    // went into the closing pipe and was dropped). Sends are repeated until the table has caught up; each must end at
    // once, and the first that fails must fail with EHOSTUNREACH, not wait for the send timeout.
    let gaveUp = false;
    const failedSend = async (): Promise<unknown> => {
      while (!gaveUp) {
        const err = await link.send(id(1), RequestType.ADD, Uint8Array.of(0xc0)).then(
          () => null,
          (error: unknown) => error,
        );
        if (err !== null) return err;
        await new Promise((resolve) => setImmediate(resolve));
      }
      return null;
    };
    const e = await hangGuard(failedSend(), GUARD_MS, 'send').finally(() => (gaveUp = true));
    assert.ok(e instanceof TransportError && !(e instanceof SendTimeoutError), String(e));
    assert.equal(e.code, 'EHOSTUNREACH');
    assert.match(e.message, /engine 1 \(identity 0100\)/);
    await link.send(id(0), RequestType.ADD, Uint8Array.of(0xc0));
    const r = await hangGuard(dialers[0]!.requests()[Symbol.asyncIterator]().next(), GUARD_MS, 'request');
    assert.equal(r.value?.type, RequestType.ADD);
  });

  test("a peer presenting a live rank's identity on the input socket gets nothing; the registered rank keeps it (no handover, issue 26)", async () => {
    const { endpoints, link, dialers } = await connected([0]);
    const out = link.outputs()[Symbol.asyncIterator]();
    // A second connection with identity 0 that never did a handshake (a thief, or a stray process).
    const thief = rawAt(endpoints.input, id(0));
    await thief.send(encodeReadyResponse(readyFor(0)));
    for (let i = 0; i < 3; i++) await link.send(id(0), RequestType.ADD, Uint8Array.of(0xc3, i));
    const requests = dialers[0]!.requests()[Symbol.asyncIterator]();
    for (let i = 0; i < 3; i++) {
      const r = await hangGuard(requests.next(), GUARD_MS, 'the registered rank receives');
      assert.deepEqual([...r.value!.payload], [0xc3, i]);
    }
    thief.receiveTimeout = 0;
    await assert.rejects(thief.receive(), { code: 'EAGAIN' }, 'nothing reached the second connection');
    void out;
  });

  test("a peer that says READY for a free index and never registers cannot hold handover on to steal a live rank's identity (issue 26 break pass)", async () => {
    const log = recordingLogger();
    const { endpoints, link, dialers } = await connected(
      [0],
      { logger: log, handover: { registrationWindowMs: 100, cooldownMs: 60_000 } },
      {},
      2,
    );
    // The rogue: HELLO and READY for free index 1 (INIT comes back), then silence on the input socket.
    const rogue = rawAt(endpoints.handshake, id(1));
    await rogue.send(HELLO);
    await hangGuard(rogue.receive(), GUARD_MS, 'INIT to the rogue');
    await rogue.send(READY);
    await until(() => link.handoverCooldowns === 1, 'the registration window expires and handover goes off');
    assert.ok(
      log.records.some(
        (r) =>
          r.level === 'warn' &&
          /said READY but did not register within 100 ms; identity handover .* is off/.test(r.msg),
      ),
    );
    // It tries again at once: handover stays off, so a thief presenting live rank 0's identity gets nothing.
    await rogue.send(HELLO);
    await hangGuard(rogue.receive(), GUARD_MS, 'INIT to the rogue, again');
    await rogue.send(READY);
    const thief = rawAt(endpoints.input, id(0));
    await thief.send(encodeReadyResponse(readyFor(0)));
    for (let i = 0; i < 3; i++) await link.send(id(0), RequestType.ADD, Uint8Array.of(0xc4, i));
    const requests = dialers[0]!.requests()[Symbol.asyncIterator]();
    for (let i = 0; i < 3; i++) {
      const r = await hangGuard(requests.next(), GUARD_MS, 'the registered rank receives');
      assert.deepEqual([...r.value!.payload], [0xc4, i]);
    }
    thief.receiveTimeout = 0;
    await assert.rejects(thief.receive(), { code: 'EAGAIN' }, 'nothing reached the thief');
    // A real rank 1 still joins during the cooldown (no stale connection holds its identity).
    rogue.close();
    await dial(endpoints.handshake, 1);
    await hangGuard(link.whenJoined(2), GUARD_MS, 'rank 1 joins');
  });

  test('a SIGKILLed engine process is reported as disconnect on the output PULL (no sentinel, no receive error)', async () => {
    const { endpoints, link } = await bindLink(1);
    const child = spawn(
      process.execPath,
      [...nodeEntry(new URL('./fixtures/dial-child.ts', import.meta.url)), endpoints.handshake, '0'],
      {
        cwd: repoRootDir,
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    cleanups.push(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    });
    await hangGuard(link.whenJoined(1), 30_000, 'handshake with the child engine');
    const out = link.outputs()[Symbol.asyncIterator]();
    const [first] = await take(out, 1);
    assert.deepEqual(first, { kind: 'frames', frames: [Buffer.from([0xc0])] });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
    const got = await take(out, 2);
    assert.deepEqual(
      got.map((m) => m.kind),
      ['disconnect', 'disconnect'],
    );
    assert.ok(got.some((m) => m.kind === 'disconnect' && m.address === endpoints.output));
  });

  test('a rank that stops reading: its sends wait at the high-water mark, then SendTimeoutError; sends queued behind fail with it', async () => {
    const { link } = await connected(
      [0],
      { sendTimeoutMs: 150, sendHighWaterMark: 1 },
      { inputReceiveHighWaterMark: 1 },
    );
    const payload = new Uint8Array(64 * 1024);
    let error: unknown = null;
    let delivered = 0;
    let queued: Promise<unknown> | null = null;
    for (; delivered < 5000 && error === null; delivered++) {
      const p = link.send(id(0), RequestType.ADD, payload).then(
        () => null,
        (e: unknown) => e,
      );
      queued = link.send(id(0), RequestType.ABORT, payload).then(
        () => null,
        (e: unknown) => e,
      );
      error = await hangGuard(p, GUARD_MS, 'send');
    }
    assert.ok(
      error instanceof SendTimeoutError,
      `expected SendTimeoutError, got ${String(error)} after ${delivered} sends`,
    );
    assert.equal(error.timeoutMs, 150);
    assert.match(error.message, /send to engine 0 \(identity 0000\) .*within 150 ms/);
    const behind = await hangGuard(queued!, GUARD_MS, 'the queued send');
    assert.ok(behind instanceof SendTimeoutError && /was not attempted/.test(behind.message), String(behind));
    const inProgress = link.send(id(0), RequestType.ADD, payload);
    const closing = link.close();
    await assert.rejects(inProgress, { code: 'ELINKCLOSED' });
    await closing;
  });

  test("a rank at its high-water mark does not hold up another rank's sends (per-rank queues)", async () => {
    const { link, dialers } = await connected(
      [0, 1],
      { sendTimeoutMs: 5000, sendHighWaterMark: 1 },
      { inputReceiveHighWaterMark: 1 },
    );
    const big = new Uint8Array(64 * 1024);
    // Fill rank 0 (it never reads) until a send stays pending, then send to rank 1 behind it.
    let stuck: Promise<void> | null = null;
    for (let i = 0; i < 5000 && stuck === null; i++) {
      const p = link.send(id(0), RequestType.ADD, big);
      const settled = await Promise.race([
        p.then(() => true),
        new Promise<false>((r) => setTimeout(() => r(false), 100)),
      ]);
      if (!settled) stuck = p;
    }
    assert.ok(stuck !== null, 'rank 0 reached its high-water mark');
    stuck.catch(() => {});
    const ok = [0, 1, 2].map((i) => link.send(id(1), RequestType.ADD, Uint8Array.of(0xc0 + i)));
    await hangGuard(Promise.all(ok), GUARD_MS, "rank 1's sends while rank 0 is stuck");
    const it = dialers[1]!.requests()[Symbol.asyncIterator]();
    for (let i = 0; i < 3; i++)
      assert.deepEqual([...(await hangGuard(it.next(), GUARD_MS, 'rank 1 reads')).value.payload], [0xc0 + i]);
  });

  test('a receive failure on the output socket yields { kind: closed } and ends outputs()', async () => {
    const { link } = await connected([0]);
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
    assert.ok(
      closed!.kind === 'closed' &&
        closed!.error instanceof TransportError &&
        closed!.error.message.includes(link.endpoints.output),
      JSON.stringify(closed),
    );
  });

  test('send rejects a type byte outside 0x00..0x03', async () => {
    const { link } = await connected([0]);
    await assert.rejects(link.send(id(0), 7 as never, Uint8Array.of(0xc0)), /request type 7/);
  });

  test('close() is idempotent, ends outputs(), rejects later sends and whenJoined()', async () => {
    const { link } = await connected([0], {}, {}, 2);
    const drained = (async () => {
      const seen: OutputMessage[] = [];
      for await (const m of link.outputs()) seen.push(m);
      return seen;
    })();
    const waiting = link.whenJoined().then(
      () => null,
      (e: unknown) => e,
    );
    const first = link.close();
    const second = link.close();
    assert.equal(first, second);
    await first;
    assert.deepEqual(await hangGuard(drained, GUARD_MS, 'outputs() end'), []);
    assert.equal(((await waiting) as TransportError).code, 'ELINKCLOSED');
    await assert.rejects(
      link.send(id(0), RequestType.ADD, Uint8Array.of(0xc0)),
      (e: unknown) => e instanceof TransportError && e.code === 'ELINKCLOSED',
    );
  });
});
