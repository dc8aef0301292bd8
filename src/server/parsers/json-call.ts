/**
 * One tool call written as a JSON object, `{"name": "<function>", "arguments": <value>}` (or `"parameters"`), parsed
 * incrementally: the format of Hermes / Qwen `<tool_call>` bodies, Llama 3 JSON calls and the JSON array a
 * `tool_choice: "required"` constraint produces (vLLM `hermes_tool_parser.py`, `llama_tool_parser.py`).
 *
 * Streaming follows vLLM's deltas: the call (id + name) is announced once the name is complete, then the arguments
 * value is streamed as it arrives, verbatim. A bracket/string scanner finds where the arguments value and the object
 * end; `JSON.parse` checks what could not be streamed. The call is committed when its header `{"name": "…",
 * "arguments":` is complete; an object whose header does not have that shape (other key order, extra keys first) is
 * held back whole and parsed with `JSON.parse` when it ends, becoming a call if it has a string `name`, else staying
 * text (`JsonCallObject.finalize` reports which). Malformed JSON after a committed header stays in that call's
 * arguments, as OpenAI documents for arguments ("may not be valid JSON").
 */
import type { ToolCallIdSource, ToolParseEvent } from './types.js';

/** The call header: opening brace, a complete `"name"` string, then the arguments key and its colon. */
const HEADER = /^\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:/;
/** A header longer than this (UTF-16 units) is not looked for any more: the object is parsed whole at its end. */
const HEADER_SCAN_LIMIT = 4096;

const isSpace = (c: string): boolean => c === ' ' || c === '\n' || c === '\r' || c === '\t';

/** Where the object stands. */
type Phase = 'header' | 'value' | 'tail' | 'closed';

/**
 * One JSON call object being read. Feed it the text from the object's opening brace on (leading whitespace allowed);
 * `push` returns the events that became certain and, once the object's closing brace arrived, the text after it.
 */
export class JsonCallObject {
  private raw = '';
  private phase: Phase = 'header';
  /** Bracket depth and string state of the scanner (shared by every phase). */
  private depth = 0;
  private inString = false;
  private escaped = false;
  private scanned = 0;
  /** The arguments value: its kind once its first character arrived, and how much of it was emitted. */
  private valueKind: 'container' | 'string' | 'primitive' | null = null;
  private argumentsEmitted = 0;
  private committedIndex: number | null = null;

  /**
   * `index` is the call's index in the message if it becomes a call (taken from `nextIndex()` only when it does);
   * `newId` makes its id.
   */
  constructor(
    private readonly nextIndex: () => number,
    private readonly newId: ToolCallIdSource,
  ) {}

  /** The object's text so far, up to its closing brace (what `finalize` parses, and leaves as content when it is not a call). */
  get text(): string {
    return this.raw;
  }

  /** True once the closing brace of the object arrived. */
  get closed(): boolean {
    return this.phase === 'closed';
  }

  /** True once the header was seen and the call announced. */
  get committed(): boolean {
    return this.committedIndex !== null;
  }

  /**
   * Feed `text`. Returns the events that became certain and `rest`: the text after the object's closing brace (null
   * while the object is open; the object ignores everything after its end).
   */
  push(text: string): { events: ToolParseEvent[]; rest: string | null } {
    if (this.phase === 'closed') return { events: [], rest: text };
    const start = this.raw.length;
    this.raw += text;
    const events: ToolParseEvent[] = [];
    if (this.phase === 'header') {
      const m = this.raw.length <= HEADER_SCAN_LIMIT ? HEADER.exec(this.raw) : null;
      if (m !== null) {
        this.commit(JSON.parse(`"${m[1]!}"`) as string, events);
        // The header holds no open string and depth 1: rescan from the value's start.
        this.phase = 'value';
        this.depth = 1;
        this.inString = false;
        this.escaped = false;
        this.scanned = m[0].length;
      }
    }
    const end = this.scan(Math.min(start, this.scanned), events);
    if (end === null) return { events, rest: null };
    // The object ends here: what follows belongs to the caller, not to `text` (which `finalize` parses).
    const rest = this.raw.slice(end);
    this.raw = this.raw.slice(0, end);
    return { events, rest };
  }

