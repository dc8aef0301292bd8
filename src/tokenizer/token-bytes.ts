/**
 * The longest token of a tokenizer in bytes, and the cheap lower bound on a text's token count it gives: every token
 * covers at most L UTF-8 bytes of the (normalized) text, so a text of B bytes has at least ceil(B / L) tokens. The
 * HTTP layer uses it to refuse a prompt that cannot fit the context before tokenizing it (gateway.md 9.2), since
 * tokenizing megabytes blocks the event loop for seconds.
 *
 * The bound is only claimed where it provably holds; otherwise L is `Infinity` and the bound is 0 (no early refusal):
 * - model `BPE` whose vocabulary covers every byte: a `ByteLevel` pre-tokenizer (each vocabulary character stands for
 *   one byte, so a token covers as many bytes as it has characters: Qwen3, GPT-2, Llama 3) or `byte_fallback`
 *   (SentencePiece style; a token's UTF-8 length is then an upper bound, e.g. '▁' is 3 bytes for 1 byte of text),
 *   with all 256 byte tokens present, so no text falls through to an unknown token;
 * - a normalizer that is absent or only Unicode normal forms (NFC, NFD, NFKC, NFKD, or a `Sequence` of them):
 *   the bound is taken over the text after the same forms (`String.prototype.normalize`, which is what
 *   `@huggingface/tokenizers` runs). Composition never lengthens the UTF-8 text, so normalizing the whole text is
 *   never longer than normalizing the pieces between added tokens separately. Any other normalizer (Lowercase,
 *   Strip, StripAccents, BertNormalizer, Replace, Precompiled) can shrink text and disables the bound;
 * - pre-tokenizers that only split or map bytes (Split other than `Removed`, ByteLevel, Metaspace, Digits,
 *   Punctuation other than `Removed`, or a `Sequence` of them): whitespace-dropping ones disable it;
 * - no added token with `lstrip`/`rstrip` (those swallow neighbouring whitespace) and no `truncation`.
 * Added tokens (e.g. '<|im_start|>') count with the UTF-8 length of their content.
 */
import type { JsonObject } from './model-files.js';

/** This module's URL: the tokenizer load cache keys its entries on this module's source (./load-cache.ts). */
export const TOKEN_BYTES_MODULE_URL = import.meta.url;

/** A Unicode normal form the bound applies before measuring. */
export type NormalForm = 'NFC' | 'NFD' | 'NFKC' | 'NFKD';

/**
 * What the bound needs: `maxTokenBytes` = L in UTF-8 bytes (`Infinity` when no bound can be claimed, with `reason`
 * saying why) and the normal forms to apply to a text before measuring it.
 */
export interface TokenByteBound {
  maxTokenBytes: number;
  forms: NormalForm[];
  reason: string | null;
}

const NORMAL_FORMS = new Set<string>(['NFC', 'NFD', 'NFKC', 'NFKD']);

/** Whether `v` names a Unicode normal form the bound applies (`NormalForm`). */
export function isNormalForm(v: unknown): v is NormalForm {
  return typeof v === 'string' && NORMAL_FORMS.has(v);
}
const SPLITTING_PRE_TOKENIZERS = new Set(['Split', 'ByteLevel', 'Metaspace', 'Digits', 'Punctuation']);

function isObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The normal forms of a normalizer entry, or a reason string when it is not forms only. */
function normalForms(normalizer: unknown): NormalForm[] | string {
  if (normalizer === null || normalizer === undefined) return [];
  if (!isObject(normalizer)) return 'normalizer is not an object';
  const type = normalizer.type;
  if (typeof type === 'string' && NORMAL_FORMS.has(type)) return [type as NormalForm];
  if (type === 'Sequence' && Array.isArray(normalizer.normalizers)) {
    const out: NormalForm[] = [];
    for (const n of normalizer.normalizers) {
      const forms = normalForms(n);
      if (typeof forms === 'string') return forms;
      out.push(...forms);
    }
    return out;
  }
  return `normalizer ${String(type)} can shrink text`;
}

/** Pre-tokenizer types in a (possibly nested) entry, or a reason string when one may drop text. */
function preTokenizerTypes(pre: unknown): string[] | string {
  if (pre === null || pre === undefined) return [];
  if (!isObject(pre)) return 'pre_tokenizer is not an object';
  if (pre.type === 'Sequence' && Array.isArray(pre.pretokenizers)) {
    const out: string[] = [];
    for (const p of pre.pretokenizers) {
      const types = preTokenizerTypes(p);
      if (typeof types === 'string') return types;
      out.push(...types);
    }
    return out;
  }
  const type = String(pre.type);
  if (!SPLITTING_PRE_TOKENIZERS.has(type)) return `pre-tokenizer ${type} may drop text`;
  if (pre.behavior === 'Removed') return `pre-tokenizer ${type} with behavior Removed drops text`;
  return [type];
}

