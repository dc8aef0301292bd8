/**
 * Sliced delivery of engine outputs to push-mode consumers (issue 9, a responsive loop). The engine client applies a
 * batch's routing state (store load, route, release, clamp, liveness) in one synchronous step (dp-routing.md 12.3
 * rule 2); what the rows then cost on the application side (detokenization, stop matching, SSE chunks, writes: the
 * `OutputListener`s of request-stream.ts) runs here instead, in slices of at most `budgetMs` of wall time, each
 * continued on the next macrotask, so a 1000-row batch does not hold the event loop for its 1000 listeners at once.
 *
 * Order: one FIFO for every stream of the client, so a request's outputs of batch k all reach its listener before
 * its outputs of batch k+1, and its terminal output or error after its tokens. A target that is gone by the time its
 * turn comes (cancelled, aborted) decides itself what it drops (`DeliveryTarget.handQueued`).
 *
 * Bound: `pending` counts queued hand-offs; the dispatcher stops reading engine output while it is at `maxPending`
 * or more (`whenBelowLimit`), so the backlog stays bounded and the engine's messages wait in ZeroMQ (the link's
 * queue, then the PULL socket's high-water mark) instead of in gateway memory.
 */
import { performance } from 'node:perf_hooks';
import type { EngineOutput } from '../protocols/types.js';

/** A consumer of queued hand-offs: one request stream (request-stream.ts). */
export interface DeliveryTarget {
  /** Hand one queued value to the consumer: an output, or the Error that ends the stream. Must not throw. */
  handQueued(value: EngineOutput | Error): void;
}

/** Default wall-time budget of one delivery slice, ms (issue 9: loop delay p99 ≤ 20 ms). */
export const DEFAULT_DELIVERY_BUDGET_MS = 4;
/** Default number of hand-offs between two clock reads inside a slice. */
export const DEFAULT_DELIVERY_CHECK_EVERY = 8;
/**
 * Default bound on queued hand-offs before the dispatcher stops reading engine output: 4096 rows (four TokenSpeed
 * batches of 1000 sequences), a few MB of decoded rows at most.
 */
export const DEFAULT_MAX_PENDING_DELIVERIES = 4096;

/**
 * Options (all optional): `budgetMs` (ms of one slice, > 0), `checkEvery` (hand-offs between clock reads, ≥ 1),
 * `maxPending` (hand-offs, ≥ 1), `now` (the budget's clock in ms, default `performance.now`), `defer` (runs the next
 * slice on a later macrotask, default `setImmediate`), `soon` (runs the first slice once the current synchronous
 * step is over; default `defer` too: the batch's routing and its first delivery slice are two turns, so timers and
 * I/O run between them and one turn never holds both the receive loop's slice and a delivery slice). Tests pass a
 * fake clock to make slicing deterministic.
 */
export interface DeliveryQueueOptions {
  budgetMs?: number;
  checkEvery?: number;
  maxPending?: number;
  now?: () => number;
  defer?: (run: () => void) => void;
  soon?: (run: () => void) => void;
}

/** The FIFO of hand-offs of one engine client (see the module comment). */
export class DeliveryQueue {
  /** Slices run so far (each continuation after the first is one more macrotask turn). */
  slices = 0;
  private targets: DeliveryTarget[] = [];
  private values: Array<EngineOutput | Error> = [];
  private head = 0;
  private scheduled = false;
  private readonly budgetMs: number;
  private readonly checkEvery: number;
  private readonly maxPending: number;
  private readonly now: () => number;
  private readonly defer: (run: () => void) => void;
  private readonly soon: (run: () => void) => void;
  private readonly run = (): void => this.drain();
  private belowLimit: Array<() => void> = [];

  /** Throws RangeError on a non-positive budget, check interval or bound. */
  constructor(opts: DeliveryQueueOptions = {}) {
    this.budgetMs = opts.budgetMs ?? DEFAULT_DELIVERY_BUDGET_MS;
    this.checkEvery = opts.checkEvery ?? DEFAULT_DELIVERY_CHECK_EVERY;
    this.maxPending = opts.maxPending ?? DEFAULT_MAX_PENDING_DELIVERIES;
    if (!(this.budgetMs > 0)) throw new RangeError(`budgetMs must be > 0 ms, got ${this.budgetMs}`);
    if (!Number.isSafeInteger(this.checkEvery) || this.checkEvery < 1)
      throw new RangeError(`checkEvery must be an integer ≥ 1, got ${this.checkEvery}`);
    if (!Number.isSafeInteger(this.maxPending) || this.maxPending < 1)
      throw new RangeError(`maxPending must be an integer ≥ 1, got ${this.maxPending}`);
    this.now = opts.now ?? (() => performance.now());
    this.defer = opts.defer ?? ((run) => void setImmediate(run));
    this.soon = opts.soon ?? this.defer;
  }

  /** Hand-offs queued and not yet handed. */
  get pending(): number {
    return this.values.length - this.head;
  }

  /** Queue `value` for `target`; the first slice runs once the current synchronous step is over. */
  push(target: DeliveryTarget, value: EngineOutput | Error): void {
    this.targets.push(target);
    this.values.push(value);
    if (this.scheduled) return;
    this.scheduled = true;
    this.soon(this.run);
  }

  /** null while fewer than `maxPending` hand-offs are queued, else a promise that resolves once that is true again. */
  whenBelowLimit(): Promise<void> | null {
    if (this.pending < this.maxPending) return null;
    return new Promise((resolve) => this.belowLimit.push(resolve));
  }

  /** One slice: hand off in FIFO order for at most the budget, then continue on the next macrotask. */
  private drain(): void {
    this.slices++;
    const started = this.now();
    let sinceCheck = 0;
    while (this.head < this.values.length) {
      const i = this.head++;
      const target = this.targets[i]!;
      const value = this.values[i]!;
      // Drop the references now: a long queue must not keep handed outputs alive.
      this.targets[i] = undefined as never;
      this.values[i] = undefined as never;
      target.handQueued(value);
      if (++sinceCheck < this.checkEvery) continue;
      sinceCheck = 0;
      if (this.head < this.values.length && this.now() - started >= this.budgetMs) {
        this.compact();
        this.wakeBelowLimit();
        this.defer(this.run);
        return;
      }
    }
    this.targets = [];
    this.values = [];
    this.head = 0;
    this.scheduled = false;
    this.wakeBelowLimit();
  }

  /** Drop the handed prefix so the arrays do not grow with everything ever queued. */
  private compact(): void {
    if (this.head < 1024 || this.head * 2 < this.values.length) return;
    this.targets = this.targets.slice(this.head);
    this.values = this.values.slice(this.head);
    this.head = 0;
  }

  private wakeBelowLimit(): void {
    if (this.belowLimit.length === 0 || this.pending >= this.maxPending) return;
    const waiters = this.belowLimit;
    this.belowLimit = [];
    for (const w of waiters) w();
  }
}
