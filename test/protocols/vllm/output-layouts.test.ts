/**
 * The two `EngineCoreOutput` layouts (docs/wire/vllm-output.md; issue 26 part 2) against the golden vectors of vLLM's
 * real encoders at 9aaf83ef and 52a31cce (test/vectors/vllm, README there):
 * - the codecs' field lists are vLLM's (`*.fields.txt`) for the 13-field layout, SMG's for the 16-field one;
 * - EVERY vector decodes in the layout its shape shows (13), every field of every output and of the envelope checked
 *   against an independent generic msgpack decode of the same bytes and against the vector's own arrays;
 * - each output vector's 16-field twin (the same values with `ec_transfer_params` at 9) decodes to the same batch;
 * - read as 16 fields (the decoder before this change), the real vectors lose the cached-token count and
 *   `num_nans_in_logits`, and the routed-experts batch fails;
 * - the protocol decides once per rank (ready-response version, else shape), reports it once, leaves ambiguous
 *   outputs undecided, and forgets on rejoin; the ready-response vectors decode;
 * (test/vectors/vectors-match-shared.test.ts checks the repository's copies against the originals when present.)
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ExtData, decode, encode } from '@msgpack/msgpack';
import {
  createVllmProtocol,
  decodeEngineCoreOutputs,
  defaultEngineCoreOutput,
  defaultEngineCoreOutputs,
  detectOutputLayout,
  encodeEngineCoreOutputs,
  engineCoreOutputCodecs,
  engineCoreOutputsToEngineBatch,
  outputLayoutOfVersion,
  peekEngineIndex,
  schedulerStatsCodec,
} from '../../../src/protocols/vllm/index.js';
import type { EngineCoreOutputLayout, OutputLayoutDecision } from '../../../src/protocols/vllm/index.js';
import { decodeReadyResponse } from '../../../src/protocols/handshake.js';
import type { EngineBatch } from '../../../src/protocols/types.js';
import { WireDecodeError } from '../../../src/wire/errors.js';
import { loadRepoVectors, repoVectorsDir } from '../../helpers/vectors.js';
import type { Vector } from '../../helpers/vectors.js';
import { bytesOf, hexOf } from './hex.js';

const vectors = loadRepoVectors('vllm');
const outputVectors = vectors.filter((v) => v.kind === 'EngineCoreOutputs');
const readyVectors = vectors.filter((v) => v.kind === 'EngineCoreReadyResponse');
const exercised = new Set<string>();

/** The full commit a vector names in `source`. */
function commitOf(v: Vector): string {
  const m = /vllm-project\/vllm ([0-9a-f]{40})/.exec(String(v.source));
  assert.ok(m, `${v.name}: source names a vLLM commit`);
  return m[1]!;
}

/** Field names of `struct` in wire order, from `vllm-<commit>.fields.txt` (the real struct declarations). */
function fieldsOf(commit: string, struct: string): string[] {
  const text = readFileSync(join(repoVectorsDir('vllm'), `vllm-${commit.slice(0, 8)}.fields.txt`), 'utf8');
  const lines = text.split('\n');
  const start = lines.findIndex((l) => l.startsWith(`## ${struct} (`));
  assert.ok(start >= 0, `${struct} listed for ${commit}`);
  const names: string[] = [];
  for (const line of lines.slice(start + 1)) {
    if (line.startsWith('## ')) break;
    const m = /^\s*(\d+)\s+L\d+\s+(\w+):/.exec(line);
    if (m === null) continue;
    assert.equal(Number(m[1]), names.length, `${struct}: indices in order`);
    names.push(m[2]!);
  }
  return names;
}

/** The 16-field layout, as SMG's decoder and engine-wire.md 5.9 declare it. */
const SIXTEEN = [
  'request_id',
  'new_token_ids',
  'new_logprobs',
  'new_prompt_logprobs_tensors',
  'pooling_output',
  'finish_reason',
  'stop_reason',
  'events',
  'kv_transfer_params',
  'ec_transfer_params',
  'trace_headers',
  'prefill_stats',
  'routed_experts',
  'num_nans_in_logits',
  'mm_cache_miss_hashes',
  'new_sampling_mask',
];

