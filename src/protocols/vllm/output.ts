/**
 * vLLM's output message (engine-wire.md 5.8-5.11; vLLM `v1/engine/__init__.py`, SMG `protocol/vllm/*.rs`, SMG PR
 * #2175): the `EngineCoreOutputs` envelope and its `EngineCoreOutput`s, both untagged positional arrays,
 * trailing-tolerant (absent trailing fields default, extra ones are drained). Frame 0 is the payload; frames 1.. are
 * aux frames referenced by tensors (5.6, 1.6).
 *
 * `EngineCoreOutput` has two layouts in the world (docs/wire/vllm-output.md): the **13-field** one of vLLM 9aaf83ef and
 * 52a31cce (`trace_headers` 9, `prefill_stats` 10, `routed_experts` 11, `num_nans_in_logits` 12) and the **16-field**
 * one of SMG's decoder and engine-wire.md 5.9 (`ec_transfer_params` 9, so every later field one further on, plus
 * `mm_cache_miss_hashes` 14 and `new_sampling_mask` 15). The codecs are built per layout; `detectOutputLayout` reads
 * which one a payload shows (the protocol remembers it per rank, layout.ts).
 *
 * Envelope classification (5.8, SMG): *payload* = `outputs` non-empty, or `scheduler_stats` present, or
 * `finished_requests` present. Request batch = payload and no utility and no wave field; utility reply = utility
 * only; wave complete / start wave = that field only. Anything else (mixed shapes, an entirely empty envelope) is a
 * decode error: an empty envelope is not a heartbeat.
 */
import type { EngineBatch, EngineOutputRow, FinishReason, WaveEvent } from '../types.js';
import {
  anyValue,
  decodeMessage,
  float,
  int,
  list,
  namedMap,
  nullable,
  positional,
  str,
  wireEqual,
} from '../../wire/codec.js';
import type { Codec, FieldSpec, PositionalCodec } from '../../wire/codec.js';
import { WireDecodeError, WireEncodeError } from '../../wire/errors.js';
import { MsgpackReader } from '../../wire/reader.js';
import type { WireInt } from '../../wire/reader.js';
import { MsgpackWriter } from '../../wire/writer.js';
import { loadFromSchedulerStats, loraAdaptersOf, schedulerStatsCodec } from './stats.js';
import { utilityReplyOf } from './utility.js';
import type { SchedulerStats } from './stats.js';
import { candidateLogprobs, logprobsCodec, ndArrayCodec, sampledLogprobs } from './tensors.js';
import { pooledVector } from './pooling.js';
import type { TensorFrames, VllmLogprobs, WireNdArray } from './tensors.js';

/** `stop_reason`: the matched stop token id (int), the matched stop string (str), or null. */
export type StopReason = WireInt | string | null;

/** Codec of `stop_reason`: nil, any integer, or str. */
export const stopReasonCodec: Codec<StopReason> = {
  type: 'int | str | null',
  decode(r, path) {
    const kind = r.peekKind(path);
    if (kind === 'nil') {
      r.pos++;
      return null;
    }
    if (kind === 'int') return r.readInt(path);
    if (kind === 'str') return r.readStr(path);
    throw new WireDecodeError(path, `expected int | str | null, got ${kind}`);
  },
  encode(w, v, path) {
    if (v === null || v === undefined) w.writeNil();
    else if (typeof v === 'string') w.writeStr(v, path);
    else w.writeInt(v, path);
  },
};

/** Wire values of `finish_reason` (engine-wire.md 5.11). */
export const VllmFinishReason = Object.freeze({ STOP: 0, LENGTH: 1, ABORT: 2, ERROR: 3, REPETITION: 4 } as const);

/** Codec of `finish_reason` (nullable): only 0..4 decode; any other integer is a WireDecodeError. */
export const finishReasonCodec: Codec<WireInt | null> = {
  type: 'int | null',
  decode(r, path) {
    if (r.peekIsNil(path)) {
      r.pos++;
      return null;
    }
    const v = r.readInt(path, 'int | null');
    if (!(v >= 0 && v <= 4)) throw new WireDecodeError(path, `unknown finish reason ${v} (expected 0..4)`);
    return v;
  },
  encode: (w, v, path) => nullable(int).encode(w, v, path),
};

