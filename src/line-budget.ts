/**
 * A bound on how many log lines of one kind are written (issue 32 part 2: 404s and 405s are logged, but a scanner
 * probing paths must not flood the log): at most `perWindow` lines per `windowMs`, and the first line written after
 * some were dropped says how many. Pure state over an injected clock.
 */

/** What `take` decides: whether to write the line, and how many were dropped since the last one written. */
export interface LineGrant {
  write: boolean;
  /** Lines dropped since the last line written (0 when none); meaningful only when `write`. */
  suppressed: number;
}

/** At most `perWindow` lines per fixed window of `windowMs` ms (see the module comment). */
export class LineBudget {
  private windowStart = Number.NEGATIVE_INFINITY;
  private written = 0;
  private dropped = 0;

  /** `perWindow` ≥ 1 lines per `windowMs` > 0 ms on `now` (ms). Throws RangeError for other values. */
  constructor(
    private readonly perWindow: number,
    private readonly windowMs: number,
    private readonly now: () => number,
  ) {
    if (!Number.isSafeInteger(perWindow) || perWindow < 1) throw new RangeError('perWindow must be an integer ≥ 1');
    if (!(windowMs > 0)) throw new RangeError('windowMs must be > 0');
  }

  /** Ask to write one line now. */
  take(): LineGrant {
    const t = this.now();
    if (t - this.windowStart >= this.windowMs) {
      this.windowStart = t;
      this.written = 0;
    }
    if (this.written >= this.perWindow) {
      this.dropped++;
      return { write: false, suppressed: 0 };
    }
    this.written++;
    const suppressed = this.dropped;
    this.dropped = 0;
    return { write: true, suppressed };
  }
}
