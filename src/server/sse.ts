/**
 * Server-sent events writer for OpenAI streaming responses (gateway.md section 12): each event is one complete
 * `data: <json>\n\n` record (with an `event: <name>` line first when named, as the Responses API sends them) written
 * in a single `write` (a JSON object is never split across events); chat and completions streams end with exactly one
 * `data: [DONE]\n\n` (`done()`), Responses-API streams without it (`end()`).
 */
import type { ServerResponse } from 'node:http';
import { CoalescingWriter, TickFlusher } from './coalescing-writer.js';
import { hasHighBytes, headerSafeBody } from './request-id.js';

/** Default bound on the bytes buffered per stream for a client that does not read: 1 MiB. */
export const DEFAULT_STREAM_BUFFER_BYTES = 1024 * 1024;
/**
 * How long a stream's headers and opening records wait for its first engine output (`SseWriter.start`'s `holdMs`),
 * ms: long enough for a first token that comes in the engine's next steps, short enough that a queued or long
 * prefill still sees its response start at once to a person watching.
 */
export const OPENING_HOLD_MS = 100;
/** Default time a client may stay behind (a full buffer, outputs held) before it counts as stalled: 30 s. */
export const DEFAULT_CLIENT_STALL_TIMEOUT_MS = 30_000;

/** How a stream treats a client that stops reading (see `SseWriter`). Units: bytes, ms. */
export interface StreamBackpressure {
  /** Bytes buffered in the gateway (the response and its socket) beyond which `send` waits for the client. */
  maxBufferedBytes: number;
  /**
   * How long the client may stay behind before it counts as stalled: from the first wait until an end-of-turn flush
   * leaves the buffered bytes under the bound again (not reset by a drain that is followed by another wait).
   */
  stallTimeoutMs: number;
}

/** The defaults: 1 MiB, 30 s. */
export const DEFAULT_STREAM_BACKPRESSURE: StreamBackpressure = Object.freeze({
  maxBufferedBytes: DEFAULT_STREAM_BUFFER_BYTES,
  stallTimeoutMs: DEFAULT_CLIENT_STALL_TIMEOUT_MS,
});

/** Given to `StreamFlow.stalled` when the client stayed behind (see `SseWriter`) for longer than the stall timeout. */
export class ClientStalledError extends Error {
  constructor(
    /** How long the client had been behind, ms (from its first wait, across drains that did not catch it up). */
    readonly stalledMs: number,
    /** Bytes still buffered for the client when it was given up. */
    readonly bufferedBytes: number,
  ) {
    super(`the client stayed behind for ${stalledMs} ms with ${bufferedBytes} bytes buffered`);
    this.name = 'ClientStalledError';
  }
}

/** What an unnamed SSE record holds before its JSON payload (gateway.md 12: `data: <json>\n\n`). */
export const SSE_DATA_LEAD = 'data: ';
/** What ends every SSE record. */
export const SSE_RECORD_END = '\n\n';

/** An empty write: sends a header block that is still pending, in latin1 (see `SseWriter.sendHeaders`). */
const NO_BYTES = Buffer.alloc(0);

/** One turn's flush of every streamed response with pending records (coalescing-writer.ts): one `setImmediate`. */
const FLUSHER = new TickFlusher((flush) => setImmediate(flush));

/** What a stream's owner is told about back-pressure (see `SseWriter`). */
export interface StreamFlow {
  /** The client is not keeping up: stop producing records until `resume`. */
  pause(): void;
  /** The buffered bytes drained (or the connection closed): produce again. */
  resume(): void;
  /** The client kept the buffer full past the stall timeout: give the stream up. */
  stalled(err: ClientStalledError): void;
}

/**
 * Writes SSE records on a raw Node response the route has taken over (fastify `reply.hijack()`), with bounded
 * buffering (issue #10 part 2) and one socket write per event-loop turn (issue 9; coalescing-writer.ts): `send` only
 * appends the record, and every stream's pending records are written together when the turn ends.
 *
 * Memory per stream, for a client that stops reading: records are written while the gateway holds less than
 * `maxBufferedBytes` for this response (`writableLength`: the response's own buffer plus its socket's, not the
 * kernel's); past that the owner is told to `pause` (its `StreamFlow`) and stops taking engine outputs until the
 * socket's `drain` (`resume`). The engine keeps generating meanwhile and its outputs are held for this response
 * (generation-run.ts), unbounded by design (dp-routing.md section 1: a bounded sink would let one slow reader stall
 * every request of its rank). That hold is bounded by time instead. The client is *behind* from its first pause
 * until an end-of-turn flush leaves the buffered bytes under the bound again (the owner wrote everything it held and
 * the client took it); a drain that only lets the held outputs refill the buffer does not count, so a client that
 * reads in trickles, slower than its engine request produces, stays behind. Behind for longer than `stallTimeoutMs` calls
 * `stalled` with a `ClientStalledError`, and the owner aborts the engine request (ABORT to the rank) and closes the
 * connection. So a slow or non-reading client costs at most `maxBufferedBytes` plus one turn's records plus what its
 * engine request produces during `stallTimeoutMs` (token rate × stall timeout × roughly 200-300 bytes per held
 * output), and a client must catch up within the stall timeout to stay connected. The kernel's socket buffers (not
 * gateway memory) come on top before back-pressure starts.
 */
