/**
 * API keys over real HTTP/1.1 sockets (src/server/auth.ts; issue #10 parts 1 and 8; coordination note G): with keys
 * set, `/v1/*`, `/tokenize`, `/detokenize` (and `/metrics` with `metricsRequireKey`, `/health?verbose=1`, `/ready?verbose=1`) need
 * `Authorization: Bearer <key>`; 401 answers are OpenAI-style with `WWW-Authenticate: Bearer`; `/health` stays open
 * and shows no socket path.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { isProtectedPath, keyMatcher } from '../../src/server/auth.js';
import { keyTenant } from '../../src/server/tenant.js';
import { listenApp, rawExchange, WORKER, type AppFixture } from './helpers.js';

const KEYS = ['sk-first-key', 'second'];
const CHAT = { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3 };

describe('API keys', () => {
  let fx: AppFixture & { port: number };
  let metricsFx: AppFixture & { port: number };

  before(async () => {
    fx = await listenApp({ edge: { apiKeys: KEYS } });
    fx.backend.onSubmit = (s) => s.stream.pushAll([9707, 0], 'stop');
    metricsFx = await listenApp({ edge: { apiKeys: KEYS, metricsRequireKey: true } });
  });
  after(async () => {
    await fx.app.close();
    await metricsFx.app.close();
  });

  const call = (
    port: number,
    path: string,
    init: { method?: string; key?: string; auth?: string; body?: unknown } = {},
  ) =>
    fetch(`http://127.0.0.1:${port}${path}`, {
      method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
      headers: {
        ...(init.body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...(init.auth !== undefined
          ? { authorization: init.auth }
          : init.key !== undefined
            ? { authorization: `Bearer ${init.key}` }
            : {}),
      },
      ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}),
    });

  async function assert401(res: Response, what: string): Promise<Record<string, unknown>> {
    assert.equal(res.status, 401, what);
    assert.equal(res.headers.get('www-authenticate'), 'Bearer', what);
    const body = (await res.json()) as { error: Record<string, unknown> };
    assert.deepEqual(Object.keys(body), ['error']);
    assert.equal(body.error.type, 'invalid_request_error');
    assert.equal(body.error.code, 'invalid_api_key');
    assert.equal(body.error.param, null);
    return body.error;
  }

  test('every protected route refuses a missing, malformed or wrong key with an OpenAI-style 401', async () => {
    const routes: Array<[string, unknown]> = [
      ['/v1/models', undefined],
      ['/v1/chat/completions', CHAT],
      ['/v1/completions', { prompt: 'x', max_tokens: 2 }],
      ['/tokenize', { prompt: 'x' }],
      ['/detokenize', { tokens: [9707] }],
      // A path under /v1/ that no route serves yet is protected too: coverage is by prefix (note G).
      ['/v1/responses', { input: 'x' }],
    ];
    const before = fx.backend.submissions.length;
    for (const [path, body] of routes) {
      const missing = await assert401(await call(fx.port, path, { body }), `${path} without a key`);
      assert.match(String(missing.message), /did not provide an API key/);
      const wrong = await assert401(
        await call(fx.port, path, { body, key: 'sk-first-kez' }),
        `${path} with a wrong key`,
      );
      assert.match(String(wrong.message), /Incorrect API key/);
      assert.ok(!JSON.stringify(wrong).includes('sk-first-kez'), 'the presented key is never echoed');
      await assert401(
        await call(fx.port, path, { body, auth: 'Basic c2stZmlyc3Qta2V5' }),
        `${path} with another scheme`,
      );
      await assert401(await call(fx.port, path, { body, key: `${KEYS[0]}x` }), `${path} with a longer key`);
      await assert401(await call(fx.port, path, { body, auth: 'Bearer' }), `${path} with an empty bearer`);
    }
    assert.equal(fx.backend.submissions.length, before, 'nothing reached the engine');
  });

  test('any configured key opens them; the scheme is case-insensitive', async () => {
    for (const key of KEYS) {
      const res = await call(fx.port, '/v1/chat/completions', { key, body: CHAT });
      assert.equal(res.status, 200, await res.clone().text());
      assert.equal(((await res.json()) as { object: string }).object, 'chat.completion');
    }
    assert.equal((await call(fx.port, '/v1/models', { auth: `bearer ${KEYS[1]}` })).status, 200);
    const tenants = fx.backend.submissions.slice(-KEYS.length).map((x) => x.flow?.tenant);
    assert.deepEqual(tenants, KEYS.map(keyTenant), 'each key is its own tenant, named by a digest, never the key');
    const tok = await call(fx.port, '/tokenize', { key: KEYS[0], body: { prompt: 'Hello' } });
    assert.equal(tok.status, 200);
    assert.equal((await call(fx.port, '/detokenize', { key: KEYS[1], body: { tokens: [9707] } })).status, 200);
  });

  test('a percent-encoded spelling of a protected path is protected too', async () => {
    // The router decodes %76 to 'v' and serves /v1/models (checked in the keyless app): the check looks at the
    // matched route as well as the raw path.
    const raw = 'GET /%761/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
    const open = await listenApp();
    try {
      assert.equal((await rawExchange(open.port, raw, 'GET /%761/models, no keys')).status, 200);
    } finally {
      await open.app.close();
    }
    const res = await rawExchange(fx.port, raw, 'GET /%761/models');
    assert.equal(res.status, 401, res.body);
    assert.ok(!res.body.includes('"object":"list"'), 'the model list is not served without a key');
  });

  test('/health and /ready stay open and hide socket paths; ?verbose=1 needs the key and shows them', async () => {
    for (const path of ['/health', '/ready']) {
      const plain = await call(fx.port, path);
      assert.equal(plain.status, 200, path);
      const text = await plain.text();
      assert.ok(!text.includes(WORKER) && !text.includes('/tmp/fake'), text);
      assert.equal((JSON.parse(text) as { groups: Array<{ worker: string }> }).groups[0]!.worker, 'tokenspeed-0');
      await assert401(await call(fx.port, `${path}?verbose=1`), `${path}?verbose=1 without a key`);
      const verbose = await call(fx.port, `${path}?verbose=1`, { key: KEYS[0] });
      assert.equal(verbose.status, 200);
      assert.equal(((await verbose.json()) as { groups: Array<{ worker: string }> }).groups[0]!.worker, WORKER);
      assert.equal((await call(fx.port, `${path}?verbose=0`)).status, 200, 'verbose=0 is the plain answer');
    }
  });

  test('/metrics is open by default and needs the key with metricsRequireKey', async () => {
    assert.equal((await call(fx.port, '/metrics')).status, 200);
    await assert401(await call(metricsFx.port, '/metrics'), '/metrics with metricsRequireKey');
    assert.equal((await call(metricsFx.port, '/metrics', { key: KEYS[1] })).status, 200);
    assert.equal((await call(metricsFx.port, '/health')).status, 200, '/health stays open there too');
  });

  test('without keys nothing needs one', async () => {
    const open = await listenApp();
    try {
      open.backend.onSubmit = (s) => s.stream.pushAll([9707, 0], 'stop');
      assert.equal((await call(open.port, '/v1/chat/completions', { body: CHAT })).status, 200);
      assert.equal((await call(open.port, '/health?verbose=1')).status, 200);
    } finally {
      await open.app.close();
    }
  });
});

test('keyMatcher finds keys by digest; isProtectedPath covers future /v1 routes', () => {
  const match = keyMatcher(['a', 'bb']);
  assert.equal(match('a'), true);
  assert.equal(match('bb'), true);
  assert.equal(match(''), false);
  assert.equal(match('a '), false);
  assert.equal(match('b'.repeat(10_000)), false);
  for (const p of ['/v1/models', '/v1/responses', '/v1/gateway/ranks', '/tokenize', '/detokenize'])
    assert.equal(isProtectedPath(p, false), true, p);
  for (const p of ['/health', '/ready', '/metrics', '/dashboard', '/v1x', '/tokenizer'])
    assert.equal(isProtectedPath(p, false), false, p);
  assert.equal(isProtectedPath('/metrics', true), true);
});
