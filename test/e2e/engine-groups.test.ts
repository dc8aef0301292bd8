/**
 * End to end: one gateway serving two engine groups at once (issue #3 parts 4-5; gateway.md 4.2, 16): a simulated
 * TokenSpeed group and a simulated vLLM group (two rank processes each, one transport each). Requests spread over
 * both groups by best-rank score; then every rank of the TokenSpeed group gets SIGTERM (each sends ENGINE_CORE_DEAD,
 * engine-wire.md 1.7, and is tied to it when its identity vanishes; issue #8): its in-flight requests end with an SSE
 * error event, /health and /metrics show that group unable to serve (every rank dead) and the other healthy, the vLLM
 * group's requests keep streaming, and new requests succeed through it.
 *
 * Determinism: the long requests use `ignore_eos` and a 20 000-token limit, so none finishes during the test; while a
 * rank holds only requests this gateway routed, its report never exceeds the client's own in-flight count, so the
 * group choice (lowest best-rank score, src/server/groups.ts) only depends on dispatch counts. Timing appears only in
 * hang guards and in the diagnostics (how long the failed requests took to end). Runs in-process or against
 * `serve --workers N` (GATEWAY_TEST_WORKERS; test/helpers/test-gateway.ts), read over HTTP; the engine client's request
 * registry is checked in-process only (no endpoint shows it).
 */
import assert from 'node:assert/strict';
import { get } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { waitFor } from '../helpers/async.js';
import { waitAllGone } from '../helpers/processes.js';
import { startTestGateway, type TestGateway, type TestGroup } from '../helpers/test-gateway.js';
import { openStream, type CompletionBody, type HeldStream } from './spread-helpers.js';

const MODEL = 'sim-qwen3';
const LONG: CompletionBody = {
  model: MODEL,
  prompt: 'Tell me a very long story.',
  max_tokens: 20_000,
  ignore_eos: true,
};
const SHORT: CompletionBody = { model: MODEL, prompt: 'Say a few words.', max_tokens: 6, ignore_eos: true };
const TIMEOUT = { timeout: 120_000 };
/** A load report ageing horizon other than the default (5000 ms), to see that it reached the group chooser. */
const LOAD_HORIZON_MS = 4321;

/** GET `url` on a connection of its own (no keep-alive pool) and parse the JSON body. */
function getFresh(url: string): Promise<{ routing: unknown }> {
  return new Promise((resolve, reject) => {
    get(url, { agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => {
        try {
          resolve(JSON.parse(body) as { routing: unknown });
        } catch (err) {
          reject(err instanceof Error ? err : new Error(String(err)));
        }
      });
      res.on('error', reject);
    }).on('error', reject);
  });
}

