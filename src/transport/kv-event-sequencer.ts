/**
 * The order of one DP rank's KV-event batches (docs/reference/kv-events.md 5 and 6): which batches to apply, when to
 * ask the rank's replay socket for missed ones, and when the rank's exact index can no longer be trusted.
 *
 * A publisher numbers its batches from 0 at every start, +1 per batch. A PUB socket drops batches silently when a
 * subscriber's queue is full, so a gap is the only sign of a loss; the replay socket can resend what is still in the
 * publisher's ring (`buffer_steps` batches), silently starting later than asked when the ring no longer holds the
 * start. This state machine turns the messages into effects; the subscriber (the caller) performs them:
 * - `apply`: apply the batch to the rank's index, in this order;
 * - `replay`: send a replay request from `from` (live batches are held meanwhile, up to `maxHeld`);
 * - `reset`: the publisher restarted (its seq went back), so its cache started empty: forget the rank's index;
 * - `unsure`: some batches are lost for good (a gap without a replay socket, a replay that could not close it, a
 *   first batch after seq 0 with nothing to replay, too many held batches): the index may lack blocks or keep evicted
 *   ones, and the rank is scored by the approximate index until it is `sure` again;
 * - `sure`: the index is complete again, because the publisher started over while it was watched (seq 0 seen).
 *
 * Pure state; no I/O, no timers (the caller times the replay out with `replayFailed`).
 */
import type { KvEventBatch } from '../protocols/kv-events/codec.js';

export type KvSequencerEffect =
  | { readonly kind: 'apply'; readonly seq: bigint; readonly batch: KvEventBatch }
  | { readonly kind: 'replay'; readonly from: bigint }
  | { readonly kind: 'reset' }
  | { readonly kind: 'unsure'; readonly reason: string }
  | { readonly kind: 'sure' };

export interface KvSequencerOptions {
  /** Whether the rank has a replay endpoint. */
  readonly replay: boolean;
  /** Live batches held while a replay runs (an integer ≥ 1); beyond it the replay is given up. Default 10 000. */
  readonly maxHeld?: number;
}

export class KvEventSequencer {
  private readonly canReplay: boolean;
  private readonly maxHeld: number;
  /** The next seq the index needs, or null before the first batch. */
  private next: bigint | null = null;
  /** Whether a replay is running, and the live batches held meanwhile. */
  private replaying = false;
  private held: Array<{ seq: bigint; batch: KvEventBatch }> = [];
  private sure = true;

  /** @throws RangeError when `maxHeld` is not an integer ≥ 1. */
  constructor(opts: KvSequencerOptions) {
    const maxHeld = opts.maxHeld ?? 10_000;
    if (!Number.isSafeInteger(maxHeld) || maxHeld < 1)
      throw new RangeError(`maxHeld must be an integer ≥ 1, got ${maxHeld}`);
    this.canReplay = opts.replay;
    this.maxHeld = maxHeld;
  }

  /** Whether every batch since the index was last known complete has been applied. */
  get indexSure(): boolean {
    return this.sure;
  }

  /** Whether a replay is running (`replayBatch`, `replayEnd` and `replayFailed` expected). */
  get replayRunning(): boolean {
    return this.replaying;
  }

  /** A batch from the PUB socket. */
  live(seq: bigint, batch: KvEventBatch): KvSequencerEffect[] {
    const out: KvSequencerEffect[] = [];
    if (this.replaying) {
      this.held.push({ seq, batch });
      if (this.held.length > this.maxHeld) this.drainHeld('too many batches arrived during the replay', out);
      return out;
    }
    if (this.next !== null && seq < this.next) {
      // The publisher restarted: its cache started empty too.
      out.push({ kind: 'reset' });
      this.next = null;
    }
    if (this.next === null) {
      if (seq === 0n) {
        if (!this.sure) out.push({ kind: 'sure' });
        this.sure = true;
      } else if (this.canReplay) {
        return this.startReplay(0n, seq, batch, out);
      } else {
        this.markUnsure(`the first batch seen is seq ${seq}, and the rank has no replay socket`, out);
      }
    } else if (seq > this.next) {
      if (this.canReplay) return this.startReplay(this.next, seq, batch, out);
      this.markUnsure(`batches ${this.next}..${seq - 1n} were lost, and the rank has no replay socket`, out);
    }
    this.apply(seq, batch, out);
    return out;
  }

  /**
   * The SUB socket (re)connected to the publisher. Batches published before the subscription reached it are not
   * delivered live (ZeroMQ's slow joiner), and when the rank publishes nothing more no gap would ever show them: with
   * a replay socket, ask for everything from the next seq needed (0 before any batch) now. Nothing otherwise.
   */
  connected(): KvSequencerEffect[] {
    if (!this.canReplay || this.replaying) return [];
    this.replaying = true;
    this.held = [];
    const from = this.next ?? 0n;
    this.next = from;
    return [{ kind: 'replay', from }];
  }

  /** A batch of the running replay's reply. */
  replayBatch(seq: bigint, batch: KvEventBatch): KvSequencerEffect[] {
    const out: KvSequencerEffect[] = [];
    if (!this.replaying) return out;
    this.applyInOrder(seq, batch, 'the replay started after the missed batches (the ring no longer held them)', out);
    return out;
  }

  /** The replay's end marker: the held live batches follow. */
  replayEnd(): KvSequencerEffect[] {
    const out: KvSequencerEffect[] = [];
    if (this.replaying) this.drainHeld('the replay ended before the batches that arrived live', out);
    return out;
  }

  /** The replay timed out or its socket failed: what it did not bring is lost. */
  replayFailed(reason: string): KvSequencerEffect[] {
    const out: KvSequencerEffect[] = [];
    if (this.replaying) this.drainHeld(`the replay failed: ${reason}`, out);
    return out;
  }

  private startReplay(from: bigint, seq: bigint, batch: KvEventBatch, out: KvSequencerEffect[]): KvSequencerEffect[] {
    this.replaying = true;
    this.next = from;
    this.held = [{ seq, batch }];
    out.push({ kind: 'replay', from });
    return out;
  }

  /** Ends the replay: applies the held batches in order, marking the index unsure (with `reason`) at a hole. */
  private drainHeld(reason: string, out: KvSequencerEffect[]): void {
    this.replaying = false;
    const held = this.held;
    this.held = [];
    for (const h of held) this.applyInOrder(h.seq, h.batch, reason, out);
  }

  /** Applies `seq` if it is the next or later (a hole before it: unsure); an older one is already applied. */
  private applyInOrder(seq: bigint, batch: KvEventBatch, holeReason: string, out: KvSequencerEffect[]): void {
    if (this.next !== null && seq < this.next) return;
    if (this.next !== null && seq > this.next) this.markUnsure(holeReason, out);
    this.apply(seq, batch, out);
  }

  private apply(seq: bigint, batch: KvEventBatch, out: KvSequencerEffect[]): void {
    out.push({ kind: 'apply', seq, batch });
    this.next = seq + 1n;
  }

  private markUnsure(reason: string, out: KvSequencerEffect[]): void {
    if (this.sure) out.push({ kind: 'unsure', reason });
    this.sure = false;
  }
}
