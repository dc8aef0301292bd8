/**
 * The gateway's ZeroMQ socket set for one worker (engine-wire.md sections 1-2; SMG `transport.rs`,
 * `zmq_client.rs`, `connector.rs`): input ROUTER, output PULL and handshake ROUTER, all bound by the gateway and kept
 * bound for its whole life, so ranks can join, die and join again (issue #8).
 *
 * Design choices (documented here because the engine client relies on them):
 * - The input ROUTER has `mandatory` set (ZMQ_ROUTER_MANDATORY). Without it a ROUTER silently drops a message for
 *   an identity that is not connected (dp-routing.md 14.8), so a request to a rank killed with SIGKILL would vanish
 *   and hang until the silence watchdog. With it, such a send rejects at once with `TransportError` code
 *   `EHOSTUNREACH`, and a peer whose high-water mark is reached refuses the send with EAGAIN (retried until the send
 *   timeout, then `SendTimeoutError`). libzmq refuses both on the identity frame, before any part is queued, so a
 *   failed send never leaves the socket mid-message (the hazard dp-routing.md section 6 names); that is what lets a
 *   send timeout be one rank's failure instead of the whole group's.
 * - The input ROUTER does NOT set `handover` (ZMQ_ROUTER_HANDOVER; issue 26): with it, any connection presenting a
 *   live rank's identity took the identity over and libzmq cut the real rank's pipe, so every later ADD went to the
 *   newcomer and the real rank was lost (measured with zeromq 6.8.0: 5 of 5 sends reached the newcomer). Without it
 *   libzmq ignores a second peer with an identity in use, and the rank that registered keeps it. A restarted engine
 *   is not hurt: it connects its input socket only after its handshake, by which time libzmq has dropped the dead
 *   process's pipe (over ipc the kernel closes the socket of an exited process at once), and the engine client admits
 *   its HELLO only once the old identity no longer answers (probes.ts).
 * - The handshake ROUTER does set `handover`: a restarted engine's HELLO may arrive while libzmq still holds its
 *   previous process's handshake pipe, and nothing but HELLO/READY travels there (a HELLO for a live index is refused
 *   by the engine client after probing the holder).
 * - Every bound socket has a maximum message size (ZMQ_MAXMSGSIZE, per frame; `DEFAULT_MAX_MESSAGE_BYTES`): libzmq
 *   drops the connection of a peer that announces a larger frame instead of reading it.
 * - Sends are ordered per rank (src/transport/send-queues.ts): one FIFO per identity, drained round-robin from the end
 *   of the event-loop turn they were queued in (`schedulePump`: one I/O-thread wake-up for the turn's sends), one send
 *   in progress on the socket at a time (zeromq.js allows one send and one receive in flight per socket). A peer at
 *   its high-water mark backs off without delaying other ranks. After a failed send, the next send starts only after
 *   a macrotask turn, so the caller's rejection handler runs first. A send timeout also rejects everything else
 *   queued for that identity (the peer is not reading; each would wait out its own timeout).
 * - The handshake service (handshake-service.ts) owns the receive side of the handshake ROUTER and of the input
 *   ROUTER for the link's life.
 * - The output receive loop follows engine-wire.md 1.8 and feeds a queue of 256 messages (back-pressure on the
 *   PULL). `ENGINE_CORE_DEAD` is reported and the loop continues; what it means is the engine client's call. With an
 *   `outputGate` (the router of `--workers N`, output-gate.ts) it also takes no message while the gate is paused.
 * - zeromq's socket monitor reports `disconnect` on a bound PULL when a connected PUSH peer goes away, including a
 *   SIGKILLed process (measured with zeromq 6.8.0 / libzmq 4.3.5 over ipc), and likewise on the input ROUTER for
 *   a DEALER. Both surface as `{ kind: 'disconnect', address }`. The address is our bound endpoint, not the peer:
 *   the event does not say which rank went away (a hint, not proof of death).
 * - libzmq leaves ipc socket files behind on close; `close()` removes the ones this link bound, if they are still
 *   the same files (inode check, socket-paths.ts).
 * - With `rankRecords` the link keeps each joined rank's ready response in `<P>-ranks.json` (rank-records.ts) and,
 *   after binding, adopts the ranks of a previous gateway still connected to the input socket (adoption.ts): they are
 *   reported to the listener as joined with `adopted: true`. A HELLO for an index cancels its adoption.
 */
