/**
 * POST /v1/embeddings (OpenAI's embeddings endpoint over vLLM pooling; docs/wire/vllm-pooling.md). The flow of a
 * generation request without the token stream: validate → the groups that serve `embed` (400 when none does, 503
 * when none can serve now) → tokenize every input → choose the group (groups.ts) → one engine request per input
 * (ids `<id>-<i>`), all submitted in one tick so the engine client spreads them over the ranks by load and each rank
 * batches its share into a few scheduler steps → collect each input's pooled vector → answer them in input order.
 * Tenants, priority bands, budgets (each input charges its own prompt; the request counts once) and flow control
 * apply as to generation; a client that leaves aborts every unfinished input (499).
 */
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { DEFAULT_SAMPLING, type GenerateRequest } from '../../protocols/types.js';
import type { BackendStream } from '../backend.js';
import { watchClientDisconnect } from '../disconnect.js';
import { embeddingInputs, embeddingOptions, embeddingResponse } from '../embeddings.js';
import { ApiError, badRequest, toApiError } from '../errors.js';
import { subRequestIds } from '../fan-out.js';
import { DEFAULT_PRIORITY_BAND, vllmPriorityOf } from '../priority-band.js';
import { requestHeaderFacts } from '../request-headers.js';
import { rateLimitHeaders } from '../rate-limits.js';
import { endDisconnected, RequestRecord } from '../request-record.js';
import { clientRequestId, REQUEST_ID_HEADER } from '../request-id.js';
import type { RouteContext } from '../route-context.js';
import { EmbeddingBody, type EmbeddingBodyT } from '../schemas.js';
import { checkModel } from '../adapters.js';
import { mintRequestId } from '../serve-generation.js';
import { flowTicketOf, submitSubRequests } from '../submit-sub-requests.js';

const ENDPOINT = '/v1/embeddings';

/**
 * Each group's embedding size (elements), learned from its first answer at the model's full size: a `dimensions`
 * above it is then the client's mistake (400), as vLLM's frontend, which knows the model, answers it; before that
 * the engine refuses it (a 502 that says why).
 */
const EMBEDDING_SIZES = new WeakMap<object, number>();

/** Register POST /v1/embeddings on `app`. */
export function registerEmbeddingsRoute(app: FastifyInstance, ctx: RouteContext): void {
  app
    .withTypeProvider<TypeBoxTypeProvider>()
    .post(ENDPOINT, { schema: { body: EmbeddingBody } }, (request, reply) =>
      handleEmbeddings(ctx, request, reply, request.body),
    );
}

/**
 * Serve one embeddings request (see the module comment). Throws `ApiError` for every refusal before the engines
 * were asked and for a failure after (an engine's fault is a 502 naming the rank); resolves with the body.
 */
