/**
 * The router side of `--workers N` (docs/workers.md sections 3-6): the one process that owns the engine clients
 * serves them to N HTTP fronts, each over its own connection to the router's unix socket (frames.ts: length-prefixed
 * frames both ways; a front is heard only after its hello with the router's token, and no frame is read past a
 * bound); the records of channel/records.ts are batched per tick both ways by outbox.ts.
 *
 * Every SUBMIT goes straight to the group's real `EngineClient.submit`, so select + reserve, the in-flight sets, the
 * stored loads and the release clamp stay in this one process in their synchronous blocks (dp-routing.md 12.3): the
 * fronts hold no routing state. Also here, because they must be one per gateway: the global concurrency count
 * (`--max-concurrent-requests`: PERMIT/RELEASE), the Responses store (`previous_response_id` from any front), and the
 * rank states every front answers /health, /ready and /v1/gateway/ranks from (SNAPSHOT, pushed on change, every
 * `snapshotIntervalMs`, and on a front's refresh CALL; with several engine groups also at the end of every turn that
 * placed or finished a request, since the fronts choose a request's group from it).
 *
 * Flow control (`outputGate`, outbox.ts): while a front's lane holds more than its high-water mark the engines'
 * output is not received, so a front slower than the engines slows them instead of being killed.
 *
 * A front that goes away (its socket closes, or `dropFront`, called by the cluster primary on the worker's exit) is
 * handled like its clients disconnecting: every engine request it owned is cancelled (ABORT to the rank, in-flight
 * slot released) and its concurrency permits are returned.
 *
 * The class holds the service's state and its sequence; its parts are modules of their own: front-socket.ts (one
 * connection up to the front's hello), front-sessions.ts (a front's tables: requests by handle, early aborts,
 * permits), forward-outputs.ts (a placed request's rows into its front's lane: the per-token path), permits.ts (the
 * global count), router-calls.ts (the CALL methods: the Responses store, a refresh), served-groups.ts (the snapshots).
 */
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import type { Logger } from 'pino';
import type { FlowTicket } from '../../engine-client/flow-control.js';
import { snapshotNumbers } from '../../engine-client/budgets.js';
import type { RequestStream } from '../../engine-client/request-stream.js';
import type { GenerateRequest } from '../../protocols/types.js';
import type { ResponsesStore } from '../../server/responses/store.js';
import { decodeUp } from '../channel/decode.js';
import { ChannelDecodeError, Tag, type GroupSnapshot, type UpRecord } from '../channel/records.js';
import { toWireError } from '../channel/wire-error.js';
import { FRONT_TOKEN_BYTES, MAX_FRONT_MESSAGE_BYTES, checkChannelPath, writeFrame } from '../channel/frames.js';
import type { OutputGate } from '../../transport/output-gate.js';
import { FrontOutboxes, MAX_PRESSURE_MS } from '../channel/outbox.js';
import { acceptFront, type FrontSocketHost } from './front-socket.js';
import {
  PENDING,
  abortHandle,
  cancelEvery,
  keepPlaced,
  newSession,
  submitRefused,
  type FrontSession,
} from './front-sessions.js';
import { forwardOutputs } from './forward-outputs.js';
import { ConcurrencyPermits } from './permits.js';
import { routerCallValue } from './router-calls.js';
import { groupSnapshots, type ServedGroup } from './served-groups.js';

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
  /**
   * Called once for a front that is stuck, or whose socket closed (or was closed for a bad frame) outside shutdown:
   * the primary kills it; its exit then drops it and forks a new one.
   */
  onFrontStuck?: (frontId: number) => void;
  /**
   * A connection to the socket that has not sent a valid front hello this long is closed, ms (default 10 000;
   * a front sends it as soon as it connects).
   */
  frontHelloTimeoutMs?: number;
  /** Largest front message read, bytes (default frames.ts `MAX_FRONT_MESSAGE_BYTES`); a longer frame closes the socket. */
  maxFrontMessageBytes?: number;
  /**
   * Flow control (outbox.ts `FrontOutboxes`): paused while some front's lane holds more than `pressureHighBytes`
   * (default outbox.ts `PRESSURE_HIGH_BYTES`, 8 MiB) its socket has not taken, resumed once every such lane is back
   * to `pressureLowBytes` (default 2 MiB) or gone, or after `maxPressureMs` (default outbox.ts `MAX_PRESSURE_MS`).
   * The cluster gives the gate its engine links' output receive loops wait on. Default: none.
   */
  outputGate?: OutputGate;
  pressureHighBytes?: number;
  pressureLowBytes?: number;
  maxPressureMs?: number;
  /** Called at each pause (`true`) and resume (`false`) of `outputGate`, after it changed (for metrics). */
  onOutputPressure?: (paused: boolean) => void;
}

