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
 * hang guards and in the diagnostics (how long the failed requests took to end).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { pino } from 'pino';
import { startGateway, type RunningGateway, type RunningGroup } from '../../src/gateway.js';
import { openStream, waitUntil, type CompletionBody, type HeldStream } from './spread-helpers.js';

const MODEL = 'sim-qwen3';
const LONG: CompletionBody = { model: MODEL, prompt: 'Tell me a very long story.', max_tokens: 20_000, ignore_eos: true };
const SHORT: CompletionBody = { model: MODEL, prompt: 'Say a few words.', max_tokens: 6, ignore_eos: true };
const TIMEOUT = { timeout: 120_000 };

const inFlight = (g: RunningGroup): number[] => g.client.rankStates().map((r) => r.inFlight);
const dispatched = (g: RunningGroup): number => g.client.rankStates().reduce((n, r) => n + r.dispatchedUnpinned + r.dispatchedPinned, 0);

/** `/metrics` sample lines of `name` (without the name), e.g. `{model="m",worker="ipc://…",engine="vllm"} 1`. */
async function scrape(url: string, name: string): Promise<string[]> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return text.split('\n').filter((l) => l.startsWith(`${name}{`)).map((l) => l.slice(name.length));
}

describe('two engine groups (TokenSpeed + vLLM) behind one gateway; one group fails', () => {
  let gateway: RunningGateway;
  let tokenspeed: RunningGroup;
  let vllm: RunningGroup;
  const opened: HeldStream[] = [];
  const open = async (body: CompletionBody): Promise<HeldStream> => {
    const s = await openStream(gateway.url, body);
    opened.push(s);
    assert.equal(s.status, 200, 'streaming request accepted');
    return s;
  };

  before(async () => {
    gateway = await startGateway({
      port: 0,
      logger: pino({ level: 'silent' }),
      modelId: MODEL,
      groups: [
        { engine: 'tokenspeed', sim: 2, simArgs: ['--time-scale', '5', '--log-level', 'warn'] },
        { engine: 'vllm', sim: 2, simArgs: ['--time-scale', '5', '--log-level', 'warn'] },
      ],
    });
    [tokenspeed, vllm] = gateway.groups as [RunningGroup, RunningGroup];
    assert.equal(tokenspeed.engine, 'tokenspeed');
    assert.equal(vllm.engine, 'vllm');
    assert.notEqual(tokenspeed.worker, vllm.worker);
  });

  after(async () => {
    for (const s of opened) s.cancel();
    await Promise.all(opened.map((s) => s.done));
    await gateway?.close();
  });

  test('both groups serve; /health lists both as ok', TIMEOUT, async () => {
    const outcomes = await Promise.all([0, 1, 2, 3].map(async () => (await open(SHORT)).done));
    for (const o of outcomes) assert.ok(o.completed && o.finishReason === 'length' && o.text.length > 0, JSON.stringify(o));
    assert.ok(dispatched(tokenspeed) > 0 && dispatched(vllm) > 0, `both groups served: ${dispatched(tokenspeed)}/${dispatched(vllm)}`);
    await waitUntil(() => [...inFlight(tokenspeed), ...inFlight(vllm)].every((n) => n === 0), 'in-flight sets empty');
    const health = await fetch(`${gateway.url}/health?verbose=1`); // worker names are socket paths: verbose only
    assert.equal(health.status, 200);
    const body = (await health.json()) as { status: string; groups: { worker: string; engine: string; alive: boolean; message: string }[] };
    assert.equal(body.status, 'ok');
    assert.deepEqual(body.groups.map((g) => [g.worker, g.engine, g.alive, g.message]), [
      [tokenspeed.worker, 'tokenspeed', true, 'ok'],
      [vllm.worker, 'vllm', true, 'ok'],
    ]);
  });

  test('SIGTERM of every TokenSpeed rank: its requests end with an error, the vLLM group keeps serving', TIMEOUT, async (t) => {
    // Four long requests: the lowest best-rank score spreads them one per rank (a group holding one request per
    // rank scores 1, an idle group 0).
    const tsBefore = dispatched(tokenspeed);
    const vlBefore = dispatched(vllm);
    const streams: HeldStream[] = [];
    for (let i = 0; i < 4; i++) streams.push(await open(LONG));
    assert.deepEqual(inFlight(tokenspeed), [1, 1], 'one request per TokenSpeed rank');
    assert.deepEqual(inFlight(vllm), [1, 1], 'one request per vLLM rank');
    assert.equal(dispatched(tokenspeed) - tsBefore, 2);
    assert.equal(dispatched(vllm) - vlBefore, 2);
    // Which stream went where is not visible over HTTP: the two that end when the TokenSpeed group dies were its own.

    const killedAt = performance.now();
    const endedAt = new Map<HeldStream, number>();
    for (const s of streams) void s.done.then(() => endedAt.set(s, performance.now()));
    for (const r of tokenspeed.sims!.ranks) r.child.kill('SIGTERM');
    await Promise.all(tokenspeed.sims!.ranks.map((r) => r.exited));

    await waitUntil(() => tokenspeed.client.rankStates().every((r) => r.state === 'dead'), 'every TokenSpeed rank is marked dead');
    await waitUntil(() => endedAt.size === 2, 'two streams ended', () => [...endedAt.values()]);
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
    assert.deepEqual(inFlight(tokenspeed), [0, 0], "the failed group's in-flight sets are cleared");
    const deaths = tokenspeed.client.stats.rankDeaths;
    assert.equal(Object.values(deaths).reduce((a, b) => a + b, 0), 2, JSON.stringify(deaths));
    assert.ok(Object.keys(deaths).every((c) => c === 'engine-core-dead' || c === 'peer-unreachable'), JSON.stringify(deaths));
    assert.equal(tokenspeed.client.canServe(), false);
    assert.equal(tokenspeed.client.registeredCount, 0, 'no request left registered in the failed group');

    // The vLLM group's requests are untouched and still streaming.
    assert.deepEqual(inFlight(vllm), [1, 1]);
    assert.ok(vllm.client.canServe());
    const survivors = streams.filter((s) => !endedAt.has(s));
    assert.equal(survivors.length, 2);

    // /health: 200 while one group lives, the failed group reported unhealthy; /metrics: one alive gauge per group.
    const health = await fetch(`${gateway.url}/health?verbose=1`); // worker names are socket paths: verbose only
    assert.equal(health.status, 200);
    const body = (await health.json()) as { status: string; groups: { worker: string; alive: boolean; message: string; failures: Record<string, number> }[] };
    assert.equal(body.status, 'degraded');
    assert.deepEqual(body.groups.map((g) => [g.worker, g.alive, g.message]), [
      [tokenspeed.worker, false, 'engine core dead'],
      [vllm.worker, true, 'ok'],
    ]);
    assert.deepEqual(body.groups[0]!.failures, {}, 'rank deaths, not a group-scope failure');
    const alive = await scrape(gateway.url, 'model_gateway_engine_alive');
    assert.ok(alive.includes(`{model="${MODEL}",worker="${tokenspeed.worker}",engine="tokenspeed"} 0`), alive.join('\n'));
    assert.ok(alive.includes(`{model="${MODEL}",worker="${vllm.worker}",engine="vllm"} 1`), alive.join('\n'));
    const rankStates = await scrape(gateway.url, 'model_gateway_rank_state');
    for (const rank of [0, 1]) {
      assert.ok(rankStates.includes(`{model="${MODEL}",worker="${tokenspeed.worker}",dp_rank="${rank}",state="dead"} 1`), rankStates.join('\n'));
    }

    // New requests succeed through the vLLM group only.
    const vlNow = dispatched(vllm);
    const tsNow = dispatched(tokenspeed);
    const fresh = await Promise.all([0, 1, 2].map(async () => (await open(SHORT)).done));
    for (const o of fresh) assert.ok(o.completed && o.finishReason === 'length' && o.error === null, JSON.stringify(o));
    assert.equal(dispatched(vllm) - vlNow, 3);
    assert.equal(dispatched(tokenspeed), tsNow, 'nothing submitted to the dead group');

    // The surviving long requests end by a client disconnect (ABORT); every in-flight set is empty afterwards.
    for (const s of survivors) s.cancel();
    const ends = await Promise.all(survivors.map((s) => s.done));
    for (const o of ends) assert.ok(o.error === null && o.text.length > 0, `a vLLM stream kept streaming: ${JSON.stringify(o)}`);
    await waitUntil(() => inFlight(vllm).every((n) => n === 0), 'vLLM in-flight sets empty', () => inFlight(vllm));
    assert.equal(vllm.client.registeredCount, 0);
  });
});