/** `/metrics` sample lines of `name` (without the name), e.g. `{model="m",group="vllm-0",engine="vllm"} 1`. */
async function scrape(url: string, name: string): Promise<string[]> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`))
    .map((l) => l.slice(name.length));
}

describe('two engine groups (TokenSpeed + vLLM) behind one gateway; one group fails', () => {
  let gateway: TestGateway;
  let tokenspeed: TestGroup;
  let vllm: TestGroup;
  /** Group `g`'s ranks (0 TokenSpeed, 1 vLLM) in /v1/gateway/ranks. */
  const inFlight = async (g: 0 | 1): Promise<number[]> => (await gateway.rankStates(g)).map((r) => r.in_flight);
  const dispatched = async (g: 0 | 1): Promise<number> =>
    (await gateway.rankStates(g)).reduce((n, r) => n + r.dispatched_unpinned + r.dispatched_pinned, 0);
  /** The engine client's registry of group `g` is empty (in-process only: no endpoint shows the registry). */
  const assertNoneRegistered = (g: 0 | 1, what: string): void => {
    if (gateway.inProcess !== null) assert.equal(gateway.inProcess.groups[g]!.client.registeredCount, 0, what);
  };
  const opened: HeldStream[] = [];
  const open = async (body: CompletionBody): Promise<HeldStream> => {
    const s = await openStream(gateway.url, body);
    opened.push(s);
    assert.equal(s.status, 200, 'streaming request accepted');
    return s;
  };

  before(async () => {
    gateway = await startTestGateway({
      modelId: MODEL,
      dpPolicyOptions: { loadHorizonMs: LOAD_HORIZON_MS },
      groups: [
        { engine: 'tokenspeed', sim: 2, simArgs: ['--time-scale', '5', '--log-level', 'warn'], name: 'blue' },
        { engine: 'vllm', sim: 2, simArgs: ['--time-scale', '5', '--log-level', 'warn'] },
      ],
    });
    [tokenspeed, vllm] = (await gateway.groups()) as [TestGroup, TestGroup];
    assert.equal(tokenspeed.engine, 'tokenspeed');
    assert.equal(vllm.engine, 'vllm');
    assert.notEqual(tokenspeed.worker, vllm.worker);
    assert.deepEqual([tokenspeed.name, vllm.name], ['blue', 'vllm-0'], '--group-name, else the family and an index');
  });

  after(async () => {
    for (const s of opened) s.cancel();
    await Promise.all(opened.map((s) => s.done));
    await gateway?.close();
  });

  test(
    '--load-horizon-ms reaches every process that chooses a group (with --workers N, every front)',
    TIMEOUT,
    async () => {
      // A new connection per request: node:cluster's primary hands connections to the fronts in turn, so 2 × N
      // requests reach every front.
      const views = await Promise.all(
        Array.from(
          { length: 2 * gateway.workers },
          async () => (await getFresh(`${gateway.url}/v1/gateway/ranks`)).routing,
        ),
      );
      assert.deepEqual(
        views,
        Array.from({ length: 2 * gateway.workers }, () => ({ load_horizon_ms: LOAD_HORIZON_MS })),
      );
    },
  );

  test('both groups serve; /health lists both as ok', TIMEOUT, async () => {
    const outcomes = await Promise.all([0, 1, 2, 3].map(async () => (await open(SHORT)).done));
    for (const o of outcomes)
      assert.ok(o.completed && o.finishReason === 'length' && o.text.length > 0, JSON.stringify(o));
    const served = [await dispatched(0), await dispatched(1)];
    assert.ok(served[0]! > 0 && served[1]! > 0, `both groups served: ${served.join('/')}`);
    await waitFor(
      async () => [...(await inFlight(0)), ...(await inFlight(1))].every((n) => n === 0),
      'in-flight sets empty',
      20_000,
    );
    const health = await fetch(`${gateway.url}/health?verbose=1`); // worker names are socket paths: verbose only
    assert.equal(health.status, 200);
    const body = (await health.json()) as {
      status: string;
      groups: { worker: string; engine: string; alive: boolean; message: string }[];
    };
    assert.equal(body.status, 'ok');
    assert.deepEqual(
      body.groups.map((g) => [g.worker, g.engine, g.alive, g.message]),
      [
        [tokenspeed.worker, 'tokenspeed', true, 'ok'],
        [vllm.worker, 'vllm', true, 'ok'],
      ],
    );
    // Operators see names: /metrics labels groups by name, and no socket path appears anywhere in it (issue 32).
    const metrics = await gateway.metricsText();
    for (const g of [tokenspeed, vllm]) {
      assert.ok(metrics.includes(`group="${g.name}"`), `series labelled group="${g.name}"`);
      assert.ok(!metrics.includes(g.worker.slice('ipc://'.length)), `no socket path of ${g.name} in /metrics`);
    }
    assert.ok(!metrics.includes('ipc://'), 'no ipc:// address in /metrics');
    // The gateway's own processes: prom-client's default series, by process role (the fronts summed).
    const roles = gateway.workers > 1 ? ['router', 'front'] : ['gateway'];
    for (const role of roles) {
      for (const name of [
        'process_cpu_seconds_total',
        'process_resident_memory_bytes',
        'nodejs_eventloop_lag_p99_seconds',
      ])
        assert.ok(
          metrics.split('\n').some((l) => l.startsWith(`${name}{`) && l.includes(`role="${role}"`)),
          `${name}{role="${role}"}`,
        );
    }
    const plain = await (await fetch(`${gateway.url}/health`)).text();
    assert.ok(plain.includes('"name":"blue"') && !plain.includes('ipc://'), plain);
  });

  test(
    'SIGTERM of every TokenSpeed rank: its requests end with an error, the vLLM group keeps serving',
    TIMEOUT,
    async (t) => {
      // Four long requests: the lowest best-rank score spreads them one per rank (a group holding one request per
      // rank scores 1, an idle group 0).
      const tsBefore = await dispatched(0);
      const vlBefore = await dispatched(1);
      const streams: HeldStream[] = [];
      for (let i = 0; i < 4; i++) streams.push(await open(LONG));
      assert.deepEqual(await inFlight(0), [1, 1], 'one request per TokenSpeed rank');
      assert.deepEqual(await inFlight(1), [1, 1], 'one request per vLLM rank');
      assert.equal((await dispatched(0)) - tsBefore, 2);
      assert.equal((await dispatched(1)) - vlBefore, 2);
      // Which stream went where is not visible over HTTP: the two that end when the TokenSpeed group dies were its own.

      const killedAt = performance.now();
      const endedAt = new Map<HeldStream, number>();
      for (const s of streams) void s.done.then(() => endedAt.set(s, performance.now()));
      const tsRanks = gateway
        .simRanks()
        .filter((r) => r.handshake === tokenspeed.handshake)
        .map((r) => r.pid);
      assert.equal(tsRanks.length, 2, "the TokenSpeed group's rank processes");
      for (const pid of tsRanks) process.kill(pid, 'SIGTERM');
      await waitAllGone(tsRanks);

      await waitFor(
        async () => (await gateway.rankStates(0)).every((r) => r.state === 'dead'),
        'every TokenSpeed rank is marked dead',
        20_000,
      );
      await waitFor(
        () => endedAt.size === 2,
        'two streams ended',
        20_000,
        () => [...endedAt.values()],
      );
      const failed = streams.filter((s) => endedAt.has(s));
      const outcomes = await Promise.all(failed.map((s) => s.done));
      for (const o of outcomes) {
        assert.ok(o.completed, 'the failed stream still ends with [DONE]');
        assert.equal(o.finishReason, null, 'no finish reason: the request did not finish');
        assert.ok(o.error !== null, `an SSE error event: ${JSON.stringify(o)}`);
        assert.match(o.error.message, /engine/);
      }
      t.diagnostic(
        `ENGINE_CORE_DEAD after SIGTERM: the group's in-flight requests ended ${failed.map((s) => `${(endedAt.get(s)! - killedAt).toFixed(0)} ms`).join(', ')} after the signal`,
      );
      assert.deepEqual(await inFlight(0), [0, 0], "the failed group's in-flight sets are cleared");
      const deaths = (await scrape(gateway.url, 'model_gateway_rank_deaths_total')).filter(
        (l) => l.includes(`group="${tokenspeed.name}"`) && !l.endsWith(' 0'),
      );
      assert.equal(
        deaths.reduce((n, l) => n + Number(l.slice(l.lastIndexOf(' ') + 1)), 0),
        2,
        deaths.join('\n'),
      );
      assert.ok(
        deaths.every((l) => /cause="(engine-core-dead|peer-unreachable)"/.test(l)),
        deaths.join('\n'),
      );
      assertNoneRegistered(0, 'no request left registered in the failed group');

      // The vLLM group's requests are untouched and still streaming.
      assert.deepEqual(await inFlight(1), [1, 1]);
      const survivors = streams.filter((s) => !endedAt.has(s));
      assert.equal(survivors.length, 2);

      // /health: 200 while one group lives, the failed group reported unhealthy; /metrics: one alive gauge per group.
      const health = await fetch(`${gateway.url}/health?verbose=1`); // worker names are socket paths: verbose only
      assert.equal(health.status, 200);
      const body = (await health.json()) as {
        status: string;
        groups: { worker: string; alive: boolean; message: string; failures: Record<string, number> }[];
      };
      assert.equal(body.status, 'degraded');
      assert.deepEqual(
        body.groups.map((g) => [g.worker, g.alive, g.message]),
        [
          [tokenspeed.worker, false, 'engine core dead'],
          [vllm.worker, true, 'ok'],
        ],
      );
      assert.deepEqual(body.groups[0]!.failures, {}, 'rank deaths, not a group-scope failure');
      const alive = await scrape(gateway.url, 'model_gateway_engine_alive');
      assert.ok(
        alive.includes(`{model="${MODEL}",group="${tokenspeed.name}",engine="tokenspeed"} 0`),
        alive.join('\n'),
      );
      assert.ok(alive.includes(`{model="${MODEL}",group="${vllm.name}",engine="vllm"} 1`), alive.join('\n'));
      const rankStates = await scrape(gateway.url, 'model_gateway_rank_state');
      for (const rank of [0, 1]) {
        assert.ok(
          rankStates.includes(`{model="${MODEL}",group="${tokenspeed.name}",dp_rank="${rank}",state="dead"} 1`),
          rankStates.join('\n'),
        );
      }

      // New requests succeed through the vLLM group only.
      const vlNow = await dispatched(1);
      const tsNow = await dispatched(0);
      const fresh = await Promise.all([0, 1, 2].map(async () => (await open(SHORT)).done));
      for (const o of fresh)
        assert.ok(o.completed && o.finishReason === 'length' && o.error === null, JSON.stringify(o));
      assert.equal((await dispatched(1)) - vlNow, 3);
      assert.equal(await dispatched(0), tsNow, 'nothing submitted to the dead group');

      // The surviving long requests end by a client disconnect (ABORT); every in-flight set is empty afterwards.
      for (const s of survivors) s.cancel();
      const ends = await Promise.all(survivors.map((s) => s.done));
      for (const o of ends)
        assert.ok(o.error === null && o.text.length > 0, `a vLLM stream kept streaming: ${JSON.stringify(o)}`);
      await waitFor(
        async () => (await inFlight(1)).every((n) => n === 0),
        'vLLM in-flight sets empty',
        20_000,
        () => inFlight(1),
      );
      assertNoneRegistered(1, 'no request left registered in the vLLM group');
    },
  );
});