/**
 * Bytes a front's socket may hold unwritten (node's buffer, above the kernel's) before the router's sends to it are
 * refused (EAGAIN) and its lane retries and merges (outbox.ts `FrontOutboxes`): about a thousand messages of a few
 * KiB each, what the ZeroMQ pipe this replaced queued per front.
 */
export const DOWN_HIGH_WATER_BYTES = 4 * 1024 * 1024;

/** A send refused for now (the lane retries; `FrontOutboxes` reads `code`). */
function refused(message: string): Error {
  return Object.assign(new Error(message), { code: 'EAGAIN' });
}

/** Counters of the service (for logs and tests). */
export interface RouterServiceStats {
  /** Refused input from the fronts' socket: malformed messages (dropped), bad hellos and oversized frames (closed). */
  decodeErrors: number;
  /** Front messages (frames after the hello) read. */
  frontMessages: number;
  frontsDropped: number;
  /** Engine requests cancelled because their front went away. */
  orphanedRequests: number;
}

/** The router's service to the fronts (see the module docs). `bind` then serve; `close` when the gateway stops. */
export class RouterService {
  readonly stats: RouterServiceStats = { decodeErrors: 0, frontMessages: 0, frontsDropped: 0, orphanedRequests: 0 };
  /** What a front's hello on its socket must carry (frames.ts `helloFrame`); the primary gives it to its fronts. */
  readonly frontToken: Buffer = randomBytes(FRONT_TOKEN_BYTES);
  private server: Server | null = null;
  private path: string | null = null;
  /** Every open connection to the socket, front or not yet (closed by `close`). */
  private readonly conns = new Set<Socket>();
  private readonly sessions = new Map<number, FrontSession>();
  private readonly outbox: FrontOutboxes;
  private readonly log: Logger;
  private readonly permits: ConcurrencyPermits;
  /** What each connection to the socket is served with (front-socket.ts). */
  private readonly socketHost: FrontSocketHost<FrontSession>;
  private snapshotTimer: NodeJS.Timeout | null = null;
  private snapshotQueued = false;
  private closed = false;
  /** `closingFronts()` was called: the fronts are being closed, so a failed send to one is expected. */
  private frontsClosing = false;

  constructor(private readonly opts: RouterServiceOptions) {
    this.log = opts.logger;
    this.permits = new ConcurrencyPermits(opts.maxConcurrentRequests);
    this.socketHost = {
      frontToken: this.frontToken,
      stats: this.stats,
      log: this.log,
      conns: this.conns,
      helloTimeoutMs: opts.frontHelloTimeoutMs ?? 10_000,
      maxFrontMessageBytes: opts.maxFrontMessageBytes ?? MAX_FRONT_MESSAGE_BYTES,
      isClosed: () => this.closed,
      hasOpenSocket: (frontId) => {
        const held = this.sessions.get(frontId);
        return held !== undefined && !held.sock.destroyed;
      },
      open: (frontId, sock) => this.open(frontId, sock),
      onMessage: (session, frame) => this.onMessage(session, frame),
      onClose: (session) => {
        if (this.sessions.get(session.frontId) === session) this.lost(session);
      },
    };
    this.outbox = this.newOutboxes(opts);
    this.listenToGroups(opts.groups);
  }

