/**
 * OpenTelemetry tracing (issue 32 part 1): off by default; on with `--otlp-traces-endpoint URL` (vLLM's flag) or the
 * standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`. Spans leave over OTLP/HTTP, protobuf
 * (the OpenTelemetry default) or JSON (`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` / `OTEL_EXPORTER_OTLP_PROTOCOL`), in
 * batches (`OTEL_BSP_*`), sampled as `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG` say (default: follow the
 * caller's sampled flag, sample every new trace). The exporter reads its own `OTEL_EXPORTER_OTLP_*` headers, timeout
 * and certificates; the resource reads `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`. The spec of these
 * variables: https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/.
 *
 * Context crosses processes as W3C trace-context headers (`traceparent`, `tracestate`): from the client's HTTP request,
 * from a `--workers` front to the router inside the engine request, and to vLLM ranks as the request's `trace_headers`
 * (engine-wire.md 5.2 element 14; docs/observability.md "Tracing"), so the engine's spans join the gateway's trace.
 *
 * The SDK and the exporters are loaded only when tracing starts: a gateway without tracing never loads them.
 */
import {
  DiagLogLevel,
  ROOT_CONTEXT,
  TraceFlags,
  context as activeContext,
  diag,
  defaultTextMapGetter,
  defaultTextMapSetter,
  trace,
  type Context,
  type DiagLogger,
  type Span,
  type SpanOptions,
  type Tracer,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator, setGlobalErrorHandler } from '@opentelemetry/core';
import { randomFillSync } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { LineBudget } from './line-budget.js';
import type { MinimalLogger } from './logging.js';

/** W3C trace-context headers (`traceparent`, and `tracestate` when there is one), lower-case names. */
export type TraceCarrier = Readonly<Record<string, string>>;

const propagator = new W3CTraceContextPropagator();

/**
 * The context `carrier` names (HTTP request headers, an engine request's `trace` carrier): a remote parent span
 * when it holds a valid `traceparent`, else the empty root context (the next span starts a new trace). Never throws.
 */
export function contextOf(carrier: object | null | undefined): Context {
  // Most requests come without a parent: no propagator call for them (it walks both header names through the getter).
  if (carrier === null || carrier === undefined || !('traceparent' in carrier)) return ROOT_CONTEXT;
  return propagator.extract(ROOT_CONTEXT, carrier, defaultTextMapGetter);
}

/**
 * Hex digits the id pool holds at once: 512 trace ids' worth. A refill costs ~11 µs for 4096 digits and ~18 µs for
 * 16384 (crypto's cost per call dominates): ~0.05 µs per request, a trace id and a span id each.
 */
const ID_POOL_HEX_DIGITS = 16_384;

/**
 * Trace and span ids (W3C Trace Context 3.2.2.3-4: 32 and 16 lower-case hex digits, not all zero) cut from a pool of
 * random hex, refilled from `crypto.randomFillSync` every `ID_POOL_HEX_DIGITS`. The SDK's default generator writes
 * `Math.random()` words into a buffer and hex-encodes it per id: about 2 µs of each request's span start in the
 * gateway's profile, against ~0.1 µs here. The ids are also cryptographically random, which the default's are not.
 * An id is a slice of the pool's string, so a pool stays alive while an id cut from it does (16 KB each; the sampled spans
 * waiting for export, at most `OTEL_BSP_MAX_QUEUE_SIZE`, hold a few).
 */
export class PooledIdGenerator {
  private pool = '';
  private at = 0;
  private reserved: string | null = null;

  /** A new trace id: 32 hex digits; the reserved one (`reserve`) when there is one, once. */
  generateTraceId(): string {
    const id = this.reserved;
    if (id === null) return this.take(32);
    this.reserved = null;
    return id;
  }

  /** Make `traceId` the next trace id handed out (null: none reserved). */
  reserve(traceId: string | null): void {
    this.reserved = traceId;
  }

  /** A new span id: 16 hex digits. */
  generateSpanId(): string {
    return this.take(16);
  }

