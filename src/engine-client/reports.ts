/**
 * What the engine client reports about its group to /health, /ready, /metrics and the dashboard (gateway.md 4.2,
 * 15.3; issue #8 part 7; agreed interface C): one `RankState` per rank slot, the group's `GroupStatus`, and the
 * client-wide `ClientStats`. Plain shapes, the functions that build a `RankState` and fresh `ClientStats`, and the
 * log line of a sole-client guard transition.
 */
import type { LoraAdapterCounts } from '../protocols/types.js';
import type { Logger } from 'pino';
import type { EngineLoad } from '../protocols/types.js';
import type { RankStateName } from './rank-liveness.js';
import type { RankSlot } from './rank-table.js';
import type { SoleClientGuard, StoreLoadResult } from './routing-state.js';
import type { RoutingPrecision } from './service-rates.js';
import type { KvCacheView, KvCacheViewCounters } from './kv-cache-view.js';
import type { FlowControlStats } from './flow-control.js';
import type { KvIndexCounters } from './kv-block-index.js';
import type { KvEventSubscriberCounters } from '../transport/kv-event-subscriber.js';

/**
 * One rank slot's state for /metrics, /health and the dashboard (gateway.md section 15.3; interface C):
 * - `state`: liveness (`joining` | `ready` | `stalled` | `dead`); `cause`: why it is dead (rank-liveness.ts
 *   `DeathCause`) or `stall`, else null.
 * - `inFlight`: size of the in-flight set (requests routed there and not yet retired); 0 when idle.
 * - `load`: the stored load (a copy; raw last report, except that the release clamp may have zeroed the queue
 *   counts), or null before the first report of the current process.
 * - `dispatchedPinned` / `dispatchedUnpinned`: successful submits to this rank, pinned / scored.
 * - `clampEvents`: how often the release clamp turned non-zero running/waiting counts into 0 (section 10.2).
 * - `abortsSent`: request ABORTs accepted for this rank; `rejoins`: handshakes after the first; `stalls`: stall
 *   events; `deaths`: deaths by cause; `batches`: output messages received that name the rank; `revivals`: times it was found dead and then answered again
 *   as the same process (issue 26).
 * - `loadAgeMs`: ms since `load` was stored (section 14.1), null before the first report.
 * - `soleClientGuard`: true while the rank's reports show another client's work, so the release clamp is
 *   suspended for it (section 14.3); `guardEngagements` / `guardDisengagements` count the transitions.
 * - `aborting`: requests this client ABORTed on the rank that its reports may still count (routing-state.ts
 *   `releaseAborted`; issue 26).
 * - `engineErrors`: outputs of the rank that broke the output contract, by kind (output-contract.ts, issue 26 part
 *   4): `max-tokens-overrun` (tokens past a request's max_tokens: cut, the rest ABORTed), `invalid-token-id` (a token
 *   id outside the tokenizer's vocabulary: the request failed).
 * The last six are always filled by `EngineClient`; optional so other `RankState` sources (fakes) need not.
 */
export interface RankState {
  engineIndex: number;
  state: RankStateName;
  cause: string | null;
  inFlight: number;
  load: EngineLoad | null;
  dispatchedPinned: number;
  dispatchedUnpinned: number;
  clampEvents: number;
  abortsSent: number;
  rejoins: number;
  stalls: number;
  deaths: Record<string, number>;
  batches?: number;
  revivals?: number;
  loadAgeMs?: number | null;
  soleClientGuard?: boolean;
  guardEngagements?: number;
  guardDisengagements?: number;
  aborting?: number;
  engineErrors?: Record<string, number>;
  /** The LoRA adapters the rank's last report counted requests for (vLLM); absent when it reported none. */
  loraAdapters?: LoraAdapterCounts;
}

/**
 * A group's serving status (/health, /ready): `starting` (it has never been able to serve: a dense group before its
 * first rank joined, a lockstep group before all did), `ok` (serving, every rank ready), `degraded` (serving, some
 * rank not ready), `unavailable` (it served before and cannot now, or the client is closed).
 */
export type GroupStatus = 'starting' | 'ok' | 'degraded' | 'unavailable';

/**
 * Client-wide counters (gateway.md section 15.3, "wire health"). A live object: read it, never write it.
 * - `decodeErrors`: undecodable output messages.
 * - `abortsSent`: request ABORT messages the link accepted (probes not counted).
 * - `rankMismatches`: batch rows (or finished ids) naming a rank other than the one their request was sent to (14.6):
 *   dropped, and the rows' ids ABORTed at the rank the batch names (issue 26).
 * - `failures`: group-scope failures by cause: `watchdog` (group silence), `output-closed`, `output-error`,
 *   `output-ended`, and for a lockstep group the cause of the rank death or stall that failed it.
 * - `unattributedSentinels`: ENGINE_CORE_DEAD frames that no vanished identity and no quiet rank explained; counted
 *   and ignored (failure-scope.ts `settleSentinels`, issue 26).
 * - `decodeSuspects`: ranks taken out of rotation because they held requests and sent nothing decodable while
 *   undecodable output arrived (issue 26).
 * - `revivals`: dead ranks that answered again and came back into rotation (issue 26).
 * - `rankDeaths`: rank deaths by cause (rank-liveness.ts `DeathCause`).
 * - `orphanOutputs`: output rows for requests their rank no longer owns (failed by a death, stall or group failure
 *   while the rank kept working); each such id is ABORTed once.
 * - `unknownOutputs`: output rows for request ids this client never issued, or let go so long ago it forgot them
 *   (registry.ts `knows`); dropped, logged at a bounded rate (output-contract.ts, issue 26 part 4). Late rows for
 *   requests retired lately (a client cancel) are neither.
 * - `handshakeRejected`: refused handshake messages by reason (from the link).
 */
