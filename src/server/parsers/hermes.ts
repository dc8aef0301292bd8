/**
 * The `hermes` tool-call parser: Hermes 2 Pro / Qwen2.5 / Qwen3 calls, each a JSON object between `<tool_call>` and
 * `</tool_call>` (vLLM `hermes_tool_parser.py`; the Qwen3 chat template asks for exactly this), any number per
 * message, with ordinary text before, between and after them.
 *
 * - The markup never reaches `content`: a partial `<tool_call>` at the end of a delta is held back until the next
 *   delta decides it.
 * - Whitespace directly around a call is dropped (the template separates calls with newlines); every other character
 *   of the text is kept, so a message without calls comes back exactly as it was.
 * - A `<tool_call>` body that is not a call (not JSON, or no string `name`) stays content, markup included, as vLLM's
 *   non-streaming parser leaves it; a committed call (see json-call.ts) keeps its arguments as written. Whether the
 *   body is a call is decided on its JSON object alone: text after the object's closing brace, before `</tool_call>`,
 *   is dropped from a call and kept in a non-call's content, so every split of the text gives the same message.
 * - An unclosed `<tool_call>` at the end of the message (a `length` finish) is finalized like a closed one.
 */
import { JsonCallObject } from './json-call.js';
import { partialTagSuffix, type ToolCallIdSource, type ToolCallParser, type ToolParseEvent } from './types.js';

const OPEN = '<tool_call>';
const CLOSE = '</tool_call>';

/** Whitespace-only text. */
const blank = (s: string): boolean => s.trim() === '';

/** The `hermes` parser for one message; `newId` makes each call's id. */
export class HermesToolParser implements ToolCallParser {
  private pending = '';
  private call: JsonCallObject | null = null;
  /** Text after the current call's JSON object, before `</tool_call>` (dropped for a call, content otherwise). */
  private afterObject = '';
  private calls = 0;
  /** Whitespace held back in content: emitted when more content follows, dropped next to a call. */
  private space = '';
  private afterCall = false;
  /** `space` / `afterCall` as they were when the current `<tool_call>` opened (restored if it is not a call). */
  private beforeTag = { space: '', afterCall: false };

  constructor(private readonly newId: ToolCallIdSource) {}

  push(text: string): ToolParseEvent[] {
    this.pending += text;
    const events: ToolParseEvent[] = [];
    for (;;) {
      if (this.call === null) {
        const at = this.pending.indexOf(OPEN);
        if (at < 0) {
          const keep = partialTagSuffix(this.pending, OPEN);
          this.content(this.pending.slice(0, this.pending.length - keep), events);
          this.pending = this.pending.slice(this.pending.length - keep);
          return events;
        }
        this.content(this.pending.slice(0, at), events);
        this.beforeTag = { space: this.space, afterCall: this.afterCall };
        this.space = '';
        this.pending = this.pending.slice(at + OPEN.length);
        this.call = new JsonCallObject(() => this.calls++, this.newId);
        this.afterObject = '';
        continue;
      }
      const at = this.pending.indexOf(CLOSE);
      if (at < 0) {
        const keep = partialTagSuffix(this.pending, CLOSE);
        this.feedCall(this.pending.slice(0, this.pending.length - keep), events);
        this.pending = this.pending.slice(this.pending.length - keep);
        return events;
      }
      this.feedCall(this.pending.slice(0, at), events);
      this.pending = this.pending.slice(at + CLOSE.length);
      this.endCall(true, events);
    }
  }

  finish(): ToolParseEvent[] {
    const events: ToolParseEvent[] = [];
    if (this.call !== null) {
      this.feedCall(this.pending, events);
      this.pending = '';
      this.endCall(false, events);
    } else {
      this.content(this.pending, events);
      this.pending = '';
    }
    if (!this.afterCall && this.space !== '') events.push({ kind: 'content', text: this.space });
    this.space = '';
    return events;
  }

  /** Feed the current call's body text; text after its JSON object is kept apart (`afterObject`). */
  private feedCall(text: string, events: ToolParseEvent[]): void {
    const { events: out, rest } = this.call!.push(text);
    events.push(...out);
    if (rest !== null) this.afterObject += rest;
  }

  /** Close the current call (its tag arrived when `closedTag`, else the message ended). */
  private endCall(closedTag: boolean, events: ToolParseEvent[]): void {
    const call = this.call!;
    this.call = null;
    const { events: last, isCall } = call.finalize();
    events.push(...last);
    const after = this.afterObject;
    this.afterObject = '';
    if (isCall) {
      this.afterCall = true;
      this.space = '';
      return;
    }
    this.space = this.beforeTag.space;
    this.afterCall = this.beforeTag.afterCall;
    this.content(`${OPEN}${call.text}${after}${closedTag ? CLOSE : ''}`, events);
  }

  /** Emit content text, holding back trailing whitespace and dropping whitespace that follows a call. */
  private content(text: string, events: ToolParseEvent[]): void {
    if (text === '') return;
    if (blank(text)) {
      this.space += text;
      return;
    }
    const body = text.trimEnd();
    const lead = this.afterCall ? '' : this.space;
    const start = this.afterCall ? body.trimStart() : body;
    events.push({ kind: 'content', text: lead + start });
    this.space = text.slice(body.length);
    this.afterCall = false;
  }
}