/** Code points of `s` (one per byte for a byte-level vocabulary entry). */
function codePoints(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) i++;
    n++;
  }
  return n;
}

/**
 * The 256 characters GPT-2's byte-level mapping gives the bytes 0..255 (`bytes_to_unicode`; index = byte): printable
 * bytes (33..126, 161..172, 174..255) stand for themselves, the others for U+0100 upwards in byte order.
 */
export function byteLevelAlphabet(): string[] {
  const out: string[] = [];
  let next = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    out.push(String.fromCodePoint(printable ? b : next++));
  }
  return out;
}

/** SentencePiece byte-fallback tokens '<0x00>'..'<0xFF>'. */
function byteFallbackTokens(): string[] {
  return Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
}

const unbounded = (reason: string): TokenByteBound => ({ maxTokenBytes: Infinity, forms: [], reason });

/**
 * Analyse a parsed `tokenizer.json`: L (the most UTF-8 bytes one token can cover) and the normal forms to measure
 * under. Never throws: anything it cannot prove gives `maxTokenBytes: Infinity` and a `reason`.
 * Qwen3: L = 128 (the token of 128 'Ġ', i.e. 128 spaces), forms ['NFC'].
 */
export function analyzeTokenByteBound(tokenizerJson: JsonObject): TokenByteBound {
  const model = tokenizerJson.model;
  if (!isObject(model) || model.type !== 'BPE')
    return unbounded(`model type ${isObject(model) ? String(model.type) : '?'} is not BPE`);
  if (tokenizerJson.truncation !== null && tokenizerJson.truncation !== undefined)
    return unbounded('truncation is configured');
  const forms = normalForms(tokenizerJson.normalizer);
  if (typeof forms === 'string') return unbounded(forms);
  const pre = preTokenizerTypes(tokenizerJson.pre_tokenizer);
  if (typeof pre === 'string') return unbounded(pre);
  const byteLevel = pre.includes('ByteLevel');
  if (!byteLevel && model.byte_fallback !== true)
    return unbounded('the vocabulary does not cover every byte (no ByteLevel, no byte_fallback)');
  const vocab = model.vocab;
  if (!isObject(vocab)) return unbounded('model.vocab is not an object');
  const byteTokens = byteLevel ? byteLevelAlphabet() : byteFallbackTokens();
  const missing = byteTokens.find((t) => !Object.hasOwn(vocab, t));
  if (missing !== undefined) return unbounded(`byte token ${JSON.stringify(missing)} is missing from the vocabulary`);

  let max = 0;
  for (const token of Object.keys(vocab)) {
    const bytes = byteLevel ? codePoints(token) : Buffer.byteLength(token, 'utf8');
    if (bytes > max) max = bytes;
  }
  const added = Array.isArray(tokenizerJson.added_tokens) ? tokenizerJson.added_tokens : [];
  for (const entry of added) {
    if (!isObject(entry) || typeof entry.content !== 'string') continue;
    if (entry.lstrip === true || entry.rstrip === true)
      return unbounded(`added token ${JSON.stringify(entry.content)} strips whitespace`);
    max = Math.max(max, Buffer.byteLength(entry.content, 'utf8'));
  }
  if (max === 0) return unbounded('empty vocabulary');
  return { maxTokenBytes: max, forms, reason: null };
}

/**
 * The UTF-8 size of `text` after `forms` (in order), in bytes. Linear in the text. An ASCII text (its UTF-8 size is
 * its length) is its own normal form in NFC, NFD, NFKC and NFKD (Unicode UAX #15: every ASCII character is stable
 * under all four), so it is measured without normalizing: `normalize` took 4–70 ms for 4–7 MB of ASCII on the dev
 * box, `Buffer.byteLength` ~1 ms; other texts are normalized first.
 */
export function normalizedByteLength(text: string, forms: readonly NormalForm[]): number {
  const raw = Buffer.byteLength(text, 'utf8');
  if (raw === text.length || forms.length === 0) return raw;
  let t = text;
  for (const form of forms) t = t.normalize(form);
  return Buffer.byteLength(t, 'utf8');
}
