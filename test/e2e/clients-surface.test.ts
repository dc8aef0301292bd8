/**
 * The client matrix of issue 31 part 5: embeddings, LoRA adapters and reasoning controls through the clients people
 * use (openai SDK, the Vercel AI SDK's default `openai()` provider and its openai-compatible one, LangChain and a
 * LangGraph graph), against
 * one gateway per engine family; LlamaIndex's `OpenAIEmbedding` and the OpenAI Agents SDK (chat-completions model,
 * `modelSettings.reasoning`) and a Mastra agent with its embedding model too, and the newest majors beside the pinned ones: openai 7 and ai 7 (@ai-sdk/openai 4). Both families' simulated ranks think before answering (`--reasoning`, parsed with
 * `--reasoning-parser qwen3`). vLLM: embeddings and an adapter (`--lora-modules`) are served; TokenSpeed: both are
 * refused with the errors a client can tell apart (400 `unsupported_task`, 404 for an adapter name). Reasoning works
 * on both: `reasoning_effort` (chat), `reasoning.effort` / `summary` (Responses), and the AI SDK's default provider
 * shows the reasoning (it reads the summary events).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { embed, generateText, streamText } from 'ai';
import { ChatOpenAI, OpenAIEmbeddings } from '@langchain/openai';
import { END, MessagesAnnotation, START, StateGraph } from '@langchain/langgraph';
import { OpenAIEmbedding } from '@llamaindex/openai';
import { Agent, OpenAIChatCompletionsModel, run, setTracingDisabled } from '@openai/agents';
// The newest majors beside the pinned ones (npm aliases): openai 7, ai 7 with @ai-sdk/openai 4.
import OpenAI7 from 'openai-v7';
import { embed as embed7, generateText as generateText7 } from 'ai-v7';
import { createOpenAI as createOpenAI4 } from 'ai-sdk-openai-v4';
import { startTestGateway, type TestGateway } from '../helpers/test-gateway.js';

const MODEL = 'sim-qwen3';
const TIMEOUT = { timeout: 90_000 };
const SIM_ARGS = ['--time-scale', '0', '--log-level', 'warn', '--reasoning'];

for (const engine of ['vllm', 'tokenspeed'] as const) {
  describe(`the new client surface against simulated ${engine} ranks`, () => {
    let gateway: TestGateway;
    let dir: string;
    const url = () => `${gateway.url}/v1`;
    const client = () => new OpenAI({ baseURL: url(), apiKey: 'unused', maxRetries: 0 });

    before(async () => {
      dir = await mkdtemp(join(tmpdir(), 'mgw-surface-'));
      gateway = await startTestGateway({
        modelId: MODEL,
        engine,
        sim: 2,
        simArgs: SIM_ARGS,
        reasoningParser: 'qwen3',
        loraModules: [{ name: 'sql', path: dir, baseModelName: null }],
      });
    });
    after(async () => {
      await gateway?.close();
      await rm(dir, { recursive: true, force: true });
    });

    test('embeddings: openai SDK, AI SDK embed(), LangChain OpenAIEmbeddings', TIMEOUT, async () => {
      const ai = createOpenAI({ baseURL: url(), apiKey: 'unused' });
      const lc = new OpenAIEmbeddings({
        model: MODEL,
        apiKey: 'unused',
        configuration: { baseURL: url() },
        maxRetries: 0,
      });
      if (engine === 'vllm') {
        const r = await client().embeddings.create({ model: MODEL, input: ['a', 'b'] });
        assert.equal(r.data.length, 2);
        assert.equal(
          (await embed({ model: ai.embedding(MODEL), value: 'c', maxRetries: 0 })).embedding.length,
          r.data[0]!.embedding.length,
        );
        assert.equal((await lc.embedQuery('d')).length, r.data[0]!.embedding.length);
        const li = new OpenAIEmbedding({ model: MODEL, apiKey: 'unused', baseURL: url(), maxRetries: 0 });
        assert.equal((await li.getTextEmbedding('e')).length, r.data[0]!.embedding.length);
      } else {
        await assert.rejects(
          client().embeddings.create({ model: MODEL, input: 'a' }),
          (e: unknown) => e instanceof OpenAI.BadRequestError && e.code === 'unsupported_task',
        );
        await assert.rejects(embed({ model: ai.embedding(MODEL), value: 'c', maxRetries: 0 }), /embed/i);
        await assert.rejects(lc.embedQuery('d'));
        const li = new OpenAIEmbedding({ model: MODEL, apiKey: 'unused', baseURL: url(), maxRetries: 0 });
        await assert.rejects(li.getTextEmbedding('e'));
      }
    });

    test('a LoRA adapter by model name: openai SDK, AI SDK openai-compatible, LangChain', TIMEOUT, async () => {
      const compat = createOpenAICompatible({ name: 'sim', baseURL: url(), apiKey: 'unused' });
      const lc = new ChatOpenAI({
        model: 'sql',
        apiKey: 'unused',
        configuration: { baseURL: url() },
        maxRetries: 0,
        maxTokens: 8,
      });
      if (engine === 'vllm') {
        const r = await client().chat.completions.create({
          model: 'sql',
          messages: [{ role: 'user', content: 'q' }],
          max_tokens: 8,
        });
        assert.equal(r.model, 'sql');
        const { text } = await generateText({
          model: compat.chatModel('sql'),
          prompt: 'q',
          maxOutputTokens: 8,
          maxRetries: 0,
        });
        assert.equal(typeof text, 'string');
        assert.equal((await lc.invoke('q')).response_metadata?.model_name, 'sql');
        assert.ok((await client().models.list()).data.some((m) => m.id === 'sql'));
      } else {
        await assert.rejects(
          client().chat.completions.create({ model: 'sql', messages: [{ role: 'user', content: 'q' }] }),
          (e: unknown) => e instanceof OpenAI.NotFoundError,
        );
        await assert.rejects(generateText({ model: compat.chatModel('sql'), prompt: 'q', maxRetries: 0 }));
        await assert.rejects(lc.invoke('q'));
      }
    });

    test(
      'reasoning: effort on chat and Responses; the AI SDK default provider shows the reasoning',
      TIMEOUT,
      async () => {
        // Effort none turns Qwen3 thinking off: the answer has no reasoning; high leaves it on.
        const off = await client().chat.completions.create({
          model: MODEL,
          messages: [{ role: 'user', content: 'Hi' }],
          max_tokens: 60,
          reasoning_effort: 'none',
        });
        assert.equal(
          (off.choices[0]!.message as { reasoning_content?: string | null }).reasoning_content ?? null,
          null,
        );
        const on = await client().chat.completions.create({
          model: MODEL,
          messages: [{ role: 'user', content: 'Hi' }],
          max_tokens: 200,
          reasoning_effort: 'high',
        });
        assert.ok(((on.choices[0]!.message as { reasoning_content?: string }).reasoning_content ?? '').length > 0);
        // The AI SDK's chat provider passes reasoningEffort through (it was a 400 before).
        const ai = createOpenAI({ baseURL: url(), apiKey: 'unused' });
        const viaChat = await generateText({
          model: ai.chat(MODEL),
          prompt: 'Hi',
          maxOutputTokens: 60,
          providerOptions: { openai: { reasoningEffort: 'low' } },
          maxRetries: 0,
        });
        assert.equal(typeof viaChat.text, 'string');
        // The default openai() provider (Responses) shows the reasoning, buffered and streamed.
        const shown = await generateText({
          model: ai(MODEL),
          prompt: 'Think, then answer.',
          maxOutputTokens: 200,
          maxRetries: 0,
        });
        assert.ok((shown.reasoningText ?? '').length > 0, 'reasoningText from the summary');
        const streamed = streamText({
          model: ai(MODEL),
          prompt: 'Think, then answer.',
          maxOutputTokens: 200,
          maxRetries: 0,
        });
        let reasoning = '';
        for await (const part of streamed.fullStream) if (part.type === 'reasoning-delta') reasoning += part.text;
        assert.ok(reasoning.length > 0, 'reasoning deltas from the summary events');
        const response = await client().responses.create({
          model: MODEL,
          input: 'Think first.',
          max_output_tokens: 200,
          reasoning: { effort: 'high', summary: 'auto' },
        });
        const item = response.output.find((o) => o.type === 'reasoning') as
          | OpenAI.Responses.ResponseReasoningItem
          | undefined;
        assert.ok((item?.summary[0]?.text ?? '').length > 0);
        const lc = new ChatOpenAI({
          model: MODEL,
          apiKey: 'unused',
          configuration: { baseURL: url() },
          maxRetries: 0,
          reasoning: { effort: 'low' },
        });
        assert.equal(typeof (await lc.invoke('Hi')).content, 'string');
        // LangGraph: a one-node graph over the same reasoning model.
        const graph = new StateGraph(MessagesAnnotation)
          .addNode('model', async (state) => ({ messages: [await lc.invoke(state.messages)] }))
          .addEdge(START, 'model')
          .addEdge('model', END)
          .compile();
        const out = await graph.invoke({ messages: [{ role: 'user', content: 'Hi' }] });
        assert.equal(out.messages.length, 2);
        // The OpenAI Agents SDK in chat mode sends modelSettings.reasoning as reasoning_effort (a 400 before).
        setTracingDisabled(true);
        const agent = new Agent({
          name: 'sim',
          instructions: 'Answer briefly.',
          model: new OpenAIChatCompletionsModel(client() as never, MODEL),
          modelSettings: { reasoning: { effort: 'low' }, maxTokens: 60 },
        });
        const result = await run(agent, 'Hi');
        assert.equal(typeof result.finalOutput, 'string');
      },
    );
    test('the newest majors: openai 7 and ai 7 embed, address the adapter, show the reasoning', TIMEOUT, async () => {
      const c7 = new OpenAI7({ baseURL: url(), apiKey: 'unused', maxRetries: 0 });
      const ai4 = createOpenAI4({ baseURL: url(), apiKey: 'unused' });
      if (engine === 'vllm') {
        assert.equal((await c7.embeddings.create({ model: MODEL, input: 'a' })).data.length, 1);
        assert.ok((await embed7({ model: ai4.embedding(MODEL), value: 'b', maxRetries: 0 })).embedding.length > 0);
        const r = await c7.chat.completions.create({
          model: 'sql',
          messages: [{ role: 'user', content: 'q' }],
          max_tokens: 4,
        });
        assert.equal(r.model, 'sql');
      } else {
        await assert.rejects(
          c7.embeddings.create({ model: MODEL, input: 'a' }),
          (e: unknown) => e instanceof OpenAI7.BadRequestError,
        );
        await assert.rejects(
          c7.chat.completions.create({ model: 'sql', messages: [{ role: 'user', content: 'q' }] }),
          (e: unknown) => e instanceof OpenAI7.NotFoundError,
        );
      }
      const off = await c7.chat.completions.create({
        model: MODEL,
        messages: [{ role: 'user', content: 'Hi' }],
        max_tokens: 60,
        reasoning_effort: 'none',
      });
      assert.equal((off.choices[0]!.message as { reasoning_content?: string | null }).reasoning_content ?? null, null);
      const shown = await generateText7({
        model: ai4(MODEL),
        prompt: 'Think, then answer.',
        maxOutputTokens: 200,
        maxRetries: 0,
      });
      assert.ok((shown.reasoningText ?? '').length > 0, 'ai 7 default provider: reasoningText from the summary');
    });
    test(
      'Mastra: an agent shows the reasoning and addresses the adapter; its embedding model embeds',
      TIMEOUT,
      async () => {
        // Mastra's model router reaches an OpenAI-compatible endpoint from { providerId, modelId, url }; its request
        // options go under the provider id. Its usage telemetry is off in tests (read once, at import).
        process.env['MASTRA_TELEMETRY_DISABLED'] = '1';
        const { Agent: MastraAgent } = await import('@mastra/core/agent');
        const { ModelRouterEmbeddingModel } = await import('@mastra/core/llm');
        const model = (modelId: string) => ({ providerId: 'gateway', modelId, url: url(), apiKey: 'unused' });
        const agent = new MastraAgent({ id: 'sim', name: 'sim', instructions: 'Answer briefly.', model: model(MODEL) });
        const shown = await agent.generate('Think, then answer.', { modelSettings: { maxOutputTokens: 200 } });
        assert.ok((shown.reasoningText ?? '').length > 0, 'Mastra reasoningText');
        assert.ok(shown.text.length > 0);
        const streamed = await agent.stream('Think, then answer.', { modelSettings: { maxOutputTokens: 200 } });
        let reasoning = '';
        for await (const part of streamed.fullStream as AsyncIterable<{ type: string; payload?: { text?: string } }>)
          if (part.type === 'reasoning-delta') reasoning += part.payload?.text ?? '';
        assert.ok(reasoning.length > 0, 'Mastra streamed reasoning deltas');
        const off = await agent.generate('Hi', {
          modelSettings: { maxOutputTokens: 60 },
          providerOptions: { gateway: { reasoningEffort: 'none' } },
        });
        assert.equal(off.reasoningText ?? '', '', 'reasoningEffort none turns thinking off');
        const adapter = new MastraAgent({ id: 'sql', name: 'sql', instructions: 'SQL only.', model: model('sql') });
        const embedder = new ModelRouterEmbeddingModel(model(MODEL));
        if (engine === 'vllm') {
          const r = await adapter.generate('q', { modelSettings: { maxOutputTokens: 8 } });
          assert.equal(r.response?.modelId, 'sql');
          const { embeddings } = await embedder.doEmbed({ values: ['a', 'b'] });
          assert.equal(embeddings.length, 2);
          assert.ok(embeddings[0]!.length > 0);
        } else {
          await assert.rejects(adapter.generate('q', { modelSettings: { maxOutputTokens: 8 } }));
          await assert.rejects(embedder.doEmbed({ values: ['a'] }));
        }
      },
    );
  });
}
