/**
 * The per-token fast paths of a streamed choice (issue 9): a plain content delta becomes one pre-built SSE record
 * (`StreamShaper.textRecord`, `SseWriter.sendRecord`) and is folded into its choice without a `ChoiceDelta`
 * (`ChoiceOutput.appendContent`); each must give exactly what the general path gives.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { test } from 'node:test';
import { ChoiceOutput } from '../../src/server/choice-output.js';
import { makeUsage } from '../../src/server/generation.js';
import { chatShape } from '../../src/server/routes/chat.js';
import { completionShape } from '../../src/server/routes/completions.js';
import type { SseEvent } from '../../src/server/response-shape.js';
import { SseWriter } from '../../src/server/sse.js';

const base = { id: 'chatcmpl-1', created: 7, model: 'm', system_fingerprint: 'fp' };
const texts = ['hello', ' "quoted" \\ ', '\n', '🐉', '\ud800'];

/** The bytes `SseWriter.send` writes for the events `delta` returns. */
const sent = (events: readonly SseEvent[]) =>
  events.map((e) => e.record ?? `data: ${JSON.stringify(e.data)}\n\n`).join('');

test('textRecord is byte for byte the record delta sends for a content-only delta (chat, completions, n > 1, usage)', () => {
  for (const shape of [chatShape, completionShape]) {
    for (const opts of [
      { includeUsage: false, n: 1 },
      { includeUsage: true, n: 3 },
    ]) {
      const writer = shape.stream(base, opts);
      assert.ok(writer.textRecord, `${shape.endpoint} offers the fast path`);
      for (let index = 0; index < opts.n; index++) {
        for (const text of texts) {
          const delta = { reasoning: '', content: text, toolCalls: [], logprobs: [] };
          assert.equal(
            writer.textRecord(index, text),
            sent(writer.delta(index, delta, null)),
            `${shape.endpoint} ${index} ${JSON.stringify(text)}`,
          );
        }
      }
      const parsed = JSON.parse(writer.textRecord(0, 'x').slice('data: '.length));
      assert.equal(parsed.id, 'chatcmpl-1');
      assert.equal(parsed.usage, opts.includeUsage ? null : undefined);
    }
  }
});

test('appendContent folds a plain choice’s text as push does, and refuses a choice with parsers or after its finish', () => {
  const viaPush = new ChoiceOutput({ reasoning: null, tools: null });
  const viaAppend = new ChoiceOutput({ reasoning: null, tools: null });
  for (const text of texts) {
    viaPush.push({ type: 'delta', text, logprobs: [] });
    assert.equal(viaAppend.appendContent(text), true);
  }
  const finish = {
    type: 'finish' as const,
    text: '!',
    finishReason: 'length' as const,
    stopReason: null,
    usage: makeUsage(3, 6),
    logprobs: [],
    cachedTokens: 0,
  };
  viaPush.push(finish);
  viaAppend.push(finish);
  assert.deepEqual(viaAppend.result, viaPush.result);
  assert.equal(viaAppend.result?.content, texts.join('') + '!');
  assert.equal(viaAppend.appendContent('late'), false, 'after the finish');
  const withParser = new ChoiceOutput({
    reasoning: { push: (t) => ({ reasoning: t, content: '' }), finish: () => ({ reasoning: '', content: '' }) },
    tools: null,
  });
  assert.equal(withParser.appendContent('x'), false);
});

test('keepText false (a stream): the deltas are the same, the result keeps no text but the finish and counts', () => {
  const kept = new ChoiceOutput({ reasoning: null, tools: null });
  const dropped = new ChoiceOutput({ reasoning: null, tools: null, keepText: false });
  for (const text of texts) {
    assert.deepEqual(
      dropped.push({ type: 'delta', text, logprobs: [] }),
      kept.push({ type: 'delta', text, logprobs: [] }),
    );
    assert.equal(dropped.appendContent(text), true);
    kept.appendContent(text);
  }
  const finish = {
    type: 'finish' as const,
    text: '!',
    finishReason: 'stop' as const,
    stopReason: null,
    usage: makeUsage(3, 12),
    logprobs: [],
    cachedTokens: 0,
  };
  assert.deepEqual(dropped.push(finish), kept.push(finish));
  assert.equal(kept.result?.content, texts.map((t) => t + t).join('') + '!');
  assert.equal(dropped.result?.content, '');
  assert.equal(dropped.result?.reasoning, null);
  assert.deepEqual({ ...dropped.result, content: kept.result?.content }, kept.result);
});

