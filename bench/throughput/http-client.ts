/**
 * A minimal HTTP/1.1 keep-alive client connection for bench:throughput's load generator (./load-generator.ts): one
 * request at a time on one `net` socket, the response parsed from its bytes. It exists because the generator shares
 * the cores with the gateway it measures: `node:http` costs a ClientRequest, an IncomingMessage, agent bookkeeping
 * and two stream pipelines (socket, then message) per read, about 3 µs of client CPU per streamed token at 512
 * streams; this reads each socket read into one reused buffer (`net` `onread`) and hands the body bytes to a sink
 * synchronously.
 *
 * What it checks (RFC 9112; anything else fails the response, never passes silently):
 * - the status line (`HTTP/1.x NNN`) and a head of at most `MAX_HEAD_BYTES`, ending with an empty line;
 * - body framing: `Transfer-Encoding: chunked` (hex sizes, chunk extensions ignored, CRLF after each chunk's data,
 *   trailer lines skipped up to the empty line), else `Content-Length` (decimal), else (HTTP/1.0 style) until the
 *   server closes; no body for 1xx/204/304; a 1xx head is refused (the client never sends `Expect`);
 * - the end of a response: the terminal chunk, the last Content-Length byte, or the close of an until-close body.
 *   A connection that closes or fails before that is reported to the sink (`fail`): `request failed: …` when no
 *   response byte had arrived, `response cut off before its end` otherwise;
 * - keep-alive: after a response with `Connection: close` (or from HTTP/1.0 without keep-alive) the socket is closed
 *   and `usable` turns false; bytes arriving after a response's end (the server cannot answer a request not sent
 *   yet) are a protocol error: the connection is destroyed and `onProtocolError` is called.
 *
 * Units: bytes; `now` stamps are `performance.now()` ms taken once per socket read (every body byte of one read has
 * its arrival time).
 */