async function handleEmbeddings(
  ctx: RouteContext,
  request: FastifyRequest,
  reply: FastifyReply,
  body: EmbeddingBodyT,
): Promise<unknown> {
  const startedAt = ctx.now();
  const policy = ctx.directory.policyOf(request.headers);
  const tenant = policy.name;
  ctx.tenants.set(request, tenant);
  checkModel(body.model, ctx.servedModelNames);
  const opts = embeddingOptions(body);
  const { dpRank, band, queueTimeoutMs } = requestHeaderFacts(ctx, request, policy);
  const live = ctx.chooser.candidates(dpRank, 'embed');
  // Every input must fit every candidate, so the group chosen after tokenizing can take them all.
  const maxModelLen = Math.min(...live.map((g) => g.backend.maxModelLen ?? 0));
  const dimensions = opts.pooling.dimensions;
  const size = Math.min(...live.map((g) => EMBEDDING_SIZES.get(g.backend) ?? Number.POSITIVE_INFINITY));
  if (dimensions !== null && dimensions > size)
    throw badRequest(
      `'dimensions' must be at most ${size}, this model's embedding size; got ${dimensions}`,
      'dimensions',
    );
  const disconnect = watchClientDisconnect(request.raw, reply.raw);
  const trace = ctx.traces?.of(request) ?? null;
  try {
    const tokenizeFrom = ctx.now();
    const inputs = await embeddingInputs(ctx.offLoop, body.input, opts, maxModelLen, disconnect.signal);
    const group = ctx.chooser.choose(live);
    // Without a client id the request's log id (request-id.ts `logRequestId`) is its response id, after the prefix.
    const requestId = clientRequestId(request.headers) === null ? `embd-${request.id}` : mintRequestId('embd-');
    const promptTokens = inputs.reduce((sum, ids) => sum + ids.length, 0);
    const record = new RequestRecord(
      {
        request,
        requestId,
        endpoint: ENDPOINT,
        group: group.name,
        promptTokens,
        n: inputs.length,
        stream: false,
        startedAt,
        tenant,
        trace,
      },
      ctx,
    );
    const carrier = trace === null ? {} : { trace: trace.carrier() };
    if (trace?.recording)
      trace.child('tokenize', tokenizeFrom, ctx.now(), {
        'gen_ai.usage.input_tokens': promptTokens,
        'model_gateway.inputs': inputs.length,
      });
    const priority = band !== DEFAULT_PRIORITY_BAND ? { priority: vllmPriorityOf(band) } : {};
    const subs: GenerateRequest[] = subRequestIds(requestId, inputs.length).map((id, i) => ({
      requestId: id,
      promptTokenIds: inputs[i]!,
      // Not sent (a pooling request has no sampling map); no completion is reserved from a token budget.
      sampling: { ...DEFAULT_SAMPLING, maxNewTokens: 0 },
      stream: false,
      returnLogprob: false,
      pooling: opts.pooling,
      ...priority,
      ...carrier,
    }));
    const submittedAt = ctx.now();
    const { streams, error } = await submitSubRequests(group.backend, subs, {
      dpRank,
      leave: disconnect.signal,
      // The lead charges every input's prompt; the request counts once (budgets.ts).
      ticket: { ...flowTicketOf({ tenant, band, budget: policy.budget, queueTimeoutMs }), promptTokens },
    });
    ctx.metrics.observeQueueWait(tenant, (ctx.now() - submittedAt) / 1000);
    record.engineIndexes = streams.map((s) => s.engineIndex);
    if (error !== null || disconnect.signal.aborted) {
      for (const s of streams) s.cancel();
      if (disconnect.signal.aborted) return endDisconnected(record, reply);
      const apiErr = toApiError(error);
      record.countFailure(apiErr.statusCode, apiErr);
      throw apiErr;
    }
    const onLeave = () => {
      for (const s of streams) s.cancel();
    };
    disconnect.signal.addEventListener('abort', onLeave, { once: true });
    let vectors: Float32Array[];
    try {
      vectors = await Promise.all(streams.map((s, i) => pooledVectorOf(s, i)));
    } catch (err) {
      for (const s of streams) s.cancel();
      if (disconnect.signal.aborted) return endDisconnected(record, reply);
      const apiErr = toApiError(err);
      record.countFailure(apiErr.statusCode, apiErr);
      throw apiErr;
    } finally {
      disconnect.signal.removeEventListener('abort', onLeave);
    }
    if (disconnect.signal.aborted) return endDisconnected(record, reply);
    if (dimensions === null && vectors.length > 0) EMBEDDING_SIZES.set(group.backend, vectors[0]!.length);
    record.count(200, 'stop');
    const budget = streams[0]!.budget ?? null;
    reply.headers({
      [REQUEST_ID_HEADER]: clientRequestId(request.headers) ?? requestId,
      ...(budget === null ? {} : rateLimitHeaders(budget)),
    });
    return embeddingResponse(
      { id: requestId, created: Math.floor(Date.now() / 1000), model: ctx.modelId },
      vectors,
      opts.encoding,
      promptTokens,
    );
  } catch (err) {
    if (!disconnect.signal.aborted || reply.sent) throw err;
    // The client left before anything was submitted (while its inputs were tokenized): nothing to answer.
    ctx.counted.add(request);
    ctx.metrics.countRequest(ENDPOINT, 499, 'cancelled');
    ctx.metrics.countTenant(tenant, 499, null);
    reply.hijack();
    if (!reply.raw.destroyed) reply.raw.destroy();
    return reply;
  } finally {
    disconnect.dispose();
  }
}

/**
 * The pooled vector of input `index`'s stream: its terminal output must be a `stop` carrying one. Throws `ApiError`
 * 502 (`engine_fault`, naming the rank) when the engine ended it otherwise, and what the stream throws (the engine
 * client's error: a dead rank, a stall).
 */
async function pooledVectorOf(stream: BackendStream, index: number): Promise<Float32Array> {
  for await (const out of stream) {
    if (out.finishReason === null) continue;
    if (out.finishReason === 'stop' && out.pooled !== undefined) return out.pooled;
    throw new ApiError(
      502,
      `engine engine-fault: ${rankName(stream)} ended embedding input ${index} (${stream.requestId}) with finish ` +
        `reason '${out.finishReason}' and ${out.pooled === undefined ? 'no' : 'a'} pooled vector` +
        (out.finishReason === 'error' ? ` (an engine refuses a 'dimensions' larger than its model's embedding)` : ''),
      { code: 'engine_fault' },
    );
  }
  throw new ApiError(502, `engine engine-fault: ${rankName(stream)} ended embedding input ${index} without a result`, {
    code: 'engine_fault',
  });
}

function rankName(stream: BackendStream): string {
  return stream.engineIndex === null ? 'the engine' : `DP rank ${stream.engineIndex}`;
}
