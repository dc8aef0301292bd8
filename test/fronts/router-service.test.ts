/**
 * The router service and the fronts' channel (src/fronts/router/router-service.ts, remote-backend.ts) in one process over a
 * real unix socket, with the route tests' fake engine client behind the router: outputs reach the front's
 * stream with their counts, a cancel in the front reaches the engine stream (also one cancelled before it was
 * placed), errors keep their kind, the concurrency count is one over every front, a dropped front's requests are
 * cancelled and its permits returned, the Responses store is shared, and snapshots carry the rank states.
 */
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { after, before, test } from 'node:test';
import { pino } from 'pino';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { encodeUp } from '../../src/fronts/channel/messages.js';
import { Tag } from '../../src/fronts/channel/records.js';
import { MAX_FRONT_MESSAGE_BYTES, helloFrame, writeFrame } from '../../src/fronts/channel/frames.js';
import { FrontChannel } from '../../src/fronts/front/front-channel.js';
import { RemoteBackend } from '../../src/fronts/front/remote-backend.js';
import { SharedResponsesStore } from '../../src/fronts/front/shared-responses-store.js';
import { RouterService, type RouterServiceOptions } from '../../src/fronts/router/router-service.js';
import { type EngineOutput, type GenerateRequest } from '../../src/protocols/types.js';
import { ResponsesStore } from '../../src/server/responses/store.js';
import { FakeBackend, rankState } from '../server/fake-backend.js';
import { openTwoFronts, streamedRequest, unhurriedOptions, until, type TwoFronts } from './two-fronts.js';

const log = pino({ level: 'silent' });
let fronts: TwoFronts;
let backend: FakeBackend;
let service: RouterService;
let store: ResponsesStore;
let a: FrontChannel;
let b: FrontChannel;
let nextId = 0;
let address = '';

const req = (): GenerateRequest => streamedRequest(`cmpl-${nextId++}`, 8);

before(async () => {
  backend = new FakeBackend({ ranks: [0, 1] });
  store = new ResponsesStore();
  fronts = await openTwoFronts(
    'mgw-fronts-',
    {
      groups: [{ worker: 'ipc:///fake', name: 'fake', engine: 'tokenspeed', backend: backend as never }],
      store,
      maxConcurrentRequests: 2,
      logger: log,
      snapshotIntervalMs: 50,
    },
    log,
  );
  ({ service, address, a, b } = fronts);
});

after(() => fronts.close());

test('a submit is placed by the router; outputs reach the front with their counts; the terminal one ends the stream', async () => {
  const remote = new RemoteBackend(a, 0);
  assert.equal(remote.dpSize, 2);
  assert.equal(remote.canServe(), true);
  const placed = backend.nextSubmission();
  const stream = await remote.submit(req(), { dpRank: 1 });
  const sub = await placed;
  assert.equal(sub.dpRank, 1);
  assert.deepEqual(sub.request.promptTokenIds, [1, 2, 3]);
  assert.equal(stream.engineIndex, 1);
  sub.stream.push([10, 11]);
  sub.stream.push([12], 'length', [], undefined);
  const outs: EngineOutput[] = [];
  for await (const o of stream) outs.push(o);
  assert.deepEqual(
    outs.map((o) => o.newTokenIds),
    [[10, 11], [12]],
  );
  assert.deepEqual(
    outs.map((o) => o.completionTokens),
    [2, 3],
  );
  assert.equal(outs[1]!.finishReason, 'length');
  assert.equal(outs[1]!.requestId, stream.requestId);
  assert.equal(service.liveRequests, 0);
});

test('cancel in the front cancels the engine stream (ABORT); so does one cancelled before it was placed', async () => {
  const remote = new RemoteBackend(a, 0);
  const placed = backend.nextSubmission();
  const stream = await remote.submit(req());
  const sub = await placed;
  sub.stream.push([1]);
  stream.cancel();
  await sub.stream.cancelled;
  assert.equal(sub.stream.isCancelled, true);
  await until(() => service.liveRequests === 0, 'the router forgot it');

  let open: () => void = () => {};
  backend.submitGate = new Promise((r) => (open = r));
  const controller = new AbortController();
  const gated = backend.nextSubmission();
  const pending = remote.submit(req(), { signal: controller.signal });
  await until(() => service.liveRequests === 1, 'the submit reached the router');
  controller.abort(new Error('client went away'));
  await assert.rejects(pending, /client went away/);
  backend.submitGate = null;
  open();
  const late = await gated;
  await late.stream.cancelled;
  assert.equal(late.stream.isCancelled, true, 'placed after the abort, then cancelled at once');
  await until(() => service.liveRequests === 0, 'nothing left');
});

