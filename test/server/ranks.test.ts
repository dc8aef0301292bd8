/**
 * GET /v1/gateway/ranks, the per-rank statistics behind it (rank-stats.ts) and the dashboard's static files
 * (issue #13 part 2).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RankStatsBook, RATE_WINDOW_S, RING_SIZE, mergeRankStats, percentile } from '../../src/server/rank-stats.js';
import { ranksView } from '../../src/server/routes/ranks.js';
import { GatewayEvents } from '../../src/server/gateway-events.js';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { FakeBackend, rankState } from './fake-backend.js';
import { WORKER, makeApp } from './helpers.js';

test('percentile: nearest rank over an ascending array; null when empty', () => {
  assert.equal(percentile([], 0.5), null);
  assert.equal(percentile([7], 0.99), 7);
  const xs = Array.from({ length: 100 }, (_, i) => i + 1);
  assert.equal(percentile(xs, 0.5), 50);
  assert.equal(percentile(xs, 0.9), 90);
  assert.equal(percentile(xs, 0.99), 99);
  assert.equal(percentile(xs, 1), 100);
});

test('RankStatsBook: rates over the last whole seconds, percentiles over the last RING_SIZE samples, per rank', () => {
  const book = new RankStatsBook();
  const t0 = 1_000_000;
  // 3 dispatches a second for 5 s on rank 0 of WORKER; nothing on rank 1.
  for (let s = 0; s < 5; s++) for (let k = 0; k < 3; k++) book.recordDispatch('w', 0, t0 + s * 1000 + k * 10);
  const now = t0 + 5 * 1000 + 1;
  assert.equal(book.snapshot('w', 0, now).dispatchRate, 15 / RATE_WINDOW_S);
  assert.equal(book.snapshot('w', 1, now).dispatchRate, 0);
  // Old seconds fall out of the window.
  assert.equal(book.snapshot('w', 0, now + (RATE_WINDOW_S + 5) * 1000).dispatchRate, 0);
  // TTFT / ITL: more samples than the ring holds keep the newest ones.
  for (let i = 0; i < RING_SIZE + 100; i++) book.recordTokens('w', 0, now, 1, { ttftMs: i < 100 ? 10_000 : i });
  book.recordTokens('w', 0, now, 4, { itlMsPerToken: 2 });
  book.recordTokens('w', 0, now, 4, { itlMsPerToken: Number.NaN }); // ignored
  const snap = book.snapshot('w', 0, now + 1000);
  assert.equal(snap.ttftMs.samples, RING_SIZE);
  assert.ok(snap.ttftMs.p99! < 10_000, 'the 100 oldest samples were overwritten');
  assert.deepEqual(snap.itlMs, { p50: 2, p90: 2, p99: 2, samples: 1 });
  assert.equal(snap.tokenRate, (RING_SIZE + 100 + 8) / RATE_WINDOW_S);
  assert.deepEqual(book.snapshot('other', 0, now).ttftMs, { p50: null, p90: null, p99: null, samples: 0 });
  book.forgetRank('w', 0);
  assert.equal(book.snapshot('w', 0, now + 1000).ttftMs.samples, 0);
});

test('GET /v1/gateway/ranks: every rank of every group with its load, counters, rates and latencies', async () => {
  const backend = new FakeBackend({ ranks: [0, 1] });
  backend.rankStatesValue = [
    rankState(0, {
      inFlight: 2,
      load: { numRunning: 3, numWaiting: 1, kvCacheUsage: 0.25 },
      dispatchedPinned: 1,
      dispatchedUnpinned: 7,
      clampEvents: 2,
      abortsSent: 4,
      rejoins: 1,
    }),
    rankState(1, { inFlight: 0, load: null, dispatchedPinned: 0, dispatchedUnpinned: 0, clampEvents: 0 }),
  ];
  // Two token-bearing outputs per request: a TTFT and an ITL sample on the rank that served it (the fake's rank 0).
  backend.onSubmit = (s) => {
    s.stream.push([9707]);
    setTimeout(() => s.stream.push([11, 1879], 'length'), 5);
  };
  const { app } = await makeApp({ backend });
  try {
    for (let i = 0; i < 3; i++) {
      assert.equal(
        (await app.inject({ method: 'POST', url: '/v1/completions', payload: { prompt: 'x', max_tokens: 3 } }))
          .statusCode,
        200,
      );
    }
    const res = await app.inject({ method: 'GET', url: '/v1/gateway/ranks' });
    assert.equal(res.statusCode, 200);
    assert.equal(res.headers['cache-control'], 'no-store');
    const body = res.json();
    assert.equal(body.object, 'gateway.ranks');
    assert.deepEqual(body.served_model_names, ['test-model']);
    assert.deepEqual(body.server, {
      num_requests_running: 2,
      num_requests_waiting: 1,
      kv_cache_usage_perc: 0.25,
      in_flight: 2,
      ranks: 2,
    });
    assert.equal(body.groups.length, 1);
    const [g] = body.groups;
    assert.equal(g.worker, WORKER);
    assert.equal(g.alive, true);
    const [r0, r1] = g.ranks;
    assert.deepEqual(
      // Rates depend on which wall-clock second the requests fell in: checked by the RankStatsBook test instead.
      {
        ...r0,
        ttft_ms: undefined,
        itl_ms: undefined,
        generation_tokens_per_second: undefined,
        dispatch_rate: undefined,
      },
      {
        dp_rank: 0,
        state: 'ready',
        cause: null,
        in_flight: 2,
        num_running_reqs: 3,
        num_waiting_reqs: 1,
        kv_cache_usage: 0.25,
        dispatched_pinned: 1,
        dispatched_unpinned: 7,
        clamp_events: 2,
        aborts_sent: 4,
        rejoins: 1,
        dispatch_rate: undefined,
        sole_client_guard: null,
        aborting: null,
        batches: null,
        ttft_ms: undefined,
        itl_ms: undefined,
        generation_tokens_per_second: undefined,
      },
    );
    assert.equal(r0.ttft_ms.samples, 3);
    assert.equal(r0.itl_ms.samples, 3);
    assert.ok(
      r0.ttft_ms.p50 >= 0 && r0.ttft_ms.p50 <= r0.ttft_ms.p90 && r0.ttft_ms.p90 <= r0.ttft_ms.p99,
      JSON.stringify(r0.ttft_ms),
    );
    assert.equal(r1.num_running_reqs, null, 'a rank without a report has no load');
    assert.equal(r1.ttft_ms.p50, null);

    // The lifecycle state is shown when the engine client reports it.
    (backend.rankStatesValue[1] as { state?: string }).state = 'stalled';
    const again = (await app.inject({ method: 'GET', url: '/v1/gateway/ranks' })).json();
    assert.equal(again.groups[0].ranks[1].state, 'stalled');
  } finally {
    await app.close();
  }
});

test('a rank that rejoins as a fresh process starts with no latency samples; a first join keeps them', async () => {
  const backend = new FakeBackend({ ranks: [0] });
  backend.onSubmit = (s) => {
    s.stream.push([9707]);
    setTimeout(() => s.stream.push([11], 'length'), 2);
  };
  const { app } = await makeApp({ backend });
  const samples = async () =>
    (await app.inject({ method: 'GET', url: '/v1/gateway/ranks' })).json().groups[0].ranks[0].ttft_ms.samples;
  try {
    for (let i = 0; i < 2; i++) {
      assert.equal(
        (await app.inject({ method: 'POST', url: '/v1/completions', payload: { prompt: 'x', max_tokens: 2 } }))
          .statusCode,
        200,
      );
    }
    assert.equal(await samples(), 2);
    backend.emitJoined(0, false);
    assert.equal(await samples(), 2, 'a first join is not a new process of a known rank');
    backend.emitJoined(0, true);
    assert.equal(await samples(), 0, 'the rejoined process starts afresh');
  } finally {
    await app.close();
  }
});

test('ranksView reports a dead group with its ranks, and leaves it out of the server totals', () => {
  const live = new FakeBackend({ ranks: [0] });
  live.rankStatesValue = [
    rankState(0, {
      inFlight: 1,
      load: { numRunning: 1, numWaiting: 0, kvCacheUsage: 0.5 },
      dispatchedPinned: 0,
      dispatchedUnpinned: 1,
      clampEvents: 0,
    }),
  ];
  const dead = new FakeBackend({ ranks: [0] });
  dead.alive = false;
  dead.rankStatesValue = [
    rankState(0, {
      inFlight: 0,
      load: { numRunning: 9, numWaiting: 9, kvCacheUsage: 0.9 },
      dispatchedPinned: 0,
      dispatchedUnpinned: 5,
      clampEvents: 0,
    }),
  ];
  const view = ranksView(
    [
      { worker: 'a', name: 'a', engine: 'vllm', backend: live },
      { worker: 'b', name: 'b', engine: 'vllm', backend: dead },
    ],
    new RankStatsBook(),
    0,
    ['m'],
    4321,
    new GatewayEvents(),
  );
  assert.deepEqual(view.routing, { load_horizon_ms: 4321 });
  assert.deepEqual(
    view.groups.map((g) => [g.worker, g.alive, g.ranks.length]),
    [
      ['a', true, 1],
      ['b', false, 1],
    ],
  );
  assert.deepEqual(view.server, {
    num_requests_running: 1,
    num_requests_waiting: 0,
    kv_cache_usage_perc: 0.5,
    in_flight: 1,
    ranks: 1,
  });
});

test('the dashboard is served as static files with their content types, no key needed', async () => {
  const { app } = await makeApp();
  try {
    for (const [url, type, marker] of [
      ['/dashboard', 'text/html', '<script type="module" src="/dashboard/app.js">'],
      ['/dashboard/', 'text/html', '<title>model-gateway dashboard</title>'],
      ['/dashboard/app.js', 'text/javascript', "fetch('/v1/gateway/ranks'"],
      ['/dashboard/style.css', 'text/css', 'section.group'],
      ['/dashboard/charts.js', 'text/javascript', 'new uPlot('],
      ['/dashboard/events.js', 'text/javascript', 'events_source'],
      // uPlot from node_modules (the `uplot` package), same origin: the CSP stays 'self'.
      ['/dashboard/vendor/uPlot.iife.min.js', 'text/javascript', 'uPlot'],
      ['/dashboard/vendor/uPlot.min.css', 'text/css', '.uplot'],
    ] as const) {
      const res = await app.inject({ method: 'GET', url });
      assert.equal(res.statusCode, 200, url);
      assert.match(String(res.headers['content-type']), new RegExp(`^${type}`), url);
      assert.match(String(res.headers['content-security-policy']), /default-src 'none'/);
      assert.ok(res.body.includes(marker), `${url} contains ${marker}`);
    }
    assert.equal((await app.inject({ method: 'GET', url: '/dashboard/secret.txt' })).statusCode, 404);
    assert.equal((await app.inject({ method: 'POST', url: '/dashboard' })).statusCode, 405);
  } finally {
    await app.close();
  }
});

test('mergeRankStats: several books as one (rates summed, percentiles over the union of the samples)', () => {
  const a = new RankStatsBook();
  const b = new RankStatsBook();
  for (const [book, ttft] of [
    [a, 10],
    [a, 20],
    [b, 30],
    [b, 40],
  ] as const) {
    book.recordDispatch('w', 0, 1000);
    book.recordTokens('w', 0, 1000, 2, { ttftMs: ttft });
  }
  b.recordTokens('w', 1, 1000, 1, { itlMsPerToken: 5 });
  const merged = mergeRankStats([...a.exportAll(3000), ...b.exportAll(3000)]);
  const r0 = merged.snapshot('w', 0, 0);
  assert.equal(r0.ttftMs.samples, 4);
  assert.equal(r0.ttftMs.p50, 20);
  assert.equal(r0.ttftMs.p99, 40);
  assert.equal(r0.dispatchRate, a.snapshot('w', 0, 3000).dispatchRate + b.snapshot('w', 0, 3000).dispatchRate);
  assert.equal(r0.tokenRate, (4 * 2) / 10);
  assert.equal(merged.snapshot('w', 1, 0).itlMs.samples, 1);
  assert.deepEqual(merged.snapshot('other', 0, 0).ttftMs, { p50: null, p90: null, p99: null, samples: 0 });
});

test('RankStatsBook.recent: TTFT and ITL percentiles over every rank of the last RATE_WINDOW_S seconds; merged too', () => {
  const book = new RankStatsBook();
  const t0 = 1_000_000;
  book.recordTokens('w', 0, t0, 1, { ttftMs: 900 }); // falls out of the window below
  book.recordTokens('w', 0, t0 + 5000, 1, { ttftMs: 10 });
  book.recordTokens('w', 1, t0 + 6000, 1, { ttftMs: 30 });
  book.recordTokens('v', 0, t0 + 7000, 1, { ttftMs: 20 });
  book.recordTokens('v', 0, t0 + 7000, 3, { itlMsPerToken: 4 });
  const now = t0 + RATE_WINDOW_S * 1000 + 1;
  const recent = book.recent(now);
  assert.deepEqual(recent.ttftMs, { p50: 20, p90: 30, p99: 30, samples: 3 });
  assert.deepEqual(recent.itlMs, { p50: 4, p90: 4, p99: 4, samples: 1 });
  assert.equal(book.snapshot('w', 0, now).ttftMs.samples, 2, 'the per-rank percentiles keep the older sample');
  assert.deepEqual(book.recent(now + 10 * RATE_WINDOW_S * 1000).ttftMs, {
    p50: null,
    p90: null,
    p99: null,
    samples: 0,
  });
  const other = new RankStatsBook();
  other.recordTokens('w', 0, now - 1, 1, { ttftMs: 40 });
  const merged = mergeRankStats([...book.exportAll(now), ...other.exportAll(now)]);
  assert.deepEqual(merged.recent(0).ttftMs, { p50: 20, p90: 40, p99: 40, samples: 4 });
});

test('GET /v1/gateway/ranks: the recent latency, and the events of the backends, 429 bursts and engine failures', async () => {
  const clock = { t: 1_700_000_000_000 };
  const events = new GatewayEvents({ now: () => clock.t });
  const backend = new FakeBackend({ ranks: [0, 1] });
  const { app } = await makeApp({ backend, events });
  const post = (payload: object) => app.inject({ method: 'POST', url: '/v1/completions', payload });
  const ranks = async () => (await app.inject({ method: 'GET', url: '/v1/gateway/ranks' })).json();
  try {
    backend.emitJoined(1, true);
    backend.emitEvent('rank', 1, 'dead', 'engine-core-dead');
    backend.rankStatesValue = [rankState(0), rankState(1, { state: 'dead', cause: 'engine-core-dead' })];
    // Two refusals (flow control's 429) and a request the engine fails mid-stream, in one burst window each.
    backend.submitError = new EngineClientError('overloaded', 'the group stayed saturated');
    for (let i = 0; i < 2; i++) assert.equal((await post({ prompt: 'x', max_tokens: 2 })).statusCode, 429);
    backend.submitError = null;
    backend.onSubmit = (s) => {
      s.stream.push([9707]);
      setTimeout(() => s.stream.fail(new EngineClientError('engine-dead', 'DP rank 0 died', { dpRank: 0 })), 2);
    };
    const failed = await post({ prompt: 'x', max_tokens: 5, stream: true });
    assert.match(failed.body, /engine_dead/);
    let body = await ranks();
    assert.deepEqual(
      body.events.map((e: { kind: string }) => e.kind),
      ['rank_rejoined', 'rank_died'],
      'the bursts are still open',
    );
    assert.deepEqual(body.groups[0].ranks[1].state, 'dead');
    assert.deepEqual(body.groups[0].ranks[1].cause, 'engine-core-dead');
    assert.equal(body.events_source, events.source);
    assert.equal(body.latency.window_s, RATE_WINDOW_S);
    clock.t += 1000;
    body = await ranks();
    assert.deepEqual(
      body.events.map(
        (e: { id: number; kind: string; group: string | null; dp_rank: number | null; count: number }) => [
          e.id,
          e.kind,
          e.group,
          e.dp_rank,
          e.count,
        ],
      ),
      [
        [1, 'rank_rejoined', 'tokenspeed-0', 1, 1],
        [2, 'rank_died', 'tokenspeed-0', 1, 1],
        [3, 'refused', null, null, 2],
        [4, 'engine_errors', 'tokenspeed-0', 0, 1],
      ],
    );
    assert.equal(body.events[1].cause, 'engine-core-dead');
    assert.equal(body.events[2].message, '429 ×2 in 1 s (overloaded ×2)');
    assert.ok(body.latency.ttft_ms.samples >= 1, JSON.stringify(body.latency));
  } finally {
    await app.close();
  }
});