export class SseWriter {
  private doneSent = false;
  /** `start` ran (the headers are set; sent with the first write or the end-of-turn flush). */
  private started = false;
  /** The headers were handed to the socket (`res.headersSent` only says they were generated). */
  private headersOut = false;
  /** A header value of `start` has a byte ≥ 0x80 (an echoed X-Request-Id): the writes that carry the headers are bytes. */
  private highByteHeaders = false;
  private pausedBefore = false;
  private waiting = false;
  /** `performance.now()` (ms) of the first pause the client has not caught up from since; -1 while not behind. */
  private behindSince = -1;
  /** A flush `queue` started at the bound is running (the owner had more to give: not caught up). */
  private flushingAtBound = false;
  private readonly out: CoalescingWriter;
  /**
   * `res.writableLength` (bytes) read after the last flush: between flushes the response's buffer only drains, so
   * this bounds it from above without reading it (its socket's state) for every record (the per-token path).
   */
  private bufferedAtFlush = 0;
  /** `backpressure.maxBufferedBytes`, read per record. */
  private readonly maxBufferedBytes: number;
  /** The timer that ends a `start({ holdMs })` hold, while it lasts. */
  private holdTimer: NodeJS.Timeout | null = null;

  /**
   * `flow` hears about back-pressure (absent: nothing pauses; a caller that never produces much). `onFirstPause`
   * is called once, the first time the stream pauses (for a debug log line).
   */
  constructor(
    private readonly res: ServerResponse,
    private readonly backpressure: StreamBackpressure = DEFAULT_STREAM_BACKPRESSURE,
    private readonly onFirstPause: (bufferedBytes: number) => void = () => {},
    private readonly flow: StreamFlow | null = null,
  ) {
    this.maxBufferedBytes = backpressure.maxBufferedBytes;
    this.out = new CoalescingWriter(
      (chunk) => this.writeNow(chunk),
      FLUSHER,
      (accepted) => this.afterWrite(accepted),
      () => this.sendHeaders(),
    );
  }

