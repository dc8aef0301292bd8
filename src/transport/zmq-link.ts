/**
 * The gateway's ZeroMQ socket set for one worker (engine-wire.md sections 1-2; SMG `transport.rs`,
 * `zmq_client.rs`, `connector.rs`): input ROUTER, output PULL and handshake ROUTER, all bound by the gateway.
 *
 * Design choices (documented here because the engine client relies on them):
 * - The input ROUTER has `mandatory` set (ZMQ_ROUTER_MANDATORY). Without it a ROUTER silently drops a message for
 *   an identity that is not connected (dp-routing.md 14.8), so a request to a rank killed with SIGKILL would vanish
 *   and hang until the silence watchdog. With it, such a send rejects at once with `TransportError` code
 *   `EHOSTUNREACH`, and a peer whose high-water mark is reached makes the send wait (retried until the send timeout,
 *   then `SendTimeoutError`). libzmq refuses both on the identity frame, before any part is queued, so a failed
 *   send never leaves the socket mid-message (the hazard dp-routing.md section 6 names).
 * - One FIFO send queue (dp-routing.md 12.3 rule 4): zeromq.js allows one send in progress per socket, and the
 *   order of requests and aborts must be kept. After a failed send, the next queued send starts only after a
 *   macrotask turn, so the caller's rejection handler (which marks the client closed) runs first.
 * - The output receive loop follows engine-wire.md 1.8 and feeds a queue of 256 messages (back-pressure on the
 *   PULL). `ENGINE_CORE_DEAD` is reported and the loop continues; whether it is fatal is the engine client's call.
 * - zeromq's socket monitor reports `disconnect` on a bound PULL when a connected PUSH peer goes away, including a
 *   SIGKILLed process (measured with zeromq 6.8.0 / libzmq 4.3.5 over ipc), and likewise on the input ROUTER for
 *   a DEALER. Both surface as `{ kind: 'disconnect', address }`. The address is our bound endpoint, not the peer:
 *   the event does not say which rank went away (a hint, not proof of death).
 */
import { setImmediate as nextMacrotask, setTimeout as sleep } from 'node:timers/promises';
import { Pull, Router } from 'zeromq';
import type { Socket } from 'zeromq';
import type { ConnectedEngine, EngineLink, OutputMessage } from '../engine-client/link.js';
import { isEngineCoreDead } from '../protocols/frames.js';
import type { RequestTypeByte } from '../protocols/types.js';
import { describeIdentity, errorCode, errorMessage } from './describe.js';
import type { EngineEndpoints } from './endpoints.js';
import { ConfigError, HandshakeError, SendTimeoutError, TransportError } from './errors.js';
import { runGatewayHandshake } from './gateway-handshake.js';
import { silentLogger } from '../logging.js';
import type { MinimalLogger } from '../logging.js';
import { MessageQueue, OUTPUT_QUEUE_CAPACITY } from './message-queue.js';
import { prepareSocketPaths } from './socket-paths.js';

/** Handshake receive timeout default: 600 s per receive (engine-wire.md 1.9, SMG `zmq_client.rs`). */
export const DEFAULT_HANDSHAKE_RECEIVE_TIMEOUT_MS = 600_000;
/** Input send timeout default: 10 s per send (engine-wire.md 1.9, SMG PR #2094). */
export const DEFAULT_SEND_TIMEOUT_MS = 10_000;
/**
 * Linger of the input ROUTER on close, in ms: lets final aborts reach live engines without delaying process exit
 * long. Dropped to 0 once a send timed out (that engine is not reading; lingering would only delay exit).
 */
const INPUT_LINGER_MS = 500;
/** Retry back-off while a peer's high-water mark is reached, in ms (first and cap). */
const SEND_RETRY_FIRST_MS = 1;
const SEND_RETRY_MAX_MS = 20;
/** The largest engine count: identities are 16-bit (engine-wire.md 1.5). */
const MAX_DP_SIZE = 65536;

/** Options of `ZmqEngineLink.bind`. */
export interface ZmqLinkOptions {
  endpoints: EngineEndpoints;
  /** Number of engine ranks that must complete the handshake (>= 1; engine-wire.md 2.6). */
  dpSize: number;
  /** Bound on each handshake receive (HELLO, READY, registration), in ms. Default 600 000. */
  handshakeReceiveTimeoutMs?: number;
  /** Bound on each input send, in ms. Default 10 000. */
  sendTimeoutMs?: number;
  /**
   * Send high-water mark of the input ROUTER, in messages per peer (zeromq default 1000). Mainly for tests that
   * need to reach it quickly.
   */
  sendHighWaterMark?: number;
  /** A pino logger (any `MinimalLogger`). Default: silent. */
  logger?: MinimalLogger;
}

