/**
 * The suite's reporter (test/reporters/files.mjs) shows every failure: a failed test, and a failed suite whose tests
 * were only cancelled (a `before` hook that threw), a top-level test the runner cancelled (its file ended with it
 * pending); a suite that failed because a test in it failed is shown once, through that test.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
// @ts-expect-error: a plain JavaScript reporter with no type declarations
import filesReporter, { longestFirst } from './files.mjs';

// The runner's own durations file (scripts/test.mjs sets this for the phase): the reports made here must not write to it.
delete process.env.GATEWAY_TEST_DURATIONS;

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

test('a top-level test cancelled because its file ended with it pending is a failure, shown with its error', async () => {
  const pending = 'Promise resolution is still pending but the event loop has already resolved';
  const out = await report([
    ev('test:pass', 'a', 0, {}),
    ev('test:fail', 'b', 0, { error: { failureType: 'cancelledByParent', message: pending } }),
  ]);
  assert.match(out, /✗ test\/e2e\/x\.test\.ts: b\n\s+Promise resolution is still pending/);
  assert.match(out, /1 passed, 1 failed, 0 skipped, in 1 files/);
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

test('file times are merged into the durations file, and the next run starts the longest files first', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'mgw-durations-'));
  const path = join(dir, 'durations.json');
  const order = longestFirst as (files: string[], path: string) => string[];
  try {
    const files = ['a.test.ts', 'b.test.ts', 'c.test.ts', 'new.test.ts'];
    assert.deepEqual(order(files, path), files, 'no file yet: as given');
    await writeFile(path, JSON.stringify({ 'gone.test.ts': 5, 'a.test.ts': 1 }));
    process.env.GATEWAY_TEST_DURATIONS = path;
    try {
      await report([
        { type: 'test:pass', data: { name: 't', nesting: 0, file: 'b.test.ts', details: { duration_ms: 300 } } },
        { type: 'test:pass', data: { name: 't', nesting: 0, file: 'c.test.ts', details: { duration_ms: 20.4 } } },
        { type: 'test:pass', data: { name: 'u', nesting: 0, file: 'c.test.ts', details: { duration_ms: 20 } } },
      ]);
    } finally {
      delete process.env.GATEWAY_TEST_DURATIONS;
    }
    assert.deepEqual(JSON.parse(await readFile(path, 'utf8')), {
      'gone.test.ts': 5,
      'a.test.ts': 1,
      'b.test.ts': 300,
      'c.test.ts': 40,
    });
    assert.deepEqual(order(files, path), ['new.test.ts', 'b.test.ts', 'c.test.ts', 'a.test.ts']);
    await writeFile(path, 'not json');
    assert.deepEqual(order(files, path), files, 'unreadable: as given');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