import { setImmediate as nextMacrotask } from 'node:timers/promises';
import { Pull, Router } from 'zeromq';
import type { Socket } from 'zeromq';
import type { ConnectedEngine, EngineLink, LinkListener, OutputMessage } from '../engine-client/link.js';
import { isEngineCoreDead } from '../protocols/frames.js';
import { compareIdentities } from '../protocols/identity.js';
import type { RequestTypeByte } from '../protocols/types.js';
import { describeIdentity, errorCode, errorMessage, hex } from './describe.js';
import type { EngineEndpoints } from './endpoints.js';
import { ConfigError, SendTimeoutError, TransportError } from './errors.js';
import { HandshakeService } from './handshake-service.js';
import { silentLogger } from '../logging.js';
import type { MinimalLogger } from '../logging.js';
import { MessageQueue, OUTPUT_QUEUE_CAPACITY } from './message-queue.js';
import type { OutputGate } from './output-gate.js';
import { PerRankSendQueues } from './send-queues.js';
import { prepareSocketPaths, recordSocketFiles, removeOwnSocketFiles, type BoundSocketFile } from './socket-paths.js';
import { encodeAbortPayload } from '../protocols/tokenspeed/abort.js';
import { RequestType } from '../protocols/types.js';
import { DEFAULT_ADOPTION_WINDOW_MS, RankAdoption } from './adoption.js';
import { rankRecordsPath, readRankRecords, writeRankRecords, type RankRecord } from './rank-records.js';

/** Handshake stage timeout default: 600 s per stage of one rank (engine-wire.md 1.9, SMG `zmq_client.rs`). */
export const DEFAULT_HANDSHAKE_RECEIVE_TIMEOUT_MS = 600_000;
/**
 * How long the output receive loop keeps receiving before it yields to the event loop, in ms (see `receiveLoop`).
 * Short enough for the event-loop delay target (p99 ≤ 20 ms, issue 9), long enough that several batches land in
 * one turn and a stream's records of that turn leave in one write (server/coalescing-writer.ts).
 */
export const RECEIVE_SLICE_MS = 4;
/** Input send timeout default: 10 s per send (engine-wire.md 1.9, SMG PR #2094). */
export const DEFAULT_SEND_TIMEOUT_MS = 10_000;
/**
 * Largest frame each bound socket accepts, in bytes (ZMQ_MAXMSGSIZE):
 * - handshake: HELLO/READY are 53-byte maps (engine-wire.md 2.3); 64 KiB leaves room for any future keys.
 * - input: the gateway only receives the ready response there (19 keys, a few hundred bytes with a long
 *   `kv_events_config`; 2.5); 1 MiB.
 * - output: the largest legitimate batch: up to a few thousand rows (max_num_seqs) of up to 50 tokens each for a
 *   non-streaming TokenSpeed row (4.8 "Cadence"), each token with a float64 logprob and its id, plus rids: a few MB;
 *   vLLM envelopes and their aux tensor frames are of the same order (5.6, 5.8). 64 MiB is far above that and still
 *   bounds what a broken or hostile peer can make the gateway buffer.
 */
export interface MaxMessageBytes {
  handshake: number;
  input: number;
  output: number;
}
export const DEFAULT_MAX_MESSAGE_BYTES: Readonly<MaxMessageBytes> = Object.freeze({
  handshake: 64 * 1024,
  input: 1024 * 1024,
  output: 64 * 1024 * 1024,
});
/**
 * Linger of the input ROUTER on close, in ms: lets final aborts reach live engines without delaying process exit
 * long. Dropped to 0 once a send timed out (that engine is not reading; lingering would only delay exit).
 */
const INPUT_LINGER_MS = 500;
/** The largest engine count: identities are 16-bit (engine-wire.md 1.5). */
const MAX_DP_SIZE = 65536;

/** Options of `ZmqEngineLink.create` / `bind`. */
export interface ZmqLinkOptions {
  endpoints: EngineEndpoints;
  /** Number of rank slots, engine indexes 0..dpSize−1 (>= 1; engine-wire.md 2.6). */
  dpSize: number;
  /** Bound on each stage of one rank's handshake (HELLO → READY, → registration), in ms. Default 600 000. */
  handshakeReceiveTimeoutMs?: number;
  /**
   * Handover hardening of the handshake service (handshake-service.ts): the READY → registration bound and the handover
   * cooldown after a missed one, ms. Defaults `REGISTRATION_AFTER_READY_MS`, `HANDOVER_COOLDOWN_MS`; tests shorten them.
   */
  handover?: { registrationWindowMs?: number; cooldownMs?: number };
  /** Bound on each input send, in ms. Default 10 000. */
  sendTimeoutMs?: number;
  /**
   * Send high-water mark of the input ROUTER, in messages per peer (zeromq default 1000). Mainly for tests that
   * need to reach it quickly.
   */
  sendHighWaterMark?: number;
  /** Per-socket frame size limits in bytes (defaults `DEFAULT_MAX_MESSAGE_BYTES`); each must be an integer ≥ 1. */
  maxMessageBytes?: Partial<MaxMessageBytes>;
  /** A pino logger (any `MinimalLogger`). Default: silent. */
  logger?: MinimalLogger;
  /**
   * While paused, the output receive loop takes no next message from the PULL (output-gate.ts; the router's flow
   * control toward slow fronts, fronts/channel/outbox.ts). Default: none (always receive).
   */
  outputGate?: OutputGate;
  /**
   * Keep the rank records file `<P>-ranks.json` and adopt the recorded ranks still connected after `bind()` (issue 26
   * part 6; rank-records.ts, adoption.ts). `engine`: the group's engine family, stored in the file and checked on
   * reading; `adoptionWindowMs`: how long after binding a recorded rank may take to show up (default 5000). Default:
   * off (no file is read or written).
   */
  rankRecords?: { engine: string; adoptionWindowMs?: number };
}