test('a refused submit rejects with the engine client error kind; a failed stream throws it', async () => {
  const remote = new RemoteBackend(a, 0);
  await assert.rejects(
    remote.submit(req(), { dpRank: 7 }),
    (err: unknown) => err instanceof EngineClientError && err.kind === 'invalid-dp-rank',
  );
  const placed = backend.nextSubmission();
  const stream = await remote.submit(req());
  (await placed).stream.fail(new EngineClientError('engine-dead', 'rank 0 died'));
  await assert.rejects(
    (async () => {
      for await (const _ of stream) {
        // drain
      }
    })(),
    (err: unknown) => err instanceof EngineClientError && err.kind === 'engine-dead' && /rank 0 died/.test(err.message),
  );
});

test('the concurrency count is one over every front; a dropped front returns its permits and its requests are cancelled', async () => {
  const t1 = await a.acquirePermit();
  const t2 = await b.acquirePermit();
  assert.ok(t1 !== null && t2 !== null);
  assert.equal(await a.acquirePermit(), null, 'full: 2 taken over both fronts');
  assert.equal(await b.acquirePermit(), null);
  a.releasePermit(t1);
  const t3 = await b.acquirePermit();
  assert.ok(t3 !== null, 'a released slot is free for the other front');
  assert.equal(service.permitsHeld, 2);

  b.releasePermit(t2);
  b.releasePermit(t3);
  await until(() => service.permitsHeld === 0, 'released');
  // A third front holds a permit and a request, then goes away (its process exited).
  const c = await FrontChannel.connect(address, 3, service.frontToken, log);
  assert.ok((await c.acquirePermit()) !== null);
  const placed = backend.nextSubmission();
  await new RemoteBackend(c, 0).submit(req());
  const sub = await placed;
  assert.equal(service.liveRequests, 1);
  assert.equal(service.permitsHeld, 1);
  service.dropFront(3);
  c.close();
  assert.equal(sub.stream.isCancelled, true, 'the dropped front’s request is aborted at the engine');
  assert.equal(service.liveRequests, 0);
  assert.equal(service.permitsHeld, 0, 'its permits are back');
  assert.equal(service.stats.orphanedRequests, 1);
});

test('the Responses store is the router’s: a put through one front is read by another; a delete is seen by all', async () => {
  const sa = new SharedResponsesStore(a);
  const sb = new SharedResponsesStore(b);
  const stored = {
    response: { id: 'resp_1', object: 'response' },
    inputItems: [{ id: 'msg_in', type: 'message' }],
    outputItems: [{ id: 'msg_out', type: 'message' }],
  };
  sa.put('resp_1', stored);
  // A response waits for this before it ends, so a client reading it back through another front finds it at once.
  await sa.written('resp_1');
  assert.notEqual(store.get('resp_1'), undefined, 'written() resolves once the router holds the put');
  assert.equal(sb.get('resp_1'), undefined, 'not local to the other front before a prefetch');
  await sb.prefetch(['resp_1'], ['msg_out']);
  assert.deepEqual(sb.get('resp_1'), stored);
  assert.deepEqual(sb.item('msg_out'), stored.outputItems[0]);
  assert.deepEqual((await sb.fetch('resp_1'))?.response, stored.response);
  assert.equal(await sb.remove('resp_1'), true);
  assert.equal(await sa.fetch('resp_1'), undefined);
  await sa.prefetch(['resp_1'], []);
  assert.equal(sa.get('resp_1'), undefined, 'the local copy is dropped once the router no longer holds it');
});

