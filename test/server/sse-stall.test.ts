/**
 * When a streaming client counts as stalled (src/server/sse.ts, `SseWriter` back-pressure): the stall clock runs from
 * the first pause until the client catches up (an end-of-turn flush under the bound), not per wait. A client that
 * reads in trickles, so that every single wait ends by a `drain` well before the timeout while the owner always has
 * held outputs to refill the buffer with, is given up once it has been behind for the stall timeout; a client that
 * catches up between its pauses never is. A fake response (buffered bytes set by the test, `drain` emitted by it)
 * stands in for the socket, so the test controls exactly when the client "reads".
 */
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { test } from 'node:test';
import { type ClientStalledError, SseWriter } from '../../src/server/sse.js';

const BOUND = 100;
const STALL_MS = 200;
/** Each wait ends this long after its pause: far shorter than STALL_MS. */
const READ_EVERY_MS = 50;
const RECORD = `data: ${'x'.repeat(22)}\n\n`; // 30 bytes

/** A response whose buffered bytes only drop when the test says the client read them. */
class FakeResponse extends EventEmitter {
  destroyed = false;
  writableEnded = false;
  socket = null;
  writableLength = 0;
  writeHead(): void {}
  flushHeaders(): void {}
  write(chunk: string): boolean {
    this.writableLength += chunk.length;
    return this.writableLength < 16;
  }
  end(): void {
    this.writableEnded = true;
  }
  /** The client read everything buffered: `drain`. */
  read(): void {
    this.writableLength = 0;
    this.emit('drain');
  }
}

/**
 * Drive one stream: `backlog(cycle)` is how many records the owner has to give after its `cycle`-th resume
 * (Infinity: an engine request producing faster than the client reads). Resolves when the writer calls `stalled` or
 * after `cycles` pauses.
 */
function drive(
  backlog: (cycle: number) => number,
  cycles: number,
): Promise<{ stalled: ClientStalledError | null; pauses: number; resumes: number }> {
  const res = new FakeResponse();
  let paused = false;
  let pauses = 0;
  let resumes = 0;
  return new Promise((resolve) => {
    let over = false;
    const giveUp = (stalled: ClientStalledError | null) => {
      if (over) return;
      over = true;
      resolve({ stalled, pauses, resumes });
    };
    /** The owner hands out records until it is paused or has none left (GenerationRun.resume does the same). */
    const produce = (records: number) => {
      for (let i = 0; i < records && !paused && i < 10_000; i++) sse.sendRecord(RECORD);
    };
    const sse = new SseWriter(res as never, { maxBufferedBytes: BOUND, stallTimeoutMs: STALL_MS }, () => {}, {
      pause: () => {
        paused = true;
        pauses++;
        if (pauses > cycles) return giveUp(null);
        setTimeout(() => res.read(), READ_EVERY_MS);
      },
      resume: () => {
        if (over) return;
        paused = false;
        resumes++;
        produce(backlog(resumes));
        // A caught-up owner gets its next burst of outputs a little later (the engine's next steps).
        if (!paused) setTimeout(() => produce(Infinity), 5);
      },
      stalled: (err) => giveUp(err),
    });
    sse.start();
    produce(Infinity);
  });
}

test(
  'a client that reads in trickles and never catches up is stalled once it has been behind for the stall timeout',
  { timeout: 10_000 },
  async () => {
    const { stalled, pauses, resumes } = await drive(() => Infinity, 20);
    assert.ok(stalled !== null, `never given up after ${pauses} pauses`);
    assert.ok(resumes >= 2, `every wait ended by a drain before the timeout (${resumes} resumes)`);
    // Timers may fire a millisecond before performance.now() says the delay passed.
    assert.ok(stalled.stalledMs >= STALL_MS - 2, `behind for ${stalled.stalledMs} ms`);
    assert.ok(stalled.bufferedBytes >= BOUND);
    assert.match(stalled.message, /stayed behind for \d+ ms/);
  },
);

test(
  'a client that catches up between its pauses is never stalled, however long the stream',
  { timeout: 10_000 },
  async () => {
    // After each resume the owner has one record left: the end-of-turn flush leaves the buffer under the bound.
    const { stalled, pauses } = await drive(() => 1, 12); // 12 waits of 50 ms: three stall timeouts in all
    assert.equal(stalled, null);
    assert.equal(pauses, 13);
  },
);
