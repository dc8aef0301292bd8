import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FlowQueue, type FlowEntry } from '../../src/engine-client/flow-queue.js';

let n = 0;
const entry = (tenant: string, band = 1, id = `r${n++}`): FlowEntry<null> => ({ id, tenant, band, value: null });
const drain = (q: FlowQueue<null>): string[] => {
  const out: string[] = [];
  for (let e = q.take(); e !== undefined; e = q.take()) out.push(e.id);
  return out;
};
const big = { maxTotal: 100, maxPerTenant: 100 };

test('bands first: the most urgent non-empty band is served, whatever arrived before', () => {
  const q = new FlowQueue<null>(3, big);
  q.enqueue(entry('a', 2, 'shed-1'));
  q.enqueue(entry('a', 1, 'std-1'));
  q.enqueue(entry('b', 0, 'crit-1'));
  q.enqueue(entry('a', 1, 'std-2'));
  assert.deepEqual(drain(q), ['crit-1', 'std-1', 'std-2', 'shed-1']);
  assert.equal(q.size, 0);
});

test('fairness within a band: tenants take turns however many each queued; FCFS within a tenant', () => {
  const q = new FlowQueue<null>(3, big);
  for (let i = 0; i < 5; i++) q.enqueue(entry('batch', 1, `b${i}`));
  q.enqueue(entry('user', 1, 'u0'));
  q.enqueue(entry('user', 1, 'u1'));
  q.enqueue(entry('other', 1, 'o0'));
  assert.deepEqual(drain(q), ['b0', 'u0', 'o0', 'b1', 'u1', 'b2', 'b3', 'b4']);
});

test('a tenant that comes back after its queue emptied joins the end of the rotation', () => {
  const q = new FlowQueue<null>(1, big);
  q.enqueue(entry('a', 0, 'a0'));
  q.enqueue(entry('b', 0, 'b0'));
  q.enqueue(entry('b', 0, 'b1'));
  assert.equal(q.take()?.id, 'a0');
  q.enqueue(entry('a', 0, 'a1'));
  assert.deepEqual(drain(q), ['b0', 'a1', 'b1']);
});

test('remove: a request that left is gone at once, wherever it was; counts follow', () => {
  const q = new FlowQueue<null>(3, big);
  q.enqueue(entry('a', 1, 'a0'));
  q.enqueue(entry('a', 1, 'a1'));
  q.enqueue(entry('b', 2, 'b0'));
  assert.equal(q.remove('a0')?.id, 'a0');
  assert.equal(q.remove('a0'), undefined, 'twice: nothing');
  assert.equal(q.remove('b0')?.tenant, 'b');
  assert.deepEqual(q.bandSizes, [0, 1, 0]);
  assert.deepEqual([q.queuedOf('a'), q.queuedOf('b')], [1, 0]);
  assert.equal(q.has('a1'), true);
  assert.deepEqual(drain(q), ['a1']);
});

test('bounds: per tenant, then in total; when full, a more urgent request sheds the newest least urgent one', () => {
  const q = new FlowQueue<null>(3, { maxTotal: 3, maxPerTenant: 2 });
  assert.deepEqual(q.enqueue(entry('a', 2, 'a0')), { queued: true, shed: null });
  q.enqueue(entry('a', 2, 'a1'));
  assert.deepEqual(q.enqueue(entry('a', 1, 'a2')), { queued: false, reason: 'tenant-full' });
  q.enqueue(entry('b', 1, 'b0'));
  assert.equal(q.size, 3);
  assert.deepEqual(q.enqueue(entry('c', 2, 'c0')), { queued: false, reason: 'queue-full' }, 'nothing less urgent');
  const r = q.enqueue(entry('c', 0, 'c1'));
  assert.equal(r.queued, true);
  assert.equal(r.queued && r.shed?.id, 'a1', 'the newest of the least urgent band');
  const d = q.enqueue(entry('d', 1, 'd0'));
  assert.equal(d.queued && d.shed?.id, 'a0', 'band 2 empties before band 1 is touched');
  assert.deepEqual(q.enqueue(entry('e', 1, 'e0')), { queued: false, reason: 'queue-full' }, 'equal bands never shed');
  assert.deepEqual(drain(q), ['c1', 'b0', 'd0']);
});

test('a duplicate id is refused; a band out of range throws; limits are checked', () => {
  const q = new FlowQueue<null>(2, big);
  q.enqueue(entry('a', 0, 'x'));
  assert.deepEqual(q.enqueue(entry('b', 1, 'x')), { queued: false, reason: 'duplicate' });
  assert.throws(() => q.enqueue(entry('a', 2)), RangeError);
  assert.throws(() => new FlowQueue(0, big), RangeError);
  assert.throws(() => new FlowQueue(1, { maxTotal: 1, maxPerTenant: 0 }), RangeError);
});
