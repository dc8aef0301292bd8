/**
 * The ENGINE side of the socket set, as TokenSpeed's `zmq_wire.py` behaves with `--zmq-msgpack`
 * (engine-wire.md sections 1.1, 1.6-1.7 and 2.1 steps 2-6). Used by the simulated engine and by tests.
 *
 * connect(): a DEALER whose routing identity is the 2-byte LE engine index dials the handshake address and sends
 * HELLO; waits for INIT (polled in 30 s slices with progress logs, bounded by `initTimeoutMs`); sends READY at once,
 * before validating INIT; refuses an INIT with empty `inputs` or `outputs`; connects a DEALER with the same identity
 * to `inputs[0]` and sends its ready response as one frame (the registration); connects a PUSH to `outputs[0]`;
 * closes the handshake socket.
 */
import { Dealer, Push } from 'zeromq';
import type { Socket } from 'zeromq';
import { ENGINE_CORE_DEAD, parseRequestFrames } from '../protocols/frames.js';
import { decodeHandshakeInit, encodeReadyMessage, encodeReadyResponse } from '../protocols/handshake.js';
import { encodeEngineIdentity } from '../protocols/identity.js';
import type { ReadyResponse, RequestTypeByte } from '../protocols/types.js';
import { errorCode, errorMessage } from './describe.js';
import { ConfigError, HandshakeError, TransportError } from './errors.js';
import { silentLogger } from '../logging.js';
import type { MinimalLogger } from '../logging.js';

/** TokenSpeed waits 600 s for INIT (engine-wire.md 1.9, `zmq_wire.py`). */
export const DEFAULT_INIT_TIMEOUT_MS = 600_000;
/** TokenSpeed polls for INIT in 30 s slices and logs progress after each (engine-wire.md 1.9). */
const INIT_POLL_SLICE_MS = 30_000;
/** Linger of every engine socket: READY, the registration and `ENGINE_CORE_DEAD` must be flushed on close. */
const ENGINE_LINGER_MS = 1000;

/** Options of `EngineDialer.connect`. */
export interface EngineDialerOptions {
  /** The gateway's handshake ROUTER, `tcp://host:port` (engine-wire.md 1.3). */
  handshakeAddress: string;
  /** This rank's engine index, 0..65535; its routing identity is the 2-byte LE encoding (engine-wire.md 1.5). */
  engineIndex: number;
  /** The registration frame to send on the input socket (engine-wire.md 2.5). */
  readyResponse: ReadyResponse;
  /** How long to wait for INIT, in ms. Default 600 000. */
  initTimeoutMs?: number;
  /** Spelling of the granularity key in the ready response: TokenSpeed `prefix_granularity` (default) or vLLM `block_size`. */
  granularityKey?: 'prefix_granularity' | 'block_size';
  /**
   * Which ready-response form to send: `long` (default, 19 keys) or `short` (the 3 keys of vLLM releases up to at
   * least 9aaf83ef; `encodeReadyResponse`).
   */
  readyForm?: 'long' | 'short';
  /**
   * Receive high-water mark of the input DEALER, in messages (zeromq default 1000). Tests lower it to make the
   * gateway's send high-water mark reachable quickly.
   */
  inputReceiveHighWaterMark?: number;
  logger?: MinimalLogger;
}

/** One request as the engine's DEALER receives it (engine-wire.md 1.6). */
export interface EngineRequest {
  type: RequestTypeByte;
  payload: Uint8Array;
}

/** Sets a binary routing id: zeromq.js types it as a string but passes a Buffer through byte for byte. */
function dealerWithIdentity(identity: Uint8Array, extra: Partial<Pick<Dealer, 'receiveHighWaterMark'>> = {}): Dealer {
  const dealer = new Dealer({ linger: ENGINE_LINGER_MS, ...extra });
  (dealer as unknown as { routingId: Buffer }).routingId = Buffer.from(identity);
  return dealer;
}

