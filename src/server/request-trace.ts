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
import { symbols, type Logger, type LoggerOptions } from 'pino';
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
 * is held as its sampling word alone (`RootSamplingTracer.drawRoot`): its ids and its non-recording span are made the
 * first time a log line, an engine or a caller asks for them, which most such requests never do.
 */
export class RequestTrace {
  /** True once a request record owns the span's end (it ends it with the outcome, not the response's close). */
  owned = false;
  private ended: boolean;
  private headers: TraceCarrier | null = null;
  /** A left-out root's trace id, once asked for. */
  private id: string | null = null;

  private constructor(
    private made: Span | null,
    private readonly tracer: Tracer,
    /** Who makes a left-out root's ids and span from `word` (null: `made` is set from the start). */
    private readonly roots: RootSamplingTracer | null,
    private readonly word: number,
  ) {
    this.ended = made === null || !made.isRecording();
  }

  /** The trace of `span` (recording or not), whose children `tracer` makes. */
  static of(span: Span, tracer: Tracer): RequestTrace {
    return new RequestTrace(span, tracer, null, 0);
  }

  /** The trace of a new root `roots` left out (not `roots.keeps(word)`), its ids made from `word` when first asked for. */
  static leftOut(roots: RootSamplingTracer, word: number): RequestTrace {
    return new RequestTrace(null, roots, roots, word);
  }

  /** The span (for a left-out root, made now if it was not yet). */
  get span(): Span {
    return (this.made ??= this.roots!.leftOutRoot(this.traceId));
  }

  /** The trace id (32 hex digits); a left-out root's is made on the first call, without its span (a log line's need). */
  get traceId(): string {
    if (this.made !== null) return this.made.spanContext().traceId;
    return (this.id ??= this.roots!.traceIdFor(this.word));
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

/** Where a raw request, and its logger, hold its trace. */
const TRACE = Symbol('model_gateway.trace');

/** A raw request with its trace: set on the request itself, not in a WeakMap (its entries cost the collector per request). */
interface TracedMessage extends IncomingMessage {
  [TRACE]?: RequestTrace;
}

/** A request's logger (the child fastify made of the app's logger), holding the request's trace for `traceMixin`. */
interface TracedLogger {
  [TRACE]?: RequestTrace;
  [symbols.mixinSym]?: MixinFn;
}

type MixinFn = NonNullable<LoggerOptions['mixin']>;

/** What `traceMixin`'s mixins carry, so that a logger gets one once however many apps share it. */
const TRACE_MIXIN = Symbol('model_gateway.traceMixin');

/**
 * A pino mixin that adds `traceId` to a line written through a request's logger (or a child of it), after what
 * `prior` (the logger's own mixin, if any) adds. The id is read when the line is written: most requests write none.
 */
function traceMixin(prior: MixinFn | undefined): MixinFn {
  const mixin: MixinFn & { [TRACE_MIXIN]?: true } = (mergeObject, level, logger) => {
    const out = (prior === undefined ? {} : prior(mergeObject, level, logger)) as Record<string, unknown>;
    const t = (logger as TracedLogger)[TRACE];
    if (t !== undefined) out['traceId'] = t.traceId;
    return out;
  };
  mixin[TRACE_MIXIN] = true;
  return mixin;
}

/** The trace of a new root that `roots` decides: its SDK span when kept, else the left-out root's word alone. */
function newRoot(roots: RootSamplingTracer, name: string): RequestTrace {
  const word = roots.drawRoot();
  return roots.keeps(word)
    ? RequestTrace.of(roots.keptRoot(name, { kind: SpanKind.SERVER }, roots.traceIdFor(word)), roots)
    : RequestTrace.leftOut(roots, word);
}

/** The spans of an app's requests (one per app; see the module comment). */
export class RequestTraces {
  /** The tracer that decides new roots itself, whose left-out roots a request holds as one number; else null. */
  private readonly roots: RootSamplingTracer | null;

  constructor(private readonly tracer: Tracer) {
    this.roots = tracer instanceof RootSamplingTracer && tracer.decidesRoots ? tracer : null;
  }

  /**
   * Make every line written through a request's logger carry the request's trace id (`traceId`, beside `requestId`):
   * `traceMixin` becomes `logger`'s mixin (once per logger; through `pino.symbols`, pino's documented door for
   * integrations), and a line's id is read when it is written. `logger` is the one the app hands fastify, whose request
   * loggers are its children; other lines through it are unchanged. Not `setBindings` on each request's logger (~1 µs
   * per request), a custom `childLoggerFactory` (fastify then checks every request's logger, ~1 µs) or a child of
   * `logger` for the app (a deeper prototype chain behind every logger call of a request, ~1 µs).
   */
  addTraceIds(logger: Logger): void {
    const held = logger as unknown as TracedLogger;
    const prior = held[symbols.mixinSym];
    if (prior !== undefined && TRACE_MIXIN in prior) return;
    held[symbols.mixinSym] = traceMixin(prior);
  }

  /** The span of `request`, or undefined when it has none (an untraced path). */
  of(request: FastifyRequest): RequestTrace | undefined {
    return (request.raw as TracedMessage)[TRACE];
  }

  /**
   * Start the trace of `request` (a child of the client's `traceparent`, else a new trace), unless its path is
   * untraced, and hold it on the request's logger for `traceMixin`. A new root that `RootSamplingTracer` leaves out is
   * only its sampling word until something asks for its ids (`RequestTrace.leftOut`).
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
    (request.log as TracedLogger)[TRACE] = t;
    return t;
  }

  /**
   * Start each request's span (`start`) in the first `onRequest` hook, so requests refused by authentication, CORS or
   * the concurrency cap have spans too, and the route's log lines the trace id. Name and describe a recording span
   * after its route, and end it when the response closes unless a record owns it: with the response's status, or 499
   * when the client left before the response was written (as the generation routes record it; Node's `statusCode`
   * would still say 200). A new root left out (most of them at a low ratio) costs a random word and two stores.
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
