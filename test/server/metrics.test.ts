/**
 * /metrics (gateway.md 15.3) and /health (gateway.md 4.2) over a fake backend.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FakeBackend, rankState } from './fake-backend.js';
import { MODEL_ID, WORKER, makeApp } from './helpers.js';

test('/metrics exports per-rank gauges read at scrape time, client counters and request metrics', async () => {
  const backend = new FakeBackend({ ranks: [0, 1] });
  backend.rankStatesValue = [
    rankState(0, {
      inFlight: 3,
      load: { numRunning: 5, numWaiting: 2, kvCacheUsage: 0.25 },
      dispatchedPinned: 1,
      dispatchedUnpinned: 7,
      clampEvents: 2,
    }),
    rankState(1, { dispatchedUnpinned: 4 }),
  ];
  backend.stats.decodeErrors = 1;
  backend.stats.abortsSent = 6;
  backend.stats.failures['engine-core-dead'] = 1;
  backend.onSubmit = (s) => s.stream.pushAll([9707, 11, 1879], 'length');
  const { app } = await makeApp({ backend });
  try {
    const gen = await app.inject({ method: 'POST', url: '/v1/completions', payload: { prompt: 'x' } });
    assert.equal(gen.statusCode, 200);
    const bad = await app.inject({ method: 'POST', url: '/v1/completions', payload: { prompt: 'x', top_p: 0 } });
    assert.equal(bad.statusCode, 400);

    const res = await app.inject({ method: 'GET', url: '/metrics' });
    assert.equal(res.statusCode, 200);
    assert.match(String(res.headers['content-type']), /^text\/plain/);
    const text = res.body;
    const has = (line: string) => assert.ok(text.split('\n').includes(line), `missing line: ${line}\n${text}`);
    const m = `model="${MODEL_ID}"`;
    const w = `${m},group="tokenspeed-0"`;
    has(`model_gateway_engine_running_requests{${w},dp_rank="0"} 5`);
    has(`model_gateway_engine_waiting_requests{${w},dp_rank="0"} 2`);
    has(`model_gateway_engine_kv_cache_usage{${w},dp_rank="0"} 0.25`);
    has(`model_gateway_rank_inflight_requests{${w},dp_rank="0"} 3`);
    has(`model_gateway_rank_inflight_requests{${w},dp_rank="1"} 0`);
    assert.ok(
      !text.includes(`model_gateway_engine_running_requests{${w},dp_rank="1"}`),
      'a rank without a load report has no load gauges',
    );
    has(`model_gateway_rank_dispatches_total{${w},dp_rank="0",pinned="true"} 1`);
    has(`model_gateway_rank_dispatches_total{${w},dp_rank="0",pinned="false"} 7`);
    has(`model_gateway_rank_clamp_events_total{${w},dp_rank="0"} 2`);
    has(`model_gateway_decode_errors_total{${w}} 1`);
    has(`model_gateway_aborts_sent_total{${w}} 6`);
    has(`model_gateway_engine_failures_total{${w},cause="engine-core-dead"} 1`);
    has(`model_gateway_engine_alive{${w},engine="tokenspeed"} 1`);
    has(`model_gateway_requests_total{${m},endpoint="/v1/completions",status="200",finish_reason="length"} 1`);
    has(`model_gateway_requests_total{${m},endpoint="/v1/completions",status="400",finish_reason="none"} 1`);
    has(`model_gateway_time_to_first_token_seconds_count{${m},endpoint="/v1/completions"} 1`);
    has(`model_gateway_inter_token_latency_seconds_count{${m},endpoint="/v1/completions"} 2`);
    has(`model_gateway_e2e_request_latency_seconds_count{${m},endpoint="/v1/completions"} 1`);

    // Gauges follow the backend at every scrape.
    backend.rankStatesValue[0]!.inFlight = 0;
    const again = await app.inject({ method: 'GET', url: '/metrics' });
    assert.ok(again.body.split('\n').includes(`model_gateway_rank_inflight_requests{${w},dp_rank="0"} 0`));
  } finally {
    await app.close();
  }
});

test('/health is 200 while the engine client is alive and 503 with a message once it failed', async () => {
  const backend = new FakeBackend();
  const { app } = await makeApp({ backend });
  try {
    const ok = await app.inject({ method: 'GET', url: '/health?verbose=1' });
    assert.equal(ok.statusCode, 200);
    const ranks = [0, 1].map((engineIndex) => ({ engineIndex, state: 'ready', cause: null }));
    assert.deepEqual(ok.json(), {
      status: 'ok',
      groups: [
        {
          name: 'tokenspeed-0',
          worker: WORKER,
          engine: 'tokenspeed',
          alive: true,
          status: 'ok',
          message: 'ok',
          joined: 2,
          expected: 2,
          dpRanks: [0, 1],
          ranks,
          failures: {},
        },
      ],
    });
    backend.alive = false;
    backend.stats.failures['engine-core-dead'] = 1;
    const dead = await app.inject({ method: 'GET', url: '/health?verbose=1' });
    assert.equal(dead.statusCode, 503);
    assert.equal(dead.json().status, 'unhealthy');
    assert.deepEqual(dead.json().groups[0], {
      name: 'tokenspeed-0',
      worker: WORKER,
      engine: 'tokenspeed',
      alive: false,
      status: 'unavailable',
      message: 'engine core dead',
      joined: 2,
      expected: 2,
      dpRanks: [0, 1],
      ranks,
      failures: { 'engine-core-dead': 1 },
    });
    assert.match(dead.json().error.message, /engine core dead.*engine-core-dead/);
    assert.equal(dead.json().error.code, 'engine_dead');
    // Without ?verbose=1 the socket path is replaced by the group's name, also inside the message.
    const plain = await app.inject({ method: 'GET', url: '/health' });
    assert.equal(plain.statusCode, 503);
    assert.equal(plain.json().groups[0].worker, 'tokenspeed-0');
    assert.ok(!plain.body.includes('/tmp/fake/worker'), plain.body);
    assert.match(plain.json().error.message, /tokenspeed-0: engine-core-dead/);
    const metrics = await app.inject({ method: 'GET', url: '/metrics' });
    assert.ok(
      metrics.body.includes(
        `model_gateway_engine_alive{model="${MODEL_ID}",group="tokenspeed-0",engine="tokenspeed"} 0`,
      ),
    );
  } finally {
    await app.close();
  }
});
