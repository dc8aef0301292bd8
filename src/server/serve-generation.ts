/**
 * The shared request flow of `/v1/chat/completions` and `/v1/completions` (gateway.md sections 8-14 and 16):
 * validate → choose the live engine groups (and the pinned rank) → tokenize → choose the group (groups.ts) →
 * admission against that group's context → mint the engine request id → submit (optionally pinned) → stream SSE
 * chunks or collect a full response; with disconnect detection on the HTTP/1.1 connection in every phase
 * (gateway.md 13; disconnect.ts).
 */
import { randomHexId } from './random-id.js';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { GenerateRequest, LoraTarget, SamplingOptions } from '../protocols/types.js';
import { createDetokenizer } from '../tokenizer/detokenizer.js';
import { StopStringMatcher } from '../tokenizer/stop-matcher.js';
import type { GatewayTokenizer } from '../tokenizer/tokenizer.js';
import type { BackendGroup, BackendStream, EngineFamily } from './backend.js';
import type { TraceCarrier } from '../tracing.js';
import type { ChoiceOutputOptions } from './choice-output.js';
import { ChoiceOutputs } from './choice-outputs.js';
import { watchClientDisconnect, type DisconnectSignal, type DisconnectWatch } from './disconnect.js';
import { capableGroups } from './engine-capabilities.js';
import { ApiError, badRequest, toApiError } from './errors.js';
import { adapterGroups, adapterOf, loraOf } from './adapters.js';
import { MAX_N, subRequestIds, subRequestSeed } from './fan-out.js';
import { ChoiceGeneration, LatencyTracker } from './generation.js';
import type { RunChoice } from './generation-run.js';
import { parseLogprobs } from './logprobs.js';
import {
  badWordsTokenIds,
  buildSampling,
  parseStopStrings,
  parseReturnTokenIds,
  parseTruncatePromptTokens,
  rejectUnsupported,
  requestedLimit,
  type ContextLimits,
} from './params.js';
import { requestHeaderFacts } from './request-headers.js';
import { clientRequestId, REQUEST_ID_HEADER } from './request-id.js';
import type { RequestTrace } from './request-trace.js';
import { rateLimitHeaders } from './rate-limits.js';
import { flowTicketOf, submitSubRequests } from './submit-sub-requests.js';
import type { BudgetLimits } from '../engine-client/budgets.js';
import { endDisconnected, RequestRecord } from './request-record.js';
import { respondBuffered } from './respond-buffered.js';
import { respondStreamed } from './respond-streamed.js';
import type { ResponseBase, ResponseShape } from './response-shape.js';
import { DEFAULT_PRIORITY_BAND, vllmPriorityOf, type PriorityBand } from './priority-band.js';
import type { RouteContext } from './route-context.js';
import type { CommonBodyT } from './schemas.js';
import {
  parseStructuredOutput,
  type RequestedStructuredOutput,
  type StructuredOutputFields,
} from './structured-output.js';

/**
 * A validated, tokenized request ready to submit: `group` is the chosen engine group (its client gets the submit),
 * `dpRank` the pinned DP rank inside it (gateway.md 14) or undefined for the engine client's own choice.
 */
