import { afterEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { Pull, Router } from 'zeromq';
import { ENGINE_CORE_DEAD } from '../../src/protocols/frames.js';
import { decodeReadyMessage, decodeReadyResponse, encodeHandshakeInit } from '../../src/protocols/handshake.js';
import { RequestType } from '../../src/protocols/types.js';
import { EngineDialer } from '../../src/transport/engine-dialer.js';
import { ConfigError, HandshakeError, TransportError } from '../../src/transport/errors.js';
import { freePort } from '../helpers/net.js';
import { freshDir, hangGuard, readyFor, recordingLogger } from './helpers.js';

const GUARD_MS = 10_000;
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A hand-driven gateway: a handshake ROUTER on tcp, an input ROUTER and an output PULL on ipc. */
async function fakeGateway() {
  const { dir, cleanup } = await freshDir();
  cleanups.push(cleanup);
  const handshakeAddress = `tcp://127.0.0.1:${await freePort()}`;
  const inputAddress = `ipc://${join(dir, 'in.sock')}`;
  const outputAddress = `ipc://${join(dir, 'out.sock')}`;
  const handshake = new Router({ linger: 0 });
  const input = new Router({ linger: 0 });
  const output = new Pull({ linger: 0 });
  cleanups.push(() => {
    handshake.close();
    input.close();
    output.close();
  });
  await handshake.bind(handshakeAddress);
  await input.bind(inputAddress);
  await output.bind(outputAddress);
  return { handshakeAddress, inputAddress, outputAddress, handshake, input, output };
}

test('the engine side: HELLO, INIT, READY (before INIT is validated), registration as one frame, then PUSH', async () => {
  const gw = await fakeGateway();
  const connecting = EngineDialer.connect({
    handshakeAddress: gw.handshakeAddress,
    engineIndex: 300,
    readyResponse: readyFor(3),
    initTimeoutMs: 5000,
  });
  const [helloId, hello] = await hangGuard(gw.handshake.receive(), GUARD_MS, 'HELLO');
  assert.equal(helloId.toString('hex'), '2c01', 'identity = engine index 300 as 2 bytes LE');
  assert.equal(decodeReadyMessage(hello).status, 'HELLO');
  await gw.handshake.send([helloId, encodeHandshakeInit({ inputs: [gw.inputAddress], outputs: [gw.outputAddress] })]);
  const [readyId, ready] = await hangGuard(gw.handshake.receive(), GUARD_MS, 'READY');
  assert.equal(readyId.toString('hex'), '2c01');
  assert.equal(decodeReadyMessage(ready).status, 'READY');
  const registration = await hangGuard(gw.input.receive(), GUARD_MS, 'registration');
  assert.equal(registration.length, 2, 'exactly [identity, ready response]');
  assert.equal(registration[0].toString('hex'), '2c01', 'same identity on the input socket');
  assert.deepEqual(decodeReadyResponse(registration[1]), { ...readyFor(3), form: 'long' });
  const dialer = await hangGuard(connecting, GUARD_MS, 'connect');
  cleanups.push(() => dialer.close());
  assert.equal(dialer.engineIndex, 300);
  assert.equal(dialer.inputAddress, gw.inputAddress);
  assert.equal(dialer.outputAddress, gw.outputAddress);

  await dialer.sendOutput(Uint8Array.of(0x91, 0x01));
  assert.deepEqual(await hangGuard(gw.output.receive(), GUARD_MS, 'output'), [Buffer.from([0x91, 0x01])]);
  await dialer.sendEngineCoreDead();
  const [dead] = await hangGuard(gw.output.receive(), GUARD_MS, 'ENGINE_CORE_DEAD');
  assert.equal(dead.toString('hex'), '454e47494e455f434f52455f44454144');
  assert.deepEqual(new Uint8Array(dead), ENGINE_CORE_DEAD);
  await assert.rejects(dialer.sendFrames([]), /zero frames/);
});

test('requests(): malformed request messages are logged and skipped, valid ones yielded', async () => {
  const gw = await fakeGateway();
  const log = recordingLogger();
  const connecting = EngineDialer.connect({
    handshakeAddress: gw.handshakeAddress,
    engineIndex: 1,
    readyResponse: readyFor(1),
    logger: log,
    initTimeoutMs: 5000,
  });
  const [identity] = await hangGuard(gw.handshake.receive(), GUARD_MS, 'HELLO');
  await gw.handshake.send([identity, encodeHandshakeInit({ inputs: [gw.inputAddress], outputs: [gw.outputAddress] })]);
  await hangGuard(gw.handshake.receive(), GUARD_MS, 'READY');
  await hangGuard(gw.input.receive(), GUARD_MS, 'registration');
  const dialer = await hangGuard(connecting, GUARD_MS, 'connect');
  cleanups.push(() => dialer.close());

  await gw.input.send([identity, Uint8Array.of(0x00, 0x00), Uint8Array.of(0x90)]); // 2-byte type
  await gw.input.send([identity, Uint8Array.of(0x09), Uint8Array.of(0x90)]); // unknown type byte
  await gw.input.send([identity, Uint8Array.of(0x00)]); // single frame
  await gw.input.send([identity, Uint8Array.of(RequestType.ABORT), Uint8Array.of(0x91, 0xa1, 0x78)]);
  const it = dialer.requests()[Symbol.asyncIterator]();
  assert.throws(() => dialer.requests(), /only once/);
  const r = await hangGuard(it.next(), GUARD_MS, 'request');
  assert.deepEqual(r, { done: false, value: { type: RequestType.ABORT, payload: Buffer.from([0x91, 0xa1, 0x78]) } });
  const skipped = log.records.filter((rec) => rec.msg.includes('malformed request'));
  assert.equal(skipped.length, 3);
  await dialer.close();
  assert.deepEqual(await hangGuard(it.next(), GUARD_MS, 'end'), { done: true, value: undefined });
  await dialer.close(); // idempotent
  await assert.rejects(
    dialer.sendOutput(Uint8Array.of(0xc0)),
    (e: unknown) => e instanceof TransportError && e.code === 'ELINKCLOSED',
  );
});

test('an INIT with an empty inputs list is refused, after READY was already sent', async () => {
  const gw = await fakeGateway();
  const connecting = EngineDialer.connect({
    handshakeAddress: gw.handshakeAddress,
    engineIndex: 0,
    readyResponse: readyFor(0),
    initTimeoutMs: 5000,
  });
  const outcome = connecting.then(
    () => null,
    (e: unknown) => e,
  );
  const [identity] = await hangGuard(gw.handshake.receive(), GUARD_MS, 'HELLO');
  await gw.handshake.send([identity, encodeHandshakeInit({ inputs: [], outputs: [gw.outputAddress] })]);
  const [, ready] = await hangGuard(gw.handshake.receive(), GUARD_MS, 'READY');
  assert.equal(decodeReadyMessage(ready).status, 'READY');
  const e = await hangGuard(outcome, GUARD_MS, 'connect');
  assert.ok(e instanceof HandshakeError, String(e));
  assert.equal(e.stage, 'INIT');
  assert.match(e.message, /empty addresses\.inputs list/);
});

test('an undecodable INIT is refused with stage INIT', async () => {
  const gw = await fakeGateway();
  const outcome = EngineDialer.connect({
    handshakeAddress: gw.handshakeAddress,
    engineIndex: 0,
    readyResponse: readyFor(0),
    initTimeoutMs: 5000,
  }).then(
    () => null,
    (e: unknown) => e,
  );
  const [identity] = await hangGuard(gw.handshake.receive(), GUARD_MS, 'HELLO');
  await gw.handshake.send([identity, Uint8Array.of(0x81, 0xa1, 0x78, 0x01)]); // {x: 1}: no `addresses`
  const e = await hangGuard(outcome, GUARD_MS, 'connect');
  assert.ok(e instanceof HandshakeError && e.stage === 'INIT' && /does not decode/.test(e.message), String(e));
});

test('no INIT within initTimeoutMs: HandshakeError stage INIT naming the address', async () => {
  const address = `tcp://127.0.0.1:${await freePort()}`;
  const e = await hangGuard(
    EngineDialer.connect({
      handshakeAddress: address,
      engineIndex: 0,
      readyResponse: readyFor(0),
      initTimeoutMs: 100,
    }).then(
      () => null,
      (err: unknown) => err,
    ),
    GUARD_MS,
    'connect',
  );
  assert.ok(e instanceof HandshakeError, String(e));
  assert.equal(e.stage, 'INIT');
  assert.equal(e.code, 'ETIMEDOUT');
  assert.ok(e.message.includes(address) && e.message.includes('100 ms'), e.message);
});

test('bad options are ConfigError', async () => {
  const base = { handshakeAddress: 'tcp://127.0.0.1:1', readyResponse: readyFor(0) };
  await assert.rejects(
    EngineDialer.connect({ ...base, engineIndex: 65536 }),
    (e: unknown) => e instanceof ConfigError && /engine index/.test(e.message),
  );
  await assert.rejects(EngineDialer.connect({ ...base, engineIndex: -1 }), ConfigError);
  await assert.rejects(EngineDialer.connect({ ...base, engineIndex: 0, initTimeoutMs: 0 }), /initTimeoutMs/);
  await assert.rejects(
    EngineDialer.connect({ ...base, handshakeAddress: 'nonsense', engineIndex: 0 }),
    /cannot connect to "nonsense"/,
  );
});
