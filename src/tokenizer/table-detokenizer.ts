/**
 * Table-driven incremental detokenization of one output sequence (gateway.md section 5) for byte-level BPE
 * tokenizers: each token's bytes come from the id → bytes table built at load (./token-text-table.ts) and go through a
 * streaming UTF-8 decoder (./utf8-stream.ts); a token of whole characters is appended as its precomputed text.
 * O(1) per token with no call into the tokenizer library, against ./detokenizer.ts' re-decode of a window of up to 16
 * tokens per token.
 *
 * Output contract, identical to `IncrementalDetokenizer` delta for delta (test/tokenizer/table-detokenizer.test.ts
 * checks it over random Qwen3 id sequences and chunkings): after each `push` the text emitted so far is the one-shot
 * `decode` of every id pushed so far, minus one trailing U+FFFD when that decode ends with one, whether that
 * U+FFFD stands for an incomplete character (completed or flushed later) or for invalid bytes (released as soon as
 * anything follows). `finish()` releases the rest, so the concatenation of all deltas equals `decode` byte for byte.
 * Special tokens: with `skipSpecialTokens` they are dropped before decoding (the bytes on either side join, like
 * `decode`); without, they are added tokens like `<think>`: emitted as their text, and the UTF-8 decoder restarts
 * around them (an incomplete character before one becomes U+FFFD, as in `decode`).
 */
import { InvalidTokenIdError } from './errors.js';
import { REPLACEMENT_CHARACTER, Utf8StreamDecoder } from './utf8-stream.js';
import { TOKEN_ADDED, TOKEN_SPECIAL, TOKEN_VALID, freshText, type TokenTextTable } from './token-text-table.js';

/**
 * Throws the tokenizer's own InvalidTokenIdError (a RangeError) or TypeError for the first invalid id of `ids`
 * (GatewayTokenizer.validateTokenIds).
 */
export type TokenIdValidator = (ids: readonly number[]) => void;

/**
 * Streams the text of one generated sequence from a {@link TokenTextTable}. Feed each engine output's new token ids
 * to {@link push}, call {@link finish} once when the sequence ends. One per sub-request; not shared.
 */
export class TableDetokenizer {
  private readonly table: TokenTextTable;
  private readonly validate: TokenIdValidator;
  /** Flag bits that make a token skipped: TOKEN_SPECIAL when skipping special tokens, else none. */
  private readonly skipMask: number;
  private readonly utf8 = new Utf8StreamDecoder();
  /** A U+FFFD decoded but not emitted yet (it ended the text with no sequence pending; see the module comment). */
  private held = false;
  private emittedText = '';
  private finished = false;
  private tokens = 0;

  /**
   * @param table the tokenizer's id → bytes table.
   * @param validate called with a push's ids when one is not a token id; must throw (the tokenizer's message).
   * @param opts.skipSpecialTokens drop special tokens from the text (default true, the OpenAI/vLLM default).
   */
  constructor(table: TokenTextTable, validate: TokenIdValidator, opts: { skipSpecialTokens?: boolean } = {}) {
    this.table = table;
    this.validate = validate;
    this.skipMask = (opts.skipSpecialTokens ?? true) ? TOKEN_SPECIAL : 0;
  }

  /** All text emitted so far (the concatenation of every `push` and `finish` result). */
  get text(): string {
    return this.emittedText;
  }

  /** Token ids accepted so far (including skipped special tokens). */
  get tokenCount(): number {
    return this.tokens;
  }

  /**
   * Accepts the next token ids of the sequence (any count, including none) and returns the newly stable text:
   * never a partial UTF-8 character, possibly '' while a character is incomplete.
   * @throws InvalidTokenIdError (a RangeError; the validator's, else one naming the id the table lacks) when an id is
   *   not a token id (nothing of this call is consumed then), TypeError when `ids` is not an array, Error after
   *   finish().
   */
  push(ids: readonly number[]): string {
    if (this.finished) throw new Error('TableDetokenizer.push called after finish()');
    const { flags, fresh, bytes, byteStart } = this.table;
    if (!Array.isArray(ids)) this.rejectIds(ids);
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i];
      if (typeof id !== 'number' || ((flags[id] ?? 0) & TOKEN_VALID) === 0) this.rejectIds(ids);
    }
    this.tokens += ids.length;
    const utf8 = this.utf8;
    let out = this.held ? REPLACEMENT_CHARACTER : '';
    this.held = false;
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      const f = flags[id]!;
      if ((f & this.skipMask) !== 0) continue;
      if ((f & TOKEN_ADDED) !== 0) {
        out += utf8.flush() + fresh[id]!;
        continue;
      }
      let text = utf8.pending ? null : fresh[id];
      if (text === undefined) text = freshText(this.table, id);
      out += text ?? utf8.write(bytes, byteStart[id]!, byteStart[id + 1]!);
    }
    if (!utf8.pending && out.endsWith(REPLACEMENT_CHARACTER)) {
      out = out.slice(0, -1);
      this.held = true;
    }
    this.emittedText += out;
    return out;
  }

  /**
   * Ends the sequence and returns whatever was held back (an incomplete or invalid trailing character, as the
   * U+FFFD that one-shot decode also produces). Later calls return ''.
   */
  finish(): string {
    if (this.finished) return '';
    this.finished = true;
    const out = (this.held ? REPLACEMENT_CHARACTER : '') + this.utf8.flush();
    this.held = false;
    this.emittedText += out;
    return out;
  }

  private rejectIds(ids: unknown): never {
    this.validate(ids as readonly number[]);
    // The validator accepted what the table refuses: name the first id the table has no token for.
    const list = ids as readonly unknown[];
    const flags = this.table.flags;
    const at = list.findIndex((id) => typeof id !== 'number' || ((flags[id] ?? 0) & TOKEN_VALID) === 0);
    throw new InvalidTokenIdError(list[at], at, flags.length);
  }
}
