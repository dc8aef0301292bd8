/**
 * A bounded memory of recently seen string ids (request ids the engine client let go), for one question only: "was
 * this id seen lately?" (issue 26 part 4: a row for an id the gateway never issued is counted, a late row for one it
 * retired is not).
 *
 * Each id is kept as a 32-bit fingerprint (FNV-1a over its UTF-16 units) in one of two generations, each a fixed
 * open-addressing table of `Uint32Array` slots at most half full. Adds go to the current generation; when it holds
 * `perGeneration` fingerprints the older generation is wiped and reused as the new current one. So the last
 * `perGeneration` ids added are always remembered, at most `2 × perGeneration` are, and memory is fixed at
 * construction (two tables of `2 × perGeneration` slots rounded up to a power of two, 4 bytes each: 1 MiB for the
 * default). Nothing is
 * allocated per add (no string is retained, no table grows or rehashes: see collections/id-table.ts for why that
 * matters on a per-request path).
 *
 * A fingerprint can collide: an id never added answers `has` true with probability about
 * `2 × perGeneration / 2^32` (3 × 10⁻⁵ for the default); never the other way round within the window.
 */

/** Fingerprints per generation by default: the last 65 536 ids are always remembered. */
export const DEFAULT_RECENT_IDS_PER_GENERATION = 65_536;

/** FNV-1a (32-bit) of the UTF-16 code units of `s`; never 0 (0 marks an empty slot). */
export function fingerprint(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  h >>>= 0;
  return h === 0 ? 1 : h;
}

/** See the module docs. */
export class RecentIds {
  /** Fingerprints kept before the generations turn over (the remembered window's lower bound, in ids). */
  readonly perGeneration: number;
  private current: Uint32Array;
  private previous: Uint32Array;
  private readonly slotMask: number;
  private count = 0;

  /** @param perGeneration ids per generation, an integer ≥ 1 (default 65 536). Throws RangeError otherwise. */
  constructor(perGeneration = DEFAULT_RECENT_IDS_PER_GENERATION) {
    if (!Number.isSafeInteger(perGeneration) || perGeneration < 1)
      throw new RangeError(`perGeneration must be an integer ≥ 1, got ${perGeneration}`);
    this.perGeneration = perGeneration;
    let slots = 2;
    while (slots < 2 * perGeneration) slots *= 2;
    this.slotMask = slots - 1;
    this.current = new Uint32Array(slots);
    this.previous = new Uint32Array(slots);
  }

  /** Remember `id` (a no-op when the current generation already holds its fingerprint). */
  add(id: string): void {
    const h = fingerprint(id);
    const table = this.current;
    const mask = this.slotMask;
    let i = h & mask;
    for (;;) {
      const v = table[i]!;
      if (v === h) return;
      if (v === 0) break;
      i = (i + 1) & mask;
    }
    table[i] = h;
    if (++this.count >= this.perGeneration) this.turnOver();
  }

  /** Whether `id` was added within the remembered window (or collides with a fingerprint that was). */
  has(id: string): boolean {
    const h = fingerprint(id);
    return this.holds(this.current, h) || this.holds(this.previous, h);
  }

  private holds(table: Uint32Array, h: number): boolean {
    const mask = this.slotMask;
    for (let i = h & mask; ; i = (i + 1) & mask) {
      const v = table[i]!;
      if (v === h) return true;
      if (v === 0) return false;
    }
  }

  /** The current generation becomes the previous one; the old previous one, wiped, the current one. */
  private turnOver(): void {
    const wiped = this.previous.fill(0);
    this.previous = this.current;
    this.current = wiped;
    this.count = 0;
  }
}
