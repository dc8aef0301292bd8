/**
 * Faster call paths through `@huggingface/tokenizers`' encode for the steps a byte-level BPE tokenizer runs per call
 * (issue 9: CPU per request). Each keeps the library's results exactly: it does what the library's code does, minus
 * the generic array helpers (`flat()`, `matchAll`) and bookkeeping that cost more than the work. Measured for Qwen3 on
 * a short chat prompt (17 tokens) on the shared 2-core dev box, `encode` went from ~26 µs to ~17 µs with the
 * `Sequence` loop, and the `Split` loop takes ~0.6 instead of ~1.4 µs per section; `encode_text` in loops took it from
 * ~12–17 to ~7–8 µs CPU (same prompt, back-to-back runs). The equivalence tests encode a
 * mixed corpus with and without them (test/tokenizer/encode-paths.test.ts).
 */
import * as hf from '@huggingface/tokenizers';
import { SequenceClass } from './pre-token-cache.js';

// The package's `export *` declarations do not resolve under NodeNext; the classes are there at run time.
const exported = hf as unknown as Record<string, unknown>;
const SplitClass = exported.SplitPreTokenizer as abstract new (...args: never[]) => SplitStep;
const PreTokenizerClass = exported.PreTokenizer as abstract new (...args: never[]) => PreTokenizerStep;
const BpeClass = exported.BPE as abstract new (...args: never[]) => { cache: unknown };

/** The part of the library's `PreTokenizer` base class used here. */
interface PreTokenizerStep {
  pre_tokenize(text: string | string[], options?: unknown): string[];
  pre_tokenize_text(text: string, options?: unknown): string[];
}

/** The part of the library's `Split` pre-tokenizer used here. */
interface SplitStep extends PreTokenizerStep {
  pattern: RegExp | null;
  config: { invert?: boolean; behavior?: string };
}

/** The part of the tokenizer object used here. */
export interface EncodeInternals {
  pre_tokenizer: unknown;
  model?: unknown;
}

/**
 * Replaces the call path of a `Sequence` pre-tokenizer by a plain loop (issue 9: CPU per request). The library's
 * `Sequence` feeds the pieces through each step with `reduce`, and every step's `pre_tokenize` maps the pieces to
 * arrays and joins them with `Array.prototype.flat()`, then the call itself flattens once more; for Qwen3's
 * `Split` + `ByteLevel` that took ~7 of ~26 µs of `encode` for a short chat prompt (measured on the shared 2-core dev
 * box), against ~2 µs for this loop. The loop does what those calls do, in the same order: every step's
 * `pre_tokenize_text` on every piece the previous step produced, the results concatenated (`flat()` to depth 1 of
 * arrays of strings), the same `options` passed on; so the pre-tokens, and the ids, are the same.
 *
 * Installed only when the pre-tokenizer is a `Sequence` whose steps all keep the base class's `pre_tokenize` (the
 * library's own steps do; a step with its own would be skipped by the loop). Installs an own `_call` (what the
 * tokenizer invokes through the callable object) that takes this path for a single text and the original otherwise.
 * @returns whether the fast path was installed.
 */
export function flattenSequencePreTokenizer(tokenizer: EncodeInternals): boolean {
  if (typeof SequenceClass !== 'function' || typeof PreTokenizerClass !== 'function') return false;
  const seq = tokenizer.pre_tokenizer;
  if (!(seq instanceof SequenceClass)) return false;
  const basePreTokenize = PreTokenizerClass.prototype.pre_tokenize;
  const steps = seq.tokenizers;
  if (
    !steps.every(
      (s) => s === null || s === undefined || (s instanceof PreTokenizerClass && s.pre_tokenize === basePreTokenize),
    )
  )
    return false;
  const active = steps.filter((s): s is PreTokenizerStep => s !== null && s !== undefined);
  const target = seq as unknown as { _call(text: string | string[], options?: unknown): string[] };
  const original = target._call.bind(seq);
  target._call = (text: string | string[], options?: unknown): string[] => {
    if (typeof text !== 'string') return original(text, options);
    let pieces: string[] = [text];
    for (const step of active) {
      const next: string[] = [];
      for (const piece of pieces) {
        const out = step.pre_tokenize_text(piece, options);
        for (let i = 0; i < out.length; i++) next.push(out[i]!);
      }
      pieces = next;
    }
    return pieces;
  };
  return true;
}

