/**
 * The pure batch router (src/engine-client/batch-plan.ts; dp-routing.md section 8 steps 4-6, 10.4, 14.6): which
 * live request gets which row, what is released from which rank, which ranks a batch proves alive, which rows
 * belong to nobody. Nothing is mutated: the lookup is a plain map.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { planBatch, type LiveRequest } from '../../src/engine-client/batch-plan.js';
import { batch, row } from './fakes.js';

function lookupOf(entries: LiveRequest[]): (id: string) => LiveRequest | undefined {
  const m = new Map(entries.map((e) => [e.requestId, e]));
  return (id) => m.get(id);
}

test('rows go to their live requests in batch order; terminal rows retire; unknown rows are listed; finished ids released', () => {
  const a = { requestId: 'a', engineIndex: 0 };
  const b = { requestId: 'b', engineIndex: 0 };
  const plan = planBatch(batch(0, [row('a'), row('ghost'), row('b', 'stop'), row('a', 'length')]), lookupOf([a, b]));
  assert.deepEqual(
    plan.entries.map((e, i) => [e.requestId, plan.rows[i]!.finishReason !== null]),
    [
      ['a', false],
      ['b', true],
      ['a', true],
    ],
  );
  assert.deepEqual(
    plan.rows.map((r) => r.requestId),
    ['a', 'b', 'a'],
    'rows[i] is the row of entries[i]',
  );
  assert.deepEqual(plan.unknownRows, ['ghost']);
  assert.deepEqual([...plan.finished].sort(), ['a', 'b']);
  assert.equal(plan.mismatches, 0);
  assert.deepEqual(plan.foreign, []);
  assert.deepEqual(plan.closedWithoutTerminal, []);
});

test("a row after its request's terminal row in the same batch is treated as unknown", () => {
  const a = { requestId: 'a', engineIndex: 1 };
  const plan = planBatch(batch(1, [row('a', 'stop'), row('a')]), lookupOf([a]));
  assert.equal(plan.entries.length, 1);
  assert.equal(plan.rows.length, 1);
  assert.deepEqual(plan.unknownRows, ['a']);
});

test('an out-of-band finished id without a terminal row closes its stream; already retired ids are not closed twice', () => {
  const a = { requestId: 'a', engineIndex: 0 };
  const b = { requestId: 'b', engineIndex: 0 };
  const plan = planBatch(batch(0, [row('a', 'stop')], undefined, ['a', 'b', 'nobody']), lookupOf([a, b]));
  assert.deepEqual(
    plan.closedWithoutTerminal.map((e) => e.requestId),
    ['b'],
  );
  assert.deepEqual([...plan.finished].sort(), ['a', 'b', 'nobody']);
});

test("rank fidelity (14.6, issue 26): rows naming another rank's requests are foreign: not delivered, not retired, listed once for an ABORT at the sender", () => {
  const a = { requestId: 'a', engineIndex: 2 };
  const b = { requestId: 'b', engineIndex: 3 };
  const c = { requestId: 'c', engineIndex: 0 };
  const plan = planBatch(batch(0, [row('a'), row('b', 'stop'), row('a'), row('c')]), lookupOf([a, b, c]));
  assert.deepEqual(
    plan.entries.map((e) => e.requestId),
    ['c'],
    "only the batch rank's own request gets its row",
  );
  assert.deepEqual(plan.foreign, ['a', 'b'], 'each foreign id once');
  assert.equal(plan.mismatches, 3);
  assert.deepEqual(plan.closedWithoutTerminal, [], 'the terminal foreign row retires nothing');
  assert.deepEqual(plan.unknownRows, []);
});

test("rank fidelity (issue 26): a finished id naming another rank's live request closes nothing", () => {
  const a = { requestId: 'a', engineIndex: 1 };
  const plan = planBatch(batch(0, [], undefined, ['a']), lookupOf([a]));
  assert.deepEqual(plan.closedWithoutTerminal, []);
  assert.equal(plan.mismatches, 1);
  assert.deepEqual(plan.foreign, [], 'no row to ABORT');
});

test('an empty batch releases nothing (the client still runs the clamp on every batch)', () => {
  const plan = planBatch(batch(4, []), () => undefined);
  assert.deepEqual([...plan.finished], []);
  assert.deepEqual(plan.entries, []);
});