  private take(digits: 16 | 32): string {
    for (;;) {
      if (this.at + digits > this.pool.length) {
        this.pool = randomFillSync(Buffer.allocUnsafe(ID_POOL_HEX_DIGITS / 2)).toString('hex');
        this.at = 0;
      }
      const id = this.pool.slice(this.at, (this.at += digits));
      if (id !== ZEROS[digits]) return id; // all zeros is invalid (2^-64): cut the next
    }
  }
}
const ZEROS = { 16: '0'.repeat(16), 32: '0'.repeat(32) } as const;

/**
 * A tracer that decides the sampling of a new trace before any span exists, and makes the root spans it leaves out
 * itself: a non-recording span (flags 00) with a new trace id and span id, as the SDK's tracer makes one (sdk-trace
 * `Tracer.startSpan`). At 1 % sampling that is 99 requests in 100, and the SDK's code for them (span-count metric,
 * attribute cleaning, links, the sampler chain, id validation) cost the gateway ~1 µs per request in
 * bench:tracing-cost, though it runs in 0.5 µs in a loop: in the request path, every distinct piece of code costs
 * several times its loop figure.
 *
 * The decision is the SDK's for a root span (`TraceIdRatioBasedSampler`, also the root of a parent-based sampler):
 * the XOR of the trace id's four 32-bit words below ratio × (2^32 − 1) (`rootUpperBound`), made on a new trace id
 * (`newTraceId`, `keeps`) before its span (`leftOutRoot`, `keptRoot`). So a request can hold a left-out root as its
 * trace id alone, its span made only when an engine asks for its headers (request-trace.ts). A root it keeps goes to
 * the SDK's tracer with its trace id reserved in the id generator, so the SDK's sampler, asked again, keeps it too.
 * Every span with a context other than the empty root one (a parent, suppressed tracing) is the SDK's, and so is every
 * span when every root is kept (`decidesRoots` false). `startActiveSpan` is the SDK's.
 */
export class RootSamplingTracer implements Tracer {
  /** Whether roots are decided here: false when every root is kept (the SDK makes them all). */
  readonly decidesRoots: boolean;

  constructor(
    private readonly sdk: Tracer,
    /** A root whose trace id's word is below this is sampled (`rootUpperBound`). */
    private readonly upperBound: number,
    private readonly ids: PooledIdGenerator,
  ) {
    this.decidesRoots = upperBound < KEEP_ALL;
  }

  /** A new root's trace id: 32 random hex digits; the root is sampled when `keeps(traceId)`. */
  newTraceId(): string {
    return this.ids.generateTraceId();
  }

  /** Whether a root with trace id `traceId` is sampled: its `traceIdWord` is below the bound. */
  keeps(traceId: string): boolean {
    return traceIdWord(traceId) < this.upperBound;
  }

  /** The root span of `traceId` when left out (its word not kept): non-recording, flags 00, a new span id. */
  leftOutRoot(traceId: string): Span {
    return trace.wrapSpanContext({ traceId, spanId: this.ids.generateSpanId(), traceFlags: TraceFlags.NONE });
  }

  /** The SDK's root span `name` for `traceId` (its word kept). */
  keptRoot(name: string, options: SpanOptions, traceId: string): Span {
    this.ids.reserve(traceId);
    try {
      return this.sdk.startSpan(name, options, ROOT_CONTEXT);
    } finally {
      this.ids.reserve(null); // drawn by now; never left for the next root span
    }
  }

  startSpan(name: string, options: SpanOptions = {}, context: Context = activeContext.active()): Span {
    if (context !== ROOT_CONTEXT || options.root === true || !this.decidesRoots)
      return this.sdk.startSpan(name, options, context);
    const traceId = this.newTraceId();
    return this.keeps(traceId) ? this.keptRoot(name, options, traceId) : this.leftOutRoot(traceId);
  }

  startActiveSpan: Tracer['startActiveSpan'] = ((...args: unknown[]) =>
    (this.sdk.startActiveSpan as (...a: unknown[]) => unknown).apply(this.sdk, args)) as Tracer['startActiveSpan'];
}

/** The upper bound that keeps every root: above every 32-bit word. */
const KEEP_ALL = 2 ** 32;