/**
 * Maps a wire finish reason (5.11) onto the seam's: 0 stop → `stop`, 1 → `length`, 2 → `abort`, 3 → `error` (the
 * engine failed the request: a stream error, not a finish), 4 repetition → `stop`; null → null (running).
 * Throws WireDecodeError for any other value.
 */
export function toFinishReason(code: WireInt | null, path = 'EngineCoreOutput.finish_reason'): FinishReason | null {
  if (code === null) return null;
  switch (Number(code)) {
    case 0:
    case 4:
      return 'stop';
    case 1:
      return 'length';
    case 2:
      return 'abort';
    case 3:
      return 'error';
    default:
      throw new WireDecodeError(path, `unknown finish reason ${code} (expected 0..4)`);
  }
}

/** One `events` entry: type 1 queued, 2 scheduled, 3 preempted; timestamp in seconds. */
export interface EngineCoreEvent {
  type: WireInt;
  timestamp: number;
}

const engineCoreEventCodec = namedMap<EngineCoreEvent>({
  name: 'EngineCoreEvent',
  fields: [
    { name: 'type', codec: int },
    { name: 'timestamp', codec: float },
  ],
});

/**
 * The field count of an `EngineCoreOutput` layout (docs/wire/vllm-output.md):
 * - `13`: vLLM 9aaf83ef and 52a31cce (`vllm/v1/engine/__init__.py`): `trace_headers` 9, `prefill_stats` 10,
 *   `routed_experts` 11, `num_nans_in_logits` 12; no `ec_transfer_params`;
 * - `16`: SMG's decoder (`protocol/vllm/output.rs`) and engine-wire.md 5.9: `ec_transfer_params` 9, `trace_headers`
 *   10, `prefill_stats` 11, `routed_experts` 12, `num_nans_in_logits` 13, `mm_cache_miss_hashes` 14,
 *   `new_sampling_mask` 15.
 * Indices 0..8 are the same in both.
 */
export type EngineCoreOutputLayout = 13 | 16;

/** Both layouts, the real vLLM one first. */
export const ENGINE_CORE_OUTPUT_LAYOUTS: readonly EngineCoreOutputLayout[] = Object.freeze([13, 16]);

/**
 * `prefill_stats` (5.9): token counts of the prefill just scheduled; every key defaults to 0. vLLM 9aaf83ef /
 * 52a31cce send the first five keys (the golden vectors); `num_cache_creation_tokens` belongs to the 16-field
 * layout's PrefillStats only (absent when decoded in the 13-field layout).
 */
export interface PrefillStats {
  num_prompt_tokens: WireInt;
  num_computed_tokens: WireInt;
  num_cached_tokens: WireInt;
  num_local_cached_tokens: WireInt;
  num_external_cached_tokens: WireInt;
  num_cache_creation_tokens?: WireInt;
}

const PREFILL_STATS_KEYS_13 = [
  'num_prompt_tokens',
  'num_computed_tokens',
  'num_cached_tokens',
  'num_local_cached_tokens',
  'num_external_cached_tokens',
] as const;

/** `prefill_stats` codec of the 16-field layout (named map, six keys). */
export const prefillStatsCodec = namedMap<PrefillStats>({
  name: 'PrefillStats',
  fields: [
    ...PREFILL_STATS_KEYS_13.map((name) => ({ name, codec: int, dflt: () => 0 })),
    { name: 'num_cache_creation_tokens', codec: int, dflt: () => 0 },
  ],
});

const prefillStats13Map = namedMap<PrefillStats>({
  name: 'PrefillStats',
  fields: PREFILL_STATS_KEYS_13.map((name) => ({ name, codec: int, dflt: () => 0 })),
});

/**
 * `prefill_stats` codec of the 13-field layout: the five keys vLLM 9aaf83ef / 52a31cce send. Encoding refuses a
 * non-zero `num_cache_creation_tokens` (that layout cannot carry it) instead of dropping it.
 */
export const prefillStats13Codec: Codec<PrefillStats> = {
  type: 'PrefillStats',
  decode: (r, path, expected) => prefillStats13Map.decode(r, path, expected),
  encode(w, v, path) {
    const extra = v?.num_cache_creation_tokens;
    if (extra !== undefined && !wireEqual(extra, 0)) {
      throw new WireEncodeError(
        `${path}.num_cache_creation_tokens`,
        "the 13-field layout's PrefillStats has no such key",
      );
    }
    prefillStats13Map.encode(w, v, path);
  },
};