const payloadOf = (v: Vector): Uint8Array => {
  assert.equal(v.frames_hex?.length, 1, `${v.name}: one frame`);
  return bytesOf(v.frames_hex![0]!);
};
/** An independent reading of the same bytes (@msgpack/msgpack, no schema). */
const generic = (payload: Uint8Array): unknown[] => decode(payload) as unknown[];
const int32s = (data: Uint8Array): number[] => {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  return Array.from({ length: data.length / 4 }, (_, i) => view.getInt32(4 * i, true));
};

test("the 13-field codec has vLLM's EngineCoreOutput / EngineCoreOutputs fields in wire order at both commits; the 16-field one SMG's", () => {
  const c13 = engineCoreOutputCodecs({ aux: [] }, 13);
  const c16 = engineCoreOutputCodecs({ aux: [] }, 16);
  for (const commit of new Set(outputVectors.map(commitOf))) {
    assert.deepEqual(
      c13.output.fields.map((f) => f.name),
      fieldsOf(commit, 'EngineCoreOutput'),
      commit,
    );
    assert.deepEqual(
      c13.outputs.fields.map((f) => f.name),
      fieldsOf(commit, 'EngineCoreOutputs'),
      commit,
    );
    assert.deepEqual(
      c16.outputs.fields.map((f) => f.name),
      fieldsOf(commit, 'EngineCoreOutputs'),
      commit,
    );
  }
  assert.deepEqual(
    c16.output.fields.map((f) => f.name),
    SIXTEEN,
  );
  assert.equal(new Set(outputVectors.map(commitOf)).size, 2, 'vectors from both commits');
});

/** Every field of a decoded 13-field output against the generic decode (`raw`) and the vector's own array. */
function expectOutput13(
  name: string,
  actual: Record<string, unknown>,
  raw: unknown[],
  listed: unknown[],
  fields: string[],
): void {
  assert.deepEqual(Object.keys(actual), fields, `${name}: exactly the 13 fields, in wire order`);
  assert.equal(raw.length, 13, `${name}: the real encoder writes all 13 elements`);
  fields.forEach((field, i) => {
    const at = `${name}.${field}`;
    if (field === 'routed_experts' && raw[i] !== null) {
      const [dtype, shape, ext] = raw[i] as [string, number[], ExtData];
      assert.ok(ext instanceof ExtData && ext.type === 3, `${at}: inline raw view (ext 3)`);
      assert.deepStrictEqual(actual[field], { dtype, shape, data: ext.data }, at);
      const [listedDtype, listedShape] = listed[i] as [string, number[]];
      assert.deepEqual([dtype, shape], [listedDtype, listedShape], `${at}: as the vector lists it`);
      return;
    }
    assert.deepStrictEqual(actual[field], raw[i], at);
    assert.deepStrictEqual(actual[field], listed[i], `${at}: as the vector lists it`);
  });
}

for (const v of outputVectors) {
  test(`vector ${v.name}: shape shows 13 fields; every field of the envelope and of every output in place`, () => {
    exercised.add(v.name);
    const commit = commitOf(v);
    const payload = payloadOf(v);
    assert.equal(detectOutputLayout(payload)?.layout, 13);
    const decoded = decodeEngineCoreOutputs([payload]);
    assert.deepStrictEqual(
      decoded,
      decodeEngineCoreOutputs([payload], 13),
      'detection picks what the explicit layout gives',
    );
    const env = generic(payload);
    const envFields = fieldsOf(commit, 'EngineCoreOutputs');
    assert.equal(env.length, envFields.length, 'the real encoder writes all 8 envelope elements');
    const d = decoded as unknown as Record<string, unknown>;
    assert.deepEqual(Object.keys(d), envFields);
    const outFields = fieldsOf(commit, 'EngineCoreOutput');
    const listed = v.raw_output_arrays as unknown[][];
    envFields.forEach((field, i) => {
      if (field === 'outputs') {
        const raws = env[i] as unknown[][];
        assert.equal(decoded.outputs.length, raws.length);
        assert.equal(listed.length, raws.length);
        raws.forEach((raw, j) =>
          expectOutput13(
            `${v.name}.outputs[${j}]`,
            decoded.outputs[j] as unknown as Record<string, unknown>,
            raw,
            listed[j]!,
            outFields,
          ),
        );
      } else if (field === 'scheduler_stats') {
        const raw = env[i] as Record<string, unknown>;
        const stats = decoded.scheduler_stats as unknown as Record<string, unknown>;
        for (const key of Object.keys(stats)) assert.deepStrictEqual(stats[key], raw[key], `scheduler_stats.${key}`);
        // Every key the real encoder wrote is declared (the LoRA maps too: stats.ts).
        assert.deepEqual(
          Object.keys(raw).filter((k) => !(k in stats)),
          [],
        );
      } else {
        assert.deepStrictEqual(d[field], env[i], `EngineCoreOutputs.${field}`);
      }
    });
    if (v.decoded !== undefined) {
      // The vector's logical value (prefill_stats vectors): the same, key by key.
      const want = structuredClone(v.decoded) as Record<string, Record<string, unknown>>;
      assert.deepStrictEqual(JSON.parse(JSON.stringify(decoded)), want);
    }
  });
}

