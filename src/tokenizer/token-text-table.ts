/**
 * The id → bytes table of a byte-level BPE tokenizer (Qwen3, GPT-2, Llama 3 style), built once at load, from which
 * ./table-detokenizer.ts streams text without calling the tokenizer library per token.
 *
 * What one-shot decode does (gateway.md 5; `@huggingface/tokenizers` 0.2.0 `Tokenizer.decode` with the `ByteLevel`
 * decoder, the same as HF `tokenizers`' ByteLevel `decode_chain` for vocabularies like Qwen3's):
 * - each id becomes its vocabulary string (an added token's `content`);
 * - a string equal to an added token's `content` is emitted as it is, and the byte runs on either side of it are
 *   decoded separately (an incomplete character before it becomes U+FFFD);
 * - every other string is mapped character by character through the inverse of GPT-2's `bytes_to_unicode` (a
 *   character outside that alphabet becomes the byte 0, as the library's `Uint8Array` conversion does), and each run
 *   of such bytes is decoded as UTF-8 with replacement (WHATWG; BOM kept);
 * - the pieces are joined with '' (no `spaces_between_special_tokens`, no clean-up).
 * So a token's contribution is a fixed byte string (or a fixed text for an added token), and streaming is a UTF-8
 * decoder over the concatenated bytes that is flushed at every added token.
 *
 * The table can express exactly that, so it is only built when the tokenizer decodes that way: the decoder is
 * `ByteLevel` alone (not a `Sequence`, not `Metaspace`/`ByteFallback`/`WordPiece`/`BPEDecoder`/`CTC`...), the model
 * has no `end_of_word_suffix` (decode would replace it with a space), and no vocabulary string has a lone surrogate
 * (which could pair with the next token's when the strings are joined). Otherwise {@link buildTokenTextTable} says
 * why and the caller keeps the window detokenizer (./detokenizer.ts), which works for every decoder.
 */
import type { JsonObject } from './model-files.js';
import { hashString, type StringList } from './string-list.js';
import { byteLevelAlphabet } from './token-bytes.js';
import { Utf8StreamDecoder } from './utf8-stream.js';

/** `flags` bit: the id names a token (the ids `GatewayTokenizer.validateTokenIds` accepts). */
export const TOKEN_VALID = 1;
/** `flags` bit: an added token: its text is emitted as-is and UTF-8 decoding restarts around it. */
export const TOKEN_ADDED = 2;
/** `flags` bit: a special token, dropped with `skip_special_tokens` (`GatewayTokenizer.isSpecialToken`). */
export const TOKEN_SPECIAL = 4;

/**
 * The table, indexed by token id (0..vocabSize-1):
 * - `flags[id]`: TOKEN_VALID | TOKEN_ADDED | TOKEN_SPECIAL bits (0 = no such token);
 * - the bytes of a non-added token: `bytes[byteStart[id] .. byteStart[id + 1])`;
 * - `fresh[id]`: the text the token decodes to when no UTF-8 sequence is pending before it and none is pending after
 *   it (the common case: a token of whole characters), so it can be appended without decoding; null when the token
 *   ends inside a character (or starts one it cannot finish). For an added token: its content, from the start; for
 *   any other token undefined until {@link freshText} first computes it (a string per token at load was ~40 ms and
 *   7 MB per process, for the few thousand ids a process ever emits).
 */
export interface TokenTextTable {
  readonly vocabSize: number;
  readonly flags: Uint8Array;
  readonly byteStart: Uint32Array;
  readonly bytes: Uint8Array;
  readonly fresh: Array<string | null | undefined>;
}

/** Reused by {@link freshText}: flushed after every use, so it starts each token fresh. */
const freshDecoder = new Utf8StreamDecoder();

/**
 * `table.fresh[id]` for a valid, non-added token id, computed from its bytes and kept on first call.
 * @returns the token's text, or null when it ends inside a character (or starts one it cannot finish).
 */
export function freshText(table: TokenTextTable, id: number): string | null {
  const known = table.fresh[id];
  if (known !== undefined) return known;
  const text = freshDecoder.write(table.bytes, table.byteStart[id]!, table.byteStart[id + 1]!);
  const value = freshDecoder.pending ? null : text;
  freshDecoder.flush();
  table.fresh[id] = value;
  return value;
}

/** What {@link buildTokenTextTable} needs from a loaded tokenizer. */
export interface TokenTextTableSource {
  /** The parsed tokenizer.json (its `decoder`, `model.end_of_word_suffix`, `added_tokens`). */
  tokenizerJson: JsonObject;
  /** Largest id + 1. */
  vocabSize: number;
  /** The vocabulary string of `id` (an added token's content), undefined when the id names no token. */
  tokenString(id: number): string | undefined;
  /** Whether `id` is dropped with `skip_special_tokens`. */
  isSpecial(id: number): boolean;
  /**
   * The same strings as `tokenString`, as one list of `vocabSize` items (the tokenizer load cache's, ./load-cache.ts),
   * when there is one: the table is then built from its text without a string per token (~30 ms less for Qwen3).
   */
  vocabList?: StringList;
}

/** The table, or why this tokenizer's decode cannot be expressed by one. */
export type TokenTextTableResult = { table: TokenTextTable; reason: null } | { table: null; reason: string };

function isObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Code points of `s` (a surrogate pair counts once). */
function codePointCount(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) n--;
  }
  return n;
}

/** Whether `s` has a UTF-16 surrogate that is not half of a pair. */
function hasLoneSurrogate(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const next = s.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) i++;
      else return true;
    } else if (c >= 0xdc00 && c <= 0xdfff) return true;
  }
  return false;
}

