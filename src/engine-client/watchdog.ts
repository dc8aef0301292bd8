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