/** The `prefill_stats` codec of `layout`. */
export function prefillStatsCodecFor(layout: EngineCoreOutputLayout): Codec<PrefillStats> {
  return layout === 13 ? prefillStats13Codec : prefillStatsCodec;
}

/**
 * One per-request output, upstream names, the fields of both layouts (docs/wire/vllm-output.md). A decoded output
 * holds exactly the fields of the layout it was decoded in, in its wire order: the three 16-field-only fields are
 * absent from a 13-field output.
 */
export interface EngineCoreOutput {
  request_id: string;
  /** New token ids this step (not cumulative). */
  new_token_ids: WireInt[];
  new_logprobs: VllmLogprobs | null;
  new_prompt_logprobs_tensors: VllmLogprobs | null;
  /** 4: the pooled tensor of a pooling request's terminal output (pooling.ts), else nil. */
  pooling_output: WireNdArray | null;
  /** 0 stop, 1 length, 2 abort, 3 error, 4 repetition; non-null ⇔ terminal. */
  finish_reason: WireInt | null;
  stop_reason: StopReason;
  events: EngineCoreEvent[] | null;
  kv_transfer_params: unknown;
  /** 16-field layout only (index 9). */
  ec_transfer_params?: unknown;
  trace_headers: unknown;
  /** Present on the first output after a new prefill is scheduled (the engine's prompt and cached-token counts). */
  prefill_stats: PrefillStats | null;
  /** 13-field layout: a `WireNdArray` (vLLM declares `np.ndarray | None`; int32); 16-field: as sent (opaque). */
  routed_experts: WireNdArray | unknown;
  num_nans_in_logits: WireInt;
  /** 16-field layout only (index 14). */
  mm_cache_miss_hashes?: string[] | null;
  /** 16-field layout only (index 15). */
  new_sampling_mask?: unknown;
}

/** The envelope, wire order, upstream names (engine-wire.md 5.8). Every field has a default. */
export interface EngineCoreOutputs {
  /** The producing rank. */
  engine_index: WireInt;
  outputs: EngineCoreOutput[];
  scheduler_stats: SchedulerStats | null;
  /** Seconds (float). */
  timestamp: number;
  utility_output: unknown;
  /** A set: ids the engine considers finished (retired even without a terminal output). */
  finished_requests: string[] | null;
  wave_complete: WireInt | null;
  start_wave: WireInt | null;
}

/** The fields only the 16-field layout has: a 13-field encode refuses a non-default value in any of them. */
const SIXTEEN_FIELD_ONLY = ['ec_transfer_params', 'mm_cache_miss_hashes', 'new_sampling_mask'] as const;

/**
 * The positional codecs of one message in `layout` (default 13, vLLM's), built per message when it has aux frames
 * (tensors need them). Field types follow each layout's source: in the 13-field layout `routed_experts` is an ndarray
 * (vLLM's declaration), in the 16-field layout it is opaque (SMG's).
 */
