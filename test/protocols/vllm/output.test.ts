/**
 * `EngineCoreOutputs` / `EngineCoreOutput` / `SchedulerStats` (engine-wire.md 5.8-5.11): field order pinned in both
 * directions, every envelope shape, the decode errors the spec names, trailing tolerance, float widths, bigints.
 * The hand-written output pins here are in the 16-field layout (SMG's, engine-wire.md 5.9); the 13-field layout of
 * vLLM 9aaf83ef / 52a31cce is pinned by its real vectors in output-layouts.test.ts (docs/wire/vllm-output.md).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  classifyEngineCoreOutputs,
  decodeEngineCoreOutputs,
  defaultEngineCoreOutput,
  defaultEngineCoreOutputs,
  encodeEngineCoreOutputs,
  encodeEngineCoreOutputsFrames,
  engineCoreOutputsToEngineBatch,
  schedulerStatsFor,
  toFinishReason,
} from '../../../src/protocols/vllm/index.js';
import type { EngineCoreOutputs, SchedulerStats } from '../../../src/protocols/vllm/index.js';
import type { EngineBatch } from '../../../src/protocols/types.js';
import { WireDecodeError, WireEncodeError } from '../../../src/wire/errors.js';
import { F64, bytesOf, fixarray, fixmap, hexOf } from './hex.js';

const decodeRejects = (fn: () => unknown, re: RegExp) =>
  assert.throws(
    fn,
    (e: unknown) => e instanceof WireDecodeError && re.test(e.message),
    `expected WireDecodeError ${re}`,
  );

const INT64 = 'a5696e743634';
const FLOAT32 = 'a7666c6f61743332';
/** WireLogprobs for tokens [10, 11], K = 0: inline int64 / float32 / int64 buffers (fixext16, fixext8, fixext16). */
const LOGPROBS_HEX = fixarray([
  fixarray([INT64, '920201', 'd803' + '0a00000000000000' + '0b00000000000000']), // token_ids [[10], [11]]
  fixarray([FLOAT32, '920201', 'd703' + '000000bf' + '000080be']), // logprobs [[-0.5], [-0.25]] (float32 LE)
  fixarray([INT64, '9102', 'd803' + '0100000000000000' + '0100000000000000']), // ranks [1, 1]
  'c0', // cu_num_generated_tokens nil
]);

const PREFILL_HEX = fixmap([
  ['num_prompt_tokens', '03'],
  ['num_computed_tokens', '03'],
  ['num_cached_tokens', '01'],
  ['num_local_cached_tokens', '01'],
  ['num_external_cached_tokens', '00'],
  ['num_cache_creation_tokens', '00'],
]);

/** A 12-element short form in the 16-field layout (prefill_stats at 11): terminal `length` output with logprobs. */
const OUTPUT_HEX =
  '9c' +
  'a57665632d31' + // 0 request_id "vec-1"
  '920a0b' + // 1 new_token_ids [10, 11]
  LOGPROBS_HEX + // 2 new_logprobs
  'c0' + // 3 new_prompt_logprobs_tensors
  'c0' + // 4 pooling_output
  '01' + // 5 finish_reason 1 (length)
  'c0' + // 6 stop_reason
  'c0c0c0c0' + // 7 events, 8 kv_transfer_params, 9 ec_transfer_params, 10 trace_headers
  PREFILL_HEX; // 11 prefill_stats

const PREFIX_CACHE_HEX = fixmap([
  ['reset', 'c2'],
  ['requests', '01'],
  ['queries', '03'],
  ['hits', '01'],
  ['preempted_requests', '00'],
  ['preempted_queries', '00'],
  ['preempted_hits', '00'],
]);
const REQUIRED_STATS: Array<[string, string]> = [
  ['num_running_reqs', '02'],
  ['num_waiting_reqs', '05'],
  ['step_counter', '07'],
  ['current_wave', '00'],
  ['kv_cache_usage', F64['0.25']],
  ['prefix_cache_stats', PREFIX_CACHE_HEX],
  ['kv_cache_eviction_events', '90'],
];
/** As the encoder writes it: every key, optional ones nil. */
const STATS_HEX = fixmap([
  ...REQUIRED_STATS,
  ['num_skipped_waiting_reqs', '00'],
  ['connector_prefix_cache_stats', 'c0'],
  ['spec_decoding_stats', 'c0'],
  ['kv_connector_stats', 'c0'],
  ['cudagraph_stats', 'c0'],
  ['perf_stats', 'c0'],
  ['waiting_lora_adapters', '80'],
  ['running_lora_adapters', '80'],
]);

