/**
 * Per-request streams (dp-routing.md section 4) and their cancellation hook (section 5).
 *
 * One object plays two roles: the **sink** the dispatcher writes into (`deliver`, `fail`, `closeWithoutTerminal`)
 * and the **stream** the caller reads (`for await`, `cancel`). The sink is unbounded on purpose (section 1: a bounded
 * sink would let one slow consumer stall every other request and, through back-pressure, the engine); memory per
 * request is bounded by its token limit.
 */
import type { BudgetSnapshot } from './budgets.js';
import type { EngineOutput, EngineOutputBase, EngineOutputRow } from '../protocols/types.js';
import type { DeliveryQueue, DeliveryTarget } from './delivery-queue.js';
import { streamClosedError } from './errors.js';

/**
 * The caller's view of one submitted request (apis.md "RequestStream").
 * - Iterating yields every `EngineOutput` of the request in arrival order; the stream ends after the terminal output
 *   (non-null `finishReason`). A failure (fail_all, stream closed without a terminal output) is thrown from the
 *   iterator once; the next read ends the stream.
 * - `engineIndex`: the DP rank the ADD went to (null when that engine's identity carries no index).
 * - `cancel()`, and `return()` on the iterator (e.g. `break` in `for await`), abort an unfinished request: the
 *   client retires it and sends ABORT to its rank without waiting for a confirmation (section 5). Both are
 *   idempotent and do nothing once the request has finished or failed. Buffered outputs are discarded.
 */
export interface RequestStream extends AsyncIterable<EngineOutput> {
  readonly requestId: string;
  readonly engineIndex: number | null;
  /** The tenant's budget right after this request was admitted (budgets.ts), when it has one. */
  readonly budget?: BudgetSnapshot | null;
  cancel(): void;
  /**
   * Optional push mode (issue 9, the per-token path): instead of iterating, hand every output to `listener` without
   * a promise per output: inside the dispatcher's delivery of its batch, or (an engine client's streams) in the
   * client's sliced delivery right after it (delivery-queue.ts), in arrival order either way. Outputs already
   * buffered are handed over at once, before `listen` returns. After a terminal output, `error` or `cancel()`,
   * nothing more is delivered. The stream
   * cannot be iterated any more once listened to. A consumer that cannot use the push mode (a stream without
   * `listen`) iterates instead: server/output-listener.ts `listenToStream` does either.
   */
  listen?(listener: OutputListener): void;
  /**
   * Optional row-level push mode (issue 9, the router of `--workers N`): every row goes to `sink` synchronously,
   * inside the dispatcher's step for its batch, with the stream's token counts after it; no `EngineOutput` and no
   * delivery-queue hand-off per row. Items already buffered are handed over at once, before `listenRows` returns.
   * After a terminal row, `error` or `cancel()`, nothing more is handed. One consumer only, as for `listen`.
   */
  listenRows?(sink: RowSink): void;
}

/**
 * The consumer of `RequestStream.listenRows`. `row` gets every row in order (the last one terminal) with the
 * request's counts after it (tokens: the last reported prompt length, the completion count, the last reported
 * prefix-cache hits; filled as for `EngineOutput`); `error` the failure that ends the stream instead (at most once,
 * never after a terminal row). Both run inside the engine client's synchronous batch step, so they must not throw
 * (a throw is reported as a process warning and cancels the stream), must not await, and must touch no routing
 * state: they only record the row (the router appends it to a front's message).
 */
export interface RowSink {
  row(row: EngineOutputBase, promptTokens: number, completionTokens: number, cachedTokens: number): void;
  error(error: Error): void;
}

/**
 * The push-mode consumer of one request's stream (`RequestStream.listen`). `output` gets every output in order, the
 * last one terminal; `error` the failure that ends the stream instead (fail_all, stream closed without a terminal
 * output; at most once, never after a terminal output). Both run inside a delivery slice shared by many requests,
 * so they must not throw (a throw is reported as a process warning and cancels the stream) and should return quickly.
 */
export interface OutputListener {
  output(output: EngineOutput): void;
  error(error: Error): void;
}

/** A buffered item: an output, or the Error that ends the stream (outputs are plain objects, never Errors). */
type Item = EngineOutput | Error;

interface Waiter {
  resolve(result: IteratorResult<EngineOutput>): void;
  reject(error: unknown): void;
}

