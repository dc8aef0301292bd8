/**
 * End to end, a lockstep (MoE) vLLM group of 2 real simulated rank processes fails as a unit and is rebuilt (issue
 * #8 parts 1-2; dp-routing.md 13): SIGKILL of one rank ends every request of the group, the surviving rank receives
 * ABORTs for what it held, requests get 503 with Retry-After while the group is incomplete, and once a fresh process
 * with the killed rank's index has joined the group serves again with a wave clock that never moved backwards (the
 * survivor keeps its wave number, dp-routing.md 13.4). One gateway for the file, in-process or `serve --workers N`
 * (GATEWAY_TEST_WORKERS; test/helpers/test-gateway.ts), read over HTTP; the lockstep flag and the wave clock are
 * engine-client internals no endpoint shows, checked in-process only.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { captureLogs, MODEL, sendCompletion, assertTerminalError } from './failure-helpers.js';
import { waitFor } from '../helpers/async.js';
import { startTestGateway, waitRankState, type TestGateway } from '../helpers/test-gateway.js';
import { Replacements, assertAllUp, fmt, getJson } from './lifecycle-helpers.js';
import { waitUntil } from './spread-helpers.js';

const SIM_ARGS = ['--time-scale', '1', '--log-level', 'warn'];
const LONG = { model: MODEL, prompt: 'A long story, please.', max_tokens: 20_000, ignore_eos: true };
const SHORT = { model: MODEL, prompt: 'Hi.', max_tokens: 5, ignore_eos: true };
const TIMEOUT = { timeout: 90_000 };

let gateway: TestGateway;
const replacements = new Replacements();

before(async () => {
  const { logger } = captureLogs('error');
  gateway = await startTestGateway({
    logger,
    modelId: MODEL,
    engine: 'vllm',
    sim: 2,
    lockstep: true,
    simArgs: SIM_ARGS,
  });
});

/** The group's wave clock in-process; undefined with `--workers N` (not on HTTP). */
const waveClock = (): number | null | undefined => gateway.inProcess?.client.waveClock;

after(async () => {
  await gateway?.close();
  await replacements.stopAll();
});

test(
  'one lockstep rank dies: every request of the group fails, the survivor gets ABORTs; a new process rebuilds the group',
  TIMEOUT,
  async (t) => {
    if (gateway.inProcess !== null) assert.equal(gateway.inProcess.client.lockstep, true);
    const onEach = [0, 1].map((rank) =>
      sendCompletion(gateway.url, LONG, { stream: true, dpRank: rank, label: `stream on rank ${rank}` }),
    );
    await waitUntil(() => onEach.every((s) => (s.progress()?.text.length ?? 0) > 0), 'both streams streaming');
    const clockBefore = waveClock();
    const survivor = async () => (await gateway.rankStates()).find((r) => r.dp_rank === 0)!;
    const survivorAborts = (await survivor()).aborts_sent;

    const killedAt = performance.now();
    process.kill(gateway.simRanks().find((r) => r.engineIndex === 1)!.pid, 'SIGKILL');
    await waitRankState(gateway, 1, 'dead');
    const outcomes = await Promise.all(onEach.map((s) => s.done));
    outcomes.forEach((o, i) => assertTerminalError(o, onEach[i]!.label, /DP rank 1 (is gone|died)/));
    // The ABORT was queued in the same step that failed the group; the link accepts it right after.
    await waitFor(
      async () => (await survivor()).aborts_sent > survivorAborts,
      'the surviving rank was told to drop what it held',
      20_000,
      () => gateway.rankStates(),
    );
    assert.equal((await survivor()).state, 'ready', 'the survivor itself is fine');
    const health = await getJson(gateway.url, '/health');
    assert.equal(health.status, 503);
    assert.equal(health.body.groups[0]!.status, 'unavailable');
    assert.equal(health.body.groups[0]!.alive, false, 'a lockstep group needs every rank');
    const refused = await fetch(`${gateway.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(SHORT),
    });
    assert.equal(refused.status, 503);
    assert.ok(refused.headers.get('retry-after'));

    const { spawnedAt } = replacements.spawn((await gateway.groups())[0]!, 1, SIM_ARGS, 2);
    const joinedAt = await waitRankState(gateway, 1, 'ready');
    if (gateway.inProcess !== null)
      assert.ok(waveClock()! >= clockBefore!, `the wave clock never moves backwards (${clockBefore} → ${waveClock()})`);
    const served = await Promise.all(
      [undefined, 0, 1].map(async (rank) => {
        const r = sendCompletion(gateway.url, SHORT, {
          stream: true,
          ...(rank === undefined ? {} : { dpRank: rank }),
          label: `short ${rank ?? 'unpinned'}`,
        });
        const o = await r.done;
        assert.ok(o.sse?.done && o.sse.finishReason === 'length' && o.sse.error === null, JSON.stringify(o));
        return o.endedAt;
      }),
    );
    await assertAllUp(gateway.url);
    t.diagnostic(
      `lockstep: SIGKILL → group failed and rank 1 dead; replacement spawn → joined ${fmt(joinedAt - spawnedAt)}; ` +
        `SIGKILL → first request served by the rebuilt group ${fmt(Math.min(...served) - killedAt)}; wave clock ${clockBefore ?? 'n/a'} → ${waveClock() ?? 'n/a'}`,
    );
  },
);
