/**
 * End to end, a wedged rank (issue #8 part 3): SIGSTOP of one of 2 dense TokenSpeed ranks with the stall timeout at
 * 2 s. Its requests end with an error naming the rank and the stall (an SSE error event for a stream, HTTP 503 for a
 * non-streaming request), /health shows it stalled, new requests avoid it; after SIGCONT it speaks again and serves.
 * The silence watchdog keeps its 300 s default, so only the stall detection can act. Measured for the closing note:
 * SIGSTOP → its requests ended (printed, never asserted). One gateway for the file, in-process or `serve --workers N`
 * (GATEWAY_TEST_WORKERS; test/helpers/test-gateway.ts): everything is read over HTTP.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { captureLogs, MODEL, sendCompletion, assertTerminalError, scrape } from './failure-helpers.js';
import { waitFor } from '../helpers/async.js';
import { inFlightTotal, startTestGateway, waitRankState, type TestGateway } from '../helpers/test-gateway.js';
import { fmt, getJson } from './lifecycle-helpers.js';

const STALL_MS = 2000;
// The ABORTs queued to the stopped rank are applied 3 rounds after it reads them, so on SIGCONT it runs its disowned
// requests for a few rounds first (as an engine does that steps before it reads its input): without the lag, whether
// it steps or reads first is up to its event loop, and the orphan-row check below would depend on it.
const SIM_ARGS = ['--time-scale', '1', '--log-level', 'warn', '--abort-lag-rounds', '3'];
const LONG = { model: MODEL, prompt: 'A long story, please.', max_tokens: 20_000, ignore_eos: true };
const SHORT = { model: MODEL, prompt: 'Hi.', max_tokens: 5, ignore_eos: true };

let gateway: TestGateway;
let rankPids: number[] = [];

before(async () => {
  const { logger } = captureLogs('error');
  gateway = await startTestGateway({
    logger,
    modelId: MODEL,
    engine: 'tokenspeed',
    sim: 2,
    simArgs: SIM_ARGS,
    rankStallTimeoutMs: STALL_MS,
  });
  rankPids = gateway.simRanks().map((r) => r.pid);
  assert.equal(rankPids.length, 2);
});

after(async () => {
  for (const pid of rankPids) {
    try {
      process.kill(pid, 'SIGCONT');
    } catch {
      // gone
    }
  }
  await gateway?.close();
});

const dispatchedUnpinned = async (rank: number): Promise<number> =>
  (await gateway.rankStates()).find((r) => r.dp_rank === rank)!.dispatched_unpinned;
const orphanOutputs = (): Promise<number> => gateway.metricSum('model_gateway_orphan_outputs_total');

test(
  'SIGSTOP of a rank (stall timeout 2 s): its requests end with a stall error, new requests avoid it; after SIGCONT it serves again',
  { timeout: 60_000 },
  async (t) => {
    const onStalled = [
      sendCompletion(gateway.url, LONG, { stream: true, dpRank: 1, label: 'stream on rank 1' }),
      sendCompletion(gateway.url, LONG, { stream: false, dpRank: 1, label: 'non-streaming request on rank 1' }),
    ];
    const onLive = sendCompletion(gateway.url, LONG, { stream: true, dpRank: 0, label: 'stream on rank 0' });
    await waitFor(
      async () =>
        (await gateway.rankStates()).every((r) => r.in_flight > 0) &&
        (onStalled[0]!.progress()?.text.length ?? 0) > 0 &&
        (onLive.progress()?.text.length ?? 0) > 0,
      'requests streaming on both ranks',
      20_000,
    );
    const rank1 = gateway.simRanks().find((r) => r.engineIndex === 1)!.pid;
    const stoppedAt = performance.now();
    process.kill(rank1, 'SIGSTOP');
    try {
      await waitRankState(gateway, 1, 'stalled');
      const outcomes = await Promise.all(onStalled.map((r) => r.done));
      const endedAt = Math.max(...outcomes.map((o) => o.endedAt));
      onStalled.forEach((r, i) =>
        assertTerminalError(outcomes[i]!, r.label, /DP rank 1 stalled: it sent no output for 2000 ms/),
      );
      assert.equal(outcomes[0]!.sse!.error!.code, 'rank_stalled');
      assert.equal(outcomes[1]!.status, 503);
      assert.equal(onLive.ended(), false, 'the stream on rank 0 goes on');
      t.diagnostic(
        `SIGSTOP → rank 1 stalled and its requests ended ${fmt(endedAt - stoppedAt)} (stall timeout ${STALL_MS} ms)`,
      );

      const health = await getJson(gateway.url, '/health');
      assert.equal(health.status, 200);
      assert.deepEqual(
        health.body.groups[0]!.ranks.map((r) => [r.state, r.cause]),
        [
          ['ready', null],
          ['stalled', 'stall'],
        ],
      );
      const stalls = await scrape(gateway.url, 'model_gateway_rank_stalls_total');
      assert.ok(
        stalls.some((l) => l.includes('dp_rank="1"') && l.endsWith(' 1')),
        stalls.join('\n'),
      );

      const before = await dispatchedUnpinned(1);
      const fresh = Array.from({ length: 6 }, (_, i) =>
        sendCompletion(gateway.url, SHORT, { stream: i % 2 === 0, label: `fresh #${i}` }),
      );
      for (const o of await Promise.all(fresh.map((r) => r.done))) assert.equal(o.status, 200, JSON.stringify(o));
      assert.equal(await dispatchedUnpinned(1), before, 'new requests avoid the stalled rank');
      const pinned = sendCompletion(gateway.url, SHORT, {
        stream: false,
        dpRank: 1,
        label: 'pinned to the stalled rank',
      });
      const p = await pinned.done;
      assert.equal(p.status, 503);
    } finally {
      process.kill(rank1, 'SIGCONT');
    }
    const resumedAt = performance.now();
    const readyAt = await waitRankState(gateway, 1, 'ready');
    const again = sendCompletion(gateway.url, SHORT, { stream: true, dpRank: 1, label: 'pinned after SIGCONT' });
    const o = await again.done;
    assert.ok(o.sse?.done && o.sse.finishReason === 'length' && o.sse.error === null, JSON.stringify(o));
    // Rows it sent for the requests it no longer owns were dropped, counted and ABORTed once each.
    await waitFor(
      async () => (await orphanOutputs()) >= 1,
      "the resumed rank's rows for disowned requests were counted",
      20_000,
    );
    t.diagnostic(
      `SIGCONT → rank 1 ready again ${fmt(readyAt - resumedAt)}; ${await orphanOutputs()} orphan row(s) dropped and ABORTed`,
    );
    onLive.cancel();
    await onLive.done;
    await waitFor(async () => (await inFlightTotal(gateway)) === 0, 'in-flight sets empty', 20_000);
  },
);