const DONE: IteratorResult<EngineOutput> = Object.freeze({ done: true, value: undefined });

/**
 * The stream/sink pair for one request. Created by the client at registration (section 3 step 2).
 * `onAbandon` is called once, synchronously, when the consumer gives up an unfinished stream (cancel / return /
 * AbortSignal); the client then retires the request and sends the ABORT.
 *
 * Token counts: the sink receives decoded rows (`EngineOutputRow`, counts null where the engine did not report
 * them; engine-wire.md 5.9) and the reader gets complete `EngineOutput`s. The stream keeps, per request: the
 * completion count (the engine's cumulative `completion_tokens` when reported, else the previous count plus this
 * row's new tokens), and the last reported prompt and cached counts (before any report: the prompt length the
 * gateway sent, and 0). This is the per-request state vLLM's protocol used to hold (src/protocols/vllm/protocol.ts).
 *
 * Sink state (counts, `finished`, `failure`) changes at once, in the dispatcher's synchronous step; with a
 * `DeliveryQueue`, what a push-mode listener is handed goes through that queue (one FIFO per engine client), so the
 * listener may hear of an output a few macrotasks later, still in order. A stream cancelled meanwhile hears nothing
 * more; one aborted by the client (`closeWithoutTerminal(true)`) gets its stream-closed error and none of the outputs
 * still queued for it.
 */
export class RequestStreamImpl implements RequestStream, AsyncIterator<EngineOutput>, DeliveryTarget {
  readonly requestId: string;
  engineIndex: number | null = null;
  budget: BudgetSnapshot | null = null;

  private readonly queue: Item[] = [];
  private head = 0;
  private readonly waiters: Waiter[] = [];
  /** No more items will be written: terminal output, error or close was delivered (or the consumer abandoned). */
  private sinkDone = false;
  /** The consumer stopped reading (cancel / return) or has read past the end. */
  private consumerDone = false;
  private readonly onAbandon: () => void;
  private readonly onSinkDone: () => void;
  /** Tokens: last reported prompt length (initially the submitted prompt's length). */
  private promptTokens: number;
  /** Tokens generated so far (reported cumulative count, or the running total of new tokens). */
  private completionTokens = 0;
  /** Tokens: last reported prefix-cache hit count. */
  private cachedTokens = 0;
  /** The error the sink ended with (`fail`), if it did. */
  private failedWith: Error | null = null;
  /** How the stream is consumed: iterated (or not read yet), `listen`, or `listenRows`. Set once. */
  private mode: 'iterate' | 'listen' | 'rows' = 'iterate';
  /**
   * The push-mode consumer (`listen`); null before `listen` and again once it was handed its last item or the stream
   * was cancelled. Why let go (issue 9, CPU per request): a finished stream can still be reachable from garbage the
   * young-generation GC cannot see is dead (a stale slot of an old-space table, for one), and a listener it held
   * kept the whole request (run, response, HTTP objects, ~10 KB) alive through every scavenge until the next full GC,
   * so nearly all of it was promoted: scavenges took ~10 ms every ~60 ms at 4 000 requests/s.
   */
  private listener: OutputListener | null = null;
  /** Outputs still queued for the listener are dropped (the client aborted the request). */
  private discardQueued = false;
  /** The row-level consumer (`listenRows`); null before it and once it was handed its last row (as `listener`). */
  private rowSink: RowSink | null = null;

  /**
   * @param requestId the engine request id.
   * @param promptTokens the submitted prompt's length in tokens (the prompt count until the engine reports one).
   * @param onAbandon called once when an unfinished stream is cancelled.
   * @param onSinkDone called once when the sink receives its last item (used to detach an AbortSignal listener).
   * @param delivery the queue push-mode hand-offs go through (the engine client's; absent: handed synchronously).
   */
  constructor(
    requestId: string,
    promptTokens: number,
    onAbandon: () => void,
    onSinkDone: () => void = () => {},
    private readonly delivery: DeliveryQueue | null = null,
  ) {
    this.requestId = requestId;
    this.promptTokens = promptTokens;
    this.onAbandon = onAbandon;
    this.onSinkDone = onSinkDone;
  }

  /** True once the request has received its last item (or was abandoned): cancelling it would abort nothing. */
  get finished(): boolean {
    return this.sinkDone;
  }

  /** The error the request ended with (a failure delivered to the sink), or null. */
  get failure(): Error | null {
    return this.failedWith;
  }

