/**
 * End to end, a dense TokenSpeed group of 4 real simulated rank processes outlives its engines (issue #8 parts 1, 2
 * and 7; dp-routing.md 6, 14.8): SIGKILL of one rank with 40 streams live ends only that rank's streams (its siblings
 * get no ABORT and finish normally), new requests all succeed on the others, and a fresh process with the killed
 * rank's engine index dials the same handshake socket and serves again (/health and /ready back to ok). Three
 * kill/rejoin cycles, then every rank of the group restarts at once. One gateway for the whole file, in-process or
 * `serve --workers N` (GATEWAY_TEST_WORKERS; test/helpers/test-gateway.ts): everything is read over HTTP.
 *
 * Measured for the closing note (printed as diagnostics, never asserted): SIGKILL → rank marked dead, replacement
 * spawn → joined (the replacement's own process start-up and handshake), joined → its first request served, and
 * SIGKILL → first request served by the replacement.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { captureLogs, MODEL, sendCompletion, scrape, type SentRequest } from './failure-helpers.js';
import { startTestGateway, waitRankState, type TestGateway, type TestGroup } from '../helpers/test-gateway.js';
import { Replacements, assertAllUp, fmt, getJson } from './lifecycle-helpers.js';
import { waitUntil } from './spread-helpers.js';

/**
 * Step time ×2 (about 18 ms per step with 10 requests on a rank): a 400-token stream lasts about 7 s, long enough for
 * all 40 to be open and streaming before the kill even on a loaded machine, short enough to finish afterwards.
 */
const SIM_ARGS = ['--time-scale', '2', '--log-level', 'warn'];
// Long enough (~22 s at --time-scale 2) that no stream can finish between the in-flight count and the kill, also when
// a loaded machine takes seconds to get all 40 streaming (400 tokens let 3 of the victim's 10 finish first).
const STREAM = { model: MODEL, prompt: 'Tell me a story.', max_tokens: 1200, ignore_eos: true };
const SHORT = { model: MODEL, prompt: 'Hi.', max_tokens: 5, ignore_eos: true };
const TIMEOUT = { timeout: 120_000 };

let gateway: TestGateway;
let group: TestGroup;
const replacements = new Replacements();
/** The live process (pid) of each engine index (the gateway's own ranks at first, replacements later). */
const current = new Map<number, number>();

before(async () => {
  const { logger } = captureLogs('error');
  gateway = await startTestGateway({ logger, modelId: MODEL, engine: 'tokenspeed', sim: 4, simArgs: SIM_ARGS });
  group = (await gateway.groups())[0]!;
  for (const r of gateway.simRanks()) current.set(r.engineIndex, r.pid);
  assert.equal(current.size, 4);
});

after(async () => {
  await gateway?.close();
  await replacements.stopAll();
});

const abortsOf = async (): Promise<number[]> => (await gateway.rankStates()).map((r) => r.aborts_sent);
const waitRank = (index: number, state: string): Promise<number> => waitRankState(gateway, index, state);
const kill = (rank: number): void => void process.kill(current.get(rank)!, 'SIGKILL');

/** Start a replacement process for `rank` (it dials the group's handshake address) and remember its pid. */
function respawn(rank: number): number {
  const { rank: proc, spawnedAt } = replacements.spawn(group, rank, SIM_ARGS);
  current.set(rank, proc.child.pid!);
  return spawnedAt;
}

/** A short request pinned to `rank`; asserts it completes with `length`; returns when it ended. */
async function servedBy(rank: number): Promise<number> {
  const r = sendCompletion(gateway.url, SHORT, { stream: true, dpRank: rank, label: `short pinned to ${rank}` });
  const o = await r.done;
  assert.equal(o.status, 200, JSON.stringify(o));
  assert.ok(o.sse?.done && o.sse.finishReason === 'length' && o.sse.error === null, JSON.stringify(o));
  return o.endedAt;
}

/** SIGKILL `rank`'s process, wait until the gateway marks it dead, restart it and wait for its first served request. */
async function killAndRejoin(rank: number, t: { diagnostic(m: string): void }, label: string): Promise<void> {
  const killedAt = performance.now();
  kill(rank);
  const deadAt = await waitRank(rank, 'dead');
  const spawnedAt = respawn(rank);
  const joinedAt = await waitRank(rank, 'ready');
  const servedAt = await servedBy(rank);
  t.diagnostic(
    `${label}: SIGKILL → dead ${fmt(deadAt - killedAt)}; replacement spawn → joined ${fmt(joinedAt - spawnedAt)} (its own start-up + handshake); ` +
      `joined → first request served ${fmt(servedAt - joinedAt)}; SIGKILL → first request served by the replacement ${fmt(servedAt - killedAt)}`,
  );
}

