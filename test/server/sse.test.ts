/**
 * Streaming responses keep the connection semantics the client asked for (src/server/sse.ts): `Connection: close`
 * gets `connection: close` and a socket closed after `[DONE]`; a keep-alive client keeps its connection.
 */
import assert from 'node:assert/strict';
import { connect, type AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import type { FakeBackend } from './fake-backend.js';
import { makeApp, rawExchange } from './helpers.js';

function rawPost(body: unknown, connection: 'close' | 'keep-alive'): string {
  const payload = JSON.stringify(body);
  return (
    `POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: ${connection}\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`
  );
}

describe('SSE responses and the Connection header', () => {
  let app: FastifyInstance;
  let backend: FakeBackend;
  let port: number;

  before(async () => {
    ({ app, backend } = await makeApp());
    backend.onSubmit = (s) => s.stream.pushAll([9707, 11], 'stop');
    await app.listen({ port: 0, host: '127.0.0.1' });
    port = (app.server.address() as AddressInfo).port;
  });
  after(() => app.close());

  test('Connection: close → the stream says connection: close and the server closes the socket after [DONE]', async () => {
    const res = await rawExchange(
      port,
      rawPost({ prompt: 'x', stream: true }, 'close'),
      'a streamed Connection: close request',
    );
    assert.equal(res.status, 200);
    assert.match(res.headers['content-type'] ?? '', /^text\/event-stream/);
    assert.equal(res.headers.connection, 'close');
    assert.equal(res.body.split('data: [DONE]').length - 1, 1, 'exactly one [DONE]');
  });

  test('keep-alive → connection: keep-alive and a second streamed request is served on the same socket', async () => {
    const socket = connect(port, '127.0.0.1');
    try {
      let seen = '';
      const doneTwice = new Promise<void>((resolve) => {
        socket.on('data', (c: Buffer) => {
          seen += c.toString('utf8');
          if (seen.split('data: [DONE]').length - 1 === 2 && seen.endsWith('0\r\n\r\n')) resolve();
        });
      });
      let closed = false;
      socket.on('close', () => (closed = true));
      const once = new Promise<void>((resolve) => socket.on('data', () => resolve()));
      socket.write(rawPost({ prompt: 'x', stream: true }, 'keep-alive'));
      await once;
      socket.write(rawPost({ prompt: 'y', stream: true }, 'keep-alive'));
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        doneTwice,
        new Promise(
          (_, reject) =>
            (timer = setTimeout(() => reject(new Error(`hang guard: got ${JSON.stringify(seen)}`)), 10_000)),
        ),
      ]).finally(() => clearTimeout(timer));
      assert.equal(closed, false);
      const heads = seen.split('HTTP/1.1 ').slice(1);
      assert.equal(heads.length, 2);
      for (const h of heads) assert.match(h, /\r\nconnection: keep-alive\r\n/i);
    } finally {
      socket.destroy();
    }
  });
});