export function engineCoreOutputCodecs(
  frames: TensorFrames,
  layout: EngineCoreOutputLayout = 13,
): {
  output: PositionalCodec<EngineCoreOutput>;
  outputs: PositionalCodec<EngineCoreOutputs>;
} {
  const lp = nullable(logprobsCodec(frames));
  type Field = FieldSpec<EngineCoreOutput>;
  const head: Field[] = [
    { name: 'request_id', codec: str },
    { name: 'new_token_ids', codec: list(int) },
    { name: 'new_logprobs', codec: lp, dflt: () => null },
    { name: 'new_prompt_logprobs_tensors', codec: lp, dflt: () => null },
    { name: 'pooling_output', codec: nullable(ndArrayCodec(frames)), dflt: () => null },
    { name: 'finish_reason', codec: finishReasonCodec, dflt: () => null },
    { name: 'stop_reason', codec: stopReasonCodec, dflt: () => null },
    { name: 'events', codec: nullable(list(engineCoreEventCodec)), dflt: () => null },
    { name: 'kv_transfer_params', codec: anyValue, dflt: () => null },
  ];
  const tail: Field[] =
    layout === 13
      ? [
          { name: 'trace_headers', codec: anyValue, dflt: () => null },
          { name: 'prefill_stats', codec: nullable(prefillStats13Codec), dflt: () => null },
          { name: 'routed_experts', codec: nullable(ndArrayCodec(frames)), dflt: () => null },
          { name: 'num_nans_in_logits', codec: int, dflt: () => 0 },
        ]
      : [
          { name: 'ec_transfer_params', codec: anyValue, dflt: () => null },
          { name: 'trace_headers', codec: anyValue, dflt: () => null },
          { name: 'prefill_stats', codec: nullable(prefillStatsCodec), dflt: () => null },
          { name: 'routed_experts', codec: anyValue, dflt: () => null },
          { name: 'num_nans_in_logits', codec: int, dflt: () => 0 },
          { name: 'mm_cache_miss_hashes', codec: nullable(list(str)), dflt: () => null },
          { name: 'new_sampling_mask', codec: anyValue, dflt: () => null },
        ];
  const output = positional<EngineCoreOutput>({ name: 'EngineCoreOutput', fields: [...head, ...tail] });
  const outputs = positional<EngineCoreOutputs>({
    name: 'EngineCoreOutputs',
    fields: [
      { name: 'engine_index', codec: int, dflt: () => 0 },
      { name: 'outputs', codec: list(output), dflt: () => [] },
      { name: 'scheduler_stats', codec: nullable(schedulerStatsCodec), dflt: () => null },
      { name: 'timestamp', codec: float, dflt: () => 0.0 },
      { name: 'utility_output', codec: anyValue, dflt: () => null },
      { name: 'finished_requests', codec: nullable(list(str)), dflt: () => null },
      { name: 'wave_complete', codec: nullable(int), dflt: () => null },
      { name: 'start_wave', codec: nullable(int), dflt: () => null },
    ],
  });
  return { output, outputs };
}

/**
 * A fresh `EngineCoreOutput` for `requestId` with every optional field at its default, with the fields of `layout`
 * (default 16: the union, so it encodes in either layout; 13: exactly what a 13-field decode gives).
 */
export function defaultEngineCoreOutput(
  requestId: string,
  newTokenIds: WireInt[] = [],
  layout: EngineCoreOutputLayout = 16,
): EngineCoreOutput {
  const full: EngineCoreOutput = {
    request_id: requestId,
    new_token_ids: newTokenIds,
    new_logprobs: null,
    new_prompt_logprobs_tensors: null,
    pooling_output: null,
    finish_reason: null,
    stop_reason: null,
    events: null,
    kv_transfer_params: null,
    ec_transfer_params: null,
    trace_headers: null,
    prefill_stats: null,
    routed_experts: null,
    num_nans_in_logits: 0,
    mm_cache_miss_hashes: null,
    new_sampling_mask: null,
  };
  if (layout === 16) return full;
  // The 13-field layout has neither ec_transfer_params nor the two trailing fields (docs/wire/vllm-output.md).
  const { ec_transfer_params: _ec, mm_cache_miss_hashes: _mm, new_sampling_mask: _mask, ...thirteen } = full;
  return thirteen;
}

/** A fresh envelope with every field at its default (an *invalid* message until something is set). */
export function defaultEngineCoreOutputs(): EngineCoreOutputs {
  return {
    engine_index: 0,
    outputs: [],
    scheduler_stats: null,
    timestamp: 0.0,
    utility_output: null,
    finished_requests: null,
    wave_complete: null,
    start_wave: null,
  };
}

/** The shape of an envelope (engine-wire.md 5.8). */
export type EngineCoreOutputsKind =
  | { kind: 'requests' }
  | { kind: 'utility' }
  | { kind: 'wave_complete'; wave: WireInt }
  | { kind: 'start_wave'; wave: WireInt };

/**
 * Classifies an envelope (engine-wire.md 5.8 table). Throws WireDecodeError (path `EngineCoreOutputs`) for mixed
 * shapes and for an entirely empty envelope.
 */
export function classifyEngineCoreOutputs(o: EngineCoreOutputs): EngineCoreOutputsKind {
  const payload = o.outputs.length > 0 || o.scheduler_stats !== null || o.finished_requests !== null;
  const utility = o.utility_output !== null && o.utility_output !== undefined;
  const complete = o.wave_complete !== null;
  const start = o.start_wave !== null;
  const present = [
    payload && 'request payload',
    utility && 'utility_output',
    complete && 'wave_complete',
    start && 'start_wave',
  ].filter((x): x is string => typeof x === 'string');
  if (present.length === 0) {
    throw new WireDecodeError(
      'EngineCoreOutputs',
      'empty envelope (no outputs, scheduler_stats, finished_requests, ' +
        'utility_output or wave field); an empty envelope is not a heartbeat',
    );
  }
  if (present.length > 1)
    throw new WireDecodeError('EngineCoreOutputs', `mixed envelope shapes: ${present.join(' + ')}`);
  if (payload) return { kind: 'requests' };
  if (utility) return { kind: 'utility' };
  if (complete) return { kind: 'wave_complete', wave: o.wave_complete as WireInt };
  return { kind: 'start_wave', wave: o.start_wave as WireInt };
}

