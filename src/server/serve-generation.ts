/**
 * The shared request flow of `/v1/chat/completions` and `/v1/completions` (gateway.md sections 8-14 and 16):
 * validate → choose the live engine groups (and the pinned rank) → tokenize → choose the group (groups.ts) →
 * admission against that group's context → mint the engine request id → submit (optionally pinned) → stream SSE
 * chunks or collect a full response; with disconnect detection on the HTTP/1.1 connection in every phase
 * (gateway.md 13; disconnect.ts).
 */
import { randomUUID } from 'node:crypto';
import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify';
import type { GenerateRequest, SamplingOptions } from '../protocols/types.js';
import { createDetokenizer } from '../tokenizer/detokenizer.js';
import type { OffLoopTokenizer } from '../tokenizer/off-loop.js';
import type { GatewayTokenizer } from '../tokenizer/tokenizer.js';
import type { AdmissionGate } from './admission.js';
import type { BackendGroup, BackendStream } from './backend.js';
import { watchClientDisconnect, type DisconnectSignal, type DisconnectWatch } from './disconnect.js';
import { ApiError, badRequest, blameEngineForTokenId, toApiError } from './errors.js';
import {
  ChoiceOutput,
  isEmptyDelta,
  type ChoiceDelta,
  type ChoiceOutputOptions,
  type ChoiceResult,
} from './choice-output.js';
import { capableGroups } from './engine-capabilities.js';
import {
  ChoiceGeneration,
  ClientDisconnectedError,
  LatencyTracker,
  makeUsage,
  type GenerationEvent,
  type TokenLogprob,
  type Usage,
} from './generation.js';
import { GenerationRun, type RunChoice } from './generation-run.js';
import { jsonWithSlot } from './chunk-json.js';
import { parseLogprobs, type TokenText } from './logprobs.js';
import { MAX_N, subRequestIds, subRequestSeed } from './fan-out.js';
import { StopStringMatcher } from '../tokenizer/stop-matcher.js';
import type { GatewayMetrics, RequestOutcome, VllmFinishedReason } from './metrics.js';
import type { RankStatsBook } from './rank-stats.js';
import type { GroupRouter } from './groups.js';
import { buildSampling, parseStopStrings, rejectUnsupported, requestedLimit, type ContextLimits } from './params.js';
import { parseDpRankHeader, DP_RANK_HEADER } from './pin.js';
import type { ReasoningParserName, ToolCallParserName } from './parsers/index.js';
import { REQUEST_ID_HEADER, clientRequestId } from './request-id.js';
import type { ResponsesStore } from './responses/store.js';
import type { CommonBodyT } from './schemas.js';
import {
  ClientStalledError,
  OPENING_HOLD_MS,
  SSE_DATA_LEAD,
  SSE_RECORD_END,
  SseWriter,
  type StreamBackpressure,
} from './sse.js';
import {
  parseStructuredOutput,
  type RequestedStructuredOutput,
  type StructuredOutputFields,
} from './structured-output.js';

