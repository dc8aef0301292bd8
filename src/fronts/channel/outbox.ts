/**
 * Per-tick batching of channel records (docs/workers.md section 4 step 2): records pushed during one event-loop
 * turn leave as one message per peer, flushed from `setImmediate`.
 * - `UpOutbox` (a front → its router): one open message, encoded as records are pushed, written with the turn's
 *   other messages (if the records passed `MAX_FRONT_MESSAGE_BYTES`) in one socket write at the end of the turn.
 * - `FrontOutboxes` (the router → every front): one lane per front, encoded as records are appended, sent without
 *   ever waiting, so one front that stopped reading delays no other (see the class).
 */
import { performance } from 'node:perf_hooks';
import { DownMessage, UpMessage } from './messages.js';
import type { DownRecord, UpRecord } from './records.js';
import { MAX_FRONT_MESSAGE_BYTES } from './frames.js';
import { MessageSlab } from './message-slab.js';

/**
 * The initial capacity (bytes) of a lane's next message after one of `lastBytes` when the last hint was `previous`:
 * half as much again, so a turn a little busier than the last does not grow (copy) its buffer, and falling by at
 * most a tenth per message, so a small message between two large ones (a turn with only a SUBMITTED, between two
 * batches) does not make the next large one grow from 1 KiB again; at least 1 KiB and at most `maxBytes` (issue 9:
 * the growth copies were ~0.1–0.2 µs per streamed token in the router).
 */
export function nextSizeHint(lastBytes: number, previous: number, maxBytes: number): number {
  return Math.min(maxBytes, Math.max(1024, Math.ceil(lastBytes * 1.5), Math.floor(previous * 0.9)));
}

/**
 * A front's records for its router (issue 9, the fronts' CPU per request): `push` encodes a record into this turn's
 * message at once; at the end of the turn (`setImmediate`) `write` gets every message of the turn — one, unless the
 * records passed `maxMessageBytes` — to write as one. `write` must not wait (the front's socket buffers; the front
 * bounds what it buffers, remote-backend.ts). What a front owes the router is bounded by its requests.
 */
export class UpOutbox {
  private open: UpMessage | null = null;
  private sealed: Uint8Array[] = [];
  private scheduled = false;
  private closed = false;
  private sizeHint = 1024;
  /** Messages handed to `write` so far (for tests and logs). */
  messages = 0;

  constructor(
    private readonly write: (messages: Uint8Array[]) => void,
    private readonly maxMessageBytes = MAX_FRONT_MESSAGE_BYTES,
  ) {}

  /**
   * Queue `record`; it leaves at the end of this event-loop turn. Throws `ChannelRecordTooLarge` (queueing nothing)
   * for a record longer than `maxMessageBytes` on its own. A no-op once closed.
   */
  push(record: UpRecord): void {
    if (this.closed) return;
    let m = this.open;
    if (m === null) m = this.open = new UpMessage(this.sizeHint);
    if (!m.push(record, this.maxMessageBytes)) {
      this.seal();
      m = this.open = new UpMessage(this.sizeHint);
      m.push(record, this.maxMessageBytes);
    }
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.flush());
    }
  }

  /** Stop sending; queued records are dropped. */
  close(): void {
    this.closed = true;
    this.open = null;
    this.sealed = [];
  }

  private seal(): void {
    const m = this.open;
    if (m === null || m.count === 0) return;
    this.open = null;
    const bytes = m.finish();
    this.sizeHint = nextSizeHint(bytes.length, this.sizeHint, 256 * 1024);
    this.sealed.push(bytes);
  }

  private flush(): void {
    this.scheduled = false;
    if (this.closed) return;
    this.seal();
    const out = this.sealed;
    if (out.length === 0) return;
    this.sealed = [];
    this.messages += out.length;
    this.write(out);
  }
}

/** Options of `FrontOutboxes`. */
export interface FrontOutboxesOptions {
  /** A front whose messages are refused (its queue full) this long without one accepted is stuck, ms (default 5000). */
  stuckAfterMs?: number;
  /** A front holding more than this many encoded bytes not yet accepted is stuck (default 64 MiB). */
  maxQueuedBytes?: number;
  /** Monotonic clock, ms (default `performance.now`). */
  now?: () => number;
  /**
   * Flow control (see the class): `onPressure(true)` once some lane holds more than `highWaterBytes` not yet accepted
   * (default `PRESSURE_HIGH_BYTES`), `onPressure(false)` once every lane holding is back to `lowWaterBytes` or less
   * (default `PRESSURE_LOW_BYTES`) or gone. Default: none (lanes only grow to `maxQueuedBytes`).
   */
  onPressure?: (paused: boolean) => void;
  highWaterBytes?: number;
  lowWaterBytes?: number;
  /**
   * Longest one pressure may last, ms (default `MAX_PRESSURE_MS`): then the lanes holding it let go (a warning through
   * `onPressureTimeout`) until they are back under `lowWaterBytes`, and are left to `maxQueuedBytes` and `stuckAfterMs`.
   */
  maxPressureMs?: number;
  onPressureTimeout?: (keys: number[]) => void;
}

