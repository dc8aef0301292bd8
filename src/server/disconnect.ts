/**
 * Client-disconnect detection for one HTTP/1.1 request (gateway.md section 13: a disconnect must abort the engine
 * request in every phase, detected on HTTP/1.1 connection close).
 *
 * Why the socket and not the request or response objects (measured on Node 20):
 * - `IncomingMessage` emits `close` as soon as its body has been consumed (auto-destroy), long before the response,
 *   and a later socket close does not emit it again; `aborted` fires only for a body that never completed. Neither
 *   sees a client that leaves after sending its whole request.
 * - `ServerResponse` emits `close` on a socket close only when it is the response currently attached to the socket.
 *   A pipelined request queued behind another has no socket attached yet, so its response never hears of it.
 * The socket's own `close` reaches every request on the connection. One listener per socket fans out to every
 * watched request (pipelining can put many in flight on one socket without hitting the EventEmitter listener
 * warning).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

/** The part of a socket the watcher uses (a real `net.Socket`, or light-my-request's fake one under `inject`). */
interface WatchedSocket {
  destroyed?: boolean;
  on(event: 'close', listener: () => void): unknown;
  off(event: 'close', listener: () => void): unknown;
}

const watchers = new WeakMap<WatchedSocket, Set<() => void>>();

function addSocketWatcher(socket: WatchedSocket, onClose: () => void): () => void {
  let set = watchers.get(socket);
  if (set === undefined) {
    const created = new Set<() => void>();
    const fire = () => {
      socket.off('close', fire);
      watchers.delete(socket);
      for (const cb of [...created]) cb();
    };
    socket.on('close', fire);
    watchers.set(socket, created);
    set = created;
  }
  set.add(onClose);
  const owned = set;
  return () => {
    owned.delete(onClose);
  };
}

/** A request's disconnect watch: `signal` aborts when the client went away; `dispose()` stops watching. */
export interface DisconnectWatch {
  /** Aborted (once) when the connection closed before `response` finished. */
  readonly signal: AbortSignal;
  /** Stop watching (call when the request's handling is over). Idempotent. */
  dispose(): void;
}

/**
 * Watch `request`/`response` for a client disconnect: the signal aborts when the request's socket closes, or the
 * response closes, while the response has not finished writing (`writableFinished` false). A normally completed
 * request body does not count (see the module comment). A socket that is already destroyed aborts at once.
 */
export function watchClientDisconnect(request: IncomingMessage, response: ServerResponse): DisconnectWatch {
  const controller = new AbortController();
  const onClose = () => {
    if (!response.writableFinished && !controller.signal.aborted) controller.abort();
  };
  response.on('close', onClose);
  const socket = request.socket as WatchedSocket | null | undefined;
  let detachSocket: () => void = () => {};
  if (socket && typeof socket.on === 'function') {
    if (socket.destroyed === true) onClose();
    else detachSocket = addSocketWatcher(socket, onClose);
  }
  let disposed = false;
  return {
    signal: controller.signal,
    dispose() {
      if (disposed) return;
      disposed = true;
      response.off('close', onClose);
      detachSocket();
    },
  };
}
