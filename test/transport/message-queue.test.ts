import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MessageQueue } from '../../src/transport/message-queue.js';

test('FIFO delivery, waitForSpace blocks at capacity and resumes as the consumer reads', async () => {
  const q = new MessageQueue<number>(2);
  q.push(1);
  await q.waitForSpace();
  q.push(2);
  let spaceFree = false;
  const space = q.waitForSpace().then(() => {
    spaceFree = true;
  });
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(spaceFree, false, 'no space while 2 of 2 are buffered');
  const it = q.consume()[Symbol.asyncIterator]();
  assert.deepEqual(await it.next(), { done: false, value: 1 });
  await space;
  assert.equal(spaceFree, true);
  q.push(3); // control messages may exceed capacity
  q.push(4);
  q.end();
  const rest: number[] = [];
  for (let r = await it.next(); !r.done; r = await it.next()) rest.push(r.value);
  assert.deepEqual(rest, [2, 3, 4]);
  q.push(5);
  assert.equal(q.size, 0, 'pushes after end are ignored');
});

test('a waiting consumer is woken by push and by end; abort drops buffered items; one consumer only', async () => {
  const q = new MessageQueue<string>(4);
  const it = q.consume()[Symbol.asyncIterator]();
  const next = it.next();
  q.push('a');
  assert.deepEqual(await next, { done: false, value: 'a' });
  q.push('b');
  q.abort();
  assert.deepEqual(await it.next(), { done: true, value: undefined });
  await q.waitForSpace(); // resolves once ended
  const again = q.consume()[Symbol.asyncIterator]();
  await assert.rejects(again.next(), /only once/);
});