/** The empty ABORT `[]` (engine-wire.md 4.7; the same payload for TokenSpeed and vLLM): the adoption probe. */
const EMPTY_ABORT = encodeAbortPayload([]);

/** Closes a zeromq socket, ignoring errors (closing twice is harmless in zeromq.js, but be safe). */
function closeQuietly(socket: Socket): void {
  try {
    if (!socket.closed) socket.close();
  } catch {
    // nothing useful to do: the socket is going away either way
  }
}

/** Checks a positive integer option; throws ConfigError naming it. */
function positiveInteger(name: string, value: number, max = Number.MAX_SAFE_INTEGER): number {
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw new ConfigError(`${name} must be an integer in 1..${max}, got ${value}`);
  }
  return value;
}

/** Binds one socket, turning a failure into a TransportError naming the role and the address. */
async function bindSocket(socket: Socket, role: string, address: string): Promise<void> {
  try {
    await socket.bind(address);
  } catch (error) {
    throw new TransportError(`cannot bind the ${role} socket at ${address}: ${errorMessage(error)}`, {
      code: errorCode(error),
      cause: error,
    });
  }
}

/** The send-queue key of a routing identity: its bytes as a latin-1 string (exact, and cheap for 2-byte identities). */
function queueKey(identity: Uint8Array): string {
  let key = '';
  for (let i = 0; i < identity.length; i++) key += String.fromCharCode(identity[i]!);
  return key;
}

/** The four request type frames, allocated once. */
const TYPE_FRAMES: readonly Uint8Array[] = [0, 1, 2, 3].map((t) => Uint8Array.of(t));

/** One queued send. */
interface SendJob {
  identity: Uint8Array;
  type: RequestTypeByte;
  payload: Uint8Array;
  resolve: () => void;
  reject: (error: Error) => void;
}

/** A resettable wake-up signal: `wait(ms)` resolves after `ms` or at the next `wake()`, whichever is first. */
class Waker {
  private resolveWait: (() => void) | null = null;

  wait(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        if (this.resolveWait === done) this.resolveWait = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.resolveWait = done;
    });
  }

  wake(): void {
    this.resolveWait?.();
  }
}

/**
 * An engine group's socket set over ZeroMQ: implements `EngineLink` (src/engine-client/link.ts). Create it with
 * `ZmqEngineLink.create(opts)` (validates, creates the sockets, binds nothing) and `await link.bind()`, or with
 * `await ZmqEngineLink.bind(opts)`. Ranks join through the handshake service as they dial in.
 */
export class ZmqEngineLink implements EngineLink {
  /** The socket set's addresses. */
  readonly endpoints: EngineEndpoints;
  readonly dpSize: number;

  private readonly input: Router;
  private readonly output: Pull;
  private readonly handshakeSocket: Router;
  private readonly sendTimeoutMs: number;
  private readonly handshakeTimeoutMs: number;
  private readonly log: MinimalLogger;
  private readonly sendQueues = new PerRankSendQueues<SendJob>();
  private readonly waker = new Waker();
  private readonly handshakeService: HandshakeService;
  private pumping = false;
  private pumpScheduled = false;
  private state: 'created' | 'binding' | 'bound' | 'closed' = 'created';
  private closePromise: Promise<void> | null = null;
  /** Set once a send timed out: that peer is not reading, so `close()` discards instead of lingering. */
  private peerStuck = false;
  private readonly messages = new MessageQueue<OutputMessage>(OUTPUT_QUEUE_CAPACITY);
  private outputsTaken = false;
  private readonly outputGate: OutputGate | null;
  /** Aborted at `close()` (ends a receive loop waiting on the output gate, removing its waiter). */
  private readonly closing = new AbortController();
  private readonly background: Promise<void>[] = [];
  private socketFiles: BoundSocketFile[] = [];
  private listener: LinkListener | null = null;
  /** The latest joined engine per index (what `engines` lists and `attach` replays). */
  private readonly joinedByIndex = new Map<number, ConnectedEngine>();
  private readonly joinWaiters: Array<{
    count: number;
    resolve: (e: readonly ConnectedEngine[]) => void;
    reject: (e: Error) => void;
  }> = [];
  private readonly rankRecordsOpts: { engine: string; adoptionWindowMs?: number } | null;
  /** The records this link keeps (ranks joined or adopted since binding), by engine index; written on each change. */
  private readonly records = new Map<number, RankRecord>();
  private adoption: RankAdoption | null = null;
  /** Engine indexes adopted so far. */
  private readonly adoptedIndexes = new Set<number>();
  /** Set once `bind()` succeeded: only then are the rank records this link's to write. */
  private everBound = false;

