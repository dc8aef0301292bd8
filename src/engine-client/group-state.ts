/**
 * The state of one engine group and the synchronous steps that change it (dp-routing.md 12.3; reference: SMG
 * `engine_zmq_client`, a registry struct over which the dispatcher runs). Everything the engine client's parts share
 * lives here: the request registry, the routing state (in-flight sets, stored loads, service rates), the rank table
 * and each rank's liveness, the wave clock, the counters, the quiet clock of each rank, and the group's timers.
 *
 * The concurrency model is in the shape of this module: every method is one synchronous step that takes no callback
 * and returns no promise (eslint.config.js forbids `async`, `await`, `.then`, promises and callback parameters here), so a state
 * change that belongs together (release + clamp + timers; a liveness transition + the serving flag + the wave clock)
 * cannot be split by another request. The steps that span parts are built from these: select + reserve
 * (placement.ts), store load + route + release + clamp (apply-batch.ts), a rank's death or stall (failure-scope.ts).
 */
import { UtilityCalls } from './utility-calls.js';
import type { LoraAdapterCounts } from '../protocols/types.js';
import type { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import { pino, type Logger } from 'pino';
import type { EngineProtocol } from '../protocols/types.js';
import { positiveMs } from '../option-checks.js';
import {
  DEFAULT_RANK_STALL_TIMEOUT_MS,
  DEFAULT_SILENCE_TIMEOUT_MS,
  type EngineClientOptions,
} from './client-options.js';
import { DeliveryQueue } from './delivery-queue.js';
import { EngineClientError } from './errors.js';
import { FlowGate, rankRoom } from './flow-control.js';
import { ForeignRequests } from './foreign-requests.js';
import type { ConnectedEngine } from './link.js';
import { createLoadPolicy, type DpPolicy } from './policy.js';
import { JoinWaiters } from './join-waiters.js';
import { isConnected, isRevivable, type LivenessEvent, type RankStateName } from './rank-liveness.js';
import { RankTable } from './rank-table.js';
import { RankTimers } from './rank-timers.js';
import { RequestRegistry, type RegistryEntry } from './registry.js';
import { newClientStats, type ClientStats, type GroupStatus } from './reports.js';
import { RoutingState } from './routing-state.js';
import { WaveClock } from './waves.js';

/** Events emitted by `EngineClient` (a typed node:events EventEmitter). */
export interface EngineClientEvents {
  /**
   * The group failed as a unit (its requests got `error`); emitted per group-scope failure. `cause`: what
   * `ClientStats.failures` counts it under (`watchdog`, `output-closed`, a lockstep rank's death cause, …).
   */
  failed: [error: EngineClientError, cause: string];
  /** A rank changed state (`cause`: why it died or stalled, else null). */
  rank: [engineIndex: number, state: RankStateName, cause: string | null];
  /** A rank completed its handshake (`rejoin`: not its slot's first); emitted before it takes requests. */
  joined: [engine: ConnectedEngine, rejoin: boolean];
}

/** One engine group's shared state (see the module docs). */
export class GroupState {
  readonly protocol: EngineProtocol;
  readonly logger: Logger;
  /** Monotonic clock in ms (stored loads' ages, quiet times). */
  readonly now: () => number;
  /** The unpinned selection policy. */
  readonly policy: DpPolicy;
  /** Whether a release that empties an in-flight set zeroes the rank's stored queue counts (dp-routing.md 10.3). */
  readonly releaseClamp: boolean;
  readonly silenceTimeoutMs: number;
  readonly stallTimeoutMs: number;
  readonly stats: ClientStats;
  readonly registry = new RequestRegistry();
  readonly routing = new RoutingState();
  readonly ranks: RankTable;
  readonly waves: WaveClock;
  readonly timers: RankTimers;
  /** Push-mode hand-offs, sliced (delivery-queue.ts); the routing state never waits for it. */
  readonly delivery: DeliveryQueue;
  /** Pending utility calls (utility-calls.ts): settled by the batch that answers them (apply-batch.ts). */
  readonly utility = new UtilityCalls();
  /** Per engine index: the LoRA adapters its last report counted requests for (vLLM scheduler stats). */
  readonly loraCounts = new Map<number, LoraAdapterCounts>();
  /** Adopted ranks' rows for the previous gateway's requests: ABORTed once each (foreign-requests.ts). */
  readonly foreign = new ForeignRequests();
  /** Dead ranks a decodable batch came from since they died (a `rank-silent` rank needs this to come back). */
  readonly heardWhileDead = new Set<number>();
  /**
   * Per engine index: when the rank last sent a decodable batch, or got a request while it held none, whichever is
   * later (ms); what `quietMs` measures from.
   */
  private readonly quietSince: Float64Array;
  /** Per engine index: `stats.decodeErrors` when `quietSince` was last set (undecodable messages since = the difference). */
  private readonly decodeErrorsAtQuiet: Float64Array;
  private serving = false;
  private everServed = false;
  /** Slot epochs when a lockstep group last failed (null: serving normally since). */
  private epochsAtFailure: Map<number, number> | null = null;
  /** Who waits for every slot to have joined once (the client's `whenAllJoined`). */
  readonly joinWaiters = new JoinWaiters();
  /** Flow control's gate (flow-control.ts), or null when it is off. */
  readonly gate: FlowGate | null;
  /** Flow control's per-rank in-flight target; null: each rank's `max_num_seqs`. */
  private readonly flowTarget: number | null;
  private closeReason: EngineClientError | null = null;

  /**
   * State for a group of `dpSize` rank slots from the client's options; `events` is the client, which emits what the
   * steps notify. Throws RangeError on a timeout that is not a positive number of ms.
   */
  constructor(
    opts: EngineClientOptions,
    private readonly events: EventEmitter<EngineClientEvents>,
  ) {
    this.silenceTimeoutMs = positiveMs('silenceTimeoutMs', opts.silenceTimeoutMs ?? DEFAULT_SILENCE_TIMEOUT_MS);
    this.stallTimeoutMs = positiveMs('rankStallTimeoutMs', opts.rankStallTimeoutMs ?? DEFAULT_RANK_STALL_TIMEOUT_MS);
    this.protocol = opts.protocol;
    this.policy = opts.policy ?? createLoadPolicy();
    this.releaseClamp = this.policy.releaseClamp ?? true;
    this.now = opts.now ?? (() => performance.now());
    this.logger = opts.logger ?? pino({ level: 'silent' });
    this.delivery = new DeliveryQueue(opts.delivery);
    const flow = opts.flowControl ?? null;
    this.flowTarget = flow?.maxInFlightPerRank ?? null;
    this.gate = flow === null ? null : new FlowGate(flow, (band) => this.flowRoom(band));
    this.stats = newClientStats(
      opts.link.handshakeRejected,
      this.routing.rates.precision,
      opts.kvCache ?? null,
      this.gate?.stats ?? null,
    );
    this.ranks = new RankTable(opts.link.dpSize);
    this.quietSince = new Float64Array(opts.link.dpSize);
    this.decodeErrorsAtQuiet = new Float64Array(opts.link.dpSize);
    this.waves = new WaveClock([], opts.lockstep ?? 'auto');
    this.timers = new RankTimers(this.silenceTimeoutMs, this.stallTimeoutMs);
  }

  /**
   * The requests of `band` the ready ranks can still take before the group is saturated for it (flow-control.ts
   * `rankRoom`, summed): each rank's in-flight target is `maxInFlightPerRank`, else its `max_num_seqs` (0 = unknown:
   * no target). The most urgent band (0) may fill a rank up to its `max_num_seqs` when that is larger: a target below
   * the engine's batch keeps that many slots per rank for critical requests, which then start without waiting.
   */
  flowRoom(band: number): number {
    let room = 0;
    for (const s of this.ranks.inState('ready')) {
      const seqs = s.engine?.ready.maxNumSeqs ?? 0;
      let target = this.flowTarget ?? (seqs > 0 ? seqs : null);
      if (band === 0 && target !== null && seqs > target) target = seqs;
      room += rankRoom(this.routing.inFlightCount(s.index), this.routing.load(s.index), target);
    }
    return room;
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Queries

  /** Whether an unpinned request can be placed now: a dense group with a ready rank, a lockstep group all ready. */
  canServe(): boolean {
    if (this.registry.closed) return false;
    return this.waves.lockstep ? this.ranks.allReady() : this.ranks.anyReady();
  }

  /** The group's serving status (see `GroupStatus`). */
  status(): GroupStatus {
    if (this.canServe()) return this.ranks.allReady() ? 'ok' : 'degraded';
    return this.everServed || this.registry.closed ? 'unavailable' : 'starting';
  }

  /**
   * How long `rank` has held requests without a decodable batch naming it, in ms (0 when it holds none or is out of
   * range): from its last batch, or from when it got a request while holding none, whichever is later.
   */
  quietMs(rank: number, now = this.now()): number {
    if (this.routing.inFlightCount(rank) === 0 || rank < 0 || rank >= this.quietSince.length) return 0;
    return Math.max(0, now - this.quietSince[rank]!);
  }

  /** Undecodable messages that arrived since `rank`'s quiet time started (`markHeard`). */
  decodeErrorsWhileQuiet(rank: number): number {
    return this.stats.decodeErrors - (this.decodeErrorsAtQuiet[rank] ?? 0);
  }

  /** `client-closed` naming what closed the client (a failure, or the shutdown message). */
  clientClosedError(): EngineClientError {
    const base = 'engine client is shutting down';
    const reason = this.closeReason;
    let suffix = '';
    if (reason !== null && reason.kind !== 'client-closed') suffix = ` (engine client failed: ${reason.message})`;
    else if (reason !== null && reason.message !== base) suffix = ` (${reason.message})`;
    return new EngineClientError('client-closed', `${base}${suffix}`, { cause: reason ?? undefined });
  }

  // ---------------------------------------------------------------------------------------------------------------
  // In-flight sets and their timers (dp-routing.md sections 5, 10, 14.8)

  /**
   * `release(rank, ids)` with the clamp setting of the policy; counts clamp events; disarms the rank's timers when its
   * in-flight set empties. `aborted`: the gateway ABORTs these ids on the rank, whose reports may count them until it
   * applies the ABORT (`RoutingState.releaseAborted`, dp-routing.md 14.3).
   */
  release(rank: number, ids: Iterable<string>, aborted = false): void {
    const clamped = aborted
      ? this.routing.releaseAborted(rank, ids, this.releaseClamp)
      : this.routing.release(rank, ids, this.releaseClamp);
    if (clamped) {
      const slot = this.ranks.slot(rank);
      if (slot) slot.counters.clamps++;
    }
    this.syncRankTimers(rank, false);
    this.gate?.noteFreed();
  }

  /**
   * Remove `entry` if it is still live and release its slot on the recorded rank (`aborted`: the caller ABORTs it
   * there). Returns whether it was live.
   */
  retire(entry: RegistryEntry, aborted = false): boolean {
    if (!this.registry.removeEntry(entry)) return false;
    if (entry.engineIndex !== null) this.release(entry.engineIndex, [entry.requestId], aborted);
    this.touchGroupTimer(false);
    return true;
  }

  /** Synchronous rollback of a failed submit (section 3, section 12.3 rule 5); `aborted`: the caller ABORTs it. */
  rollback(entry: RegistryEntry, err: unknown, aborted = false): void {
    this.retire(entry, aborted);
    entry.stream.fail(err instanceof Error ? err : new Error(String(err)));
  }

  /** Empty every in-flight set and stop the request timers (a group-scope failure). */
  clearInFlight(): void {
    this.routing.clearInFlight();
    this.timers.stopRequestTimers();
  }

  /** `rank` sent a decodable batch, or got a request while holding none, at `now`: its quiet time starts over. */
  markHeard(rank: number, now: number): void {
    if (rank < 0 || rank >= this.quietSince.length) return;
    this.quietSince[rank] = now;
    this.decodeErrorsAtQuiet[rank] = this.stats.decodeErrors;
  }

  /**
   * The group watchdog is armed while requests are registered; `reset` restarts it (every batch or decode error).
   * Queued aborts and `disconnect` hints do not restart it (14.8: client cancels would keep a dead engine looking
   * alive).
   */
  touchGroupTimer(reset: boolean): void {
    this.timers.touchGroup(!this.registry.closed && this.registry.size > 0, reset);
  }

  /**
   * `rank`'s timers: armed while the rank is connected and holds in-flight requests (the stall timer only while it is
   * `ready`); `reset`: the rank was just heard from.
   */
  syncRankTimers(rank: number, reset: boolean): void {
    const state = this.ranks.slot(rank)?.liveness.state;
    const live =
      !this.registry.closed && state !== undefined && isConnected(state) && this.routing.inFlightCount(rank) > 0;
    this.timers.touchRank(rank, live, state === 'ready', reset);
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Rank liveness (rank-liveness.ts)

  /**
   * Apply a liveness event to `index`'s slot: logged and emitted (`rank`) when the state changed; a rank found dead
   * that may come back schedules the revival probes; the group starting to serve again rebuilds a lockstep wave
   * clock. Returns whether the state changed.
   */
  transition(index: number, event: LivenessEvent): boolean {
    const previous = this.ranks.apply(index, event);
    if (previous === null) return false;
    const l = this.ranks.slot(index)!.liveness;
    const level = l.state === 'dead' || l.state === 'stalled' ? 'warn' : 'info';
    this.logger[level](
      { engineIndex: index, from: previous, to: l.state, cause: l.cause, epoch: l.epoch },
      `DP rank ${index}: ${previous} → ${l.state}`,
    );
    if (l.state === 'dead') this.heardWhileDead.delete(index);
    if (l.state === 'dead' && isRevivable(l.cause) && !this.registry.closed) this.timers.scheduleRevival();
    const wasServing = this.serving;
    this.serving = this.canServe();
    if (this.serving) this.everServed = true;
    if (this.serving && !wasServing) this.rebuildWaves();
    this.notify('rank', index, l.state, l.cause);
    if (l.state === 'ready') this.gate?.noteFreed();
    // Nothing can serve the waiting requests now: they end as a submit would (503 + Retry-After), not at their deadline.
    if (!this.serving && wasServing) {
      this.gate?.closeAll(
        new EngineClientError(
          'unavailable',
          `no DP rank of this engine group can take requests now (${this.ranks.describe()}); the request waited in the flow-control queue`,
        ),
      );
    }
    return true;
  }

  /**
   * Drop what belonged to `index`'s previous process: stored load, in-flight set, timers, adopted-rank ids, and (unless
   * `tellPolicy` is false: the slot's first join, with nothing to forget) the policy's state (`forgetRank`).
   */
  forgetRank(index: number, tellPolicy = true): void {
    this.routing.forgetRank(index);
    this.foreign.forget(index);
    this.timers.stopRank(index);
    this.loraCounts.delete(index);
    // A utility call to the gone process will never be answered: end it now, not at its deadline.
    this.utility.failRank(
      index,
      new EngineClientError('engine-dead', `DP rank ${index} went away before it answered`, { dpRank: index }),
    );
    if (tellPolicy) this.policy.forgetRank?.(index);
  }

  /** Resolve the `whenAllJoined` waiters once every slot has joined at least once. */
  settleJoinWaiters(): void {
    if (this.ranks.allJoinedOnce()) this.joinWaiters.resolveAll();
  }

  /** A lockstep group failed (a rank died or stalled): remember the slot epochs, for `rebuildWaves`. */
  noteLockstepFailure(): void {
    this.epochsAtFailure ??= new Map(this.ranks.slots.map((s) => [s.index, s.liveness.epoch]));
  }

  /**
   * A lockstep group serves again (every rank ready): rebuild its wave clock (dp-routing.md 13.4). Ranks ignore a
   * START_DP_WAVE naming a lower wave than their own, and a surviving rank keeps its wave number, so while any rank of
   * the failed group survives the clock must never move backwards: it is kept (a fresh rank starts at wave 0 and
   * accepts any wave, so clock + 1 reaches both). Only when every rank is a new process (its slot epoch moved past the
   * one at the failure) does the clock restart at 0, like a group that just started.
   */
  private rebuildWaves(): void {
    const at = this.epochsAtFailure;
    if (!this.waves.lockstep || at === null) return;
    this.epochsAtFailure = null;
    const allFresh = this.ranks.slots.every((s) => s.liveness.epoch > (at.get(s.index) ?? 0));
    if (allFresh) this.waves.reset();
    this.logger.info(
      { waveClock: this.waves.value, allFresh },
      allFresh
        ? 'lockstep group rebuilt from fresh processes: wave clock restarted at 0'
        : 'lockstep group serving again: wave clock kept (surviving ranks keep their wave numbers)',
    );
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Closing and events

  /**
   * Close the registry for good (`reason`: what `clientClosedError` then names) and return the entries that were
   * live; every in-flight set empties, every timer stops and the `whenAllJoined` waiters are rejected. The entries'
   * streams are the caller's to end. Null when already closed.
   */
  closeForGood(reason: EngineClientError): RegistryEntry[] | null {
    if (this.registry.closed) return null;
    this.closeReason = reason;
    const entries = this.registry.closeAndDrain();
    this.routing.clearInFlight();
    this.timers.stopAll();
    this.joinWaiters.rejectAll(this.clientClosedError());
    this.gate?.closeAll(this.clientClosedError());
    return entries;
  }

  /** Emit `event` to the client's listeners; a listener that throws is logged, never breaks the group. */
  notify<E extends keyof EngineClientEvents>(event: E, ...args: EngineClientEvents[E]): void {
    try {
      // `as never`: TypeScript cannot relate a generic E's tuple to EventEmitter's conditional parameter type.
      this.events.emit(event, ...(args as never));
    } catch (err) {
      this.logger.error({ err }, `a '${event}' listener threw`);
    }
  }
}