import { connect, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';

/** Largest response head accepted (status line + headers), bytes. */
export const MAX_HEAD_BYTES = 16 * 1024;

/** Where one response goes. Every method is called synchronously from the socket's read; none may throw. */
export interface ResponseSink {
  /** The head was read: the status code. Called once, before any `body`. */
  head(status: number): void;
  /** A piece of the body, framing removed: `bytes[start..end)`, valid only during the call (the buffer is reused). */
  body(bytes: Buffer, start: number, end: number, now: number): void;
  /** The response ended well (its framing is complete). */
  end(now: number): void;
  /** The response failed (see the module comment); nothing else is called for it afterwards. */
  fail(message: string): void;
}

type State =
  | 'idle'
  | 'head'
  | 'chunk-size'
  | 'chunk-data'
  | 'chunk-cr'
  | 'chunk-lf'
  | 'trailer'
  | 'length'
  | 'until-close';

const CR = 0x0d;
const LF = 0x0a;

/** One socket: `request()` a request, wait for the sink's `end`/`fail`, then the next one. */
export class HttpConnection {
  private readonly socket: Socket;
  private state: State = 'idle';
  private sink: ResponseSink | null = null;
  /** The sink of a response whose framing just completed, told once the read that completed it is checked. */
  private ended: ResponseSink | null = null;
  /** Bytes of the head (or of a chunk-size / trailer line) not complete yet. */
  private line: Buffer | null = null;
  private remaining = 0;
  private closeAfter = false;
  private gotBytes = false;
  private socketError: Error | null = null;
  private dead = false;

  /**
   * Connects to `host:port`. `readBuffer` receives every read of this connection (it may be shared by all connections
   * of a process: reads are handled one at a time, synchronously). `onProtocolError` is told about bytes that arrive
   * past a response's end or with no request outstanding (the connection is dropped).
   */
  constructor(
    host: string,
    port: number,
    readBuffer: Buffer,
    private readonly onProtocolError: (message: string) => void,
  ) {
    this.socket = connect({
      host,
      port,
      noDelay: true,
      onread: { buffer: readBuffer, callback: (n, buf) => this.readThen(n, buf) },
    });
    this.socket.on('error', (err) => {
      this.socketError = err;
    });
    this.socket.on('close', () => this.onClose());
  }

  /** True while a request may be sent (connected or connecting, not closed, no response in progress). */
  get usable(): boolean {
    return !this.dead && this.state === 'idle';
  }

  /** Sends one request (its whole bytes, UTF-8) and reads its response into `sink`. Throws Error when not `usable`. */
  request(bytes: string, sink: ResponseSink): void {
    if (!this.usable) throw new Error('HttpConnection.request: the connection is busy or closed');
    this.sink = sink;
    this.state = 'head';
    this.gotBytes = false;
    this.line = null;
    this.socket.write(bytes);
  }

  /** Closes the socket at once; a response in progress fails (`response cut off…` / `request failed…`). */
  destroy(): void {
    this.socket.destroy();
  }

  /** The `onread` callback: true = keep reading. */
  private readThen(n: number, buf: Uint8Array): boolean {
    this.onRead(n, buf as Buffer);
    return true;
  }

  private onRead(n: number, buf: Buffer): void {
    if (this.dead) return;
    if (this.sink === null) {
      this.protocolError('bytes arrived with no request outstanding');
      return;
    }
    this.gotBytes = true;
    const now = performance.now();
    let i = 0;
    while (i < n && this.sink !== null) i = this.step(buf, i, n, now);
    const ended = this.ended;
    if (ended === null) return;
    this.ended = null;
    // Checked before the sink hears of the end: its next request may go out on this connection at once.
    if (i < n) this.protocolError(`${n - i} bytes past the end of a response`);
    ended.end(now);
  }

  /** Parses from `buf[i..n)` in the current state; returns where it stopped. */
  private step(buf: Buffer, i: number, n: number, now: number): number {
    const sink = this.sink!;
    switch (this.state) {
      case 'head':
        return this.readHead(buf, i, n);
      case 'chunk-size':
        return this.readChunkSize(buf, i, n);
      case 'chunk-data': {
        const next = this.counted(sink, buf, i, n, now);
        if (this.remaining === 0) this.state = 'chunk-cr';
        return next;
      }
      case 'chunk-cr':
      case 'chunk-lf': {
        // The CRLF after a chunk's data (its two bytes may arrive in two reads).
        const cr = this.state === 'chunk-cr';
        if (buf[i] !== (cr ? CR : LF)) {
          this.failResponse('malformed chunked body: no CRLF after a chunk');
          return n;
        }
        this.state = cr ? 'chunk-lf' : 'chunk-size';
        return i + 1;
      }
      case 'trailer':
        return this.readTrailer(buf, i, n);
      case 'length': {
        const next = this.counted(sink, buf, i, n, now);
        if (this.remaining === 0) this.complete();
        return next;
      }
      case 'until-close':
        sink.body(buf, i, n, now);
        return n;
      case 'idle':
        return n;
    }
  }

  /**
   * Hands the sink up to `remaining` body bytes of `buf[i..n)` (a chunk's data, a Content-Length body); returns where
   * they end.
   */
  private counted(sink: ResponseSink, buf: Buffer, i: number, n: number, now: number): number {
    const take = Math.min(this.remaining, n - i);
    sink.body(buf, i, i + take, now);
    this.remaining -= take;
    return i + take;
  }

  /** Appends `buf[from..to)` to the pending line bytes and returns them all. */
  private gather(buf: Buffer, from: number, to: number): Buffer {
    const piece = buf.subarray(from, to);
    const all = this.line === null ? Buffer.from(piece) : Buffer.concat([this.line, piece]);
    this.line = all;
    return all;
  }

  private readHead(buf: Buffer, i: number, n: number): number {
    const before = this.line?.length ?? 0;
    const all = this.gather(buf, i, n);
    // The empty line may straddle the previous read: search from 3 bytes before the new ones.
    const end = all.indexOf('\r\n\r\n', Math.max(0, before - 3), 'latin1');
    if (end < 0) {
      if (all.length > MAX_HEAD_BYTES) this.failResponse(`response head longer than ${MAX_HEAD_BYTES} bytes`);
      return n;
    }
    this.line = null;
    const consumed = end + 4 - before; // bytes of this read that belong to the head
    const problem =
      end + 4 > MAX_HEAD_BYTES
        ? `response head longer than ${MAX_HEAD_BYTES} bytes`
        : this.applyHead(all.toString('latin1', 0, end));
    if (problem !== null) {
      this.failResponse(problem);
      return n;
    }
    return i + consumed;
  }

  /** Reads the status line and headers, tells the sink, and sets the body framing; returns a problem or null. */
  private applyHead(head: string): string | null {
    const lines = head.split('\r\n');
    const status = /^HTTP\/1\.([01]) (\d{3})(?: |$)/.exec(lines[0]!);
    if (status === null) return `malformed status line ${JSON.stringify(lines[0]!.slice(0, 80))}`;
    const code = Number(status[2]);
    if (code < 200) return `unexpected interim response ${code}`;
    let chunked = false;
    let length: number | null = null;
    let connection = '';
    for (let k = 1; k < lines.length; k++) {
      const colon = lines[k]!.indexOf(':');
      if (colon <= 0) return `malformed header line ${JSON.stringify(lines[k]!.slice(0, 80))}`;
      const name = lines[k]!.slice(0, colon).trim().toLowerCase();
      const value = lines[k]!.slice(colon + 1).trim();
      if (name === 'transfer-encoding')
        chunked = value
          .toLowerCase()
          .split(',')
          .some((v) => v.trim() === 'chunked');
      else if (name === 'content-length') {
        if (!/^\d+$/.test(value)) return `malformed Content-Length ${JSON.stringify(value)}`;
        length = Number(value);
      } else if (name === 'connection') connection = value.toLowerCase();
    }
    this.closeAfter = connection.includes('close') || (status[1] === '0' && !connection.includes('keep-alive'));
    this.sink!.head(code);
    if (code === 204 || code === 304) this.complete();
    else if (chunked) this.state = 'chunk-size';
    else if (length !== null) {
      this.state = 'length';
      this.remaining = length;
      if (length === 0) this.complete();
    } else {
      this.state = 'until-close';
      this.closeAfter = true;
    }
    return null;
  }

  /** A line ending in LF within `buf[i..n)` (joined with earlier reads), or null with the bytes kept. */
  private takeLine(buf: Buffer, i: number, n: number): { text: string; next: number } | null {
    // A loop, not `indexOf`: the lines are a few bytes, and the shared read buffer holds stale bytes past `n`.
    let lf = i;
    while (lf < n && buf[lf] !== LF) lf++;
    if (lf === n) {
      const all = this.gather(buf, i, n);
      if (all.length > MAX_HEAD_BYTES) this.failResponse('chunk-size or trailer line too long');
      return null;
    }
    let text: string;
    if (this.line === null) text = buf.toString('latin1', i, lf);
    else {
      text = this.gather(buf, i, lf).toString('latin1');
      this.line = null;
    }
    if (!text.endsWith('\r')) {
      this.failResponse('malformed chunked body: a line without CRLF');
      return null;
    }
    return { text: text.slice(0, -1), next: lf + 1 };
  }

  private readChunkSize(buf: Buffer, i: number, n: number): number {
    const line = this.takeLine(buf, i, n);
    if (line === null) return n;
    const hex = line.text.split(';', 1)[0]!.trim();
    if (!/^[0-9a-fA-F]{1,12}$/.test(hex)) {
      this.failResponse(`malformed chunk size ${JSON.stringify(hex.slice(0, 40))}`);
      return n;
    }
    const size = parseInt(hex, 16);
    if (size === 0) this.state = 'trailer';
    else {
      this.state = 'chunk-data';
      this.remaining = size;
    }
    return line.next;
  }

  private readTrailer(buf: Buffer, i: number, n: number): number {
    const line = this.takeLine(buf, i, n);
    if (line === null) return n;
    if (line.text === '') this.complete();
    return line.next;
  }

  /** The response's framing is complete: back to idle (or closed); `onRead` tells the sink. */
  private complete(): void {
    this.ended = this.sink;
    this.sink = null;
    this.state = 'idle';
    if (this.closeAfter) this.retire();
  }

  /** Fails the response in progress and drops the connection (its framing is lost). */
  private failResponse(message: string): void {
    const sink = this.sink;
    this.sink = null;
    this.state = 'idle';
    this.retire();
    sink?.fail(message);
  }

  private protocolError(message: string): void {
    this.retire();
    this.onProtocolError(message);
  }

  private retire(): void {
    this.dead = true;
    this.socket.destroy();
  }

  private onClose(): void {
    this.dead = true;
    const sink = this.sink;
    if (sink === null) return;
    if (this.state === 'until-close') {
      this.complete();
      this.ended = null;
      sink.end(performance.now());
      return;
    }
    this.sink = null;
    this.state = 'idle';
    sink.fail(
      this.gotBytes
        ? 'response cut off before its end'
        : `request failed: ${this.socketError?.message ?? 'socket hang up'}`,
    );
  }
}
