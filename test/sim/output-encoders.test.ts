/**
 * The simulated ranks' direct step encoders (src/sim/output.ts `encodeSimBatch`, src/sim/vllm-output.ts
 * `encodeVllmStepDirect`) write the same bytes as the schema codecs they bypass (`encodeBatchTokenIDOutSlim`,
 * `encodeEngineCoreOutputsFrames` of `toEngineCoreOutput` objects), on the golden TokenSpeed vectors and on seeded
 * random batches, and fall back on the schema codecs to name the field of a value the wire cannot carry.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decode as msgpackDecode } from '@msgpack/msgpack';
import { loadTokenSpeedVectors } from '../helpers/vectors.js';
import {
  decodeBatchTokenIDOutSlim,
  encodeBatchTokenIDOutSlim,
  type BatchTokenIDOutSlim,
} from '../../src/protocols/tokenspeed/output.js';
import {
  decodeEngineCoreOutputs,
  defaultEngineCoreOutputs,
  detectOutputLayout,
  encodeEngineCoreOutputsFrames,
  schedulerStatsFor,
} from '../../src/protocols/vllm/index.js';
import { WireEncodeError } from '../../src/wire/errors.js';
import { encodeSimBatch, toBatchTokenIDOutSlim, type SimBatchView } from '../../src/sim/output.js';
import type { SimFinishReason, SimRow } from '../../src/sim/scheduler.js';
import { Prng } from '../../src/sim/prng.js';
import { encodeVllmStepDirect, type VllmStepFrame } from '../../src/sim/vllm-output.js';
import { createVllmSimWire, toEngineCoreOutput } from '../../src/sim/vllm-wire.js';
import type { SimStep } from '../../src/sim/wire.js';

const hexOf = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');
const schemaSlim = (b: SimBatchView): string =>
  hexOf(encodeBatchTokenIDOutSlim(toBatchTokenIDOutSlim(b), { form: 14 }));

/** The rows a decoded 14-element batch holds (the inverse of `toBatchTokenIDOutSlim`). */
function batchOf(b: BatchTokenIDOutSlim): SimBatchView {
  const rows: SimRow[] = b.rids.map((rid, i) => ({
    rid,
    outputIds: b.output_ids[i] as number[],
    finishedReason: b.finished_reasons[i] as SimFinishReason,
    promptTokens: b.prompt_tokens[i] as number,
    completionTokens: b.completion_tokens[i] as number,
    cachedTokens: b.cached_tokens[i] as number,
    logprobVals: b.output_token_logprobs_val[i],
    logprobIdx: b.output_token_logprobs_idx[i] as number[],
    stopReason: null,
    prefillTokens: null,
  }));
  const n = (x: unknown): number => x as number;
  return {
    engineIndex: n(b.engine_index),
    rows,
    tail: {
      numRunning: n(b.num_running),
      numWaiting: n(b.num_waiting),
      kvActivePages: n(b.kv_active_pages),
      kvTotalPages: n(b.kv_total_pages),
    },
  };
}

test('encodeSimBatch writes every valid 14-element TokenSpeed output vector byte for byte', () => {
  const vectors = loadTokenSpeedVectors().filter(
    (v) => v.kind === 'BatchTokenIDOutSlim' && v.form === '14-element' && v.hex !== undefined,
  );
  assert.ok(vectors.length >= 8, `found ${vectors.length} vectors`);
  for (const v of vectors) {
    const batch = batchOf(decodeBatchTokenIDOutSlim(Buffer.from(v.hex!, 'hex')));
    assert.equal(hexOf(encodeSimBatch(batch)), v.hex, v.name);
  }
});

const RID_CHARS = 'abcdef0123456789-_:';

/** A seeded rid: ASCII of 0..300 characters (fixstr, str8 and str16 headers), now and then non-ASCII. */
function randomRid(prng: Prng): string {
  const roll = prng.next();
  const length = roll < 0.7 ? prng.int(0, 45) : roll < 0.9 ? prng.int(28, 40) : prng.int(200, 300);
  let s = '';
  for (let i = 0; i < length; i++) s += RID_CHARS[prng.int(0, RID_CHARS.length - 1)];
  return prng.next() < 0.1 ? `${s}é-🙂-é` : s;
}

/** A seeded integer from every msgpack int form a rank can send (fixint through uint64, negatives included). */
function randomInt(prng: Prng): number {
  const sizes = [0x7f, 0xff, 0xffff, 0xffffffff, Number.MAX_SAFE_INTEGER];
  const v = prng.int(0, sizes[prng.int(0, sizes.length - 1)]!);
  return prng.next() < 0.05 ? -v : v;
}

function randomFloat(prng: Prng): number {
  const specials = [Number.NaN, -Infinity, Infinity, -0, 0, 1];
  return prng.next() < 0.2 ? specials[prng.int(0, specials.length - 1)]! : -20 * prng.next();
}

const REASONS: readonly SimFinishReason[] = ['', '', '', 'stop', 'length', 'abort'];

