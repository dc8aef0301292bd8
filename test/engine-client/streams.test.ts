/**
 * Registry, submit order and per-request streams (dp-routing.md sections 2-4).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RequestType } from '../../src/protocols/types.js';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { FakeTransportError, batch, drain, inFlight, load, req, row, setup, tick } from './fakes.js';

test('submit sends [identity, 00, payload] to the selected rank and returns a stream bound to it', async () => {
  const { client, link } = setup(2);
  const s = await client.submit(req('a'));
  assert.equal(s.requestId, 'a');
  assert.equal(s.engineIndex, 0);
  assert.equal(link.sent.length, 1);
  assert.equal(link.sent[0].type, RequestType.ADD);
  assert.deepEqual(link.sent[0].identity, link.engines[0].identity);
  assert.deepEqual(
    link.sent[0].decoded,
    { rid: 'a', prompt: [1, 2, 3], dpRank: null },
    'unpinned: no target rank in the payload',
  );
  assert.equal(client.maxModelLen, 4096);
  assert.equal(client.isAlive(), true);
  await client.close();
});

test("contextTokenLimit = the first engine's max_model_len minus the protocol's reserved tokens; maxModelLen unchanged", async () => {
  const ts = setup(2); // JsonProtocol reserves 2, as TokenSpeed (engine-wire.md 4.4)
  assert.equal(ts.client.maxModelLen, 4096);
  assert.equal(ts.client.contextTokenLimit, 4094);
  await ts.client.close();
  const vllmLike = setup(2, { reservedContextTokens: 0 });
  assert.equal(vllmLike.client.contextTokenLimit, 4096);
  await vllmLike.client.close();
  const none = setup(0); // no rank joined yet: nothing is known
  assert.equal(none.client.maxModelLen, null);
  assert.equal(none.client.contextTokenLimit, 0);
  await none.client.close();
});

test('outputs are routed per request in order across batches; the terminal output ends the stream', async () => {
  const { client, link } = setup(2);
  const a = await client.submit(req('a'), { dpRank: 0 });
  const b = await client.submit(req('b'), { dpRank: 0 });
  await link.deliverBatch(batch(0, [row('a', null, [1]), row('b', null, [10]), row('ghost', null, [99])]));
  await link.deliverBatch(batch(0, [row('b', 'stop', [11]), row('a', null, [2])]));
  await link.deliverBatch(batch(0, [row('a', 'length', [3]), row('b', null, [12])])); // b's late row: dropped
  const ra = await drain(a);
  const rb = await drain(b);
  assert.equal(ra.error, undefined);
  assert.deepEqual(
    ra.outputs.map((o) => o.newTokenIds[0]),
    [1, 2, 3],
  );
  assert.equal(ra.outputs.at(-1)?.finishReason, 'length');
  assert.deepEqual(
    rb.outputs.map((o) => o.newTokenIds[0]),
    [10, 11],
  );
  assert.deepEqual(inFlight(client), [0, 0]);
  assert.equal(client.registeredCount, 0);
  await client.close();
});

test('a consumer reading concurrently with delivery receives outputs through pending reads', async () => {
  const { client, link } = setup(1);
  const s = await client.submit(req('a'));
  const reading = drain(s);
  await link.deliverBatch(batch(0, [row('a', null, [1])]));
  await link.deliverBatch(batch(0, [row('a', 'stop', [2])]));
  const r = await reading;
  assert.deepEqual(
    r.outputs.map((o) => o.newTokenIds[0]),
    [1, 2],
  );
  assert.equal(r.error, undefined);
  await client.close();
});

test('sinks are unbounded: a slow consumer does not hold up other requests', async () => {
  const { client, link } = setup(1);
  const slow = await client.submit(req('slow'));
  const fast = await client.submit(req('fast'));
  for (let i = 0; i < 500; i++) await link.deliverBatch(batch(0, [row('slow', null, [i])]));
  await link.deliverBatch(batch(0, [row('fast', 'stop')]));
  assert.equal((await drain(fast)).outputs.length, 1);
  slow.cancel();
  await client.close();
});

test('an encode failure rolls back synchronously: error kind encode, nothing reserved, registered or sent', async () => {
  const { client, link, protocol } = setup(2);
  protocol.encodeAddError = new Error('TokenizedGenerateReqInput.input_ids[0]: expected int');
  await assert.rejects(client.submit(req('bad')), (e: unknown) => {
    assert.ok(e instanceof EngineClientError);
    assert.equal(e.kind, 'encode');
    assert.match(e.message, /input_ids\[0\]/);
    assert.equal(e.cause, protocol.encodeAddError);
    return true;
  });
  assert.deepEqual(inFlight(client), [0, 0]);
  assert.equal(client.registeredCount, 0);
  assert.equal(link.sent.length, 0);
  protocol.encodeAddError = null;
  await client.submit(req('bad')); // the id is free
  assert.equal(client.isAlive(), true);
  await client.close();
});

test('a send failure (not a timeout) rolls back that request only: transport error, client stays alive', async () => {
  const { client, link } = setup(2);
  const a = await client.submit(req('a'));
  link.sendHook = () => {
    throw new FakeTransportError('EHOSTUNREACH');
  };
  await assert.rejects(client.submit(req('b')), (e: unknown) => {
    assert.ok(e instanceof EngineClientError);
    assert.equal(e.kind, 'transport');
    assert.match(e.message, /EHOSTUNREACH/);
    return true;
  });
  assert.deepEqual(inFlight(client), [1, 0]);
  assert.equal(client.registeredCount, 1);
  assert.equal(client.isAlive(), true);
  link.sendHook = null;
  await link.deliverBatch(batch(0, [row('a', 'stop')]));
  assert.equal((await drain(a)).outputs.length, 1);
  await client.close();
});

test('an empty request id is refused before anything happens', async () => {
  const { client, link } = setup(1);
  await assert.rejects(client.submit(req('')), { kind: 'encode', message: /non-empty/ });
  assert.equal(link.sent.length, 0);
  await client.close();
});

test('close(): every live stream yields a stream-closed error naming its id, then ends; later submits fail', async () => {
  const { client, link } = setup(2);
  const a = await client.submit(req('a'));
  const b = await client.submit(req('b'));
  await link.deliverBatch(batch(1, [row('b')], load(1, 0, 0.25)));
  const pendingA = drain(a);
  await client.close();
  const ra = await pendingA;
  assert.ok(ra.error instanceof EngineClientError);
  assert.equal(ra.error.kind, 'stream-closed');
  assert.match(ra.error.message, /"a"/);
  const rb = await drain(b);
  assert.equal(rb.outputs.length, 1);
  assert.equal((rb.error as EngineClientError).kind, 'stream-closed');
  assert.equal((rb.error as EngineClientError).requestId, 'b');
  // After the error, the next read is the end of the stream.
  assert.deepEqual(await b[Symbol.asyncIterator]().next(), { done: true, value: undefined });
  assert.equal(client.isAlive(), false);
  assert.deepEqual(inFlight(client), [0, 0]);
  assert.deepEqual(client.rankStates()[1].load, load(1, 0, 0.25), 'stored loads are kept');
  assert.equal(link.closed, true);
  await assert.rejects(client.submit(req('c')), { kind: 'client-closed', message: /shutting down/ });
  assert.equal(link.aborts().length, 0);
  await client.close(); // idempotent
});

test('the failed event is not emitted by an orderly close()', async () => {
  const { client } = setup(1);
  let failed = 0;
  client.on('failed', () => failed++);
  await client.submit(req('a'));
  await client.close();
  assert.equal(failed, 0);
  assert.deepEqual(client.stats.failures, {});
});

test('constructor validation: a non-positive silence timeout is refused', () => {
  assert.throws(() => setup(1, { silenceTimeoutMs: 0 }), RangeError);
  assert.throws(() => setup(1, { silenceTimeoutMs: Number.NaN }), RangeError);
});

test('push mode (listen): buffered outputs at once, later ones in the delivery that follows the batch, in order', async () => {
  const { client, link } = setup(1);
  const a = await client.submit(req('a'));
  await link.deliverBatch(batch(0, [row('a', null, [1])]));
  const got: string[] = [];
  assert.ok(a.listen, 'the engine client offers push mode');
  a.listen({
    output: (o) => got.push(`${o.newTokenIds[0]}/${o.finishReason}`),
    error: (e) => got.push(`error ${e.message}`),
  });
  assert.deepEqual(got, ['1/null'], 'the buffered output is handed over before listen returns');
  await link.deliverBatch(batch(0, [row('a', null, [2]), row('a', 'stop', [3])]));
  assert.deepEqual(inFlight(client), [0], 'routed and released at once');
  assert.deepEqual(got, ['1/null'], 'handed in a slice of its own (delivery-queue.ts)');
  await tick();
  assert.deepEqual(got, ['1/null', '2/null', '3/stop']);
  assert.throws(() => a[Symbol.asyncIterator](), /cannot be iterated/);
  assert.throws(() => a.listen!({ output: () => {}, error: () => {} }), /already has a consumer/);
  assert.deepEqual(inFlight(client), [0]);
  await client.close();
});

test('push mode: a failure is handed to error once; a listener that throws cancels its stream (ABORT) and the client lives', async () => {
  const { client, link } = setup(1);
  const a = await client.submit(req('a'));
  const b = await client.submit(req('b'));
  const errors: string[] = [];
  a.listen!({ output: () => assert.fail('no output'), error: (e) => errors.push(e.message) });
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(w.message);
  process.on('warning', onWarning);
  b.listen!({
    output: () => {
      throw new Error('listener bug');
    },
    error: () => assert.fail('no error after the throw'),
  });
  await link.deliverBatch(batch(0, [row('b', null, [1])]));
  await new Promise((r) => setImmediate(r));
  process.off('warning', onWarning);
  assert.ok(
    warnings.some((w) => /listener of request b threw/.test(w)),
    'reported as a process warning',
  );
  assert.ok(
    link.sent.some((m) => m.type === RequestType.ABORT),
    'the thrown-in stream was abandoned: ABORT sent',
  );
  assert.equal(client.registeredCount, 1, 'only a is still live');
  await client.close();
  await tick();
  assert.equal(errors.length, 1, 'close() fails the listened stream once');
  assert.match(errors[0]!, /a/);
});
