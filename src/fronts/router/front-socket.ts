/**
 * One connection to the router's unix socket (frames.ts), up to and after the front's hello: the router hears no
 * front without it. The session it opens and what the front's messages do are router-service.ts's.
 */
import { timingSafeEqual } from 'node:crypto';
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import { FrameReader, HELLO_BYTES } from '../channel/frames.js';

/** What a connection needs of the router service (`S`: its session of a front). */
export interface FrontSocketHost<S extends { readonly frontId: number }> {
  /** What a front's hello must carry (frames.ts `helloFrame`). */
  readonly frontToken: Buffer;
  /** Counted here: refused input (`decodeErrors`) and front messages read after the hello (`frontMessages`). */
  readonly stats: { decodeErrors: number; frontMessages: number };
  readonly log: Logger;
  /** Every open connection to the socket (the service closes them at its end). */
  readonly conns: Set<Socket>;
  /** A connection that has not sent a valid hello this long is closed, ms. */
  readonly helloTimeoutMs: number;
  /** Largest front message read after the hello, bytes; a longer frame closes the socket. */
  readonly maxFrontMessageBytes: number;
  /** The service has stopped (a new connection is closed at once; nothing is logged of a connection's end). */
  isClosed(): boolean;
  /** Whether front `frontId` has a session whose socket is still open. */
  hasOpenSocket(frontId: number): boolean;
  /** Front `frontId` said hello on `sock`: its session. */
  open(frontId: number, sock: Socket): S;
  /** One message of session `s` (a frame after its hello). */
  onMessage(s: S, frame: Buffer): void;
  /** The socket of session `s` closed. */
  onClose(s: S): void;
}

/**
 * Serve `sock` for `host`: its first frame must be a front's hello (front id and `frontToken`); until then no frame
 * longer than a hello is read. A hello without the token, any other first frame, or a hello for a front id whose
 * socket is open is refused (logged, counted, closed): the front's streams stay with it. So is a connection that
 * closes with part of a hello sent (one that sent nothing is not counted), and one that says nothing for
 * `helloTimeoutMs`. After the hello every frame is one message for `host.onMessage`, up to `maxFrontMessageBytes`; a
 * longer frame closes the socket (and so ends the front).
 */
export function acceptFront<S extends { readonly frontId: number }>(sock: Socket, host: FrontSocketHost<S>): void {
  if (host.isClosed()) {
    sock.destroy();
    return;
  }
  host.conns.add(sock);
  let session: S | null = null;
  /** Bytes read before a hello, and whether the connection was refused (counted already). */
  let heardBeforeHello = 0;
  let refusedAlready = false;
  // A connection that never says hello would hold a file descriptor for good.
  const helloTimer = setTimeout(() => {
    if (session !== null || sock.destroyed) return;
    refusedAlready = true;
    host.stats.decodeErrors++;
    host.log.warn('a front socket connection sent no hello in time: closing it');
    sock.destroy();
  }, host.helloTimeoutMs);
  helloTimer.unref();
  const refuse = (why: string, fields: Record<string, unknown>): void => {
    refusedAlready = true;
    host.stats.decodeErrors++;
    host.log.warn(fields, why);
    reader.stop();
    sock.destroy();
  };
  const reader = new FrameReader((frame) => {
    if (session !== null) {
      host.stats.frontMessages++;
      host.onMessage(session, frame);
      return;
    }
    if (frame.length !== HELLO_BYTES || !timingSafeEqual(frame.subarray(4), host.frontToken)) {
      refuse('a front socket connection did not begin with a front hello carrying the token: closing it', {
        bytes: frame.length,
      });
      return;
    }
    const claimed = frame.readUInt32LE(0);
    if (host.hasOpenSocket(claimed)) {
      refuse('a second connection for a front that has one: closing the newcomer', { frontId: claimed });
      return;
    }
    clearTimeout(helloTimer);
    session = host.open(claimed, sock);
    reader.maxFrameBytes = host.maxFrontMessageBytes;
  }, HELLO_BYTES);
  sock.on('data', (chunk: Buffer) => {
    if (session === null) heardBeforeHello += chunk.length;
    try {
      reader.push(chunk);
    } catch (err) {
      refuse('oversized frame on a front socket: closing it', {
        frontId: session?.frontId ?? null,
        err: (err as Error).message,
      });
    }
  });
  sock.on('error', (err) => {
    if (!host.isClosed()) host.log.debug({ err, frontId: session?.frontId ?? null }, 'front socket error');
  });
  sock.on('close', () => {
    host.conns.delete(sock);
    clearTimeout(helloTimer);
    if (session === null && heardBeforeHello > 0 && !refusedAlready && !host.isClosed()) {
      // Part of a hello, then gone: a malformed handshake (one that sent nothing at all is no frame).
      host.stats.decodeErrors++;
      host.log.warn({ bytes: heardBeforeHello }, 'a front socket connection closed before its hello was complete');
    }
    if (session !== null) host.onClose(session);
  });
}
