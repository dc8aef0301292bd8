/**
 * The per-step `EngineCoreOutputs` frame of a simulated vLLM rank written straight from the scheduler rows
 * (engine-wire.md 5.8-5.10), for the steps without logprobs: the same bytes as building `EngineCoreOutput` objects
 * (`toEngineCoreOutput`) and encoding them with the schema codec (`encodeEngineCoreOutputsFrames`, short form: each
 * output and the envelope end at their last non-default field, as vLLM's msgspec structs send them), without the
 * objects and the per-field error paths. `vllm-wire.ts` falls back on the schema codec for steps with logprob
 * tensors and to name the field of a value the wire cannot carry. Either `EngineCoreOutput` layout
 * (docs/wire/vllm-output.md): 13 fields (`prefill_stats` at 10) or 16 (`prefill_stats` at 11).
 */
import { VllmFinishReason, prefillStatsCodecFor, schedulerStatsCodec } from '../protocols/vllm/index.js';
import type { EngineCoreOutputLayout, SchedulerStats } from '../protocols/vllm/index.js';
import { WireEncodeError } from '../wire/errors.js';
import { MsgpackWriter } from '../wire/writer.js';
import type { SimFinishReason, SimRow } from './scheduler.js';

/** Path of every direct write: a failing value is re-encoded by the schema codec, which names the field. */
const DIRECT_PATH = 'EngineCoreOutputs';

/**
 * The wire `finish_reason` of a scheduler finish (values: engine-wire.md 5.11): '' → nil, stop 0, length 1; the
 * scheduler's own aborts (a request it cannot serve) are sent as 3 error, the sim's choice (vLLM fails such requests).
 */
export function vllmFinishReasonOf(reason: SimFinishReason): number | null {
  switch (reason) {
    case '':
      return null;
    case 'stop':
      return VllmFinishReason.STOP;
    case 'length':
      return VllmFinishReason.LENGTH;
    case 'abort':
      return VllmFinishReason.ERROR;
  }
}

/** One step's envelope fields as `vllm-wire.ts` fills them. */
export interface VllmStepFrame {
  engineIndex: number;
  rows: readonly SimRow[];
  /** `finished_requests` (null: omitted). */
  finished: string[] | null;
  stats: SchedulerStats;
  /** Seconds (float). */
  timestamp: number;
  /** The `EngineCoreOutput` layout (default 13). */
  layout?: EngineCoreOutputLayout;
}

/** True when the direct writer covers every row (no logprob or pooled tensors to write). */
export function directlyEncodable(rows: readonly SimRow[]): boolean {
  for (const r of rows) if (r.logprobVals.length > 0 || r.pooled !== undefined) return false;
  return true;
}

/**
 * One output in its short form: `request_id`, `new_token_ids`, then nils up to `finish_reason` (5), `stop_reason` (6)
 * and `prefill_stats` (10 in the 13-field layout, 11 in the 16-field one), ending at the last of them that is set (the
 * others keep their defaults).
 */
function writeOutput(w: MsgpackWriter, row: SimRow, layout: EngineCoreOutputLayout): void {
  const finish = vllmFinishReasonOf(row.finishedReason);
  const stop = row.finishedReason === 'stop' ? row.stopReason : null;
  const prefillAt = layout === 13 ? 10 : 11;
  const length = row.prefillTokens !== null ? prefillAt + 1 : stop !== null ? 7 : finish !== null ? 6 : 2;
  w.writeArrayHeader(length);
  w.writeStr(row.rid, DIRECT_PATH);
  const ids = row.outputIds;
  if (!Array.isArray(ids)) throw new WireEncodeError(DIRECT_PATH, 'expected an array');
  w.writeArrayHeader(ids.length);
  for (const id of ids) w.writeInt(id, DIRECT_PATH);
  if (length === 2) return;
  w.writeNil(); // new_logprobs
  w.writeNil(); // new_prompt_logprobs_tensors
  w.writeNil(); // pooling_output
  if (finish === null) w.writeNil();
  else w.writeInt(finish, DIRECT_PATH);
  if (length === 6) return;
  if (stop === null) w.writeNil();
  else w.writeInt(stop, DIRECT_PATH);
  if (length === 7) return;
  // events, kv_transfer_params, then trace_headers (13) or ec_transfer_params and trace_headers (16)
  for (let i = 7; i < prefillAt; i++) w.writeNil();
  prefillStatsCodecFor(layout).encode(
    w,
    {
      num_prompt_tokens: row.promptTokens,
      num_computed_tokens: row.prefillTokens as number,
      num_cached_tokens: row.cachedTokens,
      num_local_cached_tokens: row.cachedTokens,
      num_external_cached_tokens: 0,
      num_cache_creation_tokens: 0,
    },
    DIRECT_PATH,
  );
}

/**
 * The step's single payload frame (no aux frames: no tensors). The envelope's short form: `engine_index`,
 * `outputs`, `scheduler_stats`, `timestamp`, then nil `utility_output` and `finished_requests` when there are any.
 * Throws `WireEncodeError` (with a coarse path) on a value the wire cannot carry.
 */
export function encodeVllmStepDirect(step: VllmStepFrame): Uint8Array {
  let size = 512;
  for (const r of step.rows) size += r.rid.length + 24 + 9 * r.outputIds.length + (r.prefillTokens !== null ? 200 : 0);
  if (step.finished !== null) for (const id of step.finished) size += id.length + 2;
  const w = new MsgpackWriter(size);
  w.writeArrayHeader(step.finished !== null ? 6 : Object.is(step.timestamp, 0) ? 3 : 4);
  w.writeInt(step.engineIndex, DIRECT_PATH);
  w.writeArrayHeader(step.rows.length);
  const layout = step.layout ?? 13;
  for (const r of step.rows) writeOutput(w, r, layout);
  schedulerStatsCodec.encode(w, step.stats, DIRECT_PATH);
  if (step.finished !== null || !Object.is(step.timestamp, 0)) w.writeFloat64(step.timestamp, DIRECT_PATH);
  if (step.finished !== null) {
    w.writeNil(); // utility_output
    w.writeArrayHeader(step.finished.length);
    for (const id of step.finished) w.writeStr(id, DIRECT_PATH);
  }
  return w.finish();
}