  /**
   * Validates the options and creates the three sockets, unbound. Throws ConfigError on a bad `dpSize`, timeout,
   * high-water mark or message size.
   */
  static create(opts: ZmqLinkOptions): ZmqEngineLink {
    return new ZmqEngineLink(opts);
  }

  /** `create(opts)` then `bind()`. Throws what either throws; nothing stays bound after a failure. */
  static async bind(opts: ZmqLinkOptions): Promise<ZmqEngineLink> {
    const link = new ZmqEngineLink(opts);
    await link.bind();
    return link;
  }

  private constructor(opts: ZmqLinkOptions) {
    this.dpSize = positiveInteger('dpSize', opts.dpSize, MAX_DP_SIZE);
    this.handshakeTimeoutMs = positiveInteger(
      'handshakeReceiveTimeoutMs',
      opts.handshakeReceiveTimeoutMs ?? DEFAULT_HANDSHAKE_RECEIVE_TIMEOUT_MS,
      0x7fffffff,
    );
    this.sendTimeoutMs = positiveInteger('sendTimeoutMs', opts.sendTimeoutMs ?? DEFAULT_SEND_TIMEOUT_MS, 0x7fffffff);
    const hwm =
      opts.sendHighWaterMark === undefined
        ? undefined
        : positiveInteger('sendHighWaterMark', opts.sendHighWaterMark, 0x7fffffff);
    const max: MaxMessageBytes = { ...DEFAULT_MAX_MESSAGE_BYTES, ...opts.maxMessageBytes };
    for (const [k, v] of Object.entries(max)) positiveInteger(`maxMessageBytes.${k}`, v, 0x7fffffff);
    this.log = opts.logger ?? silentLogger;
    this.outputGate = opts.outputGate ?? null;
    this.rankRecordsOpts = opts.rankRecords ?? null;
    if (this.rankRecordsOpts?.adoptionWindowMs !== undefined)
      positiveInteger('rankRecords.adoptionWindowMs', this.rankRecordsOpts.adoptionWindowMs, 0x7fffffff);
    this.endpoints = opts.endpoints;
    // sendTimeout 0: zeromq.js never parks a send; EAGAIN (peer at its high-water mark) is retried by the pump.
    this.input = new Router({
      mandatory: true,
      handover: false,
      linger: INPUT_LINGER_MS,
      sendTimeout: 0,
      maxMessageSize: max.input,
    });
    if (hwm !== undefined) this.input.sendHighWaterMark = hwm;
    this.output = new Pull({ linger: 0, maxMessageSize: max.output });
    this.handshakeSocket = new Router({
      mandatory: true,
      handover: true,
      linger: 0,
      sendTimeout: 0,
      maxMessageSize: max.handshake,
    });
    this.handshakeService = new HandshakeService({
      handshakeSocket: this.handshakeSocket,
      inputSocket: this.input,
      endpoints: this.endpoints,
      dpSize: this.dpSize,
      timeoutMs: this.handshakeTimeoutMs,
      ...(opts.handover?.registrationWindowMs !== undefined
        ? { registrationWindowMs: opts.handover.registrationWindowMs }
        : {}),
      ...(opts.handover?.cooldownMs !== undefined ? { handoverCooldownMs: opts.handover.cooldownMs } : {}),
      logger: this.log,
      host: {
        admitHello: (index) => this.admitHello(index),
        joined: (engine) => this.onJoined(engine),
        joinFailed: (index, reason) => this.listener?.joinFailed(index, reason),
      },
    });
  }