/** Closes a socket, ignoring errors; `discard` drops unsent messages (linger 0) instead of flushing them. */
function closeQuietly(socket: Socket | null, discard = false): void {
  try {
    if (socket === null || socket.closed) return;
    if (discard) socket.linger = 0;
    socket.close();
  } catch {
    // going away either way
  }
}

/** Connects a socket, turning an invalid address into a ConfigError naming the role. */
function connectSocket(socket: Socket, role: string, address: string): void {
  try {
    socket.connect(address);
  } catch (error) {
    throw new ConfigError(`engine ${role}: cannot connect to ${JSON.stringify(address)}: ${errorMessage(error)}`, {
      cause: error,
    });
  }
}

/**
 * One engine rank's connected sockets (the engine side of engine-wire.md 1.1). Create with `EngineDialer.connect`.
 */
export class EngineDialer {
  /** This rank's engine index. */
  readonly engineIndex: number;
  /** Its 2-byte routing identity. */
  readonly identity: Uint8Array;
  /** The input address INIT named (`inputs[0]`). */
  readonly inputAddress: string;
  /** The output address INIT named (`outputs[0]`). */
  readonly outputAddress: string;

  private readonly input: Dealer;
  private readonly push: Push;
  private readonly log: MinimalLogger;
  private closed = false;
  private requestsTaken = false;
  private sendChain: Promise<void> = Promise.resolve();
  /** Sends started by `enqueue` that have not settled yet. */
  private sendsInFlight = 0;

  private constructor(parts: {
    engineIndex: number;
    identity: Uint8Array;
    inputAddress: string;
    outputAddress: string;
    input: Dealer;
    push: Push;
    log: MinimalLogger;
  }) {
    this.engineIndex = parts.engineIndex;
    this.identity = parts.identity;
    this.inputAddress = parts.inputAddress;
    this.outputAddress = parts.outputAddress;
    this.input = parts.input;
    this.push = parts.push;
    this.log = parts.log;
  }