export interface ClientStats {
  decodeErrors: number;
  abortsSent: number;
  rankMismatches: number;
  failures: Record<string, number>;
  rankDeaths: Record<string, number>;
  orphanOutputs: number;
  unknownOutputs: number;
  unattributedSentinels: number;
  decodeSuspects: number;
  revivals: number;
  readonly handshakeRejected: Readonly<Record<string, number>>;
  /** The policy's cache predictions against the engines' reports (service-rates.ts; a live object). */
  readonly routingPrecision: Readonly<RoutingPrecision>;
  /** The group's KV-event counters (kv-cache-view.ts and its index), or null without KV events (live objects). */
  readonly kvEvents: {
    readonly view: Readonly<KvCacheViewCounters>;
    readonly index: Readonly<KvIndexCounters>;
    readonly streams: Readonly<KvEventSubscriberCounters>;
  } | null;
  /** Flow control's queue and outcomes (flow-control.ts; a live object), or null when it is off. */
  readonly flowControl: Readonly<FlowControlStats> | null;
}

/** What the routing state knows about a rank (routing-state.ts), as `rankStateOf` reports it. */
export interface RankRouting {
  inFlight: number;
  /** A copy of the stored load, null before a report. */
  load: EngineLoad | null;
  loadAgeMs: number | null;
  guard: SoleClientGuard;
  aborting: number;
}

/** The `RankState` of `slot`, given what the routing state knows about it. Pure. */
export function rankStateOf(slot: RankSlot, r: RankRouting): RankState {
  const c = slot.counters;
  return {
    engineIndex: slot.index,
    state: slot.liveness.state,
    cause: slot.liveness.cause,
    inFlight: r.inFlight,
    load: r.load,
    dispatchedPinned: c.pinned,
    dispatchedUnpinned: c.unpinned,
    clampEvents: c.clamps,
    abortsSent: c.abortsSent,
    rejoins: c.rejoins,
    stalls: c.stalls,
    deaths: { ...c.deaths },
    batches: c.batches,
    revivals: c.revivals,
    loadAgeMs: r.loadAgeMs,
    soleClientGuard: r.guard.engaged,
    guardEngagements: r.guard.engagements,
    guardDisengagements: r.guard.disengagements,
    aborting: r.aborting,
    engineErrors: { ...c.engineErrors },
  };
}

/** Fresh client-wide counters over the link's live `handshakeRejected` record. */
export function newClientStats(
  handshakeRejected: Readonly<Record<string, number>>,
  routingPrecision: Readonly<RoutingPrecision>,
  kvCache: Pick<KvCacheView, 'counters' | 'index' | 'streams'> | null = null,
  flowControl: Readonly<FlowControlStats> | null = null,
): ClientStats {
  return {
    decodeErrors: 0,
    abortsSent: 0,
    rankMismatches: 0,
    failures: {},
    rankDeaths: {},
    orphanOutputs: 0,
    unknownOutputs: 0,
    unattributedSentinels: 0,
    decodeSuspects: 0,
    revivals: 0,
    handshakeRejected,
    routingPrecision,
    kvEvents:
      kvCache === null ? null : { view: kvCache.counters, index: kvCache.index.counters, streams: kvCache.streams },
    flowControl,
  };
}

/**
 * One log line when the sole-client guard of `rank` changed on a stored report (dp-routing.md 14.3; routing-state.ts);
 * nothing otherwise (the counts are in `rankStates()` and /metrics).
 */
export function logGuardTransition(logger: Logger, rank: number, r: StoreLoadResult): void {
  if (r.transition === 'engaged') {
    logger.warn(
      { engineIndex: rank, ...r.evidence },
      `DP rank ${rank} reports ${r.evidence.reported} requests but this gateway has ${r.evidence.own} in flight there: ` +
        'another client is using the engine; zero-on-empty suspended for this rank, its stored load ages out instead (dp-routing.md 14.3)',
    );
  } else if (r.transition === 'disengaged') {
    logger.info(
      { engineIndex: rank, ...r.evidence },
      `DP rank ${rank} reports agree with this gateway's in-flight count again; zero-on-empty resumed (dp-routing.md 14.3)`,
    );
  }
}
