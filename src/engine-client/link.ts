/**
 * The seam between the engine client and the transport (architecture.md): what the engine client needs from an
 * engine group's socket set, so it can be tested with an in-memory fake and run over real ZeroMQ.
 *
 * The socket set outlives its engines (issue #8): the handshake service keeps accepting ranks for the link's whole
 * life, so ranks join, die and join again while the link stays bound. The link reports each completed handshake to
 * the attached `LinkListener` and asks it before letting a HELLO in; whether a rank is alive is the engine client's
 * call (rank-liveness.ts), not the transport's.
 */
import type { ReadyResponse, RequestTypeByte } from '../protocols/types.js';

/** One rank that completed the handshake (engine-wire.md section 2.1 steps 2-5). */
export interface ConnectedEngine {
  /** The raw ZMQ routing identity: the 2-byte little-endian engine index (engine-wire.md 1.5). */
  identity: Uint8Array;
  /** The engine index decoded from the identity, in 0..dpSize−1 (the link refuses any other). */
  engineIndex: number;
  /** The rank's registration frame. */
  ready: ReadyResponse;
  /**
   * True for a rank adopted after a gateway restart (src/transport/adoption.ts): still running, it registered with the
   * previous gateway, whose ready response `ready` is; this gateway found its identity connected to the input socket.
   */
  adopted?: boolean;
}

/** What the output PULL socket delivered (engine-wire.md section 1.8). */
export type OutputMessage =
  | { kind: 'frames'; frames: Uint8Array[] }
  /** The raw `ENGINE_CORE_DEAD` frame arrived: some rank of the group is dying; the frame does not say which (1.7). */
  | { kind: 'dead' }
  /** The output socket failed or closed; `error` says why. The stream ends after this. */
  | { kind: 'closed'; error: Error }
  /** zeromq reported that a connected engine peer went away (a hint, not proof of death). */
  | { kind: 'disconnect'; address: string };

/**
 * The engine client's side of the handshake service (set once with `EngineLink.attach`):
 * - `admitHello(engineIndex)`: a valid HELLO arrived for this index (2-byte identity, index in 0..dpSize−1). Resolve
 *   true to answer with INIT (the rank's handshake starts), false to ignore it (the index is held by a live rank; the
 *   link logs and counts the refusal). May take a while (it can probe the current holder); the link keeps serving
 *   other ranks meanwhile. Must not reject.
 * - `joined(engine)`: the rank sent HELLO and READY and registered on the input socket, or (`engine.adopted`) it is a
 *   running rank of the previous gateway found connected after a restart; it can take requests now.
 * - `joinFailed(engineIndex, reason)`: a rank that was let in did not finish its handshake (timeout); it is not joined.
 */
export interface LinkListener {
  admitHello(engineIndex: number): Promise<boolean>;
  joined(engine: ConnectedEngine): void;
  joinFailed(engineIndex: number, reason: string): void;
}

/** An engine group's socket set. */
export interface EngineLink {
  /** Number of rank slots: engine indexes 0..dpSize−1 (the worker's engine count, engine-wire.md 2.6). */
  readonly dpSize: number;
  /**
   * Set the listener (once). Ranks that joined before it was attached are reported to it at once, in identity order.
   * Throws Error when called twice.
   */
  attach(listener: LinkListener): void;
  /**
   * Send `[identity, type, payload]` on the input ROUTER. Sends to one identity leave in call order; sends to different
   * identities do not wait for each other (a rank at its high-water mark delays only its own sends).
   * Rejects with `SendTimeoutError` when a send does not complete within the send timeout (10 s by default,
   * engine-wire.md 1.9), or with `TransportError` (code `EHOSTUNREACH` when no connected peer has the identity) on
   * any socket failure or after `close()`.
   */
  send(identity: Uint8Array, type: RequestTypeByte, payload: Uint8Array): Promise<void>;
  /** Every message received on the output PULL, in order. Ends after a `closed` message or `close()`. */
  outputs(): AsyncIterable<OutputMessage>;
  /** Handshake messages refused so far, by reason (a live record: read it, never write it). */
  readonly handshakeRejected: Readonly<Record<string, number>>;
  /** Close every socket. Idempotent. */
  close(): Promise<void>;
}
