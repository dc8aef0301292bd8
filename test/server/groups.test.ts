/**
 * Several engine groups behind one app (issue #3 parts 4-5; gateway.md 4.2, 14, 16): the worker-level choice by
 * best-rank score (src/server/groups.ts), health aggregation (src/server/health.ts), and the routes/health/metrics
 * over fake backends.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { BackendGroup, BackendRankState } from '../../src/server/backend.js';
import { ApiError } from '../../src/server/errors.js';
import { GroupChooser, bestRankScore, lowestGroupPosition } from '../../src/server/groups.js';
import { healthReport } from '../../src/server/health.js';
import { FakeBackend, rankState } from './fake-backend.js';
import { MODEL_ID, makeApp } from './helpers.js';

/** A rank state with `inFlight` requests and an optional stored load (running, waiting, KV usage 0..1). */
function rank(engineIndex: number, inFlight: number, load: [number, number, number] | null = null): BackendRankState {
  return rankState(engineIndex, {
    inFlight,
    load: load && { numRunning: load[0], numWaiting: load[1], kvCacheUsage: load[2] },
  });
}

/** A group over a fresh fake backend with `ranks` and the given rank states. */
function group(
  worker: string,
  engine: 'tokenspeed' | 'vllm',
  states: BackendRankState[],
  ranks = states.map((s) => s.engineIndex),
): { g: BackendGroup; b: FakeBackend } {
  const b = new FakeBackend({ ranks });
  b.rankStatesValue = states;
  if (engine === 'vllm') b.reservedContextTokens = 0;
  return { g: { worker, name: worker.replace(/^ipc:\/\/\/?/, ''), engine, backend: b }, b };
}

describe('bestRankScore and lowestGroupPosition', () => {
  test('the best rank of a group is its lowest load score (dp-routing.md 9.2 step 4)', () => {
    assert.equal(bestRankScore([rank(0, 3), rank(1, 1)]), 1);
    // A stored report above the in-flight count wins the max; the KV penalty adds waiting × 6 × (kv − 0.5).
    assert.equal(bestRankScore([rank(0, 0, [4, 0, 0.9]), rank(1, 2)]), 2);
    assert.equal(bestRankScore([rank(0, 0, [2, 2, 0.75])]), 4 + 2 * 6 * 0.25);
    assert.equal(bestRankScore([]), Infinity);
  });

  test('groups are scored as the rank choice scores ranks: aged reports, TokenSpeed counted once, dark-fleet fallback', () => {
    const busy = { numRunning: 6, numWaiting: 2, kvCacheUsage: 0.2 };
    const at = (age: number | null, inFlight = 1, l: typeof busy | null = busy): BackendRankState =>
      rankState(0, { inFlight, load: l, loadAgeMs: age });
    assert.equal(bestRankScore([at(0)]), 8, 'a fresh vLLM report: running + waiting');
    assert.equal(bestRankScore([at(2500)]), 4, 'half the default 5 s horizon: half the weight');
    assert.equal(bestRankScore([at(2500)], 10_000), 6, 'a longer horizon ages it slower');
    assert.equal(
      bestRankScore([at(5000), rankState(1, { inFlight: 3 })]),
      1,
      'no fresh report in the group: shortest in-flight queue',
    );
    const ts = { ...busy, runningIncludesWaiting: true };
    assert.equal(
      bestRankScore([rankState(0, { inFlight: 0, load: ts, loadAgeMs: 0 })]),
      6,
      "TokenSpeed's running count already holds its waiting ones (14.2)",
    );
    assert.equal(bestRankScore([rankState(0, { state: 'stalled', inFlight: 0 }), at(0)]), 8, 'only ready ranks count');
  });

  test('GroupChooser ages reports with the configured horizon: a stale busy group wins back its traffic', () => {
    const stale = { numRunning: 9, numWaiting: 0, kvCacheUsage: 0.1 };
    const a = group('ipc:///a', 'vllm', [rankState(0, { inFlight: 0, load: stale, loadAgeMs: 4000 })]);
    const b = group('ipc:///b', 'vllm', [
      rankState(0, { inFlight: 2, load: { numRunning: 2, numWaiting: 0, kvCacheUsage: 0.1 }, loadAgeMs: 0 }),
    ]);
    assert.equal(
      new GroupChooser([a.g, b.g]).choose([a.g, b.g]).worker,
      'ipc:///a',
      '9 running at 4 of 5 s counts as 1.8 < 2',
    );
    assert.equal(
      new GroupChooser([a.g, b.g], { loadHorizonMs: 60_000 }).choose([a.g, b.g]).worker,
      'ipc:///b',
      'at 4 of 60 s it still counts as 8.4',
    );
    assert.throws(() => new GroupChooser([a.g], { loadHorizonMs: 0 }), RangeError);
  });

  test('lowest score wins; ties go to the first position scanned from the start', () => {
    assert.equal(lowestGroupPosition([3, 1, 2], 0), 1);
    assert.equal(lowestGroupPosition([0, 0, 0], 0), 0);
    assert.equal(lowestGroupPosition([0, 0, 0], 2), 2);
    assert.equal(lowestGroupPosition([0, 1, 0], 1), 2);
    assert.equal(lowestGroupPosition([5, 5], 7), 1);
    assert.throws(() => lowestGroupPosition([], 0), RangeError);
  });
});

