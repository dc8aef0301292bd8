/**
 * `tool_choice: {"type": "function", "function": {"name": …}}`: the engine is constrained to the named function's
 * parameters schema, so the whole message is that call's arguments (vLLM `serving_chat.py`: a named tool choice
 * becomes one tool call whose `arguments` are the output text, `content` empty). The call (id + name) is announced
 * with the first text, then every delta is an arguments fragment; leading whitespace is dropped.
 */
import type { ToolCallIdSource, ToolCallParser, ToolParseEvent } from './types.js';

/** The forced single-call parser for function `name`. */
export class NamedCallParser implements ToolCallParser {
  private started = false;
  private written = false;

  constructor(
    private readonly name: string,
    private readonly newId: ToolCallIdSource,
  ) {}

  push(text: string): ToolParseEvent[] {
    const events = this.start();
    const args = this.written ? text : text.trimStart();
    if (args !== '') {
      events.push({ kind: 'arguments', index: 0, text: args });
      this.written = true;
    }
    return events;
  }

  finish(): ToolParseEvent[] {
    const events = this.start();
    if (!this.written) events.push({ kind: 'arguments', index: 0, text: '{}' });
    this.written = true;
    return events;
  }

  private start(): ToolParseEvent[] {
    if (this.started) return [];
    this.started = true;
    return [{ kind: 'call', index: 0, id: this.newId(), name: this.name }];
  }
}
