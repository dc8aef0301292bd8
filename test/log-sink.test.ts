/**
 * `LogSink` (src/log-sink.ts): lines arrive in order; a full queue drops and counts; a reader that died (EPIPE)
 * breaks the sink without throwing and never keeps the process from exiting (pino's default destination spins
 * forever in its exit hook there).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { pino } from 'pino';
import { LogSink } from '../src/log-sink.js';
import { freshDir, hangGuard } from './helpers/async.js';
import { nodeEntry } from './helpers/entry.js';

const CHILD = new URL('./fixtures/log-sink-child.ts', import.meta.url);

test('pino lines reach the file in order; drain() resolves true once written', async () => {
  const d = await freshDir();
  const path = join(d.dir, 'log');
  const fd = openSync(path, 'w');
  try {
    const sink = new LogSink({ fd });
    const logger = pino({ level: 'info', base: null, timestamp: false }, sink);
    for (let i = 0; i < 50; i++) logger.info({ i }, 'line');
    assert.equal(await hangGuard(sink.drain(10_000), 15_000, 'drain'), true);
    const lines = readFileSync(path, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { i: number; msg: string });
    assert.deepEqual(
      lines.map((l) => l.i),
      Array.from({ length: 50 }, (_, i) => i),
    );
    assert.equal(sink.broken, null);
    assert.equal(sink.droppedChunks, 0);
  } finally {
    closeSync(fd);
    await d.cleanup();
  }
});

test('lines beyond maxQueuedChars while a write is in flight are dropped and counted', async () => {
  const d = await freshDir();
  const path = join(d.dir, 'log');
  const fd = openSync(path, 'w');
  try {
    const sink = new LogSink({ fd, maxQueuedChars: 10 });
    assert.equal(sink.write('first line, written at once\n'), true); // taken by the first write, queue empty again
    assert.equal(sink.write('short\n'), true); // queued behind the in-flight write (6 of 10 chars)
    assert.equal(sink.write('too long\n'), false); // would exceed 10 queued chars
    assert.equal(sink.droppedChunks, 1);
    assert.equal(await hangGuard(sink.drain(10_000), 15_000, 'drain'), true);
    assert.equal(readFileSync(path, 'utf8'), 'first line, written at once\nshort\n');
  } finally {
    closeSync(fd);
    await d.cleanup();
  }
});

test('bad options are refused with a RangeError naming the option', () => {
  assert.throws(() => new LogSink({ fd: -1 }), /fd/);
  assert.throws(() => new LogSink({ maxQueuedChars: 0 }), /maxQueuedChars/);
});

test('a dead reader (EPIPE) breaks the sink silently and the process still exits', async () => {
  const child = spawn(process.execPath, nodeEntry(CHILD), { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
  const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
  try {
    const lines = createInterface({ input: child.stdout, crlfDelay: Infinity });
    await hangGuard(
      new Promise<void>((resolve) => lines.on('line', (l) => l === 'ready' && resolve())),
      30_000,
      'child ready',
    );
    lines.close();
    child.stdout.destroy(); // our read end closes: the child's next write to stdout fails with EPIPE
    child.stdin.write('go\n');
    const [code, signal] = await hangGuard(exited, 30_000, 'child exit after logging into a dead pipe');
    assert.deepEqual({ code, signal }, { code: 0, signal: null });
    const m = /broken=(\S+) dropped=(\d+)/.exec(stderr);
    assert.ok(m !== null, `child report missing: ${stderr}`);
    assert.equal(m[1], 'EPIPE');
    assert.ok(Number(m[2]) >= 1);
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
});
