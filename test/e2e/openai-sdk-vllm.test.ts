/**
 * End to end: the `openai` SDK scenarios of openai-sdk-scenarios.ts (run against TokenSpeed by openai-sdk.test.ts)
 * against simulated vLLM EngineCore ranks (issue #3 "Done when": the SDK test passes against both engine families): a
 * dense DP group (every rank reports data_parallel_size 1, no wave frames; the basics, the issue #4 parameters and the
 * chat scenarios) and a lockstep (MoE) group whose ranks park when drained and are woken by START_DP_WAVE on every
 * submit (dp-routing.md 13; engine-wire.md 5.7, 5.12; the basics and the wake-up). Two rank processes per group. Runs
 * with one process or `serve --workers N` (GATEWAY_TEST_WORKERS); the lockstep flag, the ready responses and the wave
 * clock are engine-client internals no HTTP endpoint shows, checked in-process only.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { openaiClient } from '../helpers/gateway.js';
import { startTestGateway, testWorkers, type TestGateway } from '../helpers/test-gateway.js';
import { sdkBasics, sdkChat, sdkParameters } from './openai-sdk-scenarios.js';

const MODEL = 'sim-qwen3';

for (const lockstep of [false, true]) {
  describe(`openai SDK against a simulated ${lockstep ? 'lockstep' : 'dense'} vLLM group (2 ranks)`, () => {
    let gateway: TestGateway;
    before(async () => {
      gateway = await startTestGateway({
        modelId: MODEL,
        engine: 'vllm',
        sim: 2,
        lockstep,
        simArgs: ['--log-level', 'warn'],
      });
    });
    after(() => gateway?.close());

    test('the group is served with the vLLM wire, lockstep as configured', async () => {
      const groups = await gateway.groups();
      assert.deepEqual(
        groups.map((g) => g.engine),
        ['vllm'],
      );
      const inProcess = gateway.inProcess;
      if (inProcess === null) return; // the lockstep flag and the ready responses are not on HTTP
      assert.equal(inProcess.client.lockstep, lockstep, 'lockstep iff the ready responses say data_parallel_size > 1');
      assert.deepEqual(
        inProcess.client.engines.map((e) => e.ready.dataParallelSize),
        lockstep ? [2, 2] : [1, 1],
      );
    });

    sdkBasics(() => gateway, MODEL);

    if (!lockstep) {
      sdkParameters(() => gateway, MODEL);
      sdkChat(() => gateway, MODEL);
      return;
    }

    test('a lockstep group keeps serving after it drained and parked (every submit wakes it)', async () => {
      const client = openaiClient(gateway);
      const waveClock = () => gateway.inProcess?.client.waveClock; // undefined with --workers: not on HTTP
      const waveBefore = waveClock();
      for (let i = 0; i < 3; i++) {
        const res = await client.completions.create({ model: MODEL, prompt: `Round ${i}`, max_tokens: 4 });
        assert.ok(res.choices[0]!.text.length > 0);
        assert.equal(res.choices[0]!.finish_reason === 'length' || res.choices[0]!.finish_reason === 'stop', true);
      }
      if (testWorkers() === 1) {
        const after = waveClock();
        assert.ok(waveBefore != null && after != null);
        assert.ok(after >= waveBefore, `wave clock ${waveBefore} → ${after}`);
      }
      for (const r of await gateway.rankStates()) assert.equal(r.in_flight, 0);
    });
  });
}
