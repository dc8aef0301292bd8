/**
 * End to end, `model-gateway serve --workers 2` (issue 9 part 2; src/fronts): one router process (the cluster
 * primary: engine clients, routing state, concurrency count, Responses store) and two HTTP fronts sharing the port.
 * One gateway for the file (2 simulated ranks, a concurrency cap of 3): chat streamed and not, /metrics summed over
 * the fronts, n > 1 and pinning, `previous_response_id` resolved by whichever front gets the next turn, the cap
 * enforced once over both fronts, a client disconnect reaching the engine as an ABORT, and last the SIGTERM drain
 * (every front drains, the streams finish, exit 0). A front killed mid-stream is workers-faults.test.ts. Every request uses a fresh connection (workers-helpers.ts), so
 * consecutive requests land on alternate fronts. Nothing asserts a duration.
 */
import { existsSync } from 'node:fs';
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { hangGuard } from '../helpers/async.js';
import { waitUntil } from './spread-helpers.js';
import { LONG, MODEL, WorkersGateway, waitFor } from './workers-helpers.js';

const CAP = 3;
let g: WorkersGateway;

before(async () => {
  g = await WorkersGateway.start(['--max-concurrent-requests', String(CAP), '--shutdown-grace-ms', '30000']);
});

after(() => g?.cleanup());

/** TTFT samples over every rank in `/v1/gateway/ranks` (each front records the requests it served). */
async function ttftSamples(): Promise<number> {
  const view = JSON.parse((await g.get('/v1/gateway/ranks')).text) as {
    groups: Array<{ ranks: Array<{ ttft_ms: { samples: number } }> }>;
  };
  return view.groups.flatMap((gr) => gr.ranks).reduce((n, r) => n + r.ttft_ms.samples, 0);
}