/** Request batch, 4-element short envelope: engine 1, one output, stats, timestamp 1.5. */
const BATCH_HEX = '94' + '01' + '91' + OUTPUT_HEX + STATS_HEX + F64['1.5'];

const STATS: SchedulerStats = {
  ...schedulerStatsFor({ numRunning: 2, numWaiting: 5, kvCacheUsage: 0.25 }),
  step_counter: 7,
  prefix_cache_stats: {
    reset: false,
    requests: 1,
    queries: 3,
    hits: 1,
    preempted_requests: 0,
    preempted_queries: 0,
    preempted_hits: 0,
  },
};

const BATCH: EngineCoreOutputs = {
  ...defaultEngineCoreOutputs(),
  engine_index: 1,
  outputs: [
    {
      ...defaultEngineCoreOutput('vec-1', [10, 11]),
      new_logprobs: {
        token_ids: [[10], [11]],
        logprobs: [[-0.5], [-0.25]],
        ranks: [1, 1],
        cu_num_generated_tokens: null,
      },
      finish_reason: 1,
      prefill_stats: {
        num_prompt_tokens: 3,
        num_computed_tokens: 3,
        num_cached_tokens: 1,
        num_local_cached_tokens: 1,
        num_external_cached_tokens: 0,
        num_cache_creation_tokens: 0,
      },
    },
  ],
  scheduler_stats: STATS,
  timestamp: 1.5,
};

/** prefill_stats present: prompt and cached counts reported; vLLM never reports a cumulative completion count. */
const EXPECTED_BATCH: EngineBatch = {
  engineIndex: 1,
  outputs: [
    {
      requestId: 'vec-1',
      newTokenIds: [10, 11],
      finishReason: 'length',
      promptTokens: 3,
      completionTokens: null,
      cachedTokens: 1,
      logprobs: [-0.5, -0.25],
      stopReason: null,
    },
  ],
  finishedRequestIds: ['vec-1'],
  load: { numRunning: 2, numWaiting: 5, kvCacheUsage: 0.25 },
};

test('request batch pin: hex in, value out, and the engine-neutral batch', () => {
  assert.deepStrictEqual(decodeEngineCoreOutputs(bytesOf(BATCH_HEX)), BATCH);
  assert.deepStrictEqual(decodeEngineCoreOutputs([bytesOf(BATCH_HEX)]), BATCH);
  assert.deepStrictEqual(engineCoreOutputsToEngineBatch(BATCH), EXPECTED_BATCH);
});

test('request batch pin: value in, hex out (16-field layout; short form by default, full form on request)', () => {
  assert.equal(hexOf(encodeEngineCoreOutputs(BATCH, { layout: 16 })), BATCH_HEX);
  const full = hexOf(encodeEngineCoreOutputs(BATCH, { form: 'full', layout: 16 }));
  const outputFull = 'dc0010' + OUTPUT_HEX.slice(2) + 'c0' + '00' + 'c0' + 'c0'; // 12 routed_experts .. 15 new_sampling_mask
  assert.equal(full, '98' + '01' + '91' + outputFull + STATS_HEX + F64['1.5'] + 'c0c0c0c0');
  assert.deepStrictEqual(decodeEngineCoreOutputs(bytesOf(full)), BATCH);
});