test('snapshots carry the rank states; refresh() fetches a fresh one; a rank join reaches every front', async () => {
  const remote = new RemoteBackend(a, 0);
  backend.rankStatesValue = [rankState(0, { inFlight: 4 }), rankState(1, { state: 'dead', cause: 'exit' })];
  await remote.refresh();
  assert.deepEqual(
    remote.rankStates().map((r) => [r.inFlight, r.state]),
    [
      [4, 'ready'],
      [0, 'dead'],
    ],
  );
  const joined: Array<[number | null, boolean]> = [];
  remote.on('joined', (engine, rejoin) => joined.push([engine.engineIndex, rejoin]));
  const other = new RemoteBackend(b, 0);
  const joinedB: Array<[number | null, boolean]> = [];
  other.on('joined', (engine, rejoin) => joinedB.push([engine.engineIndex, rejoin]));
  backend.emitJoined(1, true);
  await until(() => joined.length === 1 && joinedB.length === 1, 'the join reached both fronts');
  assert.deepEqual(joined, [[1, true]]);
  assert.deepEqual(joinedB, [[1, true]], 'broadcast, not only to one front');
});

test("a rank's death and a group failure reach a front's RemoteBackend as the engine client's events", async () => {
  const remote = new RemoteBackend(b, 0);
  await remote.refresh();
  const heard: string[] = [];
  remote.on('rank', (dpRank, state, cause) => heard.push(`rank ${dpRank} ${state} ${cause}`));
  remote.on('failed', (err, cause) => heard.push(`failed ${cause} ${err.kind}`));
  // The router hears `rank` and `failed` from the engine client and pushes a snapshot; only the counters change.
  backend.rankStatesValue = [
    rankState(0),
    rankState(1, { state: 'dead', cause: 'peer-unreachable', deaths: { 'peer-unreachable': 1 } }),
  ];
  backend.emitEvent('rank', 1, 'dead', 'peer-unreachable');
  await until(() => heard.length === 1, 'the death reached the front');
  backend.stats.failures['watchdog'] = 1;
  backend.emitEvent('failed', new EngineClientError('engine-dead', 'no output'), 'watchdog');
  await until(() => heard.length === 2, 'the group failure reached the front');
  assert.deepEqual(heard, ['rank 1 dead peer-unreachable', 'failed watchdog engine-dead']);
  backend.rankStatesValue = [rankState(0), rankState(1)];
  delete backend.stats.failures['watchdog'];
});

/** Resolves once `front` has received `n` more snapshots: the router still serves it. */
async function snapshotsStillReach(front: FrontChannel, n: number): Promise<void> {
  let snapshots = 0;
  front.on('snapshot', () => snapshots++);
  await until(() => snapshots >= n, 'snapshots still reaching front 1');
}

/** Two fronts on a fresh service over one fake rank, snapshots every 20 ms, `extra` options on top. */
function fastSnapshotFronts(
  prefix: string,
  extra: Partial<RouterServiceOptions> = {},
): ReturnType<typeof openTwoFronts> {
  return openTwoFronts(
    prefix,
    {
      groups: [
        {
          worker: 'ipc:///fake',
          name: 'fake',
          engine: 'tokenspeed',
          backend: new FakeBackend({ ranks: [0] }) as never,
        },
      ],
      store: new ResponsesStore(),
      maxConcurrentRequests: 0,
      logger: log,
      snapshotIntervalMs: 20,
      ...extra,
    },
    log,
  );
}

test('a front whose socket closed has its requests aborted at once and is reported (the primary kills it); the other front is served on', async () => {
  const stuck: number[] = [];
  const fake = new FakeBackend({ ranks: [0] });
  const two = await fastSnapshotFronts('mgw-fronts-stuck-', {
    onFrontStuck: (id) => stuck.push(id),
    groups: [{ worker: 'ipc:///fake', name: 'fake', engine: 'tokenspeed', backend: fake as never }],
  });
  try {
    const placed = fake.nextSubmission();
    await new RemoteBackend(two.b, 0).submit(req());
    const sub = await placed;
    (two.b as unknown as { sock: { destroy(): void } }).sock.destroy();
    await until(() => stuck.length > 0, 'the stuck report');
    assert.deepEqual(stuck, [2]);
    assert.equal(sub.stream.isCancelled, true, 'its request is aborted at the engine');
    assert.equal(two.service.liveRequests, 0);
    await snapshotsStillReach(two.a, 2);
  } finally {
    await two.close();
  }
});