test('sendRecord queues the record as send would, coalesced into one write per turn', async () => {
  const writes: string[] = [];
  const res = {
    destroyed: false,
    writableEnded: false,
    writableLength: 0,
    socket: null,
    write(chunk: string) {
      writes.push(chunk);
      return true;
    },
  };
  const sse = new SseWriter(res as never);
  sse.sendRecord('data: {"a":1}\n\n');
  sse.send({ b: 2 });
  assert.deepEqual(writes, [], 'nothing written before the turn ends');
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(writes, ['data: {"a":1}\n\ndata: {"b":2}\n\n']);
});

test('queuing a record does not read the response’s buffered length (its socket state) per record; the bound still holds', async () => {
  let reads = 0;
  let buffered = 0;
  const writes: string[] = [];
  const res = {
    destroyed: false,
    writableEnded: false,
    socket: null,
    get writableLength() {
      reads++;
      return buffered;
    },
    writeHead() {},
    flushHeaders() {},
    write(chunk: string) {
      writes.push(chunk);
      buffered += chunk.length;
      return true;
    },
  };
  const sse = new SseWriter(res as never, { maxBufferedBytes: 100, stallTimeoutMs: 1000 });
  sse.start();
  const before = reads;
  for (let i = 0; i < 5; i++) sse.sendRecord('data: 1\n\n');
  assert.equal(reads, before, 'no read per record');
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(writes, ['data: 1\n\n'.repeat(5)]);
  // 45 bytes buffered as of that flush (9 per record): the 7th pending record reaches the bound of 100 and the 7 are
  // written at once, before the turn ends.
  for (let i = 0; i < 6; i++) sse.sendRecord('data: 2\n\n');
  assert.equal(writes.length, 1);
  sse.sendRecord('data: 2\n\n');
  assert.deepEqual(writes.slice(1), ['data: 2\n\n'.repeat(7)], 'written at the bound');
});

type Chunk = string | Uint8Array;

/**
 * A node:http server whose handler gets the SseWriter; counts the socket-level writes (`_write` / `_writev` calls)
 * and keeps each one's bytes (`chunks`, as latin1 text of the raw bytes incl. the head and the chunked framing).
 * `nextWrite()` resolves right after the next socket write was made (a wait on the write itself, not on a timer).
 */
