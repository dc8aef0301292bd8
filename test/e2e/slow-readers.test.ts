/**
 * 200 clients that never read (issue #10 part 2, "Done when"): raw TCP sockets each send a long streaming request
 * to a real gateway over two spawned simulated ranks and then never read a byte. Every stream must stop at the
 * per-stream buffer bound, every engine request must be ABORTed once its client has stayed stalled past the stall
 * timeout (counted by the engine client and by the ranks themselves), and the gateway's memory must grow by a bounded
 * amount, not with the responses' size.
 *
 * Budget: every SSE record carries the served model name, which is made 128 KiB long here, so the ~4 MB a Linux
 * loopback socket absorbs before back-pressure reaches the gateway fill after ~35 records per client instead of
 * ~20 000 (the test then moves ~7 000 records, ~0.9 GB, in all). Memory numbers are printed for the closing note; the bound
 * asserted is generous (the machine is shared), nothing here asserts a duration.
 *
 * In-process only (not in `npm run test:e2e:workers`): the memory bound is the gateway's live heap after a full GC,
 * measured in this process (the gateway's); a front's heap is not measurable that way, and the file is the most
 * expensive e2e file (≈ 0.9 GB of SSE moved), so it runs once.
 */
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { RunningGateway } from '../../src/gateway/index.js';
import { progressGuard } from '../helpers/async.js';
import { startSimGateway } from '../helpers/gateway.js';
import { captureLogs, type LogRecord } from '../helpers/logs.js';

const CLIENTS = 200;
const MODEL = `slow-reader-model-${'x'.repeat(128 * 1024)}`;
/** One SSE record: the model name plus about 300 bytes of chunk. */
const RECORD_BYTES = MODEL.length + 1024;
const BUFFER_BYTES = 256 * 1024;
/**
 * Long enough for most streams to reach the bound before the first one is given up, so the memory measured in between
 * holds nearly every buffer at once (on a loaded machine a few may already be gone: the printed line says how many).
 */
const STALL_MS = 5_000;
/**
 * Generous bounds on the growth of the gateway process's live memory: the buffers alone may hold 200 × (256 KiB + one
 * 128 KiB record) = 75 MiB. Without the stall timeout each engine stream would queue its whole response (4000 tokens)
 * instead, and nothing would be aborted.
 */
const MAX_HEAP_GROWTH = 200 * 1024 * 1024;
const MAX_RSS_GROWTH = 500 * 1024 * 1024;

const mib = (bytes: number): string => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;

/**
 * A full garbage collection on demand (the test command does not pass --expose-gc): the heap after it is what is
 * live, so the samples below measure retained memory rather than garbage not collected yet.
 */
setFlagsFromString('--expose-gc');
const collect = runInNewContext('gc') as () => void;

/** The live heap and the RSS now, after a full collection. */
function liveMemory(): { heap: number; rss: number } {
  collect();
  const m = process.memoryUsage();
  return { heap: m.heapUsed, rss: m.rss };
}

function abortsSent(gateway: RunningGateway): number {
  return gateway.groups.reduce((n, g) => n + g.client.stats.abortsSent, 0);
}