test('required-only SchedulerStats decodes with defaults; a missing required key fails the whole message', () => {
  const minimal = '94' + '01' + '91' + OUTPUT_HEX + fixmap(REQUIRED_STATS) + F64['1.5'];
  assert.deepStrictEqual(decodeEngineCoreOutputs(bytesOf(minimal)), BATCH);
  for (const [missing] of REQUIRED_STATS) {
    const stats = fixmap(REQUIRED_STATS.filter(([k]) => k !== missing));
    decodeRejects(
      () => decodeEngineCoreOutputs(bytesOf('93' + '01' + '90' + stats)),
      new RegExp(`EngineCoreOutputs\\.scheduler_stats: missing required key '${missing}'`),
    );
  }
  const withUnknown = fixmap([...REQUIRED_STATS, ['future_stats', '93010203']]);
  assert.deepStrictEqual(
    decodeEngineCoreOutputs(bytesOf('93' + '01' + '90' + withUnknown)).scheduler_stats,
    STATS,
    'unknown keys are skipped',
  );
});

test('every envelope shape: request batch, stats-only, finished-only, utility reply, wave complete, start wave', () => {
  const utility = bytesOf('95' + '03' + '90' + 'c0' + F64['0'] + '9301c0c0');
  assert.deepEqual(classifyEngineCoreOutputs(decodeEngineCoreOutputs(utility)), { kind: 'utility' });
  assert.deepStrictEqual(
    engineCoreOutputsToEngineBatch(decodeEngineCoreOutputs(utility)),
    { engineIndex: 3, outputs: [], finishedRequestIds: [], utility: { callId: 1, failure: null, result: null } },
    'a utility reply is a batch without rows carrying the reply',
  );

  const complete = bytesOf('97' + '02' + '90' + 'c0' + F64['0'] + 'c0' + 'c0' + '07');
  assert.deepEqual(classifyEngineCoreOutputs(decodeEngineCoreOutputs(complete)), { kind: 'wave_complete', wave: 7 });
  assert.deepStrictEqual(engineCoreOutputsToEngineBatch(decodeEngineCoreOutputs(complete)), {
    engineIndex: 2,
    outputs: [],
    finishedRequestIds: [],
    wave: { kind: 'complete', wave: 7 },
  });

  const start = bytesOf('98' + '00' + '90' + 'c0' + F64['0'] + 'c0c0c0' + '04');
  assert.deepStrictEqual(engineCoreOutputsToEngineBatch(decodeEngineCoreOutputs(start)), {
    engineIndex: 0,
    outputs: [],
    finishedRequestIds: [],
    wave: { kind: 'start', wave: 4 },
  });

  const statsOnly = bytesOf('93' + '03' + '90' + STATS_HEX);
  assert.deepStrictEqual(engineCoreOutputsToEngineBatch(decodeEngineCoreOutputs(statsOnly)), {
    engineIndex: 3,
    outputs: [],
    finishedRequestIds: [],
    load: { numRunning: 2, numWaiting: 5, kvCacheUsage: 0.25 },
  });

  const finishedOnly = bytesOf('96' + '01' + '90' + 'c0' + F64['0'] + 'c0' + '93a161a162a161');
  assert.deepStrictEqual(
    engineCoreOutputsToEngineBatch(decodeEngineCoreOutputs(finishedOnly)),
    { engineIndex: 1, outputs: [], finishedRequestIds: ['a', 'b'] },
    'set semantics: duplicates dropped',
  );
  const emptyFinished = bytesOf('96' + '01' + '90' + 'c0' + F64['0'] + 'c0' + '90');
  assert.deepEqual(
    classifyEngineCoreOutputs(decodeEngineCoreOutputs(emptyFinished)),
    { kind: 'requests' },
    'finished_requests [] is present',
  );

  // Encoders produce the same bytes for the wave and utility shapes.
  assert.equal(
    hexOf(encodeEngineCoreOutputs({ ...defaultEngineCoreOutputs(), engine_index: 2, wave_complete: 7 })),
    hexOf(complete),
  );
  assert.equal(hexOf(encodeEngineCoreOutputs({ ...defaultEngineCoreOutputs(), start_wave: 4 })), hexOf(start));
  assert.equal(
    hexOf(encodeEngineCoreOutputs({ ...defaultEngineCoreOutputs(), engine_index: 3, utility_output: [1, null, null] })),
    hexOf(utility),
  );
});