  /**
   * Prepares the ipc paths (engine-wire.md 1.4, `prepareSocketPaths`: refuses a live owner and an unsafe directory),
   * binds input ROUTER, output PULL and handshake ROUTER in that order (engine-wire.md 1.1, SMG `transport.rs`) and
   * starts the handshake service, the output loop and the disconnect monitors. Callable once.
   *
   * Throws ConfigError (unsafe socket directory, a live owner or a non-socket at a socket path) or TransportError
   * naming the socket and address when a bind fails (for example `EADDRINUSE` on the handshake port); after a failure
   * no socket stays open and no socket file this link created is left behind.
   */
  async bind(): Promise<void> {
    if (this.state !== 'created') {
      throw new TransportError(`bind() on ${this.endpoints.workerUrl} can run once; the link is ${this.state}`, {
        code: 'ESTATE',
      });
    }
    this.state = 'binding';
    const { endpoints } = this;
    try {
      await prepareSocketPaths(endpoints, this.log);
      await bindSocket(this.input, 'input ROUTER', endpoints.input);
      this.socketFiles = recordSocketFiles(endpoints);
      await bindSocket(this.output, 'output PULL', endpoints.output);
      this.socketFiles = recordSocketFiles(endpoints);
      await bindSocket(this.handshakeSocket, 'handshake ROUTER', endpoints.handshake);
    } catch (error) {
      await this.close();
      throw error;
    }
    if (this.isClosed()) {
      throw new TransportError(`link ${endpoints.workerUrl} was closed while binding`, { code: 'ELINKCLOSED' });
    }
    this.state = 'bound';
    this.everBound = true;
    this.background.push(...this.handshakeService.start());
    this.background.push(this.receiveLoop());
    this.background.push(this.watchDisconnects(this.output, 'output PULL'));
    this.background.push(this.watchDisconnects(this.input, 'input ROUTER'));
    this.log.info(
      {
        workerUrl: endpoints.workerUrl,
        input: endpoints.input,
        output: endpoints.output,
        handshake: endpoints.handshake,
        dpSize: this.dpSize,
      },
      'engine sockets bound; ranks may dial in at any time',
    );
    this.startAdoption();
  }

  /**
   * Resolves with the engine indexes adopted from the previous gateway's records once adoption is over (every record
   * adopted, cancelled by a HELLO or past the window; at once without records), or the link closed. Never rejects.
   */
  async adoptionSettled(): Promise<number[]> {
    if (this.adoption !== null) await this.adoption.finished;
    return [...this.adoptedIndexes].sort((a, b) => a - b);
  }

  /**
   * Drop the records of `indexes` from the rank records file (their processes are being stopped on purpose, so a
   * later gateway should not wait for them). A no-op without `rankRecords` or before a successful bind. Never throws.
   */
  forgetRankRecords(indexes: readonly number[]): void {
    if (this.rankRecordsOpts === null || !this.everBound) return;
    let changed = false;
    for (const i of indexes) changed = this.records.delete(i) || changed;
    if (changed) this.writeRecords();
  }

  /** Read the previous gateway's records and start adopting the ranks they name (adoption.ts). */
  private startAdoption(): void {
    const opts = this.rankRecordsOpts;
    if (opts === null) return;
    const path = rankRecordsPath(this.endpoints);
    const { records } = readRankRecords(
      path,
      { workerUrl: this.endpoints.workerUrl, engine: opts.engine, dpSize: this.dpSize },
      this.log,
    );
    if (records.size === 0) {
      // Nothing to adopt: the file now names this gateway (the stale-socket sweep of a later one reads its pid).
      this.writeRecords();
      return;
    }
    const windowMs = opts.adoptionWindowMs ?? DEFAULT_ADOPTION_WINDOW_MS;
    this.log.info(
      { path, engineIndexes: [...records.keys()].sort((a, b) => a - b), windowMs },
      `rank records of a previous gateway found: probing ${records.size} rank(s) on the input socket for adoption`,
    );
    this.adoption = new RankAdoption(
      records,
      {
        probe: (identity) =>
          this.send(identity, RequestType.ABORT, EMPTY_ABORT).then(
            () => true,
            (error: unknown) => {
              const code = errorCode(error);
              if (code !== 'EHOSTUNREACH' && code !== 'ELINKCLOSED')
                this.log.warn({ err: errorMessage(error), peer: describeIdentity(identity) }, 'adoption probe failed');
              return false;
            },
          ),
        adopted: (record) => this.adopt(record),
        settled: (ignored) => {
          for (const r of ignored) {
            this.log.info(
              { engineIndex: r.engineIndex, windowMs },
              `rank record of DP rank ${r.engineIndex} ignored: its identity did not connect to the input socket within ${windowMs} ms ` +
                '(the engine is gone, or restarting: it joins through the handshake)',
            );
          }
          this.writeRecords();
        },
      },
      { windowMs },
    );
    this.adoption.start();
  }

