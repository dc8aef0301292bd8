/**
 * The gateway's queue for requests that arrive while the fleet is saturated (issue 30 part 3), as a pure structure:
 * the engine client decides when the fleet is saturated and when a queued request may go; this file only orders and
 * bounds what waits. The order is llm-d / the Gateway API Inference Extension's flow control: **bands** first (the
 * most urgent non-empty band is served; priority-band.ts), then **fairness between tenants** within a band
 * (round-robin: each tenant with a queued request gets one turn in rotation, so a tenant that queues 500 requests gets
 * no more turns than one that queues 5), then **FCFS** within a tenant.
 *
 * Bounds: at most `maxPerTenant` queued requests per tenant (a request past it is refused: `tenant-full`) and
 * `maxTotal` in all. When the whole queue is full, a request of a more urgent band than some queued one takes its
 * place: the newest request of the least urgent band is **shed** (returned, for the caller to refuse with 429);
 * otherwise the new request is refused (`queue-full`). Every structure is bounded by `maxTotal`.
 *
 * Removal (a client that left, a deadline that passed) is immediate: O(queued requests of that tenant).
 */

/** One queued request. `band`: 0 = most urgent (priority-band.ts `bandOrder`). Times in ms. */
export interface FlowEntry<T> {
  readonly id: string;
  readonly tenant: string;
  readonly band: number;
  readonly value: T;
}

/** Limits of a `FlowQueue` (requests; integers ≥ 1). */
export interface FlowQueueLimits {
  readonly maxTotal: number;
  readonly maxPerTenant: number;
}

/** Why `enqueue` refused a request. */
export type FlowRefusal = 'queue-full' | 'tenant-full' | 'duplicate';

/** What `enqueue` did: queued (possibly shedding a less urgent request to make room), or refused. */
export type EnqueueResult<T> =
  | { readonly queued: true; readonly shed: FlowEntry<T> | null }
  | { readonly queued: false; readonly reason: FlowRefusal };

/** One band: its tenants in turn order (Map order: the next tenant served is the first), each with its FIFO. */
type Band<T> = Map<string, FlowEntry<T>[]>;

/** See the module comment. Not thread-safe, no I/O, no timers. */
export class FlowQueue<T> {
  private readonly bands: Band<T>[];
  /** Queued entries by id, with the order they were queued in (larger is newer). */
  private readonly byId = new Map<string, { entry: FlowEntry<T>; seq: number }>();
  private seq = 0;
  private readonly perTenant = new Map<string, number>();
  private readonly limits: FlowQueueLimits;
  /** Requests queued per band now (index = band; a live array: read it, never write it). */
  readonly bandSizes: number[];

  /** @throws RangeError when `bandCount` or a limit is not an integer ≥ 1. */
  constructor(bandCount: number, limits: FlowQueueLimits) {
    for (const [name, v] of [
      ['bandCount', bandCount],
      ['maxTotal', limits.maxTotal],
      ['maxPerTenant', limits.maxPerTenant],
    ] as const) {
      if (!Number.isSafeInteger(v) || v < 1) throw new RangeError(`FlowQueue ${name} must be an integer ≥ 1, got ${v}`);
    }
    this.bands = Array.from({ length: bandCount }, () => new Map());
    this.bandSizes = Array.from({ length: bandCount }, () => 0);
    this.limits = { ...limits };
  }

  /** Requests queued now. */
  get size(): number {
    return this.byId.size;
  }

  /** Whether `id` is queued. */
  has(id: string): boolean {
    return this.byId.has(id);
  }

