/**
 * How a started gateway stops (issue #8 part 6): `close()` at once; `shutdown()` drains first (src/lifecycle.ts:
 * readiness 503, new requests 503, live ones run up to the grace, then end with an error); `emergencyStop()` for a
 * process about to exit. Every path removes the gateway's own ipc socket files (only if they are still the files it
 * bound).
 */
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { drainLiveRequests, type GatewayLifecycle } from '../lifecycle.js';
import { closeEngineClients, type GroupRuntime } from './engine-groups.js';
import { closeApp } from './http-app.js';
import type { Tracing } from '../tracing.js';

/** The ways to stop a started gateway (see `RunningGateway` in start.ts for each one's contract). */
export interface GatewayStops {
  /**
   * Stop everything without the log lines of `close()`: live requests end (stream-closed), then HTTP, sockets (files
   * removed) and simulated ranks. For a start that fails once the HTTP app exists.
   */
  teardown(): Promise<void>;
  close(): Promise<void>;
  shutdown(opts?: { graceMs?: number }): Promise<void>;
  emergencyStop(): void;
}

/**
 * The stops of a gateway over its started `groups` and HTTP `app` (null without HTTP): each idempotent, a `close()`
 * during a `shutdown()` joins it. `shutdownGraceMs` is `shutdown()`'s default grace.
 */
export function gatewayStops(parts: {
  groups: readonly GroupRuntime[];
  app: FastifyInstance | null;
  lifecycle: GatewayLifecycle;
  logger: Logger;
  shutdownGraceMs: number;
  /** Tracing, flushed last (the spans of the requests that just ended). */
  tracing?: Tracing | null;
}): GatewayStops {
  const { groups, app, lifecycle, logger } = parts;
  const teardown = async (): Promise<void> => {
    lifecycle.markStopped();
    // Fail live streams first so open SSE responses end, then stop the HTTP server, then the engines.
    await closeEngineClients(groups);
    if (app !== null) await closeApp(app).catch((err: unknown) => logger.warn({ err }, 'HTTP server close failed'));
    // The simulated ranks this gateway stops are dropped from the rank records: a later gateway must not wait for them.
    for (const g of groups) if (g.sims !== null) g.link.forgetRankRecords(g.sims.ranks.map((r) => r.engineIndex));
    await Promise.all(groups.map((g) => g.sims?.stop().catch(() => {})));
    await parts.tracing?.shutdown();
  };
  let closing: Promise<void> | null = null;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      logger.info('shutting down');
      await teardown();
      logger.info('shut down');
    })();
    return closing;
  };
  return {
    teardown,
    close,
    async shutdown(shutdownOpts: { graceMs?: number } = {}): Promise<void> {
      const graceMs = shutdownOpts.graceMs ?? parts.shutdownGraceMs;
      if (!lifecycle.startDrain() || closing !== null) return close();
      await drainLiveRequests({
        liveRequests: () => groups.reduce((n, g) => n + g.client.registeredCount, 0),
        graceMs,
        logger,
        what: '/ready answers 503 and new requests get 503',
        clients: groups.map((g) => g.client),
      });
      return close();
    },
    emergencyStop(): void {
      for (const g of groups) {
        try {
          g.sims?.killNow();
        } catch {
          // never throws by contract; keep going
        }
        g.link.removeSocketFilesNow();
      }
    },
  };
}
