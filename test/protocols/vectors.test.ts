/**
 * Runs EVERY TokenSpeed golden vector (test/vectors/tokenspeed, README.md there; engine-wire.md section 6)
 * through the codecs: valid vectors must decode to exactly `decoded` and re-encode to exactly `hex` (unless the
 * bytes are not what msgspec's encoder would choose, then the test name says "decode only" and why); invalid
 * vectors must be rejected with an error naming the field or the frame problem. One `test()` per vector, and a final
 * test asserting that every vector file was exercised.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { loadTokenSpeedVectors, repoVectorsDir } from '../helpers/vectors.js';
import type { Vector } from '../helpers/vectors.js';
import { RequestType } from '../../src/protocols/types.js';
import type { EngineBatch, EngineLoad, EngineOutput, FinishReason } from '../../src/protocols/types.js';
import { decodeEngineIdentity, encodeEngineIdentity } from '../../src/protocols/identity.js';
import { ENGINE_CORE_DEAD, isEngineCoreDead, parseRequestFrames } from '../../src/protocols/frames.js';
import {
  assertInitAddresses,
  decodeHandshakeInit,
  decodeReadyMessage,
  decodeReadyResponse,
  encodeHandshakeInit,
  encodeReadyMessage,
  encodeReadyResponse,
} from '../../src/protocols/handshake.js';
import {
  batchTokenIdOutSlimCodec,
  decodeAbortPayload,
  decodeBatchTokenIDOutSlim,
  decodeTokenizedGenerateReqInput,
  encodeAbortPayload,
  encodeBatchTokenIDOutSlim,
  encodeTokenizedGenerateReqInput,
  engineAdmissionError,
  samplingParamsCodec,
  tokenizedGenerateReqInputCodec,
  tokenspeedProtocol,
} from '../../src/protocols/tokenspeed/index.js';
import { WireDecodeError } from '../../src/wire/errors.js';

const vectors = loadTokenSpeedVectors();
const exercised = new Set<string>();

const bytesOf = (hex: string): Uint8Array => Uint8Array.from(Buffer.from(hex, 'hex'));
const hexOf = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');

/** The README's JSON conventions → JS values: $bigint → bigint, $float → NaN/±Infinity, $bytes → Uint8Array. */
function fromJson(x: unknown): unknown {
  if (Array.isArray(x)) return x.map(fromJson);
  if (x !== null && typeof x === 'object') {
    const o = x as Record<string, unknown>;
    if (typeof o.$bigint === 'string') return BigInt(o.$bigint);
    if (typeof o.$float === 'string') {
      return ({ nan: NaN, inf: Infinity, '-inf': -Infinity } as Record<string, number>)[o.$float];
    }
    if (typeof o.$bytes === 'string') return bytesOf(o.$bytes);
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(o)) out[k] = fromJson(v);
    return out;
  }
  return x;
}

/** Struct defaults as the spec's tables state them (engine-wire.md 4.2, 4.4, 4.8): independent of the codecs. */
/** The layout part of a positional codec (tag and field names, in wire order). */
interface Layout {
  readonly tag: string | undefined;
  readonly fields: readonly { readonly name: PropertyKey }[];
}

const REQUEST_DEFAULTS: Record<string, unknown> = {
  rid: null,
  http_worker_ipc: null,
  input_text: null,
  input_ids: null,
  return_logprob: false,
  logprob_start_len: -1,
  top_logprobs_num: 0,
  token_ids_logprob: null,
  stream: false,
  input_embeds: null,
  session_params: null,
  custom_logit_processor: null,
  return_hidden_states: false,
  created_time: 0,
  bootstrap_host: null,
  bootstrap_port: null,
  bootstrap_room: null,
  input_multi_ids: null,
  input_extra_infos: null,
  input_ids_unpadded: null,
  multimodal_inputs: null,
  validation_error: null,
  data_parallel_rank: null,
};
const SAMPLING_DEFAULTS: Record<string, unknown> = {
  max_new_tokens: null,
  stop: null,
  stop_token_ids: null,
  temperature: 1,
  top_p: 1,
  top_k: -1,
  min_p: 0,
  frequency_penalty: 0,
  presence_penalty: 0,
  repetition_penalty: 1,
  min_new_tokens: 0,
  json_schema: null,
  regex: null,
  ebnf: null,
  structural_tag: null,
  ignore_eos: false,
  skip_special_tokens: true,
  spaces_between_special_tokens: true,
  no_stop_trim: false,
  thinking_budget: null,
  custom_params: null,
  stream_interval: null,
  logit_bias: null,
  seed: null,
  logprobs: null,
  n: 1,
  stop_strs: null,
  stop_str_max_len: 0,
  is_normalized: false,
};
const SLIM_DEFAULTS: Record<string, unknown> = {
  engine_index: 0,
  num_running: 0,
  num_waiting: 0,
  kv_active_pages: 0,
  kv_total_pages: 0,
};

