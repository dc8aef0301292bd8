/**
 * Row mode of the engine client's request streams (src/engine-client/request-stream.ts `listenRows`, issue 9: what the
 * router of `--workers N` uses): every row reaches the sink inside the dispatcher's synchronous step for its batch,
 * with the stream's counts after it, without the sliced delivery; buffered outputs are handed at once; a failure is
 * handed once; a sink that throws cancels its stream (ABORT) and the client lives.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RequestType } from '../../src/protocols/types.js';
import type { RowSink } from '../../src/engine-client/request-stream.js';
import { batch, inFlight, req, row, setup, tick } from './fakes.js';

/** A sink recording `tokens/finish p c k` per row and `error <message>`. */
function recorder(): { got: string[]; sink: RowSink } {
  const got: string[] = [];
  return {
    got,
    sink: {
      row: (r, p, c, k) => got.push(`${r.newTokenIds.join(',')}/${r.finishReason} ${p} ${c} ${k}`),
      error: (e) => got.push(`error ${e.message}`),
    },
  };
}

test('listenRows: buffered outputs at once, later rows inside the batch step (no delivery slice), counts filled', async () => {
  // The sliced delivery never runs: only row mode can hand anything over.
  const { client, link } = setup(1, { delivery: { soon: () => {}, defer: () => {} } });
  const a = await client.submit(req('a'));
  await link.deliverBatch(batch(0, [row('a', null, [1])]));
  const { got, sink } = recorder();
  assert.ok(a.listenRows, 'the engine client offers row mode');
  a.listenRows(sink);
  assert.deepEqual(got, ['1/null 3 1 0'], 'the buffered output is handed over before listenRows returns');
  // Counts the engine did not report are the stream's (completion = running total, prompt/cached = last reported).
  const unreported = { ...row('a', null, [2, 3]), promptTokens: null, completionTokens: null, cachedTokens: null };
  await link.deliverBatch(batch(0, [unreported, row('a', 'stop', [4])]));
  assert.deepEqual(got, ['1/null 3 1 0', '2,3/null 3 3 0', '4/stop 3 1 0'], 'handed in the batch step, in order');
  assert.deepEqual(inFlight(client), [0], 'routed and released in the same step');
  assert.throws(() => a[Symbol.asyncIterator](), /cannot be iterated/);
  assert.throws(() => a.listen!({ output: () => {}, error: () => {} }), /already has a consumer/);
  assert.throws(() => a.listenRows!(sink), /already has a consumer/);
  await link.deliverBatch(batch(0, [row('a', null, [5])]));
  assert.equal(got.length, 3, 'nothing after the terminal row');
  await client.close();
});

test('listenRows: a failure is handed once; a sink that throws cancels its stream (ABORT) and the client lives', async () => {
  const { client, link } = setup(1, { delivery: { soon: () => {}, defer: () => {} } });
  const a = await client.submit(req('a'));
  const b = await client.submit(req('b'));
  const ra = recorder();
  a.listenRows!(ra.sink);
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(w.message);
  process.on('warning', onWarning);
  b.listenRows!({
    row: () => {
      throw new Error('sink bug');
    },
    error: () => assert.fail('no error after the throw'),
  });
  await link.deliverBatch(batch(0, [row('b', null, [1])]));
  await tick();
  process.off('warning', onWarning);
  assert.ok(
    warnings.some((w) => /row sink of request b threw/.test(w)),
    'reported as a process warning',
  );
  assert.ok(
    link.sent.some((m) => m.type === RequestType.ABORT),
    'the thrown-in stream was abandoned: ABORT sent',
  );
  assert.equal(client.registeredCount, 1, 'only a is still live');
  // An out-of-band finished id without a terminal row: a's stream is closed (stream-closed error), once.
  await link.deliverBatch(batch(0, [], undefined, ['a']));
  assert.equal(ra.got.length, 1);
  assert.match(ra.got[0]!, /^error .*a/);
  await client.close();
  assert.equal(ra.got.length, 1, 'close() hands nothing more');
});

test('listenRows: a cancelled stream hears nothing more', async () => {
  const { client, link } = setup(1, { delivery: { soon: () => {}, defer: () => {} } });
  const a = await client.submit(req('a'));
  const { got, sink } = recorder();
  a.listenRows!(sink);
  a.cancel();
  await link.deliverBatch(batch(0, [row('a', null, [1])]));
  assert.deepEqual(got, []);
  assert.deepEqual(inFlight(client), [0]);
  await client.close();
});
