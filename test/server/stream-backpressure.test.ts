/**
 * Bounded buffering of streamed responses (src/server/sse.ts; issue #10 part 2) over raw HTTP/1.1 sockets with a
 * fake engine that produces as fast as it is read: a client that never reads has its engine request aborted and its
 * connection closed once it has kept the buffer full past the stall timeout; a client that reads slowly, with pauses
 * far shorter than the stall timeout, gets its whole stream. (The end-to-end memory bound with 200 such clients and real
 * simulated ranks is test/e2e/slow-readers.test.ts.)
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { FakeStream } from './fake-backend.js';
import { hangGuard } from '../helpers/async.js';
import { captureLogs, type LogRecord } from '../helpers/logs.js';
import { listenApp, type AppFixture } from './helpers.js';

const STALL_MS = 300;
/**
 * A 16 KiB served model name: every SSE record carries it, so the ~4 MB a Linux loopback socket absorbs before
 * back-pressure reaches the gateway fill after a few hundred records instead of ~20 000 (less work for the test).
 */
const LONG_MODEL_ID = `m-${'x'.repeat(16 * 1024)}`;

/**
 * Feed one-token outputs (one SSE record each) into `stream`, 200 per macrotask (an engine that never waits), until
 * it is cancelled or `outputs` were sent; the last one is terminal (`length`) only with `finish`. Without it the engine
 * is still generating when the client stalls, so there is something to abort.
 */
function produce(stream: FakeStream, outputs: number, finish: boolean): void {
  let sent = 0;
  const step = () => {
    if (stream.isCancelled) return;
    for (let i = 0; i < 200 && sent < outputs; i++, sent++) {
      stream.push([9707], finish && sent === outputs - 1 ? 'length' : null);
    }
    if (sent < outputs) setImmediate(step);
  };
  step();
}

function rawPost(body: unknown): string {
  const payload = JSON.stringify(body);
  return `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${payload.length}\r\n\r\n${payload}`;
}

describe('streams and clients that stop reading', () => {
  let fx: AppFixture & { port: number };
  let records: LogRecord[];

  before(async () => {
    const logs = captureLogs('info');
    records = logs.records;
    fx = await listenApp({
      logger: logs.logger,
      servedModelNames: [LONG_MODEL_ID],
      edge: { streamBufferBytes: 64 * 1024, clientStallTimeoutMs: STALL_MS },
    });
  });
  after(() => fx.app.close());

  test('a client that never reads: ABORT after the stall timeout, connection closed by the gateway', async () => {
    fx.backend.onSubmit = (s) => produce(s.stream, 5_000, false); // about 80 MB of SSE, far more than any socket buffer
    const submitted = fx.backend.nextSubmission();
    const socket = connect(fx.port, '127.0.0.1');
    socket.on('error', () => {});
    socket.pause(); // never read
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.write(rawPost({ prompt: 'x', stream: true }));
    try {
      const sub = await hangGuard(submitted, 10_000, 'the submit');
      await hangGuard(sub.stream.cancelled, 20_000, 'the ABORT of the stalled stream');
      assert.equal(sub.stream.isCancelled, true);
      // The gateway closed its side: reading what was buffered reaches the end of the connection.
      socket.resume();
      await hangGuard(closed, 10_000, 'the server closing the connection');
    } finally {
      socket.destroy();
    }
    const line = records.find((r) => r.msg.startsWith('client stopped reading'));
    assert.ok(line, 'one info line says why');
    assert.equal(line.level, 30);
    assert.ok((line.stalledMs as number) >= STALL_MS);
    assert.ok((line.bufferedBytes as number) >= 64 * 1024, `buffered ${String(line.bufferedBytes)}`);
  });

  test('a slow reader with pauses far shorter than the stall timeout gets the whole stream', async () => {
    // Its own app with a 10 s stall timeout against 100 ms pauses: a loaded machine cannot turn a pause into a stall.
    const slow = await listenApp({
      servedModelNames: [LONG_MODEL_ID],
      edge: { streamBufferBytes: 64 * 1024, clientStallTimeoutMs: 10_000 },
    });
    slow.backend.onSubmit = (s) => produce(s.stream, 400, true); // about 6.5 MB
    const submitted = slow.backend.nextSubmission();
    const socket = connect(slow.port, '127.0.0.1');
    let got = '';
    let sincePause = 0;
    socket.on('data', (c: Buffer) => {
      got += c.toString('utf8');
      sincePause += c.length;
      // After each MiB read, stop for 100 ms (the gateway's buffer fills meanwhile and waits for the drain).
      if (sincePause < 1024 * 1024) return;
      sincePause = 0;
      socket.pause();
      setTimeout(() => socket.resume(), 100).unref();
    });
    // The stream ends with [DONE]; a connection the gateway closes first fails the test at once.
    const done = new Promise<void>((resolve, reject) => {
      socket.on('close', () =>
        got.includes('data: [DONE]') ? resolve() : reject(new Error('the gateway closed a reading client')),
      );
      const check = () => (got.includes('data: [DONE]') ? resolve() : setTimeout(check, 20));
      check();
    });
    socket.write(rawPost({ prompt: 'x', stream: true }));
    let sub;
    try {
      sub = await hangGuard(submitted, 10_000, 'the submit');
      await hangGuard(done, 50_000, 'the end of the slow stream');
    } finally {
      socket.destroy();
      await slow.app.close();
    }
    assert.equal(sub.stream.isCancelled, false, 'never aborted');
    assert.match(got, /"finish_reason":"length"/);
  });
});
