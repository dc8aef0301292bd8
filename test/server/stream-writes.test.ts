/**
 * How many socket writes a streamed response costs (issue 9, CPU per request): the headers and the opening chunk wait
 * for the first engine output (sse.ts `OPENING_HOLD_MS`), so a streamed request answered in its first batch leaves in
 * one write, and a longer one sends its opening together with its first token. The second output of the longer stream
 * is pushed only once the client holds the first token (not from a timer), so a stalled event loop cannot fold both
 * outputs into one turn and the count depends on the hold alone.
 */
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import type { FakeBackend } from './fake-backend.js';
import { choicesOf, makeApp, parseSse } from './helpers.js';

describe('socket writes of a streamed response', () => {
  let app: FastifyInstance;
  let backend: FakeBackend;
  let port: number;
  /** The bytes of each socket write (`_write` / `_writev` call) of the server side of each connection, in accept order. */
  const writes: string[][] = [];

  before(async () => {
    ({ app, backend } = await makeApp());
    app.server.on('connection', (socket: Socket) => {
      const mine: string[] = [];
      writes.push(mine);
      type Chunk = string | Uint8Array;
      const s = socket as unknown as {
        _write: (c: Chunk, ...a: unknown[]) => unknown;
        _writev: (c: { chunk: Chunk }[], ...a: unknown[]) => unknown;
      };
      const write = s._write.bind(socket);
      const writev = s._writev.bind(socket);
      s._write = (c, ...a) => (mine.push(Buffer.from(c).toString()), write(c, ...a));
      s._writev = (cs, ...a) => (mine.push(cs.map((c) => Buffer.from(c.chunk).toString()).join('')), writev(cs, ...a));
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    port = (app.server.address() as AddressInfo).port;
  });
  after(() => app.close());

  /**
   * POST a streamed chat request on a fresh connection; resolves with the body and the server's writes for it.
   * `onBody` sees the body received so far after each `data` event.
   */
  function streamed(onBody: (body: string) => void = () => {}): Promise<{ body: string; writes: string[] }> {
    const payload = JSON.stringify({
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    return new Promise((resolve, reject) => {
      const req = httpRequest(
        {
          host: '127.0.0.1',
          port,
          path: '/v1/chat/completions',
          method: 'POST',
          agent: false,
          headers: { 'content-type': 'application/json', connection: 'close' },
        },
        (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (d: string) => onBody((body += d)));
          res.on('end', () => resolve({ body, writes: writes.at(-1)! }));
        },
      );
      req.on('error', reject);
      req.end(payload);
    });
  }

  test('answered in its first batch (a later turn than the submit): headers, role, content, finish, usage and [DONE] in one write', async () => {
    backend.onSubmit = (s) => setTimeout(() => s.stream.push([9707], 'length'), 5);
    const r = await streamed();
    const { events, doneCount } = parseSse(r.body);
    assert.equal(doneCount, 1);
    assert.equal(events.length, 3, 'the role chunk, the content with its finish, the usage chunk');
    assert.equal(r.writes.length, 1);
    assert.match(r.writes[0]!, /^HTTP\/1\.1 200 [^]*data: \[DONE\]\n\n[^]*$/);
  });

  test('a longer stream sends its opening with the first token: one write per output turn, plus the end', async () => {
    let second: (() => void) | null = null;
    backend.onSubmit = (s) => {
      setTimeout(() => s.stream.push([9707]), 5);
      second = () => s.stream.push([11], 'length');
    };
    // The second output comes once the client holds a content chunk (the first token), in a later turn than its write.
    const r = await streamed((body) => {
      if (second === null || !body.endsWith('\n\n')) return;
      if (
        !parseSse(body).events.some((e) =>
          choicesOf(e).some((c) => (c.delta as { content?: string } | undefined)?.content),
        )
      )
        return;
      const push = second;
      second = null;
      push();
    });
    assert.equal(second, null, 'the second output was pushed');
    const { events, doneCount } = parseSse(r.body);
    assert.equal(doneCount, 1);
    assert.equal(events.length, 4, 'the role chunk, the first token, the second with its finish, the usage chunk');
    assert.equal(r.writes.length, 2, 'headers + role + first token, then the rest with the end');
    const [first, rest] = r.writes as [string, string];
    assert.match(first, /^HTTP\/1\.1 200 /);
    assert.equal(first.match(/data: /g)?.length, 2, 'the role chunk and the first token');
    assert.doesNotMatch(first, /finish_reason":"length"|\[DONE\]/);
    assert.match(rest, /finish_reason":"length"[^]*data: \[DONE\]\n\n/);
  });
});
