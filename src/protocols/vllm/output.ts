/**
 * vLLM's output message (engine-wire.md 5.8-5.11; vLLM `v1/engine/__init__.py`, SMG `protocol/vllm/*.rs`, SMG PR
 * #2175): the `EngineCoreOutputs` envelope and its `EngineCoreOutput`s, both untagged positional arrays,
 * trailing-tolerant (absent trailing fields default, extra ones are drained). Frame 0 is the payload; frames 1.. are
 * aux frames referenced by logprob tensors (5.6, 1.6).
 *
 * Envelope classification (5.8, SMG): *payload* = `outputs` non-empty, or `scheduler_stats` present, or
 * `finished_requests` present. Request batch = payload and no utility and no wave field; utility reply = utility
 * only; wave complete / start wave = that field only. Anything else (mixed shapes, an entirely empty envelope) is a
 * decode error: an empty envelope is not a heartbeat.
 */
import type { EngineBatch, EngineOutputRow, FinishReason, WaveEvent } from '../types.js';
import {
  anyValue, decodeMessage, float, int, list, namedMap, nullable, positional, str, wireEqual,
} from '../../wire/codec.js';
import type { Codec, PositionalCodec } from '../../wire/codec.js';
import { WireDecodeError, WireEncodeError } from '../../wire/errors.js';
import type { WireInt } from '../../wire/reader.js';
import { MsgpackWriter } from '../../wire/writer.js';
import { loadFromSchedulerStats, schedulerStatsCodec } from './stats.js';
import type { SchedulerStats } from './stats.js';
import { candidateLogprobs, logprobsCodec, sampledLogprobs } from './tensors.js';
import type { TensorFrames, VllmLogprobs } from './tensors.js';

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
    case 0: case 4: return 'stop';
    case 1: return 'length';
    case 2: return 'abort';
    case 3: return 'error';
    default: throw new WireDecodeError(path, `unknown finish reason ${code} (expected 0..4)`);
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

/** `prefill_stats` (5.9): token counts of the prefill just scheduled; every key defaults to 0. */
export interface PrefillStats {
  num_prompt_tokens: WireInt;
  num_computed_tokens: WireInt;
  num_cached_tokens: WireInt;
  num_local_cached_tokens: WireInt;
  num_external_cached_tokens: WireInt;
  num_cache_creation_tokens: WireInt;
}

/** `prefill_stats` codec (named map). */
export const prefillStatsCodec = namedMap<PrefillStats>({
  name: 'PrefillStats',
  fields: [
    { name: 'num_prompt_tokens', codec: int, dflt: () => 0 },
    { name: 'num_computed_tokens', codec: int, dflt: () => 0 },
    { name: 'num_cached_tokens', codec: int, dflt: () => 0 },
    { name: 'num_local_cached_tokens', codec: int, dflt: () => 0 },
    { name: 'num_external_cached_tokens', codec: int, dflt: () => 0 },
    { name: 'num_cache_creation_tokens', codec: int, dflt: () => 0 },
  ],
});