test('once the fronts are being closed (shutdown), a front whose frame socket closed is not reported stuck', async () => {
  const stuck: number[] = [];
  const two = await fastSnapshotFronts('mgw-fronts-closing-', { onFrontStuck: (id) => stuck.push(id) });
  try {
    two.service.closingFronts();
    (two.b as unknown as { sock: { destroy(): void } }).sock.destroy();
    // The snapshot timer keeps sending to both fronts: front 1 still gets them, front 2's fail quietly.
    await snapshotsStillReach(two.a, 5);
    assert.deepEqual(stuck, []);
  } finally {
    await two.close();
  }
});

test('another process on the frame socket path cannot take a front: a bare id, a wrong token or a second hello for a live front is refused and the front is served on', async () => {
  const two = await fastSnapshotFronts('mgw-fronts-stranger-');
  try {
    const wrongToken = Buffer.from(two.service.frontToken);
    wrongToken[0] = wrongToken[0]! ^ 0xff;
    const claims = [Buffer.from([1, 0, 0, 0]), helloFrame(1, wrongToken), helloFrame(1, two.service.frontToken)];
    for (const claim of claims) {
      const stranger = connect(two.address);
      let received = 0;
      stranger.on('data', (d: Buffer) => (received += d.length));
      stranger.on('error', () => {});
      await new Promise<void>((r) => stranger.once('connect', () => r()));
      writeFrame(stranger, claim);
      let closed = false;
      stranger.once('close', () => (closed = true));
      await until(() => closed, `the router closing a claim of ${claim.length} bytes`);
      assert.equal(received, 0, `claim of ${claim.length} bytes: nothing reached the stranger`);
    }
    assert.equal(two.service.stats.decodeErrors, claims.length);
    await snapshotsStillReach(two.a, 3);
  } finally {
    await two.close();
  }
});

test('a frame socket announcing a frame longer than a hello is closed at once (nothing is gathered)', async () => {
  const stranger = connect(address);
  stranger.on('error', () => {});
  await new Promise<void>((r) => stranger.once('connect', () => r()));
  const errorsBefore = service.stats.decodeErrors;
  const header = Buffer.alloc(4);
  header.writeUInt32LE(64 * 1024 * 1024, 0);
  stranger.write(header);
  stranger.write(Buffer.alloc(64 * 1024));
  let closed = false;
  stranger.once('close', () => (closed = true));
  await until(() => closed, 'the router closing the socket');
  assert.equal(service.stats.decodeErrors, errorsBefore + 1);
});

test('a frame socket connection that closes halfway through its hello is counted and logged; one that sends nothing is not', async () => {
  const two = await fastSnapshotFronts('mgw-fronts-halfhello-');
  try {
    const empty = await rawConnection(two.address);
    empty.sock.end();
    await until(() => empty.closed(), 'the empty connection closing');
    const half = await rawConnection(two.address);
    const frame = Buffer.concat([Buffer.alloc(4), helloFrame(7, two.service.frontToken)]);
    frame.writeUInt32LE(frame.length - 4, 0);
    half.sock.end(frame.subarray(0, 12));
    await until(() => half.closed(), 'the half-hello connection closing');
    await until(() => two.service.stats.decodeErrors === 1, 'the truncated hello counted');
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(two.service.stats.decodeErrors, 1);
  } finally {
    await two.close();
  }
});

test('a frame socket connection that sends no hello is closed after the hello timeout', async () => {
  const two = await fastSnapshotFronts('mgw-fronts-silent-', { frontHelloTimeoutMs: 100 });
  try {
    const silent = connect(two.address);
    silent.on('error', () => {});
    let closed = false;
    silent.once('close', () => (closed = true));
    await new Promise<void>((r) => silent.once('connect', () => r()));
    await until(() => closed, 'the router closing a connection that never said hello');
    assert.equal(two.service.stats.decodeErrors, 1);
    // The real fronts said hello in time and are served on.
    let snapshots = 0;
    two.a.on('snapshot', () => snapshots++);
    await two.a.refresh();
    assert.ok(snapshots >= 1);
  } finally {
    await two.close();
  }
});