  /**
   * The fronts' outbox lanes (outbox.ts): a send never waits: a front whose socket holds too much refuses at once
   * (EAGAIN) and its lane retries, so one front that stopped reading never holds up the others; a front refusing too
   * long is reported stuck (unless the fronts are being closed).
   */
  private newOutboxes(opts: RouterServiceOptions): FrontOutboxes {
    return new FrontOutboxes(
      async (frontId, message) => {
        const s = this.sessions.get(frontId);
        if (s === undefined || s.dropped) return;
        const sock = s.sock;
        if (sock.destroyed) throw Object.assign(new Error(`front ${frontId} closed its socket`), { code: 'EPIPE' });
        if (sock.writableLength > DOWN_HIGH_WATER_BYTES)
          throw refused(`front ${frontId} holds ${sock.writableLength} bytes unread`);
        writeFrame(sock, message);
      },
      (frontId, err) => {
        if (this.closed) return;
        if (this.frontsClosing) {
          // Shutting down: the fronts close their sockets on purpose; a send in that window is no stuck front.
          this.log.debug(
            { frontId, code: (err as { code?: unknown } | null)?.code },
            'send to a closing front dropped',
          );
          return;
        }
        this.log.warn({ frontId, err }, 'front not reading (send refused or failed): treating it as stuck');
        this.report(frontId);
      },
      {
        stuckAfterMs: opts.sendTimeoutMs ?? 5000,
        maxQueuedBytes: opts.maxQueuedBytes,
        highWaterBytes: opts.pressureHighBytes,
        lowWaterBytes: opts.pressureLowBytes,
        maxPressureMs: opts.maxPressureMs,
        ...(opts.outputGate !== undefined
          ? { onPressure: (paused: boolean) => this.onPressure(opts.outputGate!, paused) }
          : {}),
        onPressureTimeout: (frontIds) =>
          this.log.warn(
            { frontIds, maxPressureMs: opts.maxPressureMs ?? MAX_PRESSURE_MS },
            'fronts kept the engine output paused too long (they read too slowly): resuming; those lanes may grow to the hard bound',
          ),
      },
    );
  }

  /** Every front hears of a rank joining (JOINED); a joined, changed or failed rank queues a snapshot for every front. */
  private listenToGroups(groups: readonly ServedGroup[]): void {
    for (const [i, g] of groups.entries()) {
      g.backend.on('joined', ((engine: { engineIndex: number | null }, rejoin: boolean) => {
        if (engine.engineIndex === null) return;
        for (const s of this.sessions.values())
          this.outbox.push(s.frontId, { tag: Tag.JOINED, group: i, engineIndex: engine.engineIndex, rejoin });
        this.queueSnapshot();
      }) as never);
      g.backend.on('rank', (() => this.queueSnapshot()) as never);
      g.backend.on('failed', (() => this.queueSnapshot()) as never);
    }
  }

  /** Flow control so far (outbox.ts): pauses of the engine output, ms paused (ended pauses), pauses timed out. */
  get pressureStats(): Readonly<{ pauses: number; pausedMs: number; timeouts: number }> {
    return this.outbox.pressureStats;
  }

  private onPressure(gate: OutputGate, paused: boolean): void {
    if (paused) gate.pause();
    else gate.resume();
    if (this.log.isLevelEnabled('debug')) {
      const lanes = [...this.sessions.values()].map((s) => [s.frontId, s.lane.queuedBytes]);
      this.log.debug(
        { lanes },
        paused
          ? 'a front lane is over its high-water mark: engine output receive paused'
          : 'front lanes drained: engine output receive resumed',
      );
    }
    this.opts.onOutputPressure?.(paused);
  }

  /** Engine requests currently owned by fronts (placed or being placed). */
  get liveRequests(): number {
    let n = 0;
    for (const s of this.sessions.values()) n += s.streams.size;
    return n;
  }

  /** Concurrency permits held by fronts now. */
  get permitsHeld(): number {
    return this.permits.held;
  }

