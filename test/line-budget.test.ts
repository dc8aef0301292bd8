/** LineBudget (src/line-budget.ts): at most N lines per window; the next line written counts the dropped ones. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LineBudget } from '../src/line-budget.js';

test('at most perWindow lines per window; the first line of a later window reports the drops', () => {
  let now = 0;
  const budget = new LineBudget(2, 1000, () => now);
  assert.deepEqual(budget.take(), { write: true, suppressed: 0 });
  assert.deepEqual(budget.take(), { write: true, suppressed: 0 });
  assert.deepEqual(budget.take(), { write: false, suppressed: 0 });
  assert.deepEqual(budget.take(), { write: false, suppressed: 0 });
  now = 999;
  assert.equal(budget.take().write, false, 'still the same window');
  now = 1000;
  assert.deepEqual(budget.take(), { write: true, suppressed: 3 });
  assert.deepEqual(budget.take(), { write: true, suppressed: 0 });
  assert.throws(() => new LineBudget(0, 1000, () => 0), RangeError);
  assert.throws(() => new LineBudget(1, 0, () => 0), RangeError);
});
