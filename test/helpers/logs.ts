/** Capturing a pino logger's records in memory (the end-to-end and HTTP-edge tests read what the gateway logged). */
import { pino, type Logger } from 'pino';

/** One captured pino log record (pino levels: 20 debug, 30 info, 40 warn, 50 error). */
export interface LogRecord {
  level: number;
  msg: string;
  [key: string]: unknown;
}

/** A pino logger writing JSON records into memory (level `warn` and above by default). */
export function captureLogs(level = 'warn'): { logger: Logger; records: LogRecord[] } {
  const records: LogRecord[] = [];
  const logger = pino(
    { level },
    {
      write(line: string): void {
        try {
          records.push(JSON.parse(line) as LogRecord);
        } catch {
          records.push({ level: 0, msg: line });
        }
      },
    },
  );
  return { logger, records };
}
