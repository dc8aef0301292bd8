/**
 * The KV page pool of one simulated rank with a prefix cache modelled on vLLM's (vLLM `v1/core/block_pool.py` and
 * `kv_cache_manager.py`; issue 12 part 1). Pure and deterministic; the scheduler (`scheduler.ts`) is its only user.
 *
 * - Pages are 16-token blocks (`KV_PAGE_TOKENS`). A request holds `pages` pages: its first `held` pages are **hashed
 *   blocks** (full blocks named by the chained hash of src/protocols/block-hash.ts, shared by every request with the
 *   same prefix), the rest are **private** pages (a partial tail, or full blocks not computed yet).
 * - A hashed block stays resident after its last holder lets go: it becomes **idle** (reference count 0) and can be
 *   hit again until it is evicted. Idle blocks are evicted in LRU order when the free pool runs short; a block in use
 *   (reference count > 0) is never evicted. A holder releases its blocks tail first, so a prefix's last blocks are
 *   evicted before its first ones (vLLM frees a request's blocks in reverse order for the same reason).
 * - The cache is bounded by the rank's KV pages: in-use pages + idle blocks + free pages = `totalPages`.
 * - With `enabled` false nothing is ever hashed, so nothing is shared or hit (every page stays private).
 *
 * Units: pages (blocks of `KV_PAGE_TOKENS` tokens). Every method throws RangeError on a negative count.
 */

/** Result of `SimPrefixCache.match`: leading resident blocks, and how many of them are idle (reference count 0). */
export interface PrefixMatch {
  blocks: number;
  idle: number;
}

/** Counters of the page pool, for `SchedulerState` and tests. Pages. */
export interface PrefixCacheCounts {
  /** Pages referenced by requests: private pages plus hashed blocks with a reference count > 0. */
  inUse: number;
  /** Hashed blocks nobody references: still hits, evictable. */
  idle: number;
  /** Idle blocks evicted since start. */
  evictions: number;
}

function count(name: string, n: number): void {
  if (!Number.isSafeInteger(n) || n < 0)
    throw new RangeError(`SimPrefixCache.${name}: expected an integer ≥ 0, got ${n}`);
}

/** A rank's page pool and prefix cache (see the module comment). */
export class SimPrefixCache {
  readonly totalPages: number;
  readonly enabled: boolean;
  private privatePages = 0;
  /** Resident hashed blocks: hash → reference count. */
  private readonly refs = new Map<number, number>();
  /** Hashes with reference count 0, least recently released first (Map insertion order). */
  private readonly idle = new Map<number, true>();
  /** The eviction cursor over `idle` (see `evictOldest`); null until the first eviction or after it ran out. */
  private lru: IterableIterator<number> | null = null;
  private hashedInUse = 0;
  private evictions = 0;
  /** Told of every eviction, in order (the rank's KV-event stream: `BlockRemoved`); null: nobody listens. */
  onEvict: ((hash: number) => void) | null = null;

  /** Throws RangeError unless `totalPages` is an integer ≥ 1. */
  constructor(totalPages: number, enabled = true) {
    if (!Number.isSafeInteger(totalPages) || totalPages < 1) {
      throw new RangeError(`SimPrefixCache: totalPages must be an integer ≥ 1, got ${totalPages}`);
    }
    this.totalPages = totalPages;
    this.enabled = enabled;
  }

  /** Pages in use (private + referenced hashed blocks): what the rank reports as `kv_active_pages`. */
  inUsePages(): number {
    return this.privatePages + this.hashedInUse;
  }

  /** Pages a new allocation can get: free pages plus idle (evictable) blocks. */
  availablePages(): number {
    return this.totalPages - this.inUsePages();
  }

  /** Counters (pages). */
  counts(): PrefixCacheCounts {
    return { inUse: this.inUsePages(), idle: this.idle.size, evictions: this.evictions };
  }

  /**
   * The leading blocks of `hashes` (at most `maxBlocks`) that are resident, in use or idle; a miss ends the match
   * (a chained hash only means something after its parent). Reads only: nothing is touched.
   */
  match(hashes: readonly number[], maxBlocks: number = hashes.length): PrefixMatch {
    count('match', maxBlocks);
    if (!this.enabled) return { blocks: 0, idle: 0 };
    const limit = Math.min(maxBlocks, hashes.length);
    let blocks = 0;
    let idle = 0;
    while (blocks < limit) {
      const r = this.refs.get(hashes[blocks]);
      if (r === undefined) break;
      if (r === 0) idle += 1;
      blocks += 1;
    }
    return { blocks, idle };
  }

