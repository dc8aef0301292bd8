/** Network fixtures shared by the socket tests. */
import { request as httpRequest } from 'node:http';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';

/**
 * The kernel's ephemeral port range (`ip_local_port_range`): the ports it hands out for outgoing connections and for
 * `listen(0)` anywhere on the machine. Null when unknown (not Linux).
 */
function ephemeralRange(): [number, number] | null {
  try {
    const [low, high] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    return Number.isInteger(low) && Number.isInteger(high) ? [low!, high!] : null;
  } catch {
    return null;
  }
}

/** Ports a test may hand a process to bind later: below the ephemeral range, so no outgoing connection takes one. */
const PICK_SPAN = 8000;

/** Whether `port` can be bound on 127.0.0.1 right now (bound and closed again). */
function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/**
 * A tcp port on 127.0.0.1 for a process the caller starts later (a gateway's `--port`), possibly much later (a
 * restarted gateway). A port from `listen(0)` would be in the kernel's ephemeral range, where any outgoing connection
 * of any process may take it before the caller binds it (a concurrent suite made that happen): the port is picked at
 * random below that range instead, bindable now, and claimed for the whole test run (a file named after it in
 * `GATEWAY_TEST_PORT_CLAIMS`, which scripts/test.mjs sets and removes at the end), so no other test file of the run
 * picks it. Without the claim folder (a file run alone) or a known range, the port is the kernel's (`listen(0)`).
 * Rejects when no port could be found.
 */
export async function freePort(): Promise<number> {
  const claims = process.env.GATEWAY_TEST_PORT_CLAIMS;
  const range = ephemeralRange();
  if (claims !== undefined && range !== null && range[0] - PICK_SPAN > 1024) {
    for (let attempt = 0; attempt < 200; attempt++) {
      const port = range[0] - 1 - Math.floor(Math.random() * PICK_SPAN);
      try {
        closeSync(openSync(join(claims, String(port)), 'wx'));
      } catch {
        continue; // claimed by another test file of this run (or the folder is gone: the loop ends in the fallback)
      }
      if (await canListen(port)) return port;
    }
  }
  return kernelPort();
}

/**
 * `count` consecutive ports, bindable now and claimed like `freePort`'s (for endpoints the engines offset per DP rank:
 * a KV-event endpoint's port + rank). Rejects when no such run was found.
 */
export async function freePortRange(count: number): Promise<number> {
  const claims = process.env.GATEWAY_TEST_PORT_CLAIMS;
  const range = ephemeralRange();
  const low = range !== null && range[0] - PICK_SPAN > 1024 ? range[0] - PICK_SPAN : 20000;
  const span = range !== null ? range[0] - count - low : 10000;
  for (let attempt = 0; attempt < 200; attempt++) {
    const base = low + Math.floor(Math.random() * span);
    const ports = Array.from({ length: count }, (_, i) => base + i);
    if (claims !== undefined) {
      const taken: number[] = [];
      for (const port of ports) {
        try {
          closeSync(openSync(join(claims, String(port)), 'wx'));
          taken.push(port);
        } catch {
          break;
        }
      }
      if (taken.length < count) continue; // claimed by another test file (the part taken stays claimed: harmless)
    }
    const free = await Promise.all(ports.map((p) => canListen(p)));
    if (free.every(Boolean)) return base;
  }
  throw new Error(`no ${count} consecutive free ports found`);
}

/** A port from `listen(0)`, free a moment ago. Rejects with the listen error, or `no port` if not a tcp address. */
function kernelPort(): Promise<number> {
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
