/**
 * Flow control in the engine client (flow-control.ts, issue 30 part 3): while the group is saturated, unpinned
 * requests wait in the gateway's queue and are placed in band order, fairly between tenants, as room appears; a
 * queued request ends with `overloaded` at its deadline or when the queue is full, and leaves at once when its
 * client does. The ranks here are a fake link: a request holds its rank until a terminal row arrives.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { rankRoom } from '../../src/engine-client/flow-control.js';
import type { RequestStream } from '../../src/engine-client/request-stream.js';
import { RequestType } from '../../src/protocols/types.js';
import { batch, inFlight, load, makeEngines, req, row, setup, tick, unreachable, type FakeLink } from './fakes.js';

/** Ids of the ADDs sent so far, in order. */
const added = (link: FakeLink): string[] =>
  link.sent.filter((f) => f.type === RequestType.ADD).map((f) => (f.decoded as { rid: string }).rid);

async function finish(link: FakeLink, rank: number, id: string): Promise<void> {
  await link.deliverBatch(batch(rank, [row(id, 'stop')]));
  await tick();
}

const overloaded = (err: unknown) => err instanceof EngineClientError && err.kind === 'overloaded';

test('rankRoom: in-flight against the target; none while the engine reports a queue', () => {
  assert.equal(rankRoom(2, null, 4), 2);
  assert.equal(rankRoom(5, null, 4), 0);
  assert.equal(rankRoom(1, load(1, 2), 4), 0, 'the engine already queues');
  assert.equal(rankRoom(0, load(1, 2), 4), 4, 'an idle rank: its last word is stale');
  assert.equal(rankRoom(3, null, null), Number.POSITIVE_INFINITY);
});

test('saturated: requests wait and go in band order, tenants taking turns, as room appears', async () => {
  const { client, link } = setup(1, { flowControl: { maxInFlightPerRank: 1 } });
  try {
    const first = await client.submit(req('a'));
    const waits: Promise<RequestStream>[] = [
      client.submit(req('bulk-1'), { flow: { tenant: 'bulk', band: 1 } }),
      client.submit(req('bulk-2'), { flow: { tenant: 'bulk', band: 1 } }),
      client.submit(req('user-1'), { flow: { tenant: 'user', band: 1 } }),
      client.submit(req('urgent'), { flow: { tenant: 'bulk', band: 0 } }),
    ];
    await tick();
    assert.deepEqual(added(link), ['a'], 'nothing else reached the rank');
    assert.deepEqual(inFlight(client), [1]);
    const order = ['urgent', 'bulk-1', 'user-1', 'bulk-2'];
    let previous = 'a';
    for (const id of order) {
      await finish(link, 0, previous);
      assert.equal(added(link).at(-1), id);
      assert.deepEqual(inFlight(client), [1], 'one at a time: the target');
      previous = id;
    }
    await finish(link, 0, previous);
    await Promise.all(waits);
    void first;
    assert.deepEqual(inFlight(client), [0]);
  } finally {
    await client.close();
  }
});

test('not saturated: nothing waits, pinned requests never wait', async () => {
  const { client, link } = setup(2, { flowControl: { maxInFlightPerRank: 1 } });
  try {
    assert.equal(client.hasRoom(), true);
    await client.submit(req('a'));
    await client.submit(req('b'));
    assert.equal(client.hasRoom(), false, 'both ranks at their target: a new request would wait');
    await client.submit(req('pinned'), { dpRank: 0 });
    assert.deepEqual(added(link), ['a', 'b', 'pinned']);
  } finally {
    await client.close();
  }
});

test('a queued request ends with overloaded at its deadline, and one whose client left leaves at once', async () => {
  const { client, link } = setup(1, { flowControl: { maxInFlightPerRank: 1, queueTimeoutMs: 60_000 } });
  try {
    await client.submit(req('a'));
    const late = client.submit(req('late'), { flow: { tenant: 't', band: 1, timeoutMs: 20 } });
    await assert.rejects(late, (err) => overloaded(err) && /stayed saturated for 20 ms/.test(String(err)));
    const ac = new AbortController();
    const gone = client.submit(req('gone'), { signal: ac.signal });
    const stays = client.submit(req('stays'));
    await tick();
    ac.abort(new Error('client left'));
    await assert.rejects(gone, /client left/);
    const already = new AbortController();
    already.abort(new Error('left before it queued'));
    await assert.rejects(client.submit(req('never'), { signal: already.signal }), /left before it queued/);
    assert.equal(
      client.stats.flowControl?.queuedByBand.reduce((a, b) => a + b, 0),
      1,
      'only "stays" waits',
    );
    await finish(link, 0, 'a');
    await stays;
    assert.deepEqual(added(link), ['a', 'stays'], 'the departed request never reached the rank');
  } finally {
    await client.close();
  }
});