export interface PreparedRequest {
  promptTokenIds: number[];
  sampling: SamplingOptions;
  stream: boolean;
  includeUsage: boolean;
  /** vLLM's `stream_options.continuous_usage_stats`: every chunk carries the usage so far (with `includeUsage`). */
  continuousUsage: boolean;
  /** vLLM's `return_token_ids`: the answer carries the prompt's and every choice's token ids. */
  returnTokenIds: boolean;
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
  /** The request's priority band (priority-band.ts); on vLLM groups it sets the wire `priority`. */
  band: PriorityBand;
  /** The request's tenant (tenant.ts), for flow control's fairness. */
  tenant: string;
  /** The tenant's budget (keys file; engine-client/budgets.ts), or null. */
  budget: BudgetLimits | null;
  /** The request's own queue deadline (ms, `x-gateway-queue-timeout-ms`), or null for the gateway's. */
  queueTimeoutMs: number | null;
  /** The LoRA adapter the request names as its `model` (resolved in the chosen group), or undefined: the base model. */
  lora?: LoraTarget;
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
  return `${prefix}${randomHexId()}`;
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
 * (`GroupChooser.choose`: lowest best-rank score; when none fits, the widest one, whose admission then refuses it
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
  const policy = ctx.directory.policyOf(request.headers);
  const tenant = policy.name;
  ctx.tenants.set(request, tenant); // a refusal from here on is counted for the tenant too (the app's error handler)
  const adapter = adapterOf(ctx.chooser.groups, body.model, ctx.servedModelNames);
  rejectUnsupported(body as Record<string, unknown>);
  const n = parseN(body.n);
  const stop = parseStopStrings(body.stop);
  const topLogprobs = parseLogprobs(body as { logprobs?: unknown; top_logprobs?: unknown }, shape.logprobsParams);
  if (body.stream !== true && body.stream_options != null) {
    throw badRequest(`'stream_options' is only allowed when 'stream' is true`, 'stream_options');
  }
  const requested = parseStructuredOutput(body as StructuredOutputFields);
  const truncate = parseTruncatePromptTokens((body as { truncate_prompt_tokens?: unknown }).truncate_prompt_tokens);
  const { dpRank, band, queueTimeoutMs } = requestHeaderFacts(ctx, request, policy);
  const pinned = adapterGroups(ctx.chooser.candidates(dpRank), adapter);
  const widestOf = (gs: readonly BackendGroup[]) =>
    gs.reduce((a, b) => (b.backend.contextTokenLimit > a.backend.contextTokenLimit ? b : a));
  // Watched from here: a client that leaves while its prompt waits for the off-loop tokenizer is dropped from its queue.
  const disconnect = watchClientDisconnect(request.raw, reply.raw);
  const trace = ctx.traces?.of(request);
  let handedOver = false;
  try {
    const limits = limitsOf(widestOf(pinned), prompt.param);
    const tokenizeFrom = trace === undefined ? 0 : ctx.now();
    // With truncation the whole prompt is tokenized (its head is dropped after), so no early size refusal.
    const prepared = await prompt.prepare(
      ctx,
      body,
      truncate === null ? limits : { ...limits, contextTokenLimit: Number.MAX_SAFE_INTEGER },
      { constrained: requested !== null, signal: disconnect.signal },
    );
    if (truncate !== null) {
      const keep = truncate === -1 ? Math.max(1, limits.contextTokenLimit - 1) : truncate;
      if (prepared.tokens.length > keep) prepared.tokens = prepared.tokens.slice(prepared.tokens.length - keep);
    }
    if (trace?.recording)
      trace.child('tokenize', tokenizeFrom, ctx.now(), { 'gen_ai.usage.input_tokens': prepared.tokens.length });
    const next = toServe(ctx, shape, prompt, body, prepared, {
      pinned,
      dpRank,
      n,
      stop,
      topLogprobs,
      requested,
      widest: widestOf,
      band,
      tenant,
      budget: policy.budget,
      queueTimeoutMs,
      adapter,
    });
    handedOver = true;
    return await serveGeneration(ctx, shape, request, reply, next, startedAt, disconnect);
  } catch (err) {
    if (!disconnect.signal.aborted || handedOver) throw err;
    // The client left before its request was submitted: nothing to answer (the engine never saw it).
    ctx.counted.add(request);
    ctx.metrics.countRequest(shape.endpoint, 499, 'cancelled');
    ctx.metrics.countTenant(tenant, 499, null);
    if (!reply.sent) reply.hijack();
    if (!reply.raw.destroyed) reply.raw.destroy();
    return reply;
  } finally {
    if (!handedOver) disconnect.dispose();
  }
}

const isNullish = (v: unknown): boolean => v === null || v === undefined;

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
    band: PriorityBand;
    tenant: string;
    budget: BudgetLimits | null;
    queueTimeoutMs: number | null;
    adapter: string | null;
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
  const badWords = badWordsTokenIds(ctx.tokenizer, (body as { bad_words?: unknown }).bad_words);
  // Only groups whose engine can express the request's output options (engine-capabilities.ts).
  const eligible = capableGroups(pinned, {
    topLogprobs,
    logprobsParam: shape.logprobsParams === 'chat' ? 'top_logprobs' : 'logprobs',
    structuredOutput: constraint?.output ?? null,
    structuredOutputParam: constraint?.param ?? 'response_format',
    allowedTokenIds: !isNullish((body as { allowed_token_ids?: unknown }).allowed_token_ids),
    badWords: badWords !== null,
  });
  const widest = widestOf(eligible);
  const needed = tokensNeeded(body, promptTokenIds.length);
  const fitting = eligible.filter((g) => g.backend.contextTokenLimit >= needed);
  // None fits: the widest candidate's admission refuses it below, naming the largest context any group serves.
  const group = fitting.length > 0 ? ctx.chooser.choose(fitting) : widest;
  const sampling = buildSampling(body, {
    ...limitsOf(group, prompt.param),
    promptTokens: promptTokenIds.length,
    vocabSize: ctx.tokenizer.vocabSize,
  });
  sampling.structuredOutput = constraint?.output ?? null;
  if (badWords !== null) sampling.badWordsTokenIds = badWords;
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
    continuousUsage: body.stream_options?.continuous_usage_stats === true,
    returnTokenIds: parseReturnTokenIds((body as { return_token_ids?: unknown }).return_token_ids),
    group,
    dpRank,
    stop,
    includeStopStr: body.include_stop_str_in_output === true,
    n,
    topLogprobs,
    convertedStopIds,
    band: args.band,
    tenant: args.tenant,
    budget: args.budget,
    queueTimeoutMs: args.queueTimeoutMs,
    ...(prepared.output !== undefined ? { output: prepared.output } : {}),
    ...servedLora(group, args.adapter),
  };
}

