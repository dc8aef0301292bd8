/**
 * Tool calls written as bare JSON objects one after another:
 * - `llama3_json` (vLLM `llama_tool_parser.py`, Llama 3.1+ with the JSON tool template): an optional
 *   `<|python_tag|>`, then `{"name": …, "parameters"|"arguments": …}` objects separated by `;`. As vLLM's streaming
 *   parser does, a message is parsed for calls only when it starts (after whitespace) with `<|python_tag|>` or `{`;
 *   any other message is plain content.
 * - `tool_choice: "required"` (vLLM's forced mode): the engine is constrained to a JSON array of
 *   `{"name": …, "parameters": …}` objects (`requiredToolsSchema` in tool-choice.ts), parsed here as `[`, objects
 *   separated by `,`, `]`.
 * Objects are read by `JsonCallObject` (streamed arguments, whole-object fallback). Text that does not fit the shape
 * (an object that is not a call, or anything after the calls that is not a separator) ends call parsing: it and
 * everything after it is content, so nothing the model wrote is lost.
 */
import { JsonCallObject } from './json-call.js';
import { partialTagSuffix, type ToolCallIdSource, type ToolCallParser, type ToolParseEvent } from './types.js';

/** The bare-JSON layout of one family. */
export interface JsonCallsLayout {
  /** Tokens that may open the calls (and are dropped), e.g. `<|python_tag|>`. */
  prefixes: readonly string[];
  /** A character that must open the calls (`[`), or null. */
  open: string | null;
  /** What separates two calls (`;` or `,`). */
  separator: string;
  /** A character that closes the calls (`]`), or null. */
  close: string | null;
}

/** `llama3_json`: optional `<|python_tag|>`, objects separated by `;`. */
export const LLAMA3_JSON_LAYOUT: JsonCallsLayout = {
  prefixes: ['<|python_tag|>'],
  open: null,
  separator: ';',
  close: null,
};
/** The JSON array of the `required` constraint. */
export const JSON_ARRAY_LAYOUT: JsonCallsLayout = { prefixes: [], open: '[', separator: ',', close: ']' };

type State = 'start' | 'object' | 'between' | 'content' | 'done';

/** A parser for one message in `layout`; `newId` makes each call's id. */
export class JsonCallsParser implements ToolCallParser {
  private state: State = 'start';
  private pending = '';
  private call: JsonCallObject | null = null;
  private calls = 0;
  /** Whether a separator was seen since the last call (a new object then must follow). */
  private opened = false;

  constructor(
    private readonly layout: JsonCallsLayout,
    private readonly newId: ToolCallIdSource,
  ) {}

  push(text: string): ToolParseEvent[] {
    this.pending += text;
    const events: ToolParseEvent[] = [];
    this.run(events, false);
    return events;
  }

  finish(): ToolParseEvent[] {
    const events: ToolParseEvent[] = [];
    this.run(events, true);
    if (this.call !== null) this.endObject(events);
    if (this.pending !== '') events.push({ kind: 'content', text: this.pending });
    this.pending = '';
    this.state = 'done';
    return events;
  }

  private run(events: ToolParseEvent[], final: boolean): void {
    for (;;) {
      switch (this.state) {
        case 'start': {
          const body = this.pending.trimStart();
          const prefix = this.layout.prefixes.find((p) => body.startsWith(p));
          if (prefix !== undefined) {
            this.pending = body.slice(prefix.length);
            this.state = this.layout.open === null ? 'between' : 'start';
            this.opened = true;
            if (this.layout.open !== null) continue;
            continue;
          }
          if (this.layout.open !== null && body.startsWith(this.layout.open)) {
            this.pending = body.slice(this.layout.open.length);
            this.state = 'between';
            this.opened = true;
            continue;
          }
          if (this.layout.open === null && body.startsWith('{')) {
            this.state = 'between';
            this.opened = true;
            continue;
          }
          const undecided = body === '' || this.layout.prefixes.some((p) => partialTagSuffix(body, p) === body.length);
          if (undecided && !final) return;
          this.state = 'content';
          continue;
        }
        case 'between': {
          const body = this.pending.trimStart();
          if (body === '') {
            if (final) this.pending = '';
            return;
          }
          if (body.startsWith('{') && this.opened) {
            this.pending = '';
            this.call = new JsonCallObject(() => this.calls++, this.newId);
            this.opened = false;
            this.state = 'object';
            this.feed(body, events);
            continue;
          }
          if (!this.opened && body.startsWith(this.layout.separator)) {
            this.pending = body.slice(this.layout.separator.length);
            this.opened = true;
            continue;
          }
          if (this.layout.close !== null && body.startsWith(this.layout.close)) {
            this.pending = body.slice(this.layout.close.length);
            this.state = 'content';
            continue;
          }
          this.pending = body;
          this.state = 'content';
          continue;
        }
        case 'object':
          if (this.pending !== '') {
            const text = this.pending;
            this.pending = '';
            this.feed(text, events);
            continue;
          }
          return;
        case 'content':
          if (this.pending !== '') events.push({ kind: 'content', text: this.pending });
          this.pending = '';
          return;
        case 'done':
          return;
      }
    }
  }

  /** Feed the current object; when it closes, finalize it and keep the rest for the next state. */
  private feed(text: string, events: ToolParseEvent[]): void {
    const { events: out, rest } = this.call!.push(text);
    events.push(...out);
    if (rest === null) return;
    this.pending = rest + this.pending;
    this.endObject(events);
  }

  private endObject(events: ToolParseEvent[]): void {
    const call = this.call!;
    this.call = null;
    const { events: last, isCall } = call.finalize();
    events.push(...last);
    if (isCall) {
      this.state = 'between';
      return;
    }
    this.pending = call.text + this.pending;
    this.state = 'content';
  }
}
