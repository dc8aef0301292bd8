/**
 * How many socket writes a streamed response costs (issue 9, CPU per request): the headers and the opening chunk wait
 * for the first engine output (sse.ts `OPENING_HOLD_MS`), so a streamed request answered in its first batch leaves in
 * one write, and a longer one sends its opening together with its first token.
 */
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import type { FakeBackend } from './fake-backend.js';
import { makeApp, parseSse } from './helpers.js';

describe('socket writes of a streamed response', () => {
  let app: FastifyInstance;
  let backend: FakeBackend;
  let port: number;
  /** Socket writes (`_write` / `_writev` calls) of the server side of each connection, in accept order. */
  const writes: number[] = [];

  before(async () => {
    ({ app, backend } = await makeApp());
    app.server.on('connection', (socket: Socket) => {
      const at = writes.push(0) - 1;
      const s = socket as unknown as { _write: (...a: unknown[]) => unknown; _writev: (...a: unknown[]) => unknown };
      const write = s._write.bind(socket);
      const writev = s._writev.bind(socket);
      s._write = (...a) => (writes[at]!++, write(...a));
      s._writev = (...a) => (writes[at]!++, writev(...a));
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    port = (app.server.address() as AddressInfo).port;
  });
  after(() => app.close());

  /** POST a streamed chat request on a fresh connection; resolves with the body and the server's writes for it. */
  function streamed(): Promise<{ body: string; writes: number }> {
    const payload = JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } });
    return new Promise((resolve, reject) => {
      const req = httpRequest(
        { host: '127.0.0.1', port, path: '/v1/chat/completions', method: 'POST', agent: false, headers: { 'content-type': 'application/json', connection: 'close' } },
        (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (d: string) => (body += d));
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
    assert.equal(r.writes, 1);
  });

  test('a longer stream sends its opening with the first token: one write per output turn, plus the end', async () => {
    backend.onSubmit = (s) => {
      setTimeout(() => s.stream.push([9707]), 5);
      setTimeout(() => s.stream.push([11], 'length'), 30);
    };
    const r = await streamed();
    assert.equal(parseSse(r.body).doneCount, 1);
    assert.equal(r.writes, 2, 'headers + role + first token, then the rest with the end');
  });
});
