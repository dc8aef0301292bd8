/**
 * The gateway's fastify app: OpenAI-compatible routes, health, metrics, and OpenAI-style error bodies for every
 * failure (gateway.md sections 4.2, 8, 9, 11-15).
 */
import type { RouteContext } from './route-context.js';
import { readFileSync } from 'node:fs';
import { maxHeaderSize, type Server } from 'node:http';
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import type { Logger } from 'pino';
import type { Tracer } from '@opentelemetry/api';
import { OffLoopTokenizer } from '../tokenizer/off-loop.js';
import type { GatewayTokenizer } from '../tokenizer/tokenizer.js';
import { OPEN_GATE, type AdmissionGate } from './admission.js';
import type { BackendGroup } from './backend.js';
import { RouteMethods } from './allowed-methods.js';
import { registerApiKeyAuth } from './auth.js';
import { TenantDirectory } from './tenant.js';
import { registerConcurrencyCap, type SharedConcurrencyCap } from './concurrency.js';
import { registerCors } from './cors.js';
import { resolveEdgeOptions, serverTimeouts, type HttpEdgeOptions } from './edge-options.js';
import { ApiError, RETRY_AFTER_UNAVAILABLE_SECONDS } from './errors.js';
import { frameworkApiError, makeClientErrorHandler } from './framework-errors.js';
import { GatewayEvents, recordGroupEvents } from './gateway-events.js';
import { GroupChooser } from './groups.js';
import { installJsonBodyParser, type RouteBodyLimit } from './input-limits.js';
import { buildLazyValidator } from './validator-compiler.js';
import type { GatewayMetrics } from './metrics.js';
import { registerChatRoute } from './routes/chat.js';
import { registerCompletionsRoute } from './routes/completions.js';
import { registerEmbeddingsRoute } from './routes/embeddings.js';
import { registerLoraRoutes } from './routes/lora.js';
import { registerDashboardRoutes } from './routes/dashboard.js';
import { registerInfoRoutes } from './routes/info.js';
import { registerRanksRoute, type SharedRankStats } from './routes/ranks.js';
import { RankStatsBook } from './rank-stats.js';
import { registerTokenizeRoutes } from './routes/tokenize.js';
import { registerResponsesRoutes } from './routes/responses.js';
import { toolCallParserForTemplate, type ReasoningParserName, type ToolCallParserName } from './parsers/index.js';
import { ResponsesStore, type ResponsesStoreOptions } from './responses/store.js';
import { echoRequestId, logRequestId, replyBody } from './request-id.js';
import { RequestTraces } from './request-trace.js';
import { LineBudget } from '../line-budget.js';
import type {} from './serve-generation.js';
import { registerUnknownFieldPolicy } from './unknown-fields.js';
import { formatValidationErrors } from './validation.js';

/** Default request-body limit: 8 MiB (a 128k-token prompt as token ids is about 1 MiB of JSON). */
export const DEFAULT_BODY_LIMIT_BYTES = 8 * 1024 * 1024;

/**
 * Longest path parameter (e.g. the id of GET /v1/responses/{id}), characters: Node's header limit (16 KiB unless
 * `--max-http-header-size`), which counts the request line, so it already bounds every URL the server accepts (a
 * longer one gets 431 before routing). fastify's default of 100 answered a longer unknown id with 414 instead of the
 * route's 404; that bound guards regex parameters, which no route here has.
 */
export const MAX_PATH_PARAM_LENGTH = maxHeaderSize;

/**
 * What the app needs. `groups` are the engine groups served (at least one, unique `worker` names; each group's
 * `backend` is its engine client, which `EngineClient` satisfies structurally); every request goes to one of them
 * (groups.ts). `modelId` is the reported model name and `servedModelNames` every name a request may use (default
 * `[modelId]`; when given, its first entry should be `modelId`). `metrics` is created once per app and attached to the groups here; `bodyLimitBytes` bounds request
 * bodies (413 above it); `now` is a monotonic ms clock for latency metrics (default `performance.now`);
 * `systemFingerprint` is echoed in every response (default `model-gateway-<version>`); `edge`: API keys, CORS, the
 * concurrency cap, stream buffering and the request timeout (edge-options.ts; defaults there); `admission` is the
 * gateway's drain state (default: never draining).
 */
