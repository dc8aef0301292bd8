/**
 * The routing decision for one decoded output batch (dp-routing.md section 8 steps 4-6, section 10.4, 14.6 rank
 * fidelity), as a pure function: given the batch and a registry lookup, say which live request gets which row, which
 * requests end without a terminal row, which rows name another rank's requests (dropped: issue 26) and which rows
 * belong to no live request. The engine client applies the plan in the same synchronous step (dp-routing.md 12.3
 * rule 2); nothing here mutates anything.
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
 * - `entries` / `rows`: rows for live requests of the batch's rank in batch order, as two parallel lists
 *   (`entries[i]` gets `rows[i]`; no object per row, issue 9); a row is terminal iff its `finishReason` is non-null,
 *   and a request retired by a terminal row gets no later row.
 * - `closedWithoutTerminal`: live requests of the batch's rank named in the finished ids without a terminal row
 *   (they get a stream-closed error, SMG PR #2170).
 * - `finished`: every finished id of the batch (out-of-band ids plus terminal rows, live or not): released from the
 *   batch's rank for EVERY batch, even when empty (that is what clamps an idle rank's stale report, 10.3).
 * - `foreign`: ids of rows for live requests that were sent to ANOTHER rank than the batch names (issue 26, 14.6
 *   rank fidelity made strict): a request's rows come only from the rank its ADD went to, so these are dropped (the
 *   owner keeps its stream) and the caller ABORTs them at the sender; each id once per batch.
 * - `mismatches`: foreign rows plus finished ids naming another rank's live request (neither is applied).
 * - `unknownRows`: ids of rows for no live request (dropped: unknown, already retired or aborted; section 2).
 */
export interface BatchPlan<E extends LiveRequest> {
  entries: E[];
  rows: EngineOutputRow[];
  closedWithoutTerminal: E[];
  finished: Set<string>;
  foreign: string[];
  mismatches: number;
  unknownRows: string[];
}

/**
 * Plan `batch` against the live requests `lookup` knows (section 8 steps 4-6). A row or finished id counts for a live
 * request only when the batch names the rank the request was sent to (`LiveRequest.engineIndex`); the engine index
 * inside a batch is checked, never trusted over the recorded rank. Pure; never throws.
 */
export function planBatch<E extends LiveRequest>(
  batch: EngineBatch,
  lookup: (requestId: string) => E | undefined,
): BatchPlan<E> {
  const rank = batch.engineIndex;
  const plan: BatchPlan<E> = {
    entries: [],
    rows: [],
    closedWithoutTerminal: [],
    finished: new Set(batch.finishedRequestIds),
    foreign: [],
    mismatches: 0,
    unknownRows: [],
  };
  let retired: Set<string> | null = null;
  let foreign: Set<string> | null = null;
  for (const row of batch.outputs) {
    const terminal = row.finishReason !== null;
    if (terminal) plan.finished.add(row.requestId);
    const entry = retired !== null && retired.has(row.requestId) ? undefined : lookup(row.requestId);
    if (entry === undefined) {
      plan.unknownRows.push(row.requestId);
      continue;
    }
    if (entry.engineIndex !== rank) {
      plan.mismatches++;
      foreign ??= new Set();
      if (!foreign.has(row.requestId)) {
        foreign.add(row.requestId);
        plan.foreign.push(row.requestId);
      }
      continue;
    }
    if (terminal) (retired ??= new Set()).add(entry.requestId);
    plan.entries.push(entry);
    plan.rows.push(row);
  }
  for (const id of plan.finished) {
    if (retired !== null && retired.has(id)) continue;
    if (foreign !== null && foreign.has(id)) continue;
    const entry = lookup(id);
    if (entry === undefined) continue;
    if (entry.engineIndex !== rank) {
      plan.mismatches++;
      continue;
    }
    (retired ??= new Set()).add(id);
    plan.closedWithoutTerminal.push(entry);
  }
  return plan;
}