  /**
   * Set the 200 status line and the event-stream headers (`extraHeaders` added, e.g. `x-request-id`); they leave at
   * the end of this turn (the flush of coalescing-writer.ts), together with the records queued meanwhile (the chat
   * opening chunk), in one socket write instead of two. No `Connection` header is forced: Node answers with the
   * client's semantics (`keep-alive`, or `close` and a socket closed after `[DONE]` when the request said
   * `Connection: close`).
   *
   * With `opts.holdMs` > 0 nothing leaves until `release()` (at the latest after `holdMs`), `probe()`, `done()`/`end()`
   * or the buffer bound: a stream whose first engine output comes within the hold sends its headers, opening records
   * and first records in one write (a request that finishes in its first batch: the whole response in one write)
   * instead of two. The bytes are the same; vLLM too sends the opening (role) chunk only with the first output
   * (serving_chat.py `chat_completion_stream_generator`, `first_iteration`).
   */
  start(extraHeaders: Record<string, string> = {}, opts: { holdMs?: number } = {}): void {
    this.res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      'x-accel-buffering': 'no',
      ...extraHeaders,
    });
    this.highByteHeaders = Object.values(extraHeaders).some(hasHighBytes);
    this.started = true;
    const holdMs = opts.holdMs ?? 0;
    if (holdMs <= 0) {
      this.out.wake();
      return;
    }
    this.out.hold();
    this.holdTimer = setTimeout(() => this.release(), holdMs);
    this.holdTimer.unref();
  }

  /**
   * End the hold of `start({ holdMs })`: the headers and what was queued meanwhile leave at the end of this turn,
   * together with the records queued in it (a no-op when nothing is held). The stream's owner calls it at its first
   * engine output; the hold's timer calls it when that output is late.
   */
  release(): void {
    if (this.holdTimer === null) return;
    this.stopHoldTimer();
    this.out.release();
  }

  private stopHoldTimer(): void {
    if (this.holdTimer === null) return;
    clearTimeout(this.holdTimer);
    this.holdTimer = null;
  }

  /**
   * `data` as node:http must get it: while the headers have not left (they go with it), bytes when a header value has
   * a byte ≥ 0x80, so they leave as those bytes (request-id.ts); else the string itself (the per-token path).
   */
  private withHeaders(data: string): string | Buffer {
    return this.headersOut ? data : headerSafeBody(data, this.highByteHeaders);
  }

  /** A flush with no records: the headers leave alone if no record took them along yet. */
  private sendHeaders(): void {
    if (!this.writable || this.headersOut) return;
    this.headersOut = true;
    // `flushHeaders` writes the header block as a string, in UTF-8; an empty Buffer makes it leave in latin1.
    if (this.highByteHeaders) this.res.write(NO_BYTES);
    else this.res.flushHeaders();
    this.bufferedAtFlush = this.res.writableLength;
  }

  /** Whether the connection can still be written (false after the client went away or `done()`). */
  get writable(): boolean {
    return !this.res.destroyed && !this.res.writableEnded;
  }

  /**
   * Queue one `data: <json>\n\n` record, preceded by `event: <event>\n` when `event` is given. `json` is the payload
   * already serialized (a pre-built chunk, chunk-json.ts), else `payload` is serialized here. Written at the end of
   * the turn, or at once when the buffered bytes (as of the last flush: an upper bound, see `bufferedAtFlush`) plus
   * the pending records (counted in UTF-16 units) reach the bound; a no-op when not writable.
   */
  send(payload: unknown, event?: string, json?: string): void {
    if (!this.writable) return;
    const data = json ?? JSON.stringify(payload);
    this.queue(
      event === undefined
        ? SSE_DATA_LEAD + data + SSE_RECORD_END
        : `event: ${event}\n${SSE_DATA_LEAD}${data}${SSE_RECORD_END}`,
    );
  }

  /**
   * Queue one complete unnamed record the caller built (`SSE_DATA_LEAD + json + SSE_RECORD_END`, e.g. a pre-built
   * chunk from chunk-json.ts; the per-token path), as `send` would queue it.
   */
  sendRecord(record: string): void {
    if (!this.writable) return;
    this.queue(record);
  }

  private queue(record: string): void {
    this.out.write(record);
    // At the bound, write now (and pause if the client is behind) instead of letting the turn's records pile up.
    if (this.out.pendingLength + this.bufferedAtFlush >= this.maxBufferedBytes) {
      this.flushingAtBound = true;
      try {
        this.out.flush();
      } finally {
        this.flushingAtBound = false;
      }
    }
  }

  /**
   * Write an SSE comment (`:\n\n`, ignored by every SSE reader) when writable, now: a harmless probe whose write
   * makes a vanished client's TCP reset surface (disconnect.ts).
   */
  probe(): void {
    if (!this.writable || !this.started) return;
    this.stopHoldTimer();
    this.out.write(':\n\n');
    this.out.flush();
  }

  /** End the response without a terminator (Responses-API streams; idempotent with `done()`). */
  end(): void {
    if (this.doneSent) return;
    this.doneSent = true;
    this.stopHoldTimer();
    const rest = this.out.take();
    if (this.writable) this.res.end(rest === '' ? undefined : this.withHeaders(rest));
  }

  /** Write the single `data: [DONE]\n\n` terminator (after anything pending) and end the response (idempotent). */
  done(): void {
    if (this.doneSent) return;
    this.doneSent = true;
    this.stopHoldTimer();
    const rest = this.out.take();
    if (this.writable) this.res.end(this.withHeaders(rest + 'data: [DONE]\n\n'));
  }

  /**
   * One socket write, now. node:http's `write` corks an uncorked socket and uncorks it in a `process.nextTick`, so
   * the syscall would run after the flusher's callback, outside its time budget (measured: most of a 2000-stream
   * flush turn); corked here, the write leaves inside `uncork()`, within the budget. Same bytes, same `writev`.
   */
  private writeNow(chunk: string): boolean {
    if (!this.writable) return true;
    const data = this.withHeaders(chunk);
    this.headersOut = true; // node:http sends them ahead of the first write
    const socket = this.res.socket;
    if (socket === null || socket.writableCorked > 0) return this.res.write(data);
    socket.cork();
    try {
      return this.res.write(data);
    } finally {
      socket.uncork();
    }
  }

  /**
   * After a flush: `write` returning false means over the stream's high-water mark, so a `drain` will follow; the
   * owner pauses only when the buffered bytes also reached the bound.
   */
  private afterWrite(accepted: boolean): void {
    const buffered = (this.bufferedAtFlush = this.res.writableLength);
    if (this.waiting || this.flow === null) return;
    if (accepted || buffered < this.maxBufferedBytes) {
      // Caught up only at the end of a turn: a flush at the bound means the owner still had records to give.
      if (!this.flushingAtBound) this.behindSince = -1;
      return;
    }
    if (!this.pausedBefore) {
      this.pausedBefore = true;
      this.onFirstPause(buffered);
    }
    this.waiting = true;
    this.flow.pause();
    const now = performance.now();
    if (this.behindSince < 0) this.behindSince = now;
    const started = this.behindSince;
    const finish = (stalled: boolean) => {
      clearTimeout(timer);
      this.res.off('drain', onDrain);
      this.res.off('close', onDrain);
      this.waiting = false;
      this.bufferedAtFlush = this.res.writableLength; // drained: the upper bound from the last flush is stale
      if (stalled)
        this.flow!.stalled(new ClientStalledError(Math.round(performance.now() - started), this.res.writableLength));
      else this.flow!.resume();
    };
    const onDrain = () => finish(false);
    const timer = setTimeout(() => finish(true), Math.max(0, this.backpressure.stallTimeoutMs - (now - started)));
    this.res.on('drain', onDrain);
    this.res.on('close', onDrain);
  }
}
