/**
 * End to end, a rank's own death caused by signals to ONE real simulated rank process (issue #3 part 4, issue #8
 * part 1; dp-routing.md 6 and 14.8; engine-wire.md 1.7): SIGTERM (the rank sends ENGINE_CORE_DEAD, tied to it when its
 * identity vanishes), SIGKILL (no sentinel: zeromq disconnect events trigger liveness probes that the input ROUTER
 * refuses with EHOSTUNREACH, backed by the per-rank silence watchdog) and SIGSTOP with a short silence timeout (a
 * hung rank: only its own silence watchdog can tell). Each scenario runs a gateway with two engine groups, the
 * failing one and a healthy one (TokenSpeed and vLLM dense/lockstep mixed across scenarios, see failure-helpers.ts
 * for the layout), and checks that only the requests on the failed rank end with a terminal error (SSE error event
 * then `[DONE]`, or an HTTP 5xx with an OpenAI-style body), that its siblings and the other group keep serving,
 * that /health and /metrics report the rank dead in a degraded group, and that every in-flight set is empty
 * afterwards. How long the affected requests took to end is printed as a diagnostic; durations are never asserted.
 *
 * In-process only (not in `npm run test:e2e:workers`): FailureScenario (failure-helpers.ts) times and checks each
 * failure on the engine client itself (its `failed` event, request registry and group failure stats), which no endpoint
 * shows. Rank deaths as HTTP sees them run with `--workers` in rank-rejoin, rank-stall, lockstep-rejoin and
 * engine-groups.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FailureScenario, SIM_ARGS, TEST_TIMEOUT, ms } from './failure-helpers.js';

test(
  '(a) SIGTERM of one dense vLLM rank (ENGINE_CORE_DEAD): only its requests fail; its sibling and the TokenSpeed group keep serving',
  TEST_TIMEOUT,
  async (t) => {
    const s = await FailureScenario.start({
      failing: { engine: 'vllm', sim: 2, simArgs: [...SIM_ARGS] },
      healthy: { engine: 'tokenspeed', sim: 1, simArgs: [...SIM_ARGS] },
    });
    t.after(() => s.close());
    const load = await s.placeLoad();

    // Rank 0 holds one stream; rank 1 (not signalled) holds a stream and the non-streaming request: both go on.
    const rank0 = s.failing.sims!.ranks[0]!;
    const inducedAt = performance.now();
    rank0.child.kill('SIGTERM');
    const report = await s.awaitRankFailure(load, 0, inducedAt, /DP rank 0 (died: ENGINE_CORE_DEAD|is gone)/);
    const exit = await rank0.exited;
    assert.equal(exit.code, 0, 'the rank shut down on SIGTERM');
    const cause = await s.assertRankReported(0, ['engine-core-dead', 'peer-unreachable']);
    t.diagnostic(
      `(a) SIGTERM of one rank → ENGINE_CORE_DEAD: rank dead ${ms(report.failedAt - inducedAt)} after the signal, cause ${cause}`,
    );
    for (const line of report.lines) t.diagnostic(`(a)   ${line}`);
    assert.equal(load.nonStreaming.ended(), false, 'the non-streaming request on rank 1 is still being generated');
    load.nonStreaming.cancel();
    await s.assertServesAndDrains(report.survivors, [0]);
  },
);

test(
  '(b) SIGKILL of one TokenSpeed rank (no sentinel): disconnect probes find it; its siblings and the lockstep vLLM group keep serving',
  TEST_TIMEOUT,
  async (t) => {
    const s = await FailureScenario.start({
      failing: { engine: 'tokenspeed', sim: 3, simArgs: [...SIM_ARGS] },
      healthy: { engine: 'vllm', sim: 2, lockstep: true, simArgs: [...SIM_ARGS] },
      // The per-rank silence watchdog is the backstop when zeromq reports no disconnect; short here so a missed
      // disconnect could not pass as a hang, yet far above the ~40 ms step of a live rank.
      gateway: { silenceTimeoutMs: 5_000 },
    });
    t.after(() => s.close());
    assert.equal(s.healthy.client.lockstep, true);
    const load = await s.placeLoad();

    const topRank = s.failingTopRank;
    const top = s.failing.sims!.ranks[topRank]!;
    const inducedAt = performance.now();
    top.child.kill('SIGKILL');
    const report = await s.awaitRankFailure(load, topRank, inducedAt, /EHOSTUNREACH|sent no output/);
    assert.equal((await top.exited).signal, 'SIGKILL');
    const cause = await s.assertRankReported(topRank, ['peer-unreachable', 'rank-silent']);
    const disconnectLogged = s.logs.some((r) => r.msg === 'an engine peer disconnected');
    t.diagnostic(
      `(b) SIGKILL of one rank: rank dead ${ms(report.failedAt - inducedAt)} after the signal, cause ${cause} ` +
        `(zeromq disconnect event ${disconnectLogged ? 'seen' : 'not seen'})`,
    );
    for (const line of report.lines) t.diagnostic(`(b)   ${line}`);
    await s.assertServesAndDrains(report.survivors, [topRank]);
  },
);

test(
  '(b2) SIGSTOP of one vLLM rank (hung, still connected) with a short silence timeout: its own silence watchdog marks it dead',
  TEST_TIMEOUT,
  async (t) => {
    const silenceTimeoutMs = 1_500;
    const s = await FailureScenario.start({
      failing: { engine: 'vllm', sim: 2, simArgs: [...SIM_ARGS] },
      healthy: { engine: 'tokenspeed', sim: 1, simArgs: [...SIM_ARGS] },
      gateway: { silenceTimeoutMs },
    });
    t.after(() => s.close());
    const load = await s.placeLoad();

    // The other rank of the group keeps streaming, so only the per-rank watchdog (dp-routing.md 14.8) can notice.
    const topRank = s.failingTopRank;
    const top = s.failing.sims!.ranks[topRank]!;
    const inducedAt = performance.now();
    top.child.kill('SIGSTOP');
    try {
      const report = await s.awaitRankFailure(
        load,
        topRank,
        inducedAt,
        new RegExp(`DP rank ${topRank} sent no output for ${silenceTimeoutMs} ms`),
      );
      await s.assertRankReported(topRank, ['rank-silent']);
      t.diagnostic(
        `(b2) SIGSTOP of one rank, silence timeout ${silenceTimeoutMs} ms: rank dead ${ms(report.failedAt - inducedAt)} after the signal`,
      );
      for (const line of report.lines) t.diagnostic(`(b2)   ${line}`);
      await s.assertServesAndDrains(report.survivors, [topRank]);
    } finally {
      top.child.kill('SIGCONT');
    }
  },
);
