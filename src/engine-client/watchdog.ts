/**
 * The silence watchdog (dp-routing.md section 6: "No dispatcher activity for 300 s while ≥ 1 request is
 * registered" → fail_all with engine-dead). SIGKILL or an OOM kill sends no ENGINE_CORE_DEAD, and a bound PULL socket
 * never errors when its PUSH peer disappears, so silence is the only signal.
 */

/**
 * One timer, armed only while the owner says requests are live.
 * - `touch(live, reset)`: `live` = at least one request is registered and the client is open. Not live → disarm.
 *   Live and (`reset` or not armed) → (re)start the full timeout. So the silence period starts no earlier than the
 *   moment a request became registered, and every dispatcher wake-up (`reset`) restarts it.
 * - `stop()`: disarm.
 * The timer is unref'd: the watchdog alone never keeps the process alive (with no socket or server left, no output
 * can arrive anyway). Uses the global `setTimeout`, so tests can drive it with node:test mock timers.
 */
export class SilenceWatchdog {
  private timer: ReturnType<typeof setTimeout> | null = null;

  /** @param timeoutMs silence allowed, in ms (positive); @param onSilence called once when it expires. */
  constructor(
    readonly timeoutMs: number,
    private readonly onSilence: () => void,
  ) {}

  /** Keep the timer in step with the registry (see the class docs). */
  touch(live: boolean, reset: boolean): void {
    if (!live) {
      this.stop();
      return;
    }
    if (!reset && this.timer !== null) return;
    this.stop();
    const timer = setTimeout(() => {
      this.timer = null;
      this.onSilence();
    }, this.timeoutMs);
    if (typeof timer === 'object' && typeof timer.unref === 'function') timer.unref();
    this.timer = timer;
  }

  /** Disarm. Idempotent. */
  stop(): void {
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
  }
}

/**
 * Per-rank silence watchdogs (dp-routing.md 14.8, "going beyond": track the last output time per rank while that
 * rank has in-flight requests). The client-wide watchdog above is reset by **any** rank's output, so one rank
 * killed with SIGKILL among live ranks is never detected; one timer per rank closes that gap.
 * - `touch(rank, live, reset)`: `live` = the rank's in-flight set is non-empty (dp-routing.md 10.1). Same rules as
 *   `SilenceWatchdog.touch`: not live → disarm; live and (`reset` or not armed) → (re)start the full timeout. The
 *   client resets a rank's timer only for a batch that names that rank (`engine_index`), so the silence period of
 *   a rank starts at the later of its last output and the moment it received a request while idle.
 * - `onSilent(rank)` runs once per expiry.
 * - `stop(rank)`: disarm one rank (its process is gone); `stopAll()`: disarm every rank (a group failure, close).
 * Timers are unref'd and use the global `setTimeout` (node:test mock timers drive them).
 */
export class RankSilenceWatchdogs {
  private readonly watchdogs = new Map<number, SilenceWatchdog>();

  /** @param timeoutMs silence allowed per rank, in ms (positive); @param onSilent called with the silent rank. */
  constructor(
    readonly timeoutMs: number,
    private readonly onSilent: (rank: number) => void,
  ) {}

  /** Keep `rank`'s timer in step with its in-flight set (see the class docs). */
  touch(rank: number, live: boolean, reset: boolean): void {
    let w = this.watchdogs.get(rank);
    if (!w) {
      if (!live) return;
      w = new SilenceWatchdog(this.timeoutMs, () => this.onSilent(rank));
      this.watchdogs.set(rank, w);
    }
    w.touch(live, reset);
  }

  /** Disarm `rank`. Idempotent. */
  stop(rank: number): void {
    this.watchdogs.get(rank)?.stop();
  }

  /** Disarm every rank. Idempotent. */
  stopAll(): void {
    for (const w of this.watchdogs.values()) w.stop();
  }
}
