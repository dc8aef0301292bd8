/**
 * Prefix-cache block identity: chained hashes of full token blocks, as vLLM's prefix cache names its KV blocks
 * (vLLM `v1/core/kv_cache_utils.py` `hash_block_tokens`: a block's hash covers its parent block's hash and its own
 * token ids, so equal hashes mean equal prefixes up to and including that block; only **full** blocks are hashed,
 * a trailing partial block never is).
 *
 * Engine-neutral and pure: the simulated ranks' prefix cache (src/sim/prefix-cache.ts) and the gateway's approximate
 * per-rank index (src/engine-client/prefix-index.ts; dp-routing.md 14.11) hash the same way, so the gateway's view of
 * a rank's cache and the sim's cache agree block for block. Real engines use their own hash functions (vLLM: sha256 or
 * Python's builtin hash), which never travel on the wire; the gateway only ever compares its hashes with its own.
 *
 * A hash is a non-negative integer below 2^53 (two independent 32-bit multiply-xorshift lanes, 53 bits kept), so it
 * is an exact JavaScript number usable as a Map key. Among a million distinct blocks the chance of any collision is
 * about n²/2^54 ≈ 6·10^-5: negligible for routing, which tolerates a wrong guess anyway (it only costs a prefill).
 */

/** Tokens per block: vLLM's default `block_size` and TokenSpeed's `prefix_granularity` as the sim reports it. */
export const DEFAULT_BLOCK_TOKENS = 16;

/** The parent hash of a sequence's first block. */
export const ROOT_BLOCK_HASH = 0;

const TWO_POW_21 = 2 ** 21;

/**
 * The hash of one block: `parent` (a block hash, or `ROOT_BLOCK_HASH` for the first block) chained with
 * `tokens[start .. start + count)` (token ids, integers; non-integers are truncated). Returns an integer in
 * [0, 2^53). Pure. Throws RangeError when the range is outside `tokens`.
 */
export function hashBlock(parent: number, tokens: readonly number[], start: number, count: number): number {
  if (start < 0 || count < 0 || start + count > tokens.length) {
    throw new RangeError(`block [${start}, ${start + count}) is outside a sequence of ${tokens.length} tokens`);
  }
  // The parent seeds both lanes (its high and low parts), so the chain carries the whole prefix. The lanes stay
  // int32 (`| 0`, no `>>> 0` inside the loop) so V8 keeps them unboxed: about 10 ns per token.
  let a = (Math.floor(parent / TWO_POW_21) ^ 0x9e3779b9) | 0;
  let b = ((parent % TWO_POW_21) ^ 0x85ebca6b ^ Math.imul(count, 0xc2b2ae35)) | 0;
  const end = start + count;
  for (let i = start; i < end; i++) {
    const t = tokens[i] | 0;
    a = Math.imul(a ^ t, 0x01000193);
    a ^= a >>> 15;
    b = Math.imul(b + t + 0x7f4a7c15, 0x2c1b3c6d);
    b ^= b >>> 13;
  }
  a = Math.imul(a ^ (a >>> 16), 0x85ebca6b);
  a ^= a >>> 13;
  b = Math.imul(b ^ (b >>> 16), 0xc2b2ae35);
  b ^= b >>> 16;
  return (a >>> 0) * TWO_POW_21 + (b >>> 11);
}

/**
 * The chained hashes of every full block of `tokens` (`floor(len / blockTokens)` hashes; the trailing partial block
 * is left out), continuing from `parent` (default `ROOT_BLOCK_HASH`: the sequence starts a new chain).
 * `blockTokens`: tokens per block, an integer ≥ 1. Pure. Throws RangeError on a bad block size.
 */
export function blockHashes(
  tokens: readonly number[],
  blockTokens: number = DEFAULT_BLOCK_TOKENS,
  parent: number = ROOT_BLOCK_HASH,
): number[] {
  if (!Number.isSafeInteger(blockTokens) || blockTokens < 1) {
    throw new RangeError(`blockTokens must be an integer ≥ 1, got ${blockTokens}`);
  }
  const out: number[] = [];
  let h = parent;
  for (let start = 0; start + blockTokens <= tokens.length; start += blockTokens) {
    h = hashBlock(h, tokens, start, blockTokens);
    out.push(h);
  }
  return out;
}