function randomRow(prng: Prng, logprobs: boolean): SimRow {
  const outputIds = Array.from({ length: prng.int(0, 20) }, () => randomInt(prng));
  const finishedReason = REASONS[prng.int(0, REASONS.length - 1)]!;
  const withLogprobs = logprobs && prng.next() < 0.5;
  return {
    rid: randomRid(prng),
    outputIds,
    finishedReason,
    promptTokens: randomInt(prng),
    completionTokens: randomInt(prng),
    cachedTokens: randomInt(prng),
    logprobVals: withLogprobs ? outputIds.map(() => randomFloat(prng)) : [],
    logprobIdx: withLogprobs ? outputIds.slice() : [],
    stopReason: finishedReason === 'stop' && prng.next() < 0.5 ? prng.int(0, 200_000) : null,
    prefillTokens: prng.next() < 0.3 ? randomInt(prng) : null,
  };
}

test('encodeSimBatch equals the schema codec on seeded random batches (every int form, float edge, rid length)', () => {
  const prng = new Prng(12);
  for (let i = 0; i < 400; i++) {
    const rows = Array.from({ length: prng.int(1, 40) }, () => randomRow(prng, true));
    const batch: SimBatchView = {
      engineIndex: prng.int(0, 65535),
      rows,
      tail: {
        numRunning: randomInt(prng),
        numWaiting: randomInt(prng),
        kvActivePages: randomInt(prng),
        kvTotalPages: randomInt(prng),
      },
    };
    assert.equal(hexOf(encodeSimBatch(batch)), schemaSlim(batch), `batch ${i}`);
  }
});

test("encodeSimBatch names the field of a value the wire cannot carry (the schema codec's error) and refuses an empty batch", () => {
  const prng = new Prng(3);
  const rows = [randomRow(prng, false), { ...randomRow(prng, false), outputIds: [7, 1.5] }];
  const batch: SimBatchView = {
    engineIndex: 0,
    rows,
    tail: { numRunning: 1, numWaiting: 0, kvActivePages: 1, kvTotalPages: 8 },
  };
  assert.throws(
    () => encodeSimBatch(batch),
    (e: unknown) => e instanceof WireEncodeError && /output_ids\[1\]\[1\]/.test(e.message),
  );
  const lone: SimBatchView = { ...batch, rows: [{ ...rows[0]!, rid: 'a\uD800' }] };
  assert.throws(
    () => encodeSimBatch(lone),
    (e: unknown) => e instanceof WireEncodeError && /rids\[0\].*lone surrogate/.test(e.message),
  );
  assert.throws(() => encodeSimBatch({ ...batch, rows: [] }), RangeError);
});

/** The reference: the step's outputs as `EngineCoreOutput` objects through the schema codec (short form). */
function schemaVllm(f: VllmStepFrame): string {
  const layout = f.layout ?? 13;
  const o = defaultEngineCoreOutputs();
  o.engine_index = f.engineIndex;
  o.outputs = f.rows.map((r) => toEngineCoreOutput(r, 0, [], layout));
  o.scheduler_stats = f.stats;
  o.timestamp = f.timestamp;
  o.finished_requests = f.finished;
  const frames = encodeEngineCoreOutputsFrames(o, { layout });
  assert.equal(frames.length, 1);
  return hexOf(frames[0]!);
}

test('encodeVllmStepDirect equals the schema codec on seeded random steps (finish and stop reasons, prefill stats, finished ids), in both layouts', () => {
  const prng = new Prng(5);
  for (let i = 0; i < 400; i++) {
    const layout = i % 2 === 0 ? 13 : 16;
    const rows = Array.from({ length: prng.int(0, 30) }, () => randomRow(prng, false));
    const stats = schedulerStatsFor({
      numRunning: randomInt(prng),
      numWaiting: randomInt(prng),
      kvCacheUsage: prng.next(),
    });
    stats.step_counter = randomInt(prng);
    stats.prefix_cache_stats.hits = prng.int(0, 5000);
    const finished = prng.next() < 0.5 ? Array.from({ length: prng.int(1, 5) }, () => randomRid(prng)) : null;
    const timestamp = prng.next() < 0.05 ? 0 : 1_764_000_000 + prng.next();
    const frame: VllmStepFrame = { engineIndex: prng.int(0, 65535), rows, finished, stats, timestamp, layout };
    assert.equal(hexOf(encodeVllmStepDirect(frame)), schemaVllm(frame), `step ${i}`);
  }
});

function step(rows: SimRow[]): SimStep {
  return {
    engineIndex: 1,
    rows,
    tail: { numRunning: 2, numWaiting: 0, kvActivePages: 3, kvTotalPages: 64 },
    state: {
      running: 2,
      loraLoads: 0,
      loraRunning: {},
      loraWaiting: {},
      waiting: 0,
      registered: 2,
      activePages: 3,
      freePages: 61,
      cachedPages: 0,
      cacheEvictions: 0,
      cacheRequests: 2,
      cacheQueryTokens: 40,
      cacheHitTokens: 16,
      pendingAborts: 0,
      pendingRejections: 0,
      roundOpen: false,
      preemptions: 0,
    },
    kvTotalPages: 64,
    stepCounter: 9,
    currentWave: 0,
  };
}