type OutputCodecs = ReturnType<typeof engineCoreOutputCodecs>;
const singleFrame: Partial<Record<EngineCoreOutputLayout, OutputCodecs>> = {};
/** Codecs for messages without aux frames, built once per layout (decoding never adds frames). */
function singleFrameCodecs(layout: EngineCoreOutputLayout): OutputCodecs {
  return (singleFrame[layout] ??= engineCoreOutputCodecs({ aux: [] }, layout));
}

/**
 * Decodes one output message: `frames[0]` is the payload, `frames[1..]` the aux frames (a single `Uint8Array` means a
 * message without aux frames), each `EngineCoreOutput` in `layout` (docs/wire/vllm-output.md). Without `layout`, the
 * payload's own shape decides (`detectOutputLayout`); a payload that shows neither (every output ambiguous) is
 * decoded in the 16-field layout, which reads every ambiguous output (its index 12 is nullable; the 13-field
 * layout's `num_nans_in_logits` is not). Trailing elements are drained at envelope and output level; absent trailing
 * fields default. Then the shape is checked (`classifyEngineCoreOutputs`). Integers beyond ±(2^53−1) stay bigint.
 * Throws WireDecodeError naming the field: no frames, type mismatches, truncation, trailing bytes, a `finish_reason`
 * outside 0..4, a missing required `SchedulerStats` key, bad tensors (pickle or unknown ext code, aux index out of
 * range, ragged logprob arrays, ...), an invalid shape.
 */
export function decodeEngineCoreOutputs(
  frames: readonly Uint8Array[] | Uint8Array,
  layout?: EngineCoreOutputLayout,
): EngineCoreOutputs {
  const all = frames instanceof Uint8Array ? [frames] : frames;
  if (all.length === 0) throw new WireDecodeError('EngineCoreOutputs', 'output message has no frames');
  const use = layout ?? detectOutputLayout(all[0]!)?.layout ?? 16;
  const { outputs } = all.length === 1 ? singleFrameCodecs(use) : engineCoreOutputCodecs({ aux: all.slice(1) }, use);
  const o = decodeMessage(outputs, all[0]!, 'EngineCoreOutputs');
  classifyEngineCoreOutputs(o);
  return o;
}

/**
 * The `engine_index` of an output payload (element 0 of the envelope; 0 when the envelope is empty) without decoding
 * the message or allocating: null when the payload does not start with an array and a non-negative integer below
 * 2^32 (the full decode then names the problem). For choosing the rank's layout before the decode.
 */
export function peekEngineIndex(payload: Uint8Array): number | null {
  let at = 0;
  const head = payload[at++];
  let n: number;
  if (head === undefined) return null;
  if (head >= 0x90 && head <= 0x9f) n = head & 0x0f;
  else if (head === 0xdc && payload.length >= 3) {
    n = (payload[1]! << 8) | payload[2]!;
    at = 3;
  } else if (head === 0xdd && payload.length >= 5) {
    n = ((payload[1]! << 24) >>> 0) + ((payload[2]! << 16) | (payload[3]! << 8) | payload[4]!);
    at = 5;
  } else return null;
  if (n === 0) return 0;
  const x = payload[at];
  if (x === undefined) return null;
  if (x <= 0x7f) return x;
  const left = payload.length - at - 1;
  if (x === 0xcc && left >= 1) return payload[at + 1]!;
  if (x === 0xcd && left >= 2) return (payload[at + 1]! << 8) | payload[at + 2]!;
  if (x === 0xce && left >= 4) {
    return ((payload[at + 1]! << 24) >>> 0) + ((payload[at + 2]! << 16) | (payload[at + 3]! << 8) | payload[at + 4]!);
  }
  return null;
}

/** What a payload's shape shows about its `EngineCoreOutput` layout: the layout and the element that showed it. */
export interface OutputLayoutEvidence {
  layout: EngineCoreOutputLayout;
  /** The deciding element and why, e.g. `outputs[0][12] is an int (num_nans_in_logits of the 13-field layout)`. */
  reason: string;
}

