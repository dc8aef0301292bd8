/**
 * CORS with vLLM's flags over real HTTP/1.1 sockets (src/server/cors.ts; issue #10 part 6): off by default (no CORS
 * header, a preflight is a 405); with origins set, preflights are answered (also without the API key, which browsers
 * never send on a preflight), actual responses carry the allow-origin header, including 401s, and an origin not
 * listed gets none.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { corsPluginOptions } from '../../src/server/cors.js';
import { listenApp, type AppFixture } from './helpers.js';

const ORIGIN = 'https://app.example';

function preflight(port: number, origin: string, headers = 'authorization, content-type'): Promise<Response> {
  return fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'OPTIONS',
    headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': headers },
  });
}

describe('CORS', () => {
  let off: AppFixture & { port: number };
  let listed: AppFixture & { port: number };
  let any: AppFixture & { port: number };

  before(async () => {
    off = await listenApp();
    listed = await listenApp({
      edge: {
        apiKeys: ['k'],
        cors: {
          allowedOrigins: [ORIGIN],
          allowedMethods: ['GET', 'POST'],
          allowedHeaders: ['authorization', 'content-type'],
          allowCredentials: true,
        },
      },
    });
    any = await listenApp({ edge: { cors: { allowedOrigins: ['*'] } } });
    for (const fx of [off, listed, any]) fx.backend.onSubmit = (s) => s.stream.pushAll([9707, 0], 'stop');
  });
  after(async () => {
    for (const fx of [off, listed, any]) await fx.app.close();
  });

  test('off by default: no CORS headers, a preflight is refused like any unserved method', async () => {
    const res = await fetch(`http://127.0.0.1:${off.port}/v1/models`, { headers: { origin: ORIGIN } });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('access-control-allow-origin'), null);
    const pre = await preflight(off.port, ORIGIN);
    assert.equal(pre.status, 405);
    assert.equal(pre.headers.get('access-control-allow-origin'), null);
  });

  test('listed origins: the preflight works without the key; responses and 401s carry the origin', async () => {
    const pre = await preflight(listed.port, ORIGIN);
    assert.equal(pre.status, 204);
    assert.equal(pre.headers.get('access-control-allow-origin'), ORIGIN);
    assert.equal(pre.headers.get('access-control-allow-credentials'), 'true');
    assert.equal(pre.headers.get('access-control-allow-methods'), 'GET, POST');
    assert.equal(pre.headers.get('access-control-allow-headers'), 'authorization, content-type');
    const denied = await fetch(`http://127.0.0.1:${listed.port}/v1/models`, { headers: { origin: ORIGIN } });
    assert.equal(denied.status, 401);
    assert.equal(denied.headers.get('access-control-allow-origin'), ORIGIN, 'a browser app can read the 401');
    const ok = await fetch(`http://127.0.0.1:${listed.port}/v1/chat/completions`, {
      method: 'POST',
      headers: { origin: ORIGIN, authorization: 'Bearer k', 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 }),
    });
    assert.equal(ok.status, 200);
    assert.equal(ok.headers.get('access-control-allow-origin'), ORIGIN);
    const other = await fetch(`http://127.0.0.1:${listed.port}/health`, {
      headers: { origin: 'https://evil.example' },
    });
    assert.equal(other.status, 200);
    assert.equal(other.headers.get('access-control-allow-origin'), null, 'an origin not listed gets no allow header');
  });

  test('"*": any origin, every method, the requested headers echoed', async () => {
    const pre = await preflight(any.port, 'https://anywhere.example', 'x-custom, content-type');
    assert.equal(pre.status, 204);
    assert.equal(pre.headers.get('access-control-allow-origin'), '*');
    assert.match(pre.headers.get('access-control-allow-methods') ?? '', /POST/);
    assert.equal(pre.headers.get('access-control-allow-headers'), 'x-custom, content-type');
    const res = await fetch(`http://127.0.0.1:${any.port}/v1/models`, {
      headers: { origin: 'https://anywhere.example' },
    });
    assert.equal(res.headers.get('access-control-allow-origin'), '*');
  });
});

test('corsPluginOptions: off without origins; "*" with credentials echoes the origin', () => {
  assert.equal(corsPluginOptions({ allowedOrigins: [] }), null);
  assert.equal(corsPluginOptions({ allowedOrigins: ['*'], allowCredentials: true })?.origin, true);
  assert.equal(corsPluginOptions({ allowedOrigins: ['*'] })?.origin, '*');
  assert.deepEqual(corsPluginOptions({ allowedOrigins: ['https://a', 'https://b'] })?.origin, [
    'https://a',
    'https://b',
  ]);
  assert.equal(corsPluginOptions({ allowedOrigins: ['*'], allowedHeaders: ['*'] })?.allowedHeaders, undefined);
});
