/**
 * Errors raised before any route runs answer with the OpenAI error body (src/server/framework-errors.ts;
 * gateway.md 11.3): an undecodable URL (fastify `frameworkErrors`), a header section over Node's 16 KiB limit and a
 * malformed request line (fastify `clientErrorHandler`, on the raw socket).
 */
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { clientApiError } from '../../src/server/framework-errors.js';
import { makeApp, rawExchange, type RawExchange } from './helpers.js';

/** Assert an OpenAI-style error body with this status and code. */
function assertOpenAIError(res: RawExchange, status: number, code: string): Record<string, unknown> {
  assert.equal(res.status, status, res.body);
  assert.match(res.headers['content-type'] ?? '', /^application\/json/);
  const body = JSON.parse(res.body) as { error: Record<string, unknown> };
  assert.deepEqual(Object.keys(body), ['error']);
  assert.deepEqual(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type']);
  assert.equal(body.error.code, code);
  assert.equal(body.error.type, 'invalid_request_error');
  assert.equal(body.error.param, null);
  assert.equal(typeof body.error.message, 'string');
  return body.error;
}

describe('framework and client errors over HTTP/1.1', () => {
  let app: FastifyInstance;
  let port: number;

  before(async () => {
    ({ app } = await makeApp());
    await app.listen({ port: 0, host: '127.0.0.1' });
    port = (app.server.address() as AddressInfo).port;
  });
  after(() => app.close());

  test('an undecodable URL (%c0) → 400 invalid_url, OpenAI-style, with the client id echoed', async () => {
    const res = await rawExchange(
      port,
      'GET /v1/models/%c0 HTTP/1.1\r\nHost: x\r\nX-Request-Id: bad-url-1\r\nConnection: close\r\n\r\n',
      'GET /v1/models/%c0',
    );
    const err = assertOpenAIError(res, 400, 'invalid_url');
    assert.match(String(err.message), /%c0/);
    assert.equal(res.headers['x-request-id'], 'bad-url-1');
  });

  test('headers over 16 KiB → 431 request_header_fields_too_large, OpenAI-style, connection closed', async () => {
    const big = 'a'.repeat(17_000);
    const res = await rawExchange(port, `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${big}\r\n\r\n`, 'a 17 KB header');
    assertOpenAIError(res, 431, 'request_header_fields_too_large');
    assert.equal(res.headers.connection, 'close');
    assert.equal(Number(res.headers['content-length']), Buffer.byteLength(res.body));
  });

  test('a malformed request line → 400 bad_request, OpenAI-style', async () => {
    const res = await rawExchange(port, 'NOT-HTTP\r\n\r\n', 'a malformed request line');
    const err = assertOpenAIError(res, 400, 'bad_request');
    assert.match(String(err.message), /HPE_/);
  });

  test('clientApiError: a reset peer gets nothing; a timeout is 408', () => {
    assert.equal(clientApiError(Object.assign(new Error('reset'), { code: 'ECONNRESET' })), null);
    assert.equal(clientApiError(Object.assign(new Error('t'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' }))?.statusCode, 408);
  });
});
