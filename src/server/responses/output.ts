/**
 * Responses-API output: the response object, its output items, and the streamed event sequence (OpenAI's Responses
 * streaming events; every event carries `type` and an increasing `sequence_number` from 0, and is sent with an
 * `event: <type>` line; the stream ends after the terminal event, without `[DONE]`):
 *
 *   response.created → response.in_progress →
 *   [reasoning]  response.output_item.added → response.content_part.added (reasoning_text) →
 *                response.reasoning_summary_part.added (summary_text) →
 *                (response.reasoning_text.delta, response.reasoning_summary_text.delta)… →
 *                response.reasoning_text.done → response.content_part.done →
 *                response.reasoning_summary_text.done → response.reasoning_summary_part.done →
 *                response.output_item.done
 *                The reasoning travels twice: as vLLM's `reasoning_text` content and as OpenAI's summary (there is no
 *                summarizer: the summary is the reasoning text), which is what the openai SDK's and the AI SDK's
 *                default providers read.
 *   [message]    response.output_item.added → response.content_part.added (output_text) →
 *                response.output_text.delta… → response.output_text.done → response.content_part.done →
 *                response.output_item.done
 *   [each call]  response.output_item.added (function_call, arguments "") →
 *                response.function_call_arguments.delta… → response.function_call_arguments.done →
 *                response.output_item.done
 *   response.completed (or response.incomplete when `max_output_tokens` cut it; an engine failure: `error`, then
 *   response.failed).
 *
 * The streamed items and the non-streaming `output` are built from the same choice deltas (choice-output.ts), so
 * they agree. With `store`, the finished response is kept for `previous_response_id`, `item_reference` and
 * `GET /v1/responses/{id}` (responses/store.ts).
 */
import { randomHexId } from '../random-id.js';
import type { ChoiceDelta, ChoiceResult } from '../choice-output.js';
import type { ApiError } from '../errors.js';
import type { Usage } from '../generation.js';
import { chatLogprobs } from '../logprobs.js';
import type { ResponseBase, ResponseShape, SseEvent, StreamShaper } from '../response-shape.js';
import type { ResponsesStore } from './store.js';

type Item = Record<string, unknown>;

/** What a response echoes of its request, and where it is stored. */
export interface ResponsesRequestInfo {
  store: ResponsesStore;
  /** The request's `store` (default true). */
  storeRequested: boolean;
  /** The resolved conversation items (previous response's, then this input). */
  inputItems: Item[];
  /** Request fields echoed in the response object (`instructions`, `tools`, `tool_choice`, `text`, ...). */
  echo: Record<string, unknown>;
}

/**
 * Responses usage from the chat usage: `input_tokens`, `output_tokens`, details (cached: the engine's prefix-cache hit,
 * `prompt_tokens_details.cached_tokens`; reasoning: 0).
 */
export function responsesUsage(u: Usage): Record<string, unknown> {
  return {
    input_tokens: u.prompt_tokens,
    input_tokens_details: { cached_tokens: u.prompt_tokens_details.cached_tokens },
    output_tokens: u.completion_tokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: u.total_tokens,
  };
}

/** Token logprobs of `output_text` (the chat shape's entries: token, logprob, bytes, top_logprobs). */
function textLogprobs(rendered: Record<string, unknown> | null): unknown[] {
  return rendered === null ? [] : ((rendered.content as unknown[] | undefined) ?? []);
}

/** How an output item ends: whole, or cut by the token limit (OpenAI's item status). */
type DoneStatus = 'completed' | 'incomplete';

/** Streamed-or-not output under construction: the items in output order, with their ids. */

class OutputItems {
  readonly items: Item[] = [];
  reasoning: Item | null = null;
  message: Item | null = null;
  readonly calls = new Map<number, Item>();
  private reasoningText = '';
  private messageText = '';
  private readonly messageLogprobs: unknown[] = [];

  /** Output index of `item`. */
  indexOf(item: Item): number {
    return this.items.indexOf(item);
  }

  openReasoning(): { item: Item; opened: boolean } {
    if (this.reasoning !== null) return { item: this.reasoning, opened: false };
    this.reasoning = { type: 'reasoning', id: `rs_${randomHexId()}`, summary: [], content: [], status: 'in_progress' };
    this.items.push(this.reasoning);
    return { item: this.reasoning, opened: true };
  }

