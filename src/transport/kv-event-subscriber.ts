/**
 * One DP rank's KV-event subscriber (docs/reference/kv-events.md; issue 29 part 1): a SUB socket dialled to the rank's
 * PUB endpoint and, when the rank has one, a DEALER dialled to its replay ROUTER. Messages are decoded
 * (../protocols/kv-events/codec.ts) and ordered by a `KvEventSequencer`, whose effects go to the caller's `sink`: the
 * batches to apply in order, a reset when the publisher restarted, and whether the rank's index is complete (`sure`).
 *
 * Its own sockets and receive loops, apart from the engine link's: nothing here waits on, or is waited on by, the
 * rank's request and output path. A frame that does not decode, or comes with another topic, is counted and logged
 * (at most one line per `LOG_INTERVAL_MS` per kind, with the count), never thrown; it leaves the index unsure, since
 * the batch it carried is lost. Receive queues are raised (`receiveHighWaterMark`): a full SUB queue silently loses
 * batches, and a replay DEALER at libzmq's default of 1000 lost hundreds of replies and the end marker in the spec's
 * probe; the replay DEALER's should exceed the engine's `buffer_steps` (10 000 by default).
 */
import { Dealer, Subscriber } from 'zeromq';
import type { Logger } from 'pino';
import { LogThrottle } from '../collections/log-throttle.js';
import {
  decodeKvEventMessage,
  decodeReplayMessage,
  encodeReplayRequest,
  type KvEventBatch,
} from '../protocols/kv-events/codec.js';
import { errorMessage } from './describe.js';
import { KvEventSequencer, type KvSequencerEffect } from './kv-event-sequencer.js';

/** Where the subscriber's effects go (the group's exact index). Called synchronously, in order. */
export interface KvEventSink {
  /** Apply `batch`, the next batch of `rank` in seq order. */
  apply(rank: number, batch: KvEventBatch): void;
  /** The rank's publisher restarted: forget what the index holds for it. */
  reset(rank: number): void;
  /** Whether the rank's index is complete (`false`: score the rank by the approximate index), and why not. */
  sureness(rank: number, sure: boolean, reason: string | null): void;
}

export interface KvEventSubscriberOptions {
  /** The DP rank (engine index) whose stream this is. */
  readonly rank: number;
  /** The address to dial for the rank's events (`tcp://host:port`, already offset for the rank). */
  readonly eventsAddress: string;
  /** The address of the rank's replay ROUTER, or null when the engine has none. */
  readonly replayAddress: string | null;
  /** The topic the engine publishes under (its `topic`, default ''); other topics are counted and dropped. */
  readonly topic: string;
  readonly sink: KvEventSink;
  readonly logger: Logger;
  /** Receive queue of both sockets, in messages (default 100 000; the replay one must exceed `buffer_steps`). */
  readonly receiveHighWaterMark?: number;
  /** How long a replay may take before what it has not brought counts as lost (ms; default 5 000). */
  readonly replayTimeoutMs?: number;
  /** Counters to add to (several subscribers may share one, e.g. a group's); default: the subscriber's own. */
  readonly counters?: KvEventSubscriberCounters;
  /** Timers, for tests. */
  readonly setTimer?: (fn: () => void, ms: number) => { unref?(): unknown };
  readonly clearTimer?: (timer: unknown) => void;
}

/** Counters of one subscriber (never reset). */
export interface KvEventSubscriberCounters {
  batches: number;
  badFrames: number;
  otherTopics: number;
  replays: number;
  replayFailures: number;
}

const LOG_INTERVAL_MS = 10_000;
/** Longest run of received messages handled before the receive loop yields to the event loop (ms). */
const SLICE_MS = 4;
const DEFAULT_HWM = 100_000;
const DEFAULT_REPLAY_TIMEOUT_MS = 5_000;

/** Zeroed `KvEventSubscriberCounters`. */
export function newKvEventSubscriberCounters(): KvEventSubscriberCounters {
  return { batches: 0, badFrames: 0, otherTopics: 0, replays: 0, replayFailures: 0 };
}

export class KvEventSubscriber {
  readonly counters: KvEventSubscriberCounters;
  private readonly opts: KvEventSubscriberOptions;
  private readonly sub: Subscriber;
  private readonly dealer: Dealer | null;
  private readonly sequencer: KvEventSequencer;
  private readonly badFrameLog = new LogThrottle(LOG_INTERVAL_MS);
  private readonly otherTopicLog = new LogThrottle(LOG_INTERVAL_MS);
  private replayTimer: unknown = null;
  private closed = false;
  private readonly loops: Promise<void>[] = [];

  /** Creates the sockets and dials; messages flow once `start` runs the receive loops. */
  constructor(opts: KvEventSubscriberOptions) {
    this.opts = opts;
    this.counters = opts.counters ?? newKvEventSubscriberCounters();
    const hwm = opts.receiveHighWaterMark ?? DEFAULT_HWM;
    this.sub = new Subscriber({ linger: 0, receiveHighWaterMark: hwm });
    this.sub.subscribe(opts.topic);
    // What the rank published before this socket's subscription reached it is only in its replay ring. Observed
    // before connecting: a connection made before the socket monitor starts is never reported.
    this.sub.events.on('connect', () => {
      if (!this.closed) this.perform(this.sequencer.connected());
    });
    this.sub.connect(opts.eventsAddress);
    this.dealer = opts.replayAddress === null ? null : new Dealer({ linger: 0, receiveHighWaterMark: hwm });
    this.dealer?.connect(opts.replayAddress!);
    this.sequencer = new KvEventSequencer({ replay: this.dealer !== null });
  }

