/**
 * One socket write per stream per event-loop turn (issue 9, the per-token path): a streamed response's SSE records are
 * appended to a pending string and written together when the turn's flush runs, so a stream that receives several
 * engine outputs in one turn (several output batches decoded back to back) costs one `write` (one syscall) instead of
 * one per record. The bytes and their order are unchanged; only how they are cut into writes differs.
 *
 * Pure apart from the scheduler it is given: `TickFlusher` batches the flushes of every dirty writer into one
 * callback (in the gateway: one `setImmediate` per turn, after the turn's I/O callbacks ran).
 */

/** Where a writer's coalesced text goes (`ServerResponse.write`); returns false when the sink is over its bound. */
export type ChunkSink = (chunk: string) => boolean;

/** Runs `flush` later, once (the gateway: `setImmediate`). */
export type Defer = (flush: () => void) => void;

/**
 * Collects the writers that have pending text and flushes them in a deferred callback, in the order they first became
 * dirty. A writer flushed (or ended) before the callback runs is skipped then. One callback writes for at most
 * `budgetMs` (by `now`, checked after each writer) and defers the rest to another callback, so a turn in which
 * thousands of streams got a record does not hold the event loop for all of their socket writes at once.
 */
export class TickFlusher {
  private dirty: CoalescingWriter[] = [];
  private scheduled = false;

  /**
   * @param defer runs a flush later (the gateway: `setImmediate`).
   * @param budgetMs the longest one flush callback writes before deferring the rest (ms; default 4).
   * @param now the clock of the budget (ms; default `performance.now`).
   */
  constructor(
    private readonly defer: Defer,
    private readonly budgetMs = 4,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** `writer` has pending text: flush it in the next deferred callback. */
  add(writer: CoalescingWriter): void {
    this.dirty.push(writer);
    this.schedule();
  }

  /** Flush the dirty writers now, for at most the budget; the rest go to the next deferred callback. */
  run(): void {
    this.scheduled = false;
    const list = this.dirty;
    this.dirty = [];
    const started = this.now();
    for (let i = 0; i < list.length; i++) {
      list[i]!.flush();
      if (i + 1 < list.length && this.now() - started >= this.budgetMs) {
        this.dirty = list.slice(i + 1).concat(this.dirty);
        this.schedule();
        return;
      }
    }
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    this.defer(() => this.run());
  }
}

/**
 * The pending text of one stream. `write` appends (and registers the writer with its flusher the first time it has
 * something pending); `flush` hands everything pending to the sink in one call; `take` removes it for a caller that
 * writes it itself (the response's final `end(...)`). `onFlushed(accepted)` is told the sink's answer of each flush.
 * `wake` registers the writer for the next flush without text; a flush with nothing pending calls `onEmptyFlush`
 * instead of the sink (the SSE writer sends its response headers then, unless a record took them along). `hold` keeps
 * what is written from being flushed until `release` (or a direct `flush`/`take`): the SSE writer holds a stream's
 * headers and opening records until its first engine output, so both leave in one write.
 */
export class CoalescingWriter {
  private pending = '';
  private queued = false;
  private held = false;

  constructor(
    private readonly sink: ChunkSink,
    private readonly flusher: TickFlusher,
    private readonly onFlushed: (accepted: boolean) => void = () => {},
    private readonly onEmptyFlush: () => void = () => {},
  ) {}

  /** UTF-16 code units waiting for the next flush. */
  get pendingLength(): number {
    return this.pending.length;
  }

  /** Append `text` (a no-op for ''). */
  write(text: string): void {
    if (text === '') return;
    this.pending += text;
    this.wake();
  }

  /** Be flushed in the flusher's next callback, pending text or not (see the class docs); deferred while held. */
  wake(): void {
    if (this.queued || this.held) return;
    this.queued = true;
    this.flusher.add(this);
  }

  /** Flush nothing until `release` (or a direct `flush`): writes and `wake` only append meanwhile. */
  hold(): void {
    this.held = true;
  }

  /** End a `hold`: be flushed in the flusher's next callback, pending text or not (a no-op when not held). */
  release(): void {
    if (!this.held) return;
    this.held = false;
    this.wake();
  }

  /** Write everything pending in one sink call (ending a hold); with nothing pending, call `onEmptyFlush` instead. */
  flush(): void {
    this.queued = false;
    this.held = false;
    if (this.pending === '') {
      this.onEmptyFlush();
      return;
    }
    const chunk = this.pending;
    this.pending = '';
    this.onFlushed(this.sink(chunk));
  }

  /** Remove and return everything pending (the caller writes it); a later flush writes nothing of it. */
  take(): string {
    const chunk = this.pending;
    this.pending = '';
    return chunk;
  }
}
