/**
 * The router service over a real engine client (src/fronts/router/router-service.ts with src/engine-client/client.ts over
 * the fake link, a real ZeroMQ ipc channel to a front): rows go to the front's message in the engine client's batch
 * step (the stream's row mode), not through the client's sliced delivery; counts, terminal rows, a stream closed
 * without a terminal row, and a cancel in the front behave as in one process.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { pino } from 'pino';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { FrontChannel } from '../../src/fronts/front/front-channel.js';
import { RemoteBackend } from '../../src/fronts/front/remote-backend.js';
import { RouterService } from '../../src/fronts/router/router-service.js';
import { RequestType, type EngineOutput } from '../../src/protocols/types.js';
import { ResponsesStore } from '../../src/server/responses/store.js';
import { freshDir, waitFor } from '../helpers/async.js';
import { batch, req, row, setup, type FakeLink } from '../engine-client/fakes.js';
import type { EngineClient } from '../../src/engine-client/client.js';

const log = pino({ level: 'silent' });
let dir: { dir: string; cleanup: () => Promise<void> };
let client: EngineClient;
let link: FakeLink;
let service: RouterService;
let front: FrontChannel;

const until = (cond: () => boolean, what: string): Promise<void> => waitFor(cond, what, 5000);

/** Read `stream` into `outputs` / `error` as it goes. */
function collect(stream: AsyncIterable<EngineOutput>): { outputs: EngineOutput[]; error: unknown; done: boolean } {
  const got = { outputs: [] as EngineOutput[], error: undefined as unknown, done: false };
  void (async () => {
    try {
      for await (const o of stream) got.outputs.push(o);
    } catch (err) {
      got.error = err;
    }
    got.done = true;
  })();
  return got;
}

before(async () => {
  dir = await freshDir('mgw-router-rows-');
  // The engine client's sliced delivery never runs: whatever reaches the front went through row mode.
  ({ client, link } = setup(2, { delivery: { soon: () => {}, defer: () => {} } }));
  service = new RouterService({
    groups: [{ worker: 'ipc:///fake', name: 'fake', engine: 'tokenspeed', backend: client as never }],
    store: new ResponsesStore(),
    maxConcurrentRequests: 0,
    logger: log,
  });
  const address = `${dir.dir}/fronts.sock`;
  await service.bind(address);
  front = await FrontChannel.connect(address, 1, service.frontToken, log);
});

after(async () => {
  front.close();
  service.close();
  await client.close();
  await dir.cleanup();
});

test('rows reach the front from the batch step, with their counts; the terminal row ends the stream and frees the rank', async () => {
  const remote = new RemoteBackend(front, 0);
  const stream = await remote.submit(req('r1'), { dpRank: 1 });
  assert.equal(stream.engineIndex, 1);
  const got = collect(stream);
  const unreported = { ...row('r1', null, [10, 11]), promptTokens: null, completionTokens: null, cachedTokens: null };
  await link.deliverBatch(batch(1, [unreported]));
  await link.deliverBatch(batch(1, [row('r1', 'length', [12])]));
  await until(() => got.done, 'the stream to end');
  assert.equal(got.error, undefined);
  assert.deepEqual(
    got.outputs.map((o) => [o.newTokenIds, o.finishReason, o.promptTokens, o.completionTokens, o.cachedTokens]),
    [
      [[10, 11], null, 3, 2, 0],
      [[12], 'length', 3, 1, 0],
    ],
  );
  assert.equal(client.rankStates()[1]!.inFlight, 0);
  await until(() => service.liveRequests === 0, 'the router to forget the finished request');
});

test('a stream closed without a terminal row fails in the front with the engine client error; a cancel in the front ABORTs', async () => {
  const remote = new RemoteBackend(front, 0);
  const closed = collect(await remote.submit(req('r2'), { dpRank: 0 }));
  await link.deliverBatch(batch(0, [row('r2', null, [1])], undefined, ['r2']));
  await until(() => closed.done, 'the closed stream to end');
  assert.equal(closed.outputs.length, 1);
  assert.ok(
    closed.error instanceof Error && /r2/.test(closed.error.message),
    `stream-closed error: ${String(closed.error)}`,
  );
  assert.ok(!(closed.error instanceof EngineClientError) || closed.error.kind !== 'engine-dead');

  const cancelled = await remote.submit(req('r3'), { dpRank: 0 });
  const aborts = link.aborts().length;
  cancelled.cancel();
  await until(() => link.aborts().length > aborts, 'the ABORT to reach the rank');
  assert.equal(link.aborts().at(-1)!.type, RequestType.ABORT);
  assert.equal(client.rankStates()[0]!.inFlight, 0);
  await link.deliverBatch(batch(0, [row('r3', null, [5])]));
  await until(() => service.liveRequests === 0, 'the router to forget the cancelled request');
});