export interface GatewayDeps {
  groups: readonly BackendGroup[];
  /**
   * The keys and tenants (tenant.ts), when the caller keeps them to reload the keys file on SIGHUP; absent: built
   * here from `edge` (its `apiKeys` and `apiKeysFile`).
   */
  tenants?: TenantDirectory;
  tokenizer: GatewayTokenizer;
  modelId: string;
  servedModelNames?: readonly string[];
  logger: Logger;
  metrics: GatewayMetrics;
  bodyLimitBytes?: number;
  now?: () => number;
  systemFingerprint?: string;
  /**
   * The tool-call parser (`--tool-call-parser`): a name, `none` (no `auto` tool choice), or undefined for the chat
   * template's default (`toolCallParserForTemplate`: used when exactly one family's markers appear in it).
   */
  toolCallParser?: ToolCallParserName | 'none';
  /** The reasoning parser (`--reasoning-parser`); undefined: none. */
  reasoningParser?: ReasoningParserName;
  /** Bounds of the Responses-API store (responses/store.ts; default 1000 responses). */
  responsesStore?: ResponsesStoreOptions;
  edge?: HttpEdgeOptions;
  admission?: AdmissionGate;
  /** The engine clients' report ageing horizon (ms), so the group choice ages reports as the rank choice does. */
  loadHorizonMs?: number;
  /** Serve `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` (routes/lora.ts). */
  allowRuntimeLoraUpdating?: boolean;
  /** Render a chat request's own `chat_template` (vLLM's `--trust-request-chat-template`; prompt.ts). */
  trustRequestChatTemplate?: boolean;
  /**
   * `--workers N` (src/fronts): the concurrency cap counted in the router instead of here, and the Responses store
   * shared through it (an instance, used instead of one built from `responsesStore`).
   */
  sharedConcurrencyCap?: SharedConcurrencyCap;
  responsesStoreInstance?: ResponsesStore;
  /** `--workers N`: this front's per-rank statistics (an instance the front also exports) and every front's merged. */
  rankStatsInstance?: RankStatsBook;
  sharedRankStats?: SharedRankStats;
  /** Tracing (src/tracing.ts): each request gets a span from this tracer (request-trace.ts). Absent or null: off. */
  tracer?: Tracer | null;
  /** The dashboard's event list (gateway-events.ts), when the caller keeps it (a test's clock); absent: built here. */
  events?: GatewayEvents;
}

/**
 * The active tool-call parser: the configured one, none for `none`, else the chat template's default when
 * unambiguous (logged either way, so an operator sees why `auto` tool choice is or is not available).
 */
export function resolveToolCallParser(
  setting: ToolCallParserName | 'none' | undefined,
  tokenizer: Pick<GatewayTokenizer, 'chatTemplateSources'>,
  logger: Pick<Logger, 'info' | 'warn'>,
): ToolCallParserName | null {
  if (setting === 'none') return null;
  if (setting !== undefined) return setting;
  const { parser, matched } = toolCallParserForTemplate(tokenizer.chatTemplateSources);
  if (parser !== null)
    logger.info(
      { toolCallParser: parser },
      `tool-call parser '${parser}' chosen from the chat template (--tool-call-parser to change)`,
    );
  else if (matched.length > 1)
    logger.warn(
      { matched },
      `the chat template matches several tool-call formats (${matched.join(', ')}); set --tool-call-parser to enable "auto" tool choice`,
    );
  return parser;
}

const GENERATION_ROUTES = new Set(['/v1/chat/completions', '/v1/completions', '/v1/responses']);

/** The package version from package.json (`0.0.0` when it cannot be read). */
export function packageVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
      version?: string;
    };
    return pkg.version ?? '0.0.0';
  } catch {
    return '0.0.0';
  }
}

/**
 * How one error answer is logged (issue #10 part 4): one line, no stack, for what is expected in operation (every
 * 4xx, and 503: no engine group alive, engine gone); 4xx at info without the message (it may quote request text; the
 * message goes to debug), 503 at warn; any other 5xx at error with the stack.
 */
function logErrorAnswer(request: FastifyRequest, apiErr: ApiError, error: unknown): void {
  const status = apiErr.statusCode;
  const fields = {
    status,
    code: apiErr.code,
    param: apiErr.param,
    method: request.method,
    route: request.routeOptions.url ?? null,
  };
  if (status < 500) {
    request.log.info(fields, 'request refused');
    request.log.debug({ status, code: apiErr.code }, apiErr.message);
  } else if (status === 503) {
    request.log.warn(fields, apiErr.message);
  } else {
    request.log.error({ ...fields, err: error }, apiErr.message);
  }
}

