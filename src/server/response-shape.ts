/**
 * How an endpoint shapes its responses (chat, completions, Responses): the shape types the request path
 * (serve-generation.ts, respond-buffered.ts, respond-streamed.ts) writes through and the endpoints (routes/,
 * responses/) implement, and the chat/completions family of shapes (`chunkedShape`).
 */
import { jsonWithSlot } from './chunk-json.js';
import type { ChoiceDelta, ChoiceResult } from './choice-output.js';
import type { ApiError } from './errors.js';
import type { TokenLogprob, Usage } from './generation.js';
import type { TokenText } from './logprobs.js';
import { SSE_DATA_LEAD, SSE_RECORD_END } from './sse.js';

/**
 * One server-sent event: `data` is JSON-serialized; `event` adds an `event:` line (the Responses API names them);
 * `record`, when set, is the whole unnamed record already built (`data: <json>\n\n` of a pre-built chunk,
 * chunk-json.ts) and is sent instead.
 */
export interface SseEvent {
  event?: string;
  data: unknown;
  record?: string;
}

/**
 * How one streamed response is written (created per request by `ResponseShape.stream`): the events to send at the
 * start, for each choice delta and finish (`logprobs` already rendered, or null), after every choice finished
 * (`usage` summed over the choices, the prompt counted once), and instead of the rest when the generation fails.
 * `doneSentinel`: end with `data: [DONE]` (chat and completions; the Responses API has none).
 * A streamed choice keeps no text (ChoiceOutputOptions `keepText`), so `result.content` is '' and `result.reasoning`
 * null here: a shaper reads the finish reason and counts, and builds any text it needs from the deltas.
 */
export interface StreamShaper {
  opening(): SseEvent[];
  delta(index: number, delta: ChoiceDelta, logprobs: Record<string, unknown> | null): SseEvent[];
  finish(index: number, delta: ChoiceDelta, result: ChoiceResult, logprobs: Record<string, unknown> | null): SseEvent[];
  closing(usage: Usage, results: readonly ChoiceResult[]): SseEvent[];
  error(err: ApiError): SseEvent[];
  readonly doneSentinel: boolean;
  /**
   * Optional per-token fast path: the whole SSE record of a delta of choice `index` that carries only content `text`
   * (non-empty; no reasoning, tool calls or logprobs), byte for byte what `delta` would send for it.
   */
  textRecord?(index: number, text: string): string;
}

/** How one endpoint shapes its responses (chat, completions, Responses). */
export interface ResponseShape {
  /** Metrics label and log name, e.g. `/v1/chat/completions`. */
  endpoint: string;
  /** Response id prefix: `chatcmpl-`, `cmpl-` or `resp_`. */
  idPrefix: string;
  /** How the endpoint spells the logprob parameters (logprobs.ts `parseLogprobs`). */
  logprobsParams: 'chat' | 'completions';
  /** Render logprob entries in the endpoint's shape; `offset` is the choice's running text offset (completions). */
  renderLogprobs(
    entries: readonly TokenLogprob[],
    k: number,
    tokenText: TokenText,
    offset: { value: number },
  ): Record<string, unknown>;
  /** The non-streaming body from every choice's result (index order) and the usage; `logprobs(i)` renders choice i's. */
  body(
    base: ResponseBase,
    results: readonly ChoiceResult[],
    usage: Usage,
    logprobs: (index: number) => Record<string, unknown> | null,
  ): unknown;
  /**
   * A writer for one streamed response. `includeUsage`: `stream_options.include_usage`; `continuousUsage`: vLLM's
   * `stream_options.continuous_usage_stats` (with `include_usage`), the usage so far for every chunk. Absent: null.
   */
  stream(base: ResponseBase, opts: { includeUsage: boolean; n: number; continuousUsage?: () => Usage }): StreamShaper;
  /**
   * Resolves once what `body` or the stream's `closing` stored can be read from every front (Responses: the store
   * write, acknowledged by the router with `--workers N`), so a client that reads the response back right after it
   * ended finds it whichever front it reaches. Absent: nothing to wait for.
   */
  settled?(): Promise<void>;
}

/**
 * The chat/completions family of shapes: stream chunks `{id, object, created, model, system_fingerprint, choices,
 * usage?}` ending with `[DONE]`, an optional opening chunk per choice (chat: the assistant role), every choice's
 * `finish_reason` null until its terminal chunk (gateway.md 12), and with `include_usage` one last chunk with
 * `choices: []` and the usage (every other chunk has `usage: null`, or with vLLM's `continuous_usage_stats` the usage
 * so far: the prompt, and the tokens every choice has generated).
 */
