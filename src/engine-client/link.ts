/**
 * The seam between the engine client and the transport (architecture.md): what the engine client needs from a
 * connected socket set, so it can be tested with an in-memory fake and run over real ZeroMQ.
 */
import type { ReadyResponse, RequestTypeByte } from '../protocols/types.js';

/** One rank that completed the handshake (engine-wire.md section 2.1 step 7). */
export interface ConnectedEngine {
  /** The raw ZMQ routing identity (normally 2 bytes, little-endian engine index; engine-wire.md 1.5). */
  identity: Uint8Array;
  /** The engine index decoded from a 2-byte identity, or null for any other identity length. */
  engineIndex: number | null;
  /** The rank's registration frame. */
  ready: ReadyResponse;
}

/** What the output PULL socket delivered (engine-wire.md section 1.8). */
export type OutputMessage =
  | { kind: 'frames'; frames: Uint8Array[] }
  /** The raw `ENGINE_CORE_DEAD` frame arrived: the whole engine group is dead (engine-wire.md 1.7). */
  | { kind: 'dead' }
  /** The output socket failed or closed; `error` says why. The stream ends after this. */
  | { kind: 'closed'; error: Error }
  /** zeromq reported that a connected engine peer went away (a hint, not proof of death). */
  | { kind: 'disconnect'; address: string };

/** A connected engine group's socket set, after the handshake. */
export interface EngineLink {
  /** Connected ranks sorted by identity bytes (engine-wire.md 1.5 "Engine order"). */
  readonly engines: readonly ConnectedEngine[];
  /**
   * Send `[identity, type, payload]` on the input ROUTER through one FIFO queue.
   * Rejects with `SendTimeoutError` when a send does not complete within the send timeout (10 s by default,
   * engine-wire.md 1.9), or with `TransportError` on any socket failure or after `close()`.
   */
  send(identity: Uint8Array, type: RequestTypeByte, payload: Uint8Array): Promise<void>;
  /** Every message received on the output PULL, in order. Ends after a `closed` message or `close()`. */
  outputs(): AsyncIterable<OutputMessage>;
  /** Close every socket. Idempotent. */
  close(): Promise<void>;
}
