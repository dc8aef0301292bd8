/**
 * A single-consumer async queue with a soft capacity: the producer of data messages waits for space (back-pressure,
 * engine-wire.md 1.8: the output loop feeds the dispatcher through a bounded queue of 256 messages), while control
 * messages (monitor events) are pushed regardless.
 */

/** Default capacity of the output queue, in messages (engine-wire.md 1.8). */
export const OUTPUT_QUEUE_CAPACITY = 256;

/**
 * FIFO of `T` read by one async iterator. `push` never blocks; `waitForSpace()` resolves when fewer than
 * `capacity` items are buffered (or the queue ended). `end()` stops the iterator after the buffered items;
 * `abort()` stops it at once, dropping them.
 */
export class MessageQueue<T> {
  private readonly items: T[] = [];
  private ended = false;
  private iterated = false;
  private dataWaiter: (() => void) | null = null;
  private spaceWaiter: (() => void) | null = null;

  constructor(private readonly capacity: number = OUTPUT_QUEUE_CAPACITY) {}

  /** Buffered items not yet consumed. */
  get size(): number {
    return this.items.length;
  }

  /** True after `end()` or `abort()`. */
  get isEnded(): boolean {
    return this.ended;
  }

  /** Appends an item (ignored after the queue ended). */
  push(item: T): void {
    if (this.ended) return;
    this.items.push(item);
    this.wakeConsumer();
  }

  /** Resolves once the queue holds fewer than `capacity` items, or has ended. */
  waitForSpace(): Promise<void> {
    if (this.items.length < this.capacity || this.ended) return Promise.resolve();
    return new Promise((resolve) => {
      this.spaceWaiter = resolve;
    });
  }

  /** No more items: the iterator finishes after delivering what is buffered. Idempotent. */
  end(): void {
    this.ended = true;
    this.wakeConsumer();
    this.wakeProducer();
  }

  /** Ends the queue and drops everything buffered. Idempotent. */
  abort(): void {
    this.items.length = 0;
    this.end();
  }

  /**
   * The one consumer. Throws Error when called a second time (two readers would split the stream).
   * Returning early (break) leaves the queue as is: the producer simply stops at capacity.
   */
  async *consume(): AsyncGenerator<T, void, undefined> {
    if (this.iterated) throw new Error('this message stream can be iterated only once');
    this.iterated = true;
    for (;;) {
      if (this.items.length > 0) {
        const item = this.items.shift() as T;
        this.wakeProducer();
        yield item;
        continue;
      }
      if (this.ended) return;
      await new Promise<void>((resolve) => {
        this.dataWaiter = resolve;
      });
    }
  }

  private wakeConsumer(): void {
    const waiter = this.dataWaiter;
    this.dataWaiter = null;
    waiter?.();
  }

  private wakeProducer(): void {
    if (this.items.length >= this.capacity && !this.ended) return;
    const waiter = this.spaceWaiter;
    this.spaceWaiter = null;
    waiter?.();
  }
}