test('invalid envelopes are decode errors: empty (short or full), mixed shapes', () => {
  decodeRejects(() => decodeEngineCoreOutputs(bytesOf('90')), /EngineCoreOutputs: empty envelope.*not a heartbeat/);
  decodeRejects(
    () => decodeEngineCoreOutputs(bytesOf('98' + '00' + '90' + 'c0' + F64['0'] + 'c0c0c0c0')),
    /empty envelope/,
  );
  decodeRejects(() => decodeEngineCoreOutputs(bytesOf('9101')), /empty envelope/);
  const out = '91' + fixarray(['a161', '9101']);
  decodeRejects(
    () => decodeEngineCoreOutputs(bytesOf('97' + '00' + out + 'c0' + F64['0'] + 'c0c0' + '01')),
    /mixed envelope shapes: request payload \+ wave_complete/,
  );
  decodeRejects(
    () => decodeEngineCoreOutputs(bytesOf('95' + '00' + '90' + STATS_HEX + F64['0'] + '01')),
    /mixed envelope shapes: request payload \+ utility_output/,
  );
  decodeRejects(
    () => decodeEngineCoreOutputs(bytesOf('98' + '00' + '90' + 'c0' + F64['0'] + 'c0c0' + '0102')),
    /mixed envelope shapes: wave_complete \+ start_wave/,
  );
  decodeRejects(
    () => decodeEngineCoreOutputs(bytesOf('98' + '00' + '90' + 'c0' + F64['0'] + 'c0' + '90' + 'c0' + '02')),
    /request payload \+ start_wave/,
  );
  decodeRejects(
    () => decodeEngineCoreOutputs(bytesOf('96' + '00' + '90' + 'c0' + F64['0'] + '01' + '90')),
    /request payload \+ utility_output/,
  );
  decodeRejects(() => decodeEngineCoreOutputs([]), /no frames/);
  decodeRejects(() => decodeEngineCoreOutputs(bytesOf('81a161c0')), /EngineCoreOutputs: expected array, got map/);
  decodeRejects(() => decodeEngineCoreOutputs(bytesOf(BATCH_HEX + 'c0')), /trailing characters/);
  decodeRejects(() => decodeEngineCoreOutputs(bytesOf(BATCH_HEX.slice(0, -6))), /truncated/);
});

test('trailing elements are tolerated at envelope and output level (SMG PR #2175)', () => {
  const outputLonger = 'dc0012' + OUTPUT_HEX.slice(2) + 'c0' + '00' + 'c0' + 'c0' + 'a3787878' + '92c0c0';
  const envelopeLonger = '9a' + '01' + '91' + outputLonger + STATS_HEX + F64['1.5'] + 'c0c0c0c0' + '81a161c3' + '00';
  assert.deepStrictEqual(decodeEngineCoreOutputs(bytesOf(envelopeLonger)), BATCH);
});