test(
  "a front that stops reading its frame socket is reported stuck once the router holds too much for it (node's buffer does not grow without bound)",
  { timeout: 30_000 },
  async () => {
    const stuck: number[] = [];
    const fake = new FakeBackend({ ranks: [0] });
    // Stuck only by bytes (no send timeout in this test's time): a lane whose sends are refused grows past 1 MiB.
    const two = await openTwoFronts(
      'mgw-fronts-unread-',
      { ...unhurriedOptions(fake, log), maxQueuedBytes: 1024 * 1024, onFrontStuck: (id) => stuck.push(id) },
      log,
    );
    try {
      const placed = fake.nextSubmission();
      await new RemoteBackend(two.b, 0).submit(req());
      const sub = await placed;
      // Front 2 stops reading (and stays paused: its slice logic would resume it).
      const down = (two.b as unknown as { sock: { pause(): unknown; resume: () => unknown } }).sock;
      down.pause();
      down.resume = () => down;
      // ~250 KB of rows per turn: the kernel's socket buffer, then DOWN_HIGH_WATER_BYTES in node's, then the lane.
      const ids = new Array<number>(50_000).fill(100_000);
      for (let i = 0; i < 200 && stuck.length === 0; i++) {
        sub.stream.push(ids);
        await new Promise((r) => setImmediate(r));
      }
      await until(() => stuck.length > 0, 'the stuck report');
      assert.deepEqual(stuck, [2]);
    } finally {
      await two.close();
    }
  },
);

test('a front whose socket the router closed says so (socket-closed), once; a front closing itself does not', async () => {
  const two = await fastSnapshotFronts('mgw-fronts-downclosed-');
  try {
    let closedA = 0;
    let closedB = 0;
    two.a.on('socket-closed', () => closedA++);
    two.b.on('socket-closed', () => closedB++);
    // The router's end of front 2's socket goes away (as when the router closes it).
    const routerSide = (
      two.service as unknown as { sessions: Map<number, { sock: { destroy(): void } }> }
    ).sessions.get(2)!.sock;
    routerSide.destroy();
    await until(() => closedB === 1, 'front 2 hearing its socket closed');
    two.a.close(); // a front closing its own channel is no loss
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(closedA, 0);
    assert.equal(closedB, 1);
  } finally {
    await two.close();
  }
});

test('a front whose socket closed ends its live streams and refuses new work at once (a terminal outcome, not a hang)', async () => {
  const fake = new FakeBackend({ ranks: [0] });
  const two = await fastSnapshotFronts('mgw-fronts-downfail-', {
    groups: [{ worker: 'ipc:///fake', name: 'fake', engine: 'tokenspeed', backend: fake as never }],
  });
  try {
    const remote = new RemoteBackend(two.b, 0);
    const placed = fake.nextSubmission();
    const stream = await remote.submit(req());
    const sub = await placed;
    sub.stream.push([10]);
    const it = stream[Symbol.asyncIterator]();
    assert.deepEqual((await it.next()).value?.newTokenIds, [10]);
    const closed = new Promise<void>((r) => two.b.once('socket-closed', () => r()));
    (two.service as unknown as { sessions: Map<number, { sock: { destroy(): void } }> }).sessions
      .get(2)!
      .sock.destroy();
    await closed;
    await assert.rejects(
      it.next(),
      (err: unknown) => err instanceof EngineClientError && err.kind === 'client-closed',
      'the live stream ends with an error',
    );
    await assert.rejects(
      remote.submit(req()),
      (err: unknown) => err instanceof EngineClientError && err.kind === 'client-closed',
      'a new submit is refused',
    );
    assert.equal(await two.b.acquirePermit(), null, 'no permit from a router that is gone');
    assert.equal(two.b.liveRequests, 0);
  } finally {
    await two.close();
  }
});

/** A raw connection to the router's socket (not a FrontChannel), connected; `received` counts bytes read. */
async function rawConnection(path: string): Promise<{ sock: Socket; received: () => number; closed: () => boolean }> {
  const sock = connect(path);
  let received = 0;
  let closed = false;
  sock.on('data', (d: Buffer) => (received += d.length));
  sock.on('error', () => {});
  sock.on('close', () => (closed = true));
  await new Promise<void>((r) => sock.once('connect', () => r()));
  return { sock, received: () => received, closed: () => closed };
}

