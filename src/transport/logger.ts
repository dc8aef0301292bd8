/**
 * The logging surface the transport uses: the subset of a pino logger it calls, so a `pino.Logger` can be passed
 * as is and tests can pass a recording fake.
 */

/** One log method: pino's `(mergingObject, message)` form. */
export type TransportLogFn = (obj: Record<string, unknown>, msg: string) => void;

/** The pino methods the transport calls. Any `pino.Logger` satisfies it. */
export interface TransportLogger {
  debug: TransportLogFn;
  info: TransportLogFn;
  warn: TransportLogFn;
  error: TransportLogFn;
}

const noop: TransportLogFn = () => {};

/** A logger that drops everything (the default when no logger is given). */
export const silentLogger: TransportLogger = Object.freeze({ debug: noop, info: noop, warn: noop, error: noop });
