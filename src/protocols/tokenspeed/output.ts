/**
 * TokenSpeed `BatchTokenIDOutSlim`, the engine's output batch (engine-wire.md 4.8-4.9; TokenSpeed `io_struct.py`,
 * SMG `protocol/tokenspeed/output.rs`). A tagged positional array: the tag, eight parallel columns (one entry per
 * request row; all required), then `engine_index` (10-element form, TokenSpeed PR #1046 / SMG PR #2121) and the
 * load tail `num_running, num_waiting, kv_active_pages, kv_total_pages` (14-element form, TokenSpeed PR #1079 /
 * SMG PR #2131). Fields from element 9 on default to 0; elements after 13 are drained (`out_slim15_extra_trailing`).
 */
import type { EngineBatch, EngineLoad, EngineOutputRow, FinishReason } from '../types.js';
import { float, int, list, positional, str, decodeMessage } from '../../wire/codec.js';
import { WireDecodeError, WireEncodeError } from '../../wire/errors.js';
import type { WireInt } from '../../wire/reader.js';
import { MsgpackWriter } from '../../wire/writer.js';

/** The tag string, element 0 (19 bytes, header `b3`). */
export const BATCH_TOKEN_ID_OUT_SLIM_TAG = 'BatchTokenIDOutSlim';

/** One output batch, upstream field names, wire order (engine-wire.md 4.8). Columns 1..8 have one entry per row. */
export interface BatchTokenIDOutSlim {
  rids: string[];
  /** New token ids since the row's previous batch (not cumulative). */
  output_ids: WireInt[][];
  /** `""` = running; otherwise `"stop"`, `"length"`, `"abort"` (never nil). */
  finished_reasons: string[];
  prompt_tokens: WireInt[];
  /** Cumulative. */
  completion_tokens: WireInt[];
  cached_tokens: WireInt[];
  /** Parallel to `output_ids`; `[]` when logprobs were not requested. float64, −inf and NaN possible. */
  output_token_logprobs_val: number[][];
  output_token_logprobs_idx: WireInt[][];
  /** The producing rank (default 0 in the 9-element form). */
  engine_index: WireInt;
  /** Requests registered and not finish-committed (includes the waiting ones; 4.9). */
  num_running: WireInt;
  num_waiting: WireInt;
  /** KV pages in active use. */
  kv_active_pages: WireInt;
  /** Usable KV pages; 0 = no load snapshot. */
  kv_total_pages: WireInt;
}

/** The tagged positional codec (14 fields after the tag; minimum 9 elements). */
export const batchTokenIdOutSlimCodec = positional<BatchTokenIDOutSlim>({
  name: 'BatchTokenIDOutSlim',
  tag: BATCH_TOKEN_ID_OUT_SLIM_TAG,
  fields: [
    { name: 'rids', codec: list(str) },
    { name: 'output_ids', codec: list(list(int)) },
    { name: 'finished_reasons', codec: list(str) },
    { name: 'prompt_tokens', codec: list(int) },
    { name: 'completion_tokens', codec: list(int) },
    { name: 'cached_tokens', codec: list(int) },
    { name: 'output_token_logprobs_val', codec: list(list(float)) },
    { name: 'output_token_logprobs_idx', codec: list(list(int)) },
    { name: 'engine_index', codec: int, dflt: () => 0 },
    { name: 'num_running', codec: int, dflt: () => 0 },
    { name: 'num_waiting', codec: int, dflt: () => 0 },
    { name: 'kv_active_pages', codec: int, dflt: () => 0 },
    { name: 'kv_total_pages', codec: int, dflt: () => 0 },
  ],
});

/** The columns that must have one entry per rid (engine-wire.md 4.8 "Ragged columns"). */
const COLUMNS = [
  'output_ids',
  'finished_reasons',
  'prompt_tokens',
  'completion_tokens',
  'cached_tokens',
  'output_token_logprobs_val',
  'output_token_logprobs_idx',
] as const;

/** The name of the first column whose length differs from `rids`, with its length, or null. */
function raggedColumn(b: BatchTokenIDOutSlim): { column: string; length: number } | null {
  for (const c of COLUMNS) {
    const col = b[c] as unknown[];
    if (col.length !== b.rids.length) return { column: c, length: col.length };
  }
  return null;
}

/**
 * Encodes a batch (what the simulated engine pushes). `form` 14 (default), 10 (no load tail) or 9 (no
 * `engine_index` either). Throws WireEncodeError on ragged columns, on a non-default field the form would drop,
 * or on a value the wire cannot carry.
 */
export function encodeBatchTokenIDOutSlim(batch: BatchTokenIDOutSlim, opts: { form?: 9 | 10 | 14 } = {}): Uint8Array {
  const root = 'BatchTokenIDOutSlim';
  if (batch === null || typeof batch !== 'object' || !Array.isArray(batch.rids)) {
    throw new WireEncodeError(`${root}.rids`, 'expected an object with a rids array');
  }
  for (const c of COLUMNS) {
    if (!Array.isArray(batch[c])) throw new WireEncodeError(`${root}.${c}`, 'expected an array');
  }
  const ragged = raggedColumn(batch);
  if (ragged !== null) {
    throw new WireEncodeError(
      `${root}.${ragged.column}`,
      `column has ${ragged.length} entries but rids has ${batch.rids.length}`,
    );
  }
  const w = new MsgpackWriter(256);
  batchTokenIdOutSlimCodec.encodeWith(w, batch, root, { length: opts.form ?? 14 });
  return w.finish();
}