async function sseServer(
  handler: (sse: SseWriter, socketWrites: () => number, nextWrite: () => Promise<void>) => void,
): Promise<{ writes: number; chunks: string[]; head: string; body: string }> {
  const chunks: string[] = [];
  let waiters: Array<() => void> = [];
  const wrote = <T>(bytes: Chunk[], result: T): T => {
    chunks.push(bytes.map((b) => Buffer.from(b).toString('latin1')).join(''));
    const ready = waiters;
    waiters = [];
    for (const w of ready) w();
    return result;
  };
  const nextWrite = () => new Promise<void>((r) => waiters.push(r));
  const server = createServer((req, res) => {
    const socket = res.socket as unknown as {
      _write: (c: Chunk, ...a: unknown[]) => unknown;
      _writev: (cs: { chunk: Chunk }[], ...a: unknown[]) => unknown;
    };
    const write = socket._write.bind(socket);
    const writev = socket._writev.bind(socket);
    socket._write = (c, ...a) => wrote([c], write(c, ...a));
    socket._writev = (cs, ...a) =>
      wrote(
        cs.map((c) => c.chunk),
        writev(cs, ...a),
      );
    handler(new SseWriter(res), () => chunks.length, nextWrite);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  try {
    const { port } = server.address() as AddressInfo;
    const raw = await new Promise<string>((resolve, reject) => {
      const s = connect(port, '127.0.0.1', () => s.write('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
      let got = '';
      s.setEncoding('utf8');
      s.on('data', (d) => (got += d));
      s.on('end', () => resolve(got));
      s.on('error', reject);
    });
    const at = raw.indexOf('\r\n\r\n');
    return { writes: chunks.length, chunks, head: raw.slice(0, at), body: raw.slice(at + 4) };
  } finally {
    server.close();
  }
}

test('the headers leave with the records queued in the same turn: one socket write, not two', async () => {
  const r = await sseServer((sse) => {
    sse.start({ 'x-request-id': 'r1' });
    sse.sendRecord('data: {"role":"assistant"}\n\n');
    setTimeout(() => sse.done(), 20);
  });
  assert.match(r.head, /^HTTP\/1\.1 200 OK\r\n/);
  assert.match(r.head, /x-request-id: r1/);
  assert.match(r.body, /data: \{"role":"assistant"\}/);
  assert.match(r.body, /data: \[DONE\]/);
  assert.equal(r.writes, 2, 'headers + opening record in one write, then the end');
});

test('with nothing queued the headers still leave at the end of the turn (before the first record)', async () => {
  const seen: number[] = [];
  const r = await sseServer((sse, socketWrites) => {
    sse.start();
    seen.push(socketWrites());
    setImmediate(() =>
      setImmediate(() => {
        seen.push(socketWrites());
        sse.sendRecord('data: 1\n\n');
        setTimeout(() => sse.done(), 10);
      }),
    );
  });
  assert.deepEqual(seen, [0, 1], 'nothing during the turn, the headers alone by its end');
  assert.match(r.head, /content-type: text\/event-stream/);
  assert.match(r.body, /data: 1\n\n/);
});

test('a held start sends nothing until release; then the headers, the opening and the first record leave in one write', async () => {
  const seen: number[] = [];
  const r = await sseServer((sse, socketWrites) => {
    sse.start({ 'x-request-id': 'r2' }, { holdMs: 60_000 });
    sse.sendRecord('data: {"role":"assistant"}\n\n');
    setTimeout(() => {
      seen.push(socketWrites());
      sse.release();
      sse.sendRecord('data: {"content":"a"}\n\n');
      setTimeout(() => {
        seen.push(socketWrites());
        sse.done();
      }, 10);
    }, 20);
  });
  assert.deepEqual(seen, [0, 1], 'nothing while held; headers + opening + first record in one write after the release');
  assert.equal(r.writes, 2);
  assert.match(r.head, /x-request-id: r2/);
  assert.match(r.body, /data: \{"role":"assistant"\}\n\n[^]*data: \{"content":"a"\}\n\n[^]*data: \[DONE\]\n\n/);
});

test(
  'a stream that ends while held leaves in one write; a hold ends by itself after holdMs',
  { timeout: 10_000 },
  async () => {
    const whole = await sseServer((sse) => {
      sse.start({}, { holdMs: 60_000 });
      sse.sendRecord('data: {"role":"assistant"}\n\n');
      setTimeout(() => {
        sse.sendRecord('data: {"content":"a"}\n\n');
        sse.done();
      }, 20);
    });
    assert.equal(whole.writes, 1, 'headers, records and [DONE] in the write of the end');
    assert.match(whole.body, /data: \{"role":"assistant"\}\n\ndata: \{"content":"a"\}\n\ndata: \[DONE\]\n\n/);

    // The first check runs at the end of this loop turn (setImmediate: after anything the writer would send at the end
    // of the turn, and always before the hold's timer, which can fire in the next turn at the earliest, however long
    // the machine stalls); the end waits for the hold's write itself, so only a hold that never ends by itself fails
    // (by the test timeout). A 5 ms timer here saw the hold's write first once, on a loaded machine.
    const seen: number[] = [];
    const timed = await sseServer((sse, socketWrites, nextWrite) => {
      sse.start({}, { holdMs: 30 });
      sse.sendRecord('data: {"role":"assistant"}\n\n');
      setImmediate(() => seen.push(socketWrites()));
      void nextWrite().then(() => {
        seen.push(socketWrites());
        sse.done();
      });
    });
    assert.deepEqual(seen, [0, 1], 'held at first, written once the hold ran out');
    assert.equal(timed.writes, 2, "the hold's write (headers + opening), then the end");
    assert.match(timed.body, /data: \{"role":"assistant"\}\n\n[^]*data: \[DONE\]\n\n/);
  },
);

test(
  'probe() ends a long hold and writes at once: the headers and the `:` comment in one write; later records are not held',
  { timeout: 10_000 },
  async () => {
    const seen: number[] = [];
    const r = await sseServer((sse, socketWrites) => {
      sse.start({ 'x-request-id': 'r3' }, { holdMs: 60_000 });
      sse.probe();
      seen.push(socketWrites());
      sse.sendRecord('data: 1\n\n');
      // Queued after the flusher's setImmediate (the record's): runs once that turn's flush is done.
      setImmediate(() => {
        seen.push(socketWrites());
        sse.done();
      });
    });
    assert.deepEqual(
      seen,
      [1, 2],
      'the probe written during its call; the next record at the end of its turn, not after the hold',
    );
    const [probe, record] = r.chunks as [string, string];
    assert.match(
      probe,
      /^HTTP\/1\.1 200 OK\r\n[^]*x-request-id: r3\r\n[^]*\r\n\r\n[0-9a-f]+\r\n:\n\n\r\n$/,
      'the headers and the comment',
    );
    assert.match(record, /^[0-9a-f]+\r\ndata: 1\n\n\r\n$/);
    assert.equal(r.writes, 3, 'then the end');
  },
);
