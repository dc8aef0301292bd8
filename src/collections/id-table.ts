/**
 * A table of short-lived entries keyed by a request id or an integer handle, for the collections that gain and lose
 * an entry per request (the request registry, the in-flight sets, a front's submissions, the router's per-front
 * streams, the simulated rank's requests).
 *
 * Why not `Map`/`Set` (issue 9, CPU per request, measured on Node 20 / V8 11.3): a long-lived `Map` or `Set` that gains
 * and loses entries all the time rehashes into a new backing table every few dozen operations, and V8 leaves the
 * obsolete table holding the entries it had, linked to its successor (for live iterators). Once one table of that
 * chain is in the old generation, the young-generation GC treats every later table, and every entry any of them
 * ever held, as live until the next full GC, so short-lived requests are copied and promoted wholesale. In the
 * gateway at ~4 000 requests/s that was most of each request (~10 KB), with ~10 ms scavenges every ~60 ms; in a
 * microbenchmark (64 live entries, 50 000 adds/s) a `Map` kept 6.5 MB of 7 MB alive per scavenge where this table,
 * a plain object in dictionary mode, kept 0.3 MB, as much as no table at all. Deleting a property clears its slot,
 * and a dictionary that grows or shrinks is copied without a link to the old store.
 *
 * Keys are strings or safe integers (integers and their decimal strings are the same key). Iteration
 * (`values`, `keys`, `entries`) is in insertion order for string keys that are not integer-like, and in ascending
 * order for integer keys (JavaScript's property order): both hold for request ids (`chatcmpl-…`, `cmpl-…-1`) and for
 * handles minted in increasing order. Operations are O(1) on average; lookups cost about what a `Map`'s do.
 */
export class IdTable<V> {
  private slots: Record<string | number, V> = Object.create(null) as Record<string | number, V>;
  private count = 0;

  /** Number of entries. */
  get size(): number {
    return this.count;
  }

  /** The value stored under `key`, or undefined. */
  get(key: string | number): V | undefined {
    return this.slots[key];
  }

  /** Whether `key` has an entry (also one whose value is undefined). */
  has(key: string | number): boolean {
    return key in this.slots;
  }

  /** Store `value` under `key` (replacing an earlier one). */
  set(key: string | number, value: V): this {
    if (!(key in this.slots)) this.count++;
    this.slots[key] = value;
    return this;
  }

  /** Remove `key`'s entry; returns whether there was one. */
  delete(key: string | number): boolean {
    if (!(key in this.slots)) return false;
    delete this.slots[key];
    this.count--;
    return true;
  }

  /** Remove every entry. */
  clear(): void {
    this.slots = Object.create(null) as Record<string | number, V>;
    this.count = 0;
  }

  /** The values, in the order described in the class comment (a new array). */
  values(): V[] {
    const out: V[] = [];
    for (const key in this.slots) out.push(this.slots[key]!);
    return out;
  }

  /** The keys as strings (an integer key as its decimal string), in the class comment's order (a new array). */
  keys(): string[] {
    return Object.keys(this.slots);
  }

  /** `[key, value]` pairs, keys as strings, in the class comment's order (a new array). */
  entries(): Array<[string, V]> {
    const out: Array<[string, V]> = [];
    for (const key in this.slots) out.push([key, this.slots[key]!]);
    return out;
  }
}

/** A set of request ids or integer handles with {@link IdTable}'s behaviour (see there for why not `Set`). */
export class IdSet {
  private readonly table = new IdTable<true>();

  get size(): number {
    return this.table.size;
  }

  has(key: string | number): boolean {
    return this.table.has(key);
  }

  /** Add `key` (adding twice is a no-op). */
  add(key: string | number): this {
    this.table.set(key, true);
    return this;
  }

  /** Remove `key`; returns whether it was there. */
  delete(key: string | number): boolean {
    return this.table.delete(key);
  }

  clear(): void {
    this.table.clear();
  }

  /** The members as strings, in {@link IdTable}'s order (a new array). */
  keys(): string[] {
    return this.table.keys();
  }
}