const PREFILL_KEYS = new Set<string>([...PREFILL_STATS_KEYS_13, 'num_cache_creation_tokens']);

/** What the map at the cursor is (consumed): empty, one with a PrefillStats key, or another map. */
function mapKind(r: MsgpackReader, path: string): 'empty' | 'prefill' | 'other' {
  const n = r.readMapHeader(path);
  let prefill = false;
  for (let i = 0; i < n; i++) {
    if (!prefill && r.peekKind(path) === 'str') prefill = PREFILL_KEYS.has(r.readStr(path));
    else r.skip(path);
    r.skip(path);
  }
  return n === 0 ? 'empty' : prefill ? 'prefill' : 'other';
}

/**
 * Which `EngineCoreOutput` layout an output payload shows (docs/wire/vllm-output.md "Telling them apart"), or null
 * when no output decides it. Pure; reads the bytes without decoding them and throws nothing (a malformed payload is
 * null here and a decode error later). The first deciding output wins:
 * - more than 13 elements ⇒ 16;
 * - index 10: a map with a PrefillStats key ⇒ 13 (`prefill_stats`); any other non-empty map ⇒ 16 (`trace_headers`);
 * - index 11: an array ⇒ 13 (`routed_experts`, an ndarray); a map with a PrefillStats key ⇒ 16 (`prefill_stats`);
 * - index 12: an int ⇒ 13 (`num_nans_in_logits`); an array ⇒ 16 (`routed_experts`).
 * An output whose elements from 9 on are absent or nil is ambiguous (it decodes the same in both), and so is index 9
 * (`trace_headers` or `ec_transfer_params`, both maps or nil).
 */
export function detectOutputLayout(payload: Uint8Array): OutputLayoutEvidence | null {
  try {
    const r = new MsgpackReader(payload);
    const envelope = r.readArrayHeader('EngineCoreOutputs');
    if (envelope < 2) return null;
    r.skip('engine_index');
    if (r.peekKind('outputs') !== 'array') return null;
    const count = r.readArrayHeader('outputs');
    for (let i = 0; i < count; i++) {
      const found = outputEvidence(r, i);
      if (found !== null) return found;
    }
    return null;
  } catch {
    return null;
  }
}

/** The evidence of output `i` at the cursor (consumed), or null when it is ambiguous. */
function outputEvidence(r: MsgpackReader, i: number): OutputLayoutEvidence | null {
  const at = `outputs[${i}]`;
  const n = r.readArrayHeader(at);
  if (n > 13) return { layout: 16, reason: `${at} has ${n} elements (the 13-field layout has at most 13)` };
  let found: OutputLayoutEvidence | null = null;
  for (let k = 0; k < n; k++) {
    if (found !== null || k < 10 || r.peekIsNil(at)) {
      r.skip(at);
      continue;
    }
    const kind = r.peekKind(at);
    if (k === 10 && kind === 'map') {
      const m = mapKind(r, at);
      if (m === 'prefill')
        found = { layout: 13, reason: `${at}[10] is a PrefillStats map (prefill_stats of the 13-field layout)` };
      else if (m === 'other')
        found = {
          layout: 16,
          reason: `${at}[10] is a map without PrefillStats keys (trace_headers of the 16-field layout)`,
        };
      continue;
    }
    if (k === 11 && kind === 'array') {
      found = {
        layout: 13,
        reason: `${at}[11] is an array (routed_experts of the 13-field layout; prefill_stats there in the 16-field one)`,
      };
    } else if (k === 11 && kind === 'map') {
      if (mapKind(r, at) === 'prefill')
        found = { layout: 16, reason: `${at}[11] is a PrefillStats map (prefill_stats of the 16-field layout)` };
      continue;
    } else if (k === 12 && kind === 'int') {
      found = { layout: 13, reason: `${at}[12] is an int (num_nans_in_logits of the 13-field layout)` };
    } else if (k === 12 && kind === 'array') {
      found = { layout: 16, reason: `${at}[12] is an array (routed_experts of the 16-field layout)` };
    }
    r.skip(at);
  }
  return found;
}

