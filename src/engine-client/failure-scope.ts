/**
 * Failure scope of one engine group (issue #8 part 1; dp-routing.md 6, 13, 14.8): what happens to requests, ranks and
 * the wave clock when a rank dies or stalls or the group fails as a unit. The engine client (client.ts) detects the
 * failures and calls in here; each method is one synchronous step (dp-routing.md 12.3), so no request can be placed
 * on a rank halfway through its death.
 *
 * - A dense rank (TokenSpeed; vLLM without lockstep) is its own process: when it dies only the requests it holds fail
 *   (no ABORT: it is gone), its per-process state is dropped and it leaves the scoring set; when it stalls its
 *   requests end, ABORTs for them are queued to it and it is out of rotation until it speaks.
 * - A lockstep (MoE) group steps together: any rank's death or stall fails every request of the group; every rank
 *   still connected gets an ABORT for what it held; the wave clock is rebuilt when the group serves again
 *   (group-state.ts `rebuildWaves`).
 * - Group scope (`failGroup` with `ranksDie`): every request fails and every rank is marked dead, as SMG rebuilds its
 *   whole client; for faults nobody can be blamed for.
 * - Requests the gateway ended while their rank may still emit rows for them are remembered (`disowned`, bounded): a
 *   later row for one is dropped, counted and ABORTed once (`orphanRow`); a dead rank that answers again gets one
 *   ABORT for all of them (`revived`); a new process of the rank forgets them (`noteJoined`).
 * - ENGINE_CORE_DEAD names no rank (engine-wire.md 1.7): `noteSentinel` counts it and the next rank found unreachable
 *   is blamed for it (`sendFailed`). A rank that exits cleanly pushes the sentinel before it closes its sockets, but
 *   the gateway may see its identity vanish first (the sentinel comes on the shared output socket, read behind other
 *   batches): a sentinel read within the probe window after such a death is tied to that rank (`noteSentinel`),
 *   unless a new process of that rank joined since (`noteJoined`). A sentinel no vanished identity explains by the
 *   last probe round never fails the group (issue 26: any process that reaches the socket can push one):
 *   `settleSentinels` takes out of rotation, as stalled, each rank that holds requests and sent nothing since the
 *   sentinel (the likely sender: a dying engine that still holds its sockets), and otherwise only counts it.
 */
import type { EngineProtocol } from '../protocols/types.js';
import { EngineClientError, describeError } from './errors.js';
import type { GroupState } from './group-state.js';
import type { EngineLink } from './link.js';
import { PROBE_SCHEDULE_MS, classifySendError, unrefTimer } from './probes.js';
import { isConnected, type DeathCause } from './rank-liveness.js';
import { RankSender, type SendFailureSink } from './rank-sender.js';
import type { RankSlot } from './rank-table.js';
import type { RegistryEntry } from './registry.js';

/** Request ids remembered as no longer owned by their rank (bounded; the oldest are forgotten first). */
const MAX_DISOWNED_IDS = 65_536;

/** The failure scope of one group (see the module docs). */
export class FailureScope implements SendFailureSink {
  /** The group's control sends (ABORT, probes, START_DP_WAVE, revival); a send that names a rank dead comes back here. */
  readonly sender: RankSender;
  /** ENGINE_CORE_DEAD frames not yet tied to a rank. */
  private pendingSentinels = 0;
  /** Ranks whose identity vanished in the last probe window with no sentinel tied to them (oldest first). */
  private readonly recentExits: number[] = [];
  /** Request id → the rank that held it when the gateway ended it. */
  private readonly disowned = new Map<string, number>();

  /** The failure scope of the group whose state is `g`, sending over `link` with `protocol`'s codec. */
  constructor(
    private readonly g: GroupState,
    link: EngineLink,
    protocol: EngineProtocol,
  ) {
    this.sender = new RankSender(link, protocol, g.stats, g.logger, this);
  }

  /** `SendFailureSink`: a send to `slot` timed out or was refused with EHOSTUNREACH (`sendFailed`). */
  rankUnusable(slot: RankSlot, what: string, err: unknown): EngineClientError {
    return this.sendFailed(slot, what, err);
  }

  /** `SendFailureSink`: the client's `client-closed` error once it is closed, else null. */
  closedError(): EngineClientError | null {
    return this.g.registry.closed ? this.g.clientClosedError() : null;
  }

  /** `SendFailureSink`: the revival request's id, sent outside the registry (its rows are the gateway's own). */
  untracked(requestId: string): void {
    this.g.registry.remember(requestId);
  }

