/**
 * What `cache_aware` reads of one engine group's KV-cache events (issue 29 parts 1-3): the exact index
 * (kv-block-index.ts) together with whether each rank's index can be trusted right now, and the prompt keys of a
 * request. The group's KV-event subscribers (src/transport/kv-event-subscriber.ts) write into it through the
 * `KvEventSink` methods; the policy reads it inside the synchronous select + reserve step.
 *
 * A rank is **live** (scored by the exact index) when a subscriber is attached to its stream (`attach`), has not
 * declared it unsure (a gap no replay
 * closed, undecodable frames, a first batch after seq 0 with nothing to replay) and its publisher is not **silent**:
 * a rank the gateway routed prompts with full blocks to announces blocks within moments (both engines publish while
 * they schedule), so when the first such route since its last batch is older than `silenceMs` with nothing heard,
 * the stream is taken to be lost (a wrong endpoint, a publisher that never started) and the rank falls back to the
 * approximate index until a batch arrives. Nothing here does I/O or keeps a timer; time comes from the callers.
 */
import type { KvEvent, KvEventBatch } from '../protocols/kv-events/codec.js';
import { tokenSpeedPageKeys } from '../protocols/kv-events/block-keys.js';
import {
  newKvEventSubscriberCounters,
  type KvEventSink,
  type KvEventSubscriberCounters,
} from '../transport/kv-event-subscriber.js';
import { KvBlockIndex, vllmPromptKeys, type KvKeying, type PromptKey } from './kv-block-index.js';

/** Default `silenceMs`: routed blocks unannounced this long mean the rank's stream is lost. */
export const DEFAULT_KV_SILENCE_MS = 30_000;

export interface KvCacheViewOptions {
  readonly keying: KvKeying;
  /** Tokens per block until a stored event says otherwise (the ready response's `prefix_granularity`; default 16). */
  readonly blockSize?: number;
  /** See the module comment (ms; default 30 000). */
  readonly silenceMs?: number;
  /** `KvBlockIndex`'s cap and prediction TTL. */
  readonly maxBlocksPerRank?: number;
  readonly predictTtlMs?: number;
  /** Told when a rank's liveness changes (for the gateway's log), with the reason it is not live. */
  readonly onLiveness?: (rank: number, live: boolean, reason: string | null) => void;
}

/** Per-group counters (never reset). */
export interface KvCacheViewCounters {
  /** Batches applied to the index. */
  batches: number;
  /** Times a rank's index was found unsure, and found silent. */
  unsure: number;
  silent: number;
  /** Publisher restarts (the index of the rank was forgotten). */
  resets: number;
}

/** The exact index of one group and the liveness of each rank's stream (see the module comment). */
export class KvCacheView implements KvEventSink {
  readonly index: KvBlockIndex;
  readonly counters: KvCacheViewCounters = { batches: 0, unsure: 0, silent: 0, resets: 0 };
  /** What the group's subscribers counted (they add to this one object): frames dropped, replays. */
  readonly streams: KvEventSubscriberCounters = newKvEventSubscriberCounters();
  private size: number;
  private readonly silenceMs: number;
  private readonly onLiveness: KvCacheViewOptions['onLiveness'];
  /** Ranks the subscriber declared unsure → why. */
  private readonly unsure = new Map<number, string>();
  /** Per rank: when the first route with full blocks since its last batch happened (ms). */
  private readonly routedSince = new Map<number, number>();
  /** Ranks currently reported not live (to report changes once). */
  private readonly down = new Set<number>();
  /** Ranks with a subscriber on their stream. */
  private readonly attached = new Set<number>();
  /** Whether `size` came from a rank (then fixed), not from the options. */
  private sizeKnown = false;

  /** @throws RangeError on a block size that is not an integer ≥ 1 or a bad index option. */
  constructor(opts: KvCacheViewOptions) {
    const size = opts.blockSize ?? 16;
    if (!Number.isSafeInteger(size) || size < 1) throw new RangeError(`block size must be an integer ≥ 1, got ${size}`);
    this.index = new KvBlockIndex(opts.keying, opts.maxBlocksPerRank, opts.predictTtlMs);
    this.size = size;
    this.silenceMs = opts.silenceMs ?? DEFAULT_KV_SILENCE_MS;
    this.onLiveness = opts.onLiveness;
  }

  /**
   * Tokens per block of the prompt keys: the first size known (a joining rank's `prefix_granularity`, else the first
   * stored GPU block), else the configured one. Fixed from then on: every rank of a group has one block size, so a
   * stored event of another size (a misconfigured or hostile publisher) is left out (`skippedBlocks`) rather than
   * re-keying the whole group.
   */
  get blockSize(): number {
    return this.size;
  }

