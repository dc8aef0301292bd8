/**
 * The global concurrency count of `--workers N` (`--max-concurrent-requests`): one per gateway, so it lives in the
 * router and the fronts ask for a permit per request (PERMIT / RELEASE records). Each front's granted tickets are
 * kept in its session (front-sessions.ts), so a front that goes away gives its permits back.
 */
import type { IdSet } from '../../collections/id-table.js';

/** The permits granted out of `max` (0 = no cap), over every front. */
export class ConcurrencyPermits {
  private taken = 0;

  /** @param max the cap on concurrent generation requests (0 = none). */
  constructor(readonly max: number) {}

  /** Permits held by fronts now. */
  get held(): number {
    return this.taken;
  }

  /** Grant `ticket` to the front holding `tickets` unless the cap is reached; returns whether it was granted. */
  take(tickets: IdSet, ticket: number): boolean {
    const granted = this.max === 0 || this.taken < this.max;
    if (granted) {
      this.taken++;
      tickets.add(ticket);
    }
    return granted;
  }

  /** `ticket` of the front holding `tickets` is returned (nothing when it does not hold it). */
  release(tickets: IdSet, ticket: number): void {
    if (tickets.delete(ticket)) this.taken--;
  }

  /** Every permit of the front holding `tickets` is returned (it went away). */
  returnAll(tickets: IdSet): void {
    this.taken -= tickets.size;
    tickets.clear();
  }
}