  /** A recorded rank is connected: report it joined (adopted) unless a handshake took its index meanwhile. */
  private adopt(record: RankRecord): void {
    if (this.isClosed() || this.joinedByIndex.has(record.engineIndex)) return;
    this.adoptedIndexes.add(record.engineIndex);
    this.records.set(record.engineIndex, record);
    this.writeRecords();
    this.deliverJoined({
      identity: record.identity,
      engineIndex: record.engineIndex,
      ready: record.ready,
      adopted: true,
    });
  }

  private writeRecords(): void {
    const opts = this.rankRecordsOpts;
    if (opts === null) return;
    const records = new Map(this.records);
    for (const r of this.adoption?.pendingRecords() ?? [])
      if (!records.has(r.engineIndex)) records.set(r.engineIndex, r);
    writeRankRecords(
      rankRecordsPath(this.endpoints),
      { workerUrl: this.endpoints.workerUrl, engine: opts.engine, gatewayPid: process.pid, records },
      this.log,
    );
  }

  /** Handshake messages refused so far, by reason (a live record). */
  get handshakeRejected(): Readonly<Record<string, number>> {
    return this.handshakeService.rejected;
  }

  /** How many times a READY without a registration in time turned identity handover off (handshake-service.ts). */
  get handoverCooldowns(): number {
    return this.handshakeService.handoverCooldowns;
  }

  /** The latest joined engine of every index that ever joined, sorted by identity bytes (engine-wire.md 1.5). */
  get engines(): readonly ConnectedEngine[] {
    return [...this.joinedByIndex.values()].sort((a, b) => compareIdentities(a.identity, b.identity));
  }

  /**
   * Resolves with `engines` once `count` (default `dpSize`) distinct indexes have joined; rejects with TransportError
   * code `ELINKCLOSED` if the link closes first.
   */
  whenJoined(count: number = this.dpSize): Promise<readonly ConnectedEngine[]> {
    if (this.joinedByIndex.size >= count) return Promise.resolve(this.engines);
    if (this.isClosed()) return Promise.reject(this.closedError('whenJoined'));
    return new Promise((resolve, reject) => this.joinWaiters.push({ count, resolve, reject }));
  }

  /** See `EngineLink.attach`: ranks that joined already are reported at once. Throws Error when called twice. */
  attach(listener: LinkListener): void {
    if (this.listener !== null) throw new Error(`a listener is already attached to ${this.endpoints.workerUrl}`);
    this.listener = listener;
    for (const e of this.engines) listener.joined(e);
  }

  private admitHello(index: number): Promise<boolean> {
    this.adoption?.cancel(index); // a restarted engine: it joins through the handshake, not from its old record
    if (this.listener !== null) return this.listener.admitHello(index);
    // No engine client: nobody can tell whether the holder is alive, so an index joins once.
    return Promise.resolve(!this.joinedByIndex.has(index));
  }

  /** A rank completed its handshake: record it (a new process overwrites its index's record), then report it. */
  private onJoined(engine: ConnectedEngine): void {
    if (this.rankRecordsOpts !== null && !this.isClosed()) {
      this.records.set(engine.engineIndex, {
        engineIndex: engine.engineIndex,
        identity: engine.identity,
        ready: engine.ready,
        joinedAtMs: Date.now(),
      });
      this.writeRecords();
    }
    this.deliverJoined(engine);
  }

  private deliverJoined(engine: ConnectedEngine): void {
    this.joinedByIndex.set(engine.engineIndex, engine);
    this.log.debug(
      { engineIndex: engine.engineIndex, identity: hex(engine.identity), adopted: engine.adopted === true },
      engine.adopted === true ? 'engine adopted (connected, recorded)' : 'engine joined (handshake complete)',
    );
    for (const w of [...this.joinWaiters]) {
      if (this.joinedByIndex.size >= w.count) {
        this.joinWaiters.splice(this.joinWaiters.indexOf(w), 1);
        w.resolve(this.engines);
      }
    }
    this.listener?.joined(engine);
  }

