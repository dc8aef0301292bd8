/**
 * The rank records file (src/transport/rank-records.ts) and adoption over real ZeroMQ (src/transport/adoption.ts,
 * zmq-link.ts; issue 26 part 6): a link with `rankRecords` writes each joined rank's ready response beside its sockets
 * (atomically, mode 0600); a later link on the same endpoints reads it, ignores stale and invalid records, tolerates a
 * corrupt file with a warning, and adopts a recorded rank whose input DEALER is connected (no HELLO) with the recorded
 * ready response, while a record whose identity never connects is dropped after the window and a HELLO for a recorded
 * index goes through the normal handshake.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { encodeReadyResponse } from '../../src/protocols/handshake.js';
import { encodeEngineIdentity } from '../../src/protocols/identity.js';
import { EngineDialer } from '../../src/transport/engine-dialer.js';
import { deriveEndpoints, type EngineEndpoints } from '../../src/transport/endpoints.js';
import {
  encodeRankRecords,
  parseRankRecords,
  rankRecordsPath,
  readRankRecords,
  writeRankRecords,
  type RankRecord,
} from '../../src/transport/rank-records.js';
import { ZmqEngineLink } from '../../src/transport/zmq-link.js';
import type { ConnectedEngine } from '../../src/engine-client/link.js';
import { freePort } from '../helpers/net.js';
import { freshDir, hangGuard, rawDealer, readyFor, recordingLogger } from './helpers.js';

const EXPECT = (endpoints: EngineEndpoints, dpSize = 4) => ({
  workerUrl: endpoints.workerUrl,
  engine: 'tokenspeed',
  dpSize,
});

function record(index: number, overrides: Partial<RankRecord> = {}): RankRecord {
  return {
    engineIndex: index,
    identity: encodeEngineIdentity(index),
    ready: readyFor(index),
    joinedAtMs: Date.parse('2026-05-01T00:00:00Z'),
    ...overrides,
  };
}

async function endpointsIn(dir: string): Promise<EngineEndpoints> {
  return deriveEndpoints(`ipc://${join(dir, 'w')}`, `tcp://127.0.0.1:${await freePort()}`);
}

test('the file round-trips: written atomically with mode 0600, read back equal (ready response included)', async () => {
  const { dir, cleanup } = await freshDir();
  try {
    const endpoints = await endpointsIn(dir);
    const path = rankRecordsPath(endpoints);
    assert.equal(path, `${endpoints.ipcPath}-ranks.json`);
    const records = new Map([
      [0, record(0, { ready: readyFor(0, { form: 'long', kvCacheMaxConcurrency: 1.5, kvCacheSizeTokens: 4096 }) })],
      [2, record(2)],
    ]);
    assert.equal(
      writeRankRecords(path, {
        workerUrl: endpoints.workerUrl,
        engine: 'tokenspeed',
        gatewayPid: process.pid,
        records,
      }),
      true,
    );
    assert.equal(statSync(path).mode & 0o777, 0o600);
    const log = recordingLogger();
    const back = readRankRecords(path, EXPECT(endpoints), log);
    assert.deepEqual(log.records, []);
    assert.equal(back.gatewayPid, process.pid);
    assert.deepEqual([...back.records.keys()], [0, 2]);
    assert.deepEqual(back.records.get(0), records.get(0));
    assert.deepEqual(back.records.get(2), records.get(2));
    const body = JSON.parse(readFileSync(path, 'utf8')) as { ranks: Array<{ identity: string }> };
    assert.deepEqual(
      body.ranks.map((r) => r.identity),
      ['0000', '0200'],
    );
  } finally {
    await cleanup();
  }
});

test('stale and invalid records are ignored with a warning; the valid ones are kept', async () => {
  const { dir, cleanup } = await freshDir();
  try {
    const endpoints = await endpointsIn(dir);
    const path = rankRecordsPath(endpoints);
    const text = encodeRankRecords({
      workerUrl: endpoints.workerUrl,
      engine: 'tokenspeed',
      gatewayPid: 1,
      records: new Map([
        [0, record(0)],
        [1, record(1)],
        [7, record(7)],
      ]),
    });
    const body = JSON.parse(text) as { ranks: Array<Record<string, unknown>> };
    body.ranks[1]!['identity'] = '0000'; // index 1 with rank 0's identity
    body.ranks.push({ engineIndex: 3, identity: '0300', joinedAt: 'x', ready: {} }); // bad date and ready response
    body.ranks.push({ ...body.ranks[0]! }); // a second record for index 0
    writeFileSync(path, JSON.stringify(body));
    const log = recordingLogger();
    const back = readRankRecords(path, EXPECT(endpoints, 4), log); // index 7 is outside a 4-slot group
    assert.deepEqual([...back.records.keys()], [0]);
    const warned = log.records.filter((r) => r.level === 'warn').map((r) => `${r.msg} ${JSON.stringify(r.obj)}`);
    assert.equal(warned.length, 4, warned.join('\n'));
    assert.ok(
      warned.some((w) => w.includes("not engine index 1's (0100")),
      warned.join('\n'),
    );
    assert.ok(
      warned.some((w) => w.includes('a second record for engine index 0')),
      warned.join('\n'),
    );
    assert.ok(
      warned.some((w) => w.includes('engine index 7 ignored')),
      warned.join('\n'),
    );

    // A file written for another engine family (or worker URL) adopts nothing.
    const other = recordingLogger();
    assert.equal(readRankRecords(path, { ...EXPECT(endpoints), engine: 'vllm' }, other).records.size, 0);
    assert.ok(other.records.some((r) => r.level === 'warn' && r.msg.includes('another worker URL or engine family')));
  } finally {
    await cleanup();
  }
});

test('a corrupt or foreign file is tolerated with one warning and adopts nothing; a missing one says nothing', async () => {
  const { dir, cleanup } = await freshDir();
  try {
    const endpoints = await endpointsIn(dir);
    const path = rankRecordsPath(endpoints);
    const quiet = recordingLogger();
    assert.equal(readRankRecords(path, EXPECT(endpoints), quiet).records.size, 0);
    assert.deepEqual(quiet.records, []);
    for (const text of [
      '{"format": "model-gateway rank rec',
      '[1,2]',
      '{"format":"something else","version":1}',
      JSON.stringify({ format: 'model-gateway rank records', version: 2 }),
    ]) {
      writeFileSync(path, text);
      const log = recordingLogger();
      const back = readRankRecords(path, EXPECT(endpoints), log);
      assert.equal(back.records.size, 0, text);
      assert.equal(log.records.length, 1, text);
      assert.match(log.records[0]!.msg, /corrupt and is ignored/);
      assert.equal(
        readFileSync(`${path}.corrupt`, 'utf8'),
        text,
        'the corrupt file is kept for the operator, not overwritten by the next join',
      );
      assert.equal(existsSync(path), false);
    }
    assert.throws(() => parseRankRecords('nope'), /not JSON/);
  } finally {
    await cleanup();
  }
});

/** A link with rank records on `endpoints`; `joined` collects what it reports. */
async function recordingLink(endpoints: EngineEndpoints, dpSize: number, adoptionWindowMs: number) {
  const log = recordingLogger();
  const link = await ZmqEngineLink.bind({
    endpoints,
    dpSize,
    logger: log,
    rankRecords: { engine: 'tokenspeed', adoptionWindowMs },
  });
  const joined: ConnectedEngine[] = [];
  let notify: () => void = () => {};
  link.attach({
    admitHello: async () => true,
    joined: (e) => {
      joined.push(e);
      notify();
    },
    joinFailed: () => {},
  });
  const waitJoined = (n: number) =>
    hangGuard(
      new Promise<void>((resolve) => {
        notify = () => joined.length >= n && resolve();
        notify();
      }),
      30_000,
      `${n} join(s)`,
    );
  return { link, log, joined, waitJoined };
}