/** The index after `index` in `text` for an empty match (ECMAScript AdvanceStringIndex). */
function advanceStringIndex(text: string, index: number, unicode: boolean): number {
  if (!unicode || index + 1 >= text.length) return index + 1;
  const lead = text.charCodeAt(index);
  if (lead < 0xd800 || lead > 0xdbff) return index + 1;
  const trail = text.charCodeAt(index + 1);
  return trail >= 0xdc00 && trail <= 0xdfff ? index + 2 : index + 1;
}

/**
 * Gives every `Split` step of the pre-tokenizer (itself, or the members of a `Sequence`) that splits with the
 * library's `regex_split` (not inverted, behavior other than `removed`: Qwen3's `Isolated` split) an own
 * `pre_tokenize_text` that walks the matches with `exec` instead of `String.prototype.matchAll`: the same matches
 * (a global regex from 0, an empty match advancing by one code point under the `u`/`v` flags, as `matchAll` does),
 * the same pieces (the text between matches, then each non-empty match). `lastIndex` is 0 again when it returns.
 * @returns how many steps got it.
 */
export function execRegexSplit(tokenizer: EncodeInternals): number {
  if (typeof SplitClass !== 'function' || typeof SequenceClass !== 'function') return 0;
  const pre = tokenizer.pre_tokenizer;
  const steps = pre instanceof SequenceClass ? pre.tokenizers : [pre];
  let installed = 0;
  for (const step of steps) {
    if (!(step instanceof SplitClass)) continue;
    if (
      step.pattern === null ||
      !step.pattern.global ||
      step.config.invert ||
      step.config.behavior?.toLowerCase() === 'removed'
    )
      continue;
    const library = step.pre_tokenize_text.bind(step);
    step.pre_tokenize_text = (text: string): string[] => {
      const regex = step.pattern;
      if (regex === null || !regex.global) return library(text);
      const unicode = regex.unicode || (regex as { unicodeSets?: boolean }).unicodeSets === true;
      const pieces: string[] = [];
      let prev = 0;
      regex.lastIndex = 0;
      for (let m = regex.exec(text); m !== null; m = regex.exec(text)) {
        const match = m[0];
        if (prev < m.index) pieces.push(text.slice(prev, m.index));
        if (match.length > 0) pieces.push(match);
        else regex.lastIndex = advanceStringIndex(text, regex.lastIndex, unicode);
        prev = m.index + match.length;
      }
      regex.lastIndex = 0;
      if (prev < text.length) pieces.push(text.slice(prev));
      return pieces;
    };
    installed++;
  }
  return installed;
}

/**
 * Makes a hit in the `BPE` model's word cache a plain map read: the library's `LRUCache.get` deletes and re-inserts
 * the entry on every hit (~3 Map operations per word). With this the cache evicts the oldest inserted word instead
 * of the least recently used one; it memoizes a pure function of the word, so only which words stay cached changes,
 * never the tokens. Entries and capacity are the library's (10 000 words).
 * @returns whether the model is a `BPE` with that cache.
 */
export function plainBpeCacheReads(tokenizer: EncodeInternals): boolean {
  if (typeof BpeClass !== 'function' || !(tokenizer.model instanceof BpeClass)) return false;
  const cache = tokenizer.model.cache as { cache?: unknown; get?: unknown } | null;
  if (cache === null || typeof cache !== 'object' || !(cache.cache instanceof Map) || typeof cache.get !== 'function')
    return false;
  const entries = cache.cache;
  cache.get = (key: string): unknown => entries.get(key);
  return true;
}