/** The engine-neutral batches the three vector kinds must give (the same at both commits). */
const STATS_LOAD = { numRunning: 2, numWaiting: 1, kvCacheUsage: 0.25 };
const EXPECTED_BATCHES: Record<string, EngineBatch> = {
  prefill_stats: {
    engineIndex: 1,
    outputs: [
      {
        requestId: 'r-prefill',
        newTokenIds: [11],
        finishReason: null,
        promptTokens: 7,
        completionTokens: null,
        cachedTokens: 4,
        logprobs: [],
        stopReason: null,
      },
      {
        requestId: 'r-done',
        newTokenIds: [12],
        finishReason: 'length',
        promptTokens: null,
        completionTokens: null,
        cachedTokens: null,
        logprobs: [],
        stopReason: null,
      },
    ],
    finishedRequestIds: ['r-done'],
    load: STATS_LOAD,
  },
  num_nans: {
    engineIndex: 0,
    outputs: [
      {
        requestId: 'r-nan',
        newTokenIds: [13],
        finishReason: null,
        promptTokens: null,
        completionTokens: null,
        cachedTokens: null,
        logprobs: [],
        stopReason: null,
      },
    ],
    finishedRequestIds: [],
    load: STATS_LOAD,
  },
  routed_experts: {
    engineIndex: 0,
    outputs: [
      {
        requestId: 'r-experts',
        newTokenIds: [14],
        finishReason: null,
        promptTokens: null,
        completionTokens: null,
        cachedTokens: null,
        logprobs: [],
        stopReason: null,
      },
    ],
    finishedRequestIds: [],
    load: STATS_LOAD,
  },
};
const kindOf = (v: Vector): string => /^vllm_outputs_(.+)_[0-9a-f]{8}$/.exec(v.name)![1]!;

test('every output vector: the engine-neutral batch (cached tokens 4 of 7 reach the row), num_nans 2 and the routed experts kept', () => {
  for (const v of outputVectors) {
    const decoded = decodeEngineCoreOutputs([payloadOf(v)]);
    assert.deepStrictEqual(engineCoreOutputsToEngineBatch(decoded), EXPECTED_BATCHES[kindOf(v)], v.name);
    if (kindOf(v) === 'num_nans') assert.equal(decoded.outputs[0]!.num_nans_in_logits, 2, v.name);
    if (kindOf(v) === 'routed_experts') {
      const experts = decoded.outputs[0]!.routed_experts as { dtype: string; shape: number[]; data: Uint8Array };
      assert.deepEqual([experts.dtype, experts.shape, int32s(experts.data)], ['<i4', [2, 2], [1, 2, 3, 4]], v.name);
    }
  }
});

