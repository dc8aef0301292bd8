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
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { symbols } from 'pino';
import { RootSamplingTracer, carrierOf, contextOf, type TraceCarrier } from '../tracing.js';

/** Paths without spans: probes and scrapes (every few seconds, nothing to see) and the dashboard's files. */
function untraced(url: string): boolean {
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  return path === '/metrics' || path === '/health' || path === '/ready' || path.startsWith('/dashboard');
}

/**
 * One request's span and what its route adds to it. Every method but `carrier` and `traceId` is a no-op once the span
 * ended, and for a span the sampler left out (most of them at a low sampling ratio). A new root the sampler left out
 * is held as its trace id alone: its non-recording span, with a span id, is made the first time an engine's headers
 * (`carrier`) or a caller ask for it, which most such requests never do.
 */
export class RequestTrace {
  /** True once a request record owns the span's end (it ends it with the outcome, not the response's close). */
  owned = false;
  private ended: boolean;
  private headers: TraceCarrier | null = null;

  private constructor(
    private made: Span | null,
    private readonly tracer: Tracer,
    /** Who makes a left-out root's span (null: `made` is set from the start). */
    private readonly roots: RootSamplingTracer | null,
    /** A left-out root's trace id (null: `made`'s). */
    private readonly id: string | null,
  ) {
    this.ended = made === null || !made.isRecording();
  }

  /** The trace of `span` (recording or not), whose children `tracer` makes. */
  static of(span: Span, tracer: Tracer): RequestTrace {
    return new RequestTrace(span, tracer, null, null);
  }

  /** The trace of a new root `roots` left out, under `traceId` (`roots.newTraceId`, not kept). */
  static leftOut(roots: RootSamplingTracer, traceId: string): RequestTrace {
    return new RequestTrace(null, roots, roots, traceId);
  }

  /** The span (for a left-out root, made now if it was not yet). */
  get span(): Span {
    return (this.made ??= this.roots!.leftOutRoot(this.id!));
  }

  /** The trace id (32 hex digits). */
  get traceId(): string {
    return this.id ?? this.made!.spanContext().traceId;
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

/** Where a raw request holds its trace. */
const TRACE = Symbol('model_gateway.trace');

/** A raw request with its trace: set on the request itself, not in a WeakMap (its entries cost the collector per request). */
interface TracedMessage extends IncomingMessage {
  [TRACE]?: RequestTrace;
}

/** A request's pino logger (the child fastify made of the app's logger): its bindings as pino serialized them. */
interface BoundLogger {
  [symbols.chindingsSym]?: string;
}

/** The trace of a new root that `roots` decides: its SDK span when kept, else the left-out root's trace id alone. */
function newRoot(roots: RootSamplingTracer, name: string): RequestTrace {
  const traceId = roots.newTraceId();
  return roots.keeps(traceId)
    ? RequestTrace.of(roots.keptRoot(name, { kind: SpanKind.SERVER }, traceId), roots)
    : RequestTrace.leftOut(roots, traceId);
}

/** The spans of an app's requests (one per app; see the module comment). */
export class RequestTraces {
  /** The tracer that decides new roots itself, whose left-out roots a request holds as a trace id; else null. */
  private readonly roots: RootSamplingTracer | null;

  constructor(private readonly tracer: Tracer) {
    this.roots = tracer instanceof RootSamplingTracer && tracer.decidesRoots ? tracer : null;
  }

  /** The span of `request`, or undefined when it has none (an untraced path). */
  of(request: FastifyRequest): RequestTrace | undefined {
    return (request.raw as TracedMessage)[TRACE];
  }

  /**
   * Start the trace of `request` (a child of the client's `traceparent`, else a new trace), unless its path is
   * untraced, and add its trace id to the request logger's bindings (`traceId`, beside `requestId`), so every line about
   * the request carries it (at the default level `info`, every request writes one). The id is appended to the bindings
   * as pino serialized them (`pino.symbols.chindingsSym`, pino's documented door for integrations), the string pino's
   * `setBindings` appends to: `setBindings` itself cost ~1 µs per request (it re-reads the logger's serializers and
   * formatters), a pino mixin would run for every line of every logger, and a custom `childLoggerFactory` makes
   * fastify check every request's logger (~1 µs). A new root that `RootSamplingTracer` leaves out is its trace id: its
   * span and span id are made only if an engine needs its headers (`RequestTrace.leftOut`).
   */
  private start(request: FastifyRequest): RequestTrace | undefined {
    const raw = request.raw as TracedMessage;
    if (raw[TRACE] !== undefined || untraced(request.url)) return raw[TRACE];
    const parent = contextOf(raw.headers);
    // Named by its method until `describe` names a recording span after its route.
    const t =
      parent === ROOT_CONTEXT && this.roots !== null
        ? newRoot(this.roots, request.method)
        : RequestTrace.of(this.tracer.startSpan(request.method, { kind: SpanKind.SERVER }, parent), this.tracer);
    raw[TRACE] = t;
    const log = request.log as BoundLogger;
    // A hex id needs no JSON escaping. A logger that is not pino's has no such string, and gets no id.
    if (typeof log[symbols.chindingsSym] === 'string') log[symbols.chindingsSym] += `,"traceId":"${t.traceId}"`;
    return t;
  }

  /**
   * Start each request's span (`start`) in the first `onRequest` hook, so requests refused by authentication, CORS or
   * the concurrency cap have spans too, and the route's log lines the trace id. Name and describe a recording span
   * after its route, and end it when the response closes unless a record owns it: with the response's status, or 499
   * when the client left before the response was written (as the generation routes record it; Node's `statusCode`
   * would still say 200). A new root left out (most of them at a low ratio) costs its trace id and the log binding.
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
