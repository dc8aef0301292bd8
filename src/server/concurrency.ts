/**
 * A cap on concurrent generation requests (issue #10 part 3): a `POST` under `/v1/` arriving while `max` of them are
 * being served is answered at once with 429, `Retry-After`, and an OpenAI-style body (`type: 'requests'`,
 * `code: 'rate_limit_exceeded'`, OpenAI's spelling for a request-rate limit; the openai SDK retries it after the
 * advertised delay). A request holds its slot from its `onRequest` hook until its response closes (finished, or the
 * connection closed, also for a pipelined request still queued behind another), so stalled and slow clients count.
 * The hook runs after the API-key check: refused clients take no slot.
 *
 * Why a cap: each streamed response may hold up to the per-stream buffer bound plus what its engine stream queued
 * during a stall (sse.ts), so the cap times that is the gateway's worst-case response memory.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { onSocketClose } from './disconnect.js';
import { ApiError } from './errors.js';

/**
 * Default cap: 512 concurrent generation requests (about 0.5-1 GiB of response buffers in the worst case). Also what
 * one gateway process carries at 100 tokens/s per stream: ~15 µs of CPU per streamed token (bench:throughput, issue
 * 9) × 100 tokens/s × 512 streams ≈ 0.77 of a core, leaving room for the ~0.8 ms each request costs (docs/security.md
 * "Concurrency" says how to size it).
 */
export const DEFAULT_MAX_CONCURRENT_REQUESTS = 512;

/** Seconds a refused client is told to wait (`Retry-After`). */
export const RETRY_AFTER_SECONDS = 1;

/** Whether `request` counts against the cap: a POST whose route (or raw path) is under `/v1/`. */
export function countsAgainstCap(request: FastifyRequest): boolean {
  if (request.method !== 'POST') return false;
  const route = request.routeOptions.url;
  return route !== undefined ? route.startsWith('/v1/') : request.url.startsWith('/v1/');
}

/** The 429 for a full gateway. */
export function tooManyRequestsError(max: number): ApiError {
  return new ApiError(
    429,
    `too many concurrent requests: this gateway serves at most ${max} generation requests at once; retry after ${RETRY_AFTER_SECONDS} s`,
    { type: 'requests', code: 'rate_limit_exceeded' },
  );
}

/**
 * A cap counted outside this process (`--workers N`: the router holds the one global count, src/fronts): `acquire`
 * resolves with a ticket, or null when the gateway is full; `release` returns a ticket.
 */
export interface SharedConcurrencyCap {
  acquire(): Promise<number | null>;
  release(ticket: number): void;
}

/**
 * Install the cap on `app` (`max`: an integer ≥ 1, checked by edge-options.ts; 0 disables it). `inFlight()` reports
 * the slots this process took and holds now. With `shared`, the slots are taken from it (one count over every
 * process) instead of a local one.
 */
export function registerConcurrencyCap(
  app: FastifyInstance,
  max: number,
  shared?: SharedConcurrencyCap,
): { inFlight(): number } {
  if (max === 0) return { inFlight: () => 0 };
  let taken = 0;
  /** Hold a taken slot until the response (or, for a queued pipelined request, the socket) closes. */
  const hold = (request: FastifyRequest, reply: FastifyReply, ticket: number | null) => {
    taken++;
    let released = false;
    let unwatchSocket: () => void = () => {};
    const release = () => {
      if (released) return;
      released = true;
      taken--;
      if (ticket !== null) shared?.release(ticket);
      reply.raw.off('close', release);
      unwatchSocket();
    };
    reply.raw.on('close', release);
    // A pipelined request's response is not attached to the socket yet, so only the socket hears of its close.
    const socket = request.raw.socket;
    if (socket) {
      if (socket.destroyed) release();
      else unwatchSocket = onSocketClose(socket, release);
    }
  };
  const refuse = (reply: FastifyReply, done: (err?: Error) => void) => {
    reply.header('retry-after', String(RETRY_AFTER_SECONDS));
    done(tooManyRequestsError(max));
  };
  app.addHook('onRequest', (request, reply, done) => {
    if (!countsAgainstCap(request)) {
      done();
      return;
    }
    if (shared !== undefined) {
      shared.acquire().then(
        (ticket) => {
          if (ticket === null) return refuse(reply, done);
          hold(request, reply, ticket);
          done();
        },
        (err: unknown) => done(err instanceof Error ? err : new Error(String(err))),
      );
      return;
    }
    if (taken >= max) {
      refuse(reply, done);
      return;
    }
    hold(request, reply, null);
    done();
  });
  return { inFlight: () => taken };
}