  /**
   * Sink: fill the row's token counts (see the class docs) and append it (terminal outputs end the sink). Returns
   * false when the output was not delivered because the sink already finished or the consumer is gone (section 2
   * "route").
   */
  deliver(row: EngineOutputRow): boolean {
    if (this.sinkDone) return false;
    this.completionTokens = row.completionTokens ?? this.completionTokens + row.newTokenIds.length;
    if (row.promptTokens !== null) this.promptTokens = row.promptTokens;
    if (row.cachedTokens !== null) this.cachedTokens = row.cachedTokens;
    if (this.mode === 'rows') {
      // Row mode: handed now, in the dispatcher's step (no output object, no queue).
      if (row.finishReason !== null) this.markSinkDone();
      this.handRow(row, this.promptTokens, this.completionTokens, this.cachedTokens);
      return true;
    }
    // A literal of fixed shape, not a spread of the row: one hidden class on the per-token path (issue 9). Each
    // field by its kind in protocols/types.ts `OUTPUT_ROW_FIELDS`: `id` and `row` by reference, `count` the stream's,
    // `optional` only when set (absent stays absent). A required field left out does not compile; an optional one
    // left out fails test/fronts/output-row-fields.test.ts.
    const output: EngineOutput = {
      requestId: row.requestId,
      newTokenIds: row.newTokenIds,
      finishReason: row.finishReason,
      logprobs: row.logprobs,
      promptTokens: this.promptTokens,
      completionTokens: this.completionTokens,
      cachedTokens: this.cachedTokens,
    };
    if (row.stopReason !== undefined) output.stopReason = row.stopReason;
    if (row.topLogprobs !== undefined) output.topLogprobs = row.topLogprobs;
    if (row.pooled !== undefined) output.pooled = row.pooled;
    if (output.finishReason !== null) this.markSinkDone();
    this.push(output);
    return true;
  }

  /**
   * Sink: deliver `error` as the last item (fail_all; section 6). Ignored when the sink already finished.
   * `discardQueued`: outputs not yet handed to a push-mode listener are dropped (an explicit abort), else the error
   * comes after them.
   */
  fail(error: Error, discardQueued = false): void {
    if (this.sinkDone) return;
    this.failedWith = error;
    this.discardQueued = discardQueued;
    this.markSinkDone();
    this.push(error);
  }

  /**
   * Sink: the entry was removed without a terminal output, so the reader gets a stream-closed error (SMG PR #2170).
   * `discardQueued` as for `fail` (true for an explicit abort, section 5).
   */
  closeWithoutTerminal(discardQueued = false): void {
    this.fail(streamClosedError(this.requestId), discardQueued);
  }

  /** `DeliveryTarget`: one hand-off of the client's sliced delivery reached its turn. */
  handQueued(item: Item): void {
    if (this.consumerDone) return;
    if (this.discardQueued && !(item instanceof Error)) return;
    this.hand(item);
  }

  /** Stream: abort if unfinished (section 5), end the stream for the reader. Idempotent. */
  cancel(): void {
    if (this.consumerDone) return;
    this.consumerDone = true;
    this.queue.length = 0;
    this.head = 0;
    const waiters = this.waiters.splice(0);
    for (const w of waiters) w.resolve(DONE);
    this.listener = null;
    this.rowSink = null;
    if (!this.sinkDone) {
      this.markSinkDone();
      this.onAbandon();
    }
  }

  /**
   * Push mode (see `RequestStream.listen`): buffered items go to `listener` now, later ones as they are delivered.
   * Throws Error when the stream already has a listener or an iterator is waiting on it (one consumer only).
   */
  listen(listener: OutputListener): void {
    const buffered = this.claimBuffered();
    this.mode = 'listen';
    this.listener = listener;
    for (const item of buffered) {
      if (this.consumerDone) return;
      this.hand(item);
    }
  }

  /**
   * Row mode (see `RequestStream.listenRows`): buffered items go to `sink` now, later rows as they are delivered.
   * Throws Error when the stream already has a consumer.
   */
  listenRows(sink: RowSink): void {
    const buffered = this.claimBuffered();
    this.mode = 'rows';
    this.rowSink = sink;
    for (const item of buffered) {
      if (this.consumerDone) return;
      if (item instanceof Error) this.handRowError(item);
      else this.handRow(item, item.promptTokens, item.completionTokens, item.cachedTokens);
    }
  }

