/**
 * The router side of `--workers N` (docs/architecture.md sections 3-6): the one process that owns the engine clients
 * serves them to N HTTP fronts: it hears them on a ZeroMQ ROUTER socket (`ipc://`, one DEALER per front) and
 * answers each on its unix frame socket (frames.ts: the ZeroMQ send path cost the router two thread wake-ups per
 * message); the records of channel-codec.ts are batched per tick by outbox.ts.
 *
 * Every SUBMIT goes straight to the group's real `EngineClient.submit`, so select + reserve, the in-flight sets, the
 * stored loads and the release clamp stay in this one process in their synchronous blocks (dp-routing.md 12.3): the
 * fronts hold no routing state. Also here, because they must be one per gateway: the global concurrency count
 * (`--max-concurrent-requests`: PERMIT/RELEASE), the Responses store (`previous_response_id` from any front), and the
 * rank states every front answers /health, /ready and /v1/gateway/ranks from (SNAPSHOT, pushed on change, every
 * `snapshotIntervalMs`, and on a front's refresh CALL; with several engine groups also at the end of every turn that
 * placed or finished a request, since the fronts choose a request's group from it).
 *
 * A front that goes away (`dropFront`, called by the cluster primary on the worker's exit) is handled like its
 * clients disconnecting: every engine request it owned is cancelled (ABORT to the rank, in-flight slot released) and
 * its concurrency permits are returned.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import type { Logger } from 'pino';
import { Router } from 'zeromq';
import type { RequestStream } from '../engine-client/request-stream.js';
import type { EngineOutput, GenerateRequest } from '../protocols/types.js';
import type { EngineFamily, GenerationBackend } from '../server/backend.js';
import type { ResponsesStore, StoredResponse } from '../server/responses/store.js';
import {
  ChannelDecodeError,
  FRONT_HIGH_WATER_MARK,
  Tag,
  decodeUp,
  toWireError,
  type GroupSnapshot,
  type UpRecord,
} from './channel-codec.js';
import { FRONT_TOKEN_BYTES, FrameReader, downPathOf, writeFrame } from './frames.js';
import { FrontOutboxes, type FrontLane } from './outbox.js';

/** One served group as the router service sees it: its real engine client and its names. */
export interface ServedGroup {
  readonly worker: string;
  readonly engine: EngineFamily;
  readonly backend: GenerationBackend & { on(event: 'joined' | 'rank' | 'failed', listener: (...args: never[]) => void): unknown };
}

/** Options of `RouterService`. */
export interface RouterServiceOptions {
  groups: readonly ServedGroup[];
  store: ResponsesStore;
  /** The global cap on concurrent generation requests (0 = none; `--max-concurrent-requests`). */
  maxConcurrentRequests: number;
  logger: Logger;
  /** How often every front gets a fresh snapshot, ms (default 250). */
  snapshotIntervalMs?: number;
  /**
   * A front whose messages are refused this long (its queue full: it stopped reading) is stuck, ms (default 5000);
   * so is one holding more than `maxQueuedBytes` (default 64 MiB) the socket has not taken.
   */
  sendTimeoutMs?: number;
  maxQueuedBytes?: number;
  /** Called once for a front that is stuck (the primary kills it; its exit then drops it). */
  onFrontStuck?: (frontId: number) => void;
  /**
   * A connection to the frame socket that has not sent a valid front hello this long is closed, ms (default 10 000;
   * a front sends it as soon as it connects).
   */
  frontHelloTimeoutMs?: number;
}

const PENDING = Symbol('pending');

/**
 * Bytes a front's frame socket may hold unwritten (node's buffer, above the kernel's) before the router's sends to
 * it are refused (EAGAIN) and its lane retries and merges, as a full ZeroMQ pipe did (outbox.ts `FrontOutboxes`):
 * about the `FRONT_HIGH_WATER_MARK` messages of a few KiB each the ROUTER socket queued per front.
 */
