/**
 * The routing decision for one decoded output batch (dp-routing.md section 8 steps 4-6, section 10.4, 14.6 rank
 * fidelity), as a pure function: given the batch and a registry lookup, say which live request gets which row, which
 * requests end without a terminal row, what to release from which rank's in-flight set, which ranks the batch proves
 * alive and which rows belong to no live request. The engine client applies the plan in the same synchronous step
 * (dp-routing.md 12.3 rule 2); nothing here mutates anything.
 */
import type { EngineBatch, EngineOutputRow } from '../protocols/types.js';

/** What the planner needs to know about a live request. */
export interface LiveRequest {
  readonly requestId: string;
  /** The rank its ADD went to (the recorded rank, 14.6), or null before selection. */
  readonly engineIndex: number | null;
}

/**
 * The plan of one batch.
 * - `entries` / `rows`: rows for live requests in batch order, as two parallel lists (`entries[i]` gets `rows[i]`;
 *   no object per row, issue 9); a row is terminal iff its `finishReason` is non-null, and a request retired by a
 *   terminal row gets no later row.
 * - `closedWithoutTerminal`: live requests named in the finished ids without a terminal row (they get a
 *   stream-closed error, SMG PR #2170).
 * - `finished`: every finished id of the batch (out-of-band ids plus terminal rows, live or not): released from the
 *   batch's rank for EVERY batch, even when empty (that is what clamps an idle rank's stale report, 10.3).
 * - `alsoRelease`: (recorded rank, id) for retired requests recorded on another rank than the batch names, so a
 *   sender that misnames itself (the 9-element TokenSpeed layout always says rank 0) cannot leak slots (14.6).
 * - `heardFrom`: the batch's rank plus the recorded rank of every live request it carries (ids are unique per
 *   client, so only that rank can have produced the row, even if the batch misnames itself; 14.8).
 * - `mismatches`: rows / finished ids whose live request was recorded on another rank (14.6).
 * - `unknownRows`: ids of rows for no live request (dropped: unknown, already retired or aborted; section 2).
 */
export interface BatchPlan<E extends LiveRequest> {
  entries: E[];
  rows: EngineOutputRow[];
  closedWithoutTerminal: E[];
  finished: Set<string>;
  alsoRelease: Array<{ rank: number; requestId: string }>;
  heardFrom: Set<number>;
  mismatches: number;
  unknownRows: string[];
}

/** Plan `batch` against the live requests `lookup` knows (section 8 steps 4-6). Pure; never throws. */
export function planBatch<E extends LiveRequest>(batch: EngineBatch, lookup: (requestId: string) => E | undefined): BatchPlan<E> {
  const rank = batch.engineIndex;
  const plan: BatchPlan<E> = {
    entries: [],
    rows: [],
    closedWithoutTerminal: [],
    finished: new Set(batch.finishedRequestIds),
    alsoRelease: [],
    heardFrom: new Set([rank]),
    mismatches: 0,
    unknownRows: [],
  };
  const retired = new Set<string>();
  const note = (entry: E): void => {
    if (entry.engineIndex === null || entry.engineIndex === rank) return;
    plan.heardFrom.add(entry.engineIndex);
    plan.mismatches++;
  };
  const retire = (entry: E): void => {
    retired.add(entry.requestId);
    if (entry.engineIndex !== null && entry.engineIndex !== rank) plan.alsoRelease.push({ rank: entry.engineIndex, requestId: entry.requestId });
  };
  for (const row of batch.outputs) {
    const terminal = row.finishReason !== null;
    if (terminal) plan.finished.add(row.requestId);
    const entry = retired.size > 0 && retired.has(row.requestId) ? undefined : lookup(row.requestId);
    if (entry === undefined) {
      plan.unknownRows.push(row.requestId);
      continue;
    }
    note(entry);
    if (terminal) retire(entry);
    plan.entries.push(entry);
    plan.rows.push(row);
  }
  for (const id of plan.finished) {
    if (retired.has(id)) continue;
    const entry = lookup(id);
    if (entry === undefined) continue;
    note(entry);
    retire(entry);
    plan.closedWithoutTerminal.push(entry);
  }
  return plan;
}
