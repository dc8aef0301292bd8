/**
 * End to end: the same `openai` SDK checks as openai-sdk.test.ts, against simulated vLLM EngineCore ranks (issue #3
 * "Done when": the SDK test passes against both engine families): a dense DP group (every rank reports
 * data_parallel_size 1, no wave frames) and a lockstep (MoE) group whose ranks park when drained and are woken by
 * START_DP_WAVE on every submit (dp-routing.md 13; engine-wire.md 5.7, 5.12). Two rank processes per group.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { pino } from 'pino';
import { startGateway, type RunningGateway } from '../../src/gateway.js';
import { openaiClient, streamChatWithUsage, streamPinnedCompletion } from '../helpers/gateway.js';

const MODEL = 'sim-qwen3';

for (const lockstep of [false, true]) {
  describe(`openai SDK against a simulated ${lockstep ? 'lockstep' : 'dense'} vLLM group (2 ranks)`, () => {
    let gateway: RunningGateway;
    let client: OpenAI;

    before(async () => {
      gateway = await startGateway({
        port: 0,
        logger: pino({ level: 'silent' }),
        modelId: MODEL,
        engine: 'vllm',
        sim: 2,
        lockstep,
        simArgs: ['--log-level', 'warn'],
      });
      client = openaiClient(gateway);
    });
    after(() => gateway?.close());

    test('the group is served with the vLLM wire, lockstep as configured', () => {
      assert.equal(gateway.groups.length, 1);
      assert.equal(gateway.groups[0]!.engine, 'vllm');
      assert.equal(gateway.client.lockstep, lockstep, 'lockstep iff the ready responses say data_parallel_size > 1');
      assert.deepEqual(gateway.client.engines.map((e) => e.ready.dataParallelSize), lockstep ? [2, 2] : [1, 1]);
    });

    test('lists the model', async () => {
      const models = await client.models.list();
      assert.deepEqual(models.data.map((m) => m.id), [MODEL]);
    });

    test('streaming chat completion: readable text and a finish reason', async () => {
      const { text, finish, usage } = await streamChatWithUsage(client, MODEL, 'Tell me something.', 24);
      assert.ok(text.trim().length > 0, 'some text');
      assert.ok(!text.includes('\uFFFD'), 'no replacement characters');
      // Plain words, punctuation and whitespace (the simulated text may break paragraphs with newlines).
      assert.match(text, /^[A-Za-z0-9\s.,;:'!?()-]+$/, `readable text, got ${JSON.stringify(text)}`);
      assert.ok(text.split(/\s+/).filter((w) => /^[A-Za-z]+[.,;:!?]?$/.test(w)).length >= 3, `at least 3 words in ${JSON.stringify(text)}`);
      assert.ok(finish === 'stop' || finish === 'length', `finish reason ${finish}`);
      // vLLM reports no cumulative completion count: the engine client's stream counts the tokens (types.ts).
      assert.ok(usage && usage.completion_tokens > 0 && usage.completion_tokens <= 24, JSON.stringify(usage));
      assert.ok(usage.prompt_tokens > 0);
    });

    test('non-streaming chat completion: the explicit limit reaches the vLLM engine (never a silent 16)', async () => {
      const res = await client.chat.completions.create({
        model: MODEL,
        messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello!' }],
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
      const states = gateway.client.rankStates();
      assert.equal(states.find((r) => r.engineIndex === 1)!.dispatchedPinned, 1);
      for (const r of states) assert.equal(r.inFlight, 0, `rank ${r.engineIndex} in-flight`);
    });

    test('abandoning a stream mid-generation sends ABORT and empties the in-flight set', async () => {
      const abortsBefore = gateway.client.stats.abortsSent;
      const stream = await client.chat.completions.create({
        model: MODEL,
        messages: [{ role: 'user', content: 'Write a long story.' }],
        max_tokens: 4000,
        stream: true,
      });
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta.content) break;
      }
      const deadline = Date.now() + 10_000; // hang guard only
      while (gateway.client.stats.abortsSent === abortsBefore || gateway.client.rankStates().some((r) => r.inFlight > 0)) {
        assert.ok(Date.now() < deadline, 'ABORT not sent within 10 s of the disconnect');
        await new Promise((r) => setTimeout(r, 10));
      }
      assert.equal(gateway.client.stats.abortsSent, abortsBefore + 1);
    });

    test('a lockstep group keeps serving after it drained and parked (every submit wakes it)', { skip: !lockstep }, async () => {
      const waveBefore = gateway.client.waveClock;
      for (let i = 0; i < 3; i++) {
        const res = await client.completions.create({ model: MODEL, prompt: `Round ${i}`, max_tokens: 4 });
        assert.ok(res.choices[0]!.text.length > 0);
        assert.equal(res.choices[0]!.finish_reason === 'length' || res.choices[0]!.finish_reason === 'stop', true);
      }
      assert.ok(waveBefore !== null && gateway.client.waveClock !== null);
      assert.ok(gateway.client.waveClock >= waveBefore, `wave clock ${waveBefore} → ${gateway.client.waveClock}`);
      for (const r of gateway.client.rankStates()) assert.equal(r.inFlight, 0);
    });

    test('a bad request surfaces as an OpenAI BadRequestError naming the parameter', async () => {
      await assert.rejects(
        client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], top_p: 0 }),
        (err: unknown) => err instanceof OpenAI.BadRequestError && /top_p/.test(err.message),
      );
    });
  });
}
