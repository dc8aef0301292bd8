/**
 * Ranks joining, rejoining, going silent or stalling and coming back (issue #8, issue 26; rank-liveness.ts): the
 * link's handshake listener and the handlers of the group's timers (rank-timers.ts). Each handler is one synchronous
 * step over the group state, except `admitHello`, which first probes a live holder of the claimed index.
 */
import { EngineClientError } from './errors.js';
import type { FailureScope } from './failure-scope.js';
import type { GroupState } from './group-state.js';
import type { ConnectedEngine, LinkListener } from './link.js';
import { PROBE_SCHEDULE_MS, delay } from './probes.js';
import { isConnected, isRevivable } from './rank-liveness.js';
import type { RankSlot } from './rank-table.js';

/** The rank lifecycle of one group (see the module docs); listens to the group's timers from construction. */
export class RankLifecycle implements LinkListener {
  /** The dead slots with a revival probe in flight. */
  private readonly revivalProbing = new Set<number>();

  constructor(
    private readonly g: GroupState,
    private readonly scope: FailureScope,
  ) {
    g.timers.on('group-silent', () => this.groupSilent());
    g.timers.on('rank-silent', (rank) => this.rankSilent(rank));
    g.timers.on('rank-stalled', (rank) => this.rankStalled(rank));
    g.timers.on('probe-round', (last) => this.probeRound(last));
    g.timers.on('revival-due', () => this.probeDeadRanks());
  }

  /**
   * A HELLO for `index` (link listener): a slot that is not connected lets it in at once; a connected holder is probed
   * first (probes.ts): refused with EHOSTUNREACH (or stuck past the send timeout) → it is dead and the newcomer is let
   * in; still answering after every round → the newcomer is refused (two engines with one index).
   */
  async admitHello(index: number): Promise<boolean> {
    const { g } = this;
    const slot = g.ranks.slot(index);
    if (slot === undefined || g.registry.closed) return false;
    if (isConnected(slot.liveness.state)) {
      const epoch = slot.liveness.epoch;
      const holderGone = () => !isConnected(slot.liveness.state) || slot.liveness.epoch !== epoch;
      let elapsed = 0;
      for (const ms of PROBE_SCHEDULE_MS) {
        await delay(ms - elapsed); // the rounds go out at the schedule's offsets after the HELLO
        elapsed = ms;
        if (g.registry.closed) return false;
        if (holderGone()) break;
        await this.scope.sender.probe(
          slot,
          `liveness probe (empty ABORT) to DP rank ${index}, whose engine index a new HELLO claims`,
        );
        if (holderGone()) break;
      }
      if (!holderGone()) return false;
    }
    g.transition(index, { kind: 'hello' });
    return true;
  }

  /**
   * A rank completed its handshake (link listener): a fresh process, so a fresh stored load, fresh timers, an empty
   * in-flight set and nothing remembered by the policy (`forgetRank`); a live holder of the index is retired first
   * (cause `replaced`). A lockstep group may start serving again here. An adopted rank (`engine.adopted`: a running
   * engine of the previous gateway, link.ts) joins the same way, with the recorded ready response; its rows for
   * requests this gateway never issued are ABORTed once each (output-faults.ts `foreignRows`).
   */
  joined(engine: ConnectedEngine): void {
    const { g } = this;
    const index = engine.engineIndex;
    const slot = g.ranks.slot(index);
    if (slot === undefined || g.registry.closed) return;
    if (isConnected(slot.liveness.state)) {
      this.scope.rankDied(
        index,
        'replaced',
        `DP rank ${index} was replaced: a new engine process joined with its engine index`,
      );
    }
    const rejoin = slot.liveness.epoch > 0;
    if (rejoin) slot.counters.rejoins++;
    this.scope.noteJoined(index);
    g.forgetRank(index, rejoin);
    if (engine.adopted === true) g.foreign.adopt(index);
    slot.engine = engine;
    // A new process may speak another version of the wire (vLLM: its EngineCoreOutput layout).
    g.protocol.noteRankJoined?.(index, engine.ready);
    g.waves.noteRank(engine.ready);
    const r = engine.ready;
    g.logger.info(
      {
        engineIndex: index,
        maxModelLen: r.maxModelLen,
        numGpuBlocks: r.numGpuBlocks,
        dataParallelRank: r.dataParallelRank,
        dataParallelSize: r.dataParallelSize,
        readyForm: r.form,
        vllmVersion: r.vllmVersion,
        dtype: r.dtype,
        adopted: engine.adopted === true,
      },
      engine.adopted === true
        ? `DP rank ${index} adopted from the previous gateway's handshake`
        : rejoin
          ? `DP rank ${index} rejoined`
          : `DP rank ${index} joined`,
    );
    g.notify('joined', engine, rejoin);
    g.transition(index, { kind: 'joined' });
    g.settleJoinWaiters();
  }