test('read as the 16-field layout (the decoder before issue 26), the real vectors lose cached tokens and num_nans, and routed experts fail', () => {
  for (const v of outputVectors) {
    const payload = payloadOf(v);
    switch (kindOf(v)) {
      case 'prefill_stats': {
        const o = decodeEngineCoreOutputs([payload], 16);
        assert.equal(o.outputs[0]!.prefill_stats, null, 'PrefillStats read as trace_headers');
        assert.equal((o.outputs[0]!.trace_headers as Record<string, unknown>).num_cached_tokens, 4);
        assert.equal(
          engineCoreOutputsToEngineBatch(o).outputs[0]!.cachedTokens,
          null,
          `${v.name}: the cached-token count is lost`,
        );
        break;
      }
      case 'num_nans':
        assert.equal(
          decodeEngineCoreOutputs([payload], 16).outputs[0]!.num_nans_in_logits,
          0,
          `${v.name}: num_nans_in_logits lost`,
        );
        break;
      case 'routed_experts':
        assert.throws(
          () => decodeEngineCoreOutputs([payload], 16),
          (e: unknown) =>
            e instanceof WireDecodeError && /prefill_stats: expected PrefillStats \| null, got array/.test(e.message),
          v.name,
        );
        break;
      default:
        assert.fail(`unexpected vector ${v.name}`);
    }
  }
});

/** The vector's values in the 16-field layout: `ec_transfer_params` (nil) inserted at 9, the rest one further on. */
function twin16(payload: Uint8Array): Uint8Array {
  const env = generic(payload);
  env[1] = (env[1] as unknown[][]).map((o) => [...o.slice(0, 9), null, ...o.slice(9)]);
  return encode(env);
}

test("each output vector's 16-field twin: its shape shows 16, every field lands in place, the batch is the same", () => {
  for (const v of outputVectors) {
    const payload = payloadOf(v);
    const twin = twin16(payload);
    const shown = detectOutputLayout(twin);
    assert.equal(shown?.layout, 16, `${v.name}: ${shown?.reason}`);
    const decoded = decodeEngineCoreOutputs([twin]);
    const raws = generic(twin)[1] as unknown[][];
    decoded.outputs.forEach((out, j) => {
      const o = out as unknown as Record<string, unknown>;
      assert.deepEqual(Object.keys(o), SIXTEEN, 'the 16 fields');
      SIXTEEN.forEach((field, i) => {
        const raw = i < raws[j]!.length ? raws[j]![i] : field === 'num_nans_in_logits' ? 0 : null;
        const want =
          field === 'prefill_stats' && raw !== null ? { ...(raw as object), num_cache_creation_tokens: 0 } : raw;
        assert.deepStrictEqual(o[field], want, `${v.name} twin outputs[${j}].${field}`);
      });
    });
    assert.deepStrictEqual(engineCoreOutputsToEngineBatch(decoded), EXPECTED_BATCHES[kindOf(v)], `${v.name} twin`);
  }
});

test('detectOutputLayout: which element decides, ambiguous outputs decide nothing, malformed payloads are null', () => {
  const env = (...outputs: string[]) => bytesOf('92' + '00' + (0x90 | outputs.length).toString(16) + outputs.join(''));
  const head9 = 'a161' + '9101' + 'c0'.repeat(7); // request_id, new_token_ids, 7 nils (indices 2..8)
  const prefillMap = '81' + 'b16e756d5f70726f6d70745f746f6b656e73' + '03'; // {num_prompt_tokens: 3}
  const header = (n: number) => (0x90 | n).toString(16);
  const cases: Array<[string, Uint8Array, EngineCoreOutputLayout | null]> = [
    ['short output', env('92a1619101'), null],
    ['all nil from 9 on (13 elements)', env(header(13) + head9 + 'c0c0c0c0'), null],
    ['a map at 9 only', env(header(10) + head9 + '81a174a178'), null],
    ['an empty map at 10', env(header(11) + head9 + 'c0' + '80'), null],
    ['PrefillStats at 10', env(header(11) + head9 + 'c0' + prefillMap), 13],
    ['trace headers at 10', env(header(11) + head9 + 'c0' + '81a174a178'), 16],
    ['an array at 11', env(header(12) + head9 + 'c0c0' + '93a33c6934920101d40301'), 13],
    ['PrefillStats at 11', env(header(12) + head9 + 'c0c0' + prefillMap), 16],
    ['an int at 12', env(header(13) + head9 + 'c0c0c0' + '00'), 13],
    ['an array at 12', env(header(13) + head9 + 'c0c0c0' + '93a33c6934920101d40301'), 16],
    ['14 elements', env('9e' + head9 + 'c0c0c0c0' + '00'), 16],
    ['an ambiguous output, then a deciding one', env('92a1619101', header(13) + head9 + 'c0c0c002'), 13],
  ];
  for (const [what, payload, layout] of cases) {
    assert.equal(detectOutputLayout(payload)?.layout ?? null, layout, what);
    assert.equal(decodeEngineCoreOutputs([payload]).outputs.length > 0, true, `${what}: decodes`);
  }
  assert.match(
    detectOutputLayout(cases[8]![1])!.reason,
    /outputs\[0\]\[12\] is an int \(num_nans_in_logits of the 13-field layout\)/,
  );
  for (const bad of ['', '80', '91', '92' + '00' + 'a178', '92' + '00' + '91' + '9d' + 'a161']) {
    assert.equal(detectOutputLayout(bytesOf(bad)), null, `malformed ${bad}`);
  }
});