  /** Runs the receive loops until `close`. */
  start(): void {
    this.loops.push(this.receiveLive());
    if (this.dealer !== null) this.loops.push(this.receiveReplay(this.dealer));
  }

  /** Whether a replay is running (its reply not ended, failed or timed out yet). */
  get replayRunning(): boolean {
    return this.sequencer.replayRunning;
  }

  /** Whether the rank's index is complete so far. */
  get indexSure(): boolean {
    return this.sequencer.indexSure;
  }

  /** Closes both sockets and waits for the loops to end. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.stopReplayTimer();
    this.sub.close();
    this.dealer?.close();
    await Promise.allSettled(this.loops);
  }

  private async receiveLive(): Promise<void> {
    try {
      let sliceStart = performance.now();
      for await (const frames of this.sub) {
        this.onLive(frames);
        // A flood (a hostile or broken publisher) must not starve the event loop, where requests and outputs run:
        // after each slice of work, let everything else that waits run once.
        if (performance.now() - sliceStart > SLICE_MS) {
          await new Promise<void>((resolve) => setImmediate(resolve));
          sliceStart = performance.now();
        }
      }
    } catch (err) {
      if (!this.closed) this.opts.logger.warn({ err: errorMessage(err) }, 'KV-event SUB socket failed');
    }
  }

  private async receiveReplay(dealer: Dealer): Promise<void> {
    try {
      for await (const frames of dealer) this.onReplay(frames);
    } catch (err) {
      if (!this.closed) this.opts.logger.warn({ err: errorMessage(err) }, 'KV-event replay socket failed');
    }
  }

  private onLive(frames: Buffer[]): void {
    const message = this.decoded(() => decodeKvEventMessage(frames), 'a KV-event message did not decode');
    if (message === undefined) return;
    // SUBSCRIBE is a prefix match: `kv-events-2` passes a `kv-events` filter.
    if (message.topic !== this.opts.topic) {
      this.counters.otherTopics++;
      const verdict = this.otherTopicLog.note(Date.now());
      if (verdict.log) {
        this.opts.logger.warn(
          { rank: this.opts.rank, topic: message.topic, count: verdict.count },
          'KV-event message with another topic dropped',
        );
      }
      return;
    }
    this.counters.batches++;
    this.perform(this.sequencer.live(message.seq, message.batch));
  }

  private onReplay(frames: Buffer[]): void {
    if (!this.sequencer.replayRunning) return; // a late reply to a replay given up
    const message = this.decoded(() => decodeReplayMessage(frames), 'a KV-event replay message did not decode');
    if (message === undefined) return;
    if (message.kind === 'end') {
      this.stopReplayTimer();
      this.perform(this.sequencer.replayEnd());
    } else {
      this.perform(this.sequencer.replayBatch(message.seq, message.batch));
    }
  }

  /** `decode()`'s value, or undefined after `badFrame` when it throws. */
  private decoded<T>(decode: () => T, what: string): T | undefined {
    try {
      return decode();
    } catch (err) {
      this.badFrame(what, err);
      return undefined;
    }
  }

  /** A lost batch: counted, logged (throttled), and the index can no longer be complete. */
  private badFrame(what: string, err: unknown): void {
    this.counters.badFrames++;
    const verdict = this.badFrameLog.note(Date.now());
    if (verdict.log) {
      this.opts.logger.warn({ rank: this.opts.rank, err: errorMessage(err), count: verdict.count }, what);
    }
    this.opts.sink.sureness(this.opts.rank, false, what);
  }

  private perform(effects: KvSequencerEffect[]): void {
    const { sink, rank } = this.opts;
    for (const e of effects) {
      switch (e.kind) {
        case 'apply':
          sink.apply(rank, e.batch);
          break;
        case 'reset':
          sink.reset(rank);
          break;
        case 'replay':
          this.requestReplay(e.from);
          break;
        case 'unsure':
          sink.sureness(rank, false, e.reason);
          break;
        case 'sure':
          sink.sureness(rank, true, null);
          break;
      }
    }
  }

  private requestReplay(from: bigint): void {
    this.counters.replays++;
    const setTimer = this.opts.setTimer ?? ((fn, ms) => setTimeout(fn, ms));
    const timer = setTimer(() => {
      this.replayTimer = null;
      this.counters.replayFailures++;
      this.perform(this.sequencer.replayFailed('no end marker in time'));
    }, this.opts.replayTimeoutMs ?? DEFAULT_REPLAY_TIMEOUT_MS);
    timer.unref?.();
    this.replayTimer = timer;
    this.dealer!.send(encodeReplayRequest(from)).catch((err: unknown) => {
      this.stopReplayTimer();
      this.counters.replayFailures++;
      this.perform(this.sequencer.replayFailed(errorMessage(err)));
    });
  }

  private stopReplayTimer(): void {
    if (this.replayTimer === null) return;
    (this.opts.clearTimer ?? ((t) => clearTimeout(t as NodeJS.Timeout)))(this.replayTimer);
    this.replayTimer = null;
  }
}