  /**
   * Queue `entry` (see the module comment for the bounds and shedding).
   * @throws RangeError for a band outside 0..bandCount−1.
   */
  enqueue(entry: FlowEntry<T>): EnqueueResult<T> {
    if (!Number.isInteger(entry.band) || entry.band < 0 || entry.band >= this.bands.length) {
      throw new RangeError(`FlowQueue: band ${entry.band} is not one of 0..${this.bands.length - 1}`);
    }
    if (this.byId.has(entry.id)) return { queued: false, reason: 'duplicate' };
    if ((this.perTenant.get(entry.tenant) ?? 0) >= this.limits.maxPerTenant) {
      return { queued: false, reason: 'tenant-full' };
    }
    let shed: FlowEntry<T> | null = null;
    if (this.byId.size >= this.limits.maxTotal) {
      shed = this.newestOfLeastUrgentBelow(entry.band);
      if (shed === null) return { queued: false, reason: 'queue-full' };
      this.remove(shed.id);
    }
    const band = this.bands[entry.band]!;
    const fifo = band.get(entry.tenant);
    if (fifo === undefined) band.set(entry.tenant, [entry]);
    else fifo.push(entry);
    this.byId.set(entry.id, { entry, seq: this.seq++ });
    this.bandSizes[entry.band]!++;
    this.perTenant.set(entry.tenant, (this.perTenant.get(entry.tenant) ?? 0) + 1);
    return { queued: true, shed };
  }

  /** The band of the request `take` would return (0 = most urgent), or −1 when nothing waits. */
  nextBand(): number {
    for (let b = 0; b < this.bandSizes.length; b++) if (this.bandSizes[b]! > 0) return b;
    return -1;
  }

  /** Whether a request of `band` or a more urgent one waits. */
  waitsAtOrAbove(band: number): boolean {
    for (let b = 0; b <= band && b < this.bandSizes.length; b++) if (this.bandSizes[b]! > 0) return true;
    return false;
  }

  /**
   * Take the request to serve next: the most urgent band's tenant whose turn it is, its oldest; that tenant's turn
   * passes to the next tenant of the band.
   */
  take(): FlowEntry<T> | undefined {
    for (const band of this.bands) {
      for (const [tenant, fifo] of band) {
        const entry = fifo.shift()!;
        band.delete(tenant);
        if (fifo.length > 0) band.set(tenant, fifo); // to the end of the rotation
        this.forget(entry);
        return entry;
      }
    }
    return undefined;
  }

  /** Remove the queued request `id` (its client left, or its deadline passed); the entry, or undefined. */
  remove(id: string): FlowEntry<T> | undefined {
    const entry = this.byId.get(id)?.entry;
    if (entry === undefined) return undefined;
    const band = this.bands[entry.band]!;
    const fifo = band.get(entry.tenant)!;
    fifo.splice(fifo.indexOf(entry), 1);
    if (fifo.length === 0) band.delete(entry.tenant);
    this.forget(entry);
    return entry;
  }

  /** Requests `tenant` has queued now. */
  queuedOf(tenant: string): number {
    return this.perTenant.get(tenant) ?? 0;
  }

  /** The `limit` tenants with the most requests queued now, as tenant → requests, most first. */
  topTenants(limit: number): Record<string, number> {
    const top = [...this.perTenant].sort((a, b) => b[1] - a[1]).slice(0, limit);
    return Object.fromEntries(top);
  }

  private forget(entry: FlowEntry<T>): void {
    this.byId.delete(entry.id);
    this.bandSizes[entry.band]!--;
    const n = (this.perTenant.get(entry.tenant) ?? 1) - 1;
    if (n > 0) this.perTenant.set(entry.tenant, n);
    else this.perTenant.delete(entry.tenant);
  }

  /** The newest request of the least urgent non-empty band less urgent than `band`, or null. */
  private newestOfLeastUrgentBelow(band: number): FlowEntry<T> | null {
    for (let b = this.bands.length - 1; b > band; b--) {
      let newest: FlowEntry<T> | null = null;
      let newestSeq = -1;
      for (const fifo of this.bands[b]!.values()) {
        const last = fifo.at(-1)!;
        const seq = this.byId.get(last.id)!.seq;
        if (seq > newestSeq) {
          newest = last;
          newestSeq = seq;
        }
      }
      if (newest !== null) return newest;
    }
    return null;
  }
}