test('EngineCoreOutput: required prefix, finish reasons 0..4 (5.11), stop_reason int or str, events', () => {
  const env = (outputHex: string) => bytesOf('92' + '00' + '91' + outputHex);
  decodeRejects(
    () => decodeEngineCoreOutputs(env('91a161')),
    /EngineCoreOutputs\.outputs\[0\]: expected array of at least length 2, got 1 \(required field new_token_ids missing\)/,
  );
  decodeRejects(
    () => decodeEngineCoreOutputs(env('92a161' + '91cb4024000000000000')),
    /EngineCoreOutputs\.outputs\[0\]\.new_token_ids\[0\]: expected int, got float64/,
  );
  const reasons = ['stop', 'length', 'abort', 'error', 'stop'];
  for (let code = 0; code <= 4; code++) {
    const b = engineCoreOutputsToEngineBatch(decodeEngineCoreOutputs(env('96a161' + '90' + 'c0c0c0' + `0${code}`)));
    assert.equal(b.outputs[0].finishReason, reasons[code], `finish_reason ${code}`);
    assert.deepEqual(b.finishedRequestIds, ['a']);
    assert.equal(toFinishReason(code), reasons[code]);
  }
  decodeRejects(
    () => decodeEngineCoreOutputs(env('96a161' + '90' + 'c0c0c0' + '05')),
    /finish_reason: unknown finish reason 5/,
  );
  decodeRejects(
    () => decodeEngineCoreOutputs(env('96a161' + '90' + 'c0c0c0' + 'a4737470')),
    /finish_reason: expected int \| null, got str/,
  );
  assert.equal(toFinishReason(null), null);
  assert.throws(() => toFinishReason(9), WireDecodeError);

  const running = engineCoreOutputsToEngineBatch(decodeEngineCoreOutputs(env('92a161' + '9105')));
  assert.deepEqual(running.outputs[0], {
    requestId: 'a',
    newTokenIds: [5],
    finishReason: null,
    promptTokens: null,
    completionTokens: null,
    cachedTokens: null,
    logprobs: [],
    stopReason: null,
  });
  assert.deepEqual(running.finishedRequestIds, []);
  const stopTok = engineCoreOutputsToEngineBatch(
    decodeEngineCoreOutputs(env('97a161' + '91cd0190' + 'c0c0c0' + '00' + 'cd0190')),
  );
  assert.equal(stopTok.outputs[0].stopReason, 400);
  const stopStr = engineCoreOutputsToEngineBatch(
    decodeEngineCoreOutputs(env('97a161' + '90' + 'c0c0c0' + '00' + 'a3454e44')),
  );
  assert.equal(stopStr.outputs[0].stopReason, 'END');
  decodeRejects(
    () => decodeEngineCoreOutputs(env('97a161' + '90' + 'c0c0c0' + '00' + 'c3')),
    /stop_reason: expected int \| str \| null, got bool/,
  );
  const events =
    '92' +
    fixmap([
      ['type', '01'],
      ['timestamp', F64['1.5']],
    ]) +
    fixmap([
      ['type', '02'],
      ['timestamp', 'ca3fc00000'],
    ]);
  const withEvents = decodeEngineCoreOutputs(env('98a161' + '90' + 'c0c0c0c0c0' + events));
  assert.deepEqual(withEvents.outputs[0].events, [
    { type: 1, timestamp: 1.5 },
    { type: 2, timestamp: 1.5 },
  ]);
});

test('finished_requests plus terminal outputs: out-of-band ids first, no duplicates (dp-routing.md 8 steps 4-5)', () => {
  const o: EngineCoreOutputs = {
    ...defaultEngineCoreOutputs(),
    outputs: [{ ...defaultEngineCoreOutput('x', [1]), finish_reason: 0 }, defaultEngineCoreOutput('y', [2])],
    finished_requests: ['z', 'x'],
  };
  const b = engineCoreOutputsToEngineBatch(decodeEngineCoreOutputs(encodeEngineCoreOutputs(o)));
  assert.deepEqual(b.finishedRequestIds, ['z', 'x']);
  assert.equal(b.load, undefined, 'no scheduler_stats, no load');
});

test('token counts as reported, no per-request state (5.9): prompt/cached only with prefill_stats, completion never', () => {
  const step = (o: Partial<EngineCoreOutputs>) =>
    engineCoreOutputsToEngineBatch({ ...defaultEngineCoreOutputs(), ...o });
  const counts = (b: EngineBatch) => b.outputs.map((r) => [r.promptTokens, r.cachedTokens, r.completionTokens]);
  const prefill = { ...BATCH.outputs[0].prefill_stats!, num_prompt_tokens: 7, num_cached_tokens: 4 };
  assert.deepEqual(counts(step({ outputs: [{ ...defaultEngineCoreOutput('r', [1, 2]), prefill_stats: prefill }] })), [
    [7, 4, null],
  ]);
  assert.deepEqual(
    counts(step({ outputs: [defaultEngineCoreOutput('r', [3])] })),
    [[null, null, null]],
    "a later output without prefill_stats reports nothing: the engine client's stream keeps the last values",
  );
  const zero = { ...prefill, num_prompt_tokens: 0, num_cached_tokens: 0 };
  assert.deepEqual(
    counts(step({ outputs: [{ ...defaultEngineCoreOutput('r', [4]), prefill_stats: zero }] })),
    [[0, 0, null]],
    'a reported 0 stays 0 (not "unreported")',
  );
  // The same message decoded twice gives the same batch: nothing is remembered between calls.
  const msg: Partial<EngineCoreOutputs> = {
    outputs: [{ ...defaultEngineCoreOutput('q', [1]), prefill_stats: prefill }],
  };
  assert.deepStrictEqual(step(msg), step(msg));
});

