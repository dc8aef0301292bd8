/**
 * Server-sent events writer for OpenAI streaming responses (gateway.md section 12): each event is one complete
 * `data: <json>\n\n` record (with an `event: <name>` line first when named, as the Responses API sends them) written
 * in a single `write` (a JSON object is never split across events); chat and completions streams end with exactly one
 * `data: [DONE]\n\n` (`done()`), Responses-API streams without it (`end()`).
 */
import type { ServerResponse } from 'node:http';

/** Writes SSE records on a raw Node response the route has taken over (fastify `reply.hijack()`). */
export class SseWriter {
  private doneSent = false;

  constructor(private readonly res: ServerResponse) {}

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
   * Write one `data: <json>\n\n` record, preceded by `event: <event>\n` when `event` is given; resolves once the
   * socket accepted it (waits for `drain` under back-pressure, or resolves early when the connection closes). A no-op
   * when not writable.
   */
  async send(payload: unknown, event?: string): Promise<void> {
    if (!this.writable) return;
    const record = `${event === undefined ? '' : `event: ${event}\n`}data: ${JSON.stringify(payload)}\n\n`;
    if (this.res.write(record)) return;
    await new Promise<void>((resolve) => {
      const done = () => {
        this.res.off('drain', done);
        this.res.off('close', done);
        resolve();
      };
      this.res.on('drain', done);
      this.res.on('close', done);
    });
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
}
