/**
 * A streaming UTF-8 decoder that follows the WHATWG Encoding Standard's "UTF-8 decoder" (section 9.1.1) step by step,
 * so its output over any split of a byte stream equals `new TextDecoder('utf-8', { fatal: false, ignoreBOM: true })`
 * on the whole stream: the same U+FFFD for every maximal invalid subpart, a BOM kept as U+FEFF. Unlike
 * `TextDecoder` it says whether an incomplete sequence is pending ({@link Utf8StreamDecoder.pending}), which the
 * table-driven detokenizer needs (./table-detokenizer.ts), and it costs no native call per token.
 */

/** U+FFFD REPLACEMENT CHARACTER, what the decoder emits for an invalid or truncated sequence. */
export const REPLACEMENT_CHARACTER = '\uFFFD';

/**
 * Decoder state between bytes: the code point under construction, its continuation bytes seen and needed, and the
 * allowed range of the next continuation byte (narrowed after E0, ED, F0, F4 so overlong forms, surrogates and
 * code points above U+10FFFF are errors).
 */
export class Utf8StreamDecoder {
  private codePoint = 0;
  private seen = 0;
  private needed = 0;
  private lower = 0x80;
  private upper = 0xbf;

  /** Whether an incomplete multi-byte sequence is held (it becomes one U+FFFD at {@link flush}). */
  get pending(): boolean {
    return this.needed !== 0;
  }

  /**
   * Decodes `bytes[start..end)` and returns the text of every sequence completed (or found invalid) by them; an
   * incomplete trailing sequence is kept for the next call. Indexes are byte offsets into `bytes`.
   */
  write(bytes: Uint8Array, start: number, end: number): string {
    let out = '';
    for (let i = start; i < end; i++) {
      const byte = bytes[i]!;
      if (this.needed === 0) {
        if (byte <= 0x7f) out += String.fromCharCode(byte);
        else if (byte >= 0xc2 && byte <= 0xdf) {
          this.needed = 1;
          this.codePoint = byte & 0x1f;
        } else if (byte >= 0xe0 && byte <= 0xef) {
          if (byte === 0xe0) this.lower = 0xa0;
          else if (byte === 0xed) this.upper = 0x9f;
          this.needed = 2;
          this.codePoint = byte & 0xf;
        } else if (byte >= 0xf0 && byte <= 0xf4) {
          if (byte === 0xf0) this.lower = 0x90;
          else if (byte === 0xf4) this.upper = 0x8f;
          this.needed = 3;
          this.codePoint = byte & 0x7;
        } else out += REPLACEMENT_CHARACTER;
        continue;
      }
      if (byte < this.lower || byte > this.upper) {
        // The sequence is broken: one U+FFFD for it, and the byte is read again as the start of a new one.
        this.reset();
        out += REPLACEMENT_CHARACTER;
        i--;
        continue;
      }
      this.lower = 0x80;
      this.upper = 0xbf;
      this.codePoint = (this.codePoint << 6) | (byte & 0x3f);
      if (++this.seen === this.needed) {
        out += String.fromCodePoint(this.codePoint);
        this.reset();
      }
    }
    return out;
  }

  /** Ends the stream: one U+FFFD when a sequence is incomplete, else ''. The decoder is fresh afterwards. */
  flush(): string {
    if (this.needed === 0) return '';
    this.reset();
    return REPLACEMENT_CHARACTER;
  }

  private reset(): void {
    this.codePoint = 0;
    this.seen = 0;
    this.needed = 0;
    this.lower = 0x80;
    this.upper = 0xbf;
  }
}
