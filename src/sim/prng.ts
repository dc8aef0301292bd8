/**
 * The simulator's deterministic randomness: one small PRNG that the text model, the response plan and the
 * structured-output writer share (its own module, so they do not import each other for it).
 */

/**
 * A small, fast 32-bit PRNG (mulberry32). `next()` returns a float in [0, 1). Deterministic for a given seed.
 */
export class Prng {
  private s: number;
  constructor(seed: number) {
    this.s = seed >>> 0;
  }
  next(): number {
    this.s = (this.s + 0x6d2b79f5) >>> 0;
    let t = this.s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  /** An integer in [lo, hi] (inclusive). */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
}