  openMessage(): { item: Item; opened: boolean } {
    if (this.message !== null) return { item: this.message, opened: false };
    this.message = {
      type: 'message',
      id: `msg_${randomHexId()}`,
      status: 'in_progress',
      role: 'assistant',
      content: [],
    };
    this.items.push(this.message);
    return { item: this.message, opened: true };
  }

  openCall(index: number, callId: string, name: string): Item {
    const item: Item = {
      type: 'function_call',
      id: `fc_${randomHexId()}`,
      call_id: callId,
      name,
      arguments: '',
      status: 'in_progress',
    };
    this.calls.set(index, item);
    this.items.push(item);
    return item;
  }

  addReasoning(text: string): void {
    this.reasoningText += text;
  }

  addText(text: string, logprobs: unknown[]): void {
    this.messageText += text;
    this.messageLogprobs.push(...logprobs);
  }

  /** The reasoning item as done (`completed`, or `incomplete` when the response ran out of tokens in it). */
  doneReasoning(status: DoneStatus = 'completed'): Item {
    const r = this.reasoning!;
    // The reasoning as vLLM gives it (content) and as OpenAI's clients read it (a summary: the whole text here).
    r.content = [{ type: 'reasoning_text', text: this.reasoningText }];
    r.summary = [{ type: 'summary_text', text: this.reasoningText }];
    r.status = status;
    return r;
  }

  /** The text part and the message item as done (`incomplete` when the response ran out of tokens in it, as OpenAI's). */
  doneMessage(status: DoneStatus = 'completed'): { part: Item; item: Item } {
    const m = this.message!;
    const part = { type: 'output_text', text: this.messageText, annotations: [], logprobs: this.messageLogprobs };
    m.content = [part];
    m.status = status;
    return { part, item: m };
  }

  doneCall(index: number, status: DoneStatus = 'completed'): Item {
    const c = this.calls.get(index)!;
    c.status = status;
    return c;
  }

  /** Apply one delta (reasoning, then text, then calls), reporting what happened for the event writer. */
  apply(delta: ChoiceDelta, logprobs: unknown[], on: DeltaHooks): void {
    if (delta.reasoning !== '') {
      const r = this.openReasoning();
      if (r.opened) on.reasoningOpened(r.item);
      this.addReasoning(delta.reasoning);
      on.reasoningDelta(r.item, delta.reasoning);
    }
    if (
      (delta.content !== '' || delta.toolCalls.length > 0) &&
      this.reasoning !== null &&
      this.reasoning.status === 'in_progress'
    ) {
      on.reasoningDone(this.doneReasoning());
    }
    if (delta.content !== '') {
      const m = this.openMessage();
      if (m.opened) on.messageOpened(m.item);
      this.addText(delta.content, logprobs);
      on.textDelta(m.item, delta.content, logprobs);
    }
    for (const tc of delta.toolCalls) {
      let item = this.calls.get(tc.index);
      if (item === undefined) {
        item = this.openCall(tc.index, tc.id ?? `call_${randomHexId()}`, tc.function.name ?? '');
        on.callOpened(item);
      }
      if (tc.function.arguments !== '') {
        item.arguments = `${item.arguments as string}${tc.function.arguments}`;
        on.argumentsDelta(item, tc.function.arguments);
      }
    }
  }

  /** Close every open item in output order, with `status` (`incomplete` when generation stopped at the token limit). */
  closeAll(on: CloseHooks, status: DoneStatus = 'completed'): void {
    if (this.reasoning !== null && this.reasoning.status === 'in_progress')
      on.reasoningDone(this.doneReasoning(status));
    for (const item of this.items) {
      if (item === this.message && item.status === 'in_progress') on.messageDone(this.doneMessage(status));
      else if (item.type === 'function_call' && item.status === 'in_progress') {
        const index = [...this.calls.entries()].find(([, v]) => v === item)![0];
        on.callDone(this.doneCall(index, status));
      }
    }
  }
}

interface DeltaHooks {
  reasoningOpened(item: Item): void;
  reasoningDelta(item: Item, text: string): void;
  reasoningDone(item: Item): void;
  messageOpened(item: Item): void;
  textDelta(item: Item, text: string, logprobs: unknown[]): void;
  callOpened(item: Item): void;
  argumentsDelta(item: Item, text: string): void;
}

interface CloseHooks {
  reasoningDone(item: Item): void;
  messageDone(done: { part: Item; item: Item }): void;
  callDone(item: Item): void;
}

/** The response object of one request, its final status and its place in the store (the body and the stream's). */
class ResponseRecord {
  readonly stored: boolean;
  private kept: string | null = null;

