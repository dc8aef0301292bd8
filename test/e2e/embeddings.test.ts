/**
 * End to end: POST /v1/embeddings over simulated vLLM ranks (pooling on the EngineCore wire,
 * docs/wire/vllm-pooling.md), through the clients people embed with (openai SDK: base64 by default; the AI SDK's
 * `openai.embedding()` and openai-compatible providers; LangChain's `OpenAIEmbeddings`), beside a TokenSpeed group
 * that serves generation only: every embedding goes to the vLLM group, chat still goes to either. Each vector is
 * checked against the simulated model's (src/sim/pooling.ts) for the same tokens, so a swapped, truncated or
 * mis-decoded vector fails. 256 inputs in one request are spread over both vLLM ranks and answered in input order.
 * Runs in both modes (GATEWAY_TEST_WORKERS).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { embed, embedMany } from 'ai';
import { OpenAIEmbeddings } from '@langchain/openai';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import { SIM_EMBEDDING_SIZE, simEmbedding } from '../../src/sim/pooling.js';
import { startTestGateway, type TestGateway } from '../helpers/test-gateway.js';

const MODEL = 'sim-qwen3';
const TIMEOUT = { timeout: 60_000 };

describe('embeddings over simulated vLLM ranks, beside a TokenSpeed group', () => {
  let gateway: TestGateway;
  let tokenizer: GatewayTokenizer;
  let openai: OpenAI;
  const baseURL = () => `${gateway.url}/v1`;
  /** The simulated model's vector of `text` (tokenized as the gateway does: special tokens added). */
  const expected = (text: string, dims = SIM_EMBEDDING_SIZE) => [
    ...simEmbedding(tokenizer.encode(text, { addSpecialTokens: true }), dims, true),
  ];
  const close = (a: readonly number[], b: readonly number[]) =>
    a.length === b.length && a.every((x, i) => Math.abs(x - b[i]!) < 1e-6);
  const post = (body: unknown) =>
    fetch(`${gateway.url}/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  before(async () => {
    tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
    gateway = await startTestGateway({
      modelId: MODEL,
      groups: [
        { engine: 'tokenspeed', sim: 1 },
        { engine: 'vllm', sim: 2 },
      ],
    });
    openai = new OpenAI({ baseURL: baseURL(), apiKey: 'unused', maxRetries: 0 });
  });
  after(() => gateway?.close());

  test(
    'the openai SDK embeds a string (base64 on the wire, its default) and a list in input order',
    TIMEOUT,
    async () => {
      const one = await openai.embeddings.create({ model: MODEL, input: 'The quick brown fox' });
      assert.equal(one.object, 'list');
      assert.equal(one.model, MODEL);
      assert.ok(close(one.data[0]!.embedding, expected('The quick brown fox')));
      assert.equal(one.usage.prompt_tokens, tokenizer.encode('The quick brown fox', { addSpecialTokens: true }).length);
      const texts = ['alpha', 'beta gamma', 'delta epsilon zeta'];
      const many = await openai.embeddings.create({ model: MODEL, input: texts, encoding_format: 'float' });
      assert.deepEqual(
        many.data.map((d) => d.index),
        [0, 1, 2],
      );
      many.data.forEach((d, i) => assert.ok(close(d.embedding, expected(texts[i]!)), `input ${i}`));
      const dims = await openai.embeddings.create({ model: MODEL, input: 'alpha', dimensions: 16 });
      assert.ok(close(dims.data[0]!.embedding, expected('alpha', 16)), 'Matryoshka: the first 16, renormalized');
    },
  );

  test('token-id inputs, truncate_prompt_tokens, and the 400s of inputs that cannot be embedded', TIMEOUT, async () => {
    const ids = tokenizer.encode('hello there world', { addSpecialTokens: false });
    const r = await post({ input: [ids, ids.slice(0, 1)], encoding_format: 'float' });
    assert.equal(r.status, 200);
    const body = (await r.json()) as { data: { embedding: number[] }[]; usage: { prompt_tokens: number } };
    assert.ok(close(body.data[0]!.embedding, [...simEmbedding(ids, SIM_EMBEDDING_SIZE, true)]));
    assert.ok(close(body.data[1]!.embedding, [...simEmbedding(ids.slice(0, 1), SIM_EMBEDDING_SIZE, true)]));
    assert.equal(body.usage.prompt_tokens, ids.length + 1);
    const cut = await post({ input: ids, truncate_prompt_tokens: 2, encoding_format: 'float' });
    const cutBody = (await cut.json()) as { data: { embedding: number[] }[]; usage: { prompt_tokens: number } };
    assert.equal(cutBody.usage.prompt_tokens, 2);
    assert.ok(close(cutBody.data[0]!.embedding, [...simEmbedding(ids.slice(-2), SIM_EMBEDDING_SIZE, true)]));
    const models = (await (await fetch(`${baseURL()}/models`)).json()) as { data: { max_model_len: number }[] };
    const maxModelLen = models.data[0]!.max_model_len;
    const refusals: [unknown, string, string][] = [
      [{ input: [] }, 'input', 'invalid_parameter'],
      [{ input: '' }, 'input', 'invalid_parameter'],
      [{ input: [0, -1] }, 'input', 'invalid_parameter'],
      [{ input: 'hello '.repeat(maxModelLen + 1) }, 'input', 'context_length_exceeded'],
      [{ input: 'x', dimensions: 0 }, 'dimensions', 'invalid_parameter'],
      [{ input: 'x', encoding_format: 'hex' }, 'encoding_format', ''],
      [{ input: 'x', model: 'other' }, 'model', 'model_not_found'],
    ];
    for (const [req, param, code] of refusals) {
      const res = await post(req);
      const err = ((await res.json()) as { error: { param: string; code: string } }).error;
      assert.equal(res.status, code === 'model_not_found' ? 404 : 400, JSON.stringify(req).slice(0, 80));
      assert.ok(err.param?.startsWith(param), `${JSON.stringify(req).slice(0, 80)}: param ${err.param}`);
      if (code !== '') assert.equal(err.code, code);
    }
  });

  test(
    'the AI SDK (openai and openai-compatible providers) and LangChain embed through their defaults',
    TIMEOUT,
    async () => {
      const provider = createOpenAI({ baseURL: baseURL(), apiKey: 'unused' });
      const single = await embed({ model: provider.embedding(MODEL), value: 'sunny day', maxRetries: 0 });
      assert.ok(close(single.embedding, expected('sunny day')));
      const compat = createOpenAICompatible({ name: 'sim', baseURL: baseURL(), apiKey: 'unused' });
      const both = await embedMany({
        model: compat.textEmbeddingModel(MODEL),
        values: ['rain', 'snow'],
        maxRetries: 0,
      });
      assert.ok(close(both.embeddings[0]!, expected('rain')) && close(both.embeddings[1]!, expected('snow')));
      const lc = new OpenAIEmbeddings({ model: MODEL, apiKey: 'unused', configuration: { baseURL: baseURL() } });
      assert.ok(close(await lc.embedQuery('wind'), expected('wind')));
      const docs = await lc.embedDocuments(['fog', 'hail']);
      assert.ok(close(docs[1]!, expected('hail')));
    },
  );

  // How many output messages carry the 256 vectors depends on how the ADDs arrive against the ranks' steps, which a
  // loaded machine spreads (73 seen with --workers 2 beside the static checks): test/sim/pooling.test.ts shows a rank
  // pooling every request it holds in one step, and the gateway decoding that message's 256 vectors.
  test('256 inputs: one request, spread over the vLLM ranks, each vector in input order', TIMEOUT, async () => {
    const vllmGroup = 1;
    const dispatched = async () => (await gateway.rankStates(vllmGroup)).map((r) => r.dispatched_unpinned);
    const d0 = await dispatched();
    const texts = Array.from({ length: 256 }, (_, i) => `document number ${i}`);
    const res = await openai.embeddings.create({ model: MODEL, input: texts });
    assert.equal(res.data.length, 256);
    res.data.forEach((d, i) => {
      assert.equal(d.index, i);
      assert.ok(close(d.embedding, expected(texts[i]!)), `input ${i}`);
    });
    const perRank = (await dispatched()).map((d, i) => d - d0[i]!);
    assert.equal(
      perRank.reduce((a, b) => a + b, 0),
      256,
    );
    assert.ok(
      perRank.every((n) => n > 0),
      `both ranks took a share: ${perRank.join(', ')}`,
    );
  });

  test('chat still works on the mixed gateway, and the TokenSpeed group never sees an embedding', TIMEOUT, async () => {
    const before = (await gateway.rankStates(0)).map((r) => r.dispatched_unpinned);
    await openai.embeddings.create({ model: MODEL, input: Array.from({ length: 8 }, (_, i) => `t${i}`) });
    const after = (await gateway.rankStates(0)).map((r) => r.dispatched_unpinned);
    assert.deepEqual(after, before);
    const chat = await openai.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 4,
    });
    assert.ok(chat.choices[0]!.finish_reason);
  });
});