  /**
   * Drops every idle block (vLLM `reset_prefix_cache`), and returns their hashes, least recently used first. Refuses
   * (returns null, nothing dropped) while any hashed block is in use, as vLLM's reset fails while requests hold
   * blocks. With the cache disabled there is nothing to drop.
   */
  reset(): number[] | null {
    if (this.hashedInUse > 0) return null;
    const dropped = [...this.idle.keys()];
    this.idle.clear();
    this.refs.clear();
    this.lru = null;
    return dropped;
  }

  /** Whether block `hash` is resident (in use or idle). */
  isResident(hash: number): boolean {
    return this.refs.has(hash);
  }

  /**
   * Take a reference on each of `hashes[0 .. n)`, which must all be resident (as `match` just reported). An idle
   * block leaves the LRU list. Throws RangeError when one is not resident.
   */
  acquire(hashes: readonly number[], n: number): void {
    count('acquire', n);
    for (let i = 0; i < n; i++) {
      const h = hashes[i];
      const r = this.refs.get(h);
      if (r === undefined) throw new RangeError(`SimPrefixCache.acquire: block ${h} is not resident`);
      if (r === 0) {
        this.idle.delete(h);
        this.hashedInUse += 1;
      }
      this.refs.set(h, r + 1);
    }
  }

  /**
   * Allocate `n` private pages, evicting idle blocks (least recently released first) when the free pool is short.
   * Throws RangeError when fewer than `n` pages are available (the caller checks `availablePages()` first).
   */
  allocate(n: number): void {
    count('allocate', n);
    if (n > this.availablePages()) {
      throw new RangeError(`SimPrefixCache.allocate: ${n} pages asked, ${this.availablePages()} available`);
    }
    let free = this.totalPages - this.inUsePages() - this.idle.size;
    for (; free < n; free++) this.evictOldest();
    this.privatePages += n;
  }

  /**
   * Evicts the least recently released idle block. Bookkeeping only: one Map iterator is kept across calls, because
   * a fresh `idle.keys()` walks over every entry deleted from the front since V8 last compacted the Map (an LRU
   * queue deletes at the front), which cost O(cache size) per allocation. Every entry before the cursor was evicted
   * by it, and entries (re)inserted later come after it, so its next entry is always the oldest idle one. A Map
   * iterator that reported done stays done: a new one is taken then. The caller checks that an idle block exists.
   */
  private evictOldest(): void {
    for (let attempt = 0; attempt < 2; attempt++) {
      this.lru ??= this.idle.keys();
      const next = this.lru.next();
      if (next.done !== true) {
        this.idle.delete(next.value);
        this.refs.delete(next.value);
        this.evictions += 1;
        this.onEvict?.(next.value);
        return;
      }
      this.lru = null;
    }
    throw new RangeError('SimPrefixCache.allocate: no idle block to evict');
  }

  /**
   * One of a holder's private pages now holds the full, computed block `hash`: it becomes a hashed block with one
   * reference. When the block is already resident (another request computed the same prefix), the holder takes a
   * reference on that one and its private page is freed. With the cache disabled the page stays private (returns
   * false); otherwise returns true (the holder now holds the block).
   */
  promote(hash: number): boolean {
    if (!this.enabled) return false;
    if (this.privatePages < 1) throw new RangeError('SimPrefixCache.promote: the holder has no private page');
    this.privatePages -= 1;
    const r = this.refs.get(hash);
    if (r === undefined) {
      this.refs.set(hash, 1);
      this.hashedInUse += 1;
    } else {
      if (r === 0) {
        this.idle.delete(hash);
        this.hashedInUse += 1;
      }
      this.refs.set(hash, r + 1);
    }
    return true;
  }

  /**
   * A holder lets go of `privatePages` private pages (freed) and of its hashed blocks `hashes` (one reference each;
   * a block whose count reaches 0 becomes idle, at the most recently used end). Released tail first, so the last
   * blocks of a prefix are the first evicted. Throws RangeError when more is released than is held.
   */
  release(privatePages: number, hashes: readonly number[]): void {
    count('release', privatePages);
    if (privatePages > this.privatePages) {
      throw new RangeError(`SimPrefixCache.release: ${privatePages} private pages released, ${this.privatePages} held`);
    }
    this.privatePages -= privatePages;
    for (let i = hashes.length - 1; i >= 0; i--) {
      const h = hashes[i];
      const r = this.refs.get(h);
      if (r === undefined || r === 0) throw new RangeError(`SimPrefixCache.release: block ${h} is not held`);
      this.refs.set(h, r - 1);
      if (r === 1) {
        this.hashedInUse -= 1;
        this.idle.set(h, true);
      }
    }
  }
}