test('peekEngineIndex reads element 0 of the envelope without decoding it', () => {
  const cases: Array<[string, number | null]> = [
    ['9801', 1],
    ['9800', 0],
    ['90', 0],
    ['987f', 127],
    ['98cc80', 128],
    ['98cd0101', 257],
    ['98ce00011170', 70000],
    ['dc000801', 1],
    ['dd0000000805', 5],
    ['', null],
    ['80', null],
    ['98ff', null],
    ['98a161', null],
    ['98cd01', null],
    ['98', null],
  ];
  for (const [hex, want] of cases) assert.equal(peekEngineIndex(bytesOf(hex)), want, hex);
  for (const v of outputVectors)
    assert.equal(peekEngineIndex(payloadOf(v)), EXPECTED_BATCHES[kindOf(v)]!.engineIndex, v.name);
});

test('the ready-response vectors decode (3 keys at 9aaf83ef, 4 with dtype at 52a31cce) and name no version', () => {
  assert.equal(readyVectors.length, 2);
  for (const v of readyVectors) {
    exercised.add(v.name);
    const ready = decodeReadyResponse(payloadOf(v));
    const want = v.decoded as { max_model_len: number; num_gpu_blocks: number; dp_stats_address: null; dtype?: string };
    assert.deepEqual(Object.keys(want), v.keys);
    assert.deepEqual(
      [ready.form, ready.maxModelLen, ready.numGpuBlocks, ready.dtype, ready.vllmVersion, ready.notes],
      [
        want.dtype === undefined ? 'short' : 'partial',
        want.max_model_len,
        want.num_gpu_blocks,
        want.dtype ?? null,
        null,
        undefined,
      ],
      v.name,
    );
    assert.equal(outputLayoutOfVersion(ready.vllmVersion), null);
  }
});

test('outputLayoutOfVersion: a setuptools-scm version naming 9aaf83ef or 52a31cce is 13 fields; anything else is left to the shape', () => {
  const cases: Array<[string | null, EngineCoreOutputLayout | null]> = [
    ['0.21.1.dev325+g52a31ccec.d20260527', 13],
    ['0.21.1.dev3+g9aaf83ef', 13],
    ['0.1.dev1+G9AAF83EF502FC37B', 13],
    ['0.22.0', null],
    ['vllm-sim', null],
    ['tokenspeed-0.1.0', null],
    ['0.21.1+g52a31c', null],
    ['0.21.1+g1234567', null],
    ['0.21.1+g52a31ccecxyz', 13],
    ['0.21.1+g52a31ccec5', null],
    ['', null],
    [null, null],
  ];
  for (const [version, layout] of cases)
    assert.equal(outputLayoutOfVersion(version)?.layout ?? null, layout, String(version));
});

