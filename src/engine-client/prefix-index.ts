/**
 * The gateway's approximate per-rank prefix-cache index (dp-routing.md 14.11; issue 12 part 2): for each DP rank, the
 * chained block hashes (src/protocols/block-hash.ts) of the prompts this client sent there. The ZMQ path carries no
 * KV-cache events, so this is what the client *believes* the rank has cached, the way SGLang's cache-aware router
 * keeps an approximate tree per worker from request history. It is wrong in both directions and that is fine for
 * routing: a rank also caches generated tokens (not indexed), and it evicts under its own memory pressure (the index
 * evicts by its own LRU bound instead).
 *
 * Memory-bounded: at most `capacityBlocks` hashes per rank (about 80 bytes each in a JavaScript Map), least recently
 * sent evicted first; a prompt is recorded tail first, so a prefix's last blocks are older than its first ones and go
 * first (a chained hash is useless once its parent is gone). `forget(rank)` drops a rank (it died or rejoined as a
 * fresh process: its cache is empty). Pure data structure: no I/O, no clock.
 */
import { DEFAULT_BLOCK_TOKENS, blockHashes } from '../protocols/block-hash.js';

/** Default cap on indexed blocks per rank: 65 536 blocks = 1 Mi tokens of 16, about 5 MB per rank. */
export const DEFAULT_INDEX_CAPACITY_BLOCKS = 65_536;

/** Options of `PrefixIndex`. `blockTokens`: tokens per block (default 16); `capacityBlocks`: per-rank bound. */
export interface PrefixIndexOptions {
  blockTokens?: number;
  capacityBlocks?: number;
}

/** The per-rank LRU sets of block hashes (see the module comment). */
export class PrefixIndex {
  readonly blockTokens: number;
  readonly capacityBlocks: number;
  /** Per rank: hash → true, least recently sent first (Map insertion order). */
  private readonly ranks = new Map<number, Map<number, true>>();

  /** Throws RangeError unless both options are integers ≥ 1. */
  constructor(opts: PrefixIndexOptions = {}) {
    const blockTokens = opts.blockTokens ?? DEFAULT_BLOCK_TOKENS;
    const capacityBlocks = opts.capacityBlocks ?? DEFAULT_INDEX_CAPACITY_BLOCKS;
    for (const [name, v] of [
      ['blockTokens', blockTokens],
      ['capacityBlocks', capacityBlocks],
    ] as const) {
      if (!Number.isSafeInteger(v) || v < 1)
        throw new RangeError(`PrefixIndex: ${name} must be an integer ≥ 1, got ${v}`);
    }
    this.blockTokens = blockTokens;
    this.capacityBlocks = capacityBlocks;
  }

  /** The chained hashes of every full block of `tokens` (what `match` and `record` take). */
  hashes(tokens: readonly number[]): number[] {
    return blockHashes(tokens, this.blockTokens);
  }

  /** How many leading blocks of `hashes` the index holds for `rank` (a miss ends the match). Reads only. */
  match(rank: number, hashes: readonly number[]): number {
    const set = this.ranks.get(rank);
    if (set === undefined) return 0;
    let n = 0;
    while (n < hashes.length && set.has(hashes[n])) n += 1;
    return n;
  }

  /**
   * Record that a prompt with these block hashes was sent to `rank`: every hash becomes the most recently used
   * (tail first, so the head is the newest), then the least recently used hashes are evicted down to the bound.
   */
  record(rank: number, hashes: readonly number[]): void {
    if (hashes.length === 0) return;
    let set = this.ranks.get(rank);
    if (set === undefined) {
      set = new Map();
      this.ranks.set(rank, set);
    }
    for (let i = hashes.length - 1; i >= 0; i--) {
      set.delete(hashes[i]);
      set.set(hashes[i], true);
    }
    for (const h of set.keys()) {
      if (set.size <= this.capacityBlocks) break;
      set.delete(h);
    }
  }

  /** Drop everything known about `rank`. */
  forget(rank: number): void {
    this.ranks.delete(rank);
  }

  /** Blocks indexed for `rank` (0 when unknown). */
  size(rank: number): number {
    return this.ranks.get(rank)?.size ?? 0;
  }
}
