/**
 * Client disconnects over a real HTTP/1.1 socket abort the engine request in every phase (gateway.md section 13;
 * dp-routing.md section 5): mid-stream, streaming before the first token, non-streaming before the first token, and
 * while the submit is still pending.
 */
import assert from 'node:assert/strict';
import { request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import type { FakeBackend } from './fake-backend.js';
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
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload), connection: 'close' },
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
    const { req, response } = open('/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], stream: true });
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
});
