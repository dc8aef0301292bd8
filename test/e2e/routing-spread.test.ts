/**
 * End to end: concurrent requests spread over the DP ranks as the load score says, through the real path
 * `startGateway` → HTTP `/v1/completions` → `EngineClient` → ZeroMQ → four simulated TokenSpeed rank processes; with
 * GATEWAY_TEST_WORKERS=N the same through `serve --workers N` (the fronts' SUBMITs placed by the router's engine
 * client). The routing state is read over HTTP (`/v1/gateway/ranks`, fresh from the routing state) in both modes.
 *
 * Spec: dp-routing.md section 8 (dispatcher order: store the batch's load, then release), 9.2 (score
 * `max(own, waiting + running)` + KV penalty, rotating scan start, strict-less ties; SMG `connector.rs`), 10.2-10.3
 * (release clamp, SMG PR #2131), 14.7 (burst balance within ±1; vLLM #22910, #47420, #48027) and 14.14 targets 1-3.
 *
 * Why the assertions are deterministic (no wall-clock dependence):
 * - "Long" requests use `ignore_eos` and `max_tokens` 20 000, so they never finish during the test; they are ended by
 *   a client disconnect (→ ABORT). While every request a rank holds is one this gateway routed and none has finished,
 *   the rank's report (TokenSpeed `num_running` counts every registered, unfinished request; engine-wire.md 4.9) is at
 *   most the client's own in-flight count, so `score = max(own, reported) = own` whenever a report arrives. The
 *   choices therefore do not depend on when reports arrive.
 * - After aborts, `flushRanks` is an output-pipe barrier: a stale batch sampled before the ABORT was applied cannot
 *   arrive later and inflate a rank's stored load.
 * - The load policy's scan start equals the number of unpinned selections so far (9.2 step 3; pins do not advance
 *   it, 9.1 step 3), i.e. the sum of `dispatchedUnpinned`, so each choice can be predicted with the exported
 *   `lowestScorePosition`/`loadScore`.
 * Timing appears only in hang guards (`waitUntil`, test timeouts).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { loadScore, lowestScorePosition } from '../../src/engine-client/policy.js';
import { waitFor } from '../helpers/async.js';
import { startTestGateway, type TestGateway } from '../helpers/test-gateway.js';
import {
  flushRanks,
  openStream,
  scrapeByRank,
  states,
  unpinnedDelta,
  unpinnedTotal,
  views,
  type CompletionBody,
  type HeldStream,
} from './spread-helpers.js';

const MODEL = 'sim-qwen3';
const RANKS = [0, 1, 2, 3];
/** Never finishes within the test (about 25 tokens/s per request at time scale 5); ended by a disconnect. */
const LONG: CompletionBody = {
  model: MODEL,
  prompt: 'Tell me a very long story.',
  max_tokens: 20_000,
  ignore_eos: true,
};
/** Finishes on its own with finish reason `length` after 12 tokens. */
const SHORT: CompletionBody = { model: MODEL, prompt: 'Say a few words.', max_tokens: 12, ignore_eos: true };
const TIMEOUT = { timeout: 120_000 };

