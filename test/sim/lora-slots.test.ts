/**
 * The simulated vLLM rank's LoRA slots (src/sim/lora-slots.ts) and the scheduler's use of them: at most `maxLoras`
 * distinct adapters run in a step (a request for one more waits, later requests for running adapters pass it), a
 * cold adapter costs a load (counted, and added to the step's time), slots are reused least recently used first.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SimLoraSlots } from '../../src/sim/lora-slots.js';
import { DEFAULT_LORA_LOAD_MS, SimScheduler, type SimRequest } from '../../src/sim/scheduler.js';

test('slots: canRun bounds distinct running adapters; loads count cold starts; LRU reuse', () => {
  const s = new SimLoraSlots(2);
  assert.equal(s.start(1), true);
  assert.equal(s.start(2), true);
  assert.equal(s.canRun(3), false, 'two adapters run already');
  assert.equal(s.canRun(1), true);
  assert.equal(s.start(1), false, 'warm');
  s.stop(2);
  assert.equal(s.canRun(3), true);
  assert.equal(s.start(3), true, 'adapter 2 (idle, least recent) makes room');
  s.stop(3);
  assert.equal(s.start(2), true, 'adapter 2 was evicted: loaded again');
  assert.equal(s.loads, 4);
});

function request(rid: string, lora: number | null): SimRequest {
  return {
    rid,
    promptTokenIds: [5, 6, 7],
    maxNewTokens: 3,
    minNewTokens: 0,
    stopTokenIds: null,
    ignoreEos: true,
    stream: true,
    streamInterval: 1,
    returnLogprob: false,
    validationError: null,
    tokens: { next: () => ({ tokenId: 9, logprob: 0 }) },
    ...(lora === null ? {} : { lora: { id: lora, name: `a${lora}`, path: '/p' } }),
  };
}

test('the scheduler skips a request whose adapter would be one too many, and charges each load to the step', () => {
  const s = new SimScheduler({
    engineIndex: 0,
    maxRunning: 8,
    kvTotalPages: 64,
    maxModelLen: 128,
    eosTokenIds: [1],
    finishRules: 'vllm',
    maxLoras: 1,
    stepTime: { baseMs: 1, perPrefillTokenMs: 0, perDecodeTokenMs: 0 },
  });
  s.add(request('a', 1));
  s.add(request('b', 2));
  s.add(request('c', 1));
  s.add(request('d', null));
  const plan = s.plan();
  assert.equal(plan.plannedCount, 3, 'a and c (adapter 1) and d (base model); b waits for adapter 1 to finish');
  assert.equal(plan.stepTimeMs, 1 + DEFAULT_LORA_LOAD_MS, 'one adapter load in this step');
  const state = s.state();
  assert.deepEqual({ ...state.loraRunning }, { a1: 2 });
  assert.deepEqual({ ...state.loraWaiting }, { a2: 1 });
  assert.equal(state.loraLoads, 1);
  let rounds = 0;
  while (s.state().loraRunning.a2 === undefined && rounds++ < 20) {
    s.commit();
    s.plan();
  }
  assert.equal(s.state().loraRunning.a2, 1, 'b starts once adapter 1 no longer runs');
  assert.equal(s.has('a') || s.has('c'), false, "adapter 1's requests finished first");
  assert.equal(s.state().loraLoads, 2);
});

test('adapter names that are Object.prototype members count like any other name', () => {
  const s = new SimScheduler({
    engineIndex: 0,
    maxRunning: 4,
    kvTotalPages: 16,
    maxModelLen: 64,
    eosTokenIds: [1],
    finishRules: 'vllm',
    maxLoras: 2,
  });
  const named = (rid: string, name: string, id: number): SimRequest => ({
    ...request(rid, id),
    lora: { id, name, path: '/p' },
  });
  s.add(named('x', 'constructor', 1));
  s.add(named('y', '__proto__', 2));
  s.plan();
  assert.deepEqual({ ...s.state().loraRunning }, { constructor: 1, ['__proto__']: 1 });
});