test('a handshake writes the record; the next link adopts the still-connected rank, drops a record that never shows up, and lets a HELLO through', async () => {
  const { dir, cleanup } = await freshDir();
  const closers: Array<() => unknown> = [];
  try {
    const endpoints = await endpointsIn(dir);
    const path = rankRecordsPath(endpoints);
    // First gateway: rank 0 joins through the handshake and is recorded.
    const first = await recordingLink(endpoints, 3, 2000);
    closers.push(() => first.link.close());
    const ready0 = readyFor(0);
    const dialer = await EngineDialer.connect({
      handshakeAddress: endpoints.handshake,
      engineIndex: 0,
      readyResponse: ready0,
    });
    closers.push(() => dialer.close());
    await first.waitJoined(1);
    assert.equal(first.joined[0]!.adopted, undefined);
    const recorded = readRankRecords(path, EXPECT(endpoints, 3));
    assert.deepEqual([...recorded.records.keys()], [0]);
    assert.equal(recorded.records.get(0)!.ready.maxModelLen, ready0.maxModelLen);
    // Also a record for index 1, whose engine is gone (no process has its identity).
    writeRankRecords(path, {
      workerUrl: endpoints.workerUrl,
      engine: 'tokenspeed',
      gatewayPid: 99999999,
      records: new Map([
        [0, recorded.records.get(0)!],
        [1, record(1)],
      ]),
    });

    // The gateway "dies" (its sockets close); the engine's DEALER and PUSH stay and will reconnect.
    await first.link.close();
    const second = await recordingLink(endpoints, 3, 1500);
    closers.push(() => second.link.close());
    await second.waitJoined(1);
    const adopted = second.joined[0]!;
    assert.equal(adopted.engineIndex, 0);
    assert.equal(adopted.adopted, true);
    assert.deepEqual(adopted.ready, recorded.records.get(0)!.ready);
    // The adopted rank is reachable: a request sent to it arrives (no new handshake happened).
    const requests = dialer.requests()[Symbol.asyncIterator]();
    await second.link.send(adopted.identity, 0, Uint8Array.of(0x90));
    let got = await hangGuard(requests.next(), 10_000, 'request at the adopted rank');
    while (!got.done && got.value.type === 1)
      got = await hangGuard(requests.next(), 10_000, 'request at the adopted rank'); // skip the empty-ABORT probes
    assert.equal(got.value?.type, 0);
    assert.deepEqual([...got.value!.payload], [0x90]);
    // Its output reaches the new gateway too (the PUSH reconnected).
    const outputs = second.link.outputs()[Symbol.asyncIterator]();
    await dialer.sendOutput(Uint8Array.of(0xc0));
    let out = await hangGuard(outputs.next(), 10_000, 'output from the adopted rank');
    while (!out.done && out.value.kind !== 'frames')
      out = await hangGuard(outputs.next(), 10_000, 'output from the adopted rank');
    assert.deepEqual(out.value?.kind === 'frames' ? [...out.value.frames[0]!] : null, [0xc0]);

    assert.deepEqual(await hangGuard(second.link.adoptionSettled(), 10_000, 'adoption settles'), [0]);
    assert.ok(
      second.log.records.some((r) => r.msg.includes('rank record of DP rank 1 ignored')),
      'the never-connected record is reported',
    );
    assert.deepEqual(
      [...readRankRecords(path, EXPECT(endpoints, 3)).records.keys()],
      [0],
      'the stale record is dropped from the file',
    );

    // A HELLO for a recorded index (a restarted engine) joins through the handshake and overwrites the record.
    writeRankRecords(path, {
      workerUrl: endpoints.workerUrl,
      engine: 'tokenspeed',
      gatewayPid: 99999999,
      records: new Map([
        [0, recorded.records.get(0)!],
        [2, record(2)],
      ]),
    });
    await second.link.close();
    const third = await recordingLink(endpoints, 3, 30_000);
    closers.push(() => third.link.close());
    const ready2 = readyFor(2, { maxModelLen: 4242 });
    const restarted = await EngineDialer.connect({
      handshakeAddress: endpoints.handshake,
      engineIndex: 2,
      readyResponse: ready2,
    });
    closers.push(() => restarted.close());
    await third.waitJoined(2);
    const byIndex = new Map(third.joined.map((e) => [e.engineIndex, e]));
    assert.equal(byIndex.get(0)!.adopted, true);
    assert.equal(byIndex.get(2)!.adopted, undefined, 'index 2 joined through its HELLO, not from its old record');
    assert.equal(byIndex.get(2)!.ready.maxModelLen, 4242);
    assert.deepEqual(await hangGuard(third.link.adoptionSettled(), 10_000, 'adoption settles'), [0]);
    assert.equal(readRankRecords(path, EXPECT(endpoints, 3)).records.get(2)!.ready.maxModelLen, 4242);
  } finally {
    for (const c of closers.reverse()) await c();
    await cleanup();
  }
});

test('a rank connected on the input socket without a record is not adopted; a registration frame from it is refused as before', async () => {
  const { dir, cleanup } = await freshDir();
  try {
    const endpoints = await endpointsIn(dir);
    const { link, joined } = await recordingLink(endpoints, 2, 300);
    const stray = rawDealer(encodeEngineIdentity(1));
    stray.connect(endpoints.input);
    try {
      await stray.send(encodeReadyResponse(readyFor(1)));
      assert.deepEqual(await hangGuard(link.adoptionSettled(), 5000, 'adoption settles'), []);
      await hangGuard(
        (async () => {
          while (link.handshakeRejected['unexpected-registration'] === undefined)
            await new Promise((r) => setTimeout(r, 20));
        })(),
        10_000,
        'refusal counted',
      );
      assert.equal(joined.length, 0);
    } finally {
      stray.close();
      await link.close();
    }
  } finally {
    await cleanup();
  }
});