/** The part of the library's `Tokenizer` that `encode_text` reads. */
interface EncodeTextInternals {
  encode_text(text: string | null): string[] | null;
  splitter_unnormalized: { split(text: string): string[] };
  splitter_normalized: { split(text: string): string[] };
  added_tokens_map: Map<string, { lstrip?: boolean; rstrip?: boolean }>;
  remove_space?: boolean;
  do_lowercase_and_remove_accent?: boolean;
  normalizer: ((text: string) => string) | null;
  pre_tokenizer: ((text: string, options: { section_index: number }) => string[]) | null;
  model: (tokens: string[]) => string[];
}

/**
 * Replaces the tokenizer's `encode_text` (the text → tokens step of every encode) by the same steps in plain loops
 * (issue 9: CPU per request): the library's version walks the added-token sections with `forEach` and two nested
 * `flatMap`s, a closure and an intermediate array per section. This does the same, in the same order, on the same
 * values: split on added tokens; trim next to an added token with `lstrip` / `rstrip` (a neighbour edited before it
 * is visited is read edited, as in `forEach`); per section, an added token as is, otherwise `remove_space`,
 * lowercase-and-strip-accents, the normalizer, the normalized split, and per subsection an added token as is or the
 * pre-tokenizer (with `section_index`) and the model; every piece appended in order (what `flatMap` concatenates).
 * The library's helper `lowercase_and_remove_accents` is not exported, so a tokenizer that sets
 * `do_lowercase_and_remove_accent` keeps the library's path.
 * @returns whether the loop was installed.
 */
export function loopEncodeText(tokenizer: unknown): boolean {
  const t = tokenizer as EncodeTextInternals;
  if (
    typeof t?.encode_text !== 'function' ||
    Object.hasOwn(t, 'encode_text') ||
    t.do_lowercase_and_remove_accent === true
  )
    return false;
  if (
    typeof t.splitter_unnormalized?.split !== 'function' ||
    typeof t.splitter_normalized?.split !== 'function' ||
    !(t.added_tokens_map instanceof Map)
  )
    return false;
  const added = t.added_tokens_map;
  const trimAround = (parts: string[]): void => {
    for (let i = 0; i < parts.length; i++) {
      const token = added.get(parts[i]!);
      if (token === undefined) continue;
      if (token.lstrip && i > 0) parts[i - 1] = parts[i - 1]!.trimEnd();
      if (token.rstrip && i < parts.length - 1) parts[i + 1] = parts[i + 1]!.trimStart();
    }
  };
  t.encode_text = function encodeText(this: EncodeTextInternals, text: string | null): string[] | null {
    if (text === null) return null;
    const out: string[] = [];
    const sections = this.splitter_unnormalized.split(text);
    trimAround(sections);
    for (let sectionIndex = 0; sectionIndex < sections.length; sectionIndex++) {
      let section = sections[sectionIndex]!;
      if (section.length === 0) continue;
      if (added.has(section)) {
        out.push(section);
        continue;
      }
      if (this.remove_space === true) section = section.trim().split(/\s+/).join(' ');
      if (this.normalizer !== null) section = this.normalizer(section);
      if (section.length === 0) continue;
      const subsections = this.splitter_normalized.split(section);
      trimAround(subsections);
      for (const subsection of subsections) {
        if (subsection.length === 0) continue;
        if (added.has(subsection)) {
          out.push(subsection);
          continue;
        }
        const pieces =
          this.pre_tokenizer !== null ? this.pre_tokenizer(subsection, { section_index: sectionIndex }) : [subsection];
        const tokens = this.model(pieces);
        for (let i = 0; i < tokens.length; i++) out.push(tokens[i]!);
      }
    }
    return out;
  };
  return true;
}
