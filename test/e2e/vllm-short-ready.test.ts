/**
 * End to end (issue #14 "Done when"): simulated vLLM ranks that register with the short ready response of vLLM
 * releases up to at least 9aaf83ef (`--ready-response short`: `max_model_len`, `num_gpu_blocks`, `dp_stats_address`
 * only, so no `data_parallel_size`) serve chat completions in three groups behind one gateway:
 * - a dense group (kind unknown to the gateway: its first request wakes it once, harmlessly; it never turns lockstep);
 * - a lockstep group in `auto` mode: it parks at wave 0, so its first request would hang without the probe wake; the
 *   `wave_complete` that follows makes the gateway treat it as lockstep;
 * - a lockstep group forced by the option (`lockstepMode: true`, CLI `--lockstep`).
 * Plus the `min_tokens` stop-string check on the vLLM family (min-tokens-helpers.ts). Ranks run at time scale 0.
 *
 * Group choice: requests are sent one at a time, so every group is idle at each choice and the rotating tie-break of
 * src/server/groups.ts spreads them; the test learns which group served a request from the dispatch counters rather
 * than assuming the order.
 *
 * In-process only (not in `npm run test:e2e:workers`): its assertions are the engine client's view of each group
 * (the parsed ready responses, the group kind and who decided it, the wave clock), which no endpoint shows.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type OpenAI from 'openai';
import { pino } from 'pino';
import { startGateway, type RunningGateway, type RunningGroup } from '../../src/gateway/index.js';
import { openaiClient } from '../helpers/gateway.js';
import { checkMinTokensStops } from './min-tokens-helpers.js';

const MODEL = 'sim-qwen3';
const SIM_ARGS = ['--time-scale', '0', '--log-level', 'warn', '--ready-response', 'short'];

const served = (g: RunningGroup): number =>
  g.client.rankStates().reduce((n, r) => n + r.dispatchedPinned + r.dispatchedUnpinned, 0);

/** Poll `cond` every 10 ms; a hang guard only (fails after `ms`), never a speed assertion. */
async function waitFor(cond: () => boolean, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('vLLM ranks with the short ready response: dense, lockstep detected from wave_complete, lockstep forced', () => {
  let gateway: RunningGateway;
  let client: OpenAI;
  let dense: RunningGroup;
  let auto: RunningGroup;
  let forced: RunningGroup;

  before(async () => {
    gateway = await startGateway({
      port: 0,
      logger: pino({ level: 'silent' }),
      modelId: MODEL,
      groups: [
        { engine: 'vllm', sim: 2, simArgs: SIM_ARGS },
        { engine: 'vllm', sim: 2, lockstep: true, simArgs: SIM_ARGS },
        { engine: 'vllm', sim: 2, lockstep: true, lockstepMode: true, simArgs: SIM_ARGS },
      ],
    });
    [dense, auto, forced] = gateway.groups as [RunningGroup, RunningGroup, RunningGroup];
    client = openaiClient(gateway);
  });
  after(() => gateway?.close());

  test('every rank registered with the short form; kinds before any request: unknown, unknown, lockstep (option)', () => {
    for (const g of [dense, auto, forced]) {
      assert.deepEqual(
        g.client.engines.map((e) => [e.ready.form, e.ready.maxModelLen, e.ready.dataParallelSize, e.ready.vllmVersion]),
        [
          ['short', 32768, null, null],
          ['short', 32768, null, null],
        ],
      );
    }
    assert.deepEqual(
      [dense, auto, forced].map((g) => g.client.groupKind),
      [
        { kind: 'unknown', decidedBy: null },
        { kind: 'unknown', decidedBy: null },
        { kind: 'lockstep', decidedBy: 'option' },
      ],
    );
  });

  test(
    'chat completions, streamed and not, through every group; each group serves several in a row',
    { timeout: 120_000 },
    async () => {
      const groups = [dense, auto, forced];
      const counts = groups.map(() => 0);
      for (let i = 0; i < 24 && counts.some((c) => c < 3); i++) {
        const before = groups.map(served);
        const messages = [{ role: 'user' as const, content: `Question ${i}: tell me something.` }];
        let text = '';
        let finish: string | null = null;
        if (i % 2 === 0) {
          const res = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 12 });
          text = res.choices[0]!.message.content ?? '';
          finish = res.choices[0]!.finish_reason;
        } else {
          const stream = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 12, stream: true });
          for await (const chunk of stream) {
            text += chunk.choices[0]?.delta.content ?? '';
            finish = chunk.choices[0]?.finish_reason ?? finish;
          }
        }
        assert.ok(text.trim().length > 0, `request ${i}: some text`);
        assert.ok(finish === 'stop' || finish === 'length', `request ${i}: finish ${finish}`);
        const which = groups.findIndex((g, k) => served(g) === before[k]! + 1);
        assert.ok(which >= 0, `request ${i} was dispatched to exactly one group`);
        counts[which]!++;
      }
      assert.ok(
        counts.every((c) => c >= 3),
        `requests per group (dense, auto, forced): ${counts.join(', ')}`,
      );
      for (const g of groups) for (const r of g.client.rankStates()) assert.equal(r.inFlight, 0);
    },
  );

  test('the auto group was detected lockstep from its wave_complete; the dense group never sends one', async () => {
    await waitFor(() => auto.client.lockstep, 'the auto group to be detected lockstep');
    assert.deepEqual(auto.client.groupKind, { kind: 'lockstep', decidedBy: 'wave-notification' });
    assert.ok(
      (auto.client.waveClock ?? 0) >= 3,
      `the auto group's clock moved with its waves: ${auto.client.waveClock}`,
    );
    assert.ok(
      (forced.client.waveClock ?? 0) >= 3,
      `every submit to the forced group woke it: ${forced.client.waveClock}`,
    );
    assert.deepEqual(dense.client.groupKind, { kind: 'unknown', decidedBy: null });
    assert.equal(dense.client.lockstep, false);
    assert.equal(dense.client.waveClock, null);
    for (const g of [dense, auto, forced]) assert.equal(g.client.isAlive(), true);
  });

  test(
    'min_tokens: stop strings do not apply before min_tokens tokens (vLLM ranks), streamed or not',
    { timeout: 120_000 },
    async () => {
      const checked = await checkMinTokensStops(gateway.url, MODEL, {
        prompts: ['Once upon a time', 'Tell me a story.'],
        seeds: [3, 11],
      });
      assert.equal(checked, 2 * 2 * 2 * 2 * 2);
    },
  );
});
