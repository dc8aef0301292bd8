/**
 * A simulated vLLM rank serves pooling (embedding) requests as an embedding model's EngineCore does
 * (docs/wire/vllm-pooling.md): the ADD carries `PoolingParams` and no sampling map; the request is prefilled and
 * finishes in that step with `stop`, no token, and its vector in `pooling_output` (an aux frame, as vLLM sends a
 * tensor of 256 bytes or more). The rank here is a parked lockstep rank, so it holds all 256 ADDs until the wave
 * starts: the count of output messages that carry them is then exact (one step, one message), the engine half of
 * "256 inputs in one or a few round trips" (test/e2e/embeddings.test.ts has the gateway half).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ZmqEngineLink } from '../../src/transport/zmq-link.js';
import {
  encodeEngineCoreRequest,
  encodeStartDpWave,
  toEngineCoreRequest,
  decodeEngineCoreOutputs,
  engineCoreOutputsToEngineBatch,
} from '../../src/protocols/vllm/index.js';
import { DEFAULT_SAMPLING, RequestType, type EngineBatch, type GenerateRequest } from '../../src/protocols/types.js';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import { SIM_EMBEDDING_SIZE, simEmbedding } from '../../src/sim/pooling.js';
import { type LinkedRank, VllmOutputReader, startLinkedRank } from './helpers.js';

let rank: LinkedRank | null = null;
let reader: VllmOutputReader;

function poolingRequest(id: string, prompt: number[], dimensions: number | null = null): GenerateRequest {
  return {
    requestId: id,
    promptTokenIds: prompt,
    sampling: { ...DEFAULT_SAMPLING, maxNewTokens: 0 },
    stream: false,
    returnLogprob: false,
    pooling: { task: 'embed', dimensions, normalize: true },
  };
}

async function send(type: number, payload: Uint8Array): Promise<void> {
  const l = (rank as LinkedRank).link as ZmqEngineLink;
  await l.send(l.engines[0]!.identity, type as 0, payload);
}

before(async () => {
  const tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  rank = await startLinkedRank(tokenizer, {
    engine: 'vllm',
    engineIndex: 0,
    lockstep: true,
    dataParallelSize: 2,
    maxRunning: 512,
    kvTotalPages: 4000,
    maxModelLen: 4096,
  });
  reader = new VllmOutputReader(rank.link);
});

after(() => rank?.close());

test('256 pooling requests held by a parked rank come back in one output message, each with its vector', async () => {
  const prompts = Array.from({ length: 256 }, (_, i) => [100 + (i % 7), 200 + i, 300]);
  for (let i = 0; i < prompts.length; i++) {
    const wire = toEngineCoreRequest(poolingRequest(`e-${i}`, prompts[i]!, i === 0 ? 32 : null), { arrivalTime: 1 });
    await send(RequestType.ADD, encodeEngineCoreRequest(wire));
  }
  await send(RequestType.START_DP_WAVE, encodeStartDpWave(0));
  const pending = new Set(prompts.map((_, i) => `e-${i}`));
  const withVectors: { frames: number; batch: EngineBatch }[] = [];
  while (pending.size > 0) {
    const m = await reader.message(20_000);
    if (m.kind !== 'frames') throw new Error(`expected output frames, got ${m.kind}`);
    const batch = engineCoreOutputsToEngineBatch(decodeEngineCoreOutputs(m.frames));
    if (batch.outputs.length === 0) continue;
    withVectors.push({ frames: m.frames.length, batch });
    for (const o of batch.outputs) pending.delete(o.requestId);
  }
  assert.equal(withVectors.length, 1, 'one step pooled every held request');
  const { frames, batch } = withVectors[0]!;
  assert.equal(batch.outputs.length, 256);
  assert.ok(frames > 1, 'the vectors travel in aux frames (vLLM: tensors of 256 bytes or more)');
  for (const o of batch.outputs) {
    const i = Number(o.requestId.slice(2));
    assert.equal(o.finishReason, 'stop');
    assert.deepEqual(o.newTokenIds, []);
    const v = o.pooled!;
    assert.equal(v.length, i === 0 ? 32 : SIM_EMBEDDING_SIZE);
    assert.deepEqual([...v], [...simEmbedding(prompts[i]!, v.length, true)]);
    const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
    assert.ok(Math.abs(norm - 1) < 1e-5, `input ${i} is normalized (norm ${norm})`);
  }
});

test('a pooling task the model does not serve, or a size beyond it, is answered with an error finish', async () => {
  const wire = toEngineCoreRequest(poolingRequest('bad-dim', [5, 6], SIM_EMBEDDING_SIZE + 1), { arrivalTime: 1 });
  await send(RequestType.ADD, encodeEngineCoreRequest(wire));
  const classify = toEngineCoreRequest(poolingRequest('bad-task', [5, 6]), { arrivalTime: 1 });
  classify.pooling_params!.task = 'classify';
  await send(RequestType.ADD, encodeEngineCoreRequest(classify));
  const envs = await reader.untilFinished(['bad-dim', 'bad-task']);
  const outs = envs.flatMap((e) => e.outputs);
  for (const id of ['bad-dim', 'bad-task']) {
    const o = outs.find((x) => x.request_id === id)!;
    assert.equal(o.finish_reason, 3, `${id}: error`);
    assert.equal(o.pooling_output, null);
  }
});