  /**
   * The object ended (its closing brace, or the end of its container: a closing tag, the end of the message).
   * A committed call gets `{}` as arguments when none were written. An uncommitted object is parsed whole: a JSON
   * object with a string `name` becomes a call (arguments = its `arguments` or `parameters`, a string as is, anything
   * else serialized; `{}` when absent); otherwise `isCall` is false and the caller keeps `text` as content.
   */
  finalize(): { events: ToolParseEvent[]; isCall: boolean } {
    const events: ToolParseEvent[] = [];
    if (this.committedIndex !== null) {
      if (this.argumentsEmitted === 0) events.push({ kind: 'arguments', index: this.committedIndex, text: '{}' });
      return { events, isCall: true };
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(this.raw);
    } catch {
      return { events, isCall: false };
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return { events, isCall: false };
    const obj = parsed as Record<string, unknown>;
    if (typeof obj.name !== 'string' || obj.name === '') return { events, isCall: false };
    const args = obj.arguments ?? obj.parameters ?? {};
    const index = this.commit(obj.name, events);
    events.push({ kind: 'arguments', index, text: typeof args === 'string' ? args : JSON.stringify(args) });
    return { events, isCall: true };
  }

  private commit(name: string, events: ToolParseEvent[]): number {
    const index = this.nextIndex();
    this.committedIndex = index;
    events.push({ kind: 'call', index, id: this.newId(), name });
    return index;
  }

  /**
   * Run the scanner over `raw` from `from` (≥ what it already scanned), emitting argument fragments while in the
   * value. Returns the position right after the object's closing brace, or null while it is open.
   */
  private scan(from: number, events: ToolParseEvent[]): number | null {
    let i = Math.max(from, this.scanned);
    let emitFrom = -1;
    const flush = (to: number) => {
      if (emitFrom >= 0 && to > emitFrom && this.committedIndex !== null) {
        events.push({ kind: 'arguments', index: this.committedIndex, text: this.raw.slice(emitFrom, to) });
        this.argumentsEmitted += to - emitFrom;
      }
      emitFrom = -1;
    };
    for (; i < this.raw.length; i++) {
      const c = this.raw[i]!;
      if (this.phase === 'value' && this.valueKind === null) {
        if (isSpace(c)) continue;
        this.valueKind = c === '{' || c === '[' ? 'container' : c === '"' ? 'string' : 'primitive';
      }
      if (this.phase === 'value' && emitFrom < 0) emitFrom = i;
      if (
        this.phase === 'value' &&
        this.valueKind === 'primitive' &&
        !this.inString &&
        (c === ',' || c === '}' || isSpace(c))
      ) {
        flush(i);
        this.phase = 'tail';
      }
      const wasInString = this.inString;
      this.step(c);
      if (this.phase === 'value') {
        const ended =
          (this.valueKind === 'container' && this.depth === 1 && !this.inString && (c === '}' || c === ']')) ||
          (this.valueKind === 'string' && wasInString && !this.inString);
        if (ended) {
          flush(i + 1);
          this.phase = 'tail';
        }
      }
      if (this.depth === 0 && !this.inString && c === '}' && this.phase !== 'header' && this.phase !== 'value') {
        this.phase = 'closed';
        this.scanned = i + 1;
        return i + 1;
      }
      if (this.phase === 'header' && this.depth === 0 && c === '}') {
        this.phase = 'closed';
        this.scanned = i + 1;
        return i + 1;
      }
    }
    if (this.phase === 'value') flush(i);
    this.scanned = i;
    return null;
  }

  /** The bracket/string scanner (JSON lexical structure only: strings with escapes, braces and brackets). */
  private step(c: string): void {
    if (this.inString) {
      if (this.escaped) this.escaped = false;
      else if (c === '\\') this.escaped = true;
      else if (c === '"') this.inString = false;
      return;
    }
    if (c === '"') this.inString = true;
    else if (c === '{' || c === '[') this.depth += 1;
    else if (c === '}' || c === ']') this.depth -= 1;
  }
}
