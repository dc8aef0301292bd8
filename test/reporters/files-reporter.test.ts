/**
 * The suite's reporter (test/reporters/files.mjs) shows every failure: a failed test, and a failed suite whose tests
 * were only cancelled (a `before` hook that threw); a suite that failed because a test in it failed is shown once,
 * through that test.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
// @ts-expect-error: a plain JavaScript reporter with no type declarations
import filesReporter from './files.mjs';

type Event = { type: string; data: Record<string, unknown> };

async function report(events: Event[]): Promise<string> {
  async function* source(): AsyncGenerator<Event> {
    yield* events;
  }
  let out = '';
  for await (const chunk of (filesReporter as (s: AsyncIterable<Event>) => AsyncIterable<string>)(source()))
    out += chunk;
  return out;
}

const file = 'test/e2e/x.test.ts';
const ev = (type: string, name: string, nesting: number, details: Record<string, unknown>): Event => ({
  type,
  data: { name, nesting, file, details: { duration_ms: 10, ...details } },
});

test('a suite whose hook failed is reported, with its error, not hidden behind its cancelled tests', async () => {
  const out = await report([
    ev('test:fail', 'a', 1, { error: { failureType: 'cancelledByParent', message: 'cancelled' } }),
    ev('test:fail', 'b', 1, { error: { failureType: 'cancelledByParent', message: 'cancelled' } }),
    ev('test:fail', 'the suite', 0, {
      type: 'suite',
      error: { failureType: 'hookFailed', cause: new Error('the gateway did not start') },
    }),
  ]);
  assert.match(out, /✗ test\/e2e\/x\.test\.ts: the suite\n\s+Error: the gateway did not start/);
  assert.match(out, /0 passed, 1 failed, 0 skipped, in 1 files/);
});

test('a suite that failed through a failed test is shown once, through the test', async () => {
  const out = await report([
    ev('test:fail', 'a', 1, { error: { failureType: 'testCodeFailure', cause: new Error('boom') } }),
    ev('test:pass', 'b', 1, {}),
    ev('test:fail', 'the suite', 0, {
      type: 'suite',
      error: { failureType: 'subtestsFailed', message: '1 subtest failed' },
    }),
  ]);
  assert.equal(out.match(/✗/g)?.length, 1);
  assert.match(out, /✗ test\/e2e\/x\.test\.ts: a\n\s+Error: boom/);
  assert.match(out, /1 passed, 1 failed, 0 skipped/);
});