/**
 * The bound but not yet connected socket set returned by `ZmqEngineLink.bind`.
 * - `handshake()`: runs HELLO → INIT → READY → registration for `dpSize` ranks and resolves with the connected
 *   link; callable once (a second call rejects). On failure it closes every socket (so a retry can bind again) and
 *   rejects with `HandshakeError` naming the stage.
 * - `close()`: closes every socket still owned, aborting a running handshake (it rejects with `HandshakeError`,
 *   code `ELINKCLOSED`); after a successful handshake it closes the connected link. Idempotent.
 */
export interface PendingEngineLink {
  readonly endpoints: EngineEndpoints;
  handshake(): Promise<ZmqEngineLink>;
  close(): Promise<void>;
}

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

/** Construction parameters of a connected link (internal: built by `PendingEngineLink.handshake()`). */
interface ConnectedLinkParts {
  endpoints: EngineEndpoints;
  input: Router;
  output: Pull;
  engines: ConnectedEngine[];
  sendTimeoutMs: number;
  logger: MinimalLogger;
}

/**
 * A connected engine group over ZeroMQ: implements `EngineLink` (src/engine-client/link.ts). Obtain one with
 * `await (await ZmqEngineLink.bind(opts)).handshake()`.
 */
export class ZmqEngineLink implements EngineLink {
  /** Connected ranks sorted by identity bytes (engine-wire.md 1.5). */
  readonly engines: readonly ConnectedEngine[];
  /** The socket set's addresses. */
  readonly endpoints: EngineEndpoints;

  private readonly input: Router;
  private readonly output: Pull;
  private readonly sendTimeoutMs: number;
  private readonly log: MinimalLogger;
  private readonly sendQueue: SendJob[] = [];
  private pumping = false;
  private closed = false;
  private closePromise: Promise<void> | null = null;
  /** Set once a send timed out: that peer is not reading, so `close()` discards instead of lingering. */
  private peerStuck = false;
  private readonly messages = new MessageQueue<OutputMessage>(OUTPUT_QUEUE_CAPACITY);
  private outputsTaken = false;
  private readonly background: Promise<void>[] = [];

