/**
 * Per-tick batching of channel records (docs/architecture.md section 4 step 2): records pushed during one event-loop
 * turn leave as one message per peer, flushed from `setImmediate`; while a send is in flight (zeromq.js allows one
 * send at a time per socket) new records gather and leave together after it, so a busy process sends fewer, larger
 * messages. Unbounded by design on the record side: what a peer is owed is bounded by its requests' token limits, and
 * the socket's high-water mark bounds what zeromq queues.
 */

/**
 * Records for several peers (keyed by `K`), sent by `send(key, records)` one message at a time. `onError` hears a
 * failed send (the records of that message are dropped: a peer that cannot be reached has gone away).
 */
export class Outbox<K, R> {
  private buffers = new Map<K, R[]>();
  private scheduled = false;
  private sending = false;
  private closed = false;

  constructor(
    private readonly send: (key: K, records: R[]) => Promise<void>,
    private readonly onError: (key: K, err: unknown) => void,
  ) {}

  /** Queue `record` for `key`; it leaves at the end of this event-loop turn (or after the send in flight). */
  push(key: K, record: R): void {
    if (this.closed) return;
    let buf = this.buffers.get(key);
    if (buf === undefined) {
      buf = [];
      this.buffers.set(key, buf);
    }
    buf.push(record);
    this.schedule();
  }

  /** Drop what is queued for `key` (the peer is gone). */
  forget(key: K): void {
    this.buffers.delete(key);
  }

  /** Stop sending; queued records are dropped. */
  close(): void {
    this.closed = true;
    this.buffers.clear();
  }

  private schedule(): void {
    if (this.scheduled || this.sending) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      void this.flush();
    });
  }

  private async flush(): Promise<void> {
    if (this.sending || this.closed) return;
    this.sending = true;
    try {
      while (this.buffers.size > 0 && !this.closed) {
        const batch = this.buffers;
        this.buffers = new Map();
        for (const [key, records] of batch) {
          try {
            await this.send(key, records);
          } catch (err) {
            this.onError(key, err);
          }
        }
      }
    } finally {
      this.sending = false;
    }
  }
}