/** Options of the `EngineCoreOutputs` encoders. */
export interface EncodeOutputsOptions {
  /** The `EngineCoreOutput` layout (docs/wire/vllm-output.md); default 13, what vLLM 9aaf83ef / 52a31cce send. */
  layout?: EngineCoreOutputLayout;
  /**
   * `'short'` (default): trailing default fields are left out of the envelope and of each output. `'full'`: all 8
   * envelope elements and all 13 / 16 output elements. vLLM's real encoder writes the full form: msgspec ignores
   * `omit_defaults` for `array_like` structs (msgspec issue #720; the golden vectors in test/vectors/vllm are full
   * length). Decoders accept both.
   */
  form?: 'short' | 'full';
  /** Tensor buffers of at least this many bytes go to aux frames (default: all inline, ext 3). */
  auxThresholdBytes?: number;
}

/** The element count of `value` without its trailing default fields (at least the required prefix). */
function shortLength<T>(codec: PositionalCodec<T>, value: T): number {
  const v = value as Record<string, unknown>;
  let n = codec.fields.length;
  while (n > codec.minLength) {
    const f = codec.fields[n - 1];
    const x = v[f.name as string];
    if (x !== undefined && !wireEqual(x, f.dflt!())) break;
    n--;
  }
  return n;
}

/** WireEncodeError when a 13-field output holds a value only the 16-field layout can carry. */
function refuseSixteenFieldOnly(o: EngineCoreOutput, path: string): void {
  for (const name of SIXTEEN_FIELD_ONLY) {
    const v = (o as unknown as Record<string, unknown>)[name];
    if (v !== undefined && v !== null)
      throw new WireEncodeError(`${path}.${name}`, 'the 13-field layout has no such field');
  }
}

/**
 * Encodes an output message (what a simulated vLLM rank pushes) as frames `[payload, ...aux]`, each output in
 * `opts.layout` (default 13). Does not check the envelope's shape (tests build invalid ones on purpose). Throws
 * WireEncodeError naming the field on a value the wire cannot carry (non-integer token ids, ragged logprob rows, a
 * 16-field-only field or `num_cache_creation_tokens` set in the 13-field layout, ...).
 */
export function encodeEngineCoreOutputsFrames(msg: EngineCoreOutputs, opts: EncodeOutputsOptions = {}): Uint8Array[] {
  const root = 'EngineCoreOutputs';
  if (msg === null || typeof msg !== 'object') throw new WireEncodeError(root, 'expected an object');
  const layout = opts.layout ?? 13;
  if (layout !== 13 && layout !== 16)
    throw new WireEncodeError(root, `unknown EngineCoreOutput layout ${String(layout)} (13 or 16)`);
  const frames: TensorFrames = { aux: [], auxThresholdBytes: opts.auxThresholdBytes };
  const { output, outputs } = engineCoreOutputCodecs(frames, layout);
  const short = (opts.form ?? 'short') === 'short';
  const w = new MsgpackWriter(256);
  outputs.encodeWith(w, msg, root, {
    length: short ? shortLength(outputs, msg) : outputs.fullLength,
    fieldEncoders: {
      outputs: (wr, list, path) => {
        if (!Array.isArray(list)) throw new WireEncodeError(path, 'expected an array');
        wr.writeArrayHeader(list.length);
        list.forEach((o, i) => {
          const p = `${path}[${i}]`;
          if (layout === 13 && o !== null && typeof o === 'object') refuseSixteenFieldOnly(o, p);
          output.encodeWith(wr, o, p, { length: short ? shortLength(output, o) : output.fullLength });
        });
      },
    },
  });
  return [w.finish(), ...frames.aux];
}

/** `encodeEngineCoreOutputsFrames` with every tensor inline: one payload frame. */
export function encodeEngineCoreOutputs(
  msg: EngineCoreOutputs,
  opts: { form?: 'short' | 'full'; layout?: EngineCoreOutputLayout } = {},
): Uint8Array {
  return encodeEngineCoreOutputsFrames(msg, { form: opts.form, layout: opts.layout })[0]!;
}

/** The seam's wave event (src/protocols/types.ts), re-exported for the vLLM module's users. */
export type { WaveEvent };

/** A wire integer as a safe, non-negative `number`; WireDecodeError naming `path` otherwise. */
function count(v: WireInt, path: string): number {
  if (typeof v === 'bigint') throw new WireDecodeError(path, `integer ${v} is beyond ±(2^53−1)`);
  if (v < 0) throw new WireDecodeError(path, `must be ≥ 0, got ${v}`);
  return v;
}