export interface ChunkedShapeSpec {
  endpoint: string;
  idPrefix: string;
  chunkObject: string;
  responseObject: string;
  logprobsParams: 'chat' | 'completions';
  renderLogprobs: ResponseShape['renderLogprobs'];
  /** The choice of the chunk sent right after a successful submit, or null for none. */
  openingChoice(index: number): Record<string, unknown> | null;
  /** A stream chunk's choice; `finishReason` null until the terminal chunk. */
  chunkChoice(
    index: number,
    delta: ChoiceDelta,
    finishReason: ChoiceResult['finishReason'] | null,
    logprobs: Record<string, unknown> | null,
  ): Record<string, unknown>;
  /** A choice of the non-streaming response. */
  fullChoice(index: number, result: ChoiceResult, logprobs: Record<string, unknown> | null): Record<string, unknown>;
}

/** A `ResponseShape` for chat or completions from its per-choice parts (see `ChunkedShapeSpec`). */
export function chunkedShape(spec: ChunkedShapeSpec): ResponseShape {
  return {
    endpoint: spec.endpoint,
    idPrefix: spec.idPrefix,
    logprobsParams: spec.logprobsParams,
    renderLogprobs: spec.renderLogprobs,
    body: (base, results, usage, logprobs) => ({
      ...header(base, spec.responseObject),
      ...(base.promptTokenIds !== undefined ? { prompt_token_ids: base.promptTokenIds } : {}),
      // vLLM's `stop_reason`: the stop string or stop token id that ended the choice, else null (after finish_reason).
      choices: results.map((r, i) => ({
        ...spec.fullChoice(i, r, logprobs(i)),
        stop_reason: r.stopReason,
        ...(r.tokenIds !== undefined ? { token_ids: r.tokenIds } : {}),
      })),
      usage,
    }),
    stream(base, { includeUsage, n, continuousUsage }) {
      const usageField = includeUsage ? { usage: null } : {};
      // vLLM sends the prompt's ids (return_token_ids) in the first chunk only.
      let promptIds = base.promptTokenIds;
      const chunk = (choices: Record<string, unknown>[]): SseEvent => {
        const head = header(base, spec.chunkObject);
        if (promptIds !== undefined) {
          head.prompt_token_ids = promptIds;
          promptIds = undefined;
        }
        return {
          data: { ...head, choices, ...(continuousUsage !== undefined ? { usage: continuousUsage() } : usageField) },
        };
      };
      const withIds = (choice: Record<string, unknown>, delta: ChoiceDelta) =>
        delta.tokenIds === undefined ? choice : { ...choice, token_ids: delta.tokenIds };
      // A content-only delta (the bulk of a stream) is a record pre-serialized around its text, per choice index
      // (chunk-json.ts).
      const textRecords: Array<(text: string) => string> = [];
      const textRecord = (index: number, text: string): string =>
        (textRecords[index] ??= jsonWithSlot(
          (slot) =>
            chunk([spec.chunkChoice(index, { reasoning: '', content: slot, toolCalls: [], logprobs: [] }, null, null)])
              .data,
          SSE_DATA_LEAD,
          SSE_RECORD_END,
        ))(text);
      const textChunk = (index: number, text: string): SseEvent => ({ data: null, record: textRecord(index, text) });
      return {
        doneSentinel: true,
        opening: () =>
          perChoice(n, (i) => spec.openingChoice(i))
            .filter((c): c is Record<string, unknown> => c !== null)
            .map((c) => chunk([c])),
        delta: (index, delta, logprobs) =>
          continuousUsage === undefined &&
          delta.tokenIds === undefined &&
          logprobs === null &&
          delta.reasoning === '' &&
          delta.toolCalls.length === 0 &&
          delta.content !== ''
            ? [textChunk(index, delta.content)]
            : [chunk([withIds(spec.chunkChoice(index, delta, null, logprobs), delta)])],
        finish: (index, delta, result, logprobs) => [
          chunk([
            withIds(
              { ...spec.chunkChoice(index, delta, result.finishReason, logprobs), stop_reason: result.stopReason },
              delta,
            ),
          ]),
        ],
        closing: (usage) => (includeUsage ? [{ data: { ...header(base, spec.chunkObject), choices: [], usage } }] : []),
        error: (err) => [{ data: err.toBody() }],
        textRecord,
      };
    },
  };
}

/**
 * `[make(0), …, make(n − 1)]`: one entry per choice. A loop, not `Array.from({ length: n }, make)`, whose generic
 * array-like path costs ~0.4 µs even for n = 1 (issue 9, CPU per request; four per request).
 */
export function perChoice<T>(n: number, make: (index: number) => T): T[] {
  const out: T[] = [];
  for (let i = 0; i < n; i++) out.push(make(i));
  return out;
}

/** Fields every response and chunk carries (besides `object`). */
export interface ResponseBase {
  id: string;
  created: number;
  model: string;
  system_fingerprint: string;
  /** The prompt's token ids, when the request asked for them (vLLM `return_token_ids`); absent otherwise. */
  promptTokenIds?: readonly number[];
}

/** The common fields in OpenAI's order: `id`, `object`, `created`, `model`, `system_fingerprint`. */
export function header(base: ResponseBase, object: string): Record<string, unknown> {
  return { id: base.id, object, created: base.created, model: base.model, system_fingerprint: base.system_fingerprint };
}