/** What the generation routes share (built once by `buildApp`). */
export interface RouteContext {
  /** The engine groups and the worker-level choice among them (groups.ts). */
  router: GroupRouter;
  tokenizer: GatewayTokenizer;
  /** This process's bounded off-loop tokenizer over `tokenizer` (large prompts, long chats, /tokenize, /detokenize). */
  offLoop: OffLoopTokenizer;
  /** The reported model name: the first of `servedModelNames` (vLLM's `served_model_name[0]`). */
  modelId: string;
  /** Every name a request's `model` may use (`--served-model-name`, one or more; vLLM semantics). */
  servedModelNames: readonly string[];
  metrics: GatewayMetrics;
  /** Per-rank dispatch rates and latency percentiles (`/v1/gateway/ranks`, the dashboard). */
  rankStats: RankStatsBook;
  /** Monotonic clock in ms (latency metrics). */
  now: () => number;
  /** `system_fingerprint` of every response. */
  systemFingerprint: string;
  /** Requests whose outcome was already counted (the app's error handler counts the rest). */
  counted: WeakSet<object>;
  /** The active tool-call parser (`--tool-call-parser`, or the chat template's default), or null: no `auto`. */
  toolCallParser: ToolCallParserName | null;
  /** The reasoning parser (`--reasoning-parser`), or null: no `reasoning_content`. */
  reasoningParser: ReasoningParserName | null;
  /** Stored Responses-API responses (`store`, `previous_response_id`; responses/store.ts). */
  responses: ResponsesStore;
  /** Per-stream buffer bound and stall timeout of streamed responses (sse.ts). */
  streamBackpressure: StreamBackpressure;
  /** Whether the gateway is draining (admission.ts; `/ready` reports it). */
  admission: AdmissionGate;
}

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
  /** A writer for one streamed response. `includeUsage`: `stream_options.include_usage`. */
  stream(base: ResponseBase, opts: { includeUsage: boolean; n: number }): StreamShaper;
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
 * `choices: []` and the usage (every other chunk has `usage: null`).
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
      choices: results.map((r, i) => spec.fullChoice(i, r, logprobs(i))),
      usage,
    }),
    stream(base, { includeUsage, n }) {
      const usageField = includeUsage ? { usage: null } : {};
      const chunk = (choices: Record<string, unknown>[]): SseEvent => ({
        data: { ...header(base, spec.chunkObject), choices, ...usageField },
      });
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
          logprobs === null && delta.reasoning === '' && delta.toolCalls.length === 0 && delta.content !== ''
            ? [textChunk(index, delta.content)]
            : [chunk([spec.chunkChoice(index, delta, null, logprobs)])],
        finish: (index, delta, result, logprobs) => [
          chunk([spec.chunkChoice(index, delta, result.finishReason, logprobs)]),
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
function perChoice<T>(n: number, make: (index: number) => T): T[] {
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
}

/** The common fields in OpenAI's order: `id`, `object`, `created`, `model`, `system_fingerprint`. */
export function header(base: ResponseBase, object: string): Record<string, unknown> {
  return { id: base.id, object, created: base.created, model: base.model, system_fingerprint: base.system_fingerprint };
}

/**
 * A validated, tokenized request ready to submit: `group` is the chosen engine group (its client gets the submit),
 * `dpRank` the pinned DP rank inside it (gateway.md 14) or undefined for the engine client's own choice.
 */
export interface PreparedRequest {
  promptTokenIds: number[];
  sampling: SamplingOptions;
  stream: boolean;
  includeUsage: boolean;
  group: BackendGroup;
  dpRank: number | undefined;
  /** Stop strings matched on the text (gateway.md 6); [] for none. */
  stop: string[];
  /** Keep the matched stop string in the output (vLLM `include_stop_str_in_output`). */
  includeStopStr: boolean;
  /** Number of choices, 1..MAX_N; each is its own engine sub-request (gateway.md 10). */
  n: number;
  /** Requested top-logprob count (0..20), or null when logprobs are not requested (logprobs.ts). */
  topLogprobs: number | null;
  /** The parsers of choice `index` (reasoning, tool calls; choice-output.ts). Absent: plain content. */
  output?: (index: number) => ChoiceOutputOptions;
  /**
   * Token ids added to `sampling.stopTokenIds` because a stop string is exactly that one token (gateway.md 6, as
   * SMG converts them); their text is not stripped but goes through the stop-string matcher like any other text.
   * Ids the request or the EOS set already stops on are not listed. Absent: none.
   */
  convertedStopIds?: number[];
}

/**
 * The ids of the stop strings that encode to exactly one token whose text is the stop string itself (gateway.md 6:
 * SMG sends those to the engine as stop token ids so it stops at once instead of being aborted), excluding ids in
 * `already` (the request's stop ids and the EOS ids). Units: token ids.
 */
export function singleTokenStopIds(
  tokenizer: Pick<GatewayTokenizer, 'encode' | 'decode'>,
  stops: readonly string[],
  already: ReadonlySet<number>,
): number[] {
  const out: number[] = [];
  for (const stop of stops) {
    const ids = tokenizer.encode(stop, { addSpecialTokens: false });
    const id = ids[0];
    if (ids.length !== 1 || id === undefined || already.has(id) || out.includes(id)) continue;
    if (tokenizer.decode([id], { skipSpecialTokens: false }) === stop) out.push(id);
  }
  return out;
}

/** The validated `n` (default 1): an integer in [1, MAX_N]; throws `ApiError` 400 (`param: 'n'`) otherwise. */
export function parseN(n: number | null | undefined): number {
  if (n === null || n === undefined) return 1;
  if (!Number.isSafeInteger(n) || n < 1 || n > MAX_N)
    throw badRequest(`'n' must be an integer in [1, ${MAX_N}]; got ${n}`, 'n');
  return n;
}

/**
 * Whether `log` writes lines of `level` (pino's `isLevelEnabled`; a logger without it is taken to write them), so a
 * line's fields are only gathered when it is written.
 */
function levelEnabled(log: FastifyBaseLogger, level: 'debug' | 'info' | 'warn'): boolean {
  const check = (log as { isLevelEnabled?: (level: string) => boolean }).isLevelEnabled;
  return typeof check !== 'function' || check.call(log, level);
}

/** A duration in ms rounded to 0.1 ms for the access log; null stays null. */
function roundMs(ms: number | null): number | null {
  return ms === null ? null : Math.round(ms * 10) / 10;
}

/** The context sizes (tokens) of one group, for admission and its error messages (a serving group knows them). */
function limitsOf(group: BackendGroup, promptParam: ContextLimits['promptParam']): ContextLimits {
  return {
    maxModelLen: group.backend.maxModelLen ?? 0,
    contextTokenLimit: group.backend.contextTokenLimit,
    promptParam,
  };
}

/**
 * Tokens a request needs from a group's usable context: the prompt plus its explicit limit (`max_completion_tokens`
 * or `max_tokens`, gateway.md 9.1), or plus one token without a usable explicit limit (gateway.md 9.2: a prompt
 * that leaves no room for a completion is refused). Invalid limits are left to `buildSampling` to refuse.
 */
function tokensNeeded(body: CommonBodyT, promptTokens: number): number {
  const limit = requestedLimit(body);
  const explicit = limit !== null && Number.isSafeInteger(limit.value) && limit.value >= 1 ? limit.value : 1;
  return promptTokens + explicit;
}

/** Mint an id that is both the response id and the engine request id (never a client-supplied id, gateway.md 13). */
export function mintRequestId(prefix: string): string {
  return `${prefix}${randomUUID().replaceAll('-', '')}`;
}

/**
 * Refuse a `model` that is not one of the served names with 404 (vLLM's behaviour); an absent/null model means the
 * served one. `served` is the served model name or the list of them (`--served-model-name`, first = reported).
 */
export function checkModel(model: string | null | undefined, served: string | readonly string[]): void {
  const names = typeof served === 'string' ? [served] : served;
  if (model === null || model === undefined || names.includes(model)) return;
  const list = names.map((n) => `'${n}'`).join(', ');
  throw new ApiError(404, `The model '${model}' does not exist (this gateway serves ${list})`, {
    type: 'not_found_error',
    param: 'model',
    code: 'model_not_found',
  });
}

/** A prepared prompt: its token ids, the parsers of each choice, and a constraint the prompt side adds. */
export interface PreparedPrompt {
  tokens: number[];
  /** The parsers of choice `index` (absent: plain content). */
  output?: (index: number) => ChoiceOutputOptions;
  /** A structured-output constraint from the prompt side (a forced tool choice), with its parameter, or null. */
  constraint?: RequestedStructuredOutput | null;
}

/** How a generation route gets its prompt (chat: templated `messages`; completions: `prompt`; Responses: `input`). */
export interface PromptSource<B extends CommonBodyT> {
  /** The prompt parameter named in admission errors (gateway.md 9.2). */
  param: ContextLimits['promptParam'];
  /**
   * The prompt of a schema-valid body (gateway.md 5) and how its output is parsed; throws `ApiError` 400 naming the
   * bad field, or 400 `context_length_exceeded` when a text prompt is too large to fit `limits` even before
   * tokenizing it; rejects with the `OffLoopError` of off-loop work (a full queue; `cancelled` once `signal`, the
   * client's disconnect, aborted).
   */
  prepare(
    ctx: RouteContext,
    body: B,
    limits: ContextLimits,
    opts: { constrained: boolean; signal: DisconnectSignal },
  ): PreparedPrompt | Promise<PreparedPrompt>;
}

/**
 * The handler body shared by `/v1/chat/completions` and `/v1/completions`: take the start time (`ctx.now()`, ms), then
 * check `model` (404), refuse unsupported parameters and `stream_options` without `stream: true` (400), validate
 * `n` (1..MAX_N), `stop` (params.ts `parseStopStrings`), `logprobs`/`top_logprobs` (logprobs.ts) and the
 * structured-output parameters (structured-output.ts); take the `X-data-parallel-rank` pin (400 unless some group has
 * that rank; gateway.md 14) and the groups that can serve it now (503 with `Retry-After` when none can, or when the
 * pinned rank is not ready; groups.ts); prepare the prompt via
 * `prompt` (its tokens, refusing a text too large for the widest candidate's `contextTokenLimit` before tokenizing
 * it; the parsers of each choice; a constraint from a forced tool choice, 400 together with another constraint);
 * keep the groups whose engine can serve the logprobs and the constraint (engine-capabilities.ts; 400 naming the
 * limit when none can); choose the group among those whose context fits the request
 * (`GroupRouter.choose`: lowest best-rank score; when none fits, the widest one, whose admission then refuses it
 * naming the largest context served); validate admission and sampling against the chosen group's `contextTokenLimit` (`buildSampling`,
 * gateway.md 8-9; the default completion limit is that group's context minus the prompt, so a vLLM group always
 * gets a concrete `max_tokens`, gateway.md 9.1); add the single-token stop strings to the stop token ids
 * (`singleTokenStopIds`, gateway.md 6); and serve the request with `serveGeneration`. Nothing awaits
 * between the group choice and the submit, so the chosen rank is reserved in the same tick (dp-routing.md 12.3).
 * The client's disconnect is watched from the prompt's preparation on: a client that leaves while its prompt waits
 * for the off-loop tokenizer has its job dropped and is counted as a 499 with nothing written (issue 26 part 5).
 * `body` is the schema-validated request body. Throws `ApiError` for every refusal (the app's error handler renders
 * it); later errors behave as in `serveGeneration`.
 */
export async function handleGeneration<B extends CommonBodyT>(
  ctx: RouteContext,
  shape: ResponseShape,
  prompt: PromptSource<B>,
  request: FastifyRequest,
  reply: FastifyReply,
  body: B,
): Promise<unknown> {
  const startedAt = ctx.now();
  checkModel(body.model, ctx.servedModelNames);
  rejectUnsupported(body as Record<string, unknown>);
  const n = parseN(body.n);
  const stop = parseStopStrings(body.stop);
  const topLogprobs = parseLogprobs(body as { logprobs?: unknown; top_logprobs?: unknown }, shape.logprobsParams);
  if (body.stream !== true && body.stream_options != null) {
    throw badRequest(`'stream_options' is only allowed when 'stream' is true`, 'stream_options');
  }
  const requested = parseStructuredOutput(body as StructuredOutputFields);
  const pinHeader = request.headers[DP_RANK_HEADER];
  const dpRank = pinHeader === undefined ? undefined : parseDpRankHeader(pinHeader, ctx.router.validRanks());
  const pinned = ctx.router.candidates(dpRank);
  const widestOf = (gs: readonly BackendGroup[]) =>
    gs.reduce((a, b) => (b.backend.contextTokenLimit > a.backend.contextTokenLimit ? b : a));
  // Watched from here: a client that leaves while its prompt waits for the off-loop tokenizer is dropped from its queue.
  const disconnect = watchClientDisconnect(request.raw, reply.raw);
  let handedOver = false;
  try {
    const prepared = await prompt.prepare(ctx, body, limitsOf(widestOf(pinned), prompt.param), {
      constrained: requested !== null,
      signal: disconnect.signal,
    });
    const next = toServe(ctx, shape, prompt, body, prepared, {
      pinned,
      dpRank,
      n,
      stop,
      topLogprobs,
      requested,
      widest: widestOf,
    });
    handedOver = true;
    return await serveGeneration(ctx, shape, request, reply, next, startedAt, disconnect);
  } catch (err) {
    if (!disconnect.signal.aborted || handedOver) throw err;
    // The client left before its request was submitted: nothing to answer (the engine never saw it).
    ctx.counted.add(request);
    ctx.metrics.countRequest(shape.endpoint, 499, 'cancelled');
    if (!reply.sent) reply.hijack();
    if (!reply.raw.destroyed) reply.raw.destroy();
    return reply;
  } finally {
    if (!handedOver) disconnect.dispose();
  }
}

/**
 * The request `serveGeneration` runs, from a prepared prompt (see `handleGeneration`): the group choice among those
 * whose context fits, admission and sampling against it, and the single-token stop ids. Throws `ApiError` for every
 * refusal. Synchronous: the chosen rank is reserved by the submit in the same tick.
 */
function toServe<B extends CommonBodyT>(
  ctx: RouteContext,
  shape: ResponseShape,
  prompt: PromptSource<B>,
  body: B,
  prepared: PreparedPrompt,
  args: {
    pinned: readonly BackendGroup[];
    dpRank: number | undefined;
    n: number;
    stop: string[];
    topLogprobs: number | null;
    requested: RequestedStructuredOutput | null;
    widest: (gs: readonly BackendGroup[]) => BackendGroup;
  },
): PreparedRequest {
  const { pinned, dpRank, n, stop, topLogprobs, requested, widest: widestOf } = args;
  const promptTokenIds = prepared.tokens;
  if (requested !== null && prepared.constraint) {
    throw badRequest(
      `'${requested.param}' cannot be combined with ${prepared.constraint.param}: the engines take one structured-output constraint`,
      requested.param,
    );
  }
  const constraint = requested ?? prepared.constraint ?? null;
  // Only groups whose engine can express the request's output options (engine-capabilities.ts).
  const eligible = capableGroups(pinned, {
    topLogprobs,
    logprobsParam: shape.logprobsParams === 'chat' ? 'top_logprobs' : 'logprobs',
    structuredOutput: constraint?.output ?? null,
    structuredOutputParam: constraint?.param ?? 'response_format',
  });
  const widest = widestOf(eligible);
  const needed = tokensNeeded(body, promptTokenIds.length);
  const fitting = eligible.filter((g) => g.backend.contextTokenLimit >= needed);
  // None fits: the widest candidate's admission refuses it below, naming the largest context any group serves.
  const group = fitting.length > 0 ? ctx.router.choose(fitting) : widest;
  const sampling = buildSampling(body, {
    ...limitsOf(group, prompt.param),
    promptTokens: promptTokenIds.length,
    vocabSize: ctx.tokenizer.vocabSize,
  });
  sampling.structuredOutput = constraint?.output ?? null;
  const convertedStopIds = singleTokenStopIds(
    ctx.tokenizer,
    stop,
    new Set([...sampling.stopTokenIds, ...ctx.tokenizer.eosTokenIds]),
  );
  sampling.stopTokenIds = [...sampling.stopTokenIds, ...convertedStopIds];
  return {
    promptTokenIds,
    sampling,
    stream: body.stream === true,
    includeUsage: body.stream_options?.include_usage === true,
    group,
    dpRank,
    stop,
    includeStopStr: body.include_stop_str_in_output === true,
    n,
    topLogprobs,
    convertedStopIds,
    ...(prepared.output !== undefined ? { output: prepared.output } : {}),
  };
}

/**
 * Run one prepared request to its terminal outcome and answer it. Errors before the response starts are thrown (the
 * app's error handler renders them); once SSE has started they become an error event followed by `[DONE]`.
 *
 * With `n > 1` (gateway.md 10) the request becomes n engine sub-requests (ids `<id>-<i>`, seeds s + i, see
 * fan-out.ts), each submitted and routed on its own (a failed submit cancels the ones already submitted); their
 * events are merged by arrival with choice indexes 0..n−1. Streaming: every index gets its own opening chunk (chat)
 * and its own terminal chunk; non-streaming: n choices in index order. Usage counts the prompt once and sums the
 * completion tokens. A disconnect or any sub-request's error aborts every unfinished sub-request; an error ends the
 * response with that error. A streaming client that keeps its buffer full past the stall timeout (sse.ts) has every
 * sub-request aborted and its connection closed. Latency metrics (TTFT/ITL/E2E) follow sub-request 0.
 * `disconnect` watches the client since before its prompt was prepared (`handleGeneration`); it is disposed here.
 */
export async function serveGeneration(
  ctx: RouteContext,
  shape: ResponseShape,
  request: FastifyRequest,
  reply: FastifyReply,
  prepared: PreparedRequest,
  startedAt: number,
  disconnect: DisconnectWatch,
): Promise<unknown> {
  const { metrics } = ctx;
  const { group, dpRank, n } = prepared;
  const backend = group.backend;
  const requestId = mintRequestId(shape.idPrefix);
  const echoId = clientRequestId(request.headers) ?? requestId;
  const base: ResponseBase = {
    id: requestId,
    created: Math.floor(Date.now() / 1000),
    model: ctx.modelId,
    system_fingerprint: ctx.systemFingerprint,
  };
  const engineRequests: GenerateRequest[] = subRequestIds(requestId, n).map((id, i) => ({
    requestId: id,
    promptTokenIds: prepared.promptTokenIds,
    sampling: { ...prepared.sampling, seed: subRequestSeed(prepared.sampling.seed, i) },
    stream: prepared.stream,
    returnLogprob: prepared.topLogprobs !== null,
    // vLLM returns k ranked candidates when asked (engine-wire.md 5.6); k ≤ 1 needs the sampled token only.
    ...(prepared.topLogprobs !== null && prepared.topLogprobs > 1 ? { topLogprobs: prepared.topLogprobs } : {}),
  }));

  // `disconnect` watches the request's socket and the raw response: a close before the response finished means the
  // client went away (every phase: before submit returns, before the first token, mid-stream, and while the response
  // is still queued behind an earlier pipelined one; see disconnect.ts).
  const raw = reply.raw;
  // Per-choice latency: choice 0 feeds the histograms, every choice its rank's statistics (set once submitted).
  const trackers: LatencyTracker[] = [];
  // Per choice: the reported finish reason (tool_calls included) once it finished.
  const reasons: (RequestOutcome | null)[] = perChoice(n, () => null);
  let completionTokens = 0;
  let cachedTokens = 0;
  let engineIndexes: (number | null)[] = [];
  /** Tokens the choices that did not finish (aborted, stalled, failed) had received: they count in the access log too. */
  const unfinishedTokens = (): number => {
    let sum = 0;
    for (let i = 0; i < trackers.length; i++) if (reasons[i] === null) sum += trackers[i]!.tokensSeen;
    return sum;
  };
  /** The one access-log line of the request (issue #13 part 3), at its terminal outcome. */
  const accessLog = (status: number, outcome: RequestOutcome, error?: string) => {
    // The line is built only for a level that is logged (the default `info` logs it; `--log-level warn` only failures).
    if (!levelEnabled(request.log, error !== undefined ? 'warn' : 'info')) return;
    const line = {
      requestId,
      endpoint: shape.endpoint,
      worker: group.worker,
      rank: n === 1 ? (engineIndexes[0] ?? null) : engineIndexes,
      status,
      promptTokens: prepared.promptTokenIds.length,
      completionTokens: completionTokens + unfinishedTokens(),
      cachedTokens,
      ttftMs: roundMs(trackers[0]?.ttftMs ?? null),
      durationMs: roundMs(ctx.now() - startedAt),
      finishReason: n === 1 ? outcome : reasons.map((r) => r ?? outcome),
      ...(n > 1 ? { n } : {}),
      ...(prepared.stream ? { stream: true } : {}),
      ...(error !== undefined ? { error } : {}),
    };
    if (error !== undefined) request.log.warn(line, 'request failed');
    else request.log.info(line, 'request finished');
  };
  const count = (status: number, outcome: RequestOutcome, error?: string) => {
    ctx.counted.add(request);
    metrics.countRequest(shape.endpoint, status, outcome);
    accessLog(status, outcome, error);
  };
  /** A choice finished: count it as a finished engine request (vLLM counters). */
  const choiceFinished = (
    index: number,
    engineReason: 'stop' | 'length',
    reported: RequestOutcome,
    generated: number,
    cached: number,
  ) => {
    reasons[index] = reported;
    completionTokens += generated;
    cachedTokens = Math.max(cachedTokens, cached);
    metrics.countEngineRequest(engineReason, prepared.promptTokenIds.length, generated);
  };
  const countAborted = () => {
    for (let i = 0; i < trackers.length; i++) {
      if (reasons[i] === null)
        metrics.countEngineRequest(
          'abort' satisfies VllmFinishedReason,
          prepared.promptTokenIds.length,
          trackers[i]!.tokensSeen,
        );
    }
  };
  const endDisconnected = () => {
    countAborted();
    count(499, 'cancelled');
    if (!reply.sent) reply.hijack();
    if (!raw.destroyed) raw.destroy();
    return reply;
  };
  const streams: BackendStream[] = [];
  // A client that kept its stream's buffer full past the stall timeout (sse.ts): ABORT its engine requests, close.
  const endStalled = (err: ClientStalledError) => {
    for (const s of streams) s.cancel();
    countAborted(); // the engine requests end as aborts, as for a disconnect
    count(499, 'cancelled');
    request.log.info(
      { requestId, stalledMs: err.stalledMs, bufferedBytes: err.bufferedBytes },
      'client stopped reading; engine request aborted and connection closed',
    );
    if (!raw.destroyed) raw.destroy();
    return reply;
  };

  try {
    // Submit every sub-request in the same tick (each routed on its own; dp-routing.md 12.3).
    const settled = await Promise.allSettled(
      engineRequests.map((r) => backend.submit(r, { dpRank, signal: disconnect.signal })),
    );
    let submitError: unknown = null;
    for (const s of settled) {
      if (s.status === 'fulfilled') streams.push(s.value);
      else submitError ??= s.reason;
    }
    if (submitError !== null || disconnect.signal.aborted) {
      for (const s of streams) s.cancel();
      if (disconnect.signal.aborted) return endDisconnected();
      throw toApiError(submitError);
    }
    engineIndexes = streams.map((s) => s.engineIndex);
    const submittedAt = ctx.now();
    for (const s of streams) {
      const rank =
        s.engineIndex === null ? undefined : { book: ctx.rankStats, worker: group.worker, engineIndex: s.engineIndex };
      if (rank !== undefined) ctx.rankStats.recordDispatch(group.worker, rank.engineIndex, submittedAt);
      trackers.push(
        new LatencyTracker(trackers.length === 0 ? metrics : null, shape.endpoint, startedAt, ctx.now, rank),
      );
    }
    if (levelEnabled(request.log, 'debug')) {
      request.log.debug(
        { requestId, worker: group.worker, engineIndexes, n, promptTokens: prepared.promptTokenIds.length },
        'submitted',
      );
    }
    // Ids whose text is dropped when they end a choice: the request's stop ids and EOS, not converted stop strings.
    const converted = new Set(prepared.convertedStopIds ?? []);
    const stopTokenIds = new Set(
      [...prepared.sampling.stopTokenIds, ...ctx.tokenizer.eosTokenIds].filter((id) => !converted.has(id)),
    );
    const promptTokens = prepared.promptTokenIds.length;
    const choices: RunChoice[] = streams.map((stream, i) => ({
      stream,
      latency: trackers[i],
      generation: new ChoiceGeneration({
        requestId: stream.requestId,
        detokenizer: createDetokenizer(ctx.tokenizer, { skipSpecialTokens: prepared.sampling.skipSpecialTokens }),
        stopTokenIds,
        promptTokens,
        stopMatcher: new StopStringMatcher(prepared.stop, { includeStopStr: prepared.includeStopStr }),
        logprobs: prepared.topLogprobs !== null,
        minTokens: prepared.sampling.minNewTokens,
        latency: trackers[i],
      }),
    }));
    const outputs = perChoice(
      n,
      (i) =>
        new ChoiceOutput({ ...(prepared.output?.(i) ?? { reasoning: null, tools: null }), keepText: !prepared.stream }),
    );
    const tokenText: TokenText = (id) => ctx.tokenizer.decode([id], { skipSpecialTokens: false });
    const k = prepared.topLogprobs;
    const offsets = perChoice(n, () => ({ value: 0 }));
    const render = (index: number, entries: readonly TokenLogprob[]) => {
      if (k === null) return null;
      try {
        return shape.renderLogprobs(entries, k, tokenText, offsets[index]!);
      } catch (err) {
        // A candidate id the tokenizer refuses came from the engine (a 502 naming the rank).
        throw blameEngineForTokenId(err, streams[index]!.requestId, streams[index]!.engineIndex);
      }
    };
    const results = () => outputs.map((o) => o.result!);
    // The prompt is counted once over the n choices, and so are its cached tokens: choice 0's (they share the prompt).
    const usage = () =>
      makeUsage(
        promptTokens,
        outputs.reduce((sum, o) => sum + (o.result?.completionTokens ?? 0), 0),
        outputs[0]?.result?.usage.prompt_tokens_details.cached_tokens ?? 0,
      );
    const outcome = () => outputs[0]!.result?.finishReason ?? 'stop';
    /** Fold one event into its choice; returns the choice's delta (a finish also counts the choice). */
    const take = (index: number, ev: GenerationEvent): ChoiceDelta => {
      const out = outputs[index]!;
      const delta = out.push(ev);
      if (ev.type === 'finish')
        choiceFinished(index, ev.finishReason, out.result!.finishReason, ev.usage.completion_tokens, ev.cachedTokens);
      return delta;
    };

    if (!prepared.stream) {
      const run = new GenerationRun(choices, (index, ev) => {
        if (ev.type !== 'delta' || ev.logprobs.length > 0 || !outputs[index]!.appendContent(ev.text)) take(index, ev);
      });
      // One listener per request: a disconnect ends the run (every unfinished sub-request is aborted).
      const onDisconnect = () => run.fail(new ClientDisconnectedError());
      disconnect.signal.addEventListener('abort', onDisconnect, { once: true });
      try {
        run.start();
        await run.done;
      } catch (err) {
        if (err instanceof ClientDisconnectedError || disconnect.signal.aborted) return endDisconnected();
        const apiErr = toApiError(err);
        count(apiErr.statusCode, 'error', apiErr.message);
        throw apiErr;
      } finally {
        disconnect.signal.removeEventListener('abort', onDisconnect);
      }
      if (outputs.some((o) => o.result === null)) {
        throw new ApiError(500, 'generation ended without an outcome', { code: 'internal_error' });
      }
      // Rendered before counting: a logprob candidate the tokenizer refuses makes it a 502 (`render`).
      const body = shape.body(base, results(), usage(), (i) => render(i, outputs[i]!.result!.logprobs));
      if (shape.settled !== undefined) await shape.settled(); // Responses only: no extra turn elsewhere
      count(200, outcome());
      reply.header(REQUEST_ID_HEADER, echoId);
      return body;
    }

    // Streaming: from here on errors travel as SSE events.
    reply.hijack();
    const writer = shape.stream(base, { includeUsage: prepared.includeUsage, n });
    let run: GenerationRun | null = null;
    const sse = new SseWriter(
      raw,
      ctx.streamBackpressure,
      (bufferedBytes) =>
        request.log.debug({ requestId, bufferedBytes }, 'client is not keeping up: stream paused at the buffer bound'),
      { pause: () => run?.pause(), resume: () => run?.resume(), stalled: (err) => run?.fail(err) },
    );
    // The headers and the opening chunk wait for the first engine output (at most OPENING_HOLD_MS), so they leave in
    // the same write as it (sse.ts `start`).
    sse.start({ [REQUEST_ID_HEADER]: echoId }, { holdMs: OPENING_HOLD_MS });
    disconnect.setProbe(() => sse.probe());
    const send = (list: readonly SseEvent[]) => {
      for (const e of list) {
        if (e.record !== undefined) sse.sendRecord(e.record);
        else sse.send(e.data, e.event);
      }
    };
    // Without logprobs, a plain choice's delta (the bulk of a stream) is one pre-built record (StreamShaper.textRecord).
    const textRecord = k === null ? writer.textRecord : undefined;
    run = new GenerationRun(choices, (index, ev) => {
      sse.release();
      if (textRecord !== undefined && ev.type === 'delta' && ev.text !== '' && outputs[index]!.appendContent(ev.text)) {
        sse.sendRecord(textRecord(index, ev.text));
        return;
      }
      const delta = take(index, ev);
      const out = outputs[index]!;
      if (ev.type === 'finish') {
        send(writer.finish(index, delta, out.result!, render(index, ev.logprobs)));
        return;
      }
      // Text a reasoning or tool-call parser held back or consumed (`<think>`, a tool call's markup) leaves nothing to
      // send: vLLM's serving_chat.py skips such a delta. With logprobs the chunk still goes out, carrying them.
      if (!out.plain && ev.text !== '' && ev.logprobs.length === 0 && isEmptyDelta(delta)) return;
      send(writer.delta(index, delta, render(index, ev.logprobs)));
    });
    const onDisconnect = () => run!.fail(new ClientDisconnectedError());
    disconnect.signal.addEventListener('abort', onDisconnect, { once: true });
    try {
      send(writer.opening());
      run.start();
      await run.done;
      const closing = writer.closing(usage(), results());
      if (shape.settled !== undefined) await shape.settled(); // Responses only: no extra turn elsewhere
      send(closing);
      count(200, outcome());
    } catch (err) {
      if (err instanceof ClientStalledError) return endStalled(err);
      if (err instanceof ClientDisconnectedError || disconnect.signal.aborted) return endDisconnected();
      const apiErr = toApiError(err);
      // Mid-stream: the HTTP status is already 200; the error travels as an SSE event (logged with its own status).
      count(200, 'error', `mid-stream (${apiErr.statusCode}): ${apiErr.message}`);
      send(writer.error(apiErr));
    } finally {
      disconnect.signal.removeEventListener('abort', onDisconnect);
    }
    if (writer.doneSentinel) sse.done();
    else sse.end();
    return reply;
  } finally {
    disconnect.dispose();
  }
}
