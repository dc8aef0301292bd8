/**
 * The shapes the output parsers share: what a tool-call parser turns a message's text into, and the parser interfaces
 * themselves. Every parser is a pure, synchronous, incremental state machine over text (no I/O, no clock): `push` a
 * text delta, get back what became certain; `finish` at the end of the message to flush what was held back. Feeding a
 * text in any split gives the same concatenated result, so the streaming and the non-streaming response are built
 * from the same events (gateway.md 5 "Streaming equals non-streaming"; SMG PR #2203: the end-of-stream flush goes
 * through the same parsers as streamed text).
 */

/**
 * One piece of a parsed assistant message, in order:
 * - `content`: ordinary text;
 * - `call`: tool call `index` (0, 1, ... within the message) starts, with its id and function name (sent once);
 * - `arguments`: the next fragment of call `index`'s arguments (a JSON text when complete; OpenAI's contract is a
 *   string that may not be valid JSON, which is what a truncated or malformed call leaves).
 */
export type ToolParseEvent =
  | { kind: 'content'; text: string }
  | { kind: 'call'; index: number; id: string; name: string }
  | { kind: 'arguments'; index: number; text: string };

/** An incremental tool-call parser for one message. */
export interface ToolCallParser {
  /** Feed the next text delta; returns the events it made certain (possibly none). */
  push(text: string): ToolParseEvent[];
  /** End of the message: returns the remaining events (held-back text, an unclosed call). Call once. */
  finish(): ToolParseEvent[];
}

/** Makes one tool call id (`call_…`); injected so parsers stay pure and tests deterministic. */
export type ToolCallIdSource = () => string;

/** The reasoning and content parts of a text delta. */
export interface ReasoningSplit {
  reasoning: string;
  content: string;
}

/** An incremental reasoning parser for one message (`<think>…</think>` → reasoning, the rest → content). */
export interface ReasoningParser {
  push(text: string): ReasoningSplit;
  /** End of the message: flush held-back text. Call once. */
  finish(): ReasoningSplit;
}

/**
 * The longest suffix of `text` that is a proper prefix of `tag` (the part to hold back because the next delta may
 * complete the tag), as a length in UTF-16 units; 0 when none.
 */
export function partialTagSuffix(text: string, tag: string): number {
  const max = Math.min(text.length, tag.length - 1);
  for (let len = max; len > 0; len--) {
    if (tag.startsWith(text.slice(text.length - len))) return len;
  }
  return 0;
}
