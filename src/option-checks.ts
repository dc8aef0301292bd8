/**
 * The range checks of numeric options, declared once for every layer that takes them: the engine clients' watchdog
 * timeouts (`silenceTimeoutMs`, `rankStallTimeoutMs`), the load policies' `loadHorizonMs`, the HTTP edge's bounds, a
 * group's rank counts and the off-loop tokenizer's limits. Each throws RangeError naming the option by its
 * `GatewayOptions` name; the CLI prints that message as it is (cli.ts `operatorErrorLine`), so these words are what
 * a user reads. The command line's own flag checks (`--name must be an integer ≥ N`) are the option table's codecs
 * (serve-options.ts), which run before these.
 */

/**
 * `value` when it is a finite number of ms > 0 (a fraction is allowed: timers take one).
 * @throws RangeError `<name> must be a positive number of ms, got <value>`.
 */
export function positiveMs(name: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0)
    throw new RangeError(`${name} must be a positive number of ms, got ${value}`);
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