  /**
   * A rank is dead: its requests get one engine-dead error naming the rank and `message` (in a lockstep group every
   * request of the group does); its process state is dropped; no ABORT goes to it. A no-op (returning the error) for a
   * rank that is not connected.
   */
  rankDied(index: number, cause: DeathCause, message: string, causeError?: unknown): EngineClientError {
    const { registry, ranks, stats, logger } = this.g;
    const error = new EngineClientError('engine-dead', message, { cause: causeError, dpRank: index });
    const slot = ranks.slot(index);
    if (slot === undefined || !isConnected(slot.liveness.state) || registry.closed) return error;
    slot.counters.deaths[cause] = (slot.counters.deaths[cause] ?? 0) + 1;
    stats.rankDeaths[cause] = (stats.rankDeaths[cause] ?? 0) + 1;
    logger.error({ engineIndex: index, cause, err: error }, `DP rank ${index} is dead (${cause})`);
    if (cause === 'peer-unreachable' || cause === 'replaced') this.noteExit(index);
    if (this.g.waves.lockstep) {
      this.g.noteLockstepFailure();
      this.g.transition(index, { kind: 'death', cause });
      this.forget(index);
      this.failGroup(error, cause, false);
      return error;
    }
    const entries = registry.onRank(index);
    for (const e of entries) {
      registry.removeEntry(e);
      this.disown(e.requestId, index); // no ABORT now (it is gone); one if it answers again (`revived`)
    }
    this.forget(index);
    this.g.transition(index, { kind: 'death', cause });
    for (const e of entries) e.stream.fail(error);
    this.g.syncRankTimers(index, false);
    this.g.touchGroupTimer(false);
    return error;
  }

  /**
   * A send to `slot` timed out or was refused with EHOSTUNREACH: the rank is dead (cause `send-timeout`,
   * `engine-core-dead` while an ENGINE_CORE_DEAD is unaccounted for, else `peer-unreachable`). Returns the error.
   */
  sendFailed(slot: RankSlot, what: string, err: unknown): EngineClientError {
    if (classifySendError(err) === 'timeout') {
      return this.rankDied(
        slot.index,
        'send-timeout',
        `DP rank ${slot.index} is not reading its input: ${what} timed out: ${describeError(err)}`,
        err,
      );
    }
    if (this.pendingSentinels > 0 && isConnected(slot.liveness.state)) {
      this.pendingSentinels--;
      return this.rankDied(
        slot.index,
        'engine-core-dead',
        `DP rank ${slot.index} died: ENGINE_CORE_DEAD was received and its identity is gone (${what} refused with EHOSTUNREACH)`,
        err,
      );
    }
    return this.rankDied(
      slot.index,
      'peer-unreachable',
      `DP rank ${slot.index} is gone: ${what} failed with EHOSTUNREACH (no connected engine has its identity)`,
      err,
    );
  }

  /**
   * Take `slot` out of rotation as stalled, ending its requests with `error` (which names the rank and why: it held
   * requests and sent nothing for the stall timeout; or nothing decodable while undecodable output arrived; or nothing
   * after an ENGINE_CORE_DEAD no vanished identity explains). ABORTs for its requests are queued to it (it may be alive
   * but wedged), followed by a one-token revival request (`RankSender.revive`: the engine sends nothing for aborted
   * requests, so this is what it answers once it recovers); it is back in rotation when it speaks. In a lockstep group
   * every request of the group ends (its peers wait on it).
   */
  stalled(slot: RankSlot, error: EngineClientError): void {
    const { registry } = this.g;
    const rank = slot.index;
    slot.counters.stalls++;
    if (this.g.waves.lockstep) {
      this.g.noteLockstepFailure();
      this.g.transition(rank, { kind: 'stall' });
      this.failGroup(error, 'rank-stalled', false);
      return;
    }
    const entries = registry.onRank(rank);
    for (const e of entries) registry.removeEntry(e);
    void this.abortHeld(entries);
    void this.sender.revive(slot, `gw-revive-${rank}-${slot.liveness.epoch}-${slot.counters.stalls}`);
    this.g.release(
      rank,
      entries.map((e) => e.requestId),
      true,
    );
    this.g.transition(rank, { kind: 'stall' });
    this.g.syncRankTimers(rank, false);
    this.g.touchGroupTimer(false);
    for (const e of entries) e.stream.fail(error);
  }

