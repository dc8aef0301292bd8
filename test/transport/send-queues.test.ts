/**
 * Per-rank send ordering (src/transport/send-queues.ts; issue #8 part 4): one FIFO per identity, drained
 * round-robin; a rank whose head is refused (peer at its high-water mark) backs off without holding the others; order
 * within a rank is kept. Driven with plain numbers as the clock.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PerRankSendQueues, SEND_BACKOFF_FIRST_MS, SEND_BACKOFF_MAX_MS } from '../../src/transport/send-queues.js';

/** Drain everything at `now` with every send succeeding; returns the jobs in send order. */
function drainAll(q: PerRankSendQueues<string>, now = 0): string[] {
  const out: string[] = [];
  for (let pick = q.next(now); pick !== null; pick = q.next(now)) {
    out.push(pick.job);
    q.sent(pick.key);
  }
  return out;
}

test('order within a rank is kept; ranks take turns', () => {
  const q = new PerRankSendQueues<string>();
  for (const [k, j] of [
    ['a', 'a1'],
    ['a', 'a2'],
    ['b', 'b1'],
    ['a', 'a3'],
    ['c', 'c1'],
    ['b', 'b2'],
  ])
    q.enqueue(k!, j!);
  assert.equal(q.size, 6);
  assert.deepEqual(drainAll(q), ['a1', 'b1', 'c1', 'a2', 'b2', 'a3']);
  assert.equal(q.size, 0);
  assert.equal(q.next(0), null);
});

test('a rank at its high-water mark backs off (doubling, capped) while the others are sent', () => {
  const q = new PerRankSendQueues<string>();
  q.enqueue('stuck', 'ADD x');
  q.enqueue('stuck', 'ABORT x');
  q.enqueue('ok', 'o1');
  q.enqueue('ok', 'o2');
  const first = q.next(0)!;
  assert.equal(first.job, 'ADD x');
  assert.equal(first.since, 0);
  q.refused('stuck', 0);
  assert.deepEqual(drainAll(q, 0), ['o1', 'o2'], 'the other rank is not held up');
  assert.equal(q.nextRetryAt(), SEND_BACKOFF_FIRST_MS);
  let now = 0;
  const waits: number[] = [];
  for (let i = 0; i < 8; i++) {
    now = q.nextRetryAt()!;
    const pick = q.next(now)!;
    assert.equal(pick.job, 'ADD x', 'the head stays the head: ADD before its ABORT');
    assert.equal(pick.since, 0, 'its send timeout counts from its first attempt');
    q.refused('stuck', now);
    waits.push(q.nextRetryAt()! - now);
  }
  assert.deepEqual(waits, [2, 4, 8, 16, 20, 20, 20, 20]);
  assert.ok(waits.every((w) => w <= SEND_BACKOFF_MAX_MS));
  q.sent('stuck');
  const next = q.next(now)!;
  assert.equal(next.job, 'ABORT x');
  assert.equal(next.since, now, 'the next head starts fresh');
});

test('drop removes only the head; drain removes one rank in order; drainAll everything', () => {
  const q = new PerRankSendQueues<string>();
  for (const j of ['a1', 'a2', 'a3']) q.enqueue('a', j);
  q.enqueue('b', 'b1');
  q.next(0);
  assert.equal(q.drop('a'), 'a1');
  assert.deepEqual(q.drain('a'), ['a2', 'a3']);
  assert.equal(q.sizeOf('a'), 0);
  assert.equal(q.size, 1);
  q.enqueue('c', 'c1');
  assert.deepEqual(q.drainAll(), ['b1', 'c1']);
  assert.equal(q.size, 0);
  assert.deepEqual(q.drain('nobody'), []);
});
