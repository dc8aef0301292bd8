/**
 * A front process's channel to the router of `--workers N` (docs/workers.md sections 3-6): one unix socket,
 * length-prefixed frames both ways (frames.ts); the front's records of one turn are one frame (outbox.ts `UpOutbox`).
 * `FrontChannel` submits engine requests (SUBMIT; the router's SUBMITTED resolves a stream fed by OUT records, the
 * engine client's own `RequestStreamImpl`, so the routes read exactly what they read in one process; cancelling it
 * sends ABORT), asks for concurrency permits (PERMIT / RELEASE), calls the router (CALL: the Responses store, a
 * snapshot refresh) and keeps the router's last SNAPSHOT of every group. What the HTTP app is given on top of it:
 * remote-backend.ts (`RemoteBackend`, `sharedConcurrency`) and shared-responses-store.ts. No routing state lives here.
 */
import { IdTable } from '../../collections/id-table.js';
import { EventEmitter } from 'node:events';
import { connect, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import type { CancellableSubmitOptions, CancelSignal } from '../../engine-client/client.js';
import { EngineClientError } from '../../engine-client/errors.js';
import { snapshotFromNumbers } from '../../engine-client/budgets.js';
import { RequestStreamImpl, type RequestStream } from '../../engine-client/request-stream.js';
import type { GenerateRequest } from '../../protocols/types.js';
import { decodeDown } from '../channel/decode.js';
import {
  ChannelDecodeError,
  Tag,
  type GroupSnapshot,
  type ReceivedRecord,
  type UpRecord,
  type WireError,
} from '../channel/records.js';
import { fromWireError } from '../channel/wire-error.js';
import { FrameReader, helloFrame, writeFrame, writeFrames } from '../channel/frames.js';
import { UpOutbox } from '../channel/outbox.js';

/** How long the frame socket is read in one event-loop turn before it pauses until the next turn, ms. */
export const RECEIVE_SLICE_MS = 4;

/** How long a refresh or store call waits for the router before answering from what the front has, ms. */
export const ROUTER_CALL_TIMEOUT_MS = 2000;

/**
 * Bytes the front's socket may hold unwritten (node's buffer, above the kernel's) before the front gives the router
 * up as not reading (the channel closes: `socket-closed`, and the front ends). Far above what a live router leaves
 * unread: it reads every turn, and a front's records are a few per request.
 */
export const UP_MAX_UNWRITTEN_BYTES = 64 * 1024 * 1024;

interface Submission {
  readonly stream: RequestStreamImpl;
  settled: boolean;
  resolve(stream: RequestStream): void;
  reject(err: unknown): void;
}

interface PendingCall {
  resolve(value: unknown): void;
  reject(err: unknown): void;
  timer: NodeJS.Timeout;
}

function abortReason(signal: CancelSignal): unknown {
  return signal.reason ?? new DOMException('The operation was aborted', 'AbortError');
}

/** A front's channel to the router (see the module docs). `connect` once; `close` when the front stops. */
export class FrontChannel extends EventEmitter<{
  snapshot: [GroupSnapshot[]];
  joined: [group: number, engineIndex: number, rejoin: boolean];
  /** The socket to the router closed while the channel was open: nothing can answer this front any more. */
  'socket-closed': [];
}> {
  /** Malformed router messages dropped. */
  decodeErrors = 0;
  /** The socket to the router (frames.ts); set by `connect`. */
  private sock!: Socket;
  private readonly outbox: UpOutbox;
  // `IdTable`s, not `Map`s: an entry per request comes and goes (collections/id-table.ts says why).
  private readonly submissions = new IdTable<Submission>();
  private readonly calls = new IdTable<PendingCall>();
  private readonly grants = new IdTable<(granted: boolean) => void>();
  private nextHandle = 1;
  private nextCall = 1;
  private nextTicket = 1;
  private last: GroupSnapshot[] | null = null;
  private refreshing: Promise<void> | null = null;
  private closed = false;
  /** What later work is refused with once closed (`shut`). */
  private closedError: Error | null = null;

  private constructor(
    readonly frontId: number,
    readonly log: Logger,
  ) {
    super();
    this.outbox = new UpOutbox((messages) => this.write(messages));
  }

  /**
   * Connect to the router's socket at `path`, say hello (`frontId` and `token`, the router's `frontToken`: it hears
   * no front without it), and resolve once the router's first snapshot arrived. Rejects when the router does not
   * answer within `timeoutMs` (default 30 000), or the socket closes first.
   */
  static async connect(
    path: string,
    frontId: number,
    token: Uint8Array,
    log: Logger,
    timeoutMs = 30_000,
  ): Promise<FrontChannel> {
    const ch = new FrontChannel(frontId, log);
    const first = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => fail(new Error(`the router at ${path} did not answer within ${timeoutMs} ms`)),
        timeoutMs,
      );
      const fail = (err: Error): void => {
        clearTimeout(timer);
        ch.off('snapshot', ok);
        ch.close();
        reject(err);
      };
      const ok = (): void => {
        clearTimeout(timer);
        ch.off('socket-closed', closed);
        resolve();
      };
      const closed = (): void =>
        fail(new Error(`the router at ${path} closed the connection before its first snapshot`));
      ch.once('snapshot', ok);
      ch.once('socket-closed', closed);
    });
    ch.open(path, helloFrame(frontId, token));
    await first;
    return ch;
  }

  /** The router's last snapshot of every group. */
  get groups(): GroupSnapshot[] {
    return this.last ?? [];
  }

  /** Engine requests of this front the router has not finished. */
  get liveRequests(): number {
    return this.submissions.size;
  }

  /** Submit one engine request to group `group` (see `RemoteBackend.submit`). */
  submit(group: number, request: GenerateRequest, options: CancellableSubmitOptions = {}): Promise<RequestStream> {
    const { dpRank, signal } = options;
    if (signal?.aborted) return Promise.reject(abortReason(signal));
    if (this.closedError !== null) return Promise.reject(this.closedError);
    const handle = this.nextHandle++;
    let detach: () => void = () => {};
    // Fails the submission when its record cannot be sent (outbox.ts: too large for a message); undefined when sent.
    const unsendable = (): Error | undefined => {
      try {
        this.push({ tag: Tag.SUBMIT, handle, group, request, dpRank: dpRank ?? null, flow: options.flow ?? null });
        return undefined;
      } catch (err) {
        return new EngineClientError(
          'encode',
          `request ${request.requestId} cannot be sent to the router: ${(err as Error).message}`,
          { cause: err, requestId: request.requestId },
        );
      }
    };
    const stream = new RequestStreamImpl(
      request.requestId,
      request.promptTokenIds.length,
      () => {
        // Abandoned: tell the router at the next flush; later records for this handle are ignored.
        this.submissions.delete(handle);
        this.push({ tag: Tag.ABORT, handle });
      },
      () => detach(),
    );
    return new Promise<RequestStream>((resolve, reject) => {
      const sub: Submission = { stream, settled: false, resolve, reject };
      this.submissions.set(handle, sub);
      if (signal) {
        const onAbort = () => {
          if (!sub.settled) {
            sub.settled = true;
            this.submissions.delete(handle);
            this.push({ tag: Tag.ABORT, handle });
            reject(abortReason(signal));
          } else {
            stream.cancel();
          }
        };
        signal.addEventListener('abort', onAbort, { once: true });
        detach = () => signal.removeEventListener('abort', onAbort);
      }
      const err = unsendable();
      if (err !== undefined) {
        sub.settled = true;
        this.submissions.delete(handle);
        detach();
        reject(err);
      }
    });
  }

  /** Ask the router for a concurrency permit: resolves with a ticket, or null when the gateway is full. */
  acquirePermit(): Promise<number | null> {
    if (this.closed) return Promise.resolve(null);
    const ticket = this.nextTicket++;
    return new Promise((resolve) => {
      this.grants.set(ticket, (granted) => resolve(granted ? ticket : null));
      this.push({ tag: Tag.PERMIT, ticket });
    });
  }

  /** Return a permit. */
  releasePermit(ticket: number): void {
    this.push({ tag: Tag.RELEASE, ticket });
  }

  /**
   * Call `method` in the router; resolves with its value. Rejects with the router's error, after
   * `ROUTER_CALL_TIMEOUT_MS`, or with `ChannelRecordTooLarge` for arguments no message can carry. `fireAndForget`
   * sends without waiting: no reply, resolves with null (arguments too large are logged and not sent).
   */
  call(method: string, args: unknown, fireAndForget = false): Promise<unknown> {
    if (fireAndForget) {
      try {
        this.push({ tag: Tag.CALL, callId: 0, method, args });
      } catch (err) {
        this.log.warn({ method, err: (err as Error).message }, 'router call not sent');
      }
      return Promise.resolve(null);
    }
    if (this.closedError !== null) return Promise.reject(this.closedError);
    const callId = this.nextCall++;
    return new Promise((resolve, reject) => {
      this.push({ tag: Tag.CALL, callId, method, args }); // a throw rejects
      const timer = setTimeout(() => {
        this.calls.delete(callId);
        reject(new Error(`the router did not answer ${method} within ${ROUTER_CALL_TIMEOUT_MS} ms`));
      }, ROUTER_CALL_TIMEOUT_MS);
      this.calls.set(callId, { resolve, reject, timer });
    });
  }

  /** Fetch a fresh snapshot (falls back to the last one when the router does not answer in time). */
  refresh(): Promise<void> {
    // Concurrent refreshes (every group of this front, several probes at once) share one call.
    this.refreshing ??= this.call('refresh', null)
      .then(
        (groups) => this.applySnapshot(groups as GroupSnapshot[]),
        (err: unknown) => this.log.warn({ err }, 'router snapshot refresh failed: answering from the last one'),
      )
      .finally(() => {
        this.refreshing = null;
      });
    return this.refreshing;
  }

  /** Stop: every unfinished request fails (client-closed), the socket closes. */
  close(): void {
    this.shut('the front is shutting down');
  }

  /**
   * Closed (`close`, or the router's socket closed: nothing can answer any more): every unfinished request and call
   * fails with a `client-closed` EngineClientError carrying `message`, every permit asked for is refused, and so is
   * all later work (`submit`, `acquirePermit`, `call`). Idempotent.
   */
  private shut(message: string): void {
    if (this.closed) return;
    this.closed = true;
    const err = (this.closedError = fromWireError({ name: 'EngineClientError', kind: 'client-closed', message }));
    for (const sub of this.submissions.values()) {
      if (!sub.settled) {
        sub.settled = true;
        sub.reject(err);
      } else sub.stream.fail(err);
    }
    this.submissions.clear();
    for (const c of this.calls.values()) {
      clearTimeout(c.timer);
      c.reject(err);
    }
    this.calls.clear();
    for (const g of this.grants.values()) g(false);
    this.grants.clear();
    this.outbox.close();
    this.sock.destroy();
  }

  /** Queue `r` for this turn's message; throws `ChannelRecordTooLarge` for a record no message can carry. */
  private push(r: UpRecord): void {
    this.outbox.push(r);
  }

  /** This turn's messages, in one write; a router that left too much unread is given up (see `UP_MAX_UNWRITTEN_BYTES`). */
  private write(messages: Uint8Array[]): void {
    const sock = this.sock;
    if (sock.destroyed) return; // `socket-closed` has been (or is being) emitted
    if (sock.writableLength > UP_MAX_UNWRITTEN_BYTES) {
      this.log.error(
        { unwritten: sock.writableLength },
        "the router is not reading this front's messages: closing the channel",
      );
      sock.destroy();
      return;
    }
    writeFrames(sock, messages);
  }

  /**
   * Connect to the router's socket (frames.ts) and send `hello` (this front's id and the router's token) first;
   * every frame from the router is one message. A connection that fails or closes while the channel is open is
   * logged and emitted as `socket-closed` (the front can no longer be answered: its owner ends the process, which the
   * primary forks again).
   */
  private open(path: string, hello: Buffer): void {
    const sock = connect(path);
    this.sock = sock;
    const reader = new FrameReader((frame) => this.onMessage(frame));
    // Written while connecting: node sends it first once connected, before any message (those leave at the end of
    // a turn, outbox.ts).
    writeFrame(sock, hello);
    // libuv reads a readable socket up to 32 × 64 KiB per poll: after RECEIVE_SLICE_MS of frames in one turn the
    // socket pauses until the next turn, so the HTTP side (timers, accepts, the per-tick writes) runs in between and
    // a front that is behind hands each stream the rows of a few ms per write, not of a whole backlog.
    let sliceStart = -1;
    const endSlice = (): void => {
      sliceStart = -1;
      if (sock.isPaused() && !sock.destroyed) sock.resume();
    };
    sock.on('data', (chunk: Buffer) => {
      if (sliceStart < 0) {
        sliceStart = performance.now();
        setImmediate(endSlice);
      }
      try {
        reader.push(chunk);
      } catch (err) {
        this.decodeErrors++;
        this.log.error({ err }, 'corrupt router frame stream: closing it');
        sock.destroy();
        return;
      }
      if (performance.now() - sliceStart >= RECEIVE_SLICE_MS) sock.pause();
    });
    sock.on('error', (err) => {
      if (!this.closed) this.log.error({ err }, 'router socket failed');
    });
    sock.on('close', () => {
      if (this.closed) return;
      this.log.error('router socket closed: this front can no longer be answered');
      // Its live requests end now (the HTTP side answers them with an error), not when the process goes.
      this.shut('the router connection of this HTTP front closed');
      this.emit('socket-closed');
    });
  }

  /** One router message (all its records, in order); a malformed one is counted, logged and dropped. */
  private onMessage(payload: Uint8Array): void {
    let records: ReceivedRecord[];
    try {
      records = decodeDown(payload);
    } catch (err) {
      this.decodeErrors++;
      this.log.warn({ err: err instanceof ChannelDecodeError ? err.message : err }, 'malformed router message dropped');
      return;
    }
    for (const r of records) this.apply(r);
  }

  private apply(r: ReceivedRecord): void {
    switch (r.tag) {
      case Tag.SUBMITTED: {
        const sub = this.submissions.get(r.handle);
        if (sub === undefined || sub.settled) return;
        sub.settled = true;
        sub.stream.engineIndex = r.engineIndex;
        if (r.budget !== null) sub.stream.budget = snapshotFromNumbers(r.budget);
        sub.resolve(sub.stream);
        return;
      }
      case Tag.REJECTED:
        this.settleWithError(r.handle, r.error);
        return;
      case Tag.FAILED: {
        const sub = this.submissions.get(r.handle);
        if (sub === undefined) return;
        if (!sub.settled) this.settleWithError(r.handle, r.error);
        else {
          this.submissions.delete(r.handle);
          sub.stream.fail(fromWireError(r.error));
        }
        return;
      }
      case Tag.OUT: {
        const sub = this.submissions.get(r.handle);
        if (sub === undefined) return;
        const o = r.output;
        if (o.finishReason !== null) this.submissions.delete(r.handle);
        // The decoded row itself, named (no copy: deliver builds the stream's output from it).
        o.requestId = sub.stream.requestId;
        sub.stream.deliver(o);
        return;
      }
      case Tag.GRANT: {
        const g = this.grants.get(r.ticket);
        this.grants.delete(r.ticket);
        g?.(r.granted);
        return;
      }
      case Tag.REPLY: {
        const c = this.calls.get(r.callId);
        if (c === undefined) return;
        this.calls.delete(r.callId);
        clearTimeout(c.timer);
        if (r.ok) c.resolve(r.value);
        else c.reject(fromWireError(r.value as WireError));
        return;
      }
      case Tag.SNAPSHOT:
        this.applySnapshot(r.groups);
        return;
      case Tag.JOINED:
        this.emit('joined', r.group, r.engineIndex, r.rejoin);
        return;
    }
  }

  private settleWithError(handle: number, error: WireError): void {
    const sub = this.submissions.get(handle);
    if (sub === undefined || sub.settled) return;
    this.submissions.delete(handle);
    sub.settled = true;
    sub.reject(fromWireError(error));
  }

  private applySnapshot(groups: GroupSnapshot[]): void {
    this.last = groups;
    this.emit('snapshot', groups);
  }
}