  /**
   * Runs the engine side of the handshake (engine-wire.md 2.1 steps 2-6) and returns the connected rank.
   *
   * Throws ConfigError for an engine index outside 0..65535 or an unusable address; HandshakeError stage `INIT`
   * when no INIT arrives within `initTimeoutMs`, when INIT does not decode, or when its `inputs` / `outputs` list is
   * empty; HandshakeError stage `HELLO` / `READY` / `registration` when the corresponding send fails. Every socket
   * opened is closed on failure.
   */
  static async connect(opts: EngineDialerOptions): Promise<EngineDialer> {
    const log = opts.logger ?? silentLogger;
    const initTimeoutMs = opts.initTimeoutMs ?? DEFAULT_INIT_TIMEOUT_MS;
    if (!Number.isInteger(initTimeoutMs) || initTimeoutMs < 1) {
      throw new ConfigError(`initTimeoutMs must be a positive integer, got ${initTimeoutMs}`);
    }
    let identity: Uint8Array;
    try {
      identity = encodeEngineIdentity(opts.engineIndex);
    } catch (error) {
      throw new ConfigError(`engine index: ${errorMessage(error)}`, { cause: error });
    }
    const engineIndex = opts.engineIndex;
    const who = `engine ${engineIndex}`;
    const handshakeAddress = opts.handshakeAddress;

    const handshake = dealerWithIdentity(identity);
    let input: Dealer | null = null;
    let push: Push | null = null;
    try {
      connectSocket(handshake, 'handshake DEALER', handshakeAddress);
      handshake.sendTimeout = initTimeoutMs;
      try {
        await handshake.send(encodeReadyMessage({ status: 'HELLO' }));
      } catch (error) {
        throw new HandshakeError(
          'HELLO',
          `${who} could not send HELLO to ${handshakeAddress}: ${errorMessage(error)}`,
          {
            code: errorCode(error),
            cause: error,
          },
        );
      }
      log.debug({ engineIndex, handshakeAddress }, 'engine: HELLO sent, waiting for INIT');

      // Wait for INIT in slices, logging progress (TokenSpeed `zmq_wire.py`).
      const started = performance.now();
      let frames: Buffer[] | null = null;
      while (frames === null) {
        const remaining = initTimeoutMs - (performance.now() - started);
        if (remaining <= 0) {
          throw new HandshakeError(
            'INIT',
            `${who} got no INIT from ${handshakeAddress} within ${initTimeoutMs} ms; is the gateway running and bound there?`,
            { code: 'ETIMEDOUT' },
          );
        }
        handshake.receiveTimeout = Math.max(1, Math.ceil(Math.min(INIT_POLL_SLICE_MS, remaining)));
        try {
          frames = await handshake.receive();
        } catch (error) {
          if (errorCode(error) !== 'EAGAIN') {
            throw new HandshakeError('INIT', `${who} receive on ${handshakeAddress} failed: ${errorMessage(error)}`, {
              code: errorCode(error),
              cause: error,
            });
          }
          log.info(
            { engineIndex, handshakeAddress, waitedMs: Math.round(performance.now() - started) },
            'engine: still waiting for INIT',
          );
        }
      }

      // READY goes out as soon as INIT arrives, before INIT is validated (engine-wire.md 2.1 step 4).
      try {
        await handshake.send(encodeReadyMessage({ status: 'READY' }));
      } catch (error) {
        throw new HandshakeError(
          'READY',
          `${who} could not send READY to ${handshakeAddress}: ${errorMessage(error)}`,
          {
            code: errorCode(error),
            cause: error,
          },
        );
      }

      // TokenSpeed decodes the last frame it received (engine-wire.md 1.6).
      const last = frames[frames.length - 1];
      if (last === undefined)
        throw new HandshakeError('INIT', `${who} received an empty INIT message from ${handshakeAddress}`);
      let addresses: { inputs: string[]; outputs: string[] };
      try {
        addresses = decodeHandshakeInit(last);
      } catch (error) {
        throw new HandshakeError(
          'INIT',
          `${who}: INIT from ${handshakeAddress} does not decode: ${errorMessage(error)}`,
          { cause: error },
        );
      }
      const inputAddress = addresses.inputs[0];
      const outputAddress = addresses.outputs[0];
      if (inputAddress === undefined || outputAddress === undefined) {
        throw new HandshakeError(
          'INIT',
          `${who}: INIT from ${handshakeAddress} has an empty addresses.${inputAddress === undefined ? 'inputs' : 'outputs'} list`,
        );
      }

      input = dealerWithIdentity(
        identity,
        opts.inputReceiveHighWaterMark === undefined ? {} : { receiveHighWaterMark: opts.inputReceiveHighWaterMark },
      );
      connectSocket(input, 'input DEALER', inputAddress);
      input.sendTimeout = initTimeoutMs;
      try {
        await input.send(
          encodeReadyResponse(opts.readyResponse, { granularityKey: opts.granularityKey, form: opts.readyForm }),
        );
      } catch (error) {
        throw new HandshakeError(
          'registration',
          `${who} could not register on ${inputAddress}: ${errorMessage(error)}`,
          {
            code: errorCode(error),
            cause: error,
          },
        );
      }
      input.sendTimeout = -1;

      push = new Push({ linger: ENGINE_LINGER_MS });
      connectSocket(push, 'output PUSH', outputAddress);
      closeQuietly(handshake);
      log.debug({ engineIndex, inputAddress, outputAddress }, 'engine: registered; input and output connected');
      return new EngineDialer({ engineIndex, identity, inputAddress, outputAddress, input, push, log });
    } catch (error) {
      // Nothing queued on a failed handshake is worth flushing (and lingering would delay process exit).
      closeQuietly(handshake, true);
      closeQuietly(input, true);
      closeQuietly(push, true);
      throw error;
    }
  }

  /**
   * Requests received on the input DEALER, parsed with `parseRequestFrames` (engine-wire.md 1.6). A malformed
   * message is logged and skipped, like TokenSpeed. Ends after `close()`; throws TransportError on any other receive
   * failure. Can be iterated once (a second call throws TransportError).
   */
  requests(): AsyncIterable<EngineRequest> {
    if (this.requestsTaken) {
      throw new TransportError(`engine ${this.engineIndex}: requests() can be iterated only once`, { code: 'ESTATE' });
    }
    this.requestsTaken = true;
    return this.receiveRequests();
  }