  /**
   * Listen for the fronts at the unix socket `path` and start serving. Throws ConfigError for a path over the unix
   * socket limit (frames.ts `checkChannelPath`); rejects with the listen error.
   */
  async bind(path: string): Promise<void> {
    checkChannelPath(path); // before listening: a path too long leaves no socket file behind
    rmSync(path, { force: true }); // a stale file of an earlier process with this pid
    const server = createServer((sock) => acceptFront(sock, this.socketHost));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(path, () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', (err) => this.log.warn({ err }, 'front socket server error'));
    this.server = server;
    this.path = path;
    this.snapshotTimer = setInterval(() => this.broadcastSnapshot(), this.opts.snapshotIntervalMs ?? 250);
    this.snapshotTimer.unref();
  }

  /** A new session for front `frontId` on `sock` (an earlier one of that id, its socket closed, is dropped first). */
  private open(frontId: number, sock: Socket): FrontSession {
    this.dropFront(frontId);
    const session = newSession(frontId, sock, this.outbox.open(frontId));
    this.sessions.set(frontId, session);
    this.outbox.push(frontId, { tag: Tag.SNAPSHOT, groups: this.snapshot() });
    return session;
  }

  /**
   * `s`'s socket closed while its session was live: nothing can reach the front or be heard from it any more. Its
   * requests are cancelled and its permits returned now (`dropFront`); outside shutdown the front is reported
   * (`onFrontStuck`: the primary ends it, and forks a new one when it exits).
   */
  private lost(s: FrontSession): void {
    this.dropFront(s.frontId);
    if (this.closed || this.frontsClosing || s.reported) return;
    this.log.warn({ frontId: s.frontId }, 'front socket closed: its requests were aborted; ending the front');
    s.reported = true;
    this.opts.onFrontStuck?.(s.frontId);
  }

  /** Report front `frontId` to `onFrontStuck`, once per session. */
  private report(frontId: number): void {
    const s = this.sessions.get(frontId);
    if (s !== undefined) {
      if (s.reported) return;
      s.reported = true;
    }
    this.opts.onFrontStuck?.(frontId);
  }

  /** Every group's state now (what a front's RemoteBackend answers from; served-groups.ts). */
  snapshot(): GroupSnapshot[] {
    return groupSnapshots(this.opts.groups);
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
    this.outbox.forget(frontId);
    s.sock.destroy(); // nothing more is read from it either
    this.stats.frontsDropped++;
    const orphaned = cancelEvery(s);
    this.stats.orphanedRequests += orphaned;
    this.permits.returnAll(s.permits);
    if (orphaned > 0) this.log.warn({ frontId, orphaned }, 'front gone: its engine requests were aborted');
  }

  /**
   * The fronts are about to be told to close (shutdown): from now on a front whose socket closes, or that can no
   * longer take a send (its queue full), is dropped at debug instead of being reported stuck (a warning and a SIGKILL
   * of a process that is exiting anyway). Requests still live are served as before. Idempotent.
   */
  closingFronts(): void {
    this.frontsClosing = true;
  }

  /** Stop serving: cancel every request of every front, close every front's socket and the listening one. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.snapshotTimer !== null) clearInterval(this.snapshotTimer);
    for (const id of [...this.sessions.keys()]) this.dropFront(id);
    this.outbox.close();
    for (const sock of this.conns) sock.destroy();
    this.server?.close();
    if (this.path !== null) rmSync(this.path, { force: true });
  }

  /** One message of front `s` (all its records, in order); a malformed one is counted, logged and dropped. */
  private onMessage(s: FrontSession, payload: Uint8Array): void {
    let records: UpRecord[];
    try {
      records = decodeUp(payload);
    } catch (err) {
      this.stats.decodeErrors++;
      this.log.warn(
        { frontId: s.frontId, err: err instanceof ChannelDecodeError ? err.message : err },
        'malformed front message dropped',
      );
      return;
    }
    for (const r of records) {
      if (s.dropped) return;
      this.apply(s, r);
    }
  }

  private apply(s: FrontSession, r: UpRecord): void {
    switch (r.tag) {
      case Tag.SUBMIT:
        this.submit(s, r.handle, r.group, r.request, r.dpRank, r.flow);
        return;
      case Tag.ABORT:
        abortHandle(s, r.handle);
        return;
      case Tag.PERMIT: {
        const granted = this.permits.take(s.permits, r.ticket);
        this.outbox.push(s.frontId, { tag: Tag.GRANT, ticket: r.ticket, granted, max: this.permits.max });
        return;
      }
      case Tag.RELEASE:
        this.permits.release(s.permits, r.ticket);
        return;
      case Tag.CALL:
        this.call(s, r.callId, r.method, r.args);
        return;
    }
  }

  private submit(
    s: FrontSession,
    handle: number,
    group: number,
    request: GenerateRequest,
    dpRank: number | null,
    flow: FlowTicket | null,
  ): void {
    const g = this.opts.groups[group];
    if (g === undefined) {
      this.outbox.push(s.frontId, {
        tag: Tag.REJECTED,
        handle,
        error: { name: 'RangeError', message: `no engine group ${group}` },
      });
      return;
    }
    s.streams.set(handle, PENDING);
    // A request that may wait in the group's flow-control queue can be aborted there (front-sessions.ts `queued`).
    const queued = dpRank === null && g.backend.flowControlled === true ? new AbortController() : null;
    if (queued !== null) s.queued.set(handle, queued);
    const placed = g.backend.submit(request, {
      ...(dpRank === null ? {} : { dpRank }),
      ...(flow === null ? {} : { flow }),
      ...(queued === null ? {} : { signal: queued.signal }),
    });
    // With more than one group, each front chooses the group of a request from its latest SNAPSHOT
    // (GroupChooser.choose): send every front the new in-flight counts at the end of this turn, not at the next tick.
    if (this.opts.groups.length > 1) this.queueSnapshot();
    placed.then(
      (stream) => {
        if (!keepPlaced(s, handle, stream)) return;
        const budget = stream.budget ?? null;
        this.outbox.push(s.frontId, {
          tag: Tag.SUBMITTED,
          handle,
          engineIndex: stream.engineIndex,
          budget: budget === null ? null : snapshotNumbers(budget),
        });
        forwardOutputs(s, handle, stream, this.outbox, this.forgetStream);
      },
      (err: unknown) => {
        submitRefused(s, handle);
        if (!s.dropped) this.outbox.push(s.frontId, { tag: Tag.REJECTED, handle, error: toWireError(err) });
      },
    );
  }

  /** `forget`, bound once (what `forwardOutputs` calls). */
  private readonly forgetStream = (s: FrontSession, handle: number, stream: RequestStream): void =>
    this.forget(s, handle, stream);

  /** `handle` of `s` is done with `stream` (terminal output, failure). */
  private forget(s: FrontSession, handle: number, stream: RequestStream): void {
    if (s.streams.get(handle) === stream) s.streams.delete(handle);
    if (this.opts.groups.length > 1) this.queueSnapshot(); // a rank's in-flight count fell (see `submit`)
  }

  private call(s: FrontSession, callId: number, method: string, args: unknown): void {
    let value: unknown = null;
    let ok = true;
    try {
      value = routerCallValue(method, args, this.opts.store, () => this.snapshot(), this.opts.groups);
    } catch (err) {
      ok = false;
      value = toWireError(err);
    }
    if (value instanceof Promise) {
      // An adapter change: answered when the ranks have, and every front learns the new list from a snapshot.
      value.then(
        (v: unknown) => this.reply(s, callId, true, v),
        (err: unknown) => this.reply(s, callId, false, toWireError(err)),
      );
      return;
    }
    if (callId !== 0) this.outbox.push(s.frontId, { tag: Tag.REPLY, callId, ok, value });
  }

  private reply(s: FrontSession, callId: number, ok: boolean, value: unknown): void {
    this.queueSnapshot();
    if (callId !== 0 && this.sessions.get(s.frontId) === s)
      this.outbox.push(s.frontId, { tag: Tag.REPLY, callId, ok, value });
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
