/**
 * The HTTP side of the rank lifecycle (issue #8 parts 4, 6, 7) over a fake backend: /ready, the 503 + Retry-After
 * answers when no group or no pinned rank can take a request, the drain gate (src/lifecycle.ts), and the rank-state
 * metrics block.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GatewayLifecycle, waitForDrain } from '../../src/lifecycle.js';
import { FakeBackend, rankState } from './fake-backend.js';
import { MODEL_ID, makeApp } from './helpers.js';

const body = { prompt: 'Hello', max_tokens: 3 };

test('starting: /health and /ready 503 starting; a request gets 503 engine_starting with Retry-After and an OpenAI body', async () => {
  const backend = new FakeBackend({ ranks: [0, 1] });
  backend.statusValue = 'starting';
  backend.rankStatesValue = [rankState(0, { state: 'joining' }), rankState(1, { state: 'joining' })];
  backend.maxModelLen = null;
  const { app } = await makeApp({ backend });
  try {
    const health = await app.inject({ method: 'GET', url: '/health' });
    assert.equal(health.statusCode, 503);
    assert.equal(health.json().status, 'starting');
    assert.deepEqual(
      health.json().groups.map((g: { joined: number; expected: number }) => [g.joined, g.expected]),
      [[0, 2]],
    );
    const ready = await app.inject({ method: 'GET', url: '/ready' });
    assert.equal(ready.statusCode, 503);
    assert.equal(ready.json().status, 'starting');
    const gen = await app.inject({ method: 'POST', url: '/v1/completions', payload: body });
    assert.equal(gen.statusCode, 503);
    assert.equal(gen.headers['retry-after'], '5');
    assert.deepEqual(Object.keys(gen.json().error).sort(), ['code', 'message', 'param', 'type']);
    assert.equal(gen.json().error.code, 'engine_starting');
    assert.equal(gen.json().error.type, 'service_unavailable_error');
    const models = await app.inject({ method: 'GET', url: '/v1/models' });
    assert.equal(models.statusCode, 200);
    assert.equal(models.json().data[0].max_model_len, null, 'not known before a rank joined');
    assert.equal(backend.submissions.length, 0);
  } finally {
    await app.close();
  }
});

test('a pinned request to a rank that is not ready: 503 rank_unavailable with Retry-After; to a rank nobody has: 400', async () => {
  const backend = new FakeBackend({ ranks: [0, 1] });
  backend.statusValue = 'degraded';
  backend.rankStatesValue = [rankState(0), rankState(1, { state: 'dead', cause: 'peer-unreachable' })];
  backend.onSubmit = (s) => s.stream.pushAll([9707], 'length');
  const { app } = await makeApp({ backend });
  try {
    const pinned = await app.inject({
      method: 'POST',
      url: '/v1/completions',
      payload: body,
      headers: { 'x-data-parallel-rank': '1' },
    });
    assert.equal(pinned.statusCode, 503);
    assert.equal(pinned.headers['retry-after'], '1');
    assert.equal(pinned.json().error.code, 'rank_unavailable');
    assert.match(pinned.json().error.message, /DP rank 1 cannot take requests now \(tokenspeed-0: dead\)/);
    const bad = await app.inject({
      method: 'POST',
      url: '/v1/completions',
      payload: body,
      headers: { 'x-data-parallel-rank': '2' },
    });
    assert.equal(bad.statusCode, 400);
    assert.equal(bad.json().error.code, 'invalid_dp_rank');
    const ok = await app.inject({ method: 'POST', url: '/v1/completions', payload: body });
    assert.equal(ok.statusCode, 200, 'unpinned requests go to the ready rank');
    const ready = await app.inject({ method: 'GET', url: '/ready' });
    assert.equal(ready.statusCode, 200);
    assert.equal(ready.json().status, 'ready');
  } finally {
    await app.close();
  }
});

test('an engine error of kind unavailable maps to 503 with Retry-After; rank-stalled to 503 rank_stalled', async () => {
  const backend = new FakeBackend();
  const { EngineClientError } = await import('../../src/engine-client/errors.js');
  const { app } = await makeApp({ backend });
  try {
    backend.submitError = new EngineClientError('unavailable', 'no DP rank of this engine group can take requests now');
    const a = await app.inject({ method: 'POST', url: '/v1/completions', payload: body });
    assert.equal(a.statusCode, 503);
    assert.equal(a.headers['retry-after'], '1');
    assert.equal(a.json().error.code, 'unavailable');
    backend.submitError = null;
    backend.onSubmit = (s) =>
      s.stream.fail(
        new EngineClientError('rank-stalled', 'DP rank 0 stalled: it sent no output for 2000 ms', { dpRank: 0 }),
      );
    const b = await app.inject({ method: 'POST', url: '/v1/completions', payload: body });
    assert.equal(b.statusCode, 503);
    assert.equal(b.json().error.code, 'rank_stalled');
    assert.match(b.json().error.message, /DP rank 0 stalled/);
  } finally {
    await app.close();
  }
});

test('draining: /ready 503 draining at once, new API requests 503 + Retry-After, /health and tokenize still answer', async () => {
  const lifecycle = new GatewayLifecycle();
  const backend = new FakeBackend();
  backend.onSubmit = (s) => s.stream.pushAll([9707], 'length');
  const { app } = await makeApp({ backend, admission: lifecycle });
  try {
    assert.equal((await app.inject({ method: 'GET', url: '/ready' })).statusCode, 200);
    assert.equal(lifecycle.startDrain(), true);
    assert.equal(lifecycle.startDrain(), false, 'once');
    const ready = await app.inject({ method: 'GET', url: '/ready' });
    assert.equal(ready.statusCode, 503);
    assert.equal(ready.json().status, 'draining');
    for (const url of ['/v1/completions', '/v1/chat/completions']) {
      const r = await app.inject({
        method: 'POST',
        url,
        payload: { ...body, messages: [{ role: 'user', content: 'x' }] },
      });
      assert.equal(r.statusCode, 503, url);
      assert.equal(r.headers['retry-after'], '1');
      assert.equal(r.json().error.code, 'draining');
    }
    assert.equal(backend.submissions.length, 0);
    assert.equal((await app.inject({ method: 'GET', url: '/health' })).statusCode, 200, 'liveness is not readiness');
    assert.equal((await app.inject({ method: 'POST', url: '/tokenize', payload: { prompt: 'hi' } })).statusCode, 200);
  } finally {
    await app.close();
  }
});

test('waitForDrain: true once nothing is live, false when the grace runs out first', async () => {
  let live = 2;
  setTimeout(() => (live = 0), 30);
  assert.equal(await waitForDrain(() => live, 5000), true);
  assert.equal(await waitForDrain(() => 1, 40), false);
  assert.equal(await waitForDrain(() => 0, 0), true);
});

test('/metrics: rank state gauge (one series per state), rejoins, stalls, deaths by cause, refused handshake messages, orphan outputs', async () => {
  const backend = new FakeBackend({ ranks: [0, 1] });
  backend.rankStatesValue = [
    rankState(0, { rejoins: 2, deaths: { 'peer-unreachable': 2 } }),
    rankState(1, { state: 'stalled', cause: 'stall', stalls: 3 }),
  ];
  Object.assign(backend.stats, { orphanOutputs: 4, handshakeRejected: { 'bad-identity': 1, 'index-out-of-range': 2 } });
  const { app } = await makeApp({ backend });
  try {
    const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    const has = (line: string) => assert.ok(text.split('\n').includes(line), `missing line: ${line}\n${text}`);
    const w = `model="${MODEL_ID}",group="tokenspeed-0"`;
    has(`model_gateway_rank_state{${w},dp_rank="0",state="ready"} 1`);
    has(`model_gateway_rank_state{${w},dp_rank="0",state="dead"} 0`);
    has(`model_gateway_rank_state{${w},dp_rank="1",state="stalled"} 1`);
    has(`model_gateway_rank_state{${w},dp_rank="1",state="joining"} 0`);
    has(`model_gateway_rank_rejoins_total{${w},dp_rank="0"} 2`);
    has(`model_gateway_rank_stalls_total{${w},dp_rank="1"} 3`);
    has(`model_gateway_rank_deaths_total{${w},dp_rank="0",cause="peer-unreachable"} 2`);
    has(`model_gateway_handshake_rejected_total{${w},reason="bad-identity"} 1`);
    has(`model_gateway_handshake_rejected_total{${w},reason="index-out-of-range"} 2`);
    has(`model_gateway_orphan_outputs_total{${w}} 4`);
  } finally {
    await app.close();
  }
});