test('float32 and float64 are both accepted for every float field (timestamp, kv_cache_usage, logprobs)', () => {
  const stats32 = fixmap(
    REQUIRED_STATS.map(([k, v]): [string, string] => [k, k === 'kv_cache_usage' ? 'ca3e800000' : v]),
  );
  const o = decodeEngineCoreOutputs(bytesOf('94' + '01' + '91' + OUTPUT_HEX + stats32 + 'ca3fc00000'));
  assert.deepStrictEqual(o, BATCH);
  const intUsage = fixmap(REQUIRED_STATS.map(([k, v]): [string, string] => [k, k === 'kv_cache_usage' ? '01' : v]));
  assert.equal(decodeEngineCoreOutputs(bytesOf('93' + '01' + '90' + intUsage)).scheduler_stats!.kv_cache_usage, 1);
  const strUsage = fixmap(REQUIRED_STATS.map(([k, v]): [string, string] => [k, k === 'kv_cache_usage' ? 'a131' : v]));
  decodeRejects(
    () => decodeEngineCoreOutputs(bytesOf('93' + '01' + '90' + strUsage)),
    /scheduler_stats\.kv_cache_usage: expected float, got str/,
  );
  decodeRejects(
    () =>
      decodeEngineCoreOutputs(
        bytesOf(
          '93' +
            '01' +
            '90' +
            fixmap(REQUIRED_STATS.map(([k, v]): [string, string] => [k, k === 'num_running_reqs' ? F64['1'] : v])),
        ),
      ),
    /num_running_reqs: expected int, got float64/,
  );
});

test('bigint safety: wire structs keep bigints; the engine-neutral mapping refuses them instead of rounding', () => {
  const big = 'cf0020000000000001'; // 2^53 + 1
  const envBig = decodeEngineCoreOutputs(bytesOf('93' + big + '90' + STATS_HEX));
  assert.equal(envBig.engine_index, 9007199254740993n);
  decodeRejects(
    () => engineCoreOutputsToEngineBatch(envBig),
    /EngineCoreOutputs\.engine_index: integer 9007199254740993 is beyond/,
  );
  const tokBig = decodeEngineCoreOutputs(bytesOf('92' + '00' + '91' + '92a161' + '92' + '01' + big));
  assert.deepEqual(tokBig.outputs[0].new_token_ids, [1, 9007199254740993n]);
  decodeRejects(
    () => engineCoreOutputsToEngineBatch(tokBig),
    /outputs\[0\]\.new_token_ids\[1\]: integer 9007199254740993/,
  );
  const statsBig = fixmap(REQUIRED_STATS.map(([k, v]): [string, string] => [k, k === 'num_waiting_reqs' ? big : v]));
  decodeRejects(
    () => engineCoreOutputsToEngineBatch(decodeEngineCoreOutputs(bytesOf('93' + '00' + '90' + statsBig))),
    /scheduler_stats\.num_waiting_reqs: integer 9007199254740993/,
  );
  const waveBig = decodeEngineCoreOutputs(bytesOf('97' + '00' + '90' + 'c0' + F64['0'] + 'c0c0' + big));
  assert.equal(waveBig.wave_complete, 9007199254740993n);
  decodeRejects(
    () => engineCoreOutputsToEngineBatch(waveBig),
    /EngineCoreOutputs\.wave_complete: integer 9007199254740993/,
  );
  const negWave = decodeEngineCoreOutputs(bytesOf('98' + '00' + '90' + 'c0' + F64['0'] + 'c0c0c0' + 'ff'));
  decodeRejects(() => engineCoreOutputsToEngineBatch(negWave), /start_wave: must be ≥ 0, got -1/);
  // 2^32 fits a number and survives the round trip as uint64.
  const wide = decodeEngineCoreOutputs(bytesOf('93' + '00' + '91' + '92a161' + '91cf0000000100000000' + 'c0'));
  assert.deepEqual(engineCoreOutputsToEngineBatch(wide).outputs[0].newTokenIds, [4294967296]);
  assert.equal(hexOf(encodeEngineCoreOutputs(wide)), '92' + '00' + '91' + '92a161' + '91cf0000000100000000');
});

