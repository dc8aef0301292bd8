/**
 * At most one log line per interval for a condition that a broken or hostile peer can repeat at will (undecodable
 * output, rows naming another rank's requests, rows for unknown ids): every occurrence is counted by the caller's
 * metric, the log gets the first one and then one summary line per interval, so a flood cannot flood the log.
 */

/** What `LogThrottle.note` decided: log now (with how many occurrences the line covers), or stay silent. */
export type ThrottleVerdict = { log: true; count: number; sinceMs: number | null } | { log: false };

/** One condition's throttle. Pure state over the caller's clock (ms); no timers. */
export class LogThrottle {
  private pending = 0;
  private loggedAt = -Infinity;

  /** @param intervalMs the least time between two lines, in ms (> 0). */
  constructor(readonly intervalMs: number) {}

  /**
   * `n` more occurrences at `nowMs`. Returns `log: true` with `count` = occurrences since the last line (these
   * included) and `sinceMs` = ms since that line (null for the first line ever), or `log: false`.
   */
  note(nowMs: number, n = 1): ThrottleVerdict {
    this.pending += n;
    if (nowMs - this.loggedAt < this.intervalMs) return { log: false };
    const sinceMs = this.loggedAt === -Infinity ? null : Math.round(nowMs - this.loggedAt);
    const count = this.pending;
    this.pending = 0;
    this.loggedAt = nowMs;
    return { log: true, count, sinceMs };
  }
}