test('the startup lines name the dashboard by its full URL, as in one process', async () => {
  // /ready may answer before the second front listens, and so before the router's listening line.
  await waitFor(() => g.logged('model-gateway listening on ').length > 0, 'the listening line', 30_000);
  const mentions = g.logs.map((m) => String(m.msg)).filter((msg) => msg.includes('dashboard'));
  assert.ok(
    mentions.some((msg) => msg.endsWith(`; dashboard http://127.0.0.1:${g.port}/dashboard`)),
    JSON.stringify(mentions),
  );
  // Before, the router's serving line (it has no HTTP server of its own) said `dashboard /dashboard`.
  assert.deepEqual(
    mentions.filter((msg) => /dashboard \//.test(msg)),
    [],
    'no dashboard path without its host',
  );
});

test(
  'chat completions through both fronts, streamed and not; /metrics counts every request once',
  { timeout: 60_000 },
  async () => {
    const before = await g.metricSum('model_gateway_requests_total', 'endpoint="/v1/chat/completions"');
    const itl = () => g.metricSum('model_gateway_inter_token_latency_seconds_count', 'endpoint="/v1/chat/completions"');
    const itlBefore = await itl();
    const ttftSamplesBefore = await ttftSamples();
    const body = { model: MODEL, messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 8 };
    for (let i = 0; i < 4; i++) {
      const r = await g.post('/v1/chat/completions', body);
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.equal(r.json.object, 'chat.completion');
      assert.equal(r.json.choices[0].finish_reason, 'length');
      assert.equal(r.json.usage.completion_tokens, 8);
      assert.ok(r.json.choices[0].message.content.length > 0);
    }
    for (let i = 0; i < 2; i++) {
      const r = await g.post('/v1/chat/completions', { ...body, stream: true });
      assert.equal(r.status, 200);
      const text = r.json as string;
      const chunks = text
        .split('\n')
        .filter((l) => l.startsWith('data: {'))
        .map((l) => JSON.parse(l.slice(6)));
      assert.ok(chunks.length >= 2, text);
      assert.equal(chunks.at(-1).choices[0].finish_reason, 'length');
      assert.ok(text.trimEnd().endsWith('data: [DONE]'));
    }
    const after = await g.metricSum('model_gateway_requests_total', 'endpoint="/v1/chat/completions"');
    assert.equal(after - before, 6, 'requests_total summed over both fronts');
    // The ITL histogram (prebucketed-histogram.ts, not a prom-client Histogram) is aggregated over the fronts too.
    assert.ok((await itl()) >= itlBefore + 2, 'ITL samples of the streamed requests');
    // Per-rank latency samples (/v1/gateway/ranks, the dashboard) are every front's, merged.
    for (let i = 0; i < 2; i++)
      assert.equal((await ttftSamples()) - ttftSamplesBefore, 6, 'TTFT samples of both fronts');
    assert.equal(await g.inFlight(), 0);
  },
);

test(
  'n > 1 and X-data-parallel-rank through a front: both choices, the pin placed by the router, an unknown rank 400',
  { timeout: 60_000 },
  async () => {
    const two = await g.post('/v1/chat/completions', {
      model: MODEL,
      messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 4,
      n: 2,
    });
    assert.equal(two.status, 200, JSON.stringify(two.json));
    assert.deepEqual(
      two.json.choices.map((c: { index: number }) => c.index),
      [0, 1],
    );
    const pinnedBefore = await g.metricSum('model_gateway_rank_dispatches_total', 'dp_rank="1",pinned="true"');
    const pinned = await g.post(
      '/v1/completions',
      { model: MODEL, prompt: 'x', max_tokens: 2 },
      { 'x-data-parallel-rank': '1' },
    );
    assert.equal(pinned.status, 200, JSON.stringify(pinned.json));
    assert.equal(
      await g.metricSum('model_gateway_rank_dispatches_total', 'dp_rank="1",pinned="true"'),
      pinnedBefore + 1,
    );
    const unknown = await g.post(
      '/v1/completions',
      { model: MODEL, prompt: 'x', max_tokens: 2 },
      { 'x-data-parallel-rank': '5' },
    );
    assert.equal(unknown.status, 400, JSON.stringify(unknown.json));
  },
);

test(
  'Responses: previous_response_id and GET /v1/responses/{id} work from either front',
  { timeout: 60_000 },
  async () => {
    const first = await g.post('/v1/responses', {
      model: MODEL,
      input: 'Remember the word teal.',
      max_output_tokens: 6,
    });
    assert.equal(first.status, 200, JSON.stringify(first.json));
    const id = first.json.id as string;
    // Four fresh connections: at least two of them land on the front that did not serve the first turn.
    for (let i = 0; i < 4; i++) {
      const next = await g.post('/v1/responses', {
        model: MODEL,
        input: 'Which word?',
        previous_response_id: id,
        max_output_tokens: 4,
      });
      assert.equal(next.status, 200, `turn ${i}: ${JSON.stringify(next.json)}`);
      assert.equal(next.json.previous_response_id, id);
      const fetched = await g.get(`/v1/responses/${id}`);
      assert.equal(fetched.status, 200, fetched.text);
      assert.equal(JSON.parse(fetched.text).id, id);
    }
    const unknown = await g.post('/v1/responses', {
      model: MODEL,
      input: 'x',
      previous_response_id: 'resp_unknown',
      max_output_tokens: 2,
    });
    assert.equal(unknown.status, 404);
  },
);

test(
  `the concurrency cap (${CAP}) is one count over both fronts: 429 + Retry-After beyond it, free again after`,
  { timeout: 60_000 },
  async () => {
    const streams = Array.from({ length: CAP }, () => g.openStream(LONG));
    try {
      await waitUntil(() => streams.every((s) => s.text().includes('data: {')), 'every held stream streaming');
      for (let i = 0; i < 2; i++) {
        const r = await g.post('/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 2 });
        assert.equal(r.status, 429, JSON.stringify(r.json));
        assert.ok(r.headers['retry-after']);
        assert.equal(r.json.error.code, 'rate_limit_exceeded');
      }
    } finally {
      for (const s of streams) s.destroy();
    }
    await waitFor(
      async () => (await g.post('/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 2 })).status === 200,
      'a slot free again',
    );
    await waitFor(async () => (await g.inFlight()) === 0, 'in-flight back to 0');
  },
);

test(
  'a client disconnect reaches the engine as an ABORT and frees the in-flight slot',
  { timeout: 60_000 },
  async () => {
    const abortsBefore = await g.metricSum('model_gateway_aborts_sent_total');
    const s = g.openStream(LONG);
    await waitUntil(() => s.text().split('data: {').length > 3, 'streaming');
    assert.equal(await g.inFlight(), 1);
    s.destroy();
    await waitFor(async () => (await g.inFlight()) === 0, 'in-flight back to 0 after the disconnect');
    await waitFor(
      async () => (await g.metricSum('model_gateway_aborts_sent_total')) === abortsBefore + 1,
      'one ABORT sent',
    );
  },
);

test(
  'SIGTERM with streams live: /ready 503 on every front, new requests 503, the streams finish, exit 0',
  { timeout: 90_000 },
  async () => {
    const body = { model: MODEL, prompt: 'Tell me something.', max_tokens: 120, ignore_eos: true };
    const streams = [0, 1].map(() => g.openStream(body));
    await waitUntil(() => streams.every((s) => s.text().includes('data: {')), 'every stream streaming');
    g.gw.kill('SIGTERM');
    // Both fronts (fresh connections alternate) answer 503 draining.
    await waitFor(async () => {
      const rs = await Promise.all([g.get('/ready'), g.get('/ready')]);
      return rs.every((r) => r.status === 503);
    }, '/ready 503 on both fronts');
    const late = await g.post('/v1/completions', body);
    assert.equal(late.status, 503);
    assert.ok(late.headers['retry-after']);
    assert.equal(late.json.error.code, 'draining');
    const outcomes = await hangGuard(Promise.all(streams.map((s) => s.done)), 60_000, 'streams finishing');
    for (const o of outcomes) {
      assert.equal(o.error, null, JSON.stringify(o));
      assert.ok(o.finished, 'stream ended with [DONE]');
    }
    for (const s of streams) assert.ok(s.text().includes('"finish_reason":"length"'), 'finished normally');
    const [code, signal] = await hangGuard(g.exited, 30_000, 'gateway exit');
    assert.deepEqual({ code, signal }, { code: 0, signal: null }, g.errors);
    assert.ok(g.channelFile !== null, 'the listening line names the channel');
    assert.equal(existsSync(g.channelFile), false, `the channel socket ${g.channelFile} is removed on shutdown`);
  },
);