  /** The prompt keys of `tokenIds`' full blocks, as the group's engines name them (kv-block-index.ts). */
  promptKeys(tokenIds: readonly number[]): PromptKey[] {
    return this.index.keying === 'tokenspeed'
      ? tokenSpeedPageKeys(tokenIds, this.size)
      : vllmPromptKeys(tokenIds, this.size);
  }

  /** Whether any rank has a subscriber (the group has KV events at all). */
  get enabled(): boolean {
    return this.attached.size > 0;
  }

  /**
   * A subscriber now reads `rank`'s stream; `blockSize` (tokens, when known: the ready response's
   * `prefix_granularity`) keys prompts until a stored event says otherwise.
   */
  attach(rank: number, blockSize: number | null = null): void {
    this.attached.add(rank);
    if (blockSize !== null && Number.isSafeInteger(blockSize) && blockSize >= 1) this.learnSize(blockSize);
  }

  /** Whether `rank` is scored by the exact index at `nowMs` (see the module comment). */
  isLive(rank: number, nowMs: number): boolean {
    if (!this.attached.has(rank) || this.unsure.has(rank)) return false;
    const since = this.routedSince.get(rank);
    const silent = since !== undefined && nowMs - since > this.silenceMs;
    if (silent && !this.down.has(rank)) {
      this.counters.silent++;
      this.note(rank, false, `no KV events for ${Math.round(nowMs - since)} ms after prompts were routed there`);
    }
    return !silent;
  }

  /**
   * The leading tokens of a prompt (its `keys`) the rank holds, or was routed within the prediction TTL at `nowMs`;
   * without `nowMs`, the ones it announced alone.
   */
  cachedPrefixTokens(rank: number, keys: readonly PromptKey[], nowMs?: number): number {
    return this.index.cachedPrefixBlocks(rank, keys, nowMs) * this.size;
  }

  /** A request with `keys` was routed to `rank` at `nowMs` (predict-on-route; starts the silence clock). */
  noteRouted(rank: number, keys: readonly PromptKey[], nowMs: number): void {
    this.index.noteRouted(rank, keys, nowMs);
    if (keys.length > 0 && !this.routedSince.has(rank)) this.routedSince.set(rank, nowMs);
  }

  /** The rank's engine state is gone (it died, or rejoined as a fresh process): forget its blocks. */
  forgetRank(rank: number): void {
    this.index.clearRank(rank);
    this.routedSince.delete(rank);
  }

  /** `KvEventSink`: the next batch of `rank`, in seq order. */
  apply(rank: number, batch: KvEventBatch): void {
    this.counters.batches++;
    let events = batch.events;
    for (const e of events) {
      if (e.kind !== 'stored' || e.blockSize <= 0 || (e.medium !== null && e.medium !== 'GPU')) continue;
      this.learnSize(e.blockSize);
      if (e.blockSize !== this.size) {
        const fits = (x: KvEvent) => x.kind !== 'stored' || x.blockSize === this.size || x.blockSize <= 0;
        for (const x of events)
          if (!fits(x) && x.kind === 'stored') this.index.counters.skippedBlocks += x.blockHashes.length;
        events = events.filter(fits);
        break;
      }
    }
    this.index.applyEvents(rank, events);
    this.routedSince.delete(rank);
    if (!this.unsure.has(rank) && this.down.has(rank)) this.note(rank, true, null);
  }

  private learnSize(size: number): void {
    if (this.sizeKnown) return;
    this.sizeKnown = true;
    this.size = size;
  }

  /** `KvEventSink`: the rank's publisher restarted, its cache started empty. */
  reset(rank: number): void {
    this.counters.resets++;
    this.index.clearRank(rank);
  }

  /** `KvEventSink`: whether the rank's index is complete. */
  sureness(rank: number, sure: boolean, reason: string | null): void {
    if (sure) {
      this.unsure.delete(rank);
      if (this.down.has(rank) && !this.routedSince.has(rank)) this.note(rank, true, null);
      return;
    }
    if (!this.unsure.has(rank)) this.counters.unsure++;
    this.unsure.set(rank, reason ?? 'unsure');
    if (!this.down.has(rank)) this.note(rank, false, reason);
  }

  private note(rank: number, live: boolean, reason: string | null): void {
    if (live) this.down.delete(rank);
    else this.down.add(rank);
    this.onLiveness?.(rank, live, reason);
  }
}
