/**
 * The exact index of one engine group's prefix caches, built from the ranks' own KV-cache events
 * (docs/reference/kv-events.md 3; issue 29 part 2): which full blocks each DP rank holds now, so `cache_aware` can
 * count a prompt's cached prefix on each rank instead of guessing from where the gateway sent earlier requests
 * (./prefix-index.ts, the approximate index this one stands beside).
 *
 * Keys. The engine names a block by its own hash (`BlockKey`); a prompt lookup needs a key the gateway can compute from
 * the prompt's token ids alone, the block's *prompt key*:
 * - TokenSpeed: the engine's hash itself (FNV-1a 64 over the token ids, `tokenSpeedPageKeys`), so the two are equal;
 * - vLLM: its hash is seeded per process and cannot be recomputed, so the prompt key is the gateway's own chain
 *   (`hashBlock` over the block's token ids, from its parent's prompt key), built from what `BlockStored` carries: the
 *   parent's engine hash (whose prompt key the index already holds: the parent was announced earlier by the same rank)
 *   and the token ids. A block whose parent the index does not hold cannot be keyed and is counted as unlinked.
 *   Blocks with extra keys (LoRA, multimodal items, a cache salt), not on the GPU, or of a group that is not full
 *   attention are left out: a plain prompt never hits them.
 *
 * Counts. vLLM can hold two copies of one block (two requests computed it before either was cached); each copy is
 * stored and removed once. The index counts per (rank, KV-cache group, engine key), since one hash can occur in
 * several groups: `BlockStored` adds one, `BlockRemoved` takes one
 * away and forgets the block at zero; a removal of a block it does not hold is ignored (connectors report those).
 * `AllBlocksCleared`, the rank's death and its rejoin as a fresh process clear the rank.
 *
 * Predict-on-route (as Dynamo's KV router does): a rank announces a prompt's blocks only once it schedules or computes
 * them, so right after the gateway routes a request there, a second turn of the same conversation would see nothing
 * cached and could go elsewhere. `noteRouted` remembers the prompt keys a request was routed with, per rank, for
 * `predictTtlMs`; a lookup counts a block as held when the index holds it or it was routed there within that time,
 * so the count is the larger of the two views. At most `maxBlocksPerRank` predictions per rank (the oldest go first).
 *
 * Memory, measured with 200,000 blocks on Node 20: 69 bytes per TokenSpeed block (one Map entry and its 5-character
 * key) and 165 per vLLM block (two Map entries, a record, the prompt key), at most `maxBlocksPerRank` blocks per rank; a store beyond it is dropped and counted (`droppedStores`), and the rank's count
 * of cached blocks then errs low, never high.
 *
 * Pure state; no I/O, no timers.
 */
import type { KvEvent } from '../protocols/kv-events/codec.js';
import type { BlockKey } from '../protocols/kv-events/block-keys.js';
import { ROOT_BLOCK_HASH, hashBlock } from '../protocols/block-hash.js';

/** How a group's engines name blocks: decides the prompt key (see the module comment). */
export type KvKeying = 'tokenspeed' | 'vllm';

/** A key the gateway computes from a prompt's token ids: `BlockKey` (TokenSpeed) or `c:<hashBlock chain>` (vLLM). */
export type PromptKey = string;

/** The prompt keys of `tokenIds`' full blocks for a vLLM group with `blockSize`-token blocks (the gateway's chain). */
export function vllmPromptKeys(tokenIds: readonly number[], blockSize: number): PromptKey[] {
  const keys: PromptKey[] = [];
  let h = ROOT_BLOCK_HASH;
  for (let start = 0; start + blockSize <= tokenIds.length; start += blockSize) {
    h = hashBlock(h, tokenIds, start, blockSize);
    keys.push(`c:${h}`);
  }
  return keys;
}

/** What happened to events the index could not take, per reason (all counters, never reset). */
export interface KvIndexCounters {
  /** Stores dropped at the `maxBlocksPerRank` cap. */
  droppedStores: number;
  /** vLLM blocks whose parent the index did not hold: no prompt key. */
  unlinkedBlocks: number;
  /** Blocks left out: not GPU, not full attention, with extra keys, or token ids that do not line up. */
  skippedBlocks: number;
  /** Removals of blocks the index did not hold. */
  unknownRemovals: number;
}

interface Held {
  count: number;
  readonly prompt: PromptKey;
  /** The vLLM chain value behind `prompt` (its children's parent), or 0 for TokenSpeed. */
  readonly chain: number;
}