  /**
   * A group-scope failure: every live request gets `error`, every connected rank an ABORT for what it held, every
   * in-flight set empties; with `ranksDie` every connected rank is marked dead (cause `group-failure`; they come back
   * by dialing in again). Counts `cause` and emits `failed`.
   */
  failGroup(error: EngineClientError, cause: string, ranksDie: boolean): void {
    const { registry, ranks, stats, logger } = this.g;
    const entries = registry.removeAll();
    void this.abortHeld(entries);
    this.g.clearInFlight();
    if (ranksDie) {
      this.pendingSentinels = 0; // every rank goes: nothing is left to tie a sentinel to
      for (const s of ranks.connected()) {
        s.counters.deaths['group-failure'] = (s.counters.deaths['group-failure'] ?? 0) + 1;
        stats.rankDeaths['group-failure'] = (stats.rankDeaths['group-failure'] ?? 0) + 1;
        this.forget(s.index);
        this.g.transition(s.index, { kind: 'death', cause: 'group-failure' });
      }
    }
    stats.failures[cause] = (stats.failures[cause] ?? 0) + 1;
    logger.error(
      { err: error, cause, liveRequests: entries.length, ranks: ranks.describe() },
      'engine group failed as a unit',
    );
    for (const e of entries) e.stream.fail(error);
    this.g.notify('failed', error, cause);
  }

  /** ABORTs for `entries`, one message per connected rank (best effort); they become disowned ids of that rank. */
  abortHeld(entries: readonly RegistryEntry[]): Promise<unknown>[] {
    const byRank = new Map<RankSlot, string[]>();
    for (const e of entries) {
      if (e.engineIndex === null) continue;
      this.disown(e.requestId, e.engineIndex);
      const slot = this.g.ranks.slot(e.engineIndex);
      if (slot === undefined || !isConnected(slot.liveness.state)) continue;
      let ids = byRank.get(slot);
      if (!ids) byRank.set(slot, (ids = []));
      ids.push(e.requestId);
    }
    return [...byRank].map(([slot, ids]) => this.sender.abort(slot, ids));
  }

  /** ABORT `ids` on `rank` through the sender (see `RankSender.abort`); null once accepted. Never rejects. */
  abortOn(rank: number, ids: readonly string[]): Promise<EngineClientError | null> {
    const slot = this.g.ranks.slot(rank);
    return slot === undefined ? Promise.resolve(null) : this.sender.abort(slot, ids);
  }

  /**
   * Auto-abort of an abandoned, unfinished stream (dp-routing.md section 5; also the output contract's cut): remove
   * the entry, release the slot and send the ABORT, all started in the same turn as the cancel (section 14.9).
   * Idempotent.
   */
  abandon(entry: RegistryEntry): void {
    const rank = entry.engineIndex;
    if (!this.g.retire(entry, rank !== null)) return;
    if (rank !== null) void this.abortOn(rank, [entry.requestId]);
  }

  /**
   * `wake_group()` for wave `wave` that nobody waits on (a wave notification's, dp-routing.md 13.3): if its broadcast
   * fails, the group's ranks never start the wave and every request of the group would hang until its stall, so the
   * group fails now (a rank found dead on it already failed it).
   */
  wakeUnwatched(wave: number): void {
    void this.sender.startWave(this.g.ranks.connected(), wave).then((e) => {
      if (e !== null && e.kind === 'transport' && !this.g.registry.closed) this.failGroup(e, 'wave-send-failed', false);
    });
  }

  /**
   * A row for `requestId`, which no live request has: if the gateway ended it while its rank kept working, count it
   * and (unless the row is terminal) ABORT it on that rank, once per id. Ordinary late rows (after a client cancel)
   * are not disowned and stay silent (dp-routing.md section 2).
   */
  orphanRow(requestId: string, terminal: boolean): void {
    const owner = this.disowned.get(requestId);
    if (owner === undefined) return;
    const slot = this.g.ranks.slot(owner);
    // A dead rank's rows were queued before it died: keep the id for its ABORT should it answer again (`revived`).
    if (slot === undefined || !isConnected(slot.liveness.state)) return;
    this.disowned.delete(requestId);
    this.g.stats.orphanOutputs++;
    if (!terminal) void this.sender.abort(slot, [requestId]);
  }