/** How many 404 / 405 lines a second are logged (`LineBudget`); the next line written says how many were dropped. */
const UNKNOWN_ROUTE_LINES_PER_SECOND = 10;

/** Characters of a refused path kept in its log line. */
const LOGGED_PATH_CHARS = 256;

/** One info line for a request to a path this gateway does not serve (404) or not with that method (405). */
function logUnknownRoute(request: FastifyRequest, status: 404 | 405, budget: LineBudget): void {
  const grant = budget.take();
  if (!grant.write) return;
  const path = request.url.split('?', 1)[0]!;
  request.log.info(
    {
      status,
      method: request.method,
      path: path.length <= LOGGED_PATH_CHARS ? path : `${path.slice(0, LOGGED_PATH_CHARS)}…`,
      ...(grant.suppressed > 0 ? { suppressed: grant.suppressed } : {}),
    },
    status === 404 ? 'no route' : 'method not allowed',
  );
}

/**
 * Build the app (not listening). Routes: POST /v1/chat/completions, POST /v1/completions, POST /v1/responses,
 * GET/DELETE /v1/responses/{id}, GET /v1/models, GET /v1/models/{id}, GET /health, GET /ready, GET /metrics,
 * GET /v1/gateway/ranks (routes/ranks.ts), GET /dashboard (routes/dashboard.ts); every error is an OpenAI-style body `{error: {message, type, param, code}}`, also the
 * ones raised before routing (an undecodable URL via fastify's `frameworkErrors`; oversized headers, timeouts and
 * malformed requests via its `clientErrorHandler`, see framework-errors.ts). A known path asked with another method
 * gets 405 with an `Allow` header; an unknown path gets 404. A path parameter may be as long as any URL Node accepts
 * (`MAX_PATH_PARAM_LENGTH`), so an unknown id gets its route's 404 whatever its length.
 *
 * The edge (issue #10): a request not received within `edge.requestTimeoutMs` gets 408 (Node's `requestTimeout`,
 * answered by the client-error handler); JSON bodies nest at most `MAX_JSON_DEPTH` levels (input-limits.ts); the
 * server keeps half-closed connections open until their response is written (`httpAllowHalfOpen`, disconnect.ts);
 * then, in hook order: CORS (cors.ts), the API key (auth.ts), the drain check (503 `draining` while `admission` is
 * draining, issue #8), the concurrency cap (concurrency.ts), and the removal of unknown top-level fields
 * (unknown-fields.ts). Throws RangeError when `groups` is empty or repeats a worker name,
 * and for invalid `edge` options.
 */