class RankBlocks {
  /** vLLM: `groupKey(group, engine key)` → the block. */
  readonly byEngineKey = new Map<BlockKey, Held>();
  /**
   * TokenSpeed: engine key → copies held. Its prompt key is the engine key and it has no KV-cache groups, so a count
   * is all a block needs (no object per block: a busy rank announces thousands per second).
   */
  readonly counts = new Map<BlockKey, number>();
  /** vLLM: prompt key → how many held engine keys have it (two engine keys can share one: per-process seeds). */
  readonly byPromptKey = new Map<PromptKey, number>();
  /** Prompt keys routed here and not yet announced → when the prediction expires (ms), oldest first. */
  readonly predicted = new Map<PromptKey, number>();
}

/** A block's key within a rank: its engine key, prefixed by its KV-cache group when the engine names one (vLLM). */
const groupKey = (group: number | null, key: BlockKey): string => (group === null ? key : `${group}/${key}`);

/** Group attention kinds whose blocks serve a prompt prefix (vLLM `kv_cache_spec_kind`; null: not said). */
const PREFIX_KINDS = new Set<string | null>([null, 'full_attention', 'mla_attention']);

/** The exact per-rank block index of one engine group. */
export class KvBlockIndex {
  readonly keying: KvKeying;
  readonly maxBlocksPerRank: number;
  readonly predictTtlMs: number;
  readonly counters: KvIndexCounters = { droppedStores: 0, unlinkedBlocks: 0, skippedBlocks: 0, unknownRemovals: 0 };
  private readonly ranks = new Map<number, RankBlocks>();

  /**
   * @param keying how the group's engines name blocks.
   * @param maxBlocksPerRank cap on the blocks held per rank (an integer ≥ 1; default 262,144: 18 MB for TokenSpeed,
   *   43 MB for vLLM), and on the
   *   predictions kept per rank.
   * @param predictTtlMs how long a routed prompt's blocks count as held before the rank announces them (ms ≥ 0;
   *   default 5,000; 0 turns prediction off).
   * @throws RangeError when the cap is not an integer ≥ 1 or the TTL not a finite number ≥ 0.
   */
  constructor(keying: KvKeying, maxBlocksPerRank = 262_144, predictTtlMs = 5_000) {
    if (!Number.isSafeInteger(maxBlocksPerRank) || maxBlocksPerRank < 1) {
      throw new RangeError(`maxBlocksPerRank must be an integer ≥ 1, got ${maxBlocksPerRank}`);
    }
    if (!Number.isFinite(predictTtlMs) || predictTtlMs < 0) {
      throw new RangeError(`predictTtlMs must be a finite number ≥ 0, got ${predictTtlMs}`);
    }
    this.keying = keying;
    this.maxBlocksPerRank = maxBlocksPerRank;
    this.predictTtlMs = predictTtlMs;
  }

  /** Blocks held for `rank` (distinct engine keys). */
  blockCount(rank: number): number {
    const r = this.ranks.get(rank);
    return r === undefined ? 0 : this.keying === 'tokenspeed' ? r.counts.size : r.byEngineKey.size;
  }

  /** Forgets everything `rank` held: `AllBlocksCleared`, the rank's death, its rejoin as a fresh process. */
  clearRank(rank: number): void {
    this.ranks.delete(rank);
  }

  /** Applies one batch's events of `rank`, in order. */
  applyEvents(rank: number, events: readonly KvEvent[]): void {
    for (const e of events) {
      if (e.kind === 'cleared') this.clearRank(rank);
      else if (e.kind === 'removed') this.remove(rank, e.blockHashes, e.medium, e.groupIdx);
      else this.store(rank, e);
    }
  }

  /**
   * How many of `keys` (a prompt's block keys, first block first) `rank` holds as a leading run: the prompt's cached
   * prefix on that rank, in blocks, counting blocks routed there within `predictTtlMs` before `nowMs` (without
   * `nowMs`: the announced blocks alone).
   */
  cachedPrefixBlocks(rank: number, keys: readonly PromptKey[], nowMs = Infinity): number {
    const r = this.ranks.get(rank);
    if (r === undefined) return 0;
    const held = this.promptKeysOf(r);
    let n = 0;
    while (n < keys.length) {
      const key = keys[n]!;
      if (!held.has(key) && !((r.predicted.get(key) ?? -Infinity) > nowMs)) break;
      n++;
    }
    return n;
  }

  /** The rank's held prompt keys (see `RankBlocks.byPromptKey`). */
  private promptKeysOf(r: RankBlocks): ReadonlyMap<PromptKey, unknown> {
    return this.keying === 'tokenspeed' ? r.counts : r.byPromptKey;
  }