describe('GroupChooser', () => {
  test('chooses the group whose best rank scores lowest; ties rotate', () => {
    const a = group('ipc:///a', 'tokenspeed', [rank(0, 2), rank(1, 2)]);
    const b = group('ipc:///b', 'vllm', [rank(0, 3), rank(1, 1)]);
    const router = new GroupChooser([a.g, b.g]);
    assert.equal(router.choose(router.candidates()).worker, 'ipc:///b', 'best rank 1 beats best rank 2');
    assert.equal(router.choose(router.candidates()).worker, 'ipc:///b', 'whatever the scan start');
    b.b.rankStatesValue = [rank(0, 3), rank(1, 2)];
    // Tie 2 vs 2: the scan start rotates (2 choices made so far → start 0, then 1, then 0).
    assert.deepEqual(
      [0, 1, 2].map(() => router.choose(router.candidates()).worker),
      ['ipc:///a', 'ipc:///b', 'ipc:///a'],
    );
  });

  test('with flow control, a group with room beats a saturated one whatever the scores; all saturated: the scores', () => {
    const a = group('ipc:///a', 'tokenspeed', [rank(0, 1)]);
    const b = group('ipc:///b', 'tokenspeed', [rank(0, 9)]);
    const room = { a: true, b: true };
    Object.assign(a.b, { hasRoom: () => room.a });
    Object.assign(b.b, { hasRoom: () => room.b });
    const router = new GroupChooser([a.g, b.g]);
    assert.equal(router.choose(router.candidates()).worker, 'ipc:///a', 'both have room: the lower score');
    room.a = false;
    assert.equal(router.choose(router.candidates()).worker, 'ipc:///b', 'a is saturated: b has room');
    room.b = false;
    assert.equal(router.choose(router.candidates()).worker, 'ipc:///a', 'both saturated: the lower score again');
  });

  test('a dead group is never a candidate; none alive → 503 engine_dead naming the groups', () => {
    const a = group('ipc:///a', 'tokenspeed', [rank(0, 0)]);
    const b = group('ipc:///b', 'vllm', [rank(0, 9)]);
    const router = new GroupChooser([a.g, b.g]);
    a.b.alive = false;
    for (let i = 0; i < 4; i++) assert.equal(router.choose(router.candidates()).worker, 'ipc:///b');
    b.b.alive = false;
    assert.throws(
      () => router.candidates(),
      (e: unknown) =>
        e instanceof ApiError &&
        e.statusCode === 503 &&
        e.code === 'engine_dead' &&
        e.retryAfterSeconds === 1 &&
        /a \(tokenspeed\): unavailable, .*; b \(vllm\): unavailable/.test(e.message),
    );
  });

  test('every group still starting: 503 engine_starting with Retry-After naming joined/expected ranks (issue #8)', () => {
    const a = group('ipc:///a', 'tokenspeed', [rank(0, 0), { ...rank(1, 0), state: 'joining' }]);
    a.b.statusValue = 'starting';
    const router = new GroupChooser([a.g]);
    assert.throws(
      () => router.candidates(),
      (e: unknown) =>
        e instanceof ApiError &&
        e.statusCode === 503 &&
        e.code === 'engine_starting' &&
        e.retryAfterSeconds === 5 &&
        /starting: .*a \(tokenspeed\): starting, 1 of 2 rank\(s\) joined \(rank 0 ready, rank 1 joining\)/.test(
          e.message,
        ),
    );
  });

  test('a pinned rank narrows the candidates to the serving groups where it is ready; 503 when it is not, 400 when nobody has it', () => {
    const a = group('ipc:///a', 'tokenspeed', [rank(0, 0), rank(1, 0)]);
    const b = group('ipc:///b', 'tokenspeed', [rank(0, 5), rank(1, 5), rank(2, 5)]);
    const router = new GroupChooser([a.g, b.g]);
    assert.deepEqual(router.validRanks(), [0, 1, 2]);
    assert.deepEqual(
      router.candidates(1).map((g) => g.worker),
      ['ipc:///a', 'ipc:///b'],
    );
    assert.deepEqual(
      router.candidates(2).map((g) => g.worker),
      ['ipc:///b'],
    );
    b.b.rankStatesValue[1]!.state = 'stalled';
    assert.deepEqual(
      router.candidates(1).map((g) => g.worker),
      ['ipc:///a'],
      'a stalled rank is not a candidate',
    );
    b.b.alive = false;
    assert.throws(
      () => router.candidates(2),
      (e: unknown) =>
        e instanceof ApiError &&
        e.statusCode === 503 &&
        e.code === 'rank_unavailable' &&
        e.retryAfterSeconds === 1 &&
        /DP rank 2 cannot take requests now \(b: group unavailable\)/.test(e.message),
    );
    assert.throws(
      () => router.candidates(3),
      (e: unknown) =>
        e instanceof ApiError &&
        e.statusCode === 400 &&
        e.param === 'X-data-parallel-rank' &&
        /one of 0, 1, 2.*got '3'/.test(e.message),
    );
  });

  test('maxModelLen is the smallest over the live groups; bad group lists are refused', () => {
    const a = group('ipc:///a', 'tokenspeed', [rank(0, 0)]);
    const b = group('ipc:///b', 'vllm', [rank(0, 0)]);
    a.b.maxModelLen = 1000;
    b.b.maxModelLen = 2000;
    const router = new GroupChooser([a.g, b.g]);
    assert.equal(router.maxModelLen, 1000);
    a.b.alive = false;
    assert.equal(router.maxModelLen, 2000);
    b.b.alive = false;
    assert.equal(router.maxModelLen, 1000, 'all dead: the smallest of all');
    assert.throws(() => new GroupChooser([]), RangeError);
    assert.throws(() => new GroupChooser([a.g, { ...b.g, worker: 'ipc:///a' }]), /duplicate engine group worker name/);
    assert.throws(() => new GroupChooser([a.g, { ...b.g, name: 'a' }]), /duplicate engine group name/);
  });
});