/**
 * Checks a decoded positional struct against a vector's `decoded` object: every listed field equal, every
 * unlisted field at its spec default, and `_extra_<i>` elements beyond the struct's fields dropped. `_extra_<i>`
 * inside the struct's field range (the newer 25th request element) is compared with the field at that position.
 * Returns the element count the vector's array had (for re-encoding in the same form).
 */
function expectPositional(
  actual: Record<string, unknown>,
  expected: Record<string, unknown>,
  codec: Layout,
  defaults: Record<string, unknown>,
  path: string,
  nested: Record<string, (a: unknown, e: unknown, p: string) => void> = {},
): number {
  const offset = codec.tag === undefined ? 0 : 1;
  const names = codec.fields.map((f) => f.name as string);
  assert.deepEqual(Object.keys(actual), names, `${path}: decoded keys are the struct's fields in wire order`);
  const seen = new Set<string>();
  let elements = 0;
  for (const [key, value] of Object.entries(expected)) {
    elements++;
    if (key === '_tag') {
      assert.equal(value, codec.tag, `${path}._tag`);
      continue;
    }
    let name = key;
    const extra = /^_extra_(\d+)$/.exec(key);
    if (extra !== null) {
      const index = Number(extra[1]) - offset;
      if (index >= names.length) {
        elements--; // an unknown trailing element: drained, not re-encodable
        continue;
      }
      name = names[index];
    }
    seen.add(name);
    const check = nested[name];
    if (check !== undefined) check(actual[name], value, `${path}.${name}`);
    else assert.deepStrictEqual(actual[name], fromJson(value), `${path}.${name}`);
  }
  for (const name of names) {
    if (!seen.has(name)) assert.deepStrictEqual(actual[name], defaults[name], `${path}.${name} (absent → default)`);
  }
  return elements;
}

function expectRequest(actual: unknown, expected: unknown): { length: number; samplingLength: number } {
  let samplingLength = 0;
  const length = expectPositional(
    actual as Record<string, unknown>,
    expected as Record<string, unknown>,
    tokenizedGenerateReqInputCodec,
    REQUEST_DEFAULTS,
    'TokenizedGenerateReqInput',
    {
      sampling_params: (a, e, p) => {
        samplingLength = expectPositional(
          a as Record<string, unknown>,
          e as Record<string, unknown>,
          samplingParamsCodec,
          SAMPLING_DEFAULTS,
          p,
        );
      },
    },
  );
  return { length, samplingLength };
}

/** The EngineBatch a batch's logical value must give (engine-wire.md 4.8-4.9), computed from the vector's JSON. */
function expectedEngineBatch(d: Record<string, unknown>): EngineBatch {
  const col = <T>(k: string) => fromJson(d[k]) as T[];
  const rids = col<string>('rids');
  const reasons = col<string>('finished_reasons');
  const outputs: EngineOutput[] = rids.map((rid, i) => ({
    requestId: rid,
    newTokenIds: col<number[]>('output_ids')[i],
    finishReason: reasons[i] === '' ? null : (reasons[i] as FinishReason),
    promptTokens: col<number>('prompt_tokens')[i],
    completionTokens: col<number>('completion_tokens')[i],
    cachedTokens: col<number>('cached_tokens')[i],
    logprobs: col<number[]>('output_token_logprobs_val')[i],
  }));
  const batch: EngineBatch = {
    engineIndex: (d.engine_index as number | undefined) ?? 0,
    outputs,
    finishedRequestIds: rids.filter((_, i) => reasons[i] !== ''),
  };
  const total = (d.kv_total_pages as number | undefined) ?? 0;
  if (total > 0) {
    const load: EngineLoad = {
      numRunning: d.num_running as number,
      numWaiting: d.num_waiting as number,
      kvCacheUsage: (d.kv_active_pages as number) / total,
      runningIncludesWaiting: true, // TokenSpeed's num_running counts the waiting requests too (engine-wire.md 4.9)
    };
    batch.load = load;
  }
  return batch;
}

