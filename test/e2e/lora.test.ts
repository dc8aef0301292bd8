/**
 * End to end: LoRA adapters on simulated vLLM ranks (issue 31 part 2). An adapter from `--lora-modules` is a model
 * name: listed by /v1/models with its parent, addressed by the openai SDK, the AI SDK's openai-compatible provider
 * and LangChain, answered under its own name, and sent to the ranks as the request's `LoRARequest` (the ranks'
 * scheduler stats then name it: `vllm:lora_requests_info`). Adapters load and unload at run time through vLLM's
 * routes (a utility call to every rank), with vLLM's answers for a path no rank can find, a name already loaded and
 * an unknown one. Runs in both modes (GATEWAY_TEST_WORKERS).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, mkdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText } from 'ai';
import { ChatOpenAI } from '@langchain/openai';
import { startTestGateway, type TestGateway } from '../helpers/test-gateway.js';
import { waitFor } from '../helpers/async.js';

const MODEL = 'sim-qwen3';
const TIMEOUT = { timeout: 60_000 };

describe('LoRA adapters over simulated vLLM ranks', () => {
  let gateway: TestGateway;
  let dir: string;
  let openai: OpenAI;
  const post = (path: string, body: unknown) =>
    fetch(`${gateway.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const modelIds = async () =>
    (
      (await (await fetch(`${gateway.url}/v1/models`)).json()) as {
        data: { id: string; parent: string | null; root: string }[];
      }
    ).data;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'mgw-lora-e2e-'));
    await mkdir(join(dir, 'sql'));
    await mkdir(join(dir, 'chat'));
    gateway = await startTestGateway({
      modelId: MODEL,
      engine: 'vllm',
      sim: 2,
      simArgs: ['--time-scale', '1', '--log-level', 'warn'],
      loraModules: [{ name: 'sql', path: join(dir, 'sql'), baseModelName: null }],
      allowRuntimeLoraUpdating: true,
      dpPolicy: 'lora_aware',
      maxLoras: 2,
    });
    openai = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    await gateway?.close();
    await rm(dir, { recursive: true, force: true });
  });

  test('an adapter is a model: listed with its parent, answered under its name by three clients', TIMEOUT, async () => {
    const sql = (await modelIds()).find((m) => m.id === 'sql');
    assert.deepEqual({ parent: sql?.parent, root: sql?.root }, { parent: MODEL, root: join(dir, 'sql') });
    const chat = await openai.chat.completions.create({
      model: 'sql',
      messages: [{ role: 'user', content: 'list the tables' }],
      max_tokens: 5,
    });
    assert.equal(chat.model, 'sql');
    assert.ok(chat.choices[0]!.message.content);
    const compat = createOpenAICompatible({ name: 'sim', baseURL: `${gateway.url}/v1`, apiKey: 'unused' });
    const { text } = await generateText({
      model: compat.chatModel('sql'),
      prompt: 'hi',
      maxOutputTokens: 5,
      maxRetries: 0,
    });
    assert.ok(text.length > 0);
    const lc = new ChatOpenAI({
      model: 'sql',
      apiKey: 'unused',
      configuration: { baseURL: `${gateway.url}/v1` },
      maxRetries: 0,
      maxTokens: 5,
    });
    assert.ok(String((await lc.invoke('hi')).content).length > 0);
    await assert.rejects(
      openai.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }),
      (e: unknown) => e instanceof OpenAI.NotFoundError,
    );
  });

  test('the ranks run the request with its adapter: their stats name it while it runs', TIMEOUT, async () => {
    // A request that cannot finish during the test (ignore_eos, 20 000 tokens): a simulated answer otherwise stops
    // after 30–70 tokens, and on a loaded machine it ended before a scrape saw it running (the stats then name none).
    const body = { model: 'sql', prompt: 'count', max_tokens: 20_000, stream: true, ignore_eos: true } as const;
    const stream = await openai.completions.create(body as OpenAI.CompletionCreateParamsStreaming);
    try {
      const it = stream[Symbol.asyncIterator]();
      await it.next();
      let line = '';
      await waitFor(
        async () => {
          const text = await (await fetch(`${gateway.url}/metrics`)).text();
          line = text.split('\n').find((l) => l.startsWith('vllm:lora_requests_info{')) ?? '';
          return /running_lora_adapters="sql"/.test(line);
        },
        'the ranks report adapter sql running',
        20_000,
        () => line,
      );
      assert.match(line, /max_lora="2"/);
    } finally {
      stream.controller.abort();
    }
  });

  test("load and unload at run time, with vLLM's answers for the ways they fail", TIMEOUT, async () => {
    const loaded = await post('/v1/load_lora_adapter', { lora_name: 'chat', lora_path: join(dir, 'chat') });
    assert.equal(loaded.status, 200);
    assert.match(await loaded.text(), /Success: LoRA adapter 'chat' added successfully/);
    assert.ok(
      (await modelIds()).some((m) => m.id === 'chat'),
      'every front lists it',
    );
    const res = await openai.chat.completions.create({
      model: 'chat',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 3,
    });
    assert.equal(res.model, 'chat');
    const again = await post('/v1/load_lora_adapter', { lora_name: 'chat', lora_path: join(dir, 'chat') });
    assert.equal(again.status, 400);
    const missing = await post('/v1/load_lora_adapter', { lora_name: 'ghost', lora_path: join(dir, 'nowhere') });
    assert.equal(missing.status, 404);
    assert.match(((await missing.json()) as { error: { message: string } }).error.message, /No adapter found/);
    assert.equal(
      (await modelIds()).some((m) => m.id === 'ghost'),
      false,
    );
    const unloaded = await post('/v1/unload_lora_adapter', { lora_name: 'chat' });
    assert.equal(unloaded.status, 200);
    assert.equal((await post('/v1/unload_lora_adapter', { lora_name: 'chat' })).status, 404);
    await assert.rejects(
      openai.chat.completions.create({ model: 'chat', messages: [{ role: 'user', content: 'x' }] }),
      (e: unknown) => e instanceof OpenAI.NotFoundError,
    );
  });
});