/**
 * Maps a decoded envelope onto the seam (engine-wire.md 5.8-5.11; dp-routing.md 8). Pure and stateless:
 * - request batch: each output → an `EngineOutputRow` (finish reason per 5.11, `stopReason` = `stop_reason`,
 *   logprobs = column 0 of `new_logprobs`, one per row, not checked against the length of `new_token_ids`;
 *   `topLogprobs` = columns 1..K when K > 0, engine-wire.md 5.6). Token
 *   counts as 5.9 reports them: `promptTokens` / `cachedTokens` = `prefill_stats.num_prompt_tokens` /
 *   `num_cached_tokens` when `prefill_stats` is present, else null; `completionTokens` always null (vLLM sends no
 *   cumulative count: the engine client's stream keeps the running total of `new_token_ids`).
 *   `finishedRequestIds` = `finished_requests` (deduplicated) then terminal outputs not already listed; `load` iff
 *   `scheduler_stats`;
 * - utility reply: an empty batch for `engine_index` carrying the reply (`utility`, utility.ts `utilityReplyOf`);
 * - wave notice: an empty batch for `engine_index` with `wave` (`complete` for `wave_complete`, `start` for
 *   `start_wave`).
 * Throws WireDecodeError for an invalid shape (see `classifyEngineCoreOutputs`), a negative or beyond-±(2^53−1)
 * integer where a count, token id, rank or wave is expected.
 */
export function engineCoreOutputsToEngineBatch(o: EngineCoreOutputs): EngineBatch {
  const root = 'EngineCoreOutputs';
  const shape = classifyEngineCoreOutputs(o);
  if (shape.kind === 'utility') {
    const engineIndex = count(o.engine_index, `${root}.engine_index`);
    return { engineIndex, outputs: [], finishedRequestIds: [], utility: utilityReplyOf(o.utility_output) };
  }
  const engineIndex = count(o.engine_index, `${root}.engine_index`);
  if (shape.kind !== 'requests') {
    const field = shape.kind === 'wave_complete' ? 'wave_complete' : 'start_wave';
    return {
      engineIndex,
      outputs: [],
      finishedRequestIds: [],
      wave: {
        kind: shape.kind === 'wave_complete' ? 'complete' : 'start',
        wave: count(shape.wave, `${root}.${field}`),
      },
    };
  }
  const finished = new Set<string>(o.finished_requests ?? []);
  const outputs: EngineOutputRow[] = o.outputs.map((out, i) => {
    const p = `${root}.outputs[${i}]`;
    const newTokenIds = out.new_token_ids.map((t, j) => count(t, `${p}.new_token_ids[${j}]`));
    const prefill = out.prefill_stats;
    const finishReason = toFinishReason(out.finish_reason, `${p}.finish_reason`);
    const stop = out.stop_reason;
    const stopReason = typeof stop === 'string' || stop === null ? stop : count(stop, `${p}.stop_reason`);
    if (finishReason !== null) finished.add(out.request_id);
    const row: EngineOutputRow = {
      requestId: out.request_id,
      newTokenIds,
      finishReason,
      promptTokens: prefill === null ? null : count(prefill.num_prompt_tokens, `${p}.prefill_stats.num_prompt_tokens`),
      completionTokens: null,
      cachedTokens: prefill === null ? null : count(prefill.num_cached_tokens, `${p}.prefill_stats.num_cached_tokens`),
      logprobs: out.new_logprobs === null ? [] : sampledLogprobs(out.new_logprobs),
      stopReason,
    };
    // Columns 1..K: the ranked candidates (only present when the request asked for k > 0 top logprobs).
    if (out.new_logprobs !== null && out.new_logprobs.token_ids.some((r) => r.length > 1)) {
      row.topLogprobs = candidateLogprobs(out.new_logprobs);
    }
    if (out.pooling_output !== null) row.pooled = pooledVector(out.pooling_output, `${p}.pooling_output`);
    return row;
  });
  const batch: EngineBatch = { engineIndex, outputs, finishedRequestIds: [...finished] };
  if (o.scheduler_stats !== null) {
    batch.load = loadFromSchedulerStats(o.scheduler_stats, `${root}.scheduler_stats`);
    const adapters = loraAdaptersOf(o.scheduler_stats, `${root}.scheduler_stats`);
    if (adapters !== null) batch.loraAdapters = adapters;
  }
  return batch;
}