/** One front's outbox (`FrontOutboxes.open`). */
export interface FrontLane {
  readonly key: number;
  /** The open message (this turn's records, and earlier ones while the front is behind), or null. */
  message: DownMessage | null;
  /** Queued for this turn's flush. */
  dirty: boolean;
  /** Finished messages not yet accepted by the socket, oldest first. */
  readonly queue: Uint8Array[];
  queuedBytes: number;
  sending: boolean;
  /** When the oldest message was first refused (ms), or null. */
  refusedSince: number | null;
  retryMs: number;
  retryTimer: NodeJS.Timeout | null;
  /** Stuck (reported) or forgotten: nothing more is sent. */
  closed: boolean;
  /** Capacity for the next message, bytes (`nextSizeHint`). */
  sizeHint: number;
  /** Where the lane's messages are carved from (one message is built at a time per lane). */
  readonly slab: MessageSlab;
  /**
   * Flow control: `none`; `holding` (went over the high-water mark and is not yet back under the low one: the
   * pressure is on); `released` (held it for `maxPressureMs`; holds nothing until back under the low-water mark).
   */
  pressure: 'none' | 'holding' | 'released';
}

const RETRY_FIRST_MS = 1;
const RETRY_MAX_MS = 16;
/** While a lane waits for its front, this turn's records join the open message up to this size (bytes). */
export const MAX_MERGED_MESSAGE_BYTES = 256 * 1024;
/**
 * Flow control's high-water mark, bytes a lane holds not yet accepted by its socket (above the socket's own
 * `DOWN_HIGH_WATER_BYTES`, 4 MiB, router-service.ts). 8 MiB: hundreds of ms of a front's reading (a front reads a
 * few MB/s of rows), so a front that is late for a turn or a GC pause does not stop the engines, and an eighth of
 * the 64 MiB hard bound, so what still arrives once the receive is paused (up to 256 output messages already
 * received, zmq-link.ts, and the batch in hand) stays far from it.
 */
export const PRESSURE_HIGH_BYTES = 8 * 1024 * 1024;
/**
 * Flow control's low-water mark, bytes: the pressure ends once every lane holds this or less. With the socket's
 * 4 MiB still unread, a front has several MB to read while the engines' next batches arrive, and one pause covers
 * 6 MiB of the front's reading rather than one message (no flapping).
 */
export const PRESSURE_LOW_BYTES = 2 * 1024 * 1024;
/**
 * Longest one pressure lasts, ms. A paused router hears nothing from the engines, and the engine client's watchdogs
 * count handled batches (a ready rank holding requests and silent for 60 s is stalled, client.ts
 * `DEFAULT_RANK_STALL_TIMEOUT_MS`; 300 s is the silence watchdog, dp-routing.md section 6); a healthy front drains
 * 6 MiB in a second or two. The cluster lowers it to a third of the configured stall timeout.
 */
export const MAX_PRESSURE_MS = 10_000;

function isRefusal(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === 'EAGAIN';
}

/**
 * The router's outboxes, one lane per front (docs/workers.md sections 4 and 6; issue 9): the records of one
 * event-loop turn for a front are one `DownMessage`, written as they are appended (an OUT row straight to bytes) and
 * flushed at the end of the turn. Fronts are independent: `send` must never wait (router-service.ts refuses a
 * front whose frame socket holds too much with an immediate `EAGAIN`). A refused message stays first in its lane and is retried with a
 * backoff (1 ms doubling to 16 ms) while every other front keeps being served; meanwhile the lane's new records keep
 * joining one open message (up to `MAX_MERGED_MESSAGE_BYTES`), so a front that fell behind gets fewer, larger
 * messages. A lane whose messages are refused for `stuckAfterMs`, that holds more than `maxQueuedBytes`, or whose
 * send fails otherwise (EHOSTUNREACH) is reported once through `onStuck` and sends nothing more; the primary kills
 * that front. So no lane grows without bound and a stuck front delays no other.
 *
 * Flow control (`onPressure`; the router pauses the engines' output receive with it, cluster.ts and
 * transport/output-gate.ts): a front that reads, but slower than the engines produce, would otherwise grow its lane to
 * `maxQueuedBytes` and be killed with all its streams. Once a lane holds more than `highWaterBytes` the pressure is
 * on (`onPressure(true)`); it is off (`onPressure(false)`) once every lane that went over is back to `lowWaterBytes`
 * or less, or dropped (`forget`, stuck, `close`): a gone front never keeps it on. Each change happens in the same
 * synchronous step as the byte count that caused it. A pressure that lasts `maxPressureMs` lets go of the lanes
 * holding it (`onPressureTimeout`): they hold nothing until they are back under the low-water mark, so a front
 * reading at a trickle cannot keep the engines unheard until their watchdogs fire; such a lane is left to the hard
 * bound and the refused-sends clock.
 */
