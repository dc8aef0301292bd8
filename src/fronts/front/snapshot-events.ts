/**
 * The engine client's `rank` and `failed` events of one group, read from two of the router's snapshots of it (a
 * `--workers N` front hears no events from the router beyond JOINED; docs/workers.md section 6). Counters find what
 * happened between the two even when the state is back where it was (a rank that died and rejoined in between): each
 * new stall is a `stalled` event, each new death a `dead` event with its cause (`RankState.deaths`), each new
 * group-scope failure a `failed` event with its cause (`ClientStats.failures`). A state change no counter explains
 * (back to `ready`, `joining` again, a death the client does not count such as `handshake-timeout`) is one event with
 * the new state. Pure.
 */
import type { RankStateName } from '../../engine-client/rank-liveness.js';
import type { BackendRankState } from '../../server/backend.js';
import type { GroupSnapshot } from '../channel/records.js';

/** One event as the engine client would have emitted it (group-state.ts `EngineClientEvents`). */
export type SnapshotEvent = RankEvent | { event: 'failed'; cause: string };

/** A rank changed state (`cause`: why it died or stalled, else what its state says). */
export interface RankEvent {
  event: 'rank';
  dpRank: number;
  state: RankStateName;
  cause: string | null;
}

/**
 * Events of one counter at most per pair of snapshots: a counter that jumps further (a counter reset read as a jump,
 * a front that slept) must not flood the event list; the counts stay in /metrics.
 */
export const MAX_EVENTS_PER_COUNTER = 16;

/** How much each key of `next` grew since `previous` (keys that did not grow are left out). */
function growth(
  previous: Readonly<Record<string, number>>,
  next: Readonly<Record<string, number>>,
): [string, number][] {
  const out: [string, number][] = [];
  for (const [key, n] of Object.entries(next)) {
    const grew = Math.min(MAX_EVENTS_PER_COUNTER, n - (previous[key] ?? 0));
    if (grew > 0) out.push([key, grew]);
  }
  return out;
}

/** The events of one rank slot between `before` and `after` (see the module comment). */
function rankEvents(before: BackendRankState, after: BackendRankState): RankEvent[] {
  const dpRank = after.engineIndex;
  const out: RankEvent[] = [];
  const stalls = Math.min(MAX_EVENTS_PER_COUNTER, after.stalls - before.stalls);
  for (let i = 0; i < stalls; i++) out.push({ event: 'rank', dpRank, state: 'stalled', cause: 'stall' });
  for (const [cause, n] of growth(before.deaths, after.deaths))
    for (let i = 0; i < n; i++) out.push({ event: 'rank', dpRank, state: 'dead', cause });
  // The state it is in now, unless the last counted event already says so (or nothing changed).
  if (after.state !== before.state && out.at(-1)?.state !== after.state)
    out.push({ event: 'rank', dpRank, state: after.state, cause: after.cause });
  return out;
}

/**
 * The events between `previous` and `next`, two snapshots of one group in the order they came (rank events first, by
 * DP rank, then the group's failures, as the engine client emits them); none when there is no `previous` (the first
 * snapshot is where this front starts counting). A rank only `next` has starts there too.
 */
export function snapshotEvents(previous: GroupSnapshot | undefined, next: GroupSnapshot): SnapshotEvent[] {
  if (previous === undefined) return [];
  const before = new Map(previous.ranks.map((r) => [r.engineIndex, r]));
  const out: SnapshotEvent[] = [];
  for (const r of next.ranks) {
    const b = before.get(r.engineIndex);
    if (b !== undefined) out.push(...rankEvents(b, r));
  }
  for (const [cause, n] of growth(previous.stats.failures, next.stats.failures))
    for (let i = 0; i < n; i++) out.push({ event: 'failed', cause });
  return out;
}
