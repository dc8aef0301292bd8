/**
 * A pino destination for a process whose stdout is a pipe to a parent that can die at any moment (a simulated rank
 * under the gateway, or the gateway under a supervisor). Logging must never keep such a process alive or stop it
 * from shutting down.
 *
 * Why not pino's default destination: pino 10 writes through an asynchronous sonic-boom 4 stream and registers an
 * exit hook that calls `SonicBoom.flushSync()` when the process exits. In sonic-boom 4.2.1 `flushSync()` retries a
 * failed `writeSync` forever unless the error is EAGAIN/EBUSY it may give up on (it sleeps 100 ms between attempts),
 * so a line still queued when `process.exit()` runs on a stdout whose reader died (EPIPE) spins the exit hook forever:
 * the process never exits. This sink has no exit hook and no synchronous retry.
 *
 * Behaviour: `write()` queues a line and never throws; queued lines are written with asynchronous `fs.write` calls,
 * one at a time, in order. EAGAIN (a non-blocking pipe that is full) is retried after 10 ms on an unref'd timer.
 * Any other write error (EPIPE: the reader is gone; EBADF ...) marks the sink broken: everything queued and every
 * later line is dropped silently. While the reader is slow, at most `maxQueuedChars` characters wait (or one longer
 * line); newer lines beyond that are dropped and counted. Lines are not written when the process exits before they
 * are handed to the kernel: call `drain(ms)` first when they matter.
 */
import { write as fsWrite } from 'node:fs';

/** Options of `LogSink`. */
export interface LogSinkOptions {
  /** File descriptor to write to (default 1, stdout). */
  fd?: number;
  /** Cap on queued, not yet written characters (default 4 Mi; one longer line is still taken when nothing waits). */
  maxQueuedChars?: number;
}

/** Retry delay after EAGAIN, in ms. */
const EAGAIN_RETRY_MS = 10;

/** An append-only, never-throwing, never-blocking log destination (see the module comment). */
export class LogSink {
  /** The file descriptor written to. */
  readonly fd: number;
  private readonly maxQueuedChars: number;
  private queue: string[] = [];
  private queuedChars = 0;
  private writing = false;
  private brokenCode: string | null = null;
  private dropped = 0;
  private idleWaiters: Array<() => void> = [];

  /** Throws `RangeError` for a negative or non-integer `fd` or a `maxQueuedChars` below 1. */
  constructor(opts: LogSinkOptions = {}) {
    const fd = opts.fd ?? 1;
    const maxQueuedChars = opts.maxQueuedChars ?? 4 * 1024 * 1024;
    if (!Number.isSafeInteger(fd) || fd < 0) throw new RangeError(`LogSink: fd must be an integer ≥ 0, got ${fd}`);
    if (!Number.isSafeInteger(maxQueuedChars) || maxQueuedChars < 1) {
      throw new RangeError(`LogSink: maxQueuedChars must be an integer ≥ 1, got ${maxQueuedChars}`);
    }
    this.fd = fd;
    this.maxQueuedChars = maxQueuedChars;
  }

  /** Queue one chunk (a pino line). Never throws; returns false when the chunk was dropped. */
  write(chunk: string): boolean {
    // The cap bounds the backlog: a chunk is always taken when nothing waits, however long it is.
    if (this.brokenCode !== null || (this.queuedChars > 0 && this.queuedChars + chunk.length > this.maxQueuedChars)) {
      this.dropped += 1;
      return false;
    }
    this.queue.push(chunk);
    this.queuedChars += chunk.length;
    if (!this.writing) this.pump();
    return true;
  }

  /** The error code that broke the sink (e.g. `EPIPE`), or null while it writes. */
  get broken(): string | null {
    return this.brokenCode;
  }

  /** Chunks dropped so far (sink broken, or queue full; a failed write of several queued lines counts as one). */
  get droppedChunks(): number {
    return this.dropped;
  }

  /**
   * Resolves true once everything queued so far was written (or dropped because the sink broke), or false after
   * `timeoutMs` ms (≥ 0) if writes are still pending. Never rejects; the timer does not keep the process alive.
   */
  drain(timeoutMs: number): Promise<boolean> {
    if (!this.writing && this.queue.length === 0) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(
        () => {
          this.idleWaiters = this.idleWaiters.filter((w) => w !== done);
          resolve(false);
        },
        Math.max(0, timeoutMs),
      );
      timer.unref();
      const done = (): void => {
        clearTimeout(timer);
        resolve(true);
      };
      this.idleWaiters.push(done);
    });
  }

  private pump(): void {
    if (this.brokenCode !== null || this.queue.length === 0) {
      this.writing = false;
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
      return;
    }
    const chunk = Buffer.from(this.queue.join(''), 'utf8');
    this.queue = [];
    this.queuedChars = 0;
    this.writing = true;
    this.writeFrom(chunk, 0);
  }

  private writeFrom(chunk: Buffer, offset: number): void {
    try {
      fsWrite(this.fd, chunk, offset, chunk.length - offset, null, (err, written) => {
        if (err !== null) {
          this.onError(err, chunk, offset);
          return;
        }
        if (offset + written < chunk.length) this.writeFrom(chunk, offset + written);
        else this.pump();
      });
    } catch (error) {
      // fs.write throws synchronously only for bad arguments (e.g. a closed fd number): treat it as broken.
      this.onError(error as NodeJS.ErrnoException, chunk, offset);
    }
  }

  private onError(err: NodeJS.ErrnoException, chunk: Buffer, offset: number): void {
    if (err.code === 'EAGAIN') {
      setTimeout(() => this.writeFrom(chunk, offset), EAGAIN_RETRY_MS).unref();
      return;
    }
    this.brokenCode = err.code ?? 'EIO';
    this.dropped += this.queue.length + 1;
    this.queue = [];
    this.queuedChars = 0;
    this.pump();
  }
}

/**
 * Stop `process.stdout` and `process.stderr` from throwing on a write error (EPIPE once the reading parent is gone):
 * an unhandled `'error'` on them would crash the process in the middle of its shutdown. Idempotent.
 */
export function ignoreStdioErrors(): void {
  for (const stream of [process.stdout, process.stderr]) {
    if (!stream.listeners('error').includes(swallow)) stream.on('error', swallow);
  }
}

function swallow(): void {
  // Nowhere left to report a failed write to stdout or stderr.
}