/**
 * The bound a root's `traceIdWord` must stay below to be sampled by `sampler` at `ratio` (0..1): the SDK's
 * `TraceIdRatioBasedSampler` bound, ratio × (2^32 − 1) rounded down, or every word at ratio 1; `always_on` keeps every
 * root and `always_off` none (sdk-trace sampler/TraceIdRatioBasedSampler, AlwaysOnSampler, AlwaysOffSampler).
 */
export function rootUpperBound(sampler: SamplerName, ratio: number): number {
  const r = sampler.endsWith('always_on') ? 1 : sampler.endsWith('always_off') ? 0 : ratio;
  return r >= 1 ? KEEP_ALL : Math.floor(Math.max(0, r) * 0xffffffff);
}

/** The word a trace-id ratio sampler compares (sdk-trace `TraceIdRatioBasedSampler`): the XOR of the id's four 8-digit words. */
export function traceIdWord(traceId: string): number {
  let word = 0;
  for (let i = 0; i < 32; i++) {
    const c = traceId.charCodeAt(i); // a lower-case hex digit: 0-9 are 48-57, a-f 97-102
    word ^= (c < 58 ? c - 48 : c - 87) << (28 - 4 * (i % 8)); // its 4 bits in place in its 32-bit word
  }
  return word >>> 0;
}

/** The W3C headers that make `span` the parent of a span in another process (an engine's, the router's). */
export function carrierOf(span: Span): TraceCarrier {
  const out: Record<string, string> = {};
  propagator.inject(trace.setSpan(ROOT_CONTEXT, span), out, defaultTextMapSetter);
  return out;
}

/**
 * Whether `carrier`'s `traceparent` says its trace is sampled (the flags' lowest bit; W3C Trace Context 3.2.2.5).
 * The engine client makes child spans only for sampled requests: a parent-based sampler would drop them anyway.
 */
export function isSampled(carrier: TraceCarrier): boolean {
  const tp = carrier['traceparent'];
  return tp !== undefined && tp.length >= 55 && (parseInt(tp.slice(53, 55), 16) & 1) === 1;
}

/** Whether `value` can be a trace carrier: a map of at most 8 string fields of at most 512 characters each. */
export function isTraceCarrier(value: unknown): value is TraceCarrier {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const entries = Object.entries(value);
  return entries.length <= 8 && entries.every(([, v]) => typeof v === 'string' && v.length <= 512);
}

/** The OTLP transports built in. gRPC is not (it would add a gRPC stack): collectors serve OTLP/HTTP on port 4318. */
export const OTLP_PROTOCOLS = ['http/protobuf', 'http/json'] as const;
export type OtlpProtocol = (typeof OTLP_PROTOCOLS)[number];

/** The samplers of `OTEL_TRACES_SAMPLER` (the spec's names). */
export const SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
] as const;
export type SamplerName = (typeof SAMPLERS)[number];

/** The batch span processor's settings (`OTEL_BSP_*`; ms and spans). */
export interface BatchSettings {
  scheduledDelayMillis: number;
  maxQueueSize: number;
  maxExportBatchSize: number;
  exportTimeoutMillis: number;
}

/** What tracing runs with once on (`tracingSettings`). */
export interface TracingSettings {
  /** Where spans are posted: the full OTLP/HTTP traces URL (`…/v1/traces`). */
  endpoint: string;
  protocol: OtlpProtocol;
  sampler: SamplerName;
  /** The ratio 0..1 of the `traceidratio` samplers (`OTEL_TRACES_SAMPLER_ARG`, default 1). */
  ratio: number;
  batch: BatchSettings;
}

/** The spec's batch defaults (ms, spans). */
const BATCH_DEFAULTS: BatchSettings = {
  scheduledDelayMillis: 5000,
  maxQueueSize: 2048,
  maxExportBatchSize: 512,
  exportTimeoutMillis: 30_000,
};

const BATCH_ENV: Record<keyof BatchSettings, string> = {
  scheduledDelayMillis: 'OTEL_BSP_SCHEDULE_DELAY',
  maxQueueSize: 'OTEL_BSP_MAX_QUEUE_SIZE',
  maxExportBatchSize: 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE',
  exportTimeoutMillis: 'OTEL_BSP_EXPORT_TIMEOUT',
};

