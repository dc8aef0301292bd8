/**
 * One choice's output as the response sinks see it: the accumulator both the streaming and the non-streaming sink
 * consume (issue #11: finish and usage accounting written once). It takes the choice's generation events (stable
 * text, logprobs, the terminal finish with usage; generation.ts) and runs the text through the optional reasoning
 * parser, then the tool-call parser on the content part only (vLLM: "tool calls are extracted exclusively from the
 * content"), yielding per event a `ChoiceDelta` (what a stream chunk carries) and, at the finish, the `ChoiceResult`
 * (what a full response carries). Because a full response is assembled from the same deltas, streamed and
 * non-streamed answers agree (gateway.md 5, 12).
 *
 * Pure and synchronous (no I/O): a front process can run it (coordination note on issue 9).
 */
import type { GenerationEvent, TokenLogprob, Usage } from './generation.js';
import type { ReasoningParser, ToolCallParser, ToolParseEvent } from './parsers/index.js';

/** A tool call in a stream chunk (OpenAI `ChoiceDeltaToolCall`): id, type and name only on its first delta. */
export interface ToolCallDelta {
  index: number;
  id?: string;
  type?: 'function';
  function: { name?: string; arguments: string };
}

/** A complete tool call (OpenAI `ChatCompletionMessageToolCall`); `arguments` is JSON text (possibly invalid). */
export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** What one generation event added to a choice: reasoning and content text, tool-call deltas, token logprobs. */
export interface ChoiceDelta {
  reasoning: string;
  content: string;
  toolCalls: ToolCallDelta[];
  logprobs: TokenLogprob[];
  /** The token ids behind this delta (vLLM `return_token_ids`); absent unless asked for. */
  tokenIds?: number[];
}

/** OpenAI finish reasons a choice can end with. */
export type ChoiceFinishReason = 'stop' | 'length' | 'tool_calls';

/** The whole choice, once finished. `reasoning` null when no reasoning parser ran or it found none. */
export interface ChoiceResult {
  content: string;
  reasoning: string | null;
  toolCalls: ToolCall[];
  finishReason: ChoiceFinishReason;
  /**
   * What ended a `stop` finish, as vLLM's `stop_reason` says it: the stop string, or the id of a `stop_token_ids`
   * entry; null for an end-of-sequence token, a length finish or when unknown.
   */
  stopReason: number | string | null;
  /** Completion tokens of this choice (the engine's count). */
  completionTokens: number;
  usage: Usage;
  /** Every token's logprob, in order (empty unless requested). */
  logprobs: TokenLogprob[];
  /** Every token id of the choice (vLLM `return_token_ids`); absent unless asked for. */
  tokenIds?: number[];
}

/** How a choice's text is parsed. */
export interface ChoiceOutputOptions {
  /** The reasoning parser of this choice, or null to treat all text as content. */
  reasoning: ReasoningParser | null;
  /** The tool-call parser of this choice (auto, required or named mode), or null for plain content. */
  tools: ToolCallParser | null;
  /**
   * The finish reason when tool calls were made: `tool_calls` for auto and required choice, `stop` for a named
   * function (vLLM `serving_chat.py`; OpenAI's forced function calls finish with `stop`).
   */
  callFinishReason?: 'tool_calls' | 'stop';
  /** false: only the first tool call is returned (`parallel_tool_calls: false`); later ones are dropped. */
  parallelToolCalls?: boolean;
  /**
   * false: the content and reasoning text are not kept (the result's `content` is '' and `reasoning` null), for a
   * streamed response whose shape reads nothing of them (issue 9: a stream's text, kept token by token as a string of
   * ~20 k pieces for ~256 tokens, lived as long as the stream and was promoted by the GC). Default true.
   */
  keepText?: boolean;
}

/** The accumulator of one choice. */
export class ChoiceOutput {
  private content = '';
  private reasoning = '';
  private readonly calls: ToolCall[] = [];
  private readonly logprobs: TokenLogprob[] = [];
  private tokenIds: number[] | null = null;
  private done: ChoiceResult | null = null;
  /** True without a reasoning or tool-call parser: every token's text is content as it is (`appendContent` applies). */
  readonly plain: boolean;

  private readonly keepText: boolean;

