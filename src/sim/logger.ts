/**
 * The logging surface of the simulator: the subset of a pino logger it calls, so a `pino.Logger` can be passed as
 * is and tests can pass a recording fake.
 */

/** One log method, pino's `(mergingObject, message)` form. */
export type SimLogFn = (obj: Record<string, unknown>, msg: string) => void;

/** The pino methods the simulator calls. Any `pino.Logger` satisfies it. */
export interface SimLogger {
  debug: SimLogFn;
  info: SimLogFn;
  warn: SimLogFn;
  error: SimLogFn;
}

const noop: SimLogFn = () => {};

/** A logger that drops everything (the default when none is given). */
export const silentSimLogger: SimLogger = Object.freeze({ debug: noop, info: noop, warn: noop, error: noop });
