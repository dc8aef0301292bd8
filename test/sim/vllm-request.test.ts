import { test } from 'node:test';
import { toPoolingParams } from '../../src/protocols/vllm/pooling.js';
import assert from 'node:assert/strict';
import {
  decodeEngineCoreOutputs,
  defaultVllmSamplingParams,
  encodeEngineCoreRequest,
  decodeEngineCoreRequest,
  toEngineCoreRequest,
  resolveEosConfig,
} from '../../src/protocols/vllm/index.js';
import type { EngineCoreRequest } from '../../src/protocols/vllm/index.js';
import { DEFAULT_SAMPLING } from '../../src/protocols/types.js';
import { SimRequestError, crc32Seed } from '../../src/sim/request.js';
import type { SimRow, TokenSource } from '../../src/sim/scheduler.js';
import { toVllmSimRequest } from '../../src/sim/vllm-request.js';
import { createVllmSimWire, toEngineCoreOutput, vllmFinishReasonOf } from '../../src/sim/vllm-wire.js';
import type { SimStep } from '../../src/sim/wire.js';

const source: TokenSource = { next: () => ({ tokenId: 7, logprob: -1 }) };
const seeds: unknown[] = [];
const tokens = (seed: unknown): TokenSource => {
  seeds.push(seed);
  return source;
};

function wireRequest(over: Partial<EngineCoreRequest> = {}): EngineCoreRequest {
  const base = toEngineCoreRequest(
    {
      requestId: 'r-1',
      promptTokenIds: [1, 2, 3],
      sampling: { ...DEFAULT_SAMPLING, maxNewTokens: 9, stopTokenIds: [42] },
      stream: true,
      returnLogprob: false,
    },
    { arrivalTime: 1, eos: resolveEosConfig({ tokenizerEosIds: [99] }) },
  );
  return decodeEngineCoreRequest(encodeEngineCoreRequest({ ...base, ...over }));
}

test('an EngineCoreRequest maps onto the scheduler: stop ids and _eos_token_id from the map, every step reported', () => {
  seeds.length = 0;
  const { request, requestWave } = toVllmSimRequest(wireRequest(), { vocabSize: 1000, tokens });
  assert.equal(requestWave, 0);
  assert.deepEqual(
    { ...request, tokens: undefined },
    {
      rid: 'r-1',
      promptTokenIds: [1, 2, 3],
      maxNewTokens: 9,
      minNewTokens: 0,
      stopTokenIds: [42, 99],
      eosTokenIds: [99],
      ignoreEos: false,
      stream: true,
      streamInterval: 1,
      returnLogprob: false,
      validationError: null,
      tokens: undefined,
      priority: 0,
    },
  );
  assert.deepEqual(seeds, [crc32Seed('r-1')], 'a nil seed is derived from the request id');
});

test('max_tokens absent from the map decodes as 16; the seed, current_wave and priority pass through', () => {
  const sampling = { ...defaultVllmSamplingParams(), seed: 5 };
  seeds.length = 0;
  const { request, requestWave } = toVllmSimRequest(wireRequest({ sampling_params: sampling, current_wave: 4 }), {
    tokens,
  });
  assert.equal(request.maxNewTokens, 16);
  assert.deepEqual(request.eosTokenIds, [], 'no _eos_token_id: the engine stops on no EOS');
  assert.equal(requestWave, 4);
  assert.deepEqual(seeds, [5]);
  assert.equal(request.priority, 0);
  assert.equal(toVllmSimRequest(wireRequest({ priority: -1 }), { tokens }).request.priority, -1, 'priority passes');
});

test('requests EngineCore cannot serve get a validation error (answered with finish_reason 3); an empty id is dropped', () => {
  const err = (over: Partial<EngineCoreRequest>, vocabSize?: number) =>
    toVllmSimRequest(wireRequest(over), { vocabSize, tokens }).request.validationError;
  assert.match(err({ prompt_token_ids: null }) ?? '', /prompt_token_ids is nil/);
  assert.match(err({ sampling_params: null }) ?? '', /sampling_params and pooling_params are both nil/);
  const embed = toPoolingParams({ task: 'embed', dimensions: null, normalize: true });
  assert.match(err({ pooling_params: embed }) ?? '', /both set/);
  assert.equal(err({ sampling_params: null, pooling_params: embed }), null, 'a pooling request is served');
  assert.match(err({ sampling_params: null, pooling_params: { ...embed, task: 'classify' } }) ?? '', /classify/);
  assert.match(err({ mm_features: [{}] }) ?? '', /mm_features/);
  assert.match(err({ prompt_token_ids: [1, 5000] }, 1000) ?? '', /prompt_token_ids\[1\].*5000/);
  assert.match(
    err({ sampling_params: { ...defaultVllmSamplingParams(), logit_bias: new Map([[2000, 1]]) } }, 1000) ?? '',
    /logit_bias.*2000/,
  );
  assert.equal(err({}), null);
  assert.throws(() => toVllmSimRequest(wireRequest({ request_id: '' }), { tokens }), SimRequestError);
});

