/**
 * The logging surface the transport and the simulator use: the subset of a pino logger they call, so a
 * `pino.Logger` can be passed as is and tests can pass a recording fake. No runtime dependency on pino.
 */

/** One log method: pino's `(mergingObject, message)` form. */
export type LogFn = (obj: Record<string, unknown>, msg: string) => void;

/** The pino methods the transport and the simulator call. Any `pino.Logger` satisfies it. */
export interface MinimalLogger {
  debug: LogFn;
  info: LogFn;
  warn: LogFn;
  error: LogFn;
}

const noop: LogFn = () => {};

/** A logger that drops everything (the default when no logger is given). Frozen. */
export const silentLogger: MinimalLogger = Object.freeze({ debug: noop, info: noop, warn: noop, error: noop });

/** The pino levels a `--log-level` takes (the gateway's and a simulated rank's). */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