test('a message before the hello is refused: the connection is closed and none of its records is applied', async () => {
  const two = await fastSnapshotFronts('mgw-fronts-nohello-', { maxConcurrentRequests: 5 });
  try {
    const raw = await rawConnection(two.address);
    writeFrame(raw.sock, encodeUp([{ tag: Tag.PERMIT, ticket: 1 }]));
    await until(raw.closed, 'the router closing the connection');
    assert.equal(raw.received(), 0, 'no GRANT, no snapshot');
    assert.equal(two.service.permitsHeld, 0, 'the PERMIT was not applied');
    assert.equal(two.service.stats.decodeErrors, 1);
    assert.equal(two.service.stats.frontMessages, 0);
    // A hello followed by a message in the same chunk is a front: the message is applied.
    const front = await rawConnection(two.address);
    const header = Buffer.alloc(4);
    const message = encodeUp([{ tag: Tag.PERMIT, ticket: 1 }]);
    header.writeUInt32LE(message.length, 0);
    const hello = helloFrame(9, two.service.frontToken);
    const helloHeader = Buffer.alloc(4);
    helloHeader.writeUInt32LE(hello.length, 0);
    front.sock.write(Buffer.concat([helloHeader, hello, header, message]));
    await until(() => two.service.permitsHeld === 1, 'the PERMIT after the hello applied');
    front.sock.destroy();
  } finally {
    await two.close();
  }
});

test('a front frame longer than the bound is refused before it is gathered: the socket is closed, counted, the front dropped and reported', async () => {
  const stuck: number[] = [];
  const two = await fastSnapshotFronts('mgw-fronts-oversized-', {
    maxConcurrentRequests: 5,
    onFrontStuck: (id) => stuck.push(id),
  });
  try {
    const raw = await rawConnection(two.address);
    writeFrame(raw.sock, helloFrame(9, two.service.frontToken));
    writeFrame(raw.sock, encodeUp([{ tag: Tag.PERMIT, ticket: 1 }]));
    await until(() => two.service.permitsHeld === 1, 'the front’s PERMIT applied');
    const header = Buffer.alloc(4);
    header.writeUInt32LE(MAX_FRONT_MESSAGE_BYTES + 1, 0);
    raw.sock.write(header);
    raw.sock.write(Buffer.alloc(64 * 1024));
    await until(raw.closed, 'the router closing the socket');
    assert.equal(two.service.stats.decodeErrors, 1);
    await until(() => stuck.length > 0, 'the report');
    assert.deepEqual(stuck, [9]);
    assert.equal(two.service.permitsHeld, 0, 'its permit is back');
    // A frame of exactly the bound is read (and, not msgpack, dropped as malformed: the connection stays).
    const small = await fastSnapshotFronts('mgw-fronts-bound-', { maxFrontMessageBytes: 1024 });
    try {
      const ok = await rawConnection(small.address);
      writeFrame(ok.sock, helloFrame(9, small.service.frontToken));
      writeFrame(ok.sock, Buffer.alloc(1024, 0xc1));
      await until(() => small.service.stats.frontMessages === 1, 'the frame of 1024 bytes read');
      assert.equal(small.service.stats.decodeErrors, 1, 'malformed, dropped');
      writeFrame(ok.sock, Buffer.alloc(1025));
      await until(ok.closed, 'the frame of 1025 bytes refused');
      assert.equal(small.service.stats.decodeErrors, 2);
    } finally {
      await small.close();
    }
  } finally {
    await two.close();
  }
});

test("a front's records of one turn reach the router as one message", async () => {
  const two = await fastSnapshotFronts('mgw-fronts-batch-');
  try {
    const before = two.service.stats.frontMessages;
    const remote = new RemoteBackend(two.a, 0);
    const grants = [two.a.acquirePermit(), two.a.acquirePermit(), two.a.acquirePermit()];
    const submits = [remote.submit(req()), remote.submit(req())];
    const tickets = await Promise.all(grants);
    const streams = await Promise.all(submits);
    assert.ok(tickets.every((t) => t !== null));
    assert.equal(two.service.stats.frontMessages - before, 1, 'three PERMITs and two SUBMITs in one message');
    for (const st of streams) st.cancel();
    for (const t of tickets) two.a.releasePermit(t!);
    await until(() => two.service.stats.frontMessages - before === 2, 'the ABORTs and RELEASEs, one message');
  } finally {
    await two.close();
  }
});
