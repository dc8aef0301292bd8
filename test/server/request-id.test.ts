/**
 * The client's X-Request-Id is echoed as the exact bytes it sent (gateway.md 13; src/server/request-id.ts), whatever
 * the answer: a non-streamed reply, an error from a route, the not-found handler or before routing, and a stream
 * whose headers leave with its first records, alone (a late first output), or unchunked (HTTP/1.0). Node keeps such
 * an id one char per byte; written with a string body it used to leave UTF-8-encoded a second time.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { OPENING_HOLD_MS } from '../../src/server/sse.js';
import { MODEL_ID, listenApp, parseSse, type AppFixture } from './helpers.js';

/** A UTF-8 id, and one that is not UTF-8 at all (obs-text bytes, which Node's parser accepts in a header value). */
const IDS: ReadonlyArray<[string, Buffer]> = [
  ['UTF-8', Buffer.from('req-ü-你好-🎉', 'utf8')],
  ['non-UTF-8 bytes', Buffer.from([0x72, 0x2d, 0xe9, 0xff, 0x80, 0x41])],
];

/** What came back on one connection: the X-Request-Id header's bytes, the status and the body (dechunked text). */
interface Echo {
  status: number;
  id: Buffer | null;
  body: string;
}

/**
 * Send `head` (the request line and headers, without the blank line), an `X-Request-Id: <id>` header and `body` on a
 * fresh connection with `Connection: close`, and read the answer until the server closes it.
 */
function exchange(port: number, head: string, id: Buffer, body = ''): Promise<Echo> {
  const request = Buffer.concat([
    Buffer.from(
      `${head}\r\nHost: x\r\nConnection: close\r\n${body === '' ? '' : `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n`}X-Request-Id: `,
    ),
    id,
    Buffer.from(`\r\n\r\n${body}`),
  ]);
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(request));
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => socket.destroy(new Error(`hang guard: no close within 10 s (${head})`)), 10_000);
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', reject);
    socket.on('close', () => {
      clearTimeout(timer);
      const raw = Buffer.concat(chunks);
      const split = raw.indexOf('\r\n\r\n');
      assert.ok(split > 0, `a header section: ${raw.toString('latin1')}`);
      // Header bytes one char each, as a client must read them to get the bytes back.
      const [statusLine = '', ...lines] = raw.subarray(0, split).toString('latin1').split('\r\n');
      const line = lines.find((l) => l.toLowerCase().startsWith('x-request-id:'));
      const chunked = lines.some((l) => /^transfer-encoding:\s*chunked$/i.test(l));
      const rest = raw.subarray(split + 4);
      resolve({
        status: Number(statusLine.split(' ')[1]),
        id: line === undefined ? null : Buffer.from(line.slice('x-request-id:'.length).trim(), 'latin1'),
        body: (chunked ? dechunk(rest) : rest).toString('utf8'),
      });
    });
  });
}

/** The bytes of a chunked body (`<hex size>\r\n<bytes>\r\n` … `0\r\n\r\n`). */
function dechunk(raw: Buffer): Buffer {
  const parts: Buffer[] = [];
  for (let at = 0; ;) {
    const eol = raw.indexOf('\r\n', at);
    assert.ok(eol > at, `a chunk size at ${at}`);
    const size = parseInt(raw.subarray(at, eol).toString('latin1'), 16);
    if (size === 0) return Buffer.concat(parts);
    parts.push(raw.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
}

const chat = (stream: boolean) =>
  JSON.stringify({ model: MODEL_ID, messages: [{ role: 'user', content: 'Hi' }], stream });
const completion = (stream: boolean) => JSON.stringify({ model: MODEL_ID, prompt: 'Hi', stream });

describe('X-Request-Id echoed as the bytes the client sent', () => {
  let fx: AppFixture & { port: number };
  let replyIds: number[];
  /** How long the fake engine waits before its outputs (ms): 0 for at once, more than the opening hold for late. */
  let delayMs = 0;

  before(async () => {
    fx = await listenApp();
    replyIds = fx.tokenizer.encode('Hello there ✓', { addSpecialTokens: false });
    fx.backend.onSubmit = (s) => {
      if (delayMs === 0) s.stream.pushAll(replyIds, 'stop');
      else setTimeout(() => s.stream.pushAll(replyIds, 'stop'), delayMs);
    };
  });
  after(() => fx.app.close());

  for (const [what, id] of IDS) {
    test(`${what}: a non-streamed chat completion`, async () => {
      delayMs = 0;
      const r = await exchange(fx.port, 'POST /v1/chat/completions HTTP/1.1', id, chat(false));
      assert.equal(r.status, 200, r.body);
      assert.deepEqual(r.id, id);
      assert.equal(
        (JSON.parse(r.body) as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content,
        'Hello there ✓',
      );
    });

    test(`${what}: errors from a route, the not-found handler and before routing`, async () => {
      for (const [head, status] of [
        ['GET /v1/responses/resp_nope HTTP/1.1', 404],
        ['GET /v1/nowhere HTTP/1.1', 404],
        ['GET /v1/models/%c0 HTTP/1.1', 400],
      ] as const) {
        const r = await exchange(fx.port, head, id);
        assert.equal(r.status, status, `${head}: ${r.body}`);
        assert.deepEqual(r.id, id, head);
        assert.equal(typeof (JSON.parse(r.body) as { error: { message: string } }).error.message, 'string', head);
      }
    });

    test(`${what}: streams whose headers leave with the first records, alone after the hold, or unchunked`, async () => {
      for (const [head, body, delay] of [
        ['POST /v1/chat/completions HTTP/1.1', chat(true), 0],
        ['POST /v1/completions HTTP/1.1', completion(true), OPENING_HOLD_MS * 3],
        ['POST /v1/chat/completions HTTP/1.0', chat(true), 0],
      ] as const) {
        delayMs = delay;
        const r = await exchange(fx.port, head, id, body);
        assert.equal(r.status, 200, `${head}: ${r.body}`);
        assert.deepEqual(r.id, id, `${head}, first output after ${delay} ms`);
        assert.equal(parseSse(r.body).doneCount, 1, head);
      }
    });
  }
});
