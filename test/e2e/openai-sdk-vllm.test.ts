/**
 * End to end: the same `openai` SDK checks as openai-sdk.test.ts, against simulated vLLM EngineCore ranks (issue #3
 * "Done when": the SDK test passes against both engine families): a dense DP group (every rank reports
 * data_parallel_size 1, no wave frames) and a lockstep (MoE) group whose ranks park when drained and are woken by
 * START_DP_WAVE on every submit (dp-routing.md 13; engine-wire.md 5.7, 5.12). Two rank processes per group. Runs
 * with one process or `serve --workers N` (GATEWAY_TEST_WORKERS); the lockstep flag, the ready responses and the wave
 * clock are engine-client internals no HTTP endpoint shows, checked in-process only.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { openaiClient, streamChatWithUsage, streamPinnedCompletion } from '../helpers/gateway.js';
import { startTestGateway, testWorkers, type TestGateway } from '../helpers/test-gateway.js';

const MODEL = 'sim-qwen3';

for (const lockstep of [false, true]) {
  describe(`openai SDK against a simulated ${lockstep ? 'lockstep' : 'dense'} vLLM group (2 ranks)`, () => {
    let gateway: TestGateway;
    let client: OpenAI;

    before(async () => {
      gateway = await startTestGateway({
        modelId: MODEL,
        engine: 'vllm',
        sim: 2,
        lockstep,
        simArgs: ['--log-level', 'warn'],
      });
      client = openaiClient(gateway);
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

    test('lists the model', async () => {
      const models = await client.models.list();
      assert.deepEqual(
        models.data.map((m) => m.id),
        [MODEL],
      );
    });

    test('streaming chat completion: readable text and a finish reason', async () => {
      const { text, finish, usage } = await streamChatWithUsage(client, MODEL, 'Tell me something.', 24);
      assert.ok(text.trim().length > 0, 'some text');
      assert.ok(!text.includes('\uFFFD'), 'no replacement characters');
      // Plain words, punctuation and whitespace (the simulated text may break paragraphs with newlines).
      assert.match(text, /^[A-Za-z0-9\s.,;:'!?()-]+$/, `readable text, got ${JSON.stringify(text)}`);
      assert.ok(
        text.split(/\s+/).filter((w) => /^[A-Za-z]+[.,;:!?]?$/.test(w)).length >= 3,
        `at least 3 words in ${JSON.stringify(text)}`,
      );
      assert.ok(finish === 'stop' || finish === 'length', `finish reason ${finish}`);
      // vLLM reports no cumulative completion count: the engine client's stream counts the tokens (types.ts).
      assert.ok(usage && usage.completion_tokens > 0 && usage.completion_tokens <= 24, JSON.stringify(usage));
      assert.ok(usage.prompt_tokens > 0);
    });

    test('non-streaming chat completion: the explicit limit reaches the vLLM engine (never a silent 16)', async () => {
      const res = await client.chat.completions.create({
        model: MODEL,
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'Hello!' },
        ],
        max_completion_tokens: 40,
        // ignore_eos is a vLLM/SGLang extension: the simulated rank then runs to the limit.
        ...({ ignore_eos: true } as Record<string, unknown>),
      });
      assert.match(res.id, /^chatcmpl-/);
      const choice = res.choices[0]!;
      assert.equal(choice.message.role, 'assistant');
      assert.ok((choice.message.content ?? '').trim().length > 0);
      assert.equal(choice.finish_reason, 'length');
      assert.equal(res.usage!.completion_tokens, 40, 'the explicit limit reached the engine (not a silent 16)');
      assert.equal(res.usage!.total_tokens, res.usage!.prompt_tokens + res.usage!.completion_tokens);
    });

    test('streaming completion pinned to rank 1, then every in-flight set is empty', async () => {
      const { text, finish } = await streamPinnedCompletion(client, MODEL, 'Once upon a time', 8, 1);
      assert.ok(text.length > 0);
      assert.ok(finish === 'stop' || finish === 'length');
      const states = await gateway.rankStates();
      assert.equal(states.find((r) => r.dp_rank === 1)!.dispatched_pinned, 1);
      for (const r of states) assert.equal(r.in_flight, 0, `rank ${r.dp_rank} in-flight`);
    });

    test('abandoning a stream mid-generation sends ABORT and empties the in-flight set', async () => {
      const aborts = () => gateway.metricSum('model_gateway_aborts_sent_total');
      const inFlight = async () => (await gateway.rankStates()).reduce((n, r) => n + r.in_flight, 0);
      const abortsBefore = await aborts();
      const stream = await client.chat.completions.create({
        model: MODEL,
        messages: [{ role: 'user', content: 'Write a long story.' }],
        max_tokens: 4000,
        // Runs to the limit: a stream that ended by itself before the gateway saw the disconnect would need no ABORT
        // (it happened under load: the text model's answer can be short).
        ...({ ignore_eos: true } as Record<string, unknown>),
        stream: true,
      });
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta.content) break;
      }
      const deadline = Date.now() + 60_000; // hang guard only
      while ((await aborts()) === abortsBefore || (await inFlight()) > 0) {
        assert.ok(Date.now() < deadline, 'ABORT not sent within 60 s of the disconnect');
        await new Promise((r) => setTimeout(r, 50));
      }
      assert.equal(await aborts(), abortsBefore + 1);
    });

    test(
      'a lockstep group keeps serving after it drained and parked (every submit wakes it)',
      { skip: !lockstep },
      async () => {
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
      },
    );

    test('a bad request surfaces as an OpenAI BadRequestError naming the parameter', async () => {
      await assert.rejects(
        client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], top_p: 0 }),
        (err: unknown) => err instanceof OpenAI.BadRequestError && /top_p/.test(err.message),
      );
    });
  });
}
