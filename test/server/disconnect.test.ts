/**
 * Client disconnects over a real HTTP/1.1 socket abort the engine request in every phase (gateway.md section 13;
 * dp-routing.md section 5): mid-stream, streaming before the first token, non-streaming before the first token,
 * while the submit is still pending, and for every pipelined request queued on the closed connection; a request
 * whose body was read completely is not mistaken for a disconnect.
 */
import assert from 'node:assert/strict';
import { request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import type { FakeBackend, Submission } from './fake-backend.js';
import { makeApp } from './helpers.js';

/** Hang guard only: the awaited events normally happen within milliseconds. */
const GUARD_MS = 10_000;

function withGuard<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const guard = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), GUARD_MS);
  });
  return Promise.race([p, guard]).finally(() => clearTimeout(timer));
}

describe('client disconnects over HTTP/1.1', () => {
  let app: FastifyInstance;
  let backend: FakeBackend;
  let port: number;

  before(async () => {
    ({ app, backend } = await makeApp());
    await app.listen({ port: 0, host: '127.0.0.1' });
    port = (app.server.address() as AddressInfo).port;
  });
  after(() => app.close());

  /** POST `body` on a fresh (non-keep-alive) connection; resolves with the request and, later, its response. */
  function open(path: string, body: unknown): { req: ClientRequest; response: Promise<IncomingMessage> } {
    const payload = JSON.stringify(body);
    const req = httpRequest({
      host: '127.0.0.1',
      port,
      path,
      method: 'POST',
      agent: false,
      headers: {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(payload),
        connection: 'close',
      },
    });
    const response = new Promise<IncomingMessage>((resolve) => req.on('response', resolve));
    req.on('error', () => {}); // destroying the request on purpose raises ECONNRESET here
    req.end(payload);
    return { req, response };
  }

  /** Resolves with the next chunk of `res` that contains `needle`. */
  function waitForData(res: IncomingMessage, needle: string): Promise<string> {
    return new Promise((resolve) => {
      let seen = '';
      const onData = (chunk: Buffer) => {
        seen += chunk.toString('utf8');
        if (seen.includes(needle)) {
          res.off('data', onData);
          resolve(seen);
        }
      };
      res.on('data', onData);
    });
  }

  test('mid-stream: the stream is cancelled after some tokens were sent', async () => {
    backend.onSubmit = (s) => s.stream.push([9707, 11]); // some tokens, then nothing more
    const submitted = backend.nextSubmission();
    const { req, response } = open('/v1/completions', { prompt: 'x', stream: true });
    const sub = await withGuard(submitted, 'the submit');
    const res = await withGuard(response, 'the response');
    assert.equal(res.statusCode, 200);
    await withGuard(waitForData(res, '"text"'), 'the first token chunk');
    assert.equal(sub.stream.isCancelled, false);
    req.destroy();
    await withGuard(sub.stream.cancelled, 'the cancel');
    assert.equal(sub.stream.isCancelled, true);
  });

  test('streaming, before the first token: the stream is cancelled', async () => {
    backend.onSubmit = null; // the engine never answers
    const submitted = backend.nextSubmission();
    const { req, response } = open('/v1/chat/completions', {
      messages: [{ role: 'user', content: 'Hi' }],
      stream: true,
    });
    const sub = await withGuard(submitted, 'the submit');
    const res = await withGuard(response, 'the response headers');
    await withGuard(waitForData(res, '"role":"assistant"'), 'the role chunk');
    req.destroy();
    await withGuard(sub.stream.cancelled, 'the cancel');
    assert.equal(sub.stream.isCancelled, true);
  });

  test('non-streaming, before the first token: the stream is cancelled', async () => {
    backend.onSubmit = null;
    const submitted = backend.nextSubmission();
    const { req } = open('/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }] });
    const sub = await withGuard(submitted, 'the submit');
    req.destroy();
    await withGuard(sub.stream.cancelled, 'the cancel');
    assert.equal(sub.stream.isCancelled, true);
  });

  test('non-streaming, with tokens already received: the stream is cancelled', async () => {
    backend.onSubmit = (s) => s.stream.push([9707]);
    const submitted = backend.nextSubmission();
    const { req } = open('/v1/completions', { prompt: 'x' });
    const sub = await withGuard(submitted, 'the submit');
    req.destroy();
    await withGuard(sub.stream.cancelled, 'the cancel');
    assert.equal(sub.stream.isCancelled, true);
  });

  test('while the submit is pending: the submit signal fires and nothing is registered', async () => {
    let release!: () => void;
    backend.submitGate = new Promise<void>((r) => (release = r));
    try {
      const before = backend.submissions.length;
      const call = backend.nextSubmitCall();
      const { req } = open('/v1/completions', { prompt: 'x', stream: true });
      const { signal } = await withGuard(call, 'the submit call');
      assert.ok(signal, 'submit receives an AbortSignal');
      assert.equal(signal.aborted, false);
      const aborted = new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
      req.destroy();
      await withGuard(aborted, 'the submit signal');
      assert.equal(backend.submissions.length, before, 'the aborted submit registered nothing');
    } finally {
      release();
      backend.submitGate = null;
    }
  });
  /** Raw HTTP/1.1 POST text for `body` (keep-alive: the connection stays open after the response). */
  function rawPost(path: string, body: unknown): string {
    const payload = JSON.stringify(body);
    return (
      `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`
    );
  }

  /** Resolves with the next `n` submissions (collected through `onSubmit`, which it replaces). */
  function collectSubmissions(n: number): Promise<Submission[]> {
    const got: Submission[] = [];
    return new Promise((resolve) => {
      backend.onSubmit = (s) => {
        got.push(s);
        if (got.length === n) resolve(got);
      };
    });
  }

  function openSocket(): Promise<Socket> {
    return new Promise((resolve, reject) => {
      const s = connect(port, '127.0.0.1', () => resolve(s));
      s.once('error', reject);
    });
  }

  /** Resolves with everything `socket` received once it holds `count` occurrences of `needle`. */
  function readUntil(socket: Socket, needle: string, count: number): Promise<string> {
    return new Promise((resolve) => {
      let seen = '';
      const onData = (chunk: Buffer) => {
        seen += chunk.toString('utf8');
        if (seen.split(needle).length - 1 >= count) {
          socket.off('data', onData);
          resolve(seen);
        }
      };
      socket.on('data', onData);
    });
  }

  test('pipelined requests: closing the connection cancels every queued request, not only the first', async () => {
    const submitted = collectSubmissions(2);
    const socket = await openSocket();
    socket.on('error', () => {});
    socket.write(rawPost('/v1/completions', { prompt: 'first' }) + rawPost('/v1/completions', { prompt: 'second' }));
    const [first, second] = await withGuard(submitted, 'both pipelined submits');
    assert.equal(first.stream.isCancelled, false);
    assert.equal(second.stream.isCancelled, false);
    socket.destroy();
    await withGuard(first.stream.cancelled, 'the cancel of the first (active) request');
    await withGuard(second.stream.cancelled, 'the cancel of the second (queued) request');
    assert.equal(first.stream.isCancelled, true);
    assert.equal(second.stream.isCancelled, true);
    backend.onSubmit = null;
  });

  test('a completely read body is not a disconnect: keep-alive requests wait for their tokens and finish', async () => {
    const socket = await openSocket();
    try {
      for (const prompt of ['one', 'two']) {
        const submitted = collectSubmissions(1);
        const answered = readUntil(socket, '"finish_reason":"stop"', 1);
        socket.write(rawPost('/v1/completions', { prompt }));
        const [sub] = await withGuard(submitted, `the submit of '${prompt}'`);
        // Let the request's own 'close' (emitted once its body is consumed, Node 20) and any pending I/O happen.
        for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
        assert.equal(sub.stream.isCancelled, false, 'no ABORT while the request waits for its first token');
        assert.equal(sub.signal?.aborted, false);
        sub.stream.pushAll([9707, 11], 'stop');
        const text = await withGuard(answered, `the response to '${prompt}'`);
        assert.match(text, /^HTTP\/1\.1 200/);
        assert.equal(sub.stream.isCancelled, false, 'a finished request is never aborted');
      }
      const subs = backend.submissions.slice(-2);
      const closed = new Promise<void>((r) => socket.once('close', () => r()));
      socket.destroy();
      await withGuard(closed, 'the socket close');
      for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
      for (const s of subs) {
        assert.equal(s.stream.isCancelled, false, 'closing the connection afterwards aborts nothing');
        assert.equal(s.signal?.aborted, false);
      }
    } finally {
      backend.onSubmit = null;
      socket.destroy();
    }
  });
});
