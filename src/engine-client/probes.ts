/**
 * Liveness probes and send-failure classes (dp-routing.md 14.8; issue #8 part 1 "attribution"): a probe is an ABORT
 * with the empty list `[]` (engine-wire.md 4.7: valid, aborts nothing), sent to a rank's identity on the input
 * ROUTER. The ROUTER has `mandatory` on (src/transport/zmq-link.ts), so a probe to an identity with no connected
 * peer is refused with EHOSTUNREACH: that names the dead rank, which neither a zeromq `disconnect` event nor the
 * ENGINE_CORE_DEAD frame does.
 */

/**
 * When the probe rounds go out after a `disconnect` hint or an ENGINE_CORE_DEAD frame, in ms after it (a new hint
 * restarts the series). Several rounds because libzmq drops a vanished peer's ROUTER pipe asynchronously: a send
 * processes pending socket commands only when about a millisecond has passed since it last did (libzmq
 * `process_commands` throttling), so a probe sent right after the hint may still be accepted into the dying pipe
 * (measured over ipc with zeromq 6.8.0: the immediate probe succeeded, one a few ms later failed with EHOSTUNREACH).
 * No round goes out at 0 ms: a rank that exits cleanly pushes `ENGINE_CORE_DEAD` and then closes its sockets, and an
 * immediate probe could win the race against that sentinel (seen in 2 of 13 e2e runs). The last round, 3 s after,
 * leaves a dying engine time to close its sockets before an ENGINE_CORE_DEAD that no rank could be tied to is settled:
 * a quiet rank holding requests is stalled as its likely sender, else it is only counted (failure-scope.ts
 * `settleSentinels`).
 */
export const PROBE_SCHEDULE_MS: readonly number[] = Object.freeze([20, 200, 1000, 3000]);

/**
 * How a failed link send is treated:
 * - `timeout`: `SendTimeoutError` (engine-wire.md 1.9, SMG PR #2094): the rank is not reading its input;
 * - `unreachable`: a `TransportError` with code `EHOSTUNREACH`: no connected peer has the rank's identity any more;
 * - `other`: anything else (a closed link, a socket failure).
 * For the first two nothing of the message reached the engine (zmq-link.ts), so an ADD may be sent elsewhere.
 * Matched by `name` / `code` so the client needs no runtime import of src/transport.
 */
export type SendErrorClass = 'timeout' | 'unreachable' | 'other';

/** The class of a send failure (see `SendErrorClass`). Pure. */
export function classifySendError(err: unknown): SendErrorClass {
  if (err instanceof Error && err.name === 'SendTimeoutError') return 'timeout';
  if (err instanceof Error && (err as { code?: unknown }).code === 'EHOSTUNREACH') return 'unreachable';
  return 'other';
}

/** A timer that never keeps the process alive on its own. */
export function unrefTimer(fn: () => void, ms: number): ReturnType<typeof setTimeout> {
  const timer = setTimeout(fn, ms);
  if (typeof timer === 'object' && typeof timer.unref === 'function') timer.unref();
  return timer;
}

/** Resolves after `ms` (an unref'd timer; node:test mock timers drive it). */
export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => unrefTimer(resolve, ms));
}

/**
 * One series of probe rounds at `schedule` (ms after `start()`); `round(last)` runs each, `last` true for the final
 * one. `start()` cancels a pending series and begins a new one; `cancel()` stops it. Uses the global `setTimeout`, so
 * node:test mock timers drive it.
 */
export class ProbeRounds {
  private readonly timers = new Set<ReturnType<typeof setTimeout>>();

  constructor(
    private readonly schedule: readonly number[],
    private readonly round: (last: boolean) => void,
  ) {}

  /** Whether rounds are still due. */
  get pending(): boolean {
    return this.timers.size > 0;
  }

  start(): void {
    this.cancel();
    this.schedule.forEach((ms, i) => {
      const last = i === this.schedule.length - 1;
      const timer = unrefTimer(() => {
        this.timers.delete(timer);
        this.round(last);
      }, ms);
      this.timers.add(timer);
    });
  }

  cancel(): void {
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
  }
}
