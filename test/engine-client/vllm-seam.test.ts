/**
 * The engine client over the real vLLM codec (engine-wire.md section 5) and an in-memory link: the pinned rank
 * reaches `data_parallel_rank` (gateway.md 14), START_DP_WAVE is `[clock, nil]` on the wire (5.7), wave notices
 * drive the clock (5.8, 5.12; dp-routing.md 13.3), and the stream fills the counts vLLM leaves out (5.9). Real vLLM
 * batches (golden vectors, 13-field EngineCoreOutput) and their 16-field form carry the engine's cached-token count
 * to the stream, and routed-experts batches decode (docs/wire/vllm-output.md; issue 26 part 2).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { decode as msgpackDecode, encode as msgpackEncode } from '@msgpack/msgpack';
import { RequestType } from '../../src/protocols/types.js';
import type { RequestTypeByte } from '../../src/protocols/types.js';
import { EngineClient } from '../../src/engine-client/client.js';
import {
  createVllmProtocol,
  decodeAbortPayload,
  decodeEngineCoreRequest,
  decodeStartDpWave,
  defaultEngineCoreOutput,
  defaultEngineCoreOutputs,
  encodeEngineCoreOutputsFrames,
  schedulerStatsFor,
} from '../../src/protocols/vllm/index.js';
import type { EngineCoreOutputs, OutputLayoutDecision, PrefillStats } from '../../src/protocols/vllm/index.js';
import { repoVectorsDir } from '../helpers/vectors.js';
import { FakeLink, drain, makeEngines, req } from './fakes.js';

function decodeSent(type: RequestTypeByte, payload: Uint8Array): unknown {
  if (type === RequestType.ADD) return decodeEngineCoreRequest(payload);
  if (type === RequestType.ABORT) return decodeAbortPayload(payload);
  if (type === RequestType.START_DP_WAVE) return decodeStartDpWave(payload);
  throw new Error(`unexpected request type ${type}`);
}

function vllmClient(opts: { lockstep: boolean }) {
  const link = new FakeLink(makeEngines(2, { dataParallelSize: opts.lockstep ? 2 : 1 }), decodeSent);
  const protocol = createVllmProtocol({ maxModelLen: 4096, now: () => 1.7e12 });
  const client = new EngineClient({ protocol, link });
  const deliver = (o: Partial<EngineCoreOutputs>) =>
    link.deliver({ kind: 'frames', frames: encodeEngineCoreOutputsFrames({ ...defaultEngineCoreOutputs(), ...o }) });
  return { client, link, deliver };
}

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const prefill = (prompt: number, cached: number): PrefillStats => ({
  num_prompt_tokens: prompt,
  num_computed_tokens: prompt,
  num_cached_tokens: cached,
  num_local_cached_tokens: cached,
  num_external_cached_tokens: 0,
  num_cache_creation_tokens: 0,
});

test('lockstep vLLM group: ADD with data_parallel_rank, then START_DP_WAVE 92 01 c0 to both ranks', async () => {
  const { client, link } = vllmClient({ lockstep: true });
  await client.submit(req('p'), { dpRank: 1 });
  await client.submit(req('u'));
  const [addP, w0, w1, addU, w2, w3] = link.sent;
  assert.deepEqual([addP.type, addP.engineIndex], [RequestType.ADD, 1]);
  assert.equal((addP.decoded as { data_parallel_rank: unknown }).data_parallel_rank, 1);
  assert.deepEqual(
    [w0, w1].map((f) => [f.type, f.engineIndex, hex(f.payload)]),
    [
      [RequestType.START_DP_WAVE, 0, '9201c0'],
      [RequestType.START_DP_WAVE, 1, '9201c0'],
    ],
  );
  assert.equal(addU.type, RequestType.ADD);
  assert.equal((addU.decoded as { data_parallel_rank: unknown }).data_parallel_rank, null, 'unpinned: nil');
  assert.deepEqual(
    [w2, w3].map((f) => f.decoded),
    [
      { wave: 2, excludeEngineIndex: null },
      { wave: 2, excludeEngineIndex: null },
    ],
  );
  await client.close();
});

test('wave notices on the vLLM wire: wave_complete moves the clock silently, start_wave wakes everyone', async () => {
  const { client, link, deliver } = vllmClient({ lockstep: true });
  await deliver({ engine_index: 1, wave_complete: 4 });
  assert.equal(client.waveClock, 5);
  assert.equal(link.sent.length, 0);
  await deliver({ engine_index: 0, start_wave: 9 });
  assert.deepEqual(
    link.sent.map((f) => [f.engineIndex, hex(f.payload)]),
    [
      [0, '920ac0'],
      [1, '920ac0'],
    ],
  );
  await client.close();
});

test('dense vLLM group: no waves; a stray notice is ignored', async () => {
  const { client, link, deliver } = vllmClient({ lockstep: false });
  await client.submit(req('a'));
  await deliver({ engine_index: 0, start_wave: 3 });
  assert.deepEqual(
    link.sent.map((f) => f.type),
    [RequestType.ADD],
  );
  await client.close();
});

test('vLLM outputs through the client: prompt/cached from prefill_stats kept, completion running total, stop_reason kept', async () => {
  const { client, link, deliver } = vllmClient({ lockstep: false });
  const s = await client.submit(req('a'), { dpRank: 1 });
  await deliver({
    engine_index: 1,
    outputs: [{ ...defaultEngineCoreOutput('a', [5, 6]), prefill_stats: prefill(3, 2) }],
    scheduler_stats: schedulerStatsFor({ numRunning: 1, numWaiting: 0, kvCacheUsage: 0.25 }),
  });
  await deliver({ engine_index: 1, outputs: [defaultEngineCoreOutput('a', [7])] });
  await deliver({
    engine_index: 1,
    outputs: [{ ...defaultEngineCoreOutput('a', [8]), finish_reason: 0, stop_reason: 8 }],
  });
  const { outputs, error } = await drain(s);
  assert.equal(error, undefined);
  assert.deepEqual(
    outputs.map((o) => [
      o.newTokenIds,
      o.promptTokens,
      o.cachedTokens,
      o.completionTokens,
      o.finishReason,
      o.stopReason,
    ]),
    [
      [[5, 6], 3, 2, 2, null, null],
      [[7], 3, 2, 3, null, null],
      [[8], 3, 2, 4, 'stop', 8],
    ],
  );
  assert.deepEqual(
    client.rankStates()[1].load,
    { numRunning: 0, numWaiting: 0, kvCacheUsage: 0.25 },
    'stored, then clamped on release',
  );
  assert.equal(link.sent.length, 1);
  await client.close();
});

/** The payload of a golden vector from vLLM's real encoder (test/vectors/vllm). */
function vectorPayload(name: string): Uint8Array {
  const v = JSON.parse(readFileSync(join(repoVectorsDir('vllm'), `${name}.json`), 'utf8')) as { frames_hex: string[] };
  return Uint8Array.from(Buffer.from(v.frames_hex[0]!, 'hex'));
}