test(
  'SIGKILL of one of 4 dense ranks with 40 streams live: only its streams fail, the others finish, new requests succeed, it rejoins',
  TIMEOUT,
  async (t) => {
    const streams: SentRequest[] = [];
    for (let i = 0; i < 40; i++)
      streams.push(sendCompletion(gateway.url, STREAM, { stream: true, label: `stream #${i}` }));
    await Promise.all(streams.map((s) => s.headers));
    await waitUntil(
      () => streams.every((s) => (s.progress()?.text.length ?? 0) > 0),
      'all 40 streams streaming',
      () => streams.map((s) => s.progress()?.text.length),
    );
    const victim = 2;
    const held = (await gateway.rankStates()).map((r) => r.in_flight);
    assert.equal(
      held.reduce((a, b) => a + b, 0),
      40,
    );
    assert.ok(
      held.every((n) => n > 0),
      `every rank holds streams: ${held}`,
    );
    const abortsBefore = await abortsOf();

    const killedAt = performance.now();
    kill(victim);
    const deadAt = await waitRank(victim, 'dead');
    const outcomes = await Promise.all(streams.map((s) => s.done));
    const failed = outcomes.filter((o) => o.sse?.error);
    const finished = outcomes.filter((o) => o.sse?.finishReason === 'length' && o.sse.error === null && o.sse.done);
    assert.equal(failed.length, held[victim], `exactly the ${held[victim]} streams of rank ${victim} failed`);
    assert.equal(finished.length, 40 - held[victim]!, 'every other stream finished normally');
    for (const o of failed) {
      assert.equal(o.sse!.error!.code, 'engine_dead');
      assert.match(o.sse!.error!.message, new RegExp(`DP rank ${victim} (is gone|died)`));
      assert.equal(o.sse!.done, true);
    }
    const abortsAfter = await abortsOf();
    assert.deepEqual(
      abortsAfter.filter((_, i) => i !== victim),
      abortsBefore.filter((_, i) => i !== victim),
      'the siblings received no ABORT',
    );
    assert.equal(await gateway.metricSum('model_gateway_engine_failures_total'), 0, 'no group-scope failure');
    t.diagnostic(
      `SIGKILL → rank ${victim} dead ${fmt(deadAt - killedAt)}; its ${failed.length} streams ended with engine_dead, ${finished.length} finished with length`,
    );

    const health = await getJson(gateway.url, '/health');
    assert.equal(health.status, 200);
    assert.equal(health.body.status, 'degraded');
    assert.deepEqual(
      health.body.groups[0]!.ranks.map((r) => r.state),
      ['ready', 'ready', 'dead', 'ready'],
    );
    assert.equal((await getJson(gateway.url, '/ready')).status, 200, 'a degraded dense group is ready');

    const dispatchedToVictim = async () => (await gateway.rankStates())[victim]!.dispatched_unpinned;
    const before = await dispatchedToVictim();
    const fresh = Array.from({ length: 8 }, (_, i) =>
      sendCompletion(gateway.url, SHORT, { stream: i % 2 === 0, label: `fresh #${i}` }),
    );
    for (const o of await Promise.all(fresh.map((r) => r.done))) assert.equal(o.status, 200, JSON.stringify(o));
    assert.equal(await dispatchedToVictim(), before, 'nothing was placed on the dead rank');

    const spawnedAt = respawn(victim);
    const joinedAt = await waitRank(victim, 'ready');
    const servedAt = await servedBy(victim);
    await assertAllUp(gateway.url);
    t.diagnostic(
      `cycle 1: replacement spawn → joined ${fmt(joinedAt - spawnedAt)} (its own start-up + handshake); joined → first request served ${fmt(servedAt - joinedAt)}; ` +
        `SIGKILL → first request served by the replacement ${fmt(servedAt - killedAt)}`,
    );
  },
);

test('two more kill/rejoin cycles (three in all): each replacement serves; rejoins are counted', TIMEOUT, async (t) => {
  await killAndRejoin(1, t, 'cycle 2 (rank 1)');
  await killAndRejoin(2, t, 'cycle 3 (rank 2 again)');
  await assertAllUp(gateway.url);
  assert.deepEqual(
    (await gateway.rankStates()).map((r) => r.rejoins),
    [0, 1, 2, 0],
  );
  const rejoins = await scrape(gateway.url, 'model_gateway_rank_rejoins_total');
  assert.ok(
    rejoins.some((l) => l.includes('dp_rank="2"') && l.endsWith(' 2')),
    rejoins.join('\n'),
  );
  const deaths = await scrape(gateway.url, 'model_gateway_rank_deaths_total');
  assert.ok(
    deaths.some((l) => l.includes('dp_rank="2"') && l.includes('cause="peer-unreachable"') && l.endsWith(' 2')),
    deaths.join('\n'),
  );
});

test(
  'every rank of the group restarts: 503 with Retry-After while none is up, then all four rejoin and serve',
  TIMEOUT,
  async (t) => {
    const killedAt = performance.now();
    for (const rank of current.keys()) kill(rank);
    for (let i = 0; i < 4; i++) await waitRank(i, 'dead');
    const down = await getJson(gateway.url, '/health');
    assert.equal(down.status, 503);
    assert.equal(down.body.status, 'unhealthy');
    assert.equal((await getJson(gateway.url, '/ready')).body.status, 'unavailable');
    const refused = await fetch(`${gateway.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(SHORT),
    });
    assert.equal(refused.status, 503);
    assert.ok(refused.headers.get('retry-after'), 'Retry-After tells the client when to come back');
    const body = (await refused.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, 'engine_dead');
    const spawnedAt = performance.now();
    for (let i = 0; i < 4; i++) respawn(i);
    let lastJoined = 0;
    for (let i = 0; i < 4; i++) lastJoined = Math.max(lastJoined, await waitRank(i, 'ready'));
    const served = await Promise.all([0, 1, 2, 3].map(servedBy));
    await assertAllUp(gateway.url);
    t.diagnostic(
      `all 4 restarted: SIGKILL → all spawned ${fmt(spawnedAt - killedAt)}; spawn → last joined ${fmt(lastJoined - spawnedAt)}; ` +
        `SIGKILL → every rank served a request ${fmt(Math.max(...served) - killedAt)}`,
    );
  },
);