  /**
   * For a push-mode consumer taking over: throws Error when the stream already has a consumer (a listener, a row
   * sink, or an iterator waiting on it); else empties the buffer and returns what it held (nothing once cancelled).
   */
  private claimBuffered(): Item[] {
    if (this.mode !== 'iterate' || this.waiters.length > 0)
      throw new Error(`request ${this.requestId}: its stream already has a consumer`);
    const buffered = this.queue.slice(this.head);
    this.queue.length = 0;
    this.head = 0;
    return buffered;
  }

  /** The stream is its own (single-consumer) iterator. */
  [Symbol.asyncIterator](): AsyncIterator<EngineOutput> {
    if (this.mode !== 'iterate') throw new Error(`request ${this.requestId}: a listened stream cannot be iterated`);
    return this;
  }

  /** Iterator: next output, the failure (thrown once), or done. */
  next(): Promise<IteratorResult<EngineOutput>> {
    if (this.head < this.queue.length) {
      try {
        return Promise.resolve(this.take());
      } catch (err) {
        return Promise.reject(err);
      }
    }
    if (this.sinkDone || this.consumerDone) {
      this.consumerDone = true;
      return Promise.resolve(DONE);
    }
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  /** Iterator: the consumer stops early (`break` in `for await`) → `cancel()`. */
  return(): Promise<IteratorResult<EngineOutput>> {
    this.cancel();
    return Promise.resolve(DONE);
  }

  private take(): IteratorResult<EngineOutput> {
    if (this.head >= this.queue.length) {
      this.consumerDone = this.consumerDone || this.sinkDone;
      return DONE;
    }
    const item = this.queue[this.head];
    this.head++;
    if (this.head === this.queue.length) {
      this.queue.length = 0;
      this.head = 0;
    }
    if (item instanceof Error) throw item;
    return { done: false, value: item };
  }

  private push(item: Item): void {
    if (this.consumerDone) return;
    if (this.mode === 'rows') {
      // Row mode hands rows in `deliver`; what reaches here is the error that ends the stream.
      if (item instanceof Error) this.handRowError(item);
      return;
    }
    if (this.mode === 'listen') {
      if (this.delivery !== null) this.delivery.push(this, item);
      else this.hand(item);
      return;
    }
    const waiter = this.waiters.shift();
    if (waiter) {
      if (item instanceof Error) waiter.reject(item);
      else waiter.resolve({ done: false, value: item });
      if (this.sinkDone) {
        // Further concurrent readers see the end.
        for (const w of this.waiters.splice(0)) w.resolve(DONE);
      }
      return;
    }
    this.queue.push(item);
  }

  /**
   * Give one item to the push-mode listener (nothing once it was let go); the last item (an Error or a terminal
   * output) lets go of it. A listener that throws broke its contract: warn, cancel.
   */
  private hand(item: Item): void {
    const listener = this.listener;
    if (listener === null) return;
    const last = item instanceof Error || item.finishReason !== null;
    if (last) this.listener = null;
    try {
      if (item instanceof Error) listener.error(item);
      else listener.output(item);
    } catch (err) {
      process.emitWarning(
        `a RequestStream listener of request ${this.requestId} threw: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`,
      );
      this.cancel();
    }
  }

  /** Give one row to the row sink (nothing once the consumer is gone); a sink that throws: warn, cancel. */
  private handRow(row: EngineOutputBase, promptTokens: number, completionTokens: number, cachedTokens: number): void {
    const sink = this.rowSink;
    if (this.consumerDone || sink === null) return;
    if (row.finishReason !== null) this.rowSink = null;
    try {
      sink.row(row, promptTokens, completionTokens, cachedTokens);
    } catch (err) {
      this.sinkThrew(err);
    }
  }

  private handRowError(error: Error): void {
    const sink = this.rowSink;
    if (sink === null) return;
    this.rowSink = null;
    try {
      sink.error(error);
    } catch (err) {
      this.sinkThrew(err);
    }
  }

  private sinkThrew(err: unknown): void {
    process.emitWarning(
      `a RequestStream row sink of request ${this.requestId} threw: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`,
    );
    this.cancel();
  }

  private markSinkDone(): void {
    this.sinkDone = true;
    this.onSinkDone();
  }
}