/** The same envelope with every output in the 16-field layout (`ec_transfer_params` nil at 9). */
function in16Fields(payload: Uint8Array): Uint8Array {
  const env = msgpackDecode(payload) as unknown[];
  env[1] = (env[1] as unknown[][]).map((o) => [...o.slice(0, 9), null, ...o.slice(9)]);
  return msgpackEncode(env);
}

test("real vLLM batches (52a31cce, 13 fields) and their 16-field form through the engine client: the engine's cached tokens reach the stream", async () => {
  for (const layout of [13, 16] as const) {
    const link = new FakeLink(makeEngines(2), decodeSent);
    const decisions: OutputLayoutDecision[] = [];
    const client = new EngineClient({
      protocol: createVllmProtocol({ maxModelLen: 4096, onOutputLayout: (d) => decisions.push(d) }),
      link,
    });
    const prefill = vectorPayload('vllm_outputs_prefill_stats_52a31cce'); // rank 1: r-prefill (prompt 7, cached 4), r-done
    const s = await client.submit(req('r-prefill'), { dpRank: 1 });
    await link.deliver({ kind: 'frames', frames: [layout === 13 ? prefill : in16Fields(prefill)] });
    // The next step of r-prefill (no prefill_stats): the counts reported before are kept.
    await link.deliver({
      kind: 'frames',
      frames: encodeEngineCoreOutputsFrames(
        {
          ...defaultEngineCoreOutputs(),
          engine_index: 1,
          outputs: [{ ...defaultEngineCoreOutput('r-prefill', [15], layout), finish_reason: 1 }],
        },
        { layout, form: 'full' },
      ),
    });
    const { outputs, error } = await drain(s);
    assert.equal(error, undefined);
    assert.deepEqual(
      outputs.map((o) => [o.newTokenIds, o.promptTokens, o.cachedTokens, o.completionTokens, o.finishReason]),
      [
        [[11], 7, 4, 1, null],
        [[15], 7, 4, 2, 'length'],
      ],
      `${layout}-field layout`,
    );
    assert.deepEqual(
      decisions.map((d) => [d.engineIndex, d.layout, d.source]),
      [[1, layout, 'shape']],
    );
    assert.equal(client.stats.decodeErrors, 0);
    await client.close();
  }
});

test('routed-experts capture on real vLLM (13 fields): every batch decodes, none counts as a decode error', async () => {
  const link = new FakeLink(makeEngines(1), decodeSent);
  const client = new EngineClient({ protocol: createVllmProtocol({ maxModelLen: 4096 }), link });
  const s = await client.submit(req('r-experts'), { dpRank: 0 });
  const experts = vectorPayload('vllm_outputs_routed_experts_9aaf83ef'); // rank 0: r-experts, token 14
  for (let i = 0; i < 3; i++) await link.deliver({ kind: 'frames', frames: [experts] });
  assert.equal(client.stats.decodeErrors, 0);
  assert.equal(client.isAlive(), true, 'three in a row no longer end the group');
  await client.close();
  const { outputs } = await drain(s);
  assert.deepEqual(
    outputs.map((o) => o.newTokenIds),
    [[14], [14], [14]],
  );
});