/**
 * Builds the table of a byte-level BPE tokenizer in two passes over the vocabulary (about 50–70 ms for Qwen3's
 * 151 669 ids once warm, 1 MB of bytes; measured on the dev box; the texts are computed per id on first use). Never throws: a tokenizer it cannot express gives `table: null` and a
 * `reason` (see the module comment for the conditions).
 */
export function buildTokenTextTable(source: TokenTextTableSource): TokenTextTableResult {
  const { tokenizerJson, vocabSize } = source;
  const decoder = tokenizerJson.decoder;
  if (!isObject(decoder) || decoder.type !== 'ByteLevel') {
    const type = isObject(decoder) ? String(decoder.type) : 'none';
    return { table: null, reason: `decoder ${type} is not ByteLevel` };
  }
  const model = isObject(tokenizerJson.model) ? tokenizerJson.model : {};
  if (typeof model.end_of_word_suffix === 'string' && model.end_of_word_suffix !== '') {
    return {
      table: null,
      reason: `model end_of_word_suffix ${JSON.stringify(model.end_of_word_suffix)} is replaced by decode`,
    };
  }
  const addedContents = new Set<string>();
  for (const entry of Array.isArray(tokenizerJson.added_tokens) ? tokenizerJson.added_tokens : []) {
    if (isObject(entry) && typeof entry.content === 'string') addedContents.add(entry.content);
  }

  // Alphabet characters are all below U+0144; anything else (and every astral code point) is the byte 0.
  const byteOf = new Int16Array(0x144).fill(-1);
  byteLevelAlphabet().forEach((ch, b) => (byteOf[ch.charCodeAt(0)] = b));
  const list = source.vocabList;
  if (list !== undefined && list.length === vocabSize) return tableFromList(list, source, addedContents, byteOf);

  const strings: (string | undefined)[] = new Array(vocabSize);
  const flags = new Uint8Array(vocabSize);
  let total = 0;
  for (let id = 0; id < vocabSize; id++) {
    const s = source.tokenString(id);
    strings[id] = s;
    if (s === undefined) continue;
    if (hasLoneSurrogate(s)) return { table: null, reason: `token ${id} has a lone UTF-16 surrogate` };
    let f = TOKEN_VALID;
    if (addedContents.has(s)) f |= TOKEN_ADDED;
    if (source.isSpecial(id)) f |= TOKEN_SPECIAL;
    flags[id] = f;
    if ((f & TOKEN_ADDED) === 0) total += codePointCount(s);
  }

  const byteStart = new Uint32Array(vocabSize + 1);
  const bytes = new Uint8Array(total);
  const fresh = new Array<string | null | undefined>(vocabSize);
  let at = 0;
  for (let id = 0; id < vocabSize; id++) {
    byteStart[id] = at;
    const s = strings[id];
    if (s === undefined) continue;
    if ((flags[id]! & TOKEN_ADDED) !== 0) {
      fresh[id] = s;
      continue;
    }
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0xd800 && c <= 0xdbff) i++; // a pair (no lone surrogates here) is one code point
      bytes[at++] = c < 0x144 ? Math.max(0, byteOf[c]!) : 0;
    }
  }
  byteStart[vocabSize] = at;
  return { table: { vocabSize, flags, byteStart, bytes, fresh }, reason: null };
}

/**
 * {@link buildTokenTextTable}'s two passes as one walk over `list`'s joined text, for a dense vocabulary list (every id
 * 0..vocabSize-1 a token): the same table, and the same refusal of a lone surrogate. An id's string is made only when
 * its hash is an added token's, to compare it with that token's content.
 */
function tableFromList(
  list: StringList,
  source: TokenTextTableSource,
  addedContents: ReadonlySet<string>,
  byteOf: Int16Array,
): TokenTextTableResult {
  const vocabSize = list.length;
  const text = list.joined();
  const addedHashes = new Set([...addedContents].map(hashString));
  const flags = new Uint8Array(vocabSize);
  const byteStart = new Uint32Array(vocabSize + 1);
  // At most a byte per code unit; trimmed to what was written at the end.
  const bytes = new Uint8Array(text.length);
  const fresh = new Array<string | null | undefined>(vocabSize);
  let at = 0;
  for (let id = 0; id < vocabSize; id++) {
    byteStart[id] = at;
    let f = TOKEN_VALID;
    if (addedHashes.has(list.hashAt(id))) {
      const s = list.at(id)!;
      if (addedContents.has(s)) {
        f |= TOKEN_ADDED;
        fresh[id] = s;
      }
    }
    if (source.isSpecial(id)) f |= TOKEN_SPECIAL;
    flags[id] = f;
    const added = (f & TOKEN_ADDED) !== 0;
    const end = list.itemEnd(id);
    for (let i = list.itemStart(id); i < end; i++) {
      const c = text.charCodeAt(i);
      if (c >= 0xd800 && c <= 0xdfff) {
        const next = i + 1 < end ? text.charCodeAt(i + 1) : 0;
        if (c > 0xdbff || next < 0xdc00 || next > 0xdfff) {
          return { table: null, reason: `token ${id} has a lone UTF-16 surrogate` };
        }
        i++; // a pair is one code point, and no alphabet character: the byte 0
        if (!added) bytes[at++] = 0;
        continue;
      }
      if (!added) bytes[at++] = c < 0x144 ? Math.max(0, byteOf[c]!) : 0;
    }
  }
  byteStart[vocabSize] = at;
  return { table: { vocabSize, flags, byteStart, bytes: bytes.slice(0, at), fresh }, reason: null };
}
