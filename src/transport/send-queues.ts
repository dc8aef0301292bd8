/**
 * Per-rank send ordering for the input ROUTER (issue #8; dp-routing.md 12.3 rule 4 kept per rank): one FIFO per
 * routing identity, drained round-robin, so a rank whose peer sits at its high-water mark (every attempt refused with
 * EAGAIN until the send timeout) never delays the other ranks' sends. Order within one rank is kept (an ADD before
 * the ABORT of the same request; a lockstep wake broadcast's START_DP_WAVE frames in list order per rank).
 *
 * Pure scheduling state: no sockets, no timers. The caller (src/transport/zmq-link.ts) asks `next(now)` for the job
 * to attempt, then reports the outcome with `sent`, `refused` (back off) or `drop`. Times are ms on one monotonic
 * clock (`performance.now()` in the link, plain numbers in tests).
 */

/** Back-off after a refused attempt (peer at its high-water mark), in ms: first value and cap (doubling). */
export const SEND_BACKOFF_FIRST_MS = 1;
export const SEND_BACKOFF_MAX_MS = 20;

interface RankQueue<J> {
  jobs: J[];
  /** Earliest time the head may be attempted again (0 = now). */
  retryAt: number;
  backoffMs: number;
  /** When the head's first attempt happened (its send timeout counts from there), or null before it. */
  headSince: number | null;
}

/** The FIFOs of one socket, keyed by routing identity (hex). */
export class PerRankSendQueues<J> {
  private readonly queues = new Map<string, RankQueue<J>>();
  /** Round-robin order of keys with pending jobs; the next scan starts after the last key served. */
  private order: string[] = [];
  private cursor = 0;
  private count = 0;

  /** Jobs queued over every rank. */
  get size(): number {
    return this.count;
  }

  /** Jobs queued for `key`. */
  sizeOf(key: string): number {
    return this.queues.get(key)?.jobs.length ?? 0;
  }

  /** Append `job` to `key`'s FIFO. */
  enqueue(key: string, job: J): void {
    let q = this.queues.get(key);
    if (!q) {
      q = { jobs: [], retryAt: 0, backoffMs: SEND_BACKOFF_FIRST_MS, headSince: null };
      this.queues.set(key, q);
      this.order.push(key);
    }
    q.jobs.push(job);
    this.count++;
  }

  /**
   * The next head to attempt at `now`, scanning the ranks round-robin from the one after the last served and skipping
   * heads still backing off; null when every pending head is backing off (see `nextRetryAt`) or nothing is queued.
   * `since` is when that head was first attempted (its send timeout counts from there; `now` for a first attempt).
   */
  next(now: number): { key: string; job: J; since: number } | null {
    const n = this.order.length;
    for (let i = 0; i < n; i++) {
      const idx = (this.cursor + i) % n;
      const key = this.order[idx]!;
      const q = this.queues.get(key)!;
      if (q.retryAt > now) continue;
      this.cursor = (idx + 1) % n;
      q.headSince ??= now;
      return { key, job: q.jobs[0]!, since: q.headSince };
    }
    return null;
  }

  /** The earliest time a backing-off head may be attempted again, or null when nothing is queued. */
  nextRetryAt(): number | null {
    let best: number | null = null;
    for (const q of this.queues.values()) if (best === null || q.retryAt < best) best = q.retryAt;
    return best;
  }

  /** `key`'s head was sent: remove it; the next head starts fresh (no back-off, its own timeout). */
  sent(key: string): J | undefined {
    return this.shift(key);
  }

  /** `key`'s head was refused for now (peer at its high-water mark): keep it and back off (doubling, capped). */
  refused(key: string, now: number): void {
    const q = this.queues.get(key);
    if (!q) return;
    q.retryAt = now + q.backoffMs;
    q.backoffMs = Math.min(q.backoffMs * 2, SEND_BACKOFF_MAX_MS);
  }

  /** `key`'s head failed for good: remove it (like `sent`). */
  drop(key: string): J | undefined {
    return this.shift(key);
  }

  /** Remove and return every job queued for `key`, in order. */
  drain(key: string): J[] {
    const q = this.queues.get(key);
    if (!q) return [];
    const jobs = [...q.jobs];
    this.remove(key);
    return jobs;
  }

  /** Remove and return every job of every rank. */
  drainAll(): J[] {
    const all: J[] = [];
    for (const key of [...this.order]) all.push(...this.drain(key));
    return all;
  }

  private shift(key: string): J | undefined {
    const q = this.queues.get(key);
    if (!q) return undefined;
    const job = q.jobs.shift();
    this.count--;
    if (q.jobs.length === 0) {
      this.remove(key);
    } else {
      q.retryAt = 0;
      q.backoffMs = SEND_BACKOFF_FIRST_MS;
      q.headSince = null;
    }
    return job;
  }

  private remove(key: string): void {
    const q = this.queues.get(key);
    if (!q) return;
    this.count -= q.jobs.length;
    q.jobs.length = 0;
    this.queues.delete(key);
    const idx = this.order.indexOf(key);
    this.order.splice(idx, 1);
    if (this.cursor > idx) this.cursor--;
    if (this.cursor >= this.order.length) this.cursor = 0;
  }
}
