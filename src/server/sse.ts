/**
 * Server-sent events writer for OpenAI streaming responses (gateway.md section 12): each event is one complete
 * `data: <json>\n\n` record (with an `event: <name>` line first when named, as the Responses API sends them) written
 * in a single `write` (a JSON object is never split across events); chat and completions streams end with exactly one
 * `data: [DONE]\n\n` (`done()`), Responses-API streams without it (`end()`).
 */
import type { ServerResponse } from 'node:http';

/** Default bound on the bytes buffered per stream for a client that does not read: 1 MiB. */
export const DEFAULT_STREAM_BUFFER_BYTES = 1024 * 1024;
/** Default time a client may keep a full buffer without reading before it counts as stalled: 30 s. */
export const DEFAULT_CLIENT_STALL_TIMEOUT_MS = 30_000;

/** How a stream treats a client that stops reading (see `SseWriter`). Units: bytes, ms. */
export interface StreamBackpressure {
  /** Bytes buffered in the gateway (the response and its socket) beyond which `send` waits for the client. */
  maxBufferedBytes: number;
  /** How long one such wait may last before the client counts as stalled. */
  stallTimeoutMs: number;
}

/** The defaults: 1 MiB, 30 s. */
export const DEFAULT_STREAM_BACKPRESSURE: StreamBackpressure = Object.freeze({
  maxBufferedBytes: DEFAULT_STREAM_BUFFER_BYTES,
  stallTimeoutMs: DEFAULT_CLIENT_STALL_TIMEOUT_MS,
});

/** Thrown by `SseWriter.send` when the client kept the buffer full for longer than the stall timeout. */
export class ClientStalledError extends Error {
  constructor(
    /** How long the wait lasted, ms. */
    readonly stalledMs: number,
    /** Bytes still buffered for the client when it was given up. */
    readonly bufferedBytes: number,
  ) {
    super(`the client read nothing for ${stalledMs} ms with ${bufferedBytes} bytes buffered`);
    this.name = 'ClientStalledError';
  }
}

/**
 * Writes SSE records on a raw Node response the route has taken over (fastify `reply.hijack()`), with bounded
 * buffering (issue #10 part 2).
 *
 * Memory per stream, for a client that stops reading: `send` keeps writing while the gateway holds less than
 * `maxBufferedBytes` for this response (`writableLength`: the response's own buffer plus its socket's, not the
 * kernel's); past that it waits for the socket's `drain` and the caller stops pulling engine outputs. The engine keeps
 * generating meanwhile and its outputs queue in the engine client's per-request stream, which is unbounded by design
 * (dp-routing.md section 1: a bounded sink would let one slow reader stall every request of its rank). That queue is
 * bounded by time instead: a wait longer than `stallTimeoutMs` rejects with `ClientStalledError`, and the caller
 * aborts the engine request (ABORT to the rank) and closes the connection. So a non-reading client costs at most
 * `maxBufferedBytes` plus what its engine request produces during `stallTimeoutMs` (token rate × stall timeout ×
 * roughly 200-300 bytes per queued output), and a client must accept the buffered bytes within the stall timeout to
 * stay connected. The kernel's socket buffers (not gateway memory) come on top before back-pressure starts.
 */
export class SseWriter {
  private doneSent = false;
  private pausedBefore = false;

  /**
   * `onFirstPause` is called once, the first time `send` has to wait for the client (for a debug log line).
   */
  constructor(
    private readonly res: ServerResponse,
    private readonly backpressure: StreamBackpressure = DEFAULT_STREAM_BACKPRESSURE,
    private readonly onFirstPause: (bufferedBytes: number) => void = () => {},
  ) {}

  /**
   * Send the 200 status line and the event-stream headers (`extraHeaders` added, e.g. `x-request-id`). No
   * `Connection` header is forced: Node answers with the client's semantics (`keep-alive`, or `close` and a socket
   * closed after `[DONE]` when the request said `Connection: close`).
   */
  start(extraHeaders: Record<string, string> = {}): void {
    this.res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      'x-accel-buffering': 'no',
      ...extraHeaders,
    });
    this.res.flushHeaders();
  }

  /** Whether the connection can still be written (false after the client went away or `done()`). */
  get writable(): boolean {
    return !this.res.destroyed && !this.res.writableEnded;
  }

  /**
   * Write one `data: <json>\n\n` record, preceded by `event: <event>\n` when `event` is given. Resolves at once
   * while less than `maxBufferedBytes` is buffered; otherwise once the socket drained (or the connection closed).
   * Rejects with `ClientStalledError` when the drain did not come within `stallTimeoutMs`. A no-op when not
   * writable.
   */
  async send(payload: unknown, event?: string): Promise<void> {
    if (!this.writable) return;
    const record = `${event === undefined ? '' : `event: ${event}\n`}data: ${JSON.stringify(payload)}\n\n`;
    const accepted = this.res.write(record);
    // `write` returning false means over the stream's high-water mark, so a `drain` will follow.
    if (accepted || this.res.writableLength < this.backpressure.maxBufferedBytes) return;
    if (!this.pausedBefore) {
      this.pausedBefore = true;
      this.onFirstPause(this.res.writableLength);
    }
    await this.waitForDrain();
  }

  /**
   * Write an SSE comment (`:\n\n`, ignored by every SSE reader) when writable: a harmless probe whose write makes a
   * vanished client's TCP reset surface (disconnect.ts).
   */
  probe(): void {
    if (this.writable && this.res.headersSent) this.res.write(':\n\n');
  }

  /** End the response without a terminator (Responses-API streams; idempotent with `done()`). */
  end(): void {
    if (this.doneSent) return;
    this.doneSent = true;
    if (this.writable) this.res.end();
  }

  /** Write the single `data: [DONE]\n\n` terminator and end the response (idempotent). */
  done(): void {
    if (this.doneSent) return;
    this.doneSent = true;
    if (this.writable) this.res.end('data: [DONE]\n\n');
  }

  private waitForDrain(): Promise<void> {
    const started = performance.now();
    return new Promise<void>((resolve, reject) => {
      const finish = (stalled: boolean) => {
        clearTimeout(timer);
        this.res.off('drain', onDrain);
        this.res.off('close', onDrain);
        if (!stalled) resolve();
        else reject(new ClientStalledError(Math.round(performance.now() - started), this.res.writableLength));
      };
      const onDrain = () => finish(false);
      const timer = setTimeout(() => finish(true), this.backpressure.stallTimeoutMs);
      this.res.on('drain', onDrain);
      this.res.on('close', onDrain);
    });
  }
}
