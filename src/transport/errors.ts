/**
 * Errors of the ZeroMQ transport (engine-wire.md sections 1-2; dp-routing.md section 6, "Error kinds").
 *
 * Every message names the stage, the address and the engine identity involved, so one log line tells an
 * operator what to check.
 */

/**
 * A socket operation failed: bind, send, receive, or any call after `close()`.
 * `code` is the libzmq / Node errno name when there is one (`EHOSTUNREACH`, `EAGAIN`, `EADDRINUSE`, ...), or a
 * transport-level code (`ELINKCLOSED` after `close()`).
 */
export class TransportError extends Error {
  /** Errno-style code of the underlying failure, if any. */
  readonly code: string | undefined;

  constructor(message: string, options?: { code?: string; cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'TransportError';
    this.code = options?.code;
  }
}

/**
 * A send on the input ROUTER did not complete within the send timeout (10 s by default; engine-wire.md 1.9,
 * SMG PR #2094). Nothing of the message was queued (ZeroMQ refuses a multipart message on its first frame, so the
 * socket is not left mid-message), but the engine client treats it as fatal (dp-routing.md section 6 and 12.3
 * rule 4): the engine is not draining its input.
 */
export class SendTimeoutError extends TransportError {
  /** The send timeout that expired, in ms. */
  readonly timeoutMs: number;

  constructor(message: string, timeoutMs: number) {
    super(message, { code: 'ETIMEDOUT' });
    this.name = 'SendTimeoutError';
    this.timeoutMs = timeoutMs;
  }
}

/**
 * The stage of the startup handshake (engine-wire.md section 2.1-2.2):
 * - `HELLO`: phase A, collecting one HELLO per rank on the handshake ROUTER;
 * - `INIT`: engine side only, waiting for / validating INIT;
 * - `READY`: phase B, collecting READY from every rank that said HELLO;
 * - `registration`: phase C, the ready response on the input ROUTER.
 */
export type HandshakeStage = 'HELLO' | 'INIT' | 'READY' | 'registration';

/**
 * The engine side of the handshake failed (src/transport/engine-dialer.ts): no INIT in time, an undecodable or empty
 * INIT, or a send that failed (engine-wire.md section 2.1). `stage` names where it failed. The gateway side never
 * throws it: its handshake service logs, counts and ignores what it refuses (src/transport/handshake-service.ts).
 */
export class HandshakeError extends TransportError {
  /** Where the handshake failed. */
  readonly stage: HandshakeStage;

  constructor(stage: HandshakeStage, message: string, options?: { code?: string; cause?: unknown }) {
    super(`handshake ${stage}: ${message}`, options);
    this.name = 'HandshakeError';
    this.stage = stage;
  }
}

/**
 * A configuration value the transport cannot use: a worker URL that is not `ipc://<path>`, a handshake override
 * that is not `tcp://`, an ipc path too long for a Unix socket, a socket directory that is not ours, a stale path
 * that is not a socket, or a bad `dpSize` (engine-wire.md sections 1.3-1.4; gateway.md section 2.3).
 */
export class ConfigError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'ConfigError';
  }
}
