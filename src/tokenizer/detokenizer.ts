/**
 * UTF-8-safe incremental detokenization of one output sequence (gateway.md section 5).
 *
 * Requirements (gateway.md section 5): never emit a partial UTF-8 character (vLLM #48853); the concatenation of all
 * deltas equals the one-shot `decode` of all ids byte for byte; the decoding window is bounded so a run of U+FFFD
 * cannot grow it without limit (SGLang PR #34852: an unbounded window is quadratic and emits nothing).
 *
 * Method. Like vLLM's `detokenize_incrementally`, each new token re-decodes only a short window of recent tokens
 * and emits the part of the window text past an offset, so the text of a token is computed in the context of the
 * tokens before it (a multi-byte character split across byte-level BPE tokens, a SentencePiece leading space).
 * Two differences make the window safe to bound:
 * - The offset is kept in characters of the window text (`emitted`), not in tokens. After each token the window
 *   text is final except for one trailing U+FFFD: the decoders here (ByteLevel, ByteFallback) turn bytes into text
 *   with a WHATWG UTF-8 decoder, whose output for a byte prefix is final except for the single U+FFFD it writes for
 *   an incomplete sequence at the end. So everything but a trailing U+FFFD is emitted at once, and a genuinely
 *   invalid byte (a lone continuation byte) is flushed as soon as any later character exists, or by `finish()`.
 * - When the window reaches {@link MAX_WINDOW_TOKENS} it is cut to its last {@link KEEP_TOKENS} tokens and the
 *   offset is recomputed as "all of the new window's text except a trailing U+FFFD". This is exact: a UTF-8 decoder
 *   started at any byte agrees with the full-stream decoder after at most 3 bytes (it resynchronises at the first
 *   byte that is not a continuation byte, and a pending sequence needs at most 3 more bytes), every window token
 *   carries at least one byte or is an added token that restarts decoding, and 6 > 4 tokens, so the only text that
 *   can still change (the trailing incomplete character) lies where both decoders agree.
 * Cost per token is one decode of at most 16 tokens, plus one decode of 6 tokens every 10 tokens: O(1) per token,
 * independent of the sequence length ({@link IncrementalDetokenizer.decodedTokens} counts it).
 *
 * Special tokens: with `skipSpecialTokens` they are dropped before they enter the window, exactly as `decode` drops
 * them before decoding (bytes on either side join). Tokenization-space clean-up is never applied (as in `decode`).
 * Supported decoders: those whose text for a token prefix is final apart from a trailing U+FFFD, which covers
 * byte-level BPE (Qwen, Llama 3, GPT-2 style) and SentencePiece byte-fallback tokenizers (Metaspace, Replace,
 * ByteFallback, Fuse, Strip, WordPiece); not BPEDecoder with an end-of-word suffix or CTC.
 */
import { TableDetokenizer } from './table-detokenizer.js';
import type { GatewayTokenizer } from './tokenizer.js';

const REPLACEMENT_CHARACTER = '\uFFFD';

/** Window length (tokens) at which the window is cut back. */
export const MAX_WINDOW_TOKENS = 16;
/** Tokens kept when the window is cut back (must be > 4; see the module comment). */
export const KEEP_TOKENS = 6;

/** Length of the part of `text` that can no longer change: all of it except a trailing U+FFFD. */
function stableLength(text: string): number {
  return text.endsWith(REPLACEMENT_CHARACTER) ? text.length - 1 : text.length;
}

/**
 * Streams the text of one generated sequence. Feed each engine output's new token ids to {@link push}, call
 * {@link finish} once when the sequence ends. Not shared across sequences (one per sub-request, gateway.md 5).
 */
export class IncrementalDetokenizer {
  private readonly tokenizer: GatewayTokenizer;
  private readonly skipSpecialTokens: boolean;
  /** Recent token ids (special ones already dropped when skipping); at most MAX_WINDOW_TOKENS. */
  private window: number[] = [];
  /** UTF-16 code units of `decode(window)` already emitted. */
  private emitted = 0;
  private emittedText = '';
  private finished = false;
  private work = 0;
  private tokens = 0;