  /**
   * Binds input ROUTER, output PULL and handshake ROUTER, in that order (engine-wire.md 1.1, SMG `transport.rs`),
   * after preparing the ipc paths (engine-wire.md 1.4, `prepareSocketPaths`). Resolves once all three are bound.
   *
   * Throws ConfigError (bad `dpSize` or timeouts, unsafe socket directory, a non-socket at a socket path) or
   * TransportError naming the socket and address when a bind fails (for example `EADDRINUSE` on the handshake
   * port); no socket stays open after a failure.
   */
  static async bind(opts: ZmqLinkOptions): Promise<PendingEngineLink> {
    const dpSize = positiveInteger('dpSize', opts.dpSize, MAX_DP_SIZE);
    const handshakeTimeoutMs = positiveInteger(
      'handshakeReceiveTimeoutMs',
      opts.handshakeReceiveTimeoutMs ?? DEFAULT_HANDSHAKE_RECEIVE_TIMEOUT_MS,
      0x7fffffff,
    );
    const sendTimeoutMs = positiveInteger('sendTimeoutMs', opts.sendTimeoutMs ?? DEFAULT_SEND_TIMEOUT_MS);
    const sendHighWaterMark =
      opts.sendHighWaterMark === undefined ? undefined : positiveInteger('sendHighWaterMark', opts.sendHighWaterMark, 0x7fffffff);
    const log = opts.logger ?? silentLogger;
    const { endpoints } = opts;

    await prepareSocketPaths(endpoints, log);

    // sendTimeout 0: zeromq.js never parks a send; EAGAIN (peer at its high-water mark) is retried by `sendOne`.
    const input = new Router({ mandatory: true, linger: INPUT_LINGER_MS, sendTimeout: 0 });
    if (sendHighWaterMark !== undefined) input.sendHighWaterMark = sendHighWaterMark;
    const output = new Pull({ linger: 0 });
    const handshake = new Router({ mandatory: true, linger: 0, sendTimeout: 0 });
    const all = [input, output, handshake];
    try {
      await bindSocket(input, 'input ROUTER', endpoints.input);
      await bindSocket(output, 'output PULL', endpoints.output);
      await bindSocket(handshake, 'handshake ROUTER', endpoints.handshake);
    } catch (error) {
      all.forEach(closeQuietly);
      throw error;
    }
    log.info(
      { workerUrl: endpoints.workerUrl, input: endpoints.input, output: endpoints.output, handshake: endpoints.handshake, dpSize },
      'engine sockets bound; waiting for engines to say HELLO',
    );

    type State = 'bound' | 'handshaking' | 'connected' | 'failed' | 'closed';
    let state: State = 'bound';
    // Read through a function: `close()` changes `state` while `handshake()` awaits, which narrowing cannot see.
    const current = (): State => state;
    let link: ZmqEngineLink | null = null;
    return {
      endpoints,
      handshake: async (): Promise<ZmqEngineLink> => {
        if (state !== 'bound') {
          throw new TransportError(`handshake() on ${endpoints.workerUrl} can run once; the link is ${state}`, {
            code: 'ESTATE',
          });
        }
        state = 'handshaking';
        let engines: ConnectedEngine[];
        try {
          engines = await runGatewayHandshake({
            handshakeSocket: handshake,
            inputSocket: input,
            endpoints,
            dpSize,
            receiveTimeoutMs: handshakeTimeoutMs,
            logger: log,
            isClosed: () => current() === 'closed',
          });
        } catch (error) {
          all.forEach(closeQuietly);
          if (current() !== 'closed') state = 'failed';
          log.error({ workerUrl: endpoints.workerUrl, err: error }, 'engine handshake failed; sockets closed');
          throw error;
        }
        closeQuietly(handshake);
        if (current() === 'closed') {
          all.forEach(closeQuietly);
          throw new HandshakeError('registration', `link closed during the handshake on ${endpoints.workerUrl}`, {
            code: 'ELINKCLOSED',
          });
        }
        input.receiveTimeout = -1;
        state = 'connected';
        link = new ZmqEngineLink({ endpoints, input, output, engines, sendTimeoutMs, logger: log });
        log.debug(
          { workerUrl: endpoints.workerUrl, engines: engines.map((e) => e.engineIndex) },
          'engine handshake complete',
        );
        return link;
      },
      close: async (): Promise<void> => {
        if (link !== null) {
          await link.close();
          return;
        }
        state = 'closed';
        all.forEach(closeQuietly);
      },
    };
  }

  /** Internal: use `ZmqEngineLink.bind(...)` then `handshake()`. Starts the output receive loop and the monitors. */
  constructor(parts: ConnectedLinkParts) {
    this.endpoints = parts.endpoints;
    this.input = parts.input;
    this.output = parts.output;
    this.engines = Object.freeze([...parts.engines]);
    this.sendTimeoutMs = parts.sendTimeoutMs;
    this.log = parts.logger;
    this.background.push(this.receiveLoop());
    this.background.push(this.watchDisconnects(this.output, 'output PULL'));
    this.background.push(this.watchDisconnects(this.input, 'input ROUTER'));
  }