  /**
   * A dead rank answers again as the same process (the client probed its identity; rank-liveness.ts `revived`): it may
   * still be running the requests the gateway failed when it was found dead, so they get one ABORT. Never throws.
   */
  revived(index: number): void {
    const slot = this.g.ranks.slot(index);
    const ids: string[] = [];
    for (const [id, r] of this.disowned) {
      if (r !== index) continue;
      ids.push(id);
      this.disowned.delete(id);
    }
    this.dropRecentExit(index);
    if (slot !== undefined && ids.length > 0) void this.sender.abort(slot, ids);
  }

  /**
   * A new process of `index` completed its handshake: what its previous process held is gone, and an earlier
   * vanishing of its identity can no longer explain an ENGINE_CORE_DEAD (that process is not the one running now).
   */
  noteJoined(index: number): void {
    this.forgetDisowned(index);
    this.dropRecentExit(index);
  }

  /** Forget the disowned ids of `rank` (its process is gone or replaced). */
  forgetDisowned(rank: number): void {
    for (const [id, r] of this.disowned) if (r === rank) this.disowned.delete(id);
  }

  /**
   * An ENGINE_CORE_DEAD frame arrived. A rank whose identity vanished within the last probe window (3 s) and that no
   * sentinel was tied to yet is its sender: returns `{tiedTo}` (nothing more to do). Otherwise the next rank found
   * unreachable is its sender: returns how many are pending (the caller starts the probe rounds).
   */
  noteSentinel(): { tiedTo: number } | { pending: number } {
    const tiedTo = this.recentExits.shift();
    if (tiedTo !== undefined) return { tiedTo };
    return { pending: ++this.pendingSentinels };
  }

  private dropRecentExit(index: number): void {
    for (let at = this.recentExits.indexOf(index); at >= 0; at = this.recentExits.indexOf(index))
      this.recentExits.splice(at, 1);
  }

  /** `index` was found gone with no sentinel tied to it: one arriving within the probe window is its. */
  private noteExit(index: number): void {
    this.recentExits.push(index);
    unrefTimer(
      () => {
        const at = this.recentExits.indexOf(index);
        if (at >= 0) this.recentExits.splice(at, 1);
      },
      PROBE_SCHEDULE_MS[PROBE_SCHEDULE_MS.length - 1]!,
    );
  }

  /**
   * After the last probe round (`withinMs` after the frame), for sentinels no vanished identity explained: never a
   * group failure (issue 26). Each ready rank that holds requests and sent nothing decodable for `withinMs` (so
   * nothing since the sentinel) is the likely sender, a dying engine that still holds its sockets: it is taken out of
   * rotation as stalled (`stalled`; it is back when it speaks). When no rank is quiet, every rank answers and keeps
   * serving: the sentinel is counted (`stats.unattributedSentinels`) and logged. Returns the ranks stalled.
   */
  settleSentinels(withinMs: number): number[] {
    const n = this.pendingSentinels;
    const { registry, ranks, stats, logger } = this.g;
    if (registry.closed || n === 0) return [];
    this.pendingSentinels = 0;
    const quiet = ranks
      .inState('ready')
      .filter((s) => registry.onRank(s.index).length > 0 && this.g.quietMs(s.index) >= withinMs);
    if (quiet.length === 0) {
      stats.unattributedSentinels += n;
      logger.warn(
        { sentinels: n, withinMs, ranks: ranks.describe() },
        `ENGINE_CORE_DEAD received ${n === 1 ? 'once' : `${n} times`} but every rank still answers (no identity vanished ` +
          `within ${withinMs} ms and none holding requests went quiet): nothing failed; a process that is not a rank of ` +
          'this group, or a rank that did not exit, sent it',
      );
      return [];
    }
    for (const slot of quiet) {
      const error = new EngineClientError(
        'rank-stalled',
        `DP rank ${slot.index} sent no output for ${withinMs} ms after ENGINE_CORE_DEAD arrived while holding ` +
          `${registry.onRank(slot.index).length} request(s) and its identity is still connected: taken out of rotation ` +
          'as the likely sender of the sentinel (it is back if it speaks again)',
        { dpRank: slot.index },
      );
      if (isConnected(slot.liveness.state)) this.stalled(slot, error);
    }
    return quiet.map((s) => s.index);
  }

  private forget(index: number): void {
    this.g.forgetRank(index);
  }

  private disown(requestId: string, rank: number): void {
    if (this.disowned.size >= MAX_DISOWNED_IDS) this.disowned.delete(this.disowned.keys().next().value!);
    this.disowned.set(requestId, rank);
  }
}