export async function buildApp(deps: GatewayDeps): Promise<FastifyInstance> {
  const chooser = new GroupChooser(
    deps.groups,
    deps.loadHorizonMs !== undefined ? { loadHorizonMs: deps.loadHorizonMs } : {},
  );
  const bodyLimit = deps.bodyLimitBytes ?? DEFAULT_BODY_LIMIT_BYTES;
  const edge = resolveEdgeOptions(deps.edge);
  const timeouts = serverTimeouts(edge.requestTimeoutMs);
  const traces = deps.tracer ? new RequestTraces(deps.tracer) : null;
  const app = Fastify({
    // A pino logger is a FastifyBaseLogger; typing it as such keeps the instance type the routes expect.
    loggerInstance: deps.logger as FastifyBaseLogger,
    bodyLimit,
    routerOptions: { maxParamLength: MAX_PATH_PARAM_LENGTH },
    requestTimeout: timeouts.requestTimeout,
    http: timeouts,
    // A request that reaches a closing app (a keep-alive connection after the drain) gets the admission hook's 503
    // `draining` with Retry-After in the OpenAI shape, not fastify's bare 503.
    return503OnClosing: false,
    // fastify's two lines per request are off: the routes log what matters (submit at debug, failures).
    // Every line about a request names it (`requestId`): the client's X-Request-Id, else an id minted here.
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: 'requestId' }),
    ajv: { customOptions: { removeAdditional: false, coerceTypes: false, useDefaults: false, allErrors: false } },
    // Each route's validator compiles on its first request and is shared by the process's apps (validator-compiler.ts).
    schemaController: { compilersFactory: { buildValidator: buildLazyValidator } },
    schemaErrorFormatter: (errors, dataVar) => formatValidationErrors(errors, dataVar),
    frameworkErrors: (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
      const apiErr = frameworkApiError(error, bodyLimit);
      traces?.refusedBeforeHooks(request, apiErr.statusCode); // first: it adds the trace id to the request's logger
      logErrorAnswer(request, apiErr, error);
      // Route hooks (the X-Request-Id echo below) do not run for these pre-routing replies: echo it here, and hand
      // Node the body as the onSend hook would (request-id.ts).
      echoRequestId(request, reply);
      void reply
        .code(apiErr.statusCode)
        .type('application/json; charset=utf-8')
        .send(replyBody(reply, JSON.stringify(apiErr.toBody())));
    },
    clientErrorHandler: makeClientErrorHandler(deps.logger),
    genReqId: logRequestId, // request-id.ts
  });
  // Tracing on: each request's span starts in the first onRequest hook, so a request refused by any later one has a
  // span with its status, and its logger carries the trace id (request-trace.ts).
  traces?.install(app);
  // Node ends a connection as soon as the client shuts its write side, before the response (disconnect.ts). The flag
  // is a long-standing property of http.Server that @types/node does not declare.
  (app.server as Server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
  // /tokenize and /detokenize bodies are parsed here before their work goes off the loop: a lower limit bounds that
  // parse (issue 26 part 5; edge-options.ts DEFAULT_TOKENIZE_BODY_LIMIT_BYTES).
  const tokenizeLimit: RouteBodyLimit = {
    bytes: edge.tokenizeBodyLimitBytes,
    tooLarge: () =>
      new ApiError(
        413,
        `/tokenize and /detokenize take bodies of at most ${edge.tokenizeBodyLimitBytes} bytes here (--tokenize-body-limit)`,
        {
          code: 'request_too_large',
        },
      ),
  };
  installJsonBodyParser(app, bodyLimit, undefined, (url) =>
    url === '/tokenize' || url === '/detokenize' ? tokenizeLimit : null,
  );
  const routeMethods = new RouteMethods();
  app.addHook('onRoute', (route) => routeMethods.add(route.url, route.method));
  await registerCors(app, edge.cors);
  const directory = deps.tenants ?? new TenantDirectory(edge.apiKeys, edge.apiKeysFile);
  await registerApiKeyAuth(app, { keys: directory, metricsRequireKey: edge.metricsRequireKey });
  // Draining (issue #8 part 6): new requests to the API get 503 with Retry-After; live ones run on. After the key check
  // (an unauthenticated caller learns nothing), before the concurrency cap (a refused request never takes a slot).
  const admission = deps.admission ?? OPEN_GATE;
  // A callback hook: an async one costs a promise and a microtask turn per request.
  app.addHook('onRequest', (request, _reply, done) => {
    if (!admission.draining || request.method !== 'POST' || !request.url.startsWith('/v1/')) {
      done();
      return;
    }
    done(
      new ApiError(
        503,
        'the gateway is shutting down: it finishes the requests it has and takes no new ones; retry (another instance)',
        {
          code: 'draining',
          retryAfterSeconds: RETRY_AFTER_UNAVAILABLE_SECONDS,
        },
      ),
    );
  });
  registerConcurrencyCap(app, edge.maxConcurrentRequests, deps.sharedConcurrencyCap);
  registerUnknownFieldPolicy(app);

  deps.metrics.attach(chooser.groups);
  const rankStats = deps.rankStatsInstance ?? new RankStatsBook();
  const events = deps.events ?? new GatewayEvents();
  for (const g of chooser.groups) {
    // A rejoined rank is a fresh process: its old latency samples and rates describe another engine.
    g.backend.on?.('joined', (engine, rejoin) => {
      if (rejoin && engine.engineIndex !== null) rankStats.forgetRank(g.worker, engine.engineIndex);
    });
    recordGroupEvents(events, g);
  }
  // Off-loop tokenizer work of this process, bounded by the edge options; its worker stops with the app.
  const offLoop = new OffLoopTokenizer(deps.tokenizer, edge.offLoop);
  app.addHook('onClose', async () => offLoop.close());
  deps.metrics.attachOffLoop(offLoop);
  const ctx: RouteContext = {
    chooser,
    tokenizer: deps.tokenizer,
    offLoop,
    modelId: deps.modelId,
    servedModelNames:
      deps.servedModelNames !== undefined && deps.servedModelNames.length > 0
        ? [...deps.servedModelNames]
        : [deps.modelId],
    metrics: deps.metrics,
    rankStats,
    events,
    now: deps.now ?? (() => performance.now()),
    systemFingerprint: deps.systemFingerprint ?? `model-gateway-${packageVersion()}`,
    counted: new WeakSet(),
    toolCallParser: resolveToolCallParser(deps.toolCallParser, deps.tokenizer, deps.logger),
    reasoningParser: deps.reasoningParser ?? null,
    trustRequestChatTemplate: deps.trustRequestChatTemplate === true,
    responses: deps.responsesStoreInstance ?? new ResponsesStore(deps.responsesStore),
    streamBackpressure: edge.streamBackpressure,
    admission,
    directory,
    tenants: new WeakMap(),
    traces,
  };

  app.setErrorHandler((error: FastifyError, request, reply) => {
    const apiErr = frameworkApiError(error, bodyLimit);
    logErrorAnswer(request, apiErr, error);
    const trace = traces?.of(request);
    if (trace !== undefined) {
      if (apiErr.statusCode >= 500) trace.fail(error);
      // A request refused after its record took the span (a submit error: queue timeout, budget, no rank) is answered
      // here, not counted by the record: the response's close ends the span with this status.
      trace.owned = false;
    }
    // Every 429 ends here (the concurrency cap, flow control, tenant budgets, a full tokenizer queue): in bursts.
    if (apiErr.statusCode === 429) events.refused(apiErr.code);
    const url = request.routeOptions.url;
    if (url !== undefined && GENERATION_ROUTES.has(url) && !ctx.counted.has(request)) {
      ctx.counted.add(request);
      deps.metrics.countRequest(url, apiErr.statusCode, 'none');
      const tenant = ctx.tenants.get(request);
      if (tenant !== undefined)
        deps.metrics.countTenant(tenant, apiErr.statusCode, null, apiErr.code ?? String(apiErr.statusCode));
    }
    if (apiErr.retryAfterSeconds !== null) reply.header('retry-after', String(apiErr.retryAfterSeconds));
    if (apiErr.headers !== null) reply.headers(apiErr.headers);
    return reply.code(apiErr.statusCode).send(apiErr.toBody());
  });
  // Echo the client's X-Request-Id on every answer (gateway.md 13) as the bytes it sent; it is never used as the engine
  // request id. A serialized body is a string: as bytes when the id needs it (request-id.ts).
  app.addHook('onSend', async (request, reply, payload) => {
    echoRequestId(request, reply);
    return typeof payload === 'string' ? replyBody(reply, payload) : payload;
  });
  // 404s and 405s are logged at info (a client calling a path this gateway does not serve), at most 10 lines a second.
  const unknownRoutes = new LineBudget(UNKNOWN_ROUTE_LINES_PER_SECOND, 1000, ctx.now);
  app.setNotFoundHandler((request, reply) => {
    const allow = routeMethods.allowFor(request.url);
    logUnknownRoute(request, allow === null ? 404 : 405, unknownRoutes);
    if (allow !== null) {
      const err = new ApiError(405, `Method Not Allowed: ${request.method} ${request.url} (allowed: ${allow})`, {
        code: 'method_not_allowed',
      });
      return reply.code(405).header('allow', allow).send(err.toBody());
    }
    return reply
      .code(404)
      .send(new ApiError(404, `no route for ${request.method} ${request.url}`, { code: 'not_found' }).toBody());
  });

  registerChatRoute(app, ctx);
  registerCompletionsRoute(app, ctx);
  registerEmbeddingsRoute(app, ctx);
  if (deps.allowRuntimeLoraUpdating === true) registerLoraRoutes(app, ctx);
  registerInfoRoutes(app, ctx, Math.floor(Date.now() / 1000));
  registerTokenizeRoutes(app, ctx);
  registerResponsesRoutes(app, ctx);
  registerRanksRoute(app, ctx, deps.sharedRankStats);
  registerDashboardRoutes(app);
  await app.ready();
  return app;
}