  /**
   * @param tokenizer the loaded tokenizer whose `decode` defines the expected text.
   * @param opts.skipSpecialTokens drop special tokens from the text (default true, the OpenAI/vLLM default).
   */
  constructor(tokenizer: GatewayTokenizer, opts: { skipSpecialTokens?: boolean } = {}) {
    this.tokenizer = tokenizer;
    this.skipSpecialTokens = opts.skipSpecialTokens ?? true;
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
   * Work counter: the total number of token ids passed to the tokenizer's `decode` by this detokenizer. Grows
   * linearly with the tokens pushed (at most ~16.6 per token), never quadratically.
   */
  get decodedTokens(): number {
    return this.work;
  }

  /**
   * Accepts the next token ids of the sequence (any count, including none) and returns the newly stable text:
   * never a partial UTF-8 character, possibly '' while a character is incomplete.
   * @throws InvalidTokenIdError (a RangeError) when an id is not a token id (nothing of this call is consumed then),
   *   Error after finish().
   */
  push(ids: readonly number[]): string {
    if (this.finished) throw new Error('IncrementalDetokenizer.push called after finish()');
    this.tokenizer.validateTokenIds(ids);
    let delta = '';
    for (const id of ids) {
      this.tokens++;
      if (this.skipSpecialTokens && this.tokenizer.isSpecialToken(id)) continue;
      this.window.push(id);
      const full = this.decodeWindow();
      const stable = stableLength(full);
      if (stable > this.emitted) {
        delta += full.slice(this.emitted, stable);
        this.emitted = stable;
      }
      if (this.window.length >= MAX_WINDOW_TOKENS) this.rebase();
    }
    this.emittedText += delta;
    return delta;
  }

  /**
   * Ends the sequence and returns whatever was held back (an incomplete or invalid trailing character, as the
   * U+FFFD that one-shot decode also produces). Later calls return ''.
   */
  finish(): string {
    if (this.finished) return '';
    this.finished = true;
    const full = this.decodeWindow();
    const delta = full.slice(this.emitted);
    this.window = [];
    this.emitted = 0;
    this.emittedText += delta;
    return delta;
  }

  /** Cuts the window to its last KEEP_TOKENS tokens; everything stable in the new window was already emitted. */
  private rebase(): void {
    this.window = this.window.slice(this.window.length - KEEP_TOKENS);
    this.emitted = stableLength(this.decodeWindow());
  }

  private decodeWindow(): string {
    this.work += this.window.length;
    // Special tokens never reach the window when skipping, so no filtering is needed here.
    return this.tokenizer.decodeWithLibrary(this.window, { skipSpecialTokens: false });
  }
}

/** What both detokenizers offer: deltas per push, the rest at finish, the text so far and the ids accepted. */
export interface SequenceDetokenizer {
  push(ids: readonly number[]): string;
  finish(): string;
  readonly text: string;
  readonly tokenCount: number;
}

/**
 * The detokenizer for one sequence: the table-driven one (./table-detokenizer.ts, O(1) per token) when the tokenizer
 * has an id → bytes table (byte-level BPE: Qwen3, GPT-2, Llama 3), else {@link IncrementalDetokenizer}'s window
 * re-decode (every other decoder, e.g. SentencePiece's Metaspace/ByteFallback chains). Both emit the same deltas.
 * @param opts.skipSpecialTokens drop special tokens from the text (default true).
 */
export function createDetokenizer(
  tokenizer: GatewayTokenizer,
  opts: { skipSpecialTokens?: boolean } = {},
): SequenceDetokenizer {
  const table = tokenizer.tokenTextTable;
  if (table === null) return new IncrementalDetokenizer(tokenizer, opts);
  return new TableDetokenizer(table, (ids) => tokenizer.validateTokenIds(ids), opts);
}