/** The longest timer Node keeps (ms): 2^31 − 1. */
const MAX_TIMER_MS = 2_147_483_647;

/** `endpoint` as a log line may show it: without user, password and query (where credentials go). */
export function loggableEndpoint(endpoint: string): string {
  const url = new URL(endpoint);
  url.username = '';
  url.password = '';
  url.search = '';
  return url.toString();
}

/** `value` without surrounding blanks, or undefined when unset or blank (the spec treats empty as unset). */
function envValue(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const v = env[name]?.trim();
  return v === undefined || v === '' ? undefined : v;
}

/**
 * The traces URL of an endpoint given as a flag: used as it is when it names a path (vLLM passes the flag to its
 * exporter unchanged), else with the OTLP/HTTP traces path `/v1/traces` added. Throws RangeError for a value that is
 * not an http(s) URL.
 */
export function tracesUrl(value: string, appendPath: boolean): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new RangeError(`the OTLP traces endpoint must be an http:// or https:// URL, got ${JSON.stringify(value)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new RangeError(
      `the OTLP traces endpoint must be an http:// or https:// URL (OTLP/HTTP; gRPC is not built in), got ${JSON.stringify(value)}`,
    );
  if (appendPath && (url.pathname === '' || url.pathname === '/')) url.pathname = '/v1/traces';
  return url.toString();
}

/**
 * Whether and how to trace: null when off (no endpoint from `endpointFlag` or the environment, or
 * `OTEL_SDK_DISABLED=true`, or `OTEL_TRACES_EXPORTER=none`), else the settings. The flag wins over
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (a full URL), which wins over `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL,
 * `/v1/traces` appended). Pure. Throws RangeError naming the variable for a value it cannot use: an endpoint that is not
 * an http(s) URL, a protocol other than `OTLP_PROTOCOLS` (`grpc` included), a sampler not in `SAMPLERS`, a ratio
 * outside 0..1, a batch setting that is not an integer ≥ 1 (delay and timeout: ≥ 0).
 */