describe('DP routing spread through a gateway over 4 simulated ranks', () => {
  let gateway: TestGateway;
  /** Every stream opened by the tests; `after` cancels the leftovers. */
  const opened: HeldStream[] = [];
  /** Streams held across tests: test 2's unpinned ones (ranks 1..3) and test 3's final unpinned one (rank 0). */
  const held: HeldStream[] = [];

  const open = async (body: CompletionBody, dpRank?: number): Promise<HeldStream> => {
    const s = await openStream(gateway.url, body, dpRank === undefined ? {} : { dpRank });
    opened.push(s);
    assert.equal(s.status, 200, 'streaming request accepted');
    return s;
  };
  const inFlightOf = async (rank: number): Promise<number> =>
    (await states(gateway)).find((s) => s.engineIndex === rank)!.inFlight;
  /** Hang guard (20 s) on an async condition over the routing state, which it prints when it fails. */
  const waitUntil = (cond: () => Promise<boolean>, what: string): Promise<void> =>
    waitFor(cond, what, 20_000, () => states(gateway));
  const cancelAndDrain = async (
    streams: readonly HeldStream[],
    what: string,
    until: () => Promise<boolean>,
  ): Promise<void> => {
    for (const s of streams) s.cancel();
    await Promise.all(streams.map((s) => s.done));
    await waitUntil(until, what);
  };

  before(async () => {
    // Time scale 5: a round takes ~40 ms of simulated step time, which keeps the SSE traffic of a dozen long
    // requests small on a shared machine. Nothing below depends on the rate.
    gateway = await startTestGateway({
      sim: 4,
      modelId: MODEL,
      simArgs: ['--time-scale', '5', '--log-level', 'warn'],
    });
    assert.deepEqual(
      (await states(gateway)).map((s) => s.engineIndex),
      RANKS,
      'identity-sorted engine order is 0..3',
    );
  });

  after(async () => {
    for (const s of opened) s.cancel();
    await Promise.all(opened.map((s) => s.done));
    await gateway?.close();
  });

  const bursts: { n: number; waves: number }[] = [
    { n: 8, waves: 1 },
    { n: 12, waves: 1 },
    { n: 12, waves: 2 },
  ];
  for (const { n, waves } of bursts) {
    const how =
      waves === 1
        ? 'concurrent long streams'
        : `long streams in ${waves} concurrent waves, every rank's report arriving between them,`;
    test(
      `burst balance (14.7): ${n} ${how} over 4 ranks land ${n / 4}/${n / 4}/${n / 4}/${n / 4}`,
      TIMEOUT,
      async (t) => {
        const base = await states(gateway);
        for (const s of base) {
          assert.equal(s.inFlight, 0, `rank ${s.engineIndex} starts idle`);
          assert.ok(
            s.load === null || (s.load.numRunning === 0 && s.load.numWaiting === 0),
            `rank ${s.engineIndex} stored load idle: ${JSON.stringify(s.load)}`,
          );
        }
        // Fire each wave at once; each request resolves after the gateway's submit (headers are written after it).
        const burst: HeldStream[] = [];
        for (let w = 0; w < waves; w++) {
          if (w > 0) {
            // Mid-burst reports (14.7): wait until every rank's stored load counts what it holds so far.
            await waitUntil(
              async () => (await states(gateway)).every((s) => s.inFlight > 0 && s.load?.numRunning === s.inFlight),
              'every rank reports its share of the first wave',
            );
            t.diagnostic(
              `wave ${w}: stored loads before it ${JSON.stringify((await states(gateway)).map((s) => s.load?.numRunning))}`,
            );
          }
          burst.push(...(await Promise.all(Array.from({ length: n / waves }, () => open(LONG)))));
        }
        const now = await states(gateway);
        const delta = unpinnedDelta(base, now);
        t.diagnostic(
          `burst N=${n} in ${waves} wave(s): unpinned dispatches per rank ${delta.join('/')}; loads ${JSON.stringify(now.map((s) => s.load))}`,
        );
        assert.equal(
          delta.reduce((a, b) => a + b, 0),
          n,
          'every request was dispatched unpinned',
        );
        assert.ok(Math.max(...delta) - Math.min(...delta) <= 1, `per-rank counts within ±1: ${delta.join('/')}`);
        assert.deepEqual(delta, [n / 4, n / 4, n / 4, n / 4]);
        // None finished: every dispatched request is still in its rank's in-flight set.
        assert.deepEqual(
          now.map((s) => s.inFlight),
          delta,
          'in-flight equals dispatches (nothing finished)',
        );
        // Reports may have arrived mid-burst; none may exceed the client's own count (the floor is what decided).
        for (const s of now)
          if (s.load)
            assert.ok(s.load.numRunning + s.load.numWaiting <= s.inFlight, `rank ${s.engineIndex} report ≤ own`);

        await cancelAndDrain(burst, 'burst in-flight sets empty after the disconnects', async () =>
          (await states(gateway)).every((s) => s.inFlight === 0),
        );
        await flushRanks(gateway, MODEL, RANKS);
        for (const s of await states(gateway)) {
          assert.equal(s.inFlight, 0);
          assert.equal(s.load?.numRunning, 0, `rank ${s.engineIndex} clamped after the burst`);
          assert.equal(s.load?.numWaiting, 0);
        }
      },
    );
  }

  test(
    'score-driven avoidance (9.2): unpinned requests avoid rank 0 while its 3 pinned requests make it the most loaded',
    TIMEOUT,
    async (t) => {
      const P = 3;
      const U = 6;
      const pre = await states(gateway);
      const pinned: HeldStream[] = [];
      for (let i = 0; i < P; i++) pinned.push(await open(LONG, 0));
      // Wait until rank 0's own report (the sim's load tail) counts all P pinned requests.
      await waitUntil(async () => (await states(gateway))[0]!.load?.numRunning === P, `rank 0 reports running ${P}`);
      const start = await states(gateway);
      assert.equal(start[0]!.inFlight, P);
      assert.equal(start[0]!.dispatchedPinned - pre[0]!.dispatchedPinned, P, 'pins counted on rank 0');
      assert.deepEqual(unpinnedDelta(pre, start), [0, 0, 0, 0], 'pins are not unpinned selections');
      assert.deepEqual(
        start.slice(1).map((s) => s.inFlight),
        [0, 0, 0],
      );

      const chosen: number[] = [];
      for (let i = 0; i < U; i++) {
        const before = await states(gateway);
        const v = views(before);
        const scores = v.map(loadScore);
        const expected = before[lowestScorePosition(v, unpinnedTotal(before))]!.engineIndex;
        // Rank 0 is strictly the most loaded at every step (3 vs at most 2).
        assert.ok(
          scores.slice(1).every((s) => s < scores[0]!),
          `rank 0 most loaded: scores ${scores.join(',')}`,
        );
        held.push(await open(LONG)); // unpinned, kept in flight
        const d = unpinnedDelta(before, await states(gateway));
        assert.equal(
          d.reduce((a, b) => a + b, 0),
          1,
        );
        const got = d.findIndex((x) => x === 1);
        chosen.push(RANKS[got]!);
        assert.equal(
          RANKS[got],
          expected,
          `request ${i}: scores ${scores.join(',')} predict rank ${expected}, got ${RANKS[got]}`,
        );
        assert.notEqual(RANKS[got], 0, 'never rank 0 while it is the most loaded');
      }
      const end = await states(gateway);
      t.diagnostic(
        `avoidance: unpinned choices ${chosen.join(',')}; per-rank unpinned ${unpinnedDelta(start, end).join('/')}; in-flight ${end.map((s) => s.inFlight).join('/')}`,
      );
      assert.deepEqual(unpinnedDelta(start, end), [0, 2, 2, 2]);
      assert.deepEqual(
        end.map((s) => s.inFlight),
        [P, 2, 2, 2],
      );

      // Rank 0's pinned requests end (client disconnect → ABORT); ranks 1..3 keep theirs for the next test.
      await cancelAndDrain(pinned, 'rank 0 in-flight empty', async () => (await inFlightOf(0)) === 0);
      await flushRanks(gateway, MODEL, [0]);
      assert.deepEqual(
        (await states(gateway)).map((s) => s.inFlight),
        [0, 2, 2, 2],
      );
    },
  );

  test(
    "idle recovery (10.3): after rank 0's requests finish its stored load is clamped to 0 and it wins the next request",
    TIMEOUT,
    async (t) => {
      const base = await states(gateway);
      assert.deepEqual(
        base.map((s) => s.inFlight),
        [0, 2, 2, 2],
        "ranks 1..3 still hold the previous test's requests",
      );
      const K = 3;
      const shorts: HeldStream[] = [];
      for (let i = 0; i < K; i++) shorts.push(await open(SHORT, 0));
      const outcomes = await Promise.all(shorts.map((s) => s.done));
      for (const o of outcomes)
        assert.ok(o.completed && o.finishReason === 'length', `short request finished by itself: ${JSON.stringify(o)}`);

      // Every terminal batch is dispatched before its stream ends, and an idle rank pushes nothing more, so this is the
      // final state. The last batch's tail was sampled before its finishes committed (engine-wire.md 4.9), so it said
      // running > 0; the clamp zeroed it in the same tick (dispatcher order, section 8) and counted a clamp event
      // (a clamp event is only counted when it changes a non-zero count). KV usage is kept (10.2 step 4).
      const after = await states(gateway);
      const r0 = after[0]!;
      t.diagnostic(
        `idle recovery: rank 0 load ${JSON.stringify(r0.load)}, clamp events ${base[0]!.clampEvents} -> ${r0.clampEvents}, pinned ${base[0]!.dispatchedPinned} -> ${r0.dispatchedPinned}`,
      );
      assert.equal(r0.dispatchedPinned - base[0]!.dispatchedPinned, K);
      assert.equal(r0.inFlight, 0);
      assert.ok(r0.load !== null);
      assert.equal(r0.load.numRunning, 0, 'stored num_running clamped to 0');
      assert.equal(r0.load.numWaiting, 0, 'stored num_waiting clamped to 0');
      assert.ok(r0.load.kvCacheUsage > 0, 'KV usage of the last (busy) report is kept');
      assert.ok(
        r0.clampEvents > base[0]!.clampEvents,
        `rank 0 clamp events increased (${base[0]!.clampEvents} -> ${r0.clampEvents})`,
      );

      // The next unpinned request: rank 0 scores 0, the busy ranks score 2, so it goes to rank 0 whatever the scan start.
      const v = views(after);
      assert.deepEqual(v.map(loadScore), [0, 2, 2, 2]);
      assert.equal(after[lowestScorePosition(v, unpinnedTotal(after))]!.engineIndex, 0);
      held.push(await open(LONG));
      const d = unpinnedDelta(after, await states(gateway));
      assert.deepEqual(d, [1, 0, 0, 0], 'the recovered rank 0 is preferred over every busy rank');
    },
  );

  test('afterwards every in-flight set and model_gateway_rank_inflight_requests is 0', TIMEOUT, async (t) => {
    assert.deepEqual(
      (await states(gateway)).map((s) => s.inFlight),
      [1, 2, 2, 2],
    );
    await cancelAndDrain(held.splice(0), 'all in-flight sets empty', async () =>
      (await states(gateway)).every((s) => s.inFlight === 0),
    );
    await flushRanks(gateway, MODEL, RANKS);

    const final = await states(gateway);
    for (const s of final) {
      assert.equal(s.inFlight, 0, `rank ${s.engineIndex} in-flight`);
      assert.equal(s.load?.numRunning, 0, `rank ${s.engineIndex} stored running`);
      assert.equal(s.load?.numWaiting, 0, `rank ${s.engineIndex} stored waiting`);
    }
    // The request registry is not on HTTP: in-process only.
    if (gateway.inProcess !== null)
      assert.equal(gateway.inProcess.client.registeredCount, 0, 'no live request left in the registry');

    const inflight = await scrapeByRank(gateway.url, 'model_gateway_rank_inflight_requests');
    assert.deepEqual(
      [...inflight.entries()].sort(),
      RANKS.map((r) => [String(r), 0]),
    );
    const running = await scrapeByRank(gateway.url, 'model_gateway_engine_running_requests');
    assert.deepEqual(
      [...running.entries()].sort(),
      RANKS.map((r) => [String(r), 0]),
    );
    const dispatches = await scrapeByRank(gateway.url, 'model_gateway_rank_dispatches_total', 'pinned');
    for (const s of final) {
      assert.equal(dispatches.get(`${s.engineIndex}/false`), s.dispatchedUnpinned);
      assert.equal(dispatches.get(`${s.engineIndex}/true`), s.dispatchedPinned);
    }
    t.diagnostic(
      `final: unpinned ${final.map((s) => s.dispatchedUnpinned).join('/')}, pinned ${final.map((s) => s.dispatchedPinned).join('/')}, clamp events ${final.map((s) => s.clampEvents).join('/')}`,
    );
    // 8 + 12 + 12 bursts (8 per rank), 6 avoidance requests on ranks 1..3, 1 recovery request on rank 0.
    assert.deepEqual(
      final.map((s) => s.dispatchedUnpinned),
      [9, 10, 10, 10],
    );
  });
});