export const DOWN_HIGH_WATER_BYTES = 4 * 1024 * 1024;

/** A send refused for now (the lane retries; `FrontOutboxes` reads `code`). */
function refused(message: string): Error {
  return Object.assign(new Error(message), { code: 'EAGAIN' });
}

/** One connected front: its ZeroMQ identity, its engine requests by handle, its concurrency permits. */
interface FrontSession {
  readonly frontId: number;
  readonly identity: Buffer;
  /** Its outbox lane (records of this turn, messages the socket has not taken yet). */
  readonly lane: FrontLane;
  readonly streams: Map<number, RequestStream | typeof PENDING>;
  /** Handles aborted while their submit was still being placed. */
  readonly abortedEarly: Set<number>;
  readonly permits: Set<number>;
  dropped: boolean;
}

/** Counters of the service (for logs and tests). */
export interface RouterServiceStats {
  decodeErrors: number;
  frontsDropped: number;
  /** Engine requests cancelled because their front went away. */
  orphanedRequests: number;
}

/** The router's service to the fronts (see the module docs). `bind` then serve; `close` when the gateway stops. */
export class RouterService {
  readonly stats: RouterServiceStats = { decodeErrors: 0, frontsDropped: 0, orphanedRequests: 0 };
  /** What a front's hello on its frame socket must carry (frames.ts `helloFrame`); the primary gives it to its fronts. */
  readonly frontToken: Buffer = randomBytes(FRONT_TOKEN_BYTES);
  private readonly socket: Router;
  /** The router → front frame socket of every front that connected one, by front id (frames.ts). */
  private readonly down = new Map<number, Socket>();
  private downServer: Server | null = null;
  private downPath: string | null = null;
  private readonly sessions = new Map<number, FrontSession>();
  private readonly outbox: FrontOutboxes;
  private readonly log: Logger;
  private permitsTaken = 0;
  private snapshotTimer: NodeJS.Timeout | null = null;
  private snapshotQueued = false;
  private closed = false;
  /** `closingFronts()` was called: the fronts are being closed, so a failed send to one is expected. */
  private frontsClosing = false;

  constructor(private readonly opts: RouterServiceOptions) {
    this.log = opts.logger;
    // sendTimeout 0: a send never waits; a front whose queue is full refuses at once (EAGAIN) and its lane retries
    // (outbox.ts `FrontOutboxes`), so one front that stopped reading never holds up the others. The high-water mark
    // counts messages (one per front per turn); the lane bounds the bytes behind it.
    this.socket = new Router({ mandatory: true, linger: 0, sendTimeout: 0, sendHighWaterMark: FRONT_HIGH_WATER_MARK });
    this.outbox = new FrontOutboxes(
      async (frontId, message) => {
        const s = this.sessions.get(frontId);
        if (s === undefined || s.dropped) return;
        const sock = this.down.get(frontId);
        // Not connected yet (its HELLO came first on the other socket): refused, retried.
        if (sock === undefined) throw refused(`front ${frontId} has not connected its frame socket yet`);
        if (sock.destroyed) throw Object.assign(new Error(`front ${frontId} closed its frame socket`), { code: 'EPIPE' });
        if (sock.writableLength > DOWN_HIGH_WATER_BYTES) throw refused(`front ${frontId} holds ${sock.writableLength} bytes unread`);
        writeFrame(sock, message);
      },
      (frontId, err) => {
        if (this.closed) return;
        if (this.frontsClosing) {
          // Shutting down: the fronts close their sockets on purpose; a send in that window is no stuck front.
          this.log.debug({ frontId, code: (err as { code?: unknown } | null)?.code }, 'send to a closing front dropped');
          return;
        }
        this.log.warn({ frontId, err }, 'front not reading (send refused or failed): treating it as stuck');
        this.opts.onFrontStuck?.(frontId);
      },
      { stuckAfterMs: opts.sendTimeoutMs ?? 5000, maxQueuedBytes: opts.maxQueuedBytes },
    );
    for (const [i, g] of opts.groups.entries()) {
      g.backend.on('joined', ((engine: { engineIndex: number | null }, rejoin: boolean) => {
        if (engine.engineIndex === null) return;
        for (const s of this.sessions.values()) this.outbox.push(s.frontId, { tag: Tag.JOINED, group: i, engineIndex: engine.engineIndex, rejoin });
        this.queueSnapshot();
      }) as never);
      g.backend.on('rank', (() => this.queueSnapshot()) as never);
      g.backend.on('failed', (() => this.queueSnapshot()) as never);
    }
  }