  private async *receiveRequests(): AsyncGenerator<EngineRequest, void, undefined> {
    while (!this.closed) {
      let frames: Buffer[];
      try {
        frames = await this.input.receive();
      } catch (error) {
        if (this.closed) return;
        throw new TransportError(
          `engine ${this.engineIndex}: receive on ${this.inputAddress} failed: ${errorMessage(error)}`,
          {
            code: errorCode(error),
            cause: error,
          },
        );
      }
      try {
        const { type, payload } = parseRequestFrames(frames);
        yield { type, payload };
      } catch (error) {
        this.log.warn(
          { engineIndex: this.engineIndex, err: error, frames: frames.length },
          'engine: skipping a malformed request message',
        );
      }
    }
  }

  /**
   * Pushes one output message (`[payload]`, engine-wire.md 1.6) on the output PUSH. Sends are serialized in call
   * order. Rejects with TransportError after `close()` or on a socket failure.
   */
  sendOutput(payload: Uint8Array): Promise<void> {
    return this.sendFrames([payload]);
  }

  /**
   * Pushes a raw multipart output message `[payload, aux_1, ...]` (engine-wire.md 1.6): for tests and for vLLM-style
   * aux frames. Same ordering and errors as `sendOutput`. Rejects with TransportError on an empty frame list.
   */
  sendFrames(frames: readonly Uint8Array[]): Promise<void> {
    if (frames.length === 0) {
      return Promise.reject(new TransportError(`engine ${this.engineIndex}: cannot send a message with zero frames`));
    }
    return this.enqueue(async () => {
      try {
        await this.push.send([...frames]);
      } catch (error) {
        throw new TransportError(
          `engine ${this.engineIndex}: send on ${this.outputAddress} failed: ${errorMessage(error)}`,
          { code: errorCode(error), cause: error },
        );
      }
    });
  }

  /**
   * Pushes the raw `ENGINE_CORE_DEAD` frame (engine-wire.md 1.7) without blocking, best effort like TokenSpeed: a
   * failure is logged, never thrown. Close afterwards; the socket lingers 1 s so the frame is flushed.
   */
  sendEngineCoreDead(): Promise<void> {
    return this.enqueue(async () => {
      this.push.sendTimeout = 0;
      try {
        await this.push.send(ENGINE_CORE_DEAD);
      } finally {
        if (!this.push.closed) this.push.sendTimeout = -1;
      }
    }).catch((error: unknown) => {
      this.log.warn({ engineIndex: this.engineIndex, err: error }, 'engine: could not send ENGINE_CORE_DEAD');
    });
  }

  /** Closes every socket (pending outputs get up to 1 s to flush) and ends `requests()`. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // The input DEALER has nothing left to send after its registration; only the PUSH lingers to flush outputs.
    closeQuietly(this.input, true);
    closeQuietly(this.push);
  }

  /** Runs `task` after every earlier send (zeromq.js allows one send in progress per socket). */
  private enqueue(task: () => Promise<void>): Promise<void> {
    if (this.closed) {
      return Promise.reject(
        new TransportError(`engine ${this.engineIndex}: the engine sockets are closed`, { code: 'ELINKCLOSED' }),
      );
    }
    // With nothing in flight the send starts now (a simulated rank pushes one message per step: no extra
    // microtask hop); otherwise it waits for the previous one, so sends stay in call order.
    const run =
      this.sendsInFlight === 0
        ? task()
        : this.sendChain.then(() => {
            if (this.closed)
              throw new TransportError(`engine ${this.engineIndex}: the engine sockets are closed`, {
                code: 'ELINKCLOSED',
              });
            return task();
          });
    this.sendsInFlight += 1;
    const settled = (): void => {
      this.sendsInFlight -= 1;
    };
    this.sendChain = run.then(settled, settled);
    return run;
  }
}
