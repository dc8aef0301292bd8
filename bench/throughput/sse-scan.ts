/**
 * Counts the content events of one OpenAI-style SSE response (`data: <json>\n\n` records, then `data: [DONE]\n\n`;
 * gateway.md, src/server/sse.ts) by scanning its bytes, so the load generator of bench:throughput does not parse
 * the JSON of every token. A record is a content event when its first choice's text is non-empty (chat
 * `delta.content` or completions `text`), as `JSON.parse` would tell: a plain chunk (`data: {"id":…,"usage":null}`,
 * the gateway's shape when the request asked for usage, as the bench does) is judged by whether its `"content":"` (else
 * `"text":"`; see `nonEmptyValue` for why there is only one) is followed by a character other than the closing quote.
 * Every other record — the usage chunk, an error event, a chunk with neither key (finish, tool calls), anything
 * unusual — is parsed with `JSON.parse` and judged as before. Records split across reads are joined.
 * Chunks hold one choice each (the bench sends n = 1).
 */

const DONE = Buffer.from('data: [DONE]');
const CHUNK_START = Buffer.from('data: {"id":');
/** How a plain chunk ends when the request asked for usage (`stream_options.include_usage`, as the bench does). */
const NO_USAGE_END = Buffer.from(',"usage":null}');
const CONTENT = Buffer.from('"content":"');
const TEXT = Buffer.from('"text":"');
const QUOTE = 0x22;
const NEWLINE = 0x0a;

/** Longest SSE record kept while its blank line has not arrived, bytes; a longer one is dropped and reported. */
export const MAX_RECORD_BYTES = 1024 * 1024;

/** A record's first choice's text as the parsed chunk gives it (chat `delta.content`, completions `text`; '' when absent). */
function choiceText(chunk: { choices?: Array<{ delta?: { content?: string | null }; text?: string }> }): string {
  const c = chunk.choices?.[0];
  return c?.delta?.content ?? c?.text ?? '';
}

/** True when `bytes[at..]` starts with `prefix` (and fits before `end`). */
function startsWith(bytes: Buffer, at: number, end: number, prefix: Buffer): boolean {
  if (end - at < prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) if (bytes[at + i] !== prefix[i]) return false;
  return true;
}

/** True when `bytes[..end)` ends with `suffix` (starting at or after `start`). */
function endsWith(bytes: Buffer, start: number, end: number, suffix: Buffer): boolean {
  return startsWith(bytes, end - suffix.length, end, suffix) && end - suffix.length >= start;
}

/**
 * Whether the last `pattern` (a key and its opening quote) inside `bytes[from..end)` opens a non-empty string
 * (its next byte is not the closing quote); null when the pattern is absent. Searched from the end, where the delta
 * sits in the gateway's chunk layout (about 50 bytes from it, against about 130 from the start). Last and first are the
 * same occurrence: these bytes can only be a JSON key, because inside a JSON string every `"` is escaped (`\"`), so a
 * text holding `"content":"` reads `\"content\":\"` on the wire; and a plain chunk has one choice with one such key
 * (`logprobs.content` is a list: `"content":[`). A loop over the record rather than `Buffer.indexOf`, whose native
 * call costs more than the loop and which searches forward only, past the record.
 */
function nonEmptyValue(bytes: Buffer, from: number, end: number, pattern: Buffer): boolean | null {
  const last = end - pattern.length - 1;
  const first = pattern[0];
  outer: for (let at = last; at >= from; at--) {
    if (bytes[at] !== first) continue;
    for (let i = 1; i < pattern.length; i++) if (bytes[at + i] !== pattern[i]) continue outer;
    return bytes[at + pattern.length] !== QUOTE;
  }
  return null;
}

/**
 * The state of one SSE response: feed it each read (`feed`), then read `done` (`[DONE]` seen) and
 * `completionTokens` (`usage.completion_tokens` of the usage chunk, −1 until one arrives).
 */
export class SseEventScanner {
  done = false;
  completionTokens = -1;
  private pending: Buffer | null = null;

  /**
   * Scans one read of the response body, `chunk[from..to)` (default: all of it; no reference to `chunk` is kept, so
   * the caller may reuse its buffer). Returns how many content events it completed; calls `onError` with a message
   * for an error event (`{"error": …}`) and for a record that is not JSON. Never throws.
   */
  feed(chunk: Buffer, onError: (message: string) => void, from = 0, to = chunk.length): number {
    // A view of exactly the new bytes: `indexOf` must not run on into whatever the caller's buffer holds past `to`.
    let bytes = from === 0 && to === chunk.length ? chunk : chunk.subarray(from, to);
    if (this.pending !== null) {
      bytes = Buffer.concat([this.pending, bytes]);
      this.pending = null;
    }
    let events = 0;
    let start = 0;
    const n = bytes.length;
    // Records end at a blank line; JSON text holds no raw newline. `indexOf` of a byte is a native memchr.
    for (let i = bytes.indexOf(NEWLINE); i >= 0 && i + 1 < n; i = bytes.indexOf(NEWLINE, i + 1)) {
      if (bytes[i + 1] !== NEWLINE) continue;
      if (this.record(bytes, start, i, onError)) events++;
      start = i + 2;
      i++;
    }
    if (start < n) {
      // A record that never ends (no blank line) must not grow without bound: drop it, once reported.
      if (n - start > MAX_RECORD_BYTES) onError(`SSE record longer than ${MAX_RECORD_BYTES} bytes without its end`);
      else this.pending = Buffer.from(bytes.subarray(start));
    }
    return events;
  }

  /** Judges one record `bytes[start..end)` (without its `\n\n`); true for a content event. */
  private record(bytes: Buffer, start: number, end: number, onError: (message: string) => void): boolean {
    if (end - start === DONE.length && startsWith(bytes, start, end, DONE)) {
      this.done = true;
      return false;
    }
    // A plain chunk: `data: {"id":…,"usage":null}`. Its choice text lies between the two.
    if (startsWith(bytes, start, end, CHUNK_START) && endsWith(bytes, start, end, NO_USAGE_END)) {
      const from = start + CHUNK_START.length;
      const to = end - NO_USAGE_END.length;
      const text = nonEmptyValue(bytes, from, to, CONTENT) ?? nonEmptyValue(bytes, from, to, TEXT);
      if (text !== null) return text;
    }
    return this.parsed(bytes.toString('utf8', start + 6, end), onError); // after 'data: '
  }

  /** A record judged by `JSON.parse` (the usage chunk, error events, anything unusual). */
  private parsed(data: string, onError: (message: string) => void): boolean {
    let parsed: { error?: { message?: string }; usage?: { completion_tokens?: number } | null };
    try {
      parsed = JSON.parse(data) as typeof parsed;
    } catch {
      onError(`unparseable SSE record ${JSON.stringify(data.slice(0, 80))}`);
      return false;
    }
    if (parsed === null || typeof parsed !== 'object') {
      onError(`SSE record is not a JSON object: ${JSON.stringify(data.slice(0, 80))}`);
      return false;
    }
    if (parsed.error) onError(`mid-stream error: ${parsed.error.message ?? '?'}`);
    if (parsed.usage) this.completionTokens = parsed.usage.completion_tokens ?? -1;
    return choiceText(parsed as Parameters<typeof choiceText>[0]) !== '';
  }
}
