/**
 * Token counts on the stream (the seam's `EngineOutputRow` → `EngineOutput`; engine-wire.md 4.8, 5.9): protocols
 * report counts only when the engine sent them (vLLM: prompt/cached in `prefill_stats`, never a cumulative
 * completion count); the request's stream fills the gaps so every output a consumer reads carries numbers.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { EngineOutputRow } from '../../src/protocols/types.js';
import { RequestStreamImpl } from '../../src/engine-client/request-stream.js';
import { batch, drain, req, setup } from './fakes.js';

/** A row with explicit counts (null = not reported in this output). */
function r(
  tokens: number[],
  counts: { prompt?: number | null; completion?: number | null; cached?: number | null } = {},
  finishReason: EngineOutputRow['finishReason'] = null,
): EngineOutputRow {
  return {
    requestId: 'a',
    newTokenIds: tokens,
    finishReason,
    logprobs: [],
    promptTokens: counts.prompt ?? null,
    completionTokens: counts.completion ?? null,
    cachedTokens: counts.cached ?? null,
  };
}

const triple = (o: { promptTokens: number; cachedTokens: number; completionTokens: number }) => [
  o.promptTokens,
  o.cachedTokens,
  o.completionTokens,
];

test('vLLM-like rows: completion = running total; prompt/cached = last reported, else the submitted prompt length and 0', async () => {
  const s = new RequestStreamImpl('a', 5, () => {});
  s.deliver(r([1, 2])); // before prefill_stats: the gateway's own prompt length
  s.deliver(r([3], { prompt: 7, cached: 4 })); // prefill_stats
  s.deliver(r([])); // an output with no new tokens
  s.deliver(r([4, 5, 6]));
  s.deliver(r([7], { prompt: 7, cached: 0 })); // re-prefilled after preemption: cache counts replaced, 0 is a value
  s.deliver(r([8], {}, 'stop'));
  const { outputs, error } = await drain(s);
  assert.equal(error, undefined);
  assert.deepEqual(outputs.map(triple), [
    [5, 0, 2],
    [7, 4, 3],
    [7, 4, 3],
    [7, 4, 6],
    [7, 0, 7],
    [7, 0, 8],
  ]);
});

test('TokenSpeed-like rows: the reported cumulative count wins; a later unreported row continues from it', async () => {
  const s = new RequestStreamImpl('a', 3, () => {});
  s.deliver(r([1, 2, 3], { prompt: 3, completion: 50, cached: 1 })); // every 50 tokens, non-streaming cadence
  s.deliver(r([4], {}));
  s.deliver(r([5], { prompt: 3, completion: 60, cached: 1 }, 'length'));
  const { outputs } = await drain(s);
  assert.deepEqual(outputs.map(triple), [
    [3, 1, 50],
    [3, 1, 51],
    [3, 1, 60],
  ]);
});

test("the stream keeps the row's other fields (stopReason, logprobs) and does not mutate the decoded row", async () => {
  const s = new RequestStreamImpl('a', 2, () => {});
  const row: EngineOutputRow = { ...r([9], {}, 'stop'), logprobs: [-0.5], stopReason: 9 };
  s.deliver(row);
  const { outputs } = await drain(s);
  assert.deepEqual(outputs[0], {
    requestId: 'a',
    newTokenIds: [9],
    finishReason: 'stop',
    logprobs: [-0.5],
    stopReason: 9,
    promptTokens: 2,
    completionTokens: 1,
    cachedTokens: 0,
  });
  assert.equal(row.completionTokens, null);
});

test('through the client: counts are per request, and a submitted prompt length seeds promptTokens', async () => {
  const { client, link } = setup(1);
  const a = await client.submit(req('a')); // 3 prompt tokens
  const b = await client.submit({ ...req('b'), promptTokenIds: [1, 2, 3, 4, 5, 6] });
  const rowFor = (id: string, tokens: number[], fin: 'stop' | null = null): EngineOutputRow => ({
    ...r(tokens, {}, fin),
    requestId: id,
  });
  await link.deliverBatch(batch(0, [rowFor('a', [1]), rowFor('b', [1, 2])]));
  await link.deliverBatch(batch(0, [rowFor('a', [2], 'stop'), rowFor('b', [3], 'stop')]));
  assert.deepEqual((await drain(a)).outputs.map(triple), [
    [3, 0, 1],
    [3, 0, 2],
  ]);
  assert.deepEqual((await drain(b)).outputs.map(triple), [
    [6, 0, 2],
    [6, 0, 3],
  ]);
  await client.close();
});
