/**
 * The shared request flow of `/v1/chat/completions` and `/v1/completions` (gateway.md sections 8-14 and 16):
 * validate → choose the live engine groups (and the pinned rank) → tokenize → choose the group (groups.ts) →
 * admission against that group's context → mint the engine request id → submit (optionally pinned) → stream SSE
 * chunks or collect a full response; with disconnect detection on the HTTP/1.1 connection in every phase
 * (gateway.md 13; disconnect.ts).
 */
import { randomUUID } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ConnectedEngine } from '../engine-client/link.js';
import type { GenerateRequest, SamplingOptions } from '../protocols/types.js';
import { IncrementalDetokenizer } from '../tokenizer/detokenizer.js';
import type { GatewayTokenizer } from '../tokenizer/tokenizer.js';
import type { BackendGroup, BackendStream } from './backend.js';
import { watchClientDisconnect } from './disconnect.js';
import { ApiError, badRequest, toApiError } from './errors.js';
import { ClientDisconnectedError, LatencyTracker, generate, type Usage } from './generation.js';
import type { GatewayMetrics } from './metrics.js';
import type { GroupRouter } from './groups.js';
import { buildSampling, rejectUnsupported, requestedLimit, type ContextLimits } from './params.js';
import { parseDpRankHeader, DP_RANK_HEADER } from './pin.js';
import type { CommonBodyT } from './schemas.js';
import { SseWriter } from './sse.js';

/** What the generation routes share (built once by `buildApp`). */
export interface RouteContext {
  /** The engine groups and the worker-level choice among them (groups.ts). */
  router: GroupRouter;
  tokenizer: GatewayTokenizer;
  modelId: string;
  metrics: GatewayMetrics;
  /** Monotonic clock in ms (latency metrics). */
  now: () => number;
  /** `system_fingerprint` of every response. */
  systemFingerprint: string;
  /** Requests whose outcome was already counted (the app's error handler counts the rest). */
  counted: WeakSet<object>;
}

/** How one endpoint shapes its responses (chat vs completions). */
export interface ResponseShape {
  /** Metrics label and log name, e.g. `/v1/chat/completions`. */
  endpoint: string;
  /** Response id prefix: `chatcmpl-` or `cmpl-`. */
  idPrefix: string;
  /** `object` of stream chunks. */
  chunkObject: string;
  /** Choices of the chunk sent right after a successful submit (chat: the assistant role), or null for none. */
  openingChoice(): Record<string, unknown> | null;
  /** One choice of a stream chunk; `finishReason` null until the terminal chunk (never omitted, gateway.md 12). */
  chunkChoice(text: string, finishReason: 'stop' | 'length' | null): Record<string, unknown>;
  /** The non-streaming response body. */
  fullResponse(base: ResponseBase, text: string, finishReason: 'stop' | 'length', usage: Usage): Record<string, unknown>;
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
}