test('bounded: a full queue refuses with overloaded; a more urgent request sheds a sheddable one', async () => {
  const { client } = setup(1, { flowControl: { maxInFlightPerRank: 1, maxQueued: 2, maxQueuedPerTenant: 2 } });
  try {
    await client.submit(req('a'));
    const s1 = client.submit(req('s1'), { flow: { tenant: 'x', band: 2 } });
    const s2 = client.submit(req('s2'), { flow: { tenant: 'y', band: 2 } });
    await assert.rejects(client.submit(req('s3'), { flow: { tenant: 'z', band: 2 } }), (err) => overloaded(err));
    const crit = client.submit(req('c'), { flow: { tenant: 'z', band: 0 } });
    await assert.rejects(s2, (err) => overloaded(err) && /more urgent/.test(String(err)));
    const closed = client.close();
    await assert.rejects(s1, (err) => err instanceof EngineClientError && err.kind === 'client-closed');
    await assert.rejects(crit, (err) => err instanceof EngineClientError && err.kind === 'client-closed');
    await closed;
  } finally {
    await client.close();
  }
});

test('the engine reports a queue: no room even under the in-flight target', async () => {
  const { client, link } = setup(1, { flowControl: { maxInFlightPerRank: 8 } });
  try {
    await client.submit(req('a'));
    await link.deliverBatch(batch(0, [row('a')], load(1, 3)));
    await tick();
    const b = client.submit(req('b'));
    await tick();
    assert.deepEqual(added(link), ['a']);
    await link.deliverBatch(batch(0, [row('a')], load(1, 0)));
    await tick();
    await b;
    assert.deepEqual(added(link), ['a', 'b']);
  } finally {
    await client.close();
  }
});

test('when no rank can serve any more, waiting requests end at once with unavailable, not at their deadline', async () => {
  const { client, link } = setup(1, { flowControl: { maxInFlightPerRank: 1, queueTimeoutMs: 60_000 } });
  try {
    const first = await client.submit(req('a'));
    const waiting = client.submit(req('b'));
    await tick();
    // The only rank's ABORT is refused as unreachable: the rank is dead, the group cannot serve.
    link.sendHook = (f) => {
      if (f.type === RequestType.ABORT) throw unreachable(0);
    };
    first.cancel();
    await assert.rejects(waiting, (err) => err instanceof EngineClientError && err.kind === 'unavailable');
    assert.deepEqual(added(link), ['a'], 'it never reached a rank');
    // Counted once: as unavailable when the rank's death emptied the queue, or as granted when room (the cancel) let
    // it through first and the placement then found no rank.
    const o = client.stats.flowControl!.outcomes;
    assert.equal(o.unavailable + o.granted, 1, 'counted once');
  } finally {
    await client.close();
  }
});

test('a target below the engine batch keeps room for critical: it starts while standard requests wait', async () => {
  const engines = makeEngines(1).map((e) => ({ ...e, ready: { ...e.ready, maxNumSeqs: 3 } }));
  const { client, link } = setup(engines, { flowControl: { maxInFlightPerRank: 1 } });
  try {
    await client.submit(req('a'));
    const std = client.submit(req('std'), { flow: { tenant: 'x', band: 1 } });
    await tick();
    assert.deepEqual(added(link), ['a'], 'standard waits at the target');
    assert.equal(client.hasRoom(), false);
    await client.submit(req('c1'), { flow: { tenant: 'y', band: 0 } });
    await client.submit(req('c2'), { flow: { tenant: 'y', band: 0 } });
    assert.deepEqual(
      added(link),
      ['a', 'c1', 'c2'],
      'critical goes past the waiting standard request, up to the batch',
    );
    const c3 = client.submit(req('c3'), { flow: { tenant: 'y', band: 0 } });
    await tick();
    assert.equal(added(link).length, 3, 'the batch is full: critical waits too');
    // One slot frees: the critical request goes first; the standard one only when in-flight is below the target.
    await finish(link, 0, 'c1');
    await c3;
    assert.deepEqual(added(link), ['a', 'c1', 'c2', 'c3']);
    await finish(link, 0, 'c2');
    await finish(link, 0, 'c3');
    await tick();
    assert.equal(added(link).length, 4, 'a still holds the one standard slot');
    await finish(link, 0, 'a');
    await std;
    assert.deepEqual(added(link).at(-1), 'std');
  } finally {
    await client.close();
  }
});