test('rows become EngineCoreOutputs: finish reasons 0/1/3, stop_reason, prefill_stats, logprob column 0', () => {
  assert.deepEqual((['', 'stop', 'length', 'abort'] as const).map(vllmFinishReasonOf), [null, 0, 1, 3]);
  const row: SimRow = {
    rid: 'x',
    outputIds: [42],
    finishedReason: 'stop',
    promptTokens: 3,
    completionTokens: 1,
    cachedTokens: 0,
    logprobVals: [-0.5],
    logprobIdx: [42],
    stopReason: 42,
    prefillTokens: 3,
  };
  const o = toEngineCoreOutput(row);
  assert.deepEqual([o.request_id, o.new_token_ids, o.finish_reason, o.stop_reason], ['x', [42], 0, 42]);
  assert.deepEqual(o.prefill_stats?.num_prompt_tokens, 3);
  assert.deepEqual(o.new_logprobs, {
    token_ids: [[42]],
    logprobs: [[-0.5]],
    ranks: [1],
    cu_num_generated_tokens: null,
  });
  const plain = toEngineCoreOutput({
    ...row,
    finishedReason: '',
    stopReason: null,
    prefillTokens: null,
    logprobVals: [],
    logprobIdx: [],
  });
  assert.deepEqual(
    [plain.finish_reason, plain.stop_reason, plain.prefill_stats, plain.new_logprobs],
    [null, null, null, null],
  );
});

test('the vLLM wire reports aborted ids once in the next step, with stats made after the step', () => {
  const wire = createVllmSimWire({ enableOutputLogprobs: true, tokens });
  const step: SimStep = {
    engineIndex: 6,
    rows: [],
    tail: { numRunning: 0, numWaiting: 0, kvActivePages: 0, kvTotalPages: 0 },
    state: {
      running: 2,
      loraLoads: 0,
      loraRunning: {},
      loraWaiting: {},
      waiting: 1,
      registered: 3,
      activePages: 25,
      freePages: 75,
      pendingAborts: 0,
      pendingRejections: 0,
      roundOpen: false,
      preemptions: 0,
      cachedPages: 0,
      cacheEvictions: 0,
      cacheRequests: 0,
      cacheQueryTokens: 0,
      cacheHitTokens: 0,
    },
    kvTotalPages: 100,
    stepCounter: 12,
    currentWave: 3,
  };
  assert.equal(wire.hasPendingReport(), false);
  wire.noteAborted(['a', 'b']);
  assert.equal(wire.hasPendingReport(), true);
  const first = decodeEngineCoreOutputs(wire.encodeStep(step) ?? []);
  assert.deepEqual(first.finished_requests, ['a', 'b']);
  assert.equal(first.engine_index, 6);
  assert.deepEqual(
    [
      first.scheduler_stats?.num_running_reqs,
      first.scheduler_stats?.num_waiting_reqs,
      first.scheduler_stats?.kv_cache_usage,
      first.scheduler_stats?.step_counter,
      first.scheduler_stats?.current_wave,
    ],
    [2, 1, 0.25, 12, 3],
  );
  assert.equal(wire.hasPendingReport(), false);
  const second = decodeEngineCoreOutputs(wire.encodeStep(step) ?? []);
  assert.equal(second.finished_requests, null, 'reported once');
  assert.notEqual(second.scheduler_stats, null, 'a step without outputs still carries its stats');
  assert.equal(wire.encodeRejections(step), null, 'no rejection rows: nothing to send');
  const waves = wire.waves!;
  assert.deepEqual(waves.decodeStartWave(Uint8Array.of(0x92, 0x09, 0xc0)), { wave: 9, excludeEngineIndex: null });
  const wc = decodeEngineCoreOutputs(waves.encodeWaveComplete(6, 4));
  assert.deepEqual(
    [wc.engine_index, wc.wave_complete, wc.start_wave, wc.scheduler_stats, wc.outputs],
    [6, 4, null, null, []],
  );
  const sw = decodeEngineCoreOutputs(waves.encodeStartWave(6, 5));
  assert.deepEqual([sw.wave_complete, sw.start_wave], [null, 5]);
});