/** `loraOf`, or a 404 when the adapter the request named was unloaded while its prompt was prepared. */
function servedLora(group: BackendGroup, adapter: string | null): ReturnType<typeof loraOf> {
  const lora = loraOf(group, adapter);
  if (adapter !== null && lora.lora === undefined)
    throw new ApiError(404, `The model '${adapter}' does not exist (the LoRA adapter was unloaded)`, {
      type: 'not_found_error',
      param: 'model',
      code: 'model_not_found',
    });
  return lora;
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
  const { group, dpRank, n } = prepared;
  const backend = group.backend;
  const clientId = clientRequestId(request.headers);
  // Without a client id the request's log id (request-id.ts `logRequestId`) is its response id, after the prefix.
  const requestId = clientId === null ? `${shape.idPrefix}${request.id}` : mintRequestId(shape.idPrefix);
  const echoId = clientId ?? requestId;
  // Set now, so an answer that fails from here on (a refused submit, an engine's fault) names the request too. A
  // client's id goes out with the answer's headers, or on a failure through the app's onSend echo (request-id.ts).
  if (clientId === null) reply.header(REQUEST_ID_HEADER, requestId);
  const trace = ctx.traces?.of(request) ?? null;
  const base: ResponseBase = {
    id: requestId,
    created: Math.floor(Date.now() / 1000),
    // As vLLM: a request served by an adapter reports the adapter's name.
    model: prepared.lora?.name ?? ctx.modelId,
    system_fingerprint: ctx.systemFingerprint,
    ...(prepared.returnTokenIds ? { promptTokenIds: prepared.promptTokenIds } : {}),
  };
  const promptTokens = prepared.promptTokenIds.length;
  const record = new RequestRecord(
    {
      request,
      requestId,
      endpoint: shape.endpoint,
      group: group.name,
      promptTokens,
      n,
      stream: prepared.stream,
      startedAt,
      tenant: prepared.tenant,
      trace,
    },
    ctx,
  );

  // `disconnect` watches the request's socket and the raw response: a close before the response finished means the
  // client went away (every phase: before submit returns, before the first token, mid-stream, and while the response
  // is still queued behind an earlier pipelined one; see disconnect.ts).
  try {
    const submittedAt = ctx.now();
    const { streams, error: submitError } = await submitSubRequests(
      backend,
      engineRequestsOf(requestId, prepared, engineTraceHeaders(trace, group.engine)),
      {
        dpRank,
        leave: disconnect.signal,
        ticket: flowTicketOf(prepared),
      },
    );
    ctx.metrics.observeQueueWait(prepared.tenant, (ctx.now() - submittedAt) / 1000);
    if (submitError !== null || disconnect.signal.aborted) {
      for (const s of streams) s.cancel();
      if (disconnect.signal.aborted) return endDisconnected(record, reply);
      throw toApiError(submitError);
    }
    const choices = runChoices(ctx, shape, prepared, streams, record, startedAt);
    const outputs = new ChoiceOutputs(
      shape,
      record,
      streams,
      (id) => ctx.tokenizer.decode([id], { skipSpecialTokens: false }),
      prepared.topLogprobs,
      promptTokens,
      prepared.output,
      !prepared.stream,
    );
    const budget = streams[0]!.budget ?? null;
    const headers = { [REQUEST_ID_HEADER]: echoId, ...(budget === null ? {} : rateLimitHeaders(budget)) };
    const answer = { choices, outputs, record, shape, base, disconnect, reply, headers };
    if (!prepared.stream) return await respondBuffered(answer);
    // Streaming: from here on errors travel as SSE events.
    return await respondStreamed({
      ...answer,
      streams,
      includeUsage: prepared.includeUsage,
      continuousUsage: prepared.continuousUsage,
      backpressure: ctx.streamBackpressure,
    });
  } finally {
    disconnect.dispose();
  }
}

/** Each tokenizer's EOS ids as a set, made once (not per request). */
const eosSets = new WeakMap<GatewayTokenizer, ReadonlySet<number>>();
function eosSetOf(tokenizer: GatewayTokenizer): ReadonlySet<number> {
  let set = eosSets.get(tokenizer);
  if (set === undefined) eosSets.set(tokenizer, (set = new Set(tokenizer.eosTokenIds)));
  return set;
}