  constructor(private readonly opts: ChoiceOutputOptions) {
    this.plain = opts.reasoning === null && opts.tools === null;
    this.keepText = opts.keepText !== false;
  }

  /** The finished choice (after its `finish` event), else null. */
  get result(): ChoiceResult | null {
    return this.done;
  }

  /** Tool calls so far (complete at the finish). */
  get toolCalls(): readonly ToolCall[] {
    return this.calls;
  }

  /**
   * Take one generation event; returns what it adds. After a `finish` event `result` is set. Throws `Error` when
   * called after the finish (a programming error).
   */
  push(ev: GenerationEvent): ChoiceDelta {
    if (this.done !== null) throw new Error('ChoiceOutput: event after the finish');
    const delta: ChoiceDelta = { reasoning: '', content: '', toolCalls: [], logprobs: ev.logprobs };
    this.logprobs.push(...ev.logprobs);
    if (ev.tokenIds !== undefined) {
      delta.tokenIds = ev.tokenIds;
      for (const id of ev.tokenIds) (this.tokenIds ??= []).push(id);
    }
    const final = ev.type === 'finish';
    let contentText = ev.text;
    if (this.opts.reasoning !== null) {
      const a = this.opts.reasoning.push(ev.text);
      const b = final ? this.opts.reasoning.finish() : { reasoning: '', content: '' };
      delta.reasoning = a.reasoning + b.reasoning;
      contentText = a.content + b.content;
    }
    if (this.opts.tools !== null) {
      const events = this.opts.tools.push(contentText);
      if (final) events.push(...this.opts.tools.finish());
      this.apply(events, delta);
    } else {
      delta.content = contentText;
    }
    if (this.keepText) {
      this.reasoning += delta.reasoning;
      this.content += delta.content;
    }
    if (final) {
      const calledFinish =
        this.calls.length > 0 && ev.finishReason !== 'length' ? (this.opts.callFinishReason ?? 'tool_calls') : null;
      this.done = {
        content: this.content,
        reasoning: this.opts.reasoning !== null && this.reasoning !== '' ? this.reasoning : null,
        toolCalls: this.calls,
        finishReason: calledFinish ?? ev.finishReason,
        stopReason: ev.stopReason,
        completionTokens: ev.usage.completion_tokens,
        usage: ev.usage,
        logprobs: this.logprobs,
        ...(ev.tokenIds !== undefined ? { tokenIds: this.tokenIds ?? [] } : {}),
      };
    }
    return delta;
  }

  /**
   * The per-token fast path for a choice without parsers (no reasoning, no tool calls): take a `delta` event's
   * `text` as content, exactly as `push` would, without building its `ChoiceDelta` (whose content would be `text`).
   * Only for an event without logprobs (the caller checks: they are not recorded here). Returns false, taking nothing, when the choice has parsers or
   * already finished: the caller uses `push` then.
   */
  appendContent(text: string): boolean {
    if (!this.plain || this.done !== null) return false;
    if (this.keepText) this.content += text;
    return true;
  }

  /** Fold parser events into the delta (content, call starts, argument fragments), merging per call. */
  private apply(events: readonly ToolParseEvent[], delta: ChoiceDelta): void {
    const single = this.opts.parallelToolCalls === false;
    for (const e of events) {
      if (e.kind === 'content') {
        delta.content += e.text;
        continue;
      }
      if (single && e.index > 0) continue;
      if (e.kind === 'call') {
        this.calls.push({ id: e.id, type: 'function', function: { name: e.name, arguments: '' } });
        delta.toolCalls.push({ index: e.index, id: e.id, type: 'function', function: { name: e.name, arguments: '' } });
        continue;
      }
      this.calls[e.index]!.function.arguments += e.text;
      const last = delta.toolCalls[delta.toolCalls.length - 1];
      if (last !== undefined && last.index === e.index) last.function.arguments += e.text;
      else delta.toolCalls.push({ index: e.index, function: { arguments: e.text } });
    }
  }
}

/** True when a delta carries nothing (no text, no tool calls). */
export function isEmptyDelta(d: ChoiceDelta): boolean {
  return d.content === '' && d.reasoning === '' && d.toolCalls.length === 0;
}