  constructor(private readonly info: ResponsesRequestInfo) {
    this.stored = info.storeRequested && info.store.enabled;
  }

  /** The response object (OpenAI `Response`) with `status`, `output` and `usage` (null while in progress). */
  object(
    base: ResponseBase,
    status: 'in_progress' | 'completed' | 'incomplete' | 'failed',
    output: Item[],
    usage: Usage | null,
    error: { code: string; message: string } | null = null,
  ): Record<string, unknown> {
    return {
      id: base.id,
      object: 'response',
      created_at: base.created,
      status,
      error,
      incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
      model: base.model,
      output,
      usage: usage === null ? null : responsesUsage(usage),
      store: this.stored,
      ...this.info.echo,
    };
  }

  /** Store the finished `response` (when `store` was asked for and the store is on). */
  keep(response: Record<string, unknown>, output: Item[]): void {
    if (!this.stored) return;
    this.kept = response.id as string;
    this.info.store.put(this.kept, { response, inputItems: this.info.inputItems, outputItems: output });
  }

  /** Resolves once the stored response can be read from every front. */
  settled(): Promise<void> {
    return this.kept === null ? Promise.resolve() : this.info.store.written(this.kept);
  }
}

/** `incomplete` when generation stopped at the token limit, else `completed`. */
function finalStatus(results: readonly ChoiceResult[]): DoneStatus {
  return results[0]?.finishReason === 'length' ? 'incomplete' : 'completed';
}

/** The non-streamed response of one request: its one choice's result as output items. */
function bufferedResponse(
  record: ResponseRecord,
  base: ResponseBase,
  results: readonly ChoiceResult[],
  usage: Usage,
  logprobs: (index: number) => Record<string, unknown> | null,
): Record<string, unknown> {
  const r = results[0]!;
  const out = new OutputItems();
  const none = () => undefined;
  const delta: ChoiceDelta = {
    reasoning: r.reasoning ?? '',
    content: r.content,
    toolCalls: r.toolCalls.map((c, index) => ({
      index,
      id: c.id,
      type: 'function' as const,
      function: { name: c.function.name, arguments: c.function.arguments },
    })),
    logprobs: [],
  };
  out.apply(delta, textLogprobs(logprobs(0)), {
    reasoningOpened: none,
    reasoningDelta: none,
    reasoningDone: none,
    messageOpened: none,
    textDelta: none,
    callOpened: none,
    argumentsDelta: none,
  });
  if (out.items.length === 0) out.openMessage();
  out.closeAll({ reasoningDone: none, messageDone: none, callDone: none }, finalStatus(results));
  const response = record.object(base, finalStatus(results), out.items, usage);
  record.keep(response, out.items);
  return response;
}

/** The streamed events of one request (OpenAI's Responses streaming sequence, numbered). */
class ResponsesStream implements StreamShaper {
  readonly doneSentinel = false;
  private seq = 0;
  private readonly out = new OutputItems();

  constructor(
    private readonly base: ResponseBase,
    private readonly record: ResponseRecord,
  ) {}

  opening(): SseEvent[] {
    return [
      this.ev('response.created', { response: this.record.object(this.base, 'in_progress', [], null) }),
      this.ev('response.in_progress', { response: this.record.object(this.base, 'in_progress', [], null) }),
    ];
  }

  delta(_index: number, delta: ChoiceDelta, logprobs: Record<string, unknown> | null): SseEvent[] {
    return this.apply(delta, logprobs);
  }

  finish(
    _index: number,
    delta: ChoiceDelta,
    result: ChoiceResult,
    logprobs: Record<string, unknown> | null,
  ): SseEvent[] {
    const events = this.apply(delta, logprobs);
    if (this.out.items.length === 0) this.messageAdded(events, this.out.openMessage().item);
    this.out.closeAll(this.closeHooks(events), finalStatus([result]));
    return events;
  }