/** The context sizes (tokens) of one group, for admission and its error messages. */
function limitsOf(group: BackendGroup, promptParam: ContextLimits['promptParam']): ContextLimits {
  return { maxModelLen: group.backend.maxModelLen, contextTokenLimit: group.backend.contextTokenLimit, promptParam };
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
 * Refuse a `model` other than the served one with 404 (vLLM's behaviour); an absent/null model means the served one.
 */
export function checkModel(model: string | null | undefined, modelId: string): void {
  if (model === null || model === undefined || model === modelId) return;
  throw new ApiError(404, `The model '${model}' does not exist (this gateway serves '${modelId}')`, {
    type: 'not_found_error',
    param: 'model',
    code: 'model_not_found',
  });
}

/** The connected ranks of `groups` with one entry per engine index (for the pin header's validation message). */
function distinctRanks(groups: readonly BackendGroup[]): ConnectedEngine[] {
  const byIndex = new Map<number, ConnectedEngine>();
  for (const g of groups) {
    for (const e of g.backend.engines) if (e.engineIndex !== null && !byIndex.has(e.engineIndex)) byIndex.set(e.engineIndex, e);
  }
  return [...byIndex.values()].sort((a, b) => a.engineIndex! - b.engineIndex!);
}

/** How a generation route gets its prompt (chat: templated `messages`; completions: `prompt`). */
export interface PromptSource<B extends CommonBodyT> {
  /** The prompt parameter named in admission errors (gateway.md 9.2): `messages` or `prompt`. */
  param: 'messages' | 'prompt';
  /**
   * The prompt token ids of a schema-valid body (gateway.md 5); throws `ApiError` 400 naming the bad field, or
   * 400 `context_length_exceeded` when a text prompt is too large to fit `limits` even before tokenizing it.
   */
  tokens(tokenizer: GatewayTokenizer, body: B, limits: ContextLimits): number[];
}

/**
 * The handler body shared by `/v1/chat/completions` and `/v1/completions`: take the start time (`ctx.now()`, ms), then
 * check `model` (404), refuse unsupported parameters and `stream_options` without `stream: true` (400); take the live
 * engine groups (503 `engine_dead` when none) and the `X-data-parallel-rank` pin (400 unless a live group has that
 * rank; gateway.md 14); tokenize the prompt via `prompt` (refusing a text too large for the widest candidate's
 * `contextTokenLimit` before tokenizing it); choose the group among the candidates whose context fits the request
 * (`GroupRouter.choose`: lowest best-rank score; when none fits, the widest one, whose admission then refuses it
 * naming the largest context served); validate admission and sampling against the chosen group's `contextTokenLimit` (`buildSampling`,
 * gateway.md 8-9; the default completion limit is that group's context minus the prompt, so a vLLM group always
 * gets a concrete `max_tokens`, gateway.md 9.1); and serve the request with `serveGeneration`. Nothing awaits
 * between the group choice and the submit, so the chosen rank is reserved in the same tick (dp-routing.md 12.3).
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
  checkModel(body.model, ctx.modelId);
  rejectUnsupported(body as Record<string, unknown>);
  if (body.stream !== true && body.stream_options != null) {
    throw badRequest(`'stream_options' is only allowed when 'stream' is true`, 'stream_options');
  }
  const live = ctx.router.candidates();
  const dpRank = parseDpRankHeader(request.headers[DP_RANK_HEADER], distinctRanks(live));
  const eligible = dpRank === undefined ? live : ctx.router.candidates(dpRank);
  const widest = eligible.reduce((a, b) => (b.backend.contextTokenLimit > a.backend.contextTokenLimit ? b : a));
  const promptTokenIds = prompt.tokens(ctx.tokenizer, body, limitsOf(widest, prompt.param));
  const needed = tokensNeeded(body, promptTokenIds.length);
  const fitting = eligible.filter((g) => g.backend.contextTokenLimit >= needed);
  // None fits: the widest candidate's admission refuses it below, naming the largest context any group serves.
  const group = fitting.length > 0 ? ctx.router.choose(fitting) : widest;
  const sampling = buildSampling(body, {
    ...limitsOf(group, prompt.param),
    promptTokens: promptTokenIds.length,
    vocabSize: ctx.tokenizer.vocabSize,
  });
  return serveGeneration(ctx, shape, request, reply, {
    promptTokenIds,
    sampling,
    stream: body.stream === true,
    includeUsage: body.stream_options?.include_usage === true,
    group,
    dpRank,
  }, startedAt);
}

/**
 * Run one prepared request to its terminal outcome and answer it. Errors before the response starts are thrown (the
 * app's error handler renders them); once SSE has started they become an error event followed by `[DONE]`.
 */
export async function serveGeneration(
  ctx: RouteContext,
  shape: ResponseShape,
  request: FastifyRequest,
  reply: FastifyReply,
  prepared: PreparedRequest,
  startedAt: number,
): Promise<unknown> {
  const { metrics } = ctx;
  const { group, dpRank } = prepared;
  const backend = group.backend;
  const requestId = mintRequestId(shape.idPrefix);
  const clientRequestId = request.headers['x-request-id'];
  const echoId = typeof clientRequestId === 'string' && clientRequestId !== '' ? clientRequestId : requestId;
  const base: ResponseBase = {
    id: requestId,
    created: Math.floor(Date.now() / 1000),
    model: ctx.modelId,
    system_fingerprint: ctx.systemFingerprint,
  };
  const engineRequest: GenerateRequest = {
    requestId,
    promptTokenIds: prepared.promptTokenIds,
    sampling: prepared.sampling,
    stream: prepared.stream,
    returnLogprob: false,
  };

  // Disconnect detection on the request's socket and the raw response: a close before the response finished means
  // the client went away (every phase: before submit returns, before the first token, mid-stream, and while the
  // response is still queued behind an earlier pipelined one; see disconnect.ts).
  const raw = reply.raw;
  const disconnect = watchClientDisconnect(request.raw, raw);
  const count = (status: number, outcome: 'stop' | 'length' | 'error' | 'cancelled') => {
    ctx.counted.add(request);
    metrics.countRequest(shape.endpoint, status, outcome);
  };
  const endDisconnected = () => {
    count(499, 'cancelled');
    request.log.info({ requestId }, 'client disconnected; engine request aborted');
    if (!reply.sent) reply.hijack();
    if (!raw.destroyed) raw.destroy();
    return reply;
  };

  try {
    let stream: BackendStream;
    try {
      stream = await backend.submit(engineRequest, { dpRank, signal: disconnect.signal });
    } catch (err) {
      if (disconnect.signal.aborted) return endDisconnected();
      throw toApiError(err);
    }
    request.log.debug(
      { requestId, worker: group.worker, engineIndex: stream.engineIndex, promptTokens: prepared.promptTokenIds.length },
      'submitted',
    );
    if (disconnect.signal.aborted) {
      stream.cancel();
      return endDisconnected();
    }
    const stopTokenIds = new Set([...prepared.sampling.stopTokenIds, ...ctx.tokenizer.eosTokenIds]);
    const events = generate({
      stream,
      detokenizer: new IncrementalDetokenizer(ctx.tokenizer, { skipSpecialTokens: prepared.sampling.skipSpecialTokens }),
      stopTokenIds,
      promptTokens: prepared.promptTokenIds.length,
      signal: disconnect.signal,
      latency: new LatencyTracker(metrics, shape.endpoint, startedAt, ctx.now),
    });

    if (!prepared.stream) {
      let text = '';
      try {
        for await (const ev of events) {
          text += ev.text;
          if (ev.type === 'finish') {
            count(200, ev.finishReason);
            reply.header('x-request-id', echoId);
            return shape.fullResponse(base, text, ev.finishReason, ev.usage);
          }
        }
      } catch (err) {
        if (err instanceof ClientDisconnectedError) return endDisconnected();
        const apiErr = toApiError(err);
        count(apiErr.statusCode, 'error');
        throw apiErr;
      }
      throw new ApiError(500, 'generation ended without an outcome', { code: 'internal_error' });
    }

    // Streaming: from here on errors travel as SSE events.
    reply.hijack();
    const sse = new SseWriter(raw);
    sse.start({ 'x-request-id': echoId });
    const usageField = prepared.includeUsage ? { usage: null } : {};
    const chunk = (choices: Record<string, unknown>[]) => ({ ...header(base, shape.chunkObject), choices, ...usageField });
    try {
      const opening = shape.openingChoice();
      if (opening !== null) await sse.send(chunk([opening]));
      for await (const ev of events) {
        if (ev.type === 'delta') {
          await sse.send(chunk([shape.chunkChoice(ev.text, null)]));
          continue;
        }
        await sse.send(chunk([shape.chunkChoice(ev.text, ev.finishReason)]));
        if (prepared.includeUsage) await sse.send({ ...header(base, shape.chunkObject), choices: [], usage: ev.usage });
        count(200, ev.finishReason);
      }
    } catch (err) {
      if (err instanceof ClientDisconnectedError) return endDisconnected();
      const apiErr = toApiError(err);
      count(200, 'error');
      request.log.warn({ requestId, err: apiErr.message, status: apiErr.statusCode }, 'generation failed mid-stream');
      await sse.send(apiErr.toBody());
    }
    sse.done();
    return reply;
  } finally {
    disconnect.dispose();
  }
}