export class FrontOutboxes {
  private readonly lanes = new Map<number, FrontLane>();
  private dirty: FrontLane[] = [];
  private scheduled = false;
  private closed = false;
  private readonly stuckAfterMs: number;
  private readonly maxQueuedBytes: number;
  private readonly now: () => number;
  private readonly highWaterBytes: number;
  private readonly lowWaterBytes: number;
  private readonly maxPressureMs: number;
  private readonly onPressure: ((paused: boolean) => void) | null;
  private readonly onPressureTimeout: ((keys: number[]) => void) | null;
  /** Lanes whose `pressure` is `holding`. */
  private holding = 0;
  private pressureTimer: NodeJS.Timeout | null = null;
  private pressureSince = 0;
  /** Flow control so far: times the pressure came on, ms it lasted (ended pressures), times it timed out. */
  readonly pressureStats = { pauses: 0, pausedMs: 0, timeouts: 0 };

  /** Throws RangeError unless 0 ≤ `lowWaterBytes` < `highWaterBytes` and `maxPressureMs` > 0. */
  constructor(
    private readonly send: (key: number, message: Uint8Array) => Promise<void>,
    private readonly onStuck: (key: number, err: unknown) => void,
    opts: FrontOutboxesOptions = {},
  ) {
    this.stuckAfterMs = opts.stuckAfterMs ?? 5000;
    this.maxQueuedBytes = opts.maxQueuedBytes ?? 64 * 1024 * 1024;
    this.now = opts.now ?? (() => performance.now());
    this.highWaterBytes = opts.highWaterBytes ?? PRESSURE_HIGH_BYTES;
    this.lowWaterBytes = opts.lowWaterBytes ?? PRESSURE_LOW_BYTES;
    this.maxPressureMs = opts.maxPressureMs ?? MAX_PRESSURE_MS;
    this.onPressure = opts.onPressure ?? null;
    this.onPressureTimeout = opts.onPressureTimeout ?? null;
    if (!(this.lowWaterBytes >= 0 && this.lowWaterBytes < this.highWaterBytes)) {
      throw new RangeError(
        `lowWaterBytes (${this.lowWaterBytes}) must be ≥ 0 and below highWaterBytes (${this.highWaterBytes})`,
      );
    }
    if (!(this.maxPressureMs > 0)) throw new RangeError(`maxPressureMs must be > 0, got ${this.maxPressureMs}`);
  }

  /** True while the pressure is on (some lane holds it). */
  get pressured(): boolean {
    return this.holding > 0;
  }

  /** The lane of front `key` (a new, empty one replaces any old lane of that key). */
  open(key: number): FrontLane {
    this.forget(key);
    const lane: FrontLane = {
      key,
      message: null,
      dirty: false,
      queue: [],
      queuedBytes: 0,
      sending: false,
      refusedSince: null,
      retryMs: RETRY_FIRST_MS,
      retryTimer: null,
      closed: this.closed,
      sizeHint: 1024,
      slab: new MessageSlab(),
      pressure: 'none',
    };
    this.lanes.set(key, lane);
    return lane;
  }

