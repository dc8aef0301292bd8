/** A seeded pseudo-random source for reproducible property and interleaving tests. */

/**
 * Mulberry32: a small deterministic PRNG. Returns a function yielding floats in [0, 1); the same `seed` (any
 * number, taken as uint32) always gives the same sequence. Not for anything that needs real randomness.
 */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
