/**
 * End to end, a send that does not complete within the send timeout (issue #3 part 4, issue #8 parts 1 and 4;
 * engine-wire.md 1.9, SMG PR #2094; dp-routing.md 6; src/transport/zmq-link.ts): one rank of a TokenSpeed group is
 * stopped with SIGSTOP, so it no longer reads its input socket while staying connected; requests with large token-id
 * prompts pinned to it then fill the kernel socket buffer and the input ROUTER's per-peer high-water mark (lowered to
 * 2 messages via `startGateway({ sendHighWaterMark })`), until a send stays refused with EAGAIN for `sendTimeoutMs`
 * (1 000 ms here instead of the 10 s default). That marks the rank dead (cause send-timeout): every request it held
 * ends with a terminal error, including the ones whose ADD was still queued behind the blocked one (an HTTP 503
 * body, their response had not started), while its sibling and the vLLM group keep serving (per-rank send queues:
 * the stuck rank never held the others' sends). The silence watchdog keeps its 300 s default and the stall timeout
 * its 60 s, so only the send timeout can fire.
 *
 * In-process only (not in `npm run test:e2e:workers`): it lowers the input ROUTER's high-water mark
 * (`startGateway({ sendHighWaterMark })`, no CLI flag: a test knob) and uses FailureScenario, which reads the engine
 * client's internals (failures.test.ts).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FailureScenario, MODEL, SIM_ARGS, TEST_TIMEOUT, ms, type SentRequest } from './failure-helpers.js';

const SEND_TIMEOUT_MS = 1_000;
/** Prompt tokens of each large request: ids ≥ 65 536 take 5 msgpack bytes each, so about 300 kB per ADD. */
const BIG_PROMPT_TOKENS = 60_000;
/** Large requests sent to the stopped rank: well beyond the ~210 kB kernel buffer plus 2 queued messages. */
const BIG_REQUESTS = 12;

test(
  '(c) a send blocked past the send timeout (SIGSTOPped TokenSpeed rank) marks that rank dead; its sibling and the vLLM group keep serving',
  TEST_TIMEOUT,
  async (t) => {
    const s = await FailureScenario.start({
      failing: { engine: 'tokenspeed', sim: 2, simArgs: [...SIM_ARGS, '--max-model-len', '131072'] },
      healthy: { engine: 'vllm', sim: 1, simArgs: [...SIM_ARGS] },
      gateway: { sendTimeoutMs: SEND_TIMEOUT_MS, sendHighWaterMark: 2 },
    });
    t.after(() => s.close());
    const load = await s.placeLoad();

    const topRank = s.failingTopRank;
    const top = s.failing.sims!.ranks[topRank]!;
    top.child.kill('SIGSTOP');
    const prompt = Array.from({ length: BIG_PROMPT_TOKENS }, (_, i) => 100_000 + (i % 1000));
    const inducedAt = performance.now();
    const big: SentRequest[] = [];
    for (let i = 0; i < BIG_REQUESTS; i++) {
      big.push(
        s.send(
          { model: MODEL, prompt, max_tokens: 16, ignore_eos: true },
          { stream: true, dpRank: topRank, label: `large stream #${i} pinned to rank ${topRank}` },
        ),
      );
    }
    try {
      const report = await s.awaitRankFailure(
        load,
        topRank,
        inducedAt,
        // A large request that reached the gateway after the rank was marked dead is refused with the rank's state
        // (HTTP 503): on a loaded machine the send timeout can fire before all of them are submitted. The cause of
        // the death is asserted below (send-timeout).
        new RegExp(
          `did not complete within ${SEND_TIMEOUT_MS} ms|DP rank ${topRank} cannot take requests now \\(.*: dead\\)`,
        ),
        big,
      );
      await s.assertRankReported(topRank, ['send-timeout']);
      const bigOutcomes = await Promise.all(big.map((r) => r.done));
      const started = bigOutcomes.filter((o) => o.sse !== null).length;
      const refused = bigOutcomes.filter((o) => o.sse === null).length;
      assert.ok(refused >= 1, 'at least the request whose send blocked got an HTTP error answer');
      const errorText = (o: (typeof bigOutcomes)[number]) => JSON.stringify(o.sse?.error ?? o.json);
      assert.ok(
        bigOutcomes.some((o) => errorText(o).includes(`did not complete within ${SEND_TIMEOUT_MS} ms`)),
        'the requests in flight when the send blocked name the send timeout',
      );
      t.diagnostic(
        `(c) send timeout ${SEND_TIMEOUT_MS} ms, high-water mark 2: rank dead ${ms(report.failedAt - inducedAt)} after the ` +
          `first large request was sent to the stopped rank; of ${BIG_REQUESTS} large requests ${started} had been sent ` +
          `(SSE error) and ${refused} were blocked or queued (HTTP error)`,
      );
      for (const line of report.lines) t.diagnostic(`(c)   ${line}`);
      await s.assertServesAndDrains(report.survivors, [topRank]);
    } finally {
      top.child.kill('SIGCONT');
    }
  },
);