  /** This turn's message of `lane`, to append records to; it leaves at the end of the turn. */
  message(lane: FrontLane): DownMessage {
    let m = lane.message;
    if (m === null) m = lane.message = new DownMessage(lane.sizeHint, lane.slab);
    if (!lane.dirty) {
      lane.dirty = true;
      this.dirty.push(lane);
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.flush());
      }
    }
    return m;
  }

  /** Append one record for front `key` (no-op for an unknown key). */
  push(key: number, record: DownRecord): void {
    const lane = this.lanes.get(key);
    if (lane !== undefined && !lane.closed) this.message(lane).push(record);
  }

  /** Encoded bytes of `key` not yet accepted by the socket (for tests and logs). */
  queuedBytes(key: number): number {
    return this.lanes.get(key)?.queuedBytes ?? 0;
  }

  /** Drop front `key`'s lane and everything queued in it (the front is gone). */
  forget(key: number): void {
    const lane = this.lanes.get(key);
    if (lane === undefined) return;
    this.lanes.delete(key);
    this.shut(lane);
  }

  /** Stop sending; queued records are dropped. */
  close(): void {
    this.closed = true;
    for (const lane of this.lanes.values()) this.shut(lane);
    this.lanes.clear();
  }

  private shut(lane: FrontLane): void {
    lane.closed = true;
    lane.message = null;
    lane.queue.length = 0;
    lane.queuedBytes = 0;
    if (lane.retryTimer !== null) clearTimeout(lane.retryTimer);
    lane.retryTimer = null;
    this.ease(lane);
  }

  /** After `lane.queuedBytes` grew: the pressure comes on when it passed the high-water mark. */
  private press(lane: FrontLane): void {
    if (this.onPressure === null || lane.pressure !== 'none' || lane.queuedBytes <= this.highWaterBytes) return;
    lane.pressure = 'holding';
    if (this.holding++ > 0) return;
    this.pressureStats.pauses++;
    this.pressureSince = this.now();
    this.pressureTimer = setTimeout(() => this.pressureTimedOut(), this.maxPressureMs);
    this.pressureTimer.unref();
    this.onPressure(true);
  }

  /** After `lane.queuedBytes` fell (or the lane closed): it stops holding once at the low-water mark or below. */
  private ease(lane: FrontLane): void {
    if (lane.pressure === 'none' || lane.queuedBytes > this.lowWaterBytes) return;
    const held = lane.pressure === 'holding';
    lane.pressure = 'none';
    if (held && --this.holding === 0) this.endPressure();
  }

  private endPressure(): void {
    if (this.pressureTimer !== null) clearTimeout(this.pressureTimer);
    this.pressureTimer = null;
    this.pressureStats.pausedMs += this.now() - this.pressureSince;
    this.onPressure?.(false);
  }

  /** The pressure lasted `maxPressureMs`: every lane holding it lets go (see the class). */
  private pressureTimedOut(): void {
    this.pressureTimer = null;
    if (this.holding === 0) return;
    const keys: number[] = [];
    for (const lane of this.lanes.values()) {
      if (lane.pressure !== 'holding') continue;
      lane.pressure = 'released';
      keys.push(lane.key);
    }
    this.holding = 0;
    this.pressureStats.timeouts++;
    this.onPressureTimeout?.(keys);
    this.endPressure();
  }

  private flush(): void {
    this.scheduled = false;
    const dirty = this.dirty;
    this.dirty = [];
    for (const lane of dirty) {
      lane.dirty = false;
      if (lane.closed || lane.message === null) continue;
      // A lane waiting for its front keeps its open message open (the records merge) until it is large.
      if (lane.queue.length > 0 && lane.message.byteLength < MAX_MERGED_MESSAGE_BYTES) continue;
      this.seal(lane);
      if (!lane.closed) this.pump(lane);
    }
  }

  /** Move the lane's open message to its queue. */
  private seal(lane: FrontLane): void {
    const m = lane.message;
    if (m === null) return;
    lane.message = null;
    const bytes = m.finish();
    lane.sizeHint = nextSizeHint(bytes.length, lane.sizeHint, MAX_MERGED_MESSAGE_BYTES);
    lane.queue.push(bytes);
    lane.queuedBytes += bytes.length;
    if (lane.queuedBytes > this.maxQueuedBytes) {
      this.stuck(
        lane,
        new Error(
          `front ${lane.key} holds ${lane.queuedBytes} bytes not taken by its socket (limit ${this.maxQueuedBytes})`,
        ),
      );
      return;
    }
    this.press(lane);
  }

  private pump(lane: FrontLane): void {
    if (lane.sending || lane.closed || lane.retryTimer !== null) return;
    if (lane.queue.length === 0) {
      // Caught up: what gathered in the open message while the front was behind leaves now.
      if (lane.message === null || lane.dirty) return;
      this.seal(lane);
      if (lane.closed) return;
    }
    lane.sending = true;
    const bytes = lane.queue[0]!;
    this.send(lane.key, bytes).then(
      () => {
        lane.sending = false;
        if (lane.closed) return;
        lane.queue.shift();
        lane.queuedBytes -= bytes.length;
        this.ease(lane);
        lane.refusedSince = null;
        lane.retryMs = RETRY_FIRST_MS;
        this.pump(lane);
      },
      (err: unknown) => {
        lane.sending = false;
        if (lane.closed) return;
        if (!isRefusal(err)) {
          this.stuck(lane, err);
          return;
        }
        const now = this.now();
        lane.refusedSince ??= now;
        if (now - lane.refusedSince >= this.stuckAfterMs) {
          this.stuck(
            lane,
            new Error(
              `front ${lane.key} took no message for ${Math.round(now - lane.refusedSince)} ms (its queue is full: it stopped reading)`,
              { cause: err },
            ),
          );
          return;
        }
        lane.retryTimer = setTimeout(() => {
          lane.retryTimer = null;
          this.pump(lane);
        }, lane.retryMs);
        lane.retryMs = Math.min(RETRY_MAX_MS, lane.retryMs * 2);
      },
    );
  }

  private stuck(lane: FrontLane, err: unknown): void {
    if (lane.closed) return;
    this.shut(lane);
    if (!this.closed) this.onStuck(lane.key, err);
  }
}