/** Valid vectors whose bytes are not what msgspec's encoder (and ours) would write: decode is checked, not re-encode. */
const DECODE_ONLY: Record<string, string> = {
  gw_req_float32_nonminimal_ints: 'float32 temperature and non-minimal uint32/uint16 ints',
  gw_req_sampling_prefix4: 'temperature sent as the integer 1 for a float field',
  gw_req_sampling_30_extra_trailing: 'the unknown 30th SamplingParams element is drained',
  out_slim15_extra_trailing: 'the unknown 15th element is drained',
  hs_init_minimal: 'a sparse INIT map; the gateway writes the full msgspec form',
  hs_init_unknown_keys: 'unknown keys are ignored; the gateway writes the full msgspec form',
};

/** What each invalid vector's error message must say (the field path or the frame problem). */
const INVALID_ERRORS: Record<string, RegExp> = {
  inv_abort_bare_string: /^AbortPayload: expected array, got str$/,
  inv_abort_int_rid: /^AbortPayload\[0\]: expected str, got int$/,
  inv_abort_map: /^AbortPayload: expected array, got map$/,
  inv_abort_tagged_abortreq: /^AbortPayload\[2\]: expected str, got nil$/,
  inv_frames_single_frame: /^request frames: need at least 2 frames \(type, payload\), got 1$/,
  inv_frames_two_byte_type: /^request frames: type frame must be exactly 1 byte, got 2 bytes \(0000\)$/,
  inv_frames_unknown_type_byte: /^request frames: unknown request type byte 0x09$/,
  inv_hs_init_empty_inputs: /^WireHandshakeInitMessage\.addresses\.inputs: empty/,
  inv_hs_init_inputs_string: /^WireHandshakeInitMessage\.addresses\.inputs: expected array, got str$/,
  inv_hs_init_no_addresses: /^WireHandshakeInitMessage: missing required key 'addresses'$/,
  inv_req_bin_rid: /^TokenizedGenerateReqInput\.rid: expected str \| array \| null, got bin$/,
  inv_req_bool_token: /^TokenizedGenerateReqInput\.input_ids\[0\]: expected int, got bool$/,
  inv_req_float_max_new_tokens:
    /^TokenizedGenerateReqInput\.sampling_params\.max_new_tokens: expected int \| null, got float64$/,
  inv_req_map_form: /^TokenizedGenerateReqInput: expected array, got map$/,
  inv_req_missing_sampling_params:
    /^TokenizedGenerateReqInput: expected array of at least length 6, got 5 \(required field sampling_params missing\)$/,
  inv_req_rid_int: /^TokenizedGenerateReqInput\.rid: expected str \| array \| null, got int$/,
  inv_req_stream_int: /^TokenizedGenerateReqInput\.stream: expected bool, got int$/,
  inv_req_tagged_sampling_params:
    /^TokenizedGenerateReqInput\.sampling_params\.max_new_tokens: expected int \| null, got str$/,
  inv_req_token_string: /^TokenizedGenerateReqInput\.input_ids\[0\]: expected int, got str$/,
  inv_req_trailing_bytes:
    /^TokenizedGenerateReqInput: trailing characters: 1 byte\(s\) after the top-level value at offset 38$/,
  inv_req_truncated: /^TokenizedGenerateReqInput\.input_ids: input data was truncated/,
  inv_req_untagged: /^TokenizedGenerateReqInput\._tag: invalid tag 'bad' \(expected 'TokenizedGenerateReqInput'\)$/,
  inv_req_wrong_tag: /^TokenizedGenerateReqInput\._tag: invalid tag 'TokenizedGenerateReqInputX'/,
  inv_slim_8_elements: /^BatchTokenIDOutSlim: expected array of at least length 9, got 8/,
  inv_slim_engine_index_string: /^BatchTokenIDOutSlim\.engine_index: expected int, got str$/,
  inv_slim_float_token: /^BatchTokenIDOutSlim\.output_ids\[0\]\[0\]: expected int, got float64$/,
  inv_slim_null_finish: /^BatchTokenIDOutSlim\.finished_reasons\[0\]: expected str, got nil$/,
  inv_slim_ragged_columns: /^BatchTokenIDOutSlim\.output_ids: ragged columns: column has 1 entries but rids has 2$/,
  inv_slim_truncated: /^BatchTokenIDOutSlim\.kv_total_pages: input data was truncated/,
  inv_slim_wrong_tag: /^BatchTokenIDOutSlim\._tag: invalid tag 'BatchTokenIDOut' \(expected 'BatchTokenIDOutSlim'\)$/,
};