test('encoder refuses what the wire cannot carry', () => {
  const bad = (o: EngineCoreOutputs, re: RegExp) =>
    assert.throws(
      () => encodeEngineCoreOutputsFrames(o),
      (e: unknown) => e instanceof WireEncodeError && re.test(e.message),
    );
  bad(
    { ...defaultEngineCoreOutputs(), outputs: [defaultEngineCoreOutput('a', [1.5])] },
    /outputs\[0\]\.new_token_ids\[0\]: expected an integer/,
  );
  bad({ ...defaultEngineCoreOutputs(), engine_index: -0.5 }, /EngineCoreOutputs\.engine_index/);
  bad(
    {
      ...defaultEngineCoreOutputs(),
      outputs: [
        {
          ...defaultEngineCoreOutput('a', [1]),
          new_logprobs: { token_ids: [[1]], logprobs: [[0], [1]], ranks: [1], cu_num_generated_tokens: null },
        },
      ],
    },
    /new_logprobs: logprobs shape \[2, 1\] differs from token_ids shape \[1, 1\]/,
  );
});

test('EngineCoreOutput pin with every field distinct: indices 0..15 land in their own fields (both directions)', () => {
  const output =
    'dc0010' +
    'a161' + // 0 request_id "a"
    '9101' + // 1 new_token_ids [1]
    'c0' +
    'c0' + // 2 new_logprobs, 3 new_prompt_logprobs_tensors
    '93a7666c6f617433329101d6030000803f' + // 4 pooling_output ["float32", [1], ext 3 of 1.0]
    '03' + // 5 finish_reason 3 (error)
    'a173' + // 6 stop_reason "s"
    '90' + // 7 events []
    'a16b' +
    'a165' +
    'a174' + // 8 kv_transfer_params "k", 9 ec_transfer_params "e", 10 trace_headers "t"
    'c0' + // 11 prefill_stats
    'a172' + // 12 routed_experts "r"
    '06' + // 13 num_nans_in_logits 6
    '91a168' + // 14 mm_cache_miss_hashes ["h"]
    'a16d'; // 15 new_sampling_mask "m"
  const hex = '92' + '00' + '91' + output;
  const value: EngineCoreOutputs = {
    ...defaultEngineCoreOutputs(),
    outputs: [
      {
        ...defaultEngineCoreOutput('a', [1]),
        pooling_output: { dtype: 'float32', shape: [1], data: Uint8Array.of(0, 0, 0x80, 0x3f) },
        finish_reason: 3,
        stop_reason: 's',
        events: [],
        kv_transfer_params: 'k',
        ec_transfer_params: 'e',
        trace_headers: 't',
        routed_experts: 'r',
        num_nans_in_logits: 6,
        mm_cache_miss_hashes: ['h'],
        new_sampling_mask: 'm',
      },
    ],
  };
  assert.deepStrictEqual(decodeEngineCoreOutputs(bytesOf(hex)), value);
  assert.equal(hexOf(encodeEngineCoreOutputs(value, { layout: 16 })), hex);
  const b = engineCoreOutputsToEngineBatch(value);
  assert.equal(b.outputs[0].finishReason, 'error');
  assert.equal(b.outputs[0].stopReason, 's');
});