describe('healthReport', () => {
  test('ok when all live, degraded (still 200) when some failed, 503 unhealthy when none lives', () => {
    const a = group('ipc:///a', 'tokenspeed', [rank(0, 0), rank(1, 0)]);
    const b = group('ipc:///b', 'vllm', [rank(0, 0)]);
    const groups = [a.g, b.g];
    let r = healthReport(groups);
    assert.equal(r.statusCode, 200);
    const ready = (engineIndex: number) => ({ engineIndex, state: 'ready', cause: null });
    assert.deepEqual(r.body, {
      status: 'ok',
      groups: [
        {
          name: 'a',
          worker: 'ipc:///a',
          engine: 'tokenspeed',
          alive: true,
          status: 'ok',
          message: 'ok',
          joined: 2,
          expected: 2,
          dpRanks: [0, 1],
          ranks: [ready(0), ready(1)],
          failures: {},
        },
        {
          name: 'b',
          worker: 'ipc:///b',
          engine: 'vllm',
          alive: true,
          status: 'ok',
          message: 'ok',
          joined: 1,
          expected: 1,
          dpRanks: [0],
          ranks: [ready(0)],
          failures: {},
        },
      ],
    });
    a.b.alive = false;
    a.b.stats.failures['engine-core-dead'] = 1;
    r = healthReport(groups);
    assert.equal(r.statusCode, 200);
    assert.equal(r.body.status, 'degraded');
    assert.deepEqual(
      r.body.groups.map((g) => [g.alive, g.message, g.failures]),
      [
        [false, 'engine core dead', { 'engine-core-dead': 1 }],
        [true, 'ok', {}],
      ],
    );
    assert.equal(r.body.error, undefined);
    b.b.alive = false;
    b.b.stats.failures['watchdog'] = 1;
    r = healthReport(groups);
    assert.equal(r.statusCode, 503);
    assert.equal(r.body.status, 'unhealthy');
    assert.equal(r.body.error?.code, 'engine_dead');
    assert.match(r.body.error!.message, /^engine core dead: .*a: engine-core-dead×1; b: watchdog×1/);
  });

  test("503 starting before any group could serve, with each rank's state; a rank shown dead with its cause", () => {
    const a = group('ipc:///a', 'tokenspeed', [
      { ...rank(0, 0), state: 'joining' },
      { ...rank(1, 0), state: 'joining' },
    ]);
    a.b.statusValue = 'starting';
    let r = healthReport([a.g]);
    assert.equal(r.statusCode, 503);
    assert.equal(r.body.status, 'starting');
    assert.equal(r.body.error?.code, 'engine_starting');
    assert.deepEqual(
      r.body.groups.map((g) => [g.status, g.message, g.joined, g.expected]),
      [['starting', 'starting', 0, 2]],
    );
    a.b.statusValue = 'degraded';
    a.b.rankStatesValue = [rank(0, 0), { ...rank(1, 0), state: 'dead', cause: 'peer-unreachable' }];
    r = healthReport([a.g]);
    assert.equal(r.statusCode, 200);
    assert.equal(r.body.status, 'degraded');
    assert.deepEqual(r.body.groups[0]!.ranks, [
      { engineIndex: 0, state: 'ready', cause: null },
      { engineIndex: 1, state: 'dead', cause: 'peer-unreachable' },
    ]);
    assert.deepEqual(r.body.groups[0]!.dpRanks, [0]);
  });
});

