/**
 * A per-word cache in front of the byte-level pre-tokenizer step of `@huggingface/tokenizers` (issue 9: CPU per
 * request).
 *
 * Byte-level BPE tokenizers whose pre-tokenizer is `Sequence[Split(regex), ByteLevel(use_regex: false)]` (Qwen3,
 * Llama 3) first split a text into words with the regex, then map each word's UTF-8 bytes to the byte-level alphabet
 * (`ByteLevel.pre_tokenize_text`: `TextEncoder.encode` plus an `Array.from(..., map).join('')` per word). That mapping
 * was half of `encode` for a short chat prompt (24 of 47 µs for 17 tokens, measured on the shared 2-core dev box),
 * against 1.3 µs for the BPE step the library already caches per word (its `BPE` model: an LRU of 10 000 words of at
 * most 256 characters). This puts the same kind of cache in front of the byte-level mapping: it is a pure function of
 * the word and the step's fixed configuration, so a cached word gives the same pre-tokens, and so the same ids.
 *
 * Only a `ByteLevel` step with `use_regex: false` is cached: it is then fed single words by the `Split` before it. A
 * `ByteLevel` that splits with its own regex is fed whole text sections (a whole prompt), which is not cached.
 */
import * as hf from '@huggingface/tokenizers';

/** Most words kept, and the longest word cached (UTF-16 units): the library's own BPE word cache bounds. */
export const PRE_TOKEN_CACHE_CAPACITY = 10_000;
export const PRE_TOKEN_CACHE_MAX_WORD_LENGTH = 256;

/** The part of `ByteLevelPreTokenizer` used here (the package's declarations do not resolve under NodeNext). */
interface ByteLevelStep {
  use_regex: boolean;
  pre_tokenize_text(text: string, options?: unknown): string[];
}

/** The part of the tokenizer object used here: its pre-tokenizer (a step, a `Sequence` of steps, or null). */
interface WithPreTokenizer {
  pre_tokenizer: unknown;
}

// The package's `export *` declarations do not resolve under NodeNext; the classes are there at run time.
const exported = hf as unknown as Record<string, unknown>;
const ByteLevelClass = exported.ByteLevelPreTokenizer as abstract new (...args: never[]) => ByteLevelStep;
/** The library's `Sequence` pre-tokenizer class (also used by ./encode-paths.ts). */
export const SequenceClass = exported.SequencePreTokenizer as abstract new (...args: never[]) => {
  tokenizers: unknown[];
};

/** The word-fed byte-level steps of a pre-tokenizer (itself, or the members of a `Sequence`). */
function wordFedByteLevelSteps(preTokenizer: unknown): ByteLevelStep[] {
  if (typeof ByteLevelClass !== 'function' || typeof SequenceClass !== 'function') return [];
  const steps = preTokenizer instanceof SequenceClass ? preTokenizer.tokenizers : [preTokenizer];
  return steps.filter((s): s is ByteLevelStep => s instanceof ByteLevelClass && s.use_regex === false);
}

/**
 * Puts a bounded word → pre-tokens cache in front of every word-fed byte-level step of `tokenizer` (an
 * `@huggingface/tokenizers` `Tokenizer`). When full, the oldest word goes (first in, first out). Words longer than
 * {@link PRE_TOKEN_CACHE_MAX_WORD_LENGTH} are mapped without caching. Each call returns a fresh array. `capacity`
 * (words, ≥ 1) defaults to {@link PRE_TOKEN_CACHE_CAPACITY}.
 * @returns how many steps got a cache (0 when the tokenizer has none of that shape; nothing changes then).
 */
export function cacheByteLevelWords(tokenizer: WithPreTokenizer, capacity = PRE_TOKEN_CACHE_CAPACITY): number {
  const steps = wordFedByteLevelSteps(tokenizer.pre_tokenizer);
  for (const step of steps) {
    const uncached = step.pre_tokenize_text.bind(step);
    const cache = new Map<string, string[]>();
    step.pre_tokenize_text = (text: string, options?: unknown): string[] => {
      const hit = cache.get(text);
      if (hit !== undefined) return hit.slice();
      const tokens = uncached(text, options);
      if (text.length <= PRE_TOKEN_CACHE_MAX_WORD_LENGTH) {
        if (cache.size >= capacity) cache.delete(cache.keys().next().value as string);
        cache.set(text, tokens.slice());
      }
      return tokens;
    };
  }
  return steps.length;
}
