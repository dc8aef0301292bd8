/**
 * Reasoning parsers (`--reasoning-parser`): the text a model writes between `<think>` and `</think>` goes to
 * `reasoning_content`, the rest to `content` (vLLM `reasoning/qwen3_reasoning_parser.py`,
 * `deepseek_r1_reasoning_parser.py`). Tool-call parsing then runs on the content part only.
 *
 * - `qwen3`: Qwen3 generates `<think>` itself (its original chat template), or the template already opened it in
 *   the prompt (newer templates: the message then starts inside the reasoning). With `enable_thinking: false` the
 *   template closes an empty block in the prompt and everything generated is content. A message that does not open
 *   with `<think>` (after whitespace) is content.
 * - `deepseek_r1`: the template opens `<think>` in the prompt; everything up to `</think>` is reasoning (a `<think>`
 *   the model writes anyway is dropped), and a message that never closes it is all reasoning, as vLLM's parser does.
 *
 * How the message starts is decided by the caller from the rendered prompt (`reasoningStartFor`), as vLLM's serving
 * layer checks whether the prompt already ends the reasoning. Tags split across deltas are held back until decided.
 */
import { partialTagSuffix, type ReasoningParser, type ReasoningSplit } from './types.js';

/** The reasoning parsers the gateway offers (`--reasoning-parser`). */
export const REASONING_PARSER_NAMES = ['qwen3', 'deepseek_r1'] as const;
export type ReasoningParserName = (typeof REASONING_PARSER_NAMES)[number];

const START = '<think>';
const END = '</think>';

/**
 * Where a message starts: `detect` = content unless it opens with `<think>`; `reasoning` = inside a reasoning block
 * the prompt opened; `content` = reasoning is off or already closed (`enable_thinking: false`).
 */
export type ReasoningStart = 'detect' | 'reasoning' | 'content';

/**
 * The start state for parser `name`, from the tail of the rendered prompt and the request's
 * `chat_template_kwargs.enable_thinking`: a prompt ending in an open `<think>` starts in the reasoning; one ending in
 * `</think>` (an empty block the template closed) or `enable_thinking: false` starts in the content; otherwise
 * `qwen3` detects and `deepseek_r1` starts in the reasoning.
 */
export function reasoningStartFor(
  name: ReasoningParserName,
  promptText: string,
  enableThinking: unknown,
): ReasoningStart {
  const tail = promptText.trimEnd();
  if (enableThinking === false || tail.endsWith(END)) return 'content';
  if (tail.endsWith(START)) return 'reasoning';
  return name === 'deepseek_r1' ? 'reasoning' : 'detect';
}

/** The think-tag parser for one message (both families: they differ in the start state only). */
export class ThinkTagParser implements ReasoningParser {
  private mode: ReasoningStart;
  private pending = '';
  /** In the reasoning, before any reasoning text: a `<think>` written by the model here is dropped. */
  private reasoningStarted = false;

  constructor(start: ReasoningStart) {
    this.mode = start;
  }

  push(text: string): ReasoningSplit {
    this.pending += text;
    return this.run(false);
  }

  finish(): ReasoningSplit {
    return this.run(true);
  }

  private run(final: boolean): ReasoningSplit {
    const out: ReasoningSplit = { reasoning: '', content: '' };
    for (;;) {
      if (this.mode === 'content') {
        out.content += this.pending;
        this.pending = '';
        return out;
      }
      if (this.mode === 'detect') {
        const body = this.pending.trimStart();
        if (body.startsWith(START)) {
          this.pending = body.slice(START.length);
          this.mode = 'reasoning';
          this.reasoningStarted = true;
          continue;
        }
        if (!final && START.startsWith(body)) return out;
        this.mode = 'content';
        continue;
      }
      // Reasoning.
      if (!this.reasoningStarted) {
        const body = this.pending.trimStart();
        if (body.startsWith(START)) {
          this.pending = body.slice(START.length);
          this.reasoningStarted = true;
          continue;
        }
        if (!final && START.startsWith(body)) return out;
        this.reasoningStarted = true;
      }
      const at = this.pending.indexOf(END);
      if (at >= 0) {
        out.reasoning += this.pending.slice(0, at);
        this.pending = this.pending.slice(at + END.length);
        this.mode = 'content';
        continue;
      }
      const keep = final ? 0 : partialTagSuffix(this.pending, END);
      out.reasoning += this.pending.slice(0, this.pending.length - keep);
      this.pending = this.pending.slice(this.pending.length - keep);
      return out;
    }
  }
}
