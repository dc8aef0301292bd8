/** Network fixtures shared by the socket tests. */
import { request as httpRequest } from 'node:http';
import { createServer } from 'node:net';

/**
 * A tcp port on 127.0.0.1 that was free a moment ago (listen on port 0, read it, close). Another process may take
 * it before the caller binds it. Rejects with the listen error, or `no port` if the address is not a tcp one.
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      if (address === null || typeof address === 'string') {
        server.close();
        reject(new Error('no port'));
        return;
      }
      server.close(() => resolve(address.port));
    });
  });
}

/** A POST left open (see `openRequest`). */
export interface OpenRequest {
  /** The answer's status once its body ended, or null when the connection ended without an answer. */
  readonly done: Promise<number | null>;
  /** Whether the answer's head has arrived. */
  answered(): boolean;
  /** Close the connection: the client goes away. */
  leave(): void;
}

/** POST `body` (JSON) to `url`'s `path` over a connection of its own, and leave it open until `leave()`. */
export function openRequest(url: string, path: string, body: unknown): OpenRequest {
  const target = new URL(path, url);
  const payload = JSON.stringify(body);
  const req = httpRequest({
    host: target.hostname,
    port: target.port,
    path: target.pathname,
    method: 'POST',
    agent: false,
    headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
  });
  let answered = false;
  const done = new Promise<number | null>((resolve) => {
    req.on('response', (res) => {
      answered = true;
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? null));
      res.on('error', () => resolve(res.statusCode ?? null));
    });
    req.on('error', () => resolve(null));
    req.on('close', () => resolve(null));
  });
  req.end(payload);
  return { done, answered: () => answered, leave: () => req.destroy() };
}