/** One per-request output, wire order, upstream names (engine-wire.md 5.9). */
export interface EngineCoreOutput {
  request_id: string;
  /** New token ids this step (not cumulative). */
  new_token_ids: WireInt[];
  new_logprobs: VllmLogprobs | null;
  new_prompt_logprobs_tensors: VllmLogprobs | null;
  pooling_output: unknown;
  /** 0 stop, 1 length, 2 abort, 3 error, 4 repetition; non-null ⇔ terminal. */
  finish_reason: WireInt | null;
  stop_reason: StopReason;
  events: EngineCoreEvent[] | null;
  kv_transfer_params: unknown;
  ec_transfer_params: unknown;
  trace_headers: unknown;
  /** Present on the first output after a new prefill is scheduled. */
  prefill_stats: PrefillStats | null;
  routed_experts: unknown;
  num_nans_in_logits: WireInt;
  mm_cache_miss_hashes: string[] | null;
  new_sampling_mask: unknown;
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

/** The positional codecs of one message (built per message: logprob tensors need its aux frames). */
export function engineCoreOutputCodecs(frames: TensorFrames): {
  output: PositionalCodec<EngineCoreOutput>;
  outputs: PositionalCodec<EngineCoreOutputs>;
} {
  const lp = nullable(logprobsCodec(frames));
  const output = positional<EngineCoreOutput>({
    name: 'EngineCoreOutput',
    fields: [
      { name: 'request_id', codec: str },
      { name: 'new_token_ids', codec: list(int) },
      { name: 'new_logprobs', codec: lp, dflt: () => null },
      { name: 'new_prompt_logprobs_tensors', codec: lp, dflt: () => null },
      { name: 'pooling_output', codec: anyValue, dflt: () => null },
      { name: 'finish_reason', codec: finishReasonCodec, dflt: () => null },
      { name: 'stop_reason', codec: stopReasonCodec, dflt: () => null },
      { name: 'events', codec: nullable(list(engineCoreEventCodec)), dflt: () => null },
      { name: 'kv_transfer_params', codec: anyValue, dflt: () => null },
      { name: 'ec_transfer_params', codec: anyValue, dflt: () => null },
      { name: 'trace_headers', codec: anyValue, dflt: () => null },
      { name: 'prefill_stats', codec: nullable(prefillStatsCodec), dflt: () => null },
      { name: 'routed_experts', codec: anyValue, dflt: () => null },
      { name: 'num_nans_in_logits', codec: int, dflt: () => 0 },
      { name: 'mm_cache_miss_hashes', codec: nullable(list(str)), dflt: () => null },
      { name: 'new_sampling_mask', codec: anyValue, dflt: () => null },
    ],
  });
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

/** A fresh `EngineCoreOutput` for `requestId` with every optional field at its default. */
export function defaultEngineCoreOutput(requestId: string, newTokenIds: WireInt[] = []): EngineCoreOutput {
  return {
    request_id: requestId, new_token_ids: newTokenIds, new_logprobs: null, new_prompt_logprobs_tensors: null,
    pooling_output: null, finish_reason: null, stop_reason: null, events: null, kv_transfer_params: null,
    ec_transfer_params: null, trace_headers: null, prefill_stats: null, routed_experts: null, num_nans_in_logits: 0,
    mm_cache_miss_hashes: null, new_sampling_mask: null,
  };
}

/** A fresh envelope with every field at its default (an *invalid* message until something is set). */
export function defaultEngineCoreOutputs(): EngineCoreOutputs {
  return {
    engine_index: 0, outputs: [], scheduler_stats: null, timestamp: 0.0, utility_output: null,
    finished_requests: null, wave_complete: null, start_wave: null,
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
    payload && 'request payload', utility && 'utility_output', complete && 'wave_complete', start && 'start_wave',
  ].filter((x): x is string => typeof x === 'string');
  if (present.length === 0) {
    throw new WireDecodeError('EngineCoreOutputs', 'empty envelope (no outputs, scheduler_stats, finished_requests, ' +
      'utility_output or wave field); an empty envelope is not a heartbeat');
  }
  if (present.length > 1) throw new WireDecodeError('EngineCoreOutputs', `mixed envelope shapes: ${present.join(' + ')}`);
  if (payload) return { kind: 'requests' };
  if (utility) return { kind: 'utility' };
  if (complete) return { kind: 'wave_complete', wave: o.wave_complete as WireInt };
  return { kind: 'start_wave', wave: o.start_wave as WireInt };
}

let singleFrame: ReturnType<typeof engineCoreOutputCodecs> | undefined;
/** Codecs for messages without aux frames, built once (decoding never adds frames). */
function singleFrameCodecs(): ReturnType<typeof engineCoreOutputCodecs> {
  singleFrame ??= engineCoreOutputCodecs({ aux: [] });
  return singleFrame;
}

/**
 * Decodes one output message: `frames[0]` is the payload, `frames[1..]` the aux frames (a single `Uint8Array` means a
 * message without aux frames). Trailing elements are drained at envelope and output level; absent trailing fields
 * default (vLLM's own encoder omits trailing defaults). Then the shape is checked (`classifyEngineCoreOutputs`).
 * Integers beyond ±(2^53−1) stay bigint. Throws WireDecodeError naming the field: no frames, type mismatches,
 * truncation, trailing bytes, a `finish_reason` outside 0..4, a missing required `SchedulerStats` key, bad
 * tensors (pickle or unknown ext code, aux index out of range, ragged logprob arrays, ...), an invalid shape.
 */
export function decodeEngineCoreOutputs(frames: readonly Uint8Array[] | Uint8Array): EngineCoreOutputs {
  const all = frames instanceof Uint8Array ? [frames] : frames;
  if (all.length === 0) throw new WireDecodeError('EngineCoreOutputs', 'output message has no frames');
  const { outputs } = all.length === 1 ? singleFrameCodecs() : engineCoreOutputCodecs({ aux: all.slice(1) });
  const o = decodeMessage(outputs, all[0], 'EngineCoreOutputs');
  classifyEngineCoreOutputs(o);
  return o;
}

/** Options of the `EngineCoreOutputs` encoders. */
export interface EncodeOutputsOptions {
  /**
   * `'short'` (default): trailing default fields are left out of the envelope and of each output, as vLLM's msgspec
   * structs (`array_like`, `omit_defaults`) send them (inferred from vLLM's struct declarations). `'full'`: all 8 / 16
   * elements.
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

/**
 * Encodes an output message (what a simulated vLLM rank pushes) as frames `[payload, ...aux]`. Does not check the
 * envelope's shape (tests build invalid ones on purpose). Throws WireEncodeError naming the field on a value the
 * wire cannot carry (non-integer token ids, ragged logprob rows, ...).
 */
export function encodeEngineCoreOutputsFrames(msg: EngineCoreOutputs, opts: EncodeOutputsOptions = {}): Uint8Array[] {
  const root = 'EngineCoreOutputs';
  if (msg === null || typeof msg !== 'object') throw new WireEncodeError(root, 'expected an object');
  const frames: TensorFrames = { aux: [], auxThresholdBytes: opts.auxThresholdBytes };
  const { output, outputs } = engineCoreOutputCodecs(frames);
  const short = (opts.form ?? 'short') === 'short';
  const w = new MsgpackWriter(256);
  outputs.encodeWith(w, msg, root, {
    length: short ? shortLength(outputs, msg) : outputs.fullLength,
    fieldEncoders: {
      outputs: (wr, list, path) => {
        if (!Array.isArray(list)) throw new WireEncodeError(path, 'expected an array');
        wr.writeArrayHeader(list.length);
        list.forEach((o, i) => output.encodeWith(wr, o, `${path}[${i}]`, {
          length: short ? shortLength(output, o) : output.fullLength,
        }));
      },
    },
  });
  return [w.finish(), ...frames.aux];
}

/** `encodeEngineCoreOutputsFrames` with every tensor inline: one payload frame. */
export function encodeEngineCoreOutputs(msg: EngineCoreOutputs, opts: { form?: 'short' | 'full' } = {}): Uint8Array {
  return encodeEngineCoreOutputsFrames(msg, { form: opts.form })[0];
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
 * - utility reply: an empty batch for engine 0;
 * - wave notice: an empty batch for `engine_index` with `wave` (`complete` for `wave_complete`, `start` for
 *   `start_wave`).
 * Throws WireDecodeError for an invalid shape (see `classifyEngineCoreOutputs`), a negative or beyond-±(2^53−1)
 * integer where a count, token id, rank or wave is expected.
 */
export function engineCoreOutputsToEngineBatch(o: EngineCoreOutputs): EngineBatch {
  const root = 'EngineCoreOutputs';
  const shape = classifyEngineCoreOutputs(o);
  if (shape.kind === 'utility') return { engineIndex: 0, outputs: [], finishedRequestIds: [] };
  const engineIndex = count(o.engine_index, `${root}.engine_index`);
  if (shape.kind !== 'requests') {
    const field = shape.kind === 'wave_complete' ? 'wave_complete' : 'start_wave';
    return {
      engineIndex, outputs: [], finishedRequestIds: [],
      wave: { kind: shape.kind === 'wave_complete' ? 'complete' : 'start', wave: count(shape.wave, `${root}.${field}`) },
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
    return row;
  });
  const batch: EngineBatch = { engineIndex, outputs, finishedRequestIds: [...finished] };
  if (o.scheduler_stats !== null) batch.load = loadFromSchedulerStats(o.scheduler_stats, `${root}.scheduler_stats`);
  return batch;
}
