/**
 * The gateway's root logger (issue #13 part 3): pino, written through a `LogSink` (log-sink.ts: never blocks or
 * hangs the exit on a dead stdout), as JSON lines or, for people, as pino-pretty lines.
 * - `json`: one pino JSON object per line (for log collectors).
 * - `pretty`: pino-pretty's one-line form `[HH:MM:ss.mmm] INFO: (component) message {fields}`, colourised when the
 *   destination is a terminal. Formatted in-process with pino-pretty's `prettyFactory` (no worker thread).
 * The default is `pretty` when stdout is a TTY and `json` otherwise (a pipe, a file, a container log driver).
 */
import { pino, type Logger } from 'pino';
import { prettyFactory } from 'pino-pretty';
import { LogSink } from './log-sink.js';

/** The `--log-format` values. */
export const LOG_FORMATS = ['pretty', 'json'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

/** Options of `createGatewayLogger`. */
export interface GatewayLoggerOptions {
  /** pino level (default `info`). */
  level?: string;
  /** Line format (default: `pretty` when `fd` is a TTY, else `json`). */
  format?: LogFormat;
  /** Destination file descriptor (default 1, stdout). */
  fd?: number;
  /** Whether the destination is a terminal (default: `process.stdout.isTTY` for fd 1, else false). */
  isTTY?: boolean;
}

/** The default format for a destination: pretty for a terminal, JSON otherwise. */
export function defaultLogFormat(isTTY: boolean): LogFormat {
  return isTTY ? 'pretty' : 'json';
}

/** Build the root logger. Throws RangeError for an unknown format (pino throws for an unknown level). */
export function createGatewayLogger(opts: GatewayLoggerOptions = {}): Logger {
  const fd = opts.fd ?? 1;
  const tty = opts.isTTY ?? (fd === 1 && process.stdout.isTTY === true);
  const format = opts.format ?? defaultLogFormat(tty);
  if (!(LOG_FORMATS as readonly string[]).includes(format)) {
    throw new RangeError(`log format must be one of ${LOG_FORMATS.join(', ')}, got ${JSON.stringify(format)}`);
  }
  const sink = new LogSink({ fd });
  const level = opts.level ?? 'info';
  if (format === 'json') return pino({ level }, sink);
  const pretty = prettyFactory({
    colorize: tty,
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'pid,hostname,component',
    messageKey: 'msg',
    messageFormat: '{if component}({component}) {end}{msg}',
    singleLine: true,
  });
  return pino({ level }, { write: (line: string) => void sink.write(pretty(line)) });
}