  /** Engine requests currently owned by fronts (placed or being placed). */
  get liveRequests(): number {
    let n = 0;
    for (const s of this.sessions.values()) n += s.streams.size;
    return n;
  }

  /** Concurrency permits held by fronts now. */
  get permitsHeld(): number {
    return this.permitsTaken;
  }

  /**
   * Bind the ROUTER at `address` (`ipc://<path>`), listen for the fronts' frame sockets at `<path>.down`, and start
   * serving. Throws ConfigError for a channel path over the unix socket limit (frames.ts `downPathOf`), the zeromq
   * bind error or the listen error.
   */
  async bind(address: string): Promise<void> {
    const downPath = downPathOf(address); // before binding: a path too long leaves no socket file behind
    await this.socket.bind(address);
    await this.listenDown(downPath);
    void this.receiveLoop();
    this.snapshotTimer = setInterval(() => this.broadcastSnapshot(), this.opts.snapshotIntervalMs ?? 250);
    this.snapshotTimer.unref();
  }

  /**
   * Listen for the fronts' frame sockets at `path` (frames.ts): a connection's first frame is its hello (front id and
   * `frontToken`). A hello without the token, or for a front id whose socket is open, is refused (logged, counted,
   * closed): the front's streams stay with it. Rejects with the listen error.
   */
  private async listenDown(path: string): Promise<void> {
    rmSync(path, { force: true }); // a stale file of an earlier process with this pid
    const server = createServer((sock) => this.acceptDown(sock));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(path, () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', (err) => this.log.warn({ err }, 'front frame socket server error'));
    this.downServer = server;
    this.downPath = path;
  }

  private acceptDown(sock: Socket): void {
    let frontId: number | null = null;
    // A connection that never says hello would hold a file descriptor for good.
    const helloTimer = setTimeout(() => {
      if (frontId !== null || sock.destroyed) return;
      this.stats.decodeErrors++;
      this.log.warn('a front frame socket sent no hello in time: closing it');
      sock.destroy();
    }, this.opts.frontHelloTimeoutMs ?? 10_000);
    helloTimer.unref();
    const reader = new FrameReader((frame) => {
      if (frontId !== null || frame.length !== 4 + FRONT_TOKEN_BYTES || !timingSafeEqual(frame.subarray(4), this.frontToken)) {
        this.stats.decodeErrors++;
        this.log.warn({ frontId, bytes: frame.length }, 'unexpected frame on a front frame socket (not a front hello with the token): closing it');
        sock.destroy();
        return;
      }
      const claimed = frame.readUInt32LE(0);
      const held = this.down.get(claimed);
      if (held !== undefined && !held.destroyed) {
        this.stats.decodeErrors++;
        this.log.warn({ frontId: claimed }, 'a second frame socket for a front that has one: closing the newcomer');
        sock.destroy();
        return;
      }
      frontId = claimed;
      clearTimeout(helloTimer);
      this.down.set(frontId, sock);
      // A front sends nothing but its hello: a longer frame is refused as announced, never gathered.
    }, 4 + FRONT_TOKEN_BYTES);
    sock.on('data', (chunk: Buffer) => {
      try {
        reader.push(chunk);
      } catch (err) {
        this.stats.decodeErrors++;
        this.log.warn({ err }, 'malformed front frame socket: closing it');
        sock.destroy();
      }
    });
    sock.on('error', (err) => {
      if (!this.closed) this.log.debug({ err, frontId }, 'front frame socket error');
    });
    sock.on('close', () => {
      clearTimeout(helloTimer);
      // While its session lives the entry stays (destroyed): sends fail (EPIPE) and the lane reports the front stuck,
      // as a ZeroMQ send to a peer gone did (EHOSTUNREACH). A front whose session is gone is forgotten.
      if (frontId !== null && this.down.get(frontId) === sock && !this.sessions.has(frontId)) this.down.delete(frontId);
    });
  }

  /** Every group's state now (what a front's RemoteBackend answers from). */
  snapshot(): GroupSnapshot[] {
    return this.opts.groups.map((g) => {
      const b = g.backend;
      const st = b.stats;
      return {
        worker: g.worker,
        engine: g.engine,
        dpSize: b.dpSize,
        maxModelLen: b.maxModelLen,
        contextTokenLimit: b.contextTokenLimit,
        alive: b.isAlive(),
        canServe: b.canServe(),
        status: b.status(),
        ranks: b.rankStates(),
        stats: {
          decodeErrors: st.decodeErrors,
          abortsSent: st.abortsSent,
          rankMismatches: st.rankMismatches,
          failures: { ...st.failures },
          rankDeaths: { ...st.rankDeaths },
          orphanOutputs: st.orphanOutputs,
          handshakeRejected: { ...st.handshakeRejected },
        },
      };
    });
  }

  /**
   * The front `frontId` is gone (its process exited): cancel every engine request it owned (ABORT to the rank,
   * in-flight slot released at once) and return its permits. Idempotent.
   */
  dropFront(frontId: number): void {
    const s = this.sessions.get(frontId);
    if (s === undefined) return;
    s.dropped = true;
    this.sessions.delete(frontId);
    if (this.down.get(frontId)?.destroyed === true) this.down.delete(frontId);
    this.outbox.forget(frontId);
    this.stats.frontsDropped++;
    let orphaned = 0;
    for (const [handle, stream] of s.streams) {
      orphaned++;
      if (stream === PENDING) s.abortedEarly.add(handle);
      else stream.cancel();
    }
    s.streams.clear();
    this.stats.orphanedRequests += orphaned;
    this.permitsTaken -= s.permits.size;
    s.permits.clear();
    if (orphaned > 0) this.log.warn({ frontId, orphaned }, 'front gone: its engine requests were aborted');
  }

  /**
   * The fronts are about to be told to close (shutdown): from now on a send a front can no longer take (its frame
   * socket closed, its queue full) is dropped at debug instead of reporting the front stuck (a warning and a SIGKILL
   * of a process that is exiting anyway). Requests still live are served as before. Idempotent.
   */
  closingFronts(): void {
    this.frontsClosing = true;
  }

  /** Stop serving: cancel every request of every front and close the socket. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.snapshotTimer !== null) clearInterval(this.snapshotTimer);
    for (const id of [...this.sessions.keys()]) this.dropFront(id);
    this.outbox.close();
    this.socket.close();
    for (const sock of this.down.values()) sock.destroy();
    this.down.clear();
    this.downServer?.close();
    if (this.downPath !== null) rmSync(this.downPath, { force: true });
  }

  private async receiveLoop(): Promise<void> {
    try {
      for await (const frames of this.socket) {
        const [identity, payload] = frames;
        if (identity === undefined || payload === undefined) {
          this.stats.decodeErrors++;
          continue;
        }
        let records: UpRecord[];
        try {
          records = decodeUp(payload);
        } catch (err) {
          this.stats.decodeErrors++;
          this.log.warn({ err: err instanceof ChannelDecodeError ? err.message : err }, 'malformed front message dropped');
          continue;
        }
        this.handle(identity, records);
        // zeromq.js resolves queued receives without returning to the event loop: yield so timers and sends run.
        await new Promise<void>((r) => setImmediate(r));
      }
    } catch (err) {
      if (!this.closed) this.log.error({ err }, 'front channel receive failed');
    }
  }

  private handle(identity: Buffer, records: UpRecord[]): void {
    let session: FrontSession | undefined;
    for (const r of records) {
      if (r.tag === Tag.HELLO) {
        this.dropFront(r.frontId); // a front id reconnecting is a fresh process
        session = { frontId: r.frontId, identity: Buffer.from(identity), lane: this.outbox.open(r.frontId), streams: new Map(), abortedEarly: new Set(), permits: new Set(), dropped: false };
        this.sessions.set(r.frontId, session);
        this.outbox.push(r.frontId, { tag: Tag.SNAPSHOT, groups: this.snapshot() });
        continue;
      }
      session ??= this.sessionOf(identity);
      if (session === undefined) {
        this.stats.decodeErrors++;
        this.log.warn({ tag: r.tag }, 'record from a front that did not say HELLO dropped');
        continue;
      }
      this.apply(session, r);
    }
  }

  private sessionOf(identity: Buffer): FrontSession | undefined {
    for (const s of this.sessions.values()) if (s.identity.equals(identity)) return s;
    return undefined;
  }

  private apply(s: FrontSession, r: UpRecord): void {
    switch (r.tag) {
      case Tag.SUBMIT:
        this.submit(s, r.handle, r.group, r.request, r.dpRank);
        return;
      case Tag.ABORT: {
        const stream = s.streams.get(r.handle);
        if (stream === PENDING) s.abortedEarly.add(r.handle);
        else if (stream !== undefined) {
          s.streams.delete(r.handle);
          stream.cancel();
        }
        return;
      }
      case Tag.PERMIT: {
        const max = this.opts.maxConcurrentRequests;
        const granted = max === 0 || this.permitsTaken < max;
        if (granted) {
          this.permitsTaken++;
          s.permits.add(r.ticket);
        }
        this.outbox.push(s.frontId, { tag: Tag.GRANT, ticket: r.ticket, granted, max });
        return;
      }
      case Tag.RELEASE:
        if (s.permits.delete(r.ticket)) this.permitsTaken--;
        return;
      case Tag.CALL:
        this.call(s, r.callId, r.method, r.args);
        return;
      case Tag.HELLO:
        return;
    }
  }

  private submit(s: FrontSession, handle: number, group: number, request: GenerateRequest, dpRank: number | null): void {
    const g = this.opts.groups[group];
    if (g === undefined) {
      this.outbox.push(s.frontId, { tag: Tag.REJECTED, handle, error: { name: 'RangeError', message: `no engine group ${group}` } });
      return;
    }
    s.streams.set(handle, PENDING);
    const placed = g.backend.submit(request, dpRank === null ? {} : { dpRank });
    // With more than one group, each front chooses the group of a request from its latest SNAPSHOT
    // (GroupRouter.choose): send every front the new in-flight counts at the end of this turn, not at the next tick.
    if (this.opts.groups.length > 1) this.queueSnapshot();
    placed.then(
      (stream) => {
        if (s.dropped || s.abortedEarly.delete(handle)) {
          s.streams.delete(handle);
          stream.cancel();
          return;
        }
        s.streams.set(handle, stream);
        this.outbox.push(s.frontId, { tag: Tag.SUBMITTED, handle, engineIndex: stream.engineIndex });
        this.pump(s, handle, stream);
      },
      (err: unknown) => {
        s.streams.delete(handle);
        s.abortedEarly.delete(handle);
        if (!s.dropped) this.outbox.push(s.frontId, { tag: Tag.REJECTED, handle, error: toWireError(err) });
      },
    );
  }

  /**
   * Forward one request's outputs to its front until the terminal one, a failure, or a cancel. Through the stream's
   * row mode when it has one (`listenRows`, issue 9: each row is written into this turn's message for the front
   * inside the engine client's batch step, straight from the decoded row; no output object, no delivery queue; every
   * engine client stream has it), else by iterating it (other backends, e.g. the tests' fakes).
   */
  private pump(s: FrontSession, handle: number, stream: RequestStream): void {
    const outbox = this.outbox;
    const lane = s.lane;
    if (stream.listenRows !== undefined) {
      stream.listenRows({
        row: (row, promptTokens, completionTokens, cachedTokens) => {
          if (row.finishReason !== null) this.forget(s, handle, stream);
          if (s.dropped || lane.closed) return;
          outbox.message(lane).outRow(handle, row, promptTokens, completionTokens, cachedTokens);
        },
        error: (err) => {
          this.forget(s, handle, stream);
          if (!s.dropped) this.outbox.push(s.frontId, { tag: Tag.FAILED, handle, error: toWireError(err) });
        },
      });
      return;
    }
    const onOutput = (o: EngineOutput): boolean => {
      if (s.dropped) return true;
      // Straight into this turn's message for the front (no record object): the codec writes the fields it sends.
      outbox.message(lane).out(handle, o);
      return o.finishReason !== null;
    };
    const onError = (err: unknown): void => {
      if (!s.dropped) this.outbox.push(s.frontId, { tag: Tag.FAILED, handle, error: toWireError(err) });
    };
    const forget = (): void => this.forget(s, handle, stream);
    void (async () => {
      // Stop at the terminal output without calling the iterator's return() (that would cancel).
      const it = stream[Symbol.asyncIterator]();
      try {
        for (;;) {
          const next = await it.next();
          if (next.done === true || onOutput(next.value)) return;
        }
      } catch (err) {
        onError(err);
      } finally {
        forget();
      }
    })();
  }

  /** `handle` of `s` is done with `stream` (terminal output, failure). */
  private forget(s: FrontSession, handle: number, stream: RequestStream): void {
    if (s.streams.get(handle) === stream) s.streams.delete(handle);
    if (this.opts.groups.length > 1) this.queueSnapshot(); // a rank's in-flight count fell (see `submit`)
  }

  private call(s: FrontSession, callId: number, method: string, args: unknown): void {
    let value: unknown = null;
    let ok = true;
    try {
      value = this.callValue(method, args);
    } catch (err) {
      ok = false;
      value = toWireError(err);
    }
    if (callId !== 0) this.outbox.push(s.frontId, { tag: Tag.REPLY, callId, ok, value });
  }

  private callValue(method: string, args: unknown): unknown {
    const store = this.opts.store;
    switch (method) {
      case 'refresh':
        return this.snapshot();
      case 'store.put': {
        const [id, stored] = args as [string, StoredResponse];
        store.put(id, stored);
        return null;
      }
      case 'store.get':
        return store.get(args as string) ?? null;
      case 'store.delete':
        return store.delete(args as string);
      case 'store.prefetch': {
        const { responses, items } = args as { responses: string[]; items: string[] };
        return {
          responses: responses.map((id) => [id, store.get(id) ?? null]),
          items: items.map((id) => [id, store.item(id) ?? null]),
        };
      }
      default:
        throw new RangeError(`unknown call ${JSON.stringify(method)}`);
    }
  }

  private queueSnapshot(): void {
    if (this.snapshotQueued) return;
    this.snapshotQueued = true;
    setImmediate(() => {
      this.snapshotQueued = false;
      this.broadcastSnapshot();
    });
  }

  private broadcastSnapshot(): void {
    if (this.closed || this.sessions.size === 0) return;
    const groups = this.snapshot();
    for (const s of this.sessions.values()) this.outbox.push(s.frontId, { tag: Tag.SNAPSHOT, groups });
  }
}
