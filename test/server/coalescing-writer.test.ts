/** coalescing-writer.ts: one sink write per writer per flush, in order, nothing lost or duplicated. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CoalescingWriter, TickFlusher } from '../../src/server/coalescing-writer.js';

/** A flusher whose deferred callbacks the test runs by hand. */
function manualFlusher(): { flusher: TickFlusher; deferred: Array<() => void> } {
  const deferred: Array<() => void> = [];
  return { flusher: new TickFlusher((f) => deferred.push(f)), deferred };
}

test('writes in one turn become one sink write; the next turn starts a new one', () => {
  const { flusher, deferred } = manualFlusher();
  const chunks: string[] = [];
  const w = new CoalescingWriter((c) => (chunks.push(c), true), flusher);
  w.write('a');
  w.write('');
  w.write('bc');
  assert.equal(w.pendingLength, 3);
  assert.equal(deferred.length, 1, 'one deferred flush for the turn');
  assert.deepEqual(chunks, []);
  deferred.shift()!();
  assert.deepEqual(chunks, ['abc']);
  w.write('d');
  assert.equal(deferred.length, 1);
  deferred.shift()!();
  assert.deepEqual(chunks, ['abc', 'd']);
});

test('many writers share one deferred callback; each gets one write, in the order they became dirty', () => {
  const { flusher, deferred } = manualFlusher();
  const log: string[] = [];
  const ws = [0, 1, 2].map((i) => new CoalescingWriter((c) => (log.push(`${i}:${c}`), true), flusher));
  ws[2]!.write('x');
  ws[0]!.write('y');
  ws[2]!.write('z');
  ws[1]!.write('w');
  assert.equal(deferred.length, 1);
  deferred.shift()!();
  assert.deepEqual(log, ['2:xz', '0:y', '1:w']);
});

test('take() hands the pending text to the caller and the later flush writes nothing of it; onFlushed hears the sink', () => {
  const { flusher, deferred } = manualFlusher();
  const chunks: string[] = [];
  const answers: boolean[] = [];
  const w = new CoalescingWriter(
    (c) => (chunks.push(c), false),
    flusher,
    (accepted) => answers.push(accepted),
  );
  w.write('a');
  assert.equal(w.take(), 'a');
  w.write('b');
  deferred.shift()!();
  assert.deepEqual(chunks, ['b'], 'only what was written after take()');
  assert.deepEqual(answers, [false]);
  w.flush();
  assert.deepEqual(chunks, ['b'], 'an empty flush writes nothing');
});

test('one flush callback writes for at most its budget and defers the rest, keeping their order', () => {
  const deferred: Array<() => void> = [];
  let clock = 0;
  const flusher = new TickFlusher(
    (f) => deferred.push(f),
    4,
    () => clock,
  );
  const log: string[] = [];
  const ws = [0, 1, 2, 3].map((i) => new CoalescingWriter((c) => ((clock += 3), log.push(`${i}:${c}`), true), flusher));
  ws.forEach((w, i) => w.write(String(i)));
  assert.equal(deferred.length, 1);
  deferred.shift()!();
  assert.deepEqual(log, ['0:0', '1:1'], '3 ms + 3 ms reached the 4 ms budget');
  ws[0]!.write('again');
  assert.equal(deferred.length, 1, 'one callback for the rest and the new write');
  deferred.shift()!();
  assert.deepEqual(log, ['0:0', '1:1', '2:2', '3:3'], 'the deferred writers first (2 then the budget), in order');
  deferred.shift()!();
  assert.deepEqual(log, ['0:0', '1:1', '2:2', '3:3', '0:again']);
});