  /**
   * Queues `[identity, type, payload]` for the input ROUTER (engine-wire.md 1.6). Sends leave in call order, one at
   * a time. Resolves once ZeroMQ accepted the whole message.
   *
   * Rejects with:
   * - `SendTimeoutError` when the peer stays at its high-water mark for `sendTimeoutMs` (10 s default);
   * - `TransportError` code `EHOSTUNREACH` when no connected peer has this identity (the engine is gone or never
   *   registered), nothing being queued;
   * - `TransportError` code `ELINKCLOSED` after `close()` (also for sends still queued when it is called);
   * - `TransportError` with the zeromq code for any other socket failure.
   */
  send(identity: Uint8Array, type: RequestTypeByte, payload: Uint8Array): Promise<void> {
    if (this.closed) return Promise.reject(this.closedError('send'));
    if (TYPE_FRAMES[type] === undefined) {
      return Promise.reject(new TransportError(`send: request type ${String(type)} is not one of 0x00..0x03 (engine-wire.md 1.6)`));
    }
    return new Promise<void>((resolve, reject) => {
      this.sendQueue.push({ identity, type, payload, resolve, reject });
      void this.pump();
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
      throw new TransportError(`outputs() of ${this.endpoints.workerUrl} can be iterated only once`, { code: 'ESTATE' });
    }
    this.outputsTaken = true;
    return this.messages.consume();
  }

  /**
   * Closes the input ROUTER and the output PULL, rejects queued sends with `TransportError` code `ELINKCLOSED`, and
   * ends `outputs()`. Resolves when the background loops have finished. Idempotent.
   */
  close(): Promise<void> {
    if (this.closePromise !== null) return this.closePromise;
    this.closed = true;
    this.messages.abort();
    for (const job of this.sendQueue.splice(0)) job.reject(this.closedError('send'));
    if (this.peerStuck) this.input.linger = 0;
    closeQuietly(this.input);
    closeQuietly(this.output);
    this.log.info({ workerUrl: this.endpoints.workerUrl }, 'engine link closed');
    this.closePromise = Promise.allSettled(this.background).then(() => undefined);
    return this.closePromise;
  }

  private closedError(operation: string): TransportError {
    return new TransportError(`${operation} on ${this.endpoints.workerUrl}: the engine link is closed`, { code: 'ELINKCLOSED' });
  }

  /** Drains the send queue one job at a time (the one FIFO send path). */
  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      for (;;) {
        const job = this.sendQueue.shift();
        if (job === undefined) break;
        try {
          await this.sendOne(job);
          job.resolve();
        } catch (error) {
          job.reject(error instanceof Error ? error : new TransportError(String(error)));
          // Let the caller's rejection handler run before the next queued send (dp-routing.md 12.3 rule 4).
          await nextMacrotask();
        }
      }
    } finally {
      this.pumping = false;
    }
  }

  /** One send with its deadline; retries EAGAIN (peer at its high-water mark) with a short back-off. */
  private async sendOne(job: SendJob): Promise<void> {
    const who = describeIdentity(job.identity);
    const deadline = performance.now() + this.sendTimeoutMs;
    let backoffMs = SEND_RETRY_FIRST_MS;
    for (;;) {
      if (this.closed) throw this.closedError(`send to ${who}`);
      try {
        await this.input.send([job.identity, TYPE_FRAMES[job.type], job.payload]);
        return;
      } catch (error) {
        if (this.closed) throw this.closedError(`send to ${who}`);
        const code = errorCode(error);
        if (code === 'EHOSTUNREACH') {
          throw new TransportError(
            `send to ${who} on ${this.endpoints.input}: no connected engine with this identity (EHOSTUNREACH); ` +
              `the engine exited or never registered`,
            { code, cause: error },
          );
        }
        if (code !== 'EAGAIN') {
          throw new TransportError(`send to ${who} on ${this.endpoints.input} failed: ${errorMessage(error)}`, {
            code,
            cause: error,
          });
        }
      }
      const remaining = deadline - performance.now();
      if (remaining <= 0) {
        this.peerStuck = true;
        throw new SendTimeoutError(
          `send to ${who} on ${this.endpoints.input} did not complete within ${this.sendTimeoutMs} ms: ` +
            `the engine is not reading its input (high-water mark reached)`,
          this.sendTimeoutMs,
        );
      }
      await sleep(Math.min(backoffMs, remaining));
      backoffMs = Math.min(backoffMs * 2, SEND_RETRY_MAX_MS);
    }
  }

  /** The output receive loop (engine-wire.md 1.8). */
  private async receiveLoop(): Promise<void> {
    const address = this.endpoints.output;
    while (!this.closed) {
      await this.messages.waitForSpace();
      if (this.closed) break;
      let frames: Uint8Array[];
      try {
        frames = await this.output.receive();
      } catch (error) {
        if (this.closed) break;
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
      if (isEngineCoreDead(frames[0])) {
        this.log.error({ address, workerUrl: this.endpoints.workerUrl }, 'ENGINE_CORE_DEAD received: the engine group is dead');
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
        if (event.type !== 'disconnect' || this.closed) continue;
        this.log.warn({ role, address: event.address }, 'an engine peer disconnected');
        this.messages.push({ kind: 'disconnect', address: event.address });
      }
    } catch (error) {
      if (!this.closed) this.log.warn({ role, err: error }, 'socket monitor stopped');
    }
  }
}
