/**
 * The range checks of numeric options, declared once for every layer that takes them: the engine clients' watchdog
 * timeouts (`silenceTimeoutMs`, `rankStallTimeoutMs`), the load policies' `loadHorizonMs`, the HTTP edge's bounds, a
 * group's rank counts and the off-loop tokenizer's limits. Each throws RangeError naming the option by its
 * `GatewayOptions` name; the CLI prints that message as it is (cli.ts `operatorErrorLine`), so these words are what
 * a user reads. The command line's own flag checks (`--name must be an integer ≥ N`) are the option table's codecs
 * (serve-options.ts), which run before these.
 */

/** The longest delay Node's timers keep, in ms (2^31 − 1): a longer one is taken as 1 ms, so a timer fires at once. */
export const MAX_TIMER_MS = 2_147_483_647;

/**
 * `value` when it is a finite number of ms > 0 (a fraction is allowed: timers take one) and at most `MAX_TIMER_MS`.
 * @throws RangeError `<name> must be a positive number of ms, got <value>`, or `<name> must be at most 2147483647 ms
 * (the longest timer Node keeps), got <value>`.
 */
export function positiveMs(name: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0)
    throw new RangeError(`${name} must be a positive number of ms, got ${value}`);
  return atMostTimerMs(name, value);
}

/** `value` (ms) unless it is above `MAX_TIMER_MS`. @throws RangeError naming `name`. */
export function atMostTimerMs(name: string, value: number): number {
  if (value > MAX_TIMER_MS)
    throw new RangeError(`${name} must be at most ${MAX_TIMER_MS} ms (the longest timer Node keeps), got ${value}`);
  return value;
}

/**
 * `value` when it is a safe integer ≥ 1 (a count, a size in bytes, or a duration in whole ms).
 * @throws RangeError `<name> must be an integer ≥ 1, got <value>`.
 */
export function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) throw new RangeError(`${name} must be an integer ≥ 1, got ${value}`);
  return value;
}