  closing(usage: Usage, results: readonly ChoiceResult[]): SseEvent[] {
    const status = finalStatus(results);
    const response = this.record.object(this.base, status, this.out.items, usage);
    this.record.keep(response, this.out.items);
    return [this.ev(status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response })];
  }

  error(err: ApiError): SseEvent[] {
    const body = err.toBody().error;
    const code = String(body.code ?? 'server_error');
    return [
      this.ev('error', { code, message: body.message, param: body.param ?? null }),
      this.ev('response.failed', {
        response: this.record.object(this.base, 'failed', this.out.items, null, { code, message: body.message }),
      }),
    ];
  }

  private ev(type: string, fields: Record<string, unknown>): SseEvent {
    return { event: type, data: { type, sequence_number: this.seq++, ...fields } };
  }

  private itemRef(item: Item): { item_id: unknown; output_index: number } {
    return { item_id: item.id, output_index: this.out.indexOf(item) };
  }

  private itemAdded(events: SseEvent[], item: Item): void {
    events.push(this.ev('response.output_item.added', { output_index: this.out.indexOf(item), item: { ...item } }));
  }

  private itemDone(events: SseEvent[], item: Item): void {
    events.push(this.ev('response.output_item.done', { output_index: this.out.indexOf(item), item }));
  }

  /** A message item opened: its `output_item.added` and its empty `output_text` part. */
  private messageAdded(events: SseEvent[], item: Item): void {
    this.itemAdded(events, item);
    events.push(
      this.ev('response.content_part.added', {
        ...this.itemRef(item),
        content_index: 0,
        part: { type: 'output_text', text: '', annotations: [] },
      }),
    );
  }

  private apply(delta: ChoiceDelta, logprobs: Record<string, unknown> | null): SseEvent[] {
    const events: SseEvent[] = [];
    this.out.apply(delta, textLogprobs(logprobs), {
      ...this.closeHooks(events),
      reasoningOpened: (item) => {
        this.itemAdded(events, item);
        events.push(
          this.ev('response.content_part.added', {
            ...this.itemRef(item),
            content_index: 0,
            part: { type: 'reasoning_text', text: '' },
          }),
        );
        events.push(
          this.ev('response.reasoning_summary_part.added', {
            ...this.itemRef(item),
            summary_index: 0,
            part: { type: 'summary_text', text: '' },
          }),
        );
      },
      reasoningDelta: (item, text) => {
        events.push(this.ev('response.reasoning_text.delta', { ...this.itemRef(item), content_index: 0, delta: text }));
        events.push(
          this.ev('response.reasoning_summary_text.delta', { ...this.itemRef(item), summary_index: 0, delta: text }),
        );
      },
      messageOpened: (item) => this.messageAdded(events, item),
      textDelta: (item, text, lp) =>
        events.push(
          this.ev('response.output_text.delta', {
            ...this.itemRef(item),
            content_index: 0,
            delta: text,
            logprobs: lp,
          }),
        ),
      callOpened: (item) => this.itemAdded(events, item),
      argumentsDelta: (item, text) =>
        events.push(this.ev('response.function_call_arguments.delta', { ...this.itemRef(item), delta: text })),
    });
    return events;
  }

  private closeHooks(events: SseEvent[]): CloseHooks {
    return {
      reasoningDone: (item) => {
        const text = (item.content as Item[])[0]!.text;
        events.push(this.ev('response.reasoning_text.done', { ...this.itemRef(item), content_index: 0, text }));
        events.push(
          this.ev('response.content_part.done', {
            ...this.itemRef(item),
            content_index: 0,
            part: { type: 'reasoning_text', text },
          }),
        );
        const summary = { ...this.itemRef(item), summary_index: 0 };
        events.push(this.ev('response.reasoning_summary_text.done', { ...summary, text }));
        events.push(
          this.ev('response.reasoning_summary_part.done', { ...summary, part: { type: 'summary_text', text } }),
        );
        this.itemDone(events, item);
      },
      messageDone: ({ part, item }) => {
        events.push(
          this.ev('response.output_text.done', {
            ...this.itemRef(item),
            content_index: 0,
            text: part.text,
            logprobs: part.logprobs,
          }),
        );
        events.push(this.ev('response.content_part.done', { ...this.itemRef(item), content_index: 0, part }));
        this.itemDone(events, item);
      },
      callDone: (item) => {
        events.push(
          this.ev('response.function_call_arguments.done', {
            ...this.itemRef(item),
            name: item.name,
            arguments: item.arguments,
          }),
        );
        this.itemDone(events, item);
      },
    };
  }
}

/** The Responses shape of one request (see the module comment). */
export function responsesShape(info: ResponsesRequestInfo): ResponseShape {
  const record = new ResponseRecord(info);
  return {
    endpoint: '/v1/responses',
    idPrefix: 'resp_',
    settled: () => record.settled(),
    logprobsParams: 'chat',
    renderLogprobs: (entries, k, tokenText) => chatLogprobs(entries, k, tokenText),
    body: (base, results, usage, logprobs) => bufferedResponse(record, base, results, usage, logprobs),
    stream: (base) => new ResponsesStream(base, record),
  };
}