  /**
   * A request with the prompt `keys` was just routed to `rank` at `nowMs`: its blocks count as held there for
   * `predictTtlMs` unless the rank announces them first.
   */
  noteRouted(rank: number, keys: readonly PromptKey[], nowMs: number): void {
    if (this.predictTtlMs === 0) return;
    const r = this.rankBlocks(rank);
    const { predicted } = r;
    const held = this.promptKeysOf(r);
    const expires = nowMs + this.predictTtlMs;
    for (const key of keys) {
      if (held.has(key)) continue;
      predicted.delete(key); // re-inserted as the newest
      predicted.set(key, expires);
    }
    // Oldest first: expired ones, then any beyond the cap.
    for (const [key, until] of predicted) {
      if (until > nowMs && predicted.size <= this.maxBlocksPerRank) break;
      predicted.delete(key);
    }
  }

  private rankBlocks(rank: number): RankBlocks {
    let r = this.ranks.get(rank);
    if (r === undefined) this.ranks.set(rank, (r = new RankBlocks()));
    return r;
  }

  private store(rank: number, e: Extract<KvEvent, { kind: 'stored' }>): void {
    const n = e.blockHashes.length;
    if (
      (e.medium !== null && e.medium !== 'GPU') ||
      !PREFIX_KINDS.has(e.specKind) ||
      e.blockSize < 1 ||
      e.tokenIds.length !== n * e.blockSize ||
      (Array.isArray(e.extraKeys) && e.extraKeys.some((k) => k !== null))
    ) {
      this.counters.skippedBlocks += n;
      return;
    }
    const r = this.rankBlocks(rank);
    if (this.keying === 'tokenspeed') {
      this.storeCounts(r, e.blockHashes);
      return;
    }
    let chain = ROOT_BLOCK_HASH;
    if (this.keying === 'vllm' && e.parent !== null) {
      const parent = r.byEngineKey.get(groupKey(e.groupIdx, e.parent));
      if (parent === undefined) {
        this.counters.unlinkedBlocks += n;
        return;
      }
      chain = parent.chain;
    }
    for (let i = 0; i < n; i++) {
      const key = groupKey(e.groupIdx, e.blockHashes[i]!);
      let prompt: PromptKey = e.blockHashes[i]!;
      if (this.keying === 'vllm') {
        chain = hashBlock(chain, e.tokenIds, i * e.blockSize, e.blockSize);
        prompt = `c:${chain}`;
      }
      const held = r.byEngineKey.get(key);
      if (held !== undefined) {
        held.count++;
        continue;
      }
      if (r.byEngineKey.size >= this.maxBlocksPerRank) {
        this.counters.droppedStores += n - i;
        return;
      }
      r.byEngineKey.set(key, { count: 1, prompt, chain });
      r.byPromptKey.set(prompt, (r.byPromptKey.get(prompt) ?? 0) + 1);
      if (r.predicted.size > 0) r.predicted.delete(prompt); // announced: the exact entry takes over
    }
  }

  /** TokenSpeed's stores: one count per engine key (see `RankBlocks.counts`). */
  private storeCounts(r: RankBlocks, keys: readonly BlockKey[]): void {
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i]!;
      const count = r.counts.get(key);
      if (count !== undefined) {
        r.counts.set(key, count + 1);
        continue;
      }
      if (r.counts.size >= this.maxBlocksPerRank) {
        this.counters.droppedStores += keys.length - i;
        return;
      }
      r.counts.set(key, 1);
      if (r.predicted.size > 0) r.predicted.delete(key); // announced: the exact entry takes over
    }
  }

  private remove(rank: number, keys: readonly BlockKey[], medium: string | null, group: number | null): void {
    if (medium !== null && medium !== 'GPU') return;
    const r = this.ranks.get(rank);
    if (this.keying === 'tokenspeed') {
      for (const key of keys) {
        const count = r?.counts.get(key);
        if (r === undefined || count === undefined) this.counters.unknownRemovals++;
        else if (count > 1) r.counts.set(key, count - 1);
        else r.counts.delete(key);
      }
      return;
    }
    for (const engineKey of keys) {
      const key = groupKey(group, engineKey);
      const held = r?.byEngineKey.get(key);
      if (r === undefined || held === undefined) {
        this.counters.unknownRemovals++;
        continue;
      }
      if (--held.count > 0) continue;
      r.byEngineKey.delete(key);
      const left = (r.byPromptKey.get(held.prompt) ?? 1) - 1;
      if (left > 0) r.byPromptKey.set(held.prompt, left);
      else r.byPromptKey.delete(held.prompt);
    }
  }
}