test('the vLLM sim wire sends what the schema codec would (direct rows, logprob steps through the codec, aborted ids listed)', () => {
  const wire = createVllmSimWire({
    enableOutputLogprobs: true,
    tokens: () => ({ next: () => ({ tokenId: 1, logprob: 0 }) }),
  });
  const plain: SimRow = {
    rid: 'r-1',
    outputIds: [11, 12],
    finishedReason: 'stop',
    promptTokens: 20,
    completionTokens: 2,
    cachedTokens: 16,
    logprobVals: [],
    logprobIdx: [],
    stopReason: 12,
    prefillTokens: 4,
  };
  wire.noteAborted(['gone-1']);
  const before = Date.now() / 1000;
  const frames = wire.encodeStep(step([plain]))!;
  assert.equal(frames.length, 1);
  const o = decodeEngineCoreOutputs(frames);
  assert.ok(o.timestamp >= before && o.timestamp <= Date.now() / 1000 + 1);
  const stats = schedulerStatsFor({ numRunning: 2, numWaiting: 0, kvCacheUsage: 3 / 64 });
  stats.step_counter = 9;
  Object.assign(stats.prefix_cache_stats, { requests: 2, queries: 40, hits: 16 });
  assert.equal(
    hexOf(frames[0]!),
    schemaVllm({ engineIndex: 1, rows: [plain], finished: ['r-1', 'gone-1'], stats, timestamp: o.timestamp }),
  );
  // A step with logprobs goes through the schema codec: column 0 carries the sampled tokens.
  const withLogprobs: SimRow = {
    ...plain,
    rid: 'r-2',
    finishedReason: '',
    stopReason: null,
    prefillTokens: null,
    logprobVals: [-0.5, -1],
    logprobIdx: [11, 12],
  };
  const lp = decodeEngineCoreOutputs(wire.encodeStep(step([withLogprobs]))!);
  assert.equal(lp.outputs[0]!.request_id, 'r-2');
  assert.notEqual(lp.outputs[0]!.new_logprobs, null);
  assert.equal(lp.finished_requests, null);
  assert.equal(
    lp.scheduler_stats!.prefix_cache_stats.requests,
    0,
    'lookups are reported once, since the previous stats',
  );
});

test('the vLLM sim wire names the field of a value the wire cannot carry', () => {
  const wire = createVllmSimWire({
    enableOutputLogprobs: true,
    tokens: () => ({ next: () => ({ tokenId: 1, logprob: 0 }) }),
  });
  const bad: SimRow = {
    rid: 'r-1',
    outputIds: [11, 2 ** 60],
    finishedReason: '',
    promptTokens: 20,
    completionTokens: 2,
    cachedTokens: 0,
    logprobVals: [],
    logprobIdx: [],
    stopReason: null,
    prefillTokens: null,
  };
  assert.throws(
    () => wire.encodeStep(step([bad])),
    (e: unknown) => e instanceof WireEncodeError && /outputs\[0\]\.new_token_ids\[1\]/.test(e.message),
  );
});

test("the vLLM sim wire's outputLayout: 13 (default) puts the five-key prefill_stats at 10, 16 the six-key one at 11; the gateway's detection agrees", () => {
  const row: SimRow = {
    rid: 'r-1',
    outputIds: [11],
    finishedReason: '',
    promptTokens: 20,
    completionTokens: 1,
    cachedTokens: 16,
    logprobVals: [],
    logprobIdx: [],
    stopReason: null,
    prefillTokens: 4,
  };
  const ctx = { enableOutputLogprobs: true, tokens: () => ({ next: () => ({ tokenId: 1, logprob: 0 }) }) };
  const prefill = {
    num_prompt_tokens: 20,
    num_computed_tokens: 4,
    num_cached_tokens: 16,
    num_local_cached_tokens: 16,
    num_external_cached_tokens: 0,
  };
  for (const [layout, wire] of [
    [13, createVllmSimWire(ctx)],
    [13, createVllmSimWire({ ...ctx, outputLayout: 13 })],
    [16, createVllmSimWire({ ...ctx, outputLayout: 16 })],
  ] as const) {
    // Both encoder paths: the direct writer (no logprobs) and the schema codec (a row with logprobs).
    for (const r of [row, { ...row, logprobVals: [-0.5], logprobIdx: [11] }]) {
      const payload = wire.encodeStep(step([r]))![0]!;
      const raw = (msgpackDecode(payload) as unknown[][])[1]![0] as unknown[];
      assert.equal(raw.length, layout === 13 ? 11 : 12, `layout ${layout}: prefill_stats is the last element`);
      assert.deepEqual(raw.at(-1), layout === 13 ? prefill : { ...prefill, num_cache_creation_tokens: 0 });
      assert.equal(detectOutputLayout(payload)?.layout, layout);
      assert.equal(decodeEngineCoreOutputs([payload]).outputs[0]!.prefill_stats!.num_cached_tokens, 16);
    }
  }
});
