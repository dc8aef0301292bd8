/**
 * A gate on the output receive loops of one or more engine links (zmq-link.ts `ZmqLinkOptions.outputGate`): while it
 * is paused no link takes its next message off its output PULL; the messages already received are still handled.
 *
 * Why (issue 9, `--workers N` flow control; docs/workers.md section 6): the router reads the engines' output
 * faster than the HTTP fronts can serve it, so without a gate a slower front's outbox lane grows until the front is
 * declared stuck. Pausing the PULL pushes back on the engines the way a one-process gateway that cannot keep up
 * does: libzmq stops reading the ipc pipe once the PULL's receive high-water mark is reached, the engine's PUSH
 * fills to its send high-water mark, and its next send blocks (dp-routing.md section 1: back-pressure on the output
 * socket reaches the engine; engine-wire.md 1.8). Who pauses and resumes it is the caller's business
 * (fronts/channel/outbox.ts `FrontOutboxes` with the router's front lanes).
 */

/** Open or paused; `wait()` resolves when open. Synchronous state changes; never throws. */
export class OutputGate {
  private paused = false;
  private waiters: Array<() => void> = [];

  /** True while no link may receive its next output message. */
  get isPaused(): boolean {
    return this.paused;
  }

  /** Pause the links' output receive; returns false (and changes nothing) when already paused. */
  pause(): boolean {
    if (this.paused) return false;
    this.paused = true;
    return true;
  }

  /** Let the links receive again (every `wait()` resolves); returns false when it was open. */
  resume(): boolean {
    if (!this.paused) return false;
    this.paused = false;
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
    return true;
  }

  /**
   * Resolves at once when open, else at the next `resume()`, or when `signal` aborts (the waiter is then removed, so a
   * closed link leaves nothing behind in a gate that stays paused).
   */
  wait(signal?: AbortSignal): Promise<void> {
    if (!this.paused || signal?.aborted === true) return Promise.resolve();
    return new Promise((resolve) => {
      const onAbort = (): void => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        resolve();
      };
      const waiter = (): void => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      };
      this.waiters.push(waiter);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Waiters now (tests: a closed link's receive loop leaves none). */
  get waiting(): number {
    return this.waiters.length;
  }
}
