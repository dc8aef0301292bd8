/**
 * The span of each HTTP request while tracing is on (issue 32 part 1; src/tracing.ts). Every request but the probes,
 * `/metrics` and the dashboard gets a SERVER span named `METHOD route`, a child of the client's `traceparent` when it
 * sent one, else the root of a new trace; its log lines carry the trace id (`traceId`). A generation request adds
 * a `tokenize` child span, hands the span's headers to the engine client (its `queue` and `route` spans, and vLLM's
 * `trace_headers`), and its record (request-record.ts) ends the span with the outcome: `first_token` event, usage,
 * finish reasons. Any other request's span ends when its response closes, with the HTTP status.
 *
 * Tracing off: no hook is installed and no route looks anything up (`RouteContext.traces` is null).
 */
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import type { IncomingMessage } from 'node:http';
import type { FastifyBaseLogger, FastifyInstance, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { carrierOf, contextOf, type TraceCarrier } from '../tracing.js';

/** Paths without spans: probes and scrapes (every few seconds, nothing to see) and the dashboard's files. */
function untraced(url: string): boolean {
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  return path === '/metrics' || path === '/health' || path === '/ready' || path.startsWith('/dashboard');
}

/**
 * One request's span and what its route adds to it. Every method but `carrier` is a no-op once the span ended, and
 * for a span the sampler left out (most of them at a low sampling ratio): the per-request cost of an unsampled
 * request is the span's start, its headers and its log child.
 */
export class RequestTrace {
  /** True once a request record owns the span's end (it ends it with the outcome, not the response's close). */
  owned = false;
  private ended: boolean;
  private headers: TraceCarrier | null = null;

  constructor(
    readonly span: Span,
    private readonly tracer: Tracer,
  ) {
    this.ended = !span.isRecording();
  }

  /** The trace id (32 hex digits). */
  get traceId(): string {
    return this.span.spanContext().traceId;
  }

  /** The W3C headers that make this span the parent of another process's spans (made once). */
  carrier(): TraceCarrier {
    return (this.headers ??= carrierOf(this.span));
  }

  /** Add `attributes` to the span. */
  set(attributes: Attributes): void {
    if (!this.ended) this.span.setAttributes(attributes);
  }

  /** Whether the span records (the sampler kept it): callers skip building attributes for one that does not. */
  get recording(): boolean {
    return !this.ended;
  }

  /** A finished child span `name` from `fromMs` to `toMs` (a `performance.now()` clock or epoch ms). */
  child(name: string, fromMs: number, toMs: number, attributes?: Attributes): void {
    if (this.ended) return;
    const s = this.tracer.startSpan(
      name,
      { startTime: fromMs, ...(attributes ? { attributes } : {}) },
      trace.setSpan(ROOT_CONTEXT, this.span),
    );
    s.end(toMs);
  }

  /** An event `name` on the span at `atMs` (same clocks as `child`). */
  event(name: string, attributes: Attributes, atMs: number): void {
    if (!this.ended) this.span.addEvent(name, attributes, atMs);
  }

  /** Record `err` on the span and mark it failed. */
  fail(err: unknown): void {
    if (this.ended) return;
    if (err instanceof Error) this.span.recordException(err);
    this.span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
  }

  /**
   * End the span with HTTP `status` (`http.response.status_code`; a 5xx marks it failed, as the HTTP semantic
   * conventions say for a server span). Idempotent: the first end wins.
   */
  end(status: number): void {
    if (this.ended) return; // ended, or never recording (the SDK's non-recording span has nothing to end)
    this.span.setAttribute('http.response.status_code', status);
    if (status >= 500) this.span.setStatus({ code: SpanStatusCode.ERROR });
    this.ended = true;
    this.span.end();
  }
}

/** What a span says of a request its client left before the response was written (nginx's 499, as request-record.ts). */
const CLIENT_LEFT_STATUS = 499;

/** Name a recording span after the request's route (`unknown route` when none matched) and describe the request. */
function describe(t: RequestTrace, request: FastifyRequest): void {
  const route = request.routeOptions.url;
  t.span.updateName(`${request.method} ${route ?? 'unknown route'}`);
  t.set({
    'http.request.method': request.method,
    ...(route !== undefined ? { 'http.route': route } : {}),
    'url.path': request.url.split('?', 1)[0]!,
    'model_gateway.request_id': request.id,
  });
}

/** A request's logger: the child fastify made of the app's pino logger (`GatewayDeps.logger`). */
type PinoChild = FastifyBaseLogger & Pick<Logger, 'setBindings'>;

/** Where a raw request holds its span. */
const TRACE = Symbol('model_gateway.trace');

/** A raw request with its span: set on the request itself, not in a WeakMap (its entries cost the collector per request). */
interface TracedMessage extends IncomingMessage {
  [TRACE]?: RequestTrace;
}

/** The spans of an app's requests (one per app; see the module comment). */
export class RequestTraces {
  constructor(private readonly tracer: Tracer) {}

  /** The span of `request`, or undefined when it has none (an untraced path). */
  of(request: FastifyRequest): RequestTrace | undefined {
    return (request.raw as TracedMessage)[TRACE];
  }

  /**
   * Start the span of `request` (a child of the client's `traceparent`, else a new trace), unless its path is
   * untraced, and add the trace id to the request's logger (`traceId`, beside `requestId`). pino's `setBindings` adds
   * to the request's own logger: a custom `childLoggerFactory` made fastify check every request's logger (~1 µs), and
   * a child of the request's logger cost ~10 µs (pino serializes a child of a child's bindings slowly).
   */
  private start(request: FastifyRequest): RequestTrace | undefined {
    const raw = request.raw as TracedMessage;
    if (raw[TRACE] !== undefined || untraced(request.url)) return raw[TRACE];
    // Named by its method until `describe` names a recording span after its route.
    const span = this.tracer.startSpan(request.method, { kind: SpanKind.SERVER }, contextOf(raw.headers));
    const t = new RequestTrace(span, this.tracer);
    raw[TRACE] = t;
    (request.log as PinoChild).setBindings({ traceId: t.traceId });
    return t;
  }

  /**
   * Start each request's span (`start`) in the first `onRequest` hook, so requests refused by authentication, CORS or
   * the concurrency cap have spans too, and the route's log lines the trace id. Name and describe a recording span
   * after its route, and end it when the response closes unless a record owns it: with the response's status, or 499
   * when the client left before the response was written (as the generation routes record it; Node's `statusCode`
   * would still say 200). An unsampled span (most of them at a low ratio) costs its start and its log binding.
   */
  install(app: FastifyInstance): void {
    app.addHook('onRequest', (request, reply, done) => {
      const t = this.start(request);
      if (t !== undefined && t.recording) {
        describe(t, request);
        reply.raw.once('close', () => {
          if (!t.owned) t.end(reply.raw.writableEnded ? reply.raw.statusCode : CLIENT_LEFT_STATUS);
        });
      }
      done();
    });
  }

  /**
   * The span of a request fastify refused before its hooks ran (`frameworkErrors`: an undecodable URL), started and
   * ended with `status`, since no hook will: called before the refusal is logged, so its line carries the trace id.
   */
  refusedBeforeHooks(request: FastifyRequest, status: number): void {
    const t = this.start(request);
    if (t === undefined || !t.recording) return;
    describe(t, request);
    t.end(status);
  }
}
