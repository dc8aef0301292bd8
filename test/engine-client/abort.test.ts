/**
 * Cancellation and abort (dp-routing.md section 5): every path retires the request locally, frees its slot and
 * sends exactly `[identity, 01, ["<id>"]]` to the owning rank, without waiting for any engine confirmation.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { RequestType } from '../../src/protocols/types.js';
import type { EngineClient } from '../../src/engine-client/client.js';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { batch, drain, inFlight, req, row, setup, type FakeLink } from './fakes.js';

/** Exactly one ABORT, for `id`, to the identity of `rank`; the request retired and its slot freed. */
function assertAbortedOnce(client: EngineClient, link: FakeLink, id: string, rank: number): void {
  const aborts = link.aborts();
  assert.equal(aborts.length, 1, `one ABORT expected, got ${aborts.length}`);
  assert.equal(aborts[0].type, RequestType.ABORT);
  assert.deepEqual(aborts[0].identity, link.engines[rank].identity);
  assert.deepEqual(aborts[0].decoded, [id]);
  assert.equal(client.registeredCount, 0);
  assert.ok(
    inFlight(client).every((n) => n === 0),
    `in-flight ${inFlight(client).join('/')}`,
  );
}

test('cancel() aborts an unfinished request within the same turn, idempotently', async () => {
  const { client, link } = setup(3);
  await client.submit(req('a'));
  const s = await client.submit(req('b')); // rank 1
  await client.submit(req('c'), { dpRank: 0 });
  assert.equal(s.engineIndex, 1);
  s.cancel();
  // Synchronously, without awaiting anything: retired and the ABORT handed to the link (14.9).
  assert.equal(link.aborts().length, 1);
  assert.deepEqual(inFlight(client), [2, 0, 0]);
  s.cancel();
  s.cancel();
  await Promise.resolve();
  assert.equal(link.aborts().length, 1);
  assert.deepEqual(link.aborts()[0].identity, link.engines[1].identity);
  assert.deepEqual(link.aborts()[0].decoded, ['b']);
  assert.equal(client.stats.abortsSent, 1);
  const r = await drain(s);
  assert.deepEqual(r, { outputs: [] });
  await client.close();
});

test('breaking out of for-await (iterator return) aborts the request', async () => {
  const { client, link } = setup(2);
  const s = await client.submit(req('x'), { dpRank: 1 });
  await link.deliverBatch(batch(1, [row('x', null, [5]), row('x', null, [6])]));
  const got: number[] = [];
  for await (const o of s) {
    got.push(...o.newTokenIds);
    break;
  }
  assert.deepEqual(got, [5]);
  assertAbortedOnce(client, link, 'x', 1);
  // Late rows for the aborted id are dropped silently.
  await link.deliverBatch(batch(1, [row('x'), row('x', 'abort')]));
  assert.equal(client.isAlive(), true);
  await client.close();
});

test('cancel() while a read is pending resolves that read as the end of the stream', async () => {
  const { client, link } = setup(1);
  const s = await client.submit(req('p'));
  const it = s[Symbol.asyncIterator]();
  const pending = it.next();
  s.cancel();
  assert.deepEqual(await pending, { done: true, value: undefined });
  assertAbortedOnce(client, link, 'p', 0);
  await client.close();
});

test('an AbortSignal firing after submit aborts the request and detaches its listener', async () => {
  const { client, link } = setup(2);
  const ac = new AbortController();
  const s = await client.submit(req('sig'), { signal: ac.signal, dpRank: 1 });
  assert.equal(getEventListeners(ac.signal, 'abort').length, 1);
  ac.abort();
  assertAbortedOnce(client, link, 'sig', 1);
  assert.equal(getEventListeners(ac.signal, 'abort').length, 0);
  assert.deepEqual(await drain(s), { outputs: [] });
  await client.close();
});

test('a pre-aborted signal rejects with its reason; nothing is registered, reserved or sent', async () => {
  const { client, link } = setup(2);
  const ac = new AbortController();
  const reason = new Error('client went away');
  ac.abort(reason);
  await assert.rejects(client.submit(req('z'), { signal: ac.signal }), (e) => e === reason);
  assert.equal(link.sent.length, 0);
  assert.equal(client.registeredCount, 0);
  assert.deepEqual(inFlight(client), [0, 0]);
  await client.close();
});

test('a signal firing while the ADD is still queued: ABORT follows the ADD to the same rank, submit rejects', async () => {
  const { client, link } = setup(2);
  let release!: () => void;
  link.sendHook = (f) => (f.type === RequestType.ADD ? new Promise<void>((r) => (release = r)) : undefined);
  const ac = new AbortController();
  const p = client.submit(req('q'), { signal: ac.signal });
  assert.deepEqual(inFlight(client), [1, 0]);
  ac.abort();
  assert.deepEqual(inFlight(client), [0, 0]);
  release();
  await assert.rejects(p, { name: 'AbortError' });
  assert.deepEqual(
    link.sent.map((f) => [f.type, f.engineIndex]),
    [
      [RequestType.ADD, 0],
      [RequestType.ABORT, 0],
    ],
  );
  assertAbortedOnce(client, link, 'q', 0);
  await client.close();
});

test('a signal firing after the request finished sends nothing', async () => {
  const { client, link } = setup(1);
  const ac = new AbortController();
  const s = await client.submit(req('done'), { signal: ac.signal });
  await link.deliverBatch(batch(0, [row('done', 'stop')]));
  assert.equal(getEventListeners(ac.signal, 'abort').length, 0);
  ac.abort();
  s.cancel();
  assert.equal(link.aborts().length, 0);
  const r = await drain(s);
  assert.equal(r.outputs.length, 0, 'cancel discards buffered outputs');
  await client.close();
});

test('cancel after the terminal output was delivered (but not yet read) sends no ABORT', async () => {
  const { client, link } = setup(1);
  const s = await client.submit(req('t'));
  await link.deliverBatch(batch(0, [row('t', 'length')]));
  s.cancel();
  assert.equal(link.aborts().length, 0);
  await client.close();
});

test('explicit abort(id): retires, sends the ABORT to the owning rank, the stream reports stream-closed', async () => {
  const { client, link } = setup(2);
  await client.submit(req('keep'));
  const s = await client.submit(req('e')); // rank 1
  await client.abort('e');
  assert.equal(link.aborts().length, 1);
  assert.deepEqual(link.aborts()[0].identity, link.engines[1].identity);
  assert.deepEqual(link.aborts()[0].decoded, ['e']);
  assert.deepEqual(inFlight(client), [1, 0]);
  const r = await drain(s);
  assert.ok(r.error instanceof EngineClientError);
  assert.equal(r.error.kind, 'stream-closed');
  assert.equal(r.error.requestId, 'e');
  // Cancelling / aborting again does nothing more; unknown ids are a no-op.
  s.cancel();
  await client.abort('e');
  await client.abort('never-submitted');
  assert.equal(link.aborts().length, 1);
  await client.close();
});

test('the client never waits for an abort confirmation: the slot is free before the engine says anything', async () => {
  const { client, link } = setup(2);
  const a = await client.submit(req('a'), { dpRank: 0 });
  a.cancel();
  // No terminal "abort" row ever comes (TokenSpeed sends none, engine-wire.md 4.7); r0 is free right away.
  const b = await client.submit(req('b'));
  assert.equal(b.engineIndex, 0);
  assert.deepEqual(inFlight(client), [1, 0]);
  assert.equal(link.aborts().length, 1);
  await client.close();
});