const rejectsWith = (fn: () => unknown, pattern: RegExp, errorClass: new (...a: never[]) => Error = WireDecodeError) =>
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof errorClass, `expected ${errorClass.name}, got ${String(err)}`);
    assert.match((err as Error).message, pattern);
    return true;
  });

/** Checks a request/abort vector's frames_hex: `[type, payload]` as the engine's DEALER sees it. */
function checkRequestFrames(v: Vector, type: number): void {
  const frames = (v.frames_hex ?? []).map(bytesOf);
  if (frames.length < 2) return; // payload-only vectors (hand-made invalid payloads)
  const parsed = parseRequestFrames(frames);
  assert.equal(parsed.type, type, 'type byte');
  assert.equal(hexOf(parsed.payload), v.hex, 'frame 1 is the payload');
  assert.deepEqual(parsed.aux, []);
}

function kindHandler(v: Vector): { title: string; run: () => void } {
  const bytes = bytesOf(v.hex ?? '');
  const invalid = v.error !== undefined;
  const decodeOnly = DECODE_ONLY[v.name];
  const validTitle =
    decodeOnly === undefined
      ? 'decodes to `decoded` and re-encodes to `hex`'
      : `decodes to \`decoded\` (decode only: ${decodeOnly})`;
  const pattern = INVALID_ERRORS[v.name];
  if (invalid && pattern === undefined) throw new Error(`no expected error pattern for invalid vector ${v.name}`);
  const invalidTitle = `is rejected (${v.error})`;

  switch (v.kind) {
    case 'TokenizedGenerateReqInput':
      if (invalid) {
        return { title: invalidTitle, run: () => rejectsWith(() => decodeTokenizedGenerateReqInput(bytes), pattern) };
      }
      return {
        title: validTitle,
        run: () => {
          checkRequestFrames(v, RequestType.ADD);
          const req = decodeTokenizedGenerateReqInput(bytes);
          const { length, samplingLength } = expectRequest(req, v.decoded);
          if (decodeOnly === undefined) {
            assert.equal(
              hexOf(encodeTokenizedGenerateReqInput(req, { form: length, samplingParamsLength: samplingLength })),
              v.hex,
            );
          }
          // The engine's admission decision (4.5-4.6) for this request, as the vector's verified outcome says.
          const verified = v.verified as
            | { engine_outcome?: string; recv_socket_config?: Record<string, unknown> }
            | undefined;
          if (verified?.engine_outcome !== undefined) {
            const config = verified.recv_socket_config ?? {};
            const error = engineAdmissionError(req, {
              vocabSize: config.vocab_size as number,
              enableOutputLogprobs: config.enable_output_logprobs as boolean,
            });
            const aborted = verified.engine_outcome === 'terminal_abort' || v.handler_outcome === 'terminal_abort';
            assert.equal(error !== null, aborted, `admission: ${String(error)}`);
          }
        },
      };
    case 'BatchTokenIDOutSlim':
      if (invalid) {
        return {
          title: invalidTitle,
          run: () => {
            rejectsWith(() => decodeBatchTokenIDOutSlim(bytes), pattern);
            rejectsWith(() => tokenspeedProtocol.decodeOutput([bytes]), pattern);
          },
        };
      }
      return {
        title: `${validTitle}, and gives the expected EngineBatch`,
        run: () => {
          const frames = (v.frames_hex ?? []).map(bytesOf);
          assert.equal(frames.length, 1);
          const batch = decodeBatchTokenIDOutSlim(frames[0]);
          const length = expectPositional(
            batch as unknown as Record<string, unknown>,
            v.decoded as Record<string, unknown>,
            batchTokenIdOutSlimCodec,
            SLIM_DEFAULTS,
            'BatchTokenIDOutSlim',
          );
          assert.equal(`${length}-element`, v.form === '15-element' ? '14-element' : v.form);
          if (decodeOnly === undefined) {
            assert.equal(hexOf(encodeBatchTokenIDOutSlim(batch, { form: length as 9 | 10 | 14 })), v.hex);
          }
          assert.deepStrictEqual(
            tokenspeedProtocol.decodeOutput(frames),
            expectedEngineBatch(fromJson(v.decoded) as Record<string, unknown>),
          );
        },
      };
    case 'AbortPayload':
      if (invalid) {
        return {
          title: invalidTitle,
          run: () => {
            checkRequestFrames(v, RequestType.ABORT);
            rejectsWith(() => decodeAbortPayload(bytes), pattern);
          },
        };
      }
      return {
        title: validTitle,
        run: () => {
          checkRequestFrames(v, RequestType.ABORT);
          const rids = decodeAbortPayload(bytes);
          assert.deepStrictEqual(rids, fromJson(v.decoded));
          assert.equal(hexOf(encodeAbortPayload(rids)), v.hex);
          assert.equal(hexOf(tokenspeedProtocol.encodeAbort(rids)), v.hex);
        },
      };
    case 'WireReadyMessage':
      return {
        title: validTitle,
        run: () => {
          const d = v.decoded as Record<string, unknown>;
          const m = decodeReadyMessage(bytes);
          assert.deepStrictEqual(m, {
            status: d.status,
            local: d.local,
            headless: d.headless,
            parallelConfigHash: d.parallel_config_hash,
          });
          assert.equal(hexOf(encodeReadyMessage(m)), v.hex);
        },
      };
    case 'WireHandshakeInitMessage':
      if (invalid && v.accepted_by_msgspec !== true) {
        return { title: invalidTitle, run: () => rejectsWith(() => decodeHandshakeInit(bytes), pattern) };
      }
      return {
        title: invalid ? `decodes (msgspec accepts it) but is refused by assertInitAddresses (${v.error})` : validTitle,
        run: () => {
          const d = v.decoded as { addresses: Record<string, unknown>; parallel_config?: Record<string, unknown> };
          const init = decodeHandshakeInit(bytes);
          assert.deepStrictEqual(init, {
            inputs: d.addresses.inputs,
            outputs: d.addresses.outputs,
            coordinatorInput: d.addresses.coordinator_input ?? null,
            coordinatorOutput: d.addresses.coordinator_output ?? null,
            frontendStatsPublishAddress: d.addresses.frontend_stats_publish_address ?? null,
            parallelConfig: d.parallel_config ?? {},
          });
          if (invalid) {
            rejectsWith(() => assertInitAddresses(init), pattern);
            return;
          }
          assert.doesNotThrow(() => assertInitAddresses(init));
          if (decodeOnly === undefined) assert.equal(hexOf(encodeHandshakeInit(init)), v.hex);
        },
      };
    case 'WireEngineCoreReadyResponse':
      return {
        title: validTitle,
        run: () => {
          const d = v.decoded as Record<string, unknown>;
          const r = decodeReadyResponse(bytes);
          // TokenSpeed sends the long form (engine-wire.md 2.5); the issue #14 decoder must keep decoding it exactly.
          assert.deepStrictEqual(r, {
            form: 'long',
            maxModelLen: d.max_model_len,
            numGpuBlocks: d.num_gpu_blocks,
            prefixGranularity: d.prefix_granularity,
            dtype: d.dtype,
            vllmVersion: d.vllm_version,
            worldSize: d.world_size,
            dataParallelSize: d.data_parallel_size,
            tensorParallelSize: d.tensor_parallel_size,
            pipelineParallelSize: d.pipeline_parallel_size,
            decodeContextParallelSize: d.decode_context_parallel_size,
            dataParallelRank: d.data_parallel_rank,
            maxNumSeqs: d.max_num_seqs,
            maxNumBatchedTokens: d.max_num_batched_tokens,
            instanceId: d.instance_id,
            kvCacheSizeTokens: d.kv_cache_size_tokens,
            kvCacheMaxConcurrency: d.kv_cache_max_concurrency,
          });
          // The three keys ReadyResponse does not carry are nil in these vectors, so the re-encode is exact.
          assert.equal(d.dp_stats_address, null);
          assert.equal(d.multimodal_encoder_dtype, null);
          assert.equal(d.kv_events_config, null);
          assert.equal(hexOf(encodeReadyResponse(r)), v.hex);
        },
      };
    case 'EngineIdentity':
      return {
        title: 'encodes and decodes the 2-byte little-endian identity',
        run: () => {
          const index = (v.decoded as { engine_index: number }).engine_index;
          assert.deepEqual(v.frames_hex, [v.hex]);
          assert.equal(hexOf(encodeEngineIdentity(index)), v.hex);
          assert.equal(decodeEngineIdentity(bytes), index);
        },
      };
    case 'RequestTypeBytes':
      return {
        title: 'type bytes match RequestType and parse as request frames',
        run: () => {
          const d = v.decoded as Record<string, string>;
          assert.deepEqual(Object.keys(d).sort(), ['ABORT', 'ADD']);
          assert.equal(hexOf(Uint8Array.of(RequestType.ADD)), d.ADD);
          assert.equal(hexOf(Uint8Array.of(RequestType.ABORT)), d.ABORT);
          assert.equal(v.hex, (v.frames_hex ?? []).join(''));
          for (const typeHex of v.frames_hex ?? []) {
            const parsed = parseRequestFrames([bytesOf(typeHex), Uint8Array.of(0x90)]);
            assert.equal(parsed.type, parseInt(typeHex, 16));
          }
        },
      };
    case 'RequestFrames':
      return {
        title: invalidTitle,
        run: () => rejectsWith(() => parseRequestFrames((v.frames_hex ?? []).map(bytesOf)), pattern),
      };
    case 'EngineCoreDead':
      return {
        title: 'is the raw 16-byte sentinel, recognized before msgpack decoding',
        run: () => {
          const d = v.decoded as { $bytes: string; ascii: string };
          assert.equal(hexOf(ENGINE_CORE_DEAD), v.hex);
          assert.equal(d.$bytes, v.hex);
          assert.equal(Buffer.from(ENGINE_CORE_DEAD).toString('ascii'), d.ascii);
          assert.deepEqual(v.frames_hex, [v.hex]);
          assert.equal(isEngineCoreDead(bytes), true);
          // Fed to the msgpack decoder it would be fixint 69 + garbage: it must be caught before decoding.
          rejectsWith(() => tokenspeedProtocol.decodeOutput([bytes]), /^BatchTokenIDOutSlim: expected array, got int$/);
        },
      };
    default:
      throw new Error(`unhandled vector kind ${v.kind} (${v.name})`);
  }
}

for (const v of vectors) {
  const { title, run } = kindHandler(v);
  test(`${v.name}: ${title}`, () => {
    exercised.add(v.name);
    run();
  });
}

test('every vector file was exercised, and every table entry names a real vector', () => {
  const dir = repoVectorsDir('tokenspeed');
  const files = readdirSync(dir)
    .filter((f) => f.endsWith('.json') && f !== 'index.json')
    .map((f) => f.slice(0, -5));
  const index = JSON.parse(readFileSync(join(dir, 'index.json'), 'utf8')) as {
    count: number;
    vectors: { name: string }[];
  };
  assert.equal(files.length, index.count);
  assert.deepEqual([...files].sort(), index.vectors.map((x) => x.name).sort());
  assert.deepEqual([...exercised].sort(), [...files].sort());
  const names = new Set(files);
  for (const n of [...Object.keys(DECODE_ONLY), ...Object.keys(INVALID_ERRORS)]) assert.ok(names.has(n), n);
  assert.equal(Object.keys(INVALID_ERRORS).length, vectors.filter((v) => v.error !== undefined).length);
});