describe('routes over two groups', () => {
  const chat = { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4 };

  test('requests go to the less loaded group, never to a dead one; /health and /metrics show each group', async () => {
    const a = group('ipc:///a', 'tokenspeed', [rank(0, 2), rank(1, 2)]);
    const b = group('ipc:///b', 'vllm', [rank(0, 1)]);
    for (const x of [a, b]) x.b.onSubmit = (s) => s.stream.pushAll([9707], 'length');
    const { app } = await makeApp({ groups: [a.g, b.g] });
    try {
      const first = await app.inject({ method: 'POST', url: '/v1/chat/completions', payload: chat });
      assert.equal(first.statusCode, 200);
      assert.deepEqual([a.b.submissions.length, b.b.submissions.length], [0, 1], 'group b (best rank 1 < 2) served it');
      a.b.rankStatesValue = [rank(0, 0), rank(1, 2)];
      await app.inject({ method: 'POST', url: '/v1/chat/completions', payload: chat });
      assert.deepEqual([a.b.submissions.length, b.b.submissions.length], [1, 1], 'now group a has an idle rank');

      // Group a fails: every request goes to b, even though a looks idle; /health stays 200 and lists a as dead.
      a.b.alive = false;
      a.b.stats.failures['engine-core-dead'] = 1;
      for (let i = 0; i < 3; i++) {
        assert.equal(
          (await app.inject({ method: 'POST', url: '/v1/chat/completions', payload: chat })).statusCode,
          200,
        );
      }
      assert.deepEqual([a.b.submissions.length, b.b.submissions.length], [1, 4]);
      const health = await app.inject({ method: 'GET', url: '/health?verbose=1' });
      assert.equal(health.statusCode, 200);
      assert.equal(health.json().status, 'degraded');
      assert.deepEqual(
        health
          .json()
          .groups.map((g: { worker: string; alive: boolean; message: string }) => [g.worker, g.alive, g.message]),
        [
          ['ipc:///a', false, 'engine core dead'],
          ['ipc:///b', true, 'ok'],
        ],
      );
      const metrics = (await app.inject({ method: 'GET', url: '/metrics' })).body.split('\n');
      const m = `model="${MODEL_ID}"`;
      assert.ok(metrics.includes(`model_gateway_engine_alive{${m},group="a",engine="tokenspeed"} 0`));
      assert.ok(metrics.includes(`model_gateway_engine_alive{${m},group="b",engine="vllm"} 1`));
      assert.ok(metrics.includes(`model_gateway_rank_inflight_requests{${m},group="a",dp_rank="1"} 2`));
      assert.ok(metrics.includes(`model_gateway_rank_inflight_requests{${m},group="b",dp_rank="0"} 1`));
      assert.ok(metrics.includes(`model_gateway_engine_failures_total{${m},group="a",cause="engine-core-dead"} 1`));

      // Both dead: 503 before any submit.
      b.b.alive = false;
      const refused = await app.inject({ method: 'POST', url: '/v1/chat/completions', payload: chat });
      assert.equal(refused.statusCode, 503);
      assert.equal(refused.json().error.code, 'engine_dead');
      assert.deepEqual([a.b.submissions.length, b.b.submissions.length], [1, 4], 'nothing submitted');
      assert.equal((await app.inject({ method: 'GET', url: '/health' })).statusCode, 503);
    } finally {
      await app.close();
    }
  });

  test('a pin is served by a group that has the rank and applies inside it; an unknown rank is a 400', async () => {
    const a = group('ipc:///a', 'tokenspeed', [rank(0, 0), rank(1, 0)]);
    const b = group('ipc:///b', 'tokenspeed', [rank(0, 4), rank(1, 4), rank(2, 4)]);
    for (const x of [a, b]) x.b.onSubmit = (s) => s.stream.pushAll([9707], 'length');
    const { app } = await makeApp({ groups: [a.g, b.g] });
    try {
      const pinned = (r: string) =>
        app.inject({
          method: 'POST',
          url: '/v1/chat/completions',
          payload: chat,
          headers: { 'x-data-parallel-rank': r },
        });
      assert.equal((await pinned('2')).statusCode, 200);
      assert.deepEqual(
        b.b.submissions.map((s) => s.dpRank),
        [2],
        'only group b has rank 2',
      );
      assert.equal((await pinned('1')).statusCode, 200);
      assert.deepEqual(
        a.b.submissions.map((s) => s.dpRank),
        [1],
        'rank 1 exists in both: the less loaded group a',
      );
      const bad = await pinned('3');
      assert.equal(bad.statusCode, 400);
      assert.match(bad.json().error.message, /one of 0, 1, 2/);
    } finally {
      await app.close();
    }
  });

  test("admission uses the chosen group's context: a prompt only the larger group fits goes there, with its default limit", async () => {
    // Group a (TokenSpeed, reserves 2) is idle but small; group b (vLLM, reserves 0) is busier but larger.
    const a = group('ipc:///a', 'tokenspeed', [rank(0, 0)]);
    const b = group('ipc:///b', 'vllm', [rank(0, 3)]);
    a.b.maxModelLen = 16;
    b.b.maxModelLen = 64;
    for (const x of [a, b]) x.b.onSubmit = (s) => s.stream.pushAll([9707], 'length');
    const { app } = await makeApp({ groups: [a.g, b.g] });
    try {
      const prompt = Array.from({ length: 20 }, (_, i) => 100 + i);
      const res = await app.inject({ method: 'POST', url: '/v1/completions', payload: { prompt } });
      assert.equal(res.statusCode, 200);
      assert.equal(a.b.submissions.length, 0);
      assert.equal(
        b.b.submissions[0]!.request.sampling.maxNewTokens,
        64 - 20,
        'vLLM always gets max_tokens = max_model_len − prompt',
      );
      // A short prompt fits both: the idle group a wins, its default limit is its own usable context minus the prompt.
      const short = await app.inject({ method: 'POST', url: '/v1/completions', payload: { prompt: [100, 101, 102] } });
      assert.equal(short.statusCode, 200);
      assert.equal(a.b.submissions[0]!.request.sampling.maxNewTokens, 16 - 2 - 3);
      // Fits nobody: the 400 names the largest context.
      const huge = await app.inject({
        method: 'POST',
        url: '/v1/completions',
        payload: { prompt: Array.from({ length: 64 }, () => 100) },
      });
      assert.equal(huge.statusCode, 400);
      assert.match(huge.json().error.message, /maximum context length is 64 tokens/);
    } finally {
      await app.close();
    }
  });
});

