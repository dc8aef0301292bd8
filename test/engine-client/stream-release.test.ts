/**
 * A request stream lets go of its consumer once the consumer has had its last item (request-stream.ts, issue 9 CPU
 * per request): a finished stream that is still reachable (here: held by the test, in the gateway: a stale slot of an
 * old-space table the young-generation GC takes for live) must not keep the request's listener, and through it the
 * whole request, alive. Checked with a WeakRef and a full garbage collection.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { RequestStreamImpl, type OutputListener, type RowSink } from '../../src/engine-client/request-stream.js';
import { row } from './fakes.js';

// A full collection on demand (the test command does not pass --expose-gc).
setFlagsFromString('--expose-gc');
const collect = runInNewContext('gc') as () => void;

/** Whether `ref`'s target survives a full collection (WeakRef targets are kept to the end of the current job). */
async function survives(ref: WeakRef<object>): Promise<boolean> {
  await new Promise((resolve) => setImmediate(resolve));
  collect();
  return ref.deref() !== undefined;
}

/** A stream consumed by a fresh listener (or row sink), with a WeakRef to that consumer only. */
function consumed(mode: 'listen' | 'rows'): { stream: RequestStreamImpl; consumer: WeakRef<object>; got: string[] } {
  const stream = new RequestStreamImpl('r', 3, () => {});
  const got: string[] = [];
  if (mode === 'listen') {
    const listener: OutputListener = {
      output: (o) => got.push(`out ${o.finishReason}`),
      error: (e) => got.push(`error ${e.message}`),
    };
    stream.listen(listener);
    return { stream, consumer: new WeakRef(listener), got };
  }
  const sink: RowSink = { row: (r) => got.push(`row ${r.finishReason}`), error: (e) => got.push(`error ${e.message}`) };
  stream.listenRows(sink);
  return { stream, consumer: new WeakRef(sink), got };
}

for (const mode of ['listen', 'rows'] as const) {
  test(`${mode}: the consumer is held until its terminal item, then let go; nothing reaches it afterwards`, async () => {
    const { stream, consumer, got } = consumed(mode);
    stream.deliver(row('r', null, [1]));
    assert.equal(await survives(consumer), true, 'an unfinished stream keeps its consumer');
    stream.deliver(row('r', 'stop', [2]));
    assert.deepEqual(got, mode === 'listen' ? ['out null', 'out stop'] : ['row null', 'row stop']);
    assert.equal(
      await survives(consumer),
      false,
      'the finished stream (still referenced) no longer holds its consumer',
    );
    assert.equal(stream.deliver(row('r', null, [3])), false);
    stream.cancel();
    assert.throws(() => stream.listen({ output: () => {}, error: () => {} }), /already has a consumer/);
    assert.throws(() => stream[Symbol.asyncIterator](), /cannot be iterated/);
  });

  test(`${mode}: a failure is handed once, then the consumer is let go`, async () => {
    const { stream, consumer, got } = consumed(mode);
    stream.fail(new Error('boom'));
    assert.deepEqual(got, ['error boom']);
    assert.equal(await survives(consumer), false);
  });

  test(`${mode}: cancel() lets go of the consumer`, async () => {
    const { stream, consumer, got } = consumed(mode);
    stream.cancel();
    stream.deliver(row('r', 'stop', [1]));
    assert.deepEqual(got, []);
    assert.equal(await survives(consumer), false);
  });
}