  /**
   * Queues `[identity, type, payload]` for the input ROUTER (engine-wire.md 1.6). Sends to one identity leave in call
   * order; see the module docs for how ranks share the socket. Resolves once ZeroMQ accepted the whole message.
   *
   * Rejects with:
   * - `SendTimeoutError` when the peer stays at its high-water mark for `sendTimeoutMs` (10 s default), counted from
   *   the send's first attempt; sends still queued behind it for the same identity reject at once with one too;
   * - `TransportError` code `EHOSTUNREACH` when no connected peer has this identity (the engine is gone or never
   *   registered), nothing being queued;
   * - `TransportError` code `ELINKCLOSED` after `close()` (also for sends still queued when it is called);
   * - `TransportError` with the zeromq code for any other socket failure.
   */
  send(identity: Uint8Array, type: RequestTypeByte, payload: Uint8Array): Promise<void> {
    if (this.isClosed()) return Promise.reject(this.closedError('send'));
    if (TYPE_FRAMES[type] === undefined) {
      return Promise.reject(
        new TransportError(`send: request type ${String(type)} is not one of 0x00..0x03 (engine-wire.md 1.6)`),
      );
    }
    return new Promise<void>((resolve, reject) => {
      this.sendQueues.enqueue(queueKey(identity), { identity, type, payload, resolve, reject });
      this.waker.wake();
      this.schedulePump();
    });
  }

  /**
   * Every message received on the output PULL, in order (engine-wire.md 1.8), interleaved with `disconnect` hints
   * from the socket monitors. Ends after a `closed` message or after `close()` (messages still buffered at
   * `close()` are dropped). Can be called once; a second call throws TransportError (two readers would split the
   * stream). Up to 256 messages are buffered before the PULL stops being read.
   */
  outputs(): AsyncIterable<OutputMessage> {
    if (this.outputsTaken) {
      throw new TransportError(`outputs() of ${this.endpoints.workerUrl} can be iterated only once`, {
        code: 'ESTATE',
      });
    }
    this.outputsTaken = true;
    return this.messages.consume();
  }

  /**
   * Stops the handshake service, closes the three sockets, rejects queued sends with `TransportError` code
   * `ELINKCLOSED`, ends `outputs()`, and removes the socket files this link bound if they are still its own. Resolves
   * when the background loops have finished. Idempotent; never rejects.
   */
  close(): Promise<void> {
    if (this.closePromise !== null) return this.closePromise;
    const wasBound = this.state === 'bound';
    this.state = 'closed';
    this.closing.abort();
    this.messages.abort();
    this.handshakeService.stop();
    this.adoption?.stop();
    for (const job of this.sendQueues.drainAll()) job.reject(this.closedError('send'));
    for (const w of this.joinWaiters.splice(0)) w.reject(this.closedError('whenJoined'));
    if (this.peerStuck) this.input.linger = 0;
    closeQuietly(this.handshakeSocket);
    closeQuietly(this.input);
    closeQuietly(this.output);
    this.waker.wake();
    if (wasBound) this.log.info({ workerUrl: this.endpoints.workerUrl }, 'engine link closed');
    this.closePromise = Promise.allSettled(this.background).then(() => {
      this.removeSocketFilesNow();
    });
    return this.closePromise;
  }

  /**
   * Removes the ipc socket files this link bound, if they are still the same files (synchronous; for an emergency
   * exit that cannot wait for `close()`). Never throws; a no-op once removed.
   */
  removeSocketFilesNow(): void {
    const removed = removeOwnSocketFiles(this.socketFiles, this.log);
    this.socketFiles = [];
    if (removed.length > 0) this.log.debug({ removed }, 'removed the ipc socket files of this link');
  }

  private isClosed(): boolean {
    return this.state === 'closed';
  }

  private closedError(operation: string): TransportError {
    return new TransportError(`${operation} on ${this.endpoints.workerUrl}: the engine link is closed`, {
      code: 'ELINKCLOSED',
    });
  }

  /**
   * Starts the pump at the end of this event-loop turn (`setImmediate`), once however many sends were queued in the
   * turn, so they reach the socket back to back; a running pump takes new sends itself.
   *
   * Why (issue 9, CPU per request): a message handed to libzmq while its I/O thread sleeps makes the synchronous
   * `send()` wake that thread (an eventfd write), which took 30–80 µs on the shared 2-core VM, while a message sent
   * right behind another finds it awake: 3–6 µs (zeromq 6.8.0 over ipc, bursts of 4 sends every 0.5 ms: the first
   * ~42 µs at the median, the next ones 4–6 µs). Requests that arrive in the same turn (many, when one batch output
   * frees many clients at once) thus share one wake-up. The cost is at most the rest of the turn in latency.
   */
  private schedulePump(): void {
    if (this.pumpScheduled || this.pumping) return;
    this.pumpScheduled = true;
    setImmediate(this.runScheduledPump);
  }

  private readonly runScheduledPump = (): void => {
    this.pumpScheduled = false;
    void this.pump();
  };