describe('groups by task (--tasks)', () => {
  test('candidates keep the groups that serve the task; none serving it is a 400, none alive a 503', () => {
    const ts = group('ts', 'tokenspeed', [rank(0, 0)]);
    const vl = group('vl', 'vllm', [rank(0, 0)]);
    const embedding = { ...vl.g, tasks: ['generate', 'embed'] as const };
    const chooser = new GroupChooser([ts.g, embedding]);
    assert.deepEqual(
      chooser.candidates(undefined, 'embed').map((g) => g.worker),
      ['vl'],
    );
    assert.deepEqual(
      chooser.candidates().map((g) => g.worker),
      ['ts', 'vl'],
      'generation goes to either',
    );
    vl.b.alive = false;
    assert.throws(
      () => chooser.candidates(undefined, 'embed'),
      (e: unknown) => e instanceof ApiError && e.statusCode === 503,
      'the embedding group exists but cannot serve now',
    );
    const tokenspeedOnly = new GroupChooser([ts.g]);
    assert.throws(
      () => tokenspeedOnly.candidates(undefined, 'embed'),
      (e: unknown) =>
        e instanceof ApiError && e.statusCode === 400 && e.code === 'unsupported_task' && /TokenSpeed/.test(e.message),
    );
    const embedOnly = new GroupChooser([{ ...group('e', 'vllm', [rank(0, 0)]).g, tasks: ['embed'] }]);
    assert.throws(
      () => embedOnly.candidates(),
      (e: unknown) => e instanceof ApiError && e.statusCode === 400 && e.code === 'unsupported_task',
      'a pooling-only group takes no chat',
    );
  });
});
