/**
 * Maps a scheduler batch onto TokenSpeed's wire struct `BatchTokenIDOutSlim` in its 14-element form (engine-wire.md
 * 4.8: columns 1..8 parallel per row, `engine_index`, then the PR #1079 load tail `num_running`, `num_waiting`,
 * `kv_active_pages`, `kv_total_pages`, section 4.9).
 */
import { encodeBatchTokenIDOutSlim, type BatchTokenIDOutSlim } from '../protocols/tokenspeed/output.js';
import type { SimBatch } from './scheduler.js';

/** The wire struct for one scheduler batch. Throws `RangeError` for an empty batch (the engine never sends one). */
export function toBatchTokenIDOutSlim(batch: SimBatch): BatchTokenIDOutSlim {
  if (batch.rows.length === 0) throw new RangeError('toBatchTokenIDOutSlim: a TokenSpeed rank never sends an empty batch');
  const rows = batch.rows;
  return {
    rids: rows.map((r) => r.rid),
    output_ids: rows.map((r) => r.outputIds),
    finished_reasons: rows.map((r) => r.finishedReason),
    prompt_tokens: rows.map((r) => r.promptTokens),
    completion_tokens: rows.map((r) => r.completionTokens),
    cached_tokens: rows.map((r) => r.cachedTokens),
    output_token_logprobs_val: rows.map((r) => r.logprobVals),
    output_token_logprobs_idx: rows.map((r) => r.logprobIdx),
    engine_index: batch.engineIndex,
    num_running: batch.tail.numRunning,
    num_waiting: batch.tail.numWaiting,
    kv_active_pages: batch.tail.kvActivePages,
    kv_total_pages: batch.tail.kvTotalPages,
  };
}

/** Encodes one scheduler batch as a single-frame 14-element `BatchTokenIDOutSlim` payload. Throws like `toBatchTokenIDOutSlim` / `WireEncodeError`. */
export function encodeSimBatch(batch: SimBatch): Uint8Array {
  return encodeBatchTokenIDOutSlim(toBatchTokenIDOutSlim(batch), { form: 14 });
}