test('the protocol decides once per rank, from the version or else the shape, reports it once, and forgets on rejoin', () => {
  const decisions: OutputLayoutDecision[] = [];
  const p = createVllmProtocol({ onOutputLayout: (d) => decisions.push(d) });
  const byKind = (kind: string) => outputVectors.find((v) => kindOf(v) === kind && commitOf(v).startsWith('52a31cce'))!;
  const prefill = payloadOf(byKind('prefill_stats')); // rank 1
  const nans = payloadOf(byKind('num_nans')); // rank 0

  // The real ready responses name no version: both ranks start undecided.
  for (const v of readyVectors) p.noteRankJoined!(1, decodeReadyResponse(payloadOf(v)));
  assert.equal(p.outputLayoutOf(1), undefined);
  assert.equal(decisions.length, 0);

  // Ambiguous outputs (short, or nil from index 9 on) decode and decide nothing.
  const ambiguous = encodeEngineCoreOutputs({
    ...defaultEngineCoreOutputs(),
    engine_index: 1,
    outputs: [defaultEngineCoreOutput('x', [5])],
  });
  assert.equal(p.decodeOutput([ambiguous]).outputs[0]!.newTokenIds[0], 5);
  assert.equal(p.decodeOutput([bytesOf('9201919da1789101' + 'c0'.repeat(11))]).outputs.length, 1);
  assert.equal(p.outputLayoutOf(1), undefined);

  // A deciding message that does not decode decides nothing.
  assert.throws(() => p.decodeOutput([bytesOf(hexOf(prefill) + 'c0')]), WireDecodeError);
  assert.equal(p.outputLayoutOf(1), undefined);

  // The first deciding message: decided from the shape, reported once; the cached tokens reach the row.
  assert.equal(p.decodeOutput([prefill]).outputs[0]!.cachedTokens, 4);
  assert.equal(p.decodeOutput([prefill]).outputs[0]!.cachedTokens, 4);
  assert.equal(p.outputLayoutOf(1), 13);
  assert.deepEqual(
    decisions.map((d) => [d.engineIndex, d.layout, d.source]),
    [[1, 13, 'shape']],
  );
  assert.match(decisions[0]!.reason, /outputs\[0\]\[10\] is a PrefillStats map/);
  assert.equal(p.outputLayoutOf(0), undefined, 'per rank');

  // Rank 0 speaks the 16-field layout: decided from its own outputs.
  assert.equal(p.decodeOutput([twin16(nans)]).outputs[0]!.requestId, 'r-nan');
  assert.deepEqual([p.outputLayoutOf(0), p.outputLayoutOf(1)], [16, 13]);

  // Rejoin with a version naming a known commit: decided at the join, from the ready response.
  const ready = decodeReadyResponse(payloadOf(readyVectors[0]!));
  p.noteRankJoined!(0, { ...ready, vllmVersion: '0.21.1.dev325+g52a31ccec.d20260527' });
  assert.equal(p.outputLayoutOf(0), 13);
  assert.deepEqual(decisions.at(-1), {
    engineIndex: 0,
    layout: 13,
    source: 'ready-response',
    reason: "vllm_version '0.21.1.dev325+g52a31ccec.d20260527' names vLLM commit 52a31cce",
  });
  assert.equal(p.decodeOutput([nans]).outputs[0]!.requestId, 'r-nan');
  // Rejoin without a version: the previous process's layout is forgotten; the new one's shape decides again.
  p.noteRankJoined!(1, ready);
  assert.equal(p.outputLayoutOf(1), undefined);
  assert.equal(p.decodeOutput([twin16(prefill)]).outputs[0]!.cachedTokens, 4);
  assert.equal(p.outputLayoutOf(1), 16);
  assert.deepEqual(
    decisions.map((d) => [d.engineIndex, d.layout, d.source]),
    [
      [1, 13, 'shape'],
      [0, 16, 'shape'],
      [0, 13, 'ready-response'],
      [1, 16, 'shape'],
    ],
  );

  // An engine index no identity can carry is decoded but never remembered (the memory stays bounded).
  const far = bytesOf('98ce00011170' + hexOf(nans).slice(4));
  assert.equal(p.decodeOutput([far]).engineIndex, 70000);
  assert.equal(p.outputLayoutOf(70000), undefined);
  assert.equal(decisions.length, 4);
});

test('every vector file was exercised', () => {
  assert.deepEqual([...exercised].sort(), vectors.map((v) => v.name).sort());
  assert.equal(vectors.length, 8);
  assert.ok(schedulerStatsCodec.type === 'SchedulerStats');
});