  /** A rank's handshake did not complete (link listener). */
  joinFailed(index: number, reason: string): void {
    this.g.logger.warn({ engineIndex: index, reason }, `DP rank ${index} did not finish its handshake`);
    this.g.transition(index, { kind: 'handshake-failed' });
  }

  /**
   * Probe dead ranks that may still be the same working process (rank-liveness.ts `isRevivable`; issue 26), every
   * revival tick while there are any: the input ROUTER refuses a send to an identity no peer holds (probes.ts), so a
   * probe it accepts means the rank's engine is connected again, and it is back in rotation (`revive`). A rank whose
   * process is gone keeps failing the probe at no cost; one that says HELLO leaves `dead` and is not probed.
   */
  private probeDeadRanks(): void {
    const { g } = this;
    if (g.registry.closed) return;
    const candidates = g.ranks.slots.filter(
      (s) => s.liveness.state === 'dead' && isRevivable(s.liveness.cause) && s.engine !== null,
    );
    if (candidates.length === 0) return;
    for (const slot of candidates) {
      if (this.revivalProbing.has(slot.index) || !this.mayRevive(slot)) continue;
      this.revivalProbing.add(slot.index);
      const epoch = slot.liveness.epoch;
      void this.scope.sender.probeDead(slot).then((answered) => {
        this.revivalProbing.delete(slot.index);
        if (answered && slot.liveness.state === 'dead' && slot.liveness.epoch === epoch && !g.registry.closed)
          this.revive(slot.index);
      });
    }
    g.timers.scheduleRevival();
  }

  /**
   * Whether a dead `slot` may be probed back now: a rank found dead by its silence (`rank-silent`) holds its socket
   * while hung (SIGSTOP), so a probe is accepted into the pipe although nobody reads it; it must first have sent a
   * batch since it died. The other revivable causes lost the identity (or were never the rank's fault): a probe the
   * ROUTER accepts is proof enough.
   */
  private mayRevive(slot: RankSlot): boolean {
    return slot.liveness.cause !== 'rank-silent' || this.g.heardWhileDead.has(slot.index);
  }

  /** A dead rank answers again as the same process: back in rotation, told to drop what it was failed with. */
  private revive(index: number): void {
    const { g } = this;
    const slot = g.ranks.slot(index)!;
    const cause = slot.liveness.cause;
    g.stats.revivals++;
    slot.counters.revivals++;
    g.logger.warn(
      { engineIndex: index, deathCause: cause },
      `DP rank ${index} answers again (its engine is connected to the input socket): back in rotation`,
    );
    g.routing.forgetRank(index);
    g.markHeard(index, g.now());
    this.scope.revived(index);
    g.transition(index, { kind: 'revived' });
  }

  /** A rank held requests and sent nothing for the silence timeout (14.8): it is dead (cause `rank-silent`). */
  private rankSilent(rank: number): void {
    const { g } = this;
    const held = g.routing.inFlightCount(rank);
    if (g.registry.closed || held === 0) return;
    this.scope.rankDied(
      rank,
      'rank-silent',
      `DP rank ${rank} sent no output for ${g.silenceTimeoutMs} ms while holding ${held} in-flight request(s) (per-rank silence watchdog)`,
    );
  }

  /**
   * A ready rank held requests and sent nothing for the stall timeout (issue #8 part 3): `FailureScope.stalled` takes
   * it out of rotation and ends its requests.
   */
  private rankStalled(rank: number): void {
    const { g } = this;
    const held = g.routing.inFlightCount(rank);
    const slot = g.ranks.slot(rank);
    if (g.registry.closed || held === 0 || slot?.liveness.state !== 'ready') return;
    const error = new EngineClientError(
      'rank-stalled',
      `DP rank ${rank} stalled: it sent no output for ${g.stallTimeoutMs} ms while holding ${held} in-flight request(s) ` +
        '(--rank-stall-timeout-ms); it is out of rotation until it speaks again',
      { dpRank: rank },
    );
    this.scope.stalled(slot, error);
  }

  /** One probe round (after a `disconnect` hint or ENGINE_CORE_DEAD); the last one settles unattributed sentinels. */
  private probeRound(last: boolean): void {
    const { g } = this;
    if (g.registry.closed) return;
    const probes = g.ranks
      .connected()
      .map((s) => this.scope.sender.probe(s, `liveness probe (empty ABORT) to DP rank ${s.index}`));
    if (last)
      void Promise.allSettled(probes).then(() =>
        this.scope.settleSentinels(PROBE_SCHEDULE_MS[PROBE_SCHEDULE_MS.length - 1]!),
      );
  }

  /** Requests were registered and the whole group sent nothing for the silence timeout: a group-scope failure. */
  private groupSilent(): void {
    const { g } = this;
    const live = g.registry.size;
    if (g.registry.closed || live === 0) return;
    this.scope.failGroup(
      new EngineClientError(
        'engine-dead',
        `no engine output for ${g.silenceTimeoutMs} ms while ${live} request(s) were in flight (group silence watchdog)`,
      ),
      'watchdog',
      true,
    );
  }
}
