/**
 * The router's tables of one connected front (router-service.ts): its engine requests by handle (the handle is
 * front-local, one per engine request), the handles it aborted while their submit was still being placed, and the
 * concurrency permits it holds (permits.ts). Plain state and the synchronous steps on it; no I/O but the cancels.
 */
import type { Socket } from 'node:net';
import { IdSet, IdTable } from '../../collections/id-table.js';
import type { RequestStream } from '../../engine-client/request-stream.js';
import type { FrontLane } from '../channel/outbox.js';

/** A handle whose submit is still being placed (the engine client's `submit` has not resolved). */
export const PENDING = Symbol('pending');

/** One connected front: its socket, its engine requests by handle, its concurrency permits. */
export interface FrontSession {
  readonly frontId: number;
  readonly sock: Socket;
  /** Its outbox lane (records of this turn, messages the socket has not taken yet). */
  readonly lane: FrontLane;
  /** `IdTable`/`IdSet`s, not `Map`/`Set`s: an entry per request comes and goes (collections/id-table.ts says why). */
  readonly streams: IdTable<RequestStream | typeof PENDING>;
  /** Handles aborted while their submit was still being placed. */
  readonly abortedEarly: IdSet;
  /**
   * Per pending handle whose group has flow control: what leaves its queue at once when the front aborts it (a
   * request can wait there for seconds; engine-client/flow-control.ts).
   */
  readonly queued: IdTable<AbortController>;
  readonly permits: IdSet;
  dropped: boolean;
  /** Reported to `onFrontStuck` already (once is enough: the primary kills it). */
  reported: boolean;
}

/** A new session of front `frontId` on `sock`, its lane `lane`, holding nothing. */
export function newSession(frontId: number, sock: Socket, lane: FrontLane): FrontSession {
  return {
    frontId,
    sock,
    lane,
    streams: new IdTable(),
    abortedEarly: new IdSet(),
    queued: new IdTable(),
    permits: new IdSet(),
    dropped: false,
    reported: false,
  };
}

/** The front aborted `handle` (ABORT): cancel its stream, or note it when its submit is still being placed. */
export function abortHandle(s: FrontSession, handle: number): void {
  const stream = s.streams.get(handle);
  if (stream === PENDING) {
    s.abortedEarly.add(handle);
    s.queued.get(handle)?.abort(new Error('the front aborted the request while it waited'));
  } else if (stream !== undefined) {
    s.streams.delete(handle);
    stream.cancel();
  }
}

/**
 * `handle`'s submit resolved with `stream`: returns true when the front still wants it (the stream is now the
 * handle's), else cancels it (the front went away or aborted it meanwhile) and returns false.
 */
export function keepPlaced(s: FrontSession, handle: number, stream: RequestStream): boolean {
  s.queued.delete(handle);
  if (s.dropped || s.abortedEarly.delete(handle)) {
    s.streams.delete(handle);
    stream.cancel();
    return false;
  }
  s.streams.set(handle, stream);
  return true;
}

/** `handle`'s submit was refused: the handle holds nothing any more. */
export function submitRefused(s: FrontSession, handle: number): void {
  s.queued.delete(handle);
  s.streams.delete(handle);
  s.abortedEarly.delete(handle);
}

/**
 * Cancel every engine request of `s` (its front went away: ABORT to the rank, in-flight slot released; one still
 * being placed is cancelled once placed) and empty its table; returns how many there were.
 */
export function cancelEvery(s: FrontSession): number {
  let n = 0;
  for (const [key, stream] of s.streams.entries()) {
    n++;
    if (stream === PENDING) s.abortedEarly.add(Number(key));
    else stream.cancel();
  }
  for (const q of s.queued.values()) q.abort(new Error('the front went away while the request waited'));
  s.queued.clear();
  s.streams.clear();
  return n;
}