export function tracingSettings(endpointFlag: string | undefined, env: NodeJS.ProcessEnv): TracingSettings | null {
  if (envValue(env, 'OTEL_SDK_DISABLED')?.toLowerCase() === 'true') return null;
  if (envValue(env, 'OTEL_TRACES_EXPORTER')?.toLowerCase() === 'none') return null;
  const traces = envValue(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
  const base = envValue(env, 'OTEL_EXPORTER_OTLP_ENDPOINT');
  let endpoint: string;
  if (endpointFlag !== undefined) endpoint = tracesUrl(endpointFlag, true);
  else if (traces !== undefined) endpoint = tracesUrl(traces, false);
  else if (base !== undefined) {
    const url = new URL(tracesUrl(base, false));
    url.pathname = `${url.pathname.replace(/\/$/, '')}/v1/traces`;
    endpoint = url.toString();
  } else return null;
  const protocolName =
    envValue(env, 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') ?? envValue(env, 'OTEL_EXPORTER_OTLP_PROTOCOL');
  const protocol = (protocolName ?? 'http/protobuf') as OtlpProtocol;
  if (!OTLP_PROTOCOLS.includes(protocol))
    throw new RangeError(
      `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL must be ${OTLP_PROTOCOLS.join(' or ')} (gRPC is not built in: point the endpoint at the collector's OTLP/HTTP port, usually 4318), got ${JSON.stringify(protocolName)}`,
    );
  const samplerName = envValue(env, 'OTEL_TRACES_SAMPLER')?.toLowerCase() ?? 'parentbased_always_on';
  if (!(SAMPLERS as readonly string[]).includes(samplerName))
    throw new RangeError(
      `OTEL_TRACES_SAMPLER must be one of ${SAMPLERS.join(', ')}, got ${JSON.stringify(samplerName)}`,
    );
  const arg = envValue(env, 'OTEL_TRACES_SAMPLER_ARG');
  const ratio = arg === undefined ? 1 : Number(arg);
  if (!Number.isFinite(ratio) || ratio < 0 || ratio > 1)
    throw new RangeError(`OTEL_TRACES_SAMPLER_ARG must be a ratio 0..1, got ${JSON.stringify(arg)}`);
  const batch = { ...BATCH_DEFAULTS };
  for (const key of Object.keys(BATCH_ENV) as (keyof BatchSettings)[]) {
    const raw = envValue(env, BATCH_ENV[key]);
    if (raw === undefined) continue;
    const n = Number(raw);
    const min = key === 'scheduledDelayMillis' || key === 'exportTimeoutMillis' ? 0 : 1;
    // A timer longer than 2^31 − 1 ms fires after 1 ms in Node: refused rather than turned into no batching at all.
    if (!Number.isSafeInteger(n) || n < min || n > MAX_TIMER_MS)
      throw new RangeError(
        `${BATCH_ENV[key]} must be an integer from ${min} to ${MAX_TIMER_MS}, got ${JSON.stringify(raw)}`,
      );
    batch[key] = n;
  }
  return { endpoint, protocol, sampler: samplerName as SamplerName, ratio, batch };
}

/** OpenTelemetry's diagnostic lines a minute at most (`otelDiagnostics`), per process. */
const DIAG_LINES_PER_MINUTE = 6;

/** The batch processor's warning when its queue takes spans again after dropping some (sdk-trace BatchSpanProcessorBase). */
const DROPPED_SPANS = /^Dropped (\d+) spans\b/;

/** OpenTelemetry's warnings and errors as log lines (`otelDiagnostics`), and the summary of what the budget held back. */
export interface OtelDiagnostics extends DiagLogger {
  /**
   * Write one line for what was held back since the last line (`suppressed` lines, the last one's message, spans
   * dropped), if anything was: called once a minute and at shutdown, so an outage that comes after the minute's
   * budget is spent is still said, and no dropped-span count is lost.
   */
  flush(): void;
}

/**
 * OpenTelemetry's own warnings and errors as lines of `log` (`OpenTelemetry: …`), at most `DIAG_LINES_PER_MINUTE`
 * per process: an export that failed (a collector down or refusing; `startTracing` routes core's global error handler
 * here), spans the batch processor dropped because its queue was full (it says so when the queue takes a span again),
 * a bad exporter variable. Info, debug and verbose lines are dropped. Dropped spans are counted whether or not their
 * line is written: a written line carries `droppedSpans`, the total since the last such count. What the budget held
 * back is said by `flush`.
 */
export function otelDiagnostics(
  log: Pick<MinimalLogger, 'warn' | 'error'>,
  now: () => number = () => performance.now(),
): OtelDiagnostics {
  const budget = new LineBudget(DIAG_LINES_PER_MINUTE, 60_000, now);
  let held = 0;
  let lastHeld = '';
  let droppedSpans = 0;
  const fields = (args: unknown[]): Record<string, unknown> => ({
    ...(args.length > 0
      ? { details: args.map((a) => (typeof a === 'string' ? a : (JSON.stringify(a) ?? String(a)))) }
      : {}),
    ...(droppedSpans > 0 ? { droppedSpans } : {}),
  });
  const line =
    (level: 'warn' | 'error') =>
    (message: string, ...args: unknown[]): void => {
      droppedSpans += Number(DROPPED_SPANS.exec(message)?.[1] ?? 0);
      if (!budget.take().write) {
        held++;
        lastHeld = message;
        return;
      }
      log[level]({ ...fields(args), ...(held > 0 ? { suppressed: held } : {}) }, `OpenTelemetry: ${message}`);
      held = 0;
      droppedSpans = 0;
    };
  const none = (): void => {};
  return {
    error: line('error'),
    warn: line('warn'),
    info: none,
    debug: none,
    verbose: none,
    flush() {
      if (held === 0 && droppedSpans === 0) return;
      log.warn(
        { suppressed: held, ...(held > 0 ? { last: lastHeld } : {}), ...(droppedSpans > 0 ? { droppedSpans } : {}) },
        `OpenTelemetry: ${held} more diagnostic lines held back`,
      );
      held = 0;
      droppedSpans = 0;
    },
  };
}

/** A running tracer provider: its tracer and how to flush it. */
export interface Tracing {
  readonly tracer: Tracer;
  readonly settings: TracingSettings;
  /** Export every span ended so far and wait for the export (the batch processor's force flush). Never rejects. */
  flush(): Promise<void>;
  /** Export what is buffered and stop (at most the exporter's timeout). Never rejects. */
  shutdown(): Promise<void>;
}

/**
 * Start a tracer provider for `settings`: a batch processor posting to the OTLP endpoint, the sampler the settings
 * name, a resource with `service.name` (`OTEL_SERVICE_NAME`, else `serviceName`), `OTEL_RESOURCE_ATTRIBUTES` and
 * `model_gateway.role` = `role` (`gateway`, `front`, `router`, `engine`). Not registered globally: only the code
 * given the tracer makes spans. With `log`, OpenTelemetry's warnings and errors (a failed export, dropped spans) become
 * its lines (`otelDiagnostics`). Loads the SDK and exporter modules on the first call.
 */
export async function startTracing(
  settings: TracingSettings,
  role: string,
  serviceName = 'model-gateway',
  log: Pick<MinimalLogger, 'warn' | 'error'> | null = null,
): Promise<Tracing> {
  // OpenTelemetry reports through one logger and one error handler per process: the last provider started names them.
  let diagnostics: OtelDiagnostics | null = null;
  let summary: NodeJS.Timeout | null = null;
  if (log !== null) {
    diagnostics = otelDiagnostics(log);
    summary = setInterval(() => diagnostics?.flush(), 60_000).unref();
    diag.setLogger(diagnostics, { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true });
    // core's default handler writes the error's JSON, stack and all, through diag.error: its name and message instead.
    const report = diagnostics;
    setGlobalErrorHandler((ex) =>
      ex instanceof Error
        ? report.error(`${ex.name}: ${ex.message}`, ...('code' in ex ? [{ code: ex.code }] : []))
        : report.error(typeof ex === 'string' ? ex : JSON.stringify(ex)),
    );
  }
  const [sdk, resources] = await Promise.all([import('@opentelemetry/sdk-trace'), import('@opentelemetry/resources')]);
  const { OTLPTraceExporter } =
    settings.protocol === 'http/json'
      ? await import('@opentelemetry/exporter-trace-otlp-http')
      : await import('@opentelemetry/exporter-trace-otlp-proto');
  const exporter = new OTLPTraceExporter({ url: settings.endpoint });
  const ratio = new sdk.TraceIdRatioBasedSampler(settings.ratio);
  const root = {
    always_on: new sdk.AlwaysOnSampler(),
    always_off: new sdk.AlwaysOffSampler(),
    traceidratio: ratio,
    parentbased_always_on: new sdk.AlwaysOnSampler(),
    parentbased_always_off: new sdk.AlwaysOffSampler(),
    parentbased_traceidratio: ratio,
  }[settings.sampler];
  const sampler = settings.sampler.startsWith('parentbased_') ? new sdk.ParentBasedSampler({ root }) : root;
  const resource = resources
    .resourceFromAttributes({
      'service.name': serviceName,
      'service.instance.id': `${process.pid}`,
      'model_gateway.role': role,
    })
    .merge(resources.detectResources({ detectors: [resources.envDetector] }));
  const ids = new PooledIdGenerator();
  const provider = new sdk.TracerProvider({
    resource,
    sampler,
    idGenerator: ids,
    spanProcessors: [new sdk.BatchSpanProcessor({ exporter, ...settings.batch })],
  });
  return {
    tracer: new RootSamplingTracer(
      provider.getTracer('model-gateway'),
      rootUpperBound(settings.sampler, settings.ratio),
      ids,
    ),
    settings,
    flush: () => provider.forceFlush().catch(() => {}),
    shutdown: async () => {
      await provider.shutdown().catch(() => {});
      if (summary !== null) clearInterval(summary);
      diagnostics?.flush();
    },
  };
}