/**
 * The W3C headers an engine request carries (`GenerateRequest.trace`), or undefined: a sampled span's always (the
 * engine client's `queue` and `route` spans, the router's with `--workers`, vLLM's engine spans); an unsampled one's
 * only to vLLM, whose `trace_headers` then tell its engine not to sample the request either. An unsampled request to
 * TokenSpeed (no such wire field) makes no headers: nothing would read them.
 */
function engineTraceHeaders(trace: RequestTrace | null, engine: EngineFamily): TraceCarrier | undefined {
  if (trace === null || (!trace.recording && engine !== 'vllm')) return undefined;
  return trace.carrier();
}

/**
 * The n engine sub-requests of `prepared` (ids `<requestId>-<i>`, seeds s + i; fan-out.ts), or the one request; each
 * carries `carrier`, the request span's headers, when given.
 */
function engineRequestsOf(
  requestId: string,
  prepared: PreparedRequest,
  carrier: TraceCarrier | undefined,
): GenerateRequest[] {
  return subRequestIds(requestId, prepared.n).map((id, i) => ({
    requestId: id,
    promptTokenIds: prepared.promptTokenIds,
    sampling: { ...prepared.sampling, seed: subRequestSeed(prepared.sampling.seed, i) },
    stream: prepared.stream,
    returnLogprob: prepared.topLogprobs !== null,
    // vLLM returns k ranked candidates when asked (engine-wire.md 5.6); k ≤ 1 needs the sampled token only.
    ...(prepared.topLogprobs !== null && prepared.topLogprobs > 1 ? { topLogprobs: prepared.topLogprobs } : {}),
    ...(prepared.band !== DEFAULT_PRIORITY_BAND ? { priority: vllmPriorityOf(prepared.band) } : {}),
    ...(prepared.lora !== undefined ? { lora: prepared.lora } : {}),
    ...(carrier !== undefined ? { trace: carrier } : {}),
  }));
}

/**
 * The submitted `streams` as runnable choices: each with its latency tracker (choice 0 feeds the histograms, every
 * choice its rank's statistics, whose dispatch is recorded now) and its `ChoiceGeneration` (detokenizer, stop ids and
 * strings, min tokens). Records the engine indexes in `record`.
 */
function runChoices(
  ctx: RouteContext,
  shape: ResponseShape,
  prepared: PreparedRequest,
  streams: readonly BackendStream[],
  record: RequestRecord,
  startedAt: number,
): RunChoice[] {
  const worker = prepared.group.worker;
  record.engineIndexes = streams.map((s) => s.engineIndex);
  const submittedAt = ctx.now();
  for (const s of streams) {
    const rank = s.engineIndex === null ? undefined : { book: ctx.rankStats, worker, engineIndex: s.engineIndex };
    if (rank !== undefined) ctx.rankStats.recordDispatch(worker, rank.engineIndex, submittedAt);
    record.trackers.push(
      new LatencyTracker(record.trackers.length === 0 ? ctx.metrics : null, shape.endpoint, startedAt, ctx.now, rank),
    );
  }
  if (record.logs('debug')) {
    record.facts.request.log.debug(
      {
        responseId: record.facts.requestId,
        worker,
        engineIndexes: record.engineIndexes,
        n: prepared.n,
        promptTokens: prepared.promptTokenIds.length,
      },
      'submitted',
    );
  }
  // Ids whose text is dropped when they end a choice: the request's stop ids and EOS, not converted stop strings.
  const converted = new Set(prepared.convertedStopIds ?? []);
  const stopTokenIds = new Set(
    [...prepared.sampling.stopTokenIds, ...ctx.tokenizer.eosTokenIds].filter((id) => !converted.has(id)),
  );
  const eosTokenIds = eosSetOf(ctx.tokenizer);
  // A converted stop string's id stands for the string (its text is the string itself, singleTokenStopIds).
  const convertedStops =
    converted.size === 0
      ? undefined
      : new Map([...converted].map((id) => [id, ctx.tokenizer.decode([id], { skipSpecialTokens: false })]));
  return streams.map((stream, i) => ({
    stream,
    latency: record.trackers[i],
    generation: new ChoiceGeneration({
      requestId: stream.requestId,
      detokenizer: createDetokenizer(ctx.tokenizer, { skipSpecialTokens: prepared.sampling.skipSpecialTokens }),
      stopTokenIds,
      promptTokens: prepared.promptTokenIds.length,
      stopMatcher: new StopStringMatcher(prepared.stop, { includeStopStr: prepared.includeStopStr }),
      logprobs: prepared.topLogprobs !== null,
      minTokens: prepared.sampling.minNewTokens,
      latency: record.trackers[i],
      eosTokenIds,
      ...(convertedStops === undefined ? {} : { convertedStops }),
      ...(prepared.returnTokenIds ? { tokenIds: true } : {}),
    }),
  }));
}
