/**
 * The timers of one engine group (dp-routing.md 6, 14.8; issue #8 part 3; issue 26), in one place: the group silence
 * watchdog, the per-rank silence and stall timers, the probe rounds after a `disconnect` hint or ENGINE_CORE_DEAD
 * (probes.ts), and the revival tick that probes dead ranks that may come back. This module only keeps time: whoever
 * owns the group state arms and disarms the timers from it (group-state.ts), and expiries are events
 * (rank-lifecycle.ts listens), so no timer holds a callback into the state it watches.
 */
import { EventEmitter } from 'node:events';
import { PROBE_SCHEDULE_MS, ProbeRounds, unrefTimer } from './probes.js';
import { RankSilenceWatchdogs, SilenceWatchdog } from './watchdog.js';

/** How often a dead rank's identity is probed to see whether it answers again (issue 26), in ms. */
export const REVIVAL_PROBE_INTERVAL_MS = 500;

/** What expires. */
export interface RankTimerEvents {
  /** Requests were registered and no batch or decode error arrived for the silence timeout (section 6). */
  'group-silent': [];
  /** `rank` held requests and sent nothing for the silence timeout (14.8). */
  'rank-silent': [rank: number];
  /** Ready `rank` held requests and sent nothing for the stall timeout (issue #8 part 3). */
  'rank-stalled': [rank: number];
  /** A probe round is due (`last`: the schedule's final one, PROBE_SCHEDULE_MS). */
  'probe-round': [last: boolean];
  /** Time to probe the dead ranks that may come back (every `REVIVAL_PROBE_INTERVAL_MS` while scheduled). */
  'revival-due': [];
}

/** The group's timers (see the module docs). Both timeouts in ms, positive. */
export class RankTimers extends EventEmitter<RankTimerEvents> {
  private readonly group: SilenceWatchdog;
  private readonly silent: RankSilenceWatchdogs;
  private readonly stalled: RankSilenceWatchdogs;
  private readonly probes: ProbeRounds;
  private revival: ReturnType<typeof setTimeout> | null = null;

  constructor(silenceTimeoutMs: number, stallTimeoutMs: number) {
    super();
    this.group = new SilenceWatchdog(silenceTimeoutMs, () => this.emit('group-silent'));
    this.silent = new RankSilenceWatchdogs(silenceTimeoutMs, (rank) => this.emit('rank-silent', rank));
    this.stalled = new RankSilenceWatchdogs(stallTimeoutMs, (rank) => this.emit('rank-stalled', rank));
    this.probes = new ProbeRounds(PROBE_SCHEDULE_MS, (last) => this.emit('probe-round', last));
  }

  /** The group watchdog: armed while `live`, restarted when `reset` (a batch or a decode error arrived). */
  touchGroup(live: boolean, reset: boolean): void {
    this.group.touch(live, reset);
  }

  /**
   * `rank`'s silence timer runs while `live` (connected and holding requests), its stall timer while `live && ready`;
   * `reset`: the rank was just heard from.
   */
  touchRank(rank: number, live: boolean, ready: boolean, reset: boolean): void {
    this.silent.touch(rank, live, reset);
    this.stalled.touch(rank, live && ready, reset);
  }

  /** Disarm `rank`'s timers (its process is gone or replaced). */
  stopRank(rank: number): void {
    this.silent.stop(rank);
    this.stalled.stop(rank);
  }

  /** Disarm the request timers (group and ranks); the probe rounds and the revival tick go on. */
  stopRequestTimers(): void {
    this.group.stop();
    this.silent.stopAll();
    this.stalled.stopAll();
  }

  /** Start the probe rounds (a round already running is restarted, probes.ts). */
  startProbes(): void {
    this.probes.start();
  }

  /** Emit `revival-due` once, `REVIVAL_PROBE_INTERVAL_MS` from now, unless already scheduled. */
  scheduleRevival(): void {
    if (this.revival !== null) return;
    this.revival = unrefTimer(() => {
      this.revival = null;
      this.emit('revival-due');
    }, REVIVAL_PROBE_INTERVAL_MS);
  }

  /** Disarm everything (the client closed). Idempotent. */
  stopAll(): void {
    this.stopRequestTimers();
    this.probes.cancel();
    if (this.revival !== null) clearTimeout(this.revival);
    this.revival = null;
  }
}
