/**
 * A known path asked with the wrong method answers 405 with an `Allow` header and an OpenAI-style body
 * (src/server/allowed-methods.ts; vLLM answers 405 "Method Not Allowed"); unknown paths stay 404.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { RouteMethods } from '../../src/server/allowed-methods.js';
import { makeApp } from './helpers.js';

describe('405 Method Not Allowed', () => {
  let app: FastifyInstance;

  before(async () => {
    ({ app } = await makeApp());
  });
  after(() => app.close());

  const cases: Array<[method: 'GET' | 'PUT' | 'DELETE' | 'POST' | 'PATCH', url: string, allow: string]> = [
    ['GET', '/v1/chat/completions', 'POST'],
    ['PUT', '/v1/chat/completions', 'POST'],
    ['DELETE', '/v1/chat/completions', 'POST'],
    ['GET', '/v1/completions', 'POST'],
    ['PUT', '/v1/completions', 'POST'],
    ['DELETE', '/v1/completions?x=1', 'POST'],
    ['POST', '/v1/models', 'GET, HEAD'],
    ['POST', '/health', 'GET, HEAD'],
    ['POST', '/metrics', 'GET, HEAD'],
    ['PATCH', '/metrics', 'GET, HEAD'],
  ];
  for (const [method, url, allow] of cases) {
    test(`${method} ${url} → 405, Allow: ${allow}`, async () => {
      const res = await app.inject({ method, url, headers: { 'x-request-id': 'm-1' } });
      assert.equal(res.statusCode, 405, res.body);
      assert.equal(res.headers.allow, allow);
      assert.equal(res.headers['x-request-id'], 'm-1');
      const body = res.json();
      assert.deepEqual(Object.keys(body), ['error']);
      assert.equal(body.error.type, 'invalid_request_error');
      assert.equal(body.error.code, 'method_not_allowed');
      assert.equal(body.error.param, null);
      assert.match(body.error.message, new RegExp(`^Method Not Allowed: ${method} `));
    });
  }

  test('unknown paths are still 404; the right method still works', async () => {
    const missing = await app.inject({ method: 'GET', url: '/v1/nothing' });
    assert.equal(missing.statusCode, 404);
    assert.equal(missing.json().error.code, 'not_found');
    assert.equal(missing.headers.allow, undefined);
    assert.equal((await app.inject({ method: 'GET', url: '/health' })).statusCode, 200);
    assert.equal((await app.inject({ method: 'HEAD', url: '/v1/models' })).statusCode, 200);
  });

  test('RouteMethods: order GET, HEAD, POST, then the rest; query ignored; unknown path → null', () => {
    const m = new RouteMethods();
    m.add('/a', 'post');
    m.add('/a', ['DELETE', 'GET']);
    m.add('/a', 'HEAD');
    assert.equal(m.allowFor('/a?q=1'), 'GET, HEAD, POST, DELETE');
    assert.equal(m.allowFor('/b'), null);
  });
});