describe('200 clients that never read', { timeout: 480_000 }, () => {
  let gateway: RunningGateway;
  let records: LogRecord[];
  const sockets: Socket[] = [];

  before(async () => {
    // Debug: the gateway logs the first pause of each stream at the buffer bound.
    const logs = captureLogs('debug');
    records = logs.records;
    gateway = await startSimGateway({
      sim: 2,
      // Real step times (about 55 tokens/s per request with 100 running on a rank): the engine keeps generating at a
      // realistic rate while the clients are stalled. Info logs: each rank reports its ABORT count when it stops.
      simArgs: ['--time-scale', '1', '--max-running', '128', '--log-level', 'info'],
      modelId: MODEL,
      logger: logs.logger,
      edge: { streamBufferBytes: BUFFER_BYTES, clientStallTimeoutMs: STALL_MS },
    });
  });
  after(async () => {
    for (const s of sockets) s.destroy();
    await gateway?.close();
  });

  test('every stream is cut at the buffer bound and ABORTed after the stall timeout; memory stays bounded', async () => {
    // Warm up the path once (JIT, tokenizer caches) so the baseline is not taken on a cold process.
    const warm = await fetch(`${gateway.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'warm up', max_tokens: 8, stream: true }),
    });
    await warm.text();
    const before = liveMemory();

    const abortsBefore = abortsSent(gateway);
    const payload = JSON.stringify({
      prompt: 'Tell me a very long story.',
      max_tokens: 4000,
      ignore_eos: true,
      stream: true,
    });
    const request =
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`;
    const port = Number(new URL(gateway.url).port);
    for (let i = 0; i < CLIENTS; i++) {
      const socket = connect(port, '127.0.0.1');
      socket.on('error', () => {});
      socket.pause(); // never read
      socket.write(request);
      sockets.push(socket);
    }
    const started = performance.now();
    const paused = () => records.filter((r) => r.msg.startsWith('client is not keeping up')).length;
    // Progress guards, not deadlines: the file moves ~0.9 GB of SSE, which takes minutes on a loaded 2-core machine.
    await progressGuard(paused, CLIENTS, 60_000, 'streams paused at the bound');
    const pausedAfterMs = performance.now() - started;
    // Every stream has reached the bound (the first ones may be aborted already): the most these clients can make the
    // gateway hold at once.
    const stalledMemory = liveMemory();
    const abortedEarly = abortsSent(gateway) - abortsBefore;
    await progressGuard(() => abortsSent(gateway) - abortsBefore, CLIENTS, 60_000, 'ABORTs sent');
    const elapsedMs = performance.now() - started;
    const afterAborts = liveMemory();

    // The gateway gave every stalled client up: in-flight sets are empty, every abort was logged once.
    for (const g of gateway.groups) {
      assert.deepEqual(
        g.client.rankStates().map((r) => r.inFlight),
        g.client.rankStates().map(() => 0),
        'in-flight sets empty',
      );
    }
    const stalled = records.filter((r) => r.msg.startsWith('client stopped reading'));
    assert.equal(stalled.length, CLIENTS, 'one info line per stalled client');
    const buffered = stalled.map((r) => r.bufferedBytes as number);
    assert.ok(
      Math.max(...buffered) < BUFFER_BYTES + RECORD_BYTES,
      `at most the bound plus one record buffered (max ${Math.max(...buffered)})`,
    );

    const heapGrowth = stalledMemory.heap - before.heap;
    const rssGrowth = stalledMemory.rss - before.rss;
    process.stdout.write(
      `# slow readers: ${CLIENTS} clients, buffer bound ${mib(BUFFER_BYTES)}, stall ${STALL_MS} ms; the last stream ` +
        `paused at the bound after ${(pausedAfterMs / 1000).toFixed(1)} s (${abortedEarly} already aborted then), all ` +
        `ABORTed after ${(elapsedMs / 1000).toFixed(1)} s; live heap ${mib(before.heap)} → ${mib(stalledMemory.heap)} ` +
        `then (+${mib(heapGrowth)}) → ${mib(afterAborts.heap)} after the ABORTs; rss ${mib(before.rss)} → ` +
        `${mib(stalledMemory.rss)} (+${mib(rssGrowth)}) → ${mib(afterAborts.rss)}; buffered per stalled stream: max ` +
        `${mib(Math.max(...buffered))}\n`,
    );
    assert.ok(heapGrowth < MAX_HEAP_GROWTH, `heap grew by ${mib(heapGrowth)}`);
    assert.ok(rssGrowth < MAX_RSS_GROWTH, `rss grew by ${mib(rssGrowth)}`);

    // The ranks themselves received the ABORTs: each reports its count when it stops.
    for (const s of sockets) s.destroy();
    await gateway.close();
    const stops = records.filter((r) => r.msg === 'sim rank stopped');
    const rankLines = records.filter((r) => r.msg.startsWith('sim rank') && r.msg !== 'sim rank stopped');
    assert.equal(stops.length, 2, `every rank reported its stats; other rank lines: ${JSON.stringify(rankLines)}`);
    const aborted = stops.reduce((n, r) => n + (r.aborted as number) + (r.abortedOnArrival as number), 0);
    process.stdout.write(`# slow readers: the ranks dropped ${aborted} requests on ABORT\n`);
    assert.equal(aborted, CLIENTS, 'every stalled request was aborted on its rank');
  });
});