/**
 * Decodes one output payload (frame 0) in any form: 9, 10, 14 or more elements (engine-wire.md 4.8). Throws
 * WireDecodeError naming the field on wrong types (`inv_slim_float_token`: `BatchTokenIDOutSlim.output_ids[0][0]:
 * expected int, got float64`), fewer than 9 elements, a wrong tag, truncation, trailing bytes, and ragged
 * columns (a column whose length differs from `rids`, `inv_slim_ragged_columns`: msgspec accepts it, the gateway
 * must not).
 */
export function decodeBatchTokenIDOutSlim(bytes: Uint8Array): BatchTokenIDOutSlim {
  const root = 'BatchTokenIDOutSlim';
  const b = decodeMessage(batchTokenIdOutSlimCodec, bytes, root);
  const ragged = raggedColumn(b);
  if (ragged !== null) {
    throw new WireDecodeError(
      `${root}.${ragged.column}`,
      `ragged columns: column has ${ragged.length} entries but rids has ${b.rids.length}`,
    );
  }
  return b;
}

/** A wire integer as a `number`; throws WireDecodeError naming `path` when it is a bigint (beyond ±(2^53−1)). */
function toNumber(v: WireInt, path: string): number {
  if (typeof v === 'bigint') throw new WireDecodeError(path, `integer ${v} is beyond ±(2^53−1)`);
  return v;
}

/**
 * Maps a finish string onto a `FinishReason` (engine-wire.md 4.8): `""` → null (running); `stop`, `length`,
 * `abort`, `error` pass through; anything else → `stop` (SMG does the same, with a warning; `onUnknown` is called
 * with the raw string so the caller can log it).
 */
export function toFinishReason(raw: string, onUnknown?: (raw: string) => void): FinishReason | null {
  switch (raw) {
    case '':
      return null;
    case 'stop':
    case 'length':
    case 'abort':
    case 'error':
      return raw;
    default:
      onUnknown?.(raw);
      return 'stop';
  }
}

/**
 * The load carried by a batch's tail (engine-wire.md 4.9), or undefined when `kv_total_pages` is 0 ("no
 * snapshot": 9/10-element senders, ranks that have not sampled yet). `kvCacheUsage` = kv_active_pages /
 * kv_total_pages (float64 ratio, not clamped). `runningIncludesWaiting` is always true: TokenSpeed's `num_running`
 * counts every registered, not yet finish-committed request, the waiting ones included (4.9; dp-routing.md 14.2).
 * Throws WireDecodeError when a count is beyond ±(2^53−1).
 */
export function loadFromBatch(b: BatchTokenIDOutSlim): EngineLoad | undefined {
  if (b.kv_total_pages == 0) return undefined;
  return {
    numRunning: toNumber(b.num_running, 'BatchTokenIDOutSlim.num_running'),
    numWaiting: toNumber(b.num_waiting, 'BatchTokenIDOutSlim.num_waiting'),
    kvCacheUsage: Number(b.kv_active_pages) / Number(b.kv_total_pages),
    runningIncludesWaiting: true,
  };
}

/**
 * Splits a decoded batch into engine-neutral per-request outputs (engine-wire.md 4.8 "Splitting a batch"):
 * row i → requestId `rids[i]`, newTokenIds `output_ids[i]`, finishReason from `finished_reasons[i]`
 * (see `toFinishReason`), prompt/completion/cached tokens, logprobs `output_token_logprobs_val[i]`.
 * `finishedRequestIds` = rids of the terminal rows; `engineIndex` = `engine_index`; `load` only when
 * `kv_total_pages > 0`. Throws WireDecodeError for ragged columns or an integer beyond ±(2^53−1).
 */
export function batchToEngineBatch(b: BatchTokenIDOutSlim, onUnknownFinish?: (raw: string) => void): EngineBatch {
  const root = 'BatchTokenIDOutSlim';
  const ragged = raggedColumn(b);
  if (ragged !== null) {
    throw new WireDecodeError(
      `${root}.${ragged.column}`,
      `ragged columns: column has ${ragged.length} entries but rids has ${b.rids.length}`,
    );
  }
  const outputs: EngineOutputRow[] = [];
  const finishedRequestIds: string[] = [];
  for (let i = 0; i < b.rids.length; i++) {
    const finishReason = toFinishReason(b.finished_reasons[i], onUnknownFinish);
    outputs.push({
      requestId: b.rids[i],
      newTokenIds: b.output_ids[i].map((t, j) => toNumber(t, `${root}.output_ids[${i}][${j}]`)),
      finishReason,
      promptTokens: toNumber(b.prompt_tokens[i], `${root}.prompt_tokens[${i}]`),
      completionTokens: toNumber(b.completion_tokens[i], `${root}.completion_tokens[${i}]`),
      cachedTokens: toNumber(b.cached_tokens[i], `${root}.cached_tokens[${i}]`),
      logprobs: b.output_token_logprobs_val[i],
    });
    if (finishReason !== null) finishedRequestIds.push(b.rids[i]);
  }
  const batch: EngineBatch = {
    engineIndex: toNumber(b.engine_index, `${root}.engine_index`),
    outputs,
    finishedRequestIds,
  };
  const load = loadFromBatch(b);
  if (load !== undefined) batch.load = load;
  return batch;
}
