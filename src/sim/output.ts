/**
 * Maps a scheduler batch onto TokenSpeed's wire struct `BatchTokenIDOutSlim` in its 14-element form (engine-wire.md
 * 4.8: columns 1..8 parallel per row, `engine_index`, then the PR #1079 load tail `num_running`, `num_waiting`,
 * `kv_active_pages`, `kv_total_pages`, section 4.9).
 *
 * `encodeSimBatch` is on every simulated step, so it writes the columns straight from the rows (one writer reused
 * across steps, no column arrays, no per-element error paths); its bytes are those of the schema codec
 * (`encodeBatchTokenIDOutSlim` of `toBatchTokenIDOutSlim`), which it falls back on to name the field of a value the
 * wire cannot carry.
 */
import {
  BATCH_TOKEN_ID_OUT_SLIM_TAG,
  encodeBatchTokenIDOutSlim,
  type BatchTokenIDOutSlim,
} from '../protocols/tokenspeed/output.js';
import { WireEncodeError } from '../wire/errors.js';
import { MsgpackWriter } from '../wire/writer.js';
import type { SimBatch, SimRow } from './scheduler.js';

/** A batch as the encoders read it (the engine passes a step's rows without copying them). */
export type SimBatchView = Omit<SimBatch, 'rows'> & { rows: readonly SimRow[] };

/** The wire struct for one scheduler batch. Throws `RangeError` for an empty batch (the engine never sends one). */
export function toBatchTokenIDOutSlim(batch: SimBatchView): BatchTokenIDOutSlim {
  if (batch.rows.length === 0)
    throw new RangeError('toBatchTokenIDOutSlim: a TokenSpeed rank never sends an empty batch');
  const rows = batch.rows;
  return {
    rids: rows.map((r) => r.rid),
    output_ids: rows.map((r) => r.outputIds),
    finished_reasons: rows.map((r) => r.finishedReason),
    prompt_tokens: rows.map((r) => r.promptTokens),
    completion_tokens: rows.map((r) => r.completionTokens),
    cached_tokens: rows.map((r) => r.cachedTokens),
    output_token_logprobs_val: rows.map((r) => [...r.logprobVals]),
    output_token_logprobs_idx: rows.map((r) => [...r.logprobIdx]),
    engine_index: batch.engineIndex,
    num_running: batch.tail.numRunning,
    num_waiting: batch.tail.numWaiting,
    kv_active_pages: batch.tail.kvActivePages,
    kv_total_pages: batch.tail.kvTotalPages,
  };
}

/** Path of every fast-path write: a failing value is re-encoded by the schema codec, which names the field. */
const FAST_PATH = 'BatchTokenIDOutSlim';

/**
 * The writer every fast-path encode of this process reuses (encodes are synchronous, so one is never shared by two at
 * once): it keeps its grown buffer, and `take()` hands out an exact-size copy, so a batch costs one allocation of its
 * own size instead of a zero-filled oversized buffer per step.
 */
const writer = new MsgpackWriter(16 * 1024);

/** Writes the `list(list(int))` / `list(list(float))` column of each row's `xs`. */
function writeIntLists(w: MsgpackWriter, rows: readonly SimRow[], column: 'outputIds' | 'logprobIdx'): void {
  w.writeArrayHeader(rows.length);
  for (let i = 0; i < rows.length; i++) {
    const xs = rows[i]![column];
    if (!Array.isArray(xs)) throw new WireEncodeError(FAST_PATH, 'expected an array');
    w.writeArrayHeader(xs.length);
    for (let j = 0; j < xs.length; j++) w.writeInt(xs[j]!, FAST_PATH);
  }
}

function writeFloatLists(w: MsgpackWriter, rows: readonly SimRow[]): void {
  w.writeArrayHeader(rows.length);
  for (let i = 0; i < rows.length; i++) {
    const xs = rows[i]!.logprobVals;
    if (!Array.isArray(xs)) throw new WireEncodeError(FAST_PATH, 'expected an array');
    w.writeArrayHeader(xs.length);
    for (let j = 0; j < xs.length; j++) w.writeFloat64(xs[j]!, FAST_PATH);
  }
}

/** The 14-element frame written column by column from the rows (same bytes as the schema codec). */
function encodeRowsDirect(batch: SimBatchView): Uint8Array {
  const rows = batch.rows;
  const n = rows.length;
  const w = writer;
  try {
    w.writeArrayHeader(14);
    w.writeStr(BATCH_TOKEN_ID_OUT_SLIM_TAG, FAST_PATH);
    w.writeArrayHeader(n);
    for (let i = 0; i < n; i++) w.writeStr(rows[i]!.rid, FAST_PATH);
    writeIntLists(w, rows, 'outputIds');
    w.writeArrayHeader(n);
    for (let i = 0; i < n; i++) w.writeStr(rows[i]!.finishedReason, FAST_PATH);
    w.writeArrayHeader(n);
    for (let i = 0; i < n; i++) w.writeInt(rows[i]!.promptTokens, FAST_PATH);
    w.writeArrayHeader(n);
    for (let i = 0; i < n; i++) w.writeInt(rows[i]!.completionTokens, FAST_PATH);
    w.writeArrayHeader(n);
    for (let i = 0; i < n; i++) w.writeInt(rows[i]!.cachedTokens, FAST_PATH);
    writeFloatLists(w, rows);
    writeIntLists(w, rows, 'logprobIdx');
    w.writeInt(batch.engineIndex, FAST_PATH);
    w.writeInt(batch.tail.numRunning, FAST_PATH);
    w.writeInt(batch.tail.numWaiting, FAST_PATH);
    w.writeInt(batch.tail.kvActivePages, FAST_PATH);
    w.writeInt(batch.tail.kvTotalPages, FAST_PATH);
    return w.take();
  } catch (error) {
    w.reset();
    throw error;
  }
}

/**
 * Encodes one scheduler batch as a single-frame 14-element `BatchTokenIDOutSlim` payload. Throws `RangeError` for an
 * empty batch and `WireEncodeError` naming the field (from the schema codec) for a value the wire cannot carry.
 */
export function encodeSimBatch(batch: SimBatchView): Uint8Array {
  if (batch.rows.length === 0)
    throw new RangeError('toBatchTokenIDOutSlim: a TokenSpeed rank never sends an empty batch');
  try {
    return encodeRowsDirect(batch);
  } catch (error) {
    if (!(error instanceof WireEncodeError)) throw error;
    // The schema codec names the offending field; should it accept the batch after all, its bytes are the answer.
    return encodeBatchTokenIDOutSlim(toBatchTokenIDOutSlim(batch), { form: 14 });
  }
}
