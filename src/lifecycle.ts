/**
 * The gateway's lifecycle and admission state (issue #8 part 6, graceful drain): `serving` → `draining` (a shutdown
 * began: readiness turns 503 and new API requests get 503 with `Retry-After`, live requests run on) → `stopped`.
 * The HTTP layer only reads `draining` (src/server/admission.ts); the gateway (src/gateway/) drives the rest, with
 * the engine groups it drains.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { MinimalLogger } from './logging.js';
import type { AdmissionGate } from './server/admission.js';

/** Default bound on a drain, in ms (`--shutdown-grace-ms`): how long live requests may run after SIGTERM. */
export const DEFAULT_SHUTDOWN_GRACE_MS = 30_000;
/** How often a drain checks whether the live requests have finished, in ms. */
const DRAIN_POLL_MS = 25;

/** The admission gate and lifecycle state of one gateway. */
export class GatewayLifecycle implements AdmissionGate {
  private state: 'serving' | 'draining' | 'stopped' = 'serving';

  /** True once a drain began (and after the stop). */
  get draining(): boolean {
    return this.state !== 'serving';
  }

  /** Current state. */
  get current(): 'serving' | 'draining' | 'stopped' {
    return this.state;
  }

  /** Begin draining; returns false when a drain or stop already began. */
  startDrain(): boolean {
    if (this.state !== 'serving') return false;
    this.state = 'draining';
    return true;
  }

  /** The gateway is shutting its parts down. */
  markStopped(): void {
    this.state = 'stopped';
  }
}

/**
 * Resolve once `liveRequests()` is 0 (true) or after `graceMs` (false), checking every 25 ms. Never rejects.
 * `graceMs` 0 returns at once with whether nothing is live.
 */
export async function waitForDrain(liveRequests: () => number, graceMs: number): Promise<boolean> {
  const deadline = performance.now() + graceMs;
  for (;;) {
    if (liveRequests() === 0) return true;
    const left = deadline - performance.now();
    if (left <= 0) return false;
    await sleep(Math.min(DRAIN_POLL_MS, left));
  }
}

/**
 * The drain of a shutdown, for the one-process gateway and the `--workers` router alike: log that it started (with
 * `what` saying who now answers 503), wait up to `graceMs` for `liveRequests()` to reach 0 (`waitForDrain`), and if
 * the grace runs out, end every engine client's live requests with an error naming the grace (`--shutdown-grace-ms`).
 * Resolves once the requests finished or were ended; never rejects (an engine client's `shutdown` does not).
 */
export async function drainLiveRequests(opts: {
  liveRequests: () => number;
  graceMs: number;
  logger: MinimalLogger;
  what: string;
  clients: ReadonlyArray<{ shutdown(message: string): Promise<void> }>;
}): Promise<void> {
  const { liveRequests, graceMs, logger, clients } = opts;
  logger.info({ graceMs, liveRequests: liveRequests() }, `draining: ${opts.what}; live requests may finish`);
  if (await waitForDrain(liveRequests, graceMs)) {
    logger.info({ graceMs }, 'drained: every live request finished');
    return;
  }
  const message = `the gateway is shutting down: the shutdown grace of ${graceMs} ms (--shutdown-grace-ms) ran out before this request finished`;
  logger.warn({ graceMs, liveRequests: liveRequests() }, 'shutdown grace expired; ending the requests still live');
  await Promise.all(clients.map((c) => c.shutdown(message)));
}
