/**
 * The vLLM `EngineProtocol` (engine-wire.md section 5) and its small payloads: START_DP_WAVE (5.7, 6.2: wave 9 =
 * `92 09 c0`), ABORT (5.4 = 4.7: `["req-1"]` = `91 a5 7265712d31`), frames (1.6), statelessness.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_SAMPLING, RequestType } from '../../../src/protocols/types.js';
import type { EngineProtocol, GenerateRequest } from '../../../src/protocols/types.js';
import { parseRequestFrames } from '../../../src/protocols/frames.js';
import * as tokenspeed from '../../../src/protocols/tokenspeed/index.js';
import {
  createVllmProtocol,
  decodeAbortPayload,
  decodeEngineCoreRequest,
  decodeStartDpWave,
  defaultEngineCoreOutput,
  defaultEngineCoreOutputs,
  encodeAbortPayload,
  encodeEngineCoreOutputs,
  encodeEngineCoreOutputsFrames,
  encodeStartDpWave,
  schedulerStatsFor,
  vllmProtocol,
} from '../../../src/protocols/vllm/index.js';
import { WireDecodeError, WireEncodeError } from '../../../src/wire/errors.js';
import { bytesOf, hexOf } from './hex.js';

const decodeRejects = (fn: () => unknown, re: RegExp) =>
  assert.throws(
    fn,
    (e: unknown) => e instanceof WireDecodeError && re.test(e.message),
    `expected WireDecodeError ${re}`,
  );

test('START_DP_WAVE: [wave, nil]; wave 9 is 92 09 c0 (6.2); decode is strict about length and types', () => {
  assert.equal(hexOf(encodeStartDpWave(9)), '9209c0');
  assert.equal(hexOf(vllmProtocol.encodeStartWave(9)), '9209c0');
  assert.deepEqual(decodeStartDpWave(bytesOf('9209c0')), { wave: 9, excludeEngineIndex: null });
  assert.equal(hexOf(encodeStartDpWave(1)), '9201c0');
  assert.equal(hexOf(encodeStartDpWave(2 ** 32)), '92cf0000000100000000c0', 'u64 clock: smallest int form');
  assert.equal(hexOf(encodeStartDpWave((1n << 64n) - 1n)), '92cfffffffffffffffffc0');
  assert.deepEqual(decodeStartDpWave(bytesOf('92cfffffffffffffffffc0')), {
    wave: (1n << 64n) - 1n,
    excludeEngineIndex: null,
  });
  assert.equal(hexOf(encodeStartDpWave(7, 1)), '920701', 'an explicit exclusion (older SMG behaviour) still encodes');
  assert.deepEqual(decodeStartDpWave(bytesOf('920701')), { wave: 7, excludeEngineIndex: 1 });
  decodeRejects(
    () => decodeStartDpWave(bytesOf('9109')),
    /StartDpWave: expected an array of exactly 2 elements .* got 1/,
  );
  decodeRejects(() => decodeStartDpWave(bytesOf('9309c0c0')), /exactly 2 elements .* got 3/);
  decodeRejects(
    () => decodeStartDpWave(bytesOf('92cb4022000000000000c0')),
    /StartDpWave\.wave: expected int, got float64/,
  );
  decodeRejects(() => decodeStartDpWave(bytesOf('92ffc0')), /StartDpWave\.wave: must be ≥ 0, got -1/);
  decodeRejects(() => decodeStartDpWave(bytesOf('9209a0')), /exclude_engine_index: expected int \| null, got str/);
  decodeRejects(() => decodeStartDpWave(bytesOf('9209c0c0')), /trailing characters/);
  for (const bad of [-1, 1.5, NaN, 1n << 64n]) {
    assert.throws(
      () => encodeStartDpWave(bad),
      (e: unknown) => e instanceof WireEncodeError && /StartDpWave\.wave/.test(e.message),
      String(bad),
    );
  }
});

test("ABORT reuses TokenSpeed's list[str] payload (the same function, the same bytes)", () => {
  assert.equal(encodeAbortPayload, tokenspeed.encodeAbortPayload);
  assert.equal(decodeAbortPayload, tokenspeed.decodeAbortPayload);
  assert.equal(hexOf(vllmProtocol.encodeAbort(['req-1'])), '91a57265712d31');
  assert.equal(hexOf(vllmProtocol.encodeAbort(['r1'])), '91a27231');
  assert.equal(hexOf(vllmProtocol.encodeAbort([])), '90');
});

test('the protocol object: name, reservedContextTokens 0, assignable to EngineProtocol, with a wave message', () => {
  const p: EngineProtocol = createVllmProtocol();
  assert.equal(p.name, 'vllm');
  assert.equal(typeof p.encodeStartWave, 'function', 'the engine client wakes lockstep groups only when this exists');
  assert.equal(tokenspeed.tokenspeedProtocol.encodeStartWave, undefined, 'TokenSpeed has no wave wire');
  assert.equal(createVllmProtocol().reservedContextTokens, 0);
  assert.equal(vllmProtocol.name, 'vllm');
});

test('frames as the engine sees them: [00, EngineCoreRequest], [01, abort], [02, start wave]', () => {
  const p = createVllmProtocol({ now: () => 0 });
  const req: GenerateRequest = {
    requestId: 'r',
    promptTokenIds: [1],
    sampling: { ...DEFAULT_SAMPLING, maxNewTokens: 4 },
    stream: false,
    returnLogprob: false,
  };
  const add = parseRequestFrames([Uint8Array.of(RequestType.ADD), p.encodeAdd(req)]);
  assert.equal(add.type, RequestType.ADD);
  assert.equal(decodeEngineCoreRequest(add.payload).request_id, 'r');
  const wave = parseRequestFrames([Uint8Array.of(RequestType.START_DP_WAVE), p.encodeStartWave(3)]);
  assert.deepEqual(decodeStartDpWave(wave.payload), { wave: 3, excludeEngineIndex: null });
  const abort = parseRequestFrames([Uint8Array.of(RequestType.ABORT), p.encodeAbort(['r'])]);
  assert.deepEqual(decodeAbortPayload(abort.payload), ['r']);
});

test('decodeOutput: frames in, engine-neutral batch out; the wave event on a notice; errors are WireDecodeError', () => {
  const p = createVllmProtocol();
  const batch = p.decodeOutput(
    encodeEngineCoreOutputsFrames({
      ...defaultEngineCoreOutputs(),
      engine_index: 2,
      outputs: [{ ...defaultEngineCoreOutput('a', [7]), finish_reason: 4, stop_reason: 7 }],
      scheduler_stats: schedulerStatsFor({ numRunning: 1, numWaiting: 0, kvCacheUsage: 0.5 }),
    }),
  );
  assert.deepStrictEqual(batch, {
    engineIndex: 2,
    outputs: [
      {
        requestId: 'a',
        newTokenIds: [7],
        finishReason: 'stop',
        promptTokens: null,
        completionTokens: null,
        cachedTokens: null,
        logprobs: [],
        stopReason: 7,
      },
    ],
    finishedRequestIds: ['a'],
    load: { numRunning: 1, numWaiting: 0, kvCacheUsage: 0.5 },
  });
  assert.deepStrictEqual(
    p.decodeOutput([encodeEngineCoreOutputs({ ...defaultEngineCoreOutputs(), engine_index: 1, start_wave: 5 })]),
    { engineIndex: 1, outputs: [], finishedRequestIds: [], wave: { kind: 'start', wave: 5 } },
  );
  decodeRejects(() => p.decodeOutput([]), /EngineCoreOutputs: output message has no frames/);
  decodeRejects(() => p.decodeOutput([bytesOf('90')]), /empty envelope/);
  decodeRejects(() => p.decodeOutput([new TextEncoder().encode('ENGINE_CORE_DEAD')]), /EngineCoreOutputs/);
  // A TokenSpeed batch is not a vLLM envelope.
  const ts = tokenspeed.encodeBatchTokenIDOutSlim({
    rids: ['a'],
    output_ids: [[1]],
    finished_reasons: [''],
    prompt_tokens: [1],
    completion_tokens: [1],
    cached_tokens: [0],
    output_token_logprobs_val: [[]],
    output_token_logprobs_idx: [[]],
    engine_index: 0,
    num_running: 0,
    num_waiting: 0,
    kv_active_pages: 0,
    kv_total_pages: 0,
  });
  decodeRejects(() => p.decodeOutput([ts]), /EngineCoreOutputs\.engine_index: expected int, got str/);
});

test('stateless: counts are reported per output (null when absent), decoding the same frames twice gives the same batch', () => {
  const p = createVllmProtocol();
  const out = (id: string, tokens: number[], finish: number | null = null) => [
    encodeEngineCoreOutputs({
      ...defaultEngineCoreOutputs(),
      outputs: [{ ...defaultEngineCoreOutput(id, tokens), finish_reason: finish }],
    }),
  ];
  const first = p.decodeOutput(out('a', [1, 2]));
  assert.deepStrictEqual(p.decodeOutput(out('a', [1, 2])), first, 'nothing accumulates between calls');
  assert.equal(first.outputs[0].completionTokens, null, 'no cumulative count on the vLLM wire (5.9)');
  assert.equal(first.outputs[0].promptTokens, null);
  p.encodeAbort(['a']); // no per-request state to forget
  assert.deepStrictEqual(p.decodeOutput(out('a', [1, 2])), first);
  assert.deepStrictEqual(vllmProtocol.decodeOutput(out('a', [1, 2])), first, 'the shared instance decodes the same');
});
