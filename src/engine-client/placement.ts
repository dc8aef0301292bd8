/**
 * Placement of a request on a DP rank (dp-routing.md section 9): the select + reserve step of a submit, one
 * synchronous step over the group state (section 12.3 rule 1), so no other request can be scored against the
 * in-flight sets between this request's choice and its reservation. Like group-state.ts, no function here takes a
 * callback or returns a promise (eslint.config.js).
 */
import type { GenerateRequest } from '../protocols/types.js';
import { EngineClientError } from './errors.js';
import type { GroupState } from './group-state.js';
import type { RankView } from './policy.js';
import type { RankSlot } from './rank-table.js';

/**
 * Where a request was placed: its slot, whether the client pinned it, and, when the policy chose, the chosen rank as
 * the policy saw it and how many ready ranks it was offered (what a route span records; request-spans.ts).
 */
export interface Placement {
  slot: RankSlot;
  pinned: boolean;
  view: RankView | null;
  candidates: number;
}

/**
 * Pick the rank and reserve the in-flight slot, synchronously, and tell the policy (`onDispatch`). Pinned (`dpRank`
 * given): the slot of that engine index (else `invalid-dp-rank`, section 9.1), which must be ready (else
 * `unavailable`). Unpinned: the policy over one `RankView` per ready rank, in identity order (section 9.2), else
 * `unavailable`. A policy returning a position out of range throws RangeError, nothing reserved.
 */
export function selectAndReserve(g: GroupState, request: GenerateRequest, dpRank: number | undefined): Placement {
  if (dpRank !== undefined) {
    const slot = pinnedSlot(g, dpRank);
    reserve(g, slot.index, request, false);
    return { slot, pinned: true, view: null, candidates: 0 };
  }
  if (!g.canServe()) {
    throw new EngineClientError(
      'unavailable',
      `no DP rank of this engine group can take requests now (${g.waves.lockstep ? 'a lockstep group needs every rank ready; ' : ''}${g.ranks.describe()})`,
    );
  }
  const ready = g.ranks.inState('ready');
  const now = g.now();
  const views: RankView[] = ready.map((s) => ({
    engineIndex: s.index,
    inFlight: g.routing.inFlightCount(s.index),
    load: g.routing.load(s.index),
    loadAgeMs: g.routing.loadAgeMs(s.index, now),
    service: g.routing.rates.view(s.index),
    adapters: g.loraCounts.get(s.index) ?? null,
  }));
  const pos = g.policy.select(views, request);
  if (!Number.isInteger(pos) || pos < 0 || pos >= ready.length) {
    throw new RangeError(
      `DP policy ${g.policy.name} returned position ${pos}, expected an integer in 0..${ready.length - 1}`,
    );
  }
  const slot = ready[pos]!;
  reserve(g, slot.index, request, true);
  return { slot, pinned: false, view: views[pos]!, candidates: ready.length };
}

/** The ready slot of pinned `dpRank`; throws `invalid-dp-rank` (no such slot) or `unavailable` (not serving). */
function pinnedSlot(g: GroupState, dpRank: number): RankSlot {
  const slot = g.ranks.slot(dpRank);
  if (slot === undefined) {
    const validRanks = g.ranks.slots.map((s) => s.index);
    throw new EngineClientError(
      'invalid-dp-rank',
      `DP rank ${String(dpRank)} does not exist: this engine group has ${g.ranks.size} rank(s) (valid ranks: ${validRanks.join(', ')})`,
      { dpRank, engineCount: g.ranks.size, validRanks },
    );
  }
  if (slot.liveness.state !== 'ready' || !g.canServe()) {
    const why =
      slot.liveness.state !== 'ready'
        ? `it is ${slot.liveness.state}`
        : `its lockstep group is not serving (${g.ranks.describe()})`;
    throw new EngineClientError('unavailable', `DP rank ${dpRank} cannot take requests now: ${why}`, { dpRank });
  }
  return slot;
}

/**
 * Add the request to `inflight[rank]`, start its service-rate accounting, arm the rank's timers if it was idle
 * (14.8), tell the policy (and, for a rank the policy `chosen`, keep its cached-token prediction in the sample). If any of that throws, the slot is released again and the error rethrown (the submit's
 * rollback releases only a request whose rank it has recorded, which happens after this returns).
 */
function reserve(g: GroupState, rank: number, request: GenerateRequest, chosen: boolean): void {
  g.routing.reserve(rank, request.requestId);
  if (g.routing.inFlightCount(rank) === 1) g.markHeard(rank, g.now());
  try {
    const sample = g.routing.rates.dispatched(rank, request.requestId, request.promptTokenIds.length, g.now());
    const entry = g.registry.get(request.requestId); // registered before selection (section 3 step 2)
    if (entry !== undefined) entry.service = sample;
    g.syncRankTimers(rank, false);
    g.policy.onDispatch?.(rank, request);
    // The policy's expectation of the chosen rank's cache, checked against the engine's `cached_tokens`.
    if (chosen) sample.predictedCachedTokens = g.policy.predictedCachedTokens?.(request) ?? null;
  } catch (err) {
    // The caller's rollback releases only a request whose engineIndex is set, which happens after this returns:
    // undo the reservation here, so a throw (a malformed request, a policy's onDispatch) leaves no slot held.
    g.release(rank, [request.requestId]);
    throw err;
  }
}