  /** Drains the per-rank queues, one send on the socket at a time (see the module docs). */
  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (!this.isClosed() && this.sendQueues.size > 0) {
        const now = performance.now();
        const pick = this.sendQueues.next(now);
        if (pick === null) {
          const at = this.sendQueues.nextRetryAt() ?? now;
          await this.waker.wait(Math.max(0, at - now));
          continue;
        }
        const { key, job, since } = pick;
        let failed = false;
        try {
          await this.input.send([job.identity, TYPE_FRAMES[job.type]!, job.payload]);
          this.sendQueues.sent(key);
          job.resolve();
        } catch (error) {
          if (this.isClosed()) break;
          const code = errorCode(error);
          const who = describeIdentity(job.identity);
          if (code === 'EAGAIN') {
            if (performance.now() - since < this.sendTimeoutMs) {
              this.sendQueues.refused(key, performance.now());
              continue;
            }
            this.peerStuck = true;
            const timeout = new SendTimeoutError(
              `send to ${who} on ${this.endpoints.input} did not complete within ${this.sendTimeoutMs} ms: ` +
                `the engine is not reading its input (high-water mark reached)`,
              this.sendTimeoutMs,
            );
            this.sendQueues.drop(key);
            job.reject(timeout);
            for (const queued of this.sendQueues.drain(key)) {
              queued.reject(
                new SendTimeoutError(
                  `${timeout.message}; this later send to the same engine was not attempted`,
                  this.sendTimeoutMs,
                ),
              );
            }
          } else {
            this.sendQueues.drop(key);
            job.reject(
              code === 'EHOSTUNREACH'
                ? new TransportError(
                    `send to ${who} on ${this.endpoints.input}: no connected engine with this identity (EHOSTUNREACH); ` +
                      `the engine exited or never registered`,
                    { code, cause: error },
                  )
                : new TransportError(`send to ${who} on ${this.endpoints.input} failed: ${errorMessage(error)}`, {
                    code,
                    cause: error,
                  }),
            );
          }
          failed = true;
        }
        // Let the caller's rejection handler run before the next send (dp-routing.md 12.3 rule 4).
        if (failed) await nextMacrotask();
      }
    } finally {
      this.pumping = false;
    }
    if (!this.isClosed() && this.sendQueues.size > 0) this.schedulePump();
  }

  /**
   * The output receive loop (engine-wire.md 1.8). It yields to the event loop (a macrotask turn) once it has been
   * receiving for {@link RECEIVE_SLICE_MS} without one: zeromq.js resolves `receive()` without returning to the event
   * loop while messages are queued, and the engine client handles each batch (down to the HTTP responses' writes)
   * synchronously, so without the yield a rank that is ahead of the gateway would starve timers, new connections and
   * every other socket for as long as it stays ahead (issue 9: seconds of event-loop delay at 512 streams).
   * While the `outputGate` is paused it waits (no polling) for the gate's resume or `close()`.
   */
  private async receiveLoop(): Promise<void> {
    const address = this.endpoints.output;
    const gate = this.outputGate;
    let sliceStart = performance.now();
    while (!this.isClosed()) {
      await this.messages.waitForSpace();
      if (gate !== null && gate.isPaused) {
        await gate.wait(this.closing.signal);
        sliceStart = performance.now();
        continue;
      }
      if (performance.now() - sliceStart >= RECEIVE_SLICE_MS) {
        await nextMacrotask();
        sliceStart = performance.now();
      }
      if (this.isClosed()) break;
      let frames: Uint8Array[];
      try {
        frames = await this.output.receive();
      } catch (error) {
        if (this.isClosed()) break;
        const failure = new TransportError(`receive on the output socket ${address} failed: ${errorMessage(error)}`, {
          code: errorCode(error),
          cause: error,
        });
        this.log.error({ address, err: failure }, 'output receive loop stopped');
        this.messages.push({ kind: 'closed', error: failure });
        break;
      }
      if (frames.length === 0) {
        this.log.warn({ address }, 'skipping an output message with zero frames');
        continue;
      }
      if (isEngineCoreDead(frames[0]!)) {
        this.log.warn(
          { address, workerUrl: this.endpoints.workerUrl },
          'ENGINE_CORE_DEAD received: a rank of the group is dying',
        );
        this.messages.push({ kind: 'dead' });
        continue;
      }
      this.messages.push({ kind: 'frames', frames });
    }
    this.messages.end();
  }

  /** Forwards zeromq monitor `disconnect` events of one data socket as `{ kind: 'disconnect' }` messages. */
  private async watchDisconnects(socket: Socket, role: string): Promise<void> {
    try {
      for await (const event of socket.events) {
        if (event.type !== 'disconnect' || this.isClosed()) continue;
        this.log.warn({ role, address: event.address }, 'an engine peer disconnected');
        this.messages.push({ kind: 'disconnect', address: event.address });
      }
    } catch (error) {
      if (!this.isClosed()) this.log.warn({ role, err: error }, 'socket monitor stopped');
    }
  }
}
