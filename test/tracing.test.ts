/**
 * src/tracing.ts: when tracing is on and how (`tracingSettings` over the flag and the `OTEL_*` variables), the W3C
 * carrier round trip, and a provider that exports over OTLP/JSON to the test receiver (the e2e file covers protobuf).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { diag, trace, ROOT_CONTEXT, SamplingDecision, SpanKind, TraceFlags } from '@opentelemetry/api';
import { loggingErrorHandler, setGlobalErrorHandler } from '@opentelemetry/core';
import { createServer } from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  type Sampler,
} from '@opentelemetry/sdk-trace';
import {
  carrierOf,
  contextOf,
  PooledIdGenerator,
  RootSamplingTracer,
  SAMPLERS,
  isSampled,
  isTraceCarrier,
  loggableEndpoint,
  otelDiagnostics,
  rootUpperBound,
  startTracing,
  traceIdWord,
  tracingSettings,
  tracesUrl,
} from '../src/tracing.js';
import { waitFor } from './helpers/async.js';
import { startOtlpReceiver } from './helpers/otlp-receiver.js';

test('tracingSettings: off without an endpoint; the flag, then the traces variable, then the base variable', () => {
  assert.equal(tracingSettings(undefined, {}), null);
  const flag = tracingSettings('http://collector:4318', {});
  assert.equal(flag?.endpoint, 'http://collector:4318/v1/traces', 'a URL without a path gets /v1/traces');
  assert.equal(flag?.protocol, 'http/protobuf');
  assert.equal(flag?.sampler, 'parentbased_always_on');
  assert.equal(flag?.ratio, 1);
  assert.equal(tracingSettings('http://c:4318/custom', {})?.endpoint, 'http://c:4318/custom', 'a path is kept');
  assert.equal(
    tracingSettings(undefined, { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://t:1/x' })?.endpoint,
    'http://t:1/x',
  );
  assert.equal(
    tracingSettings(undefined, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://b:4318/' })?.endpoint,
    'http://b:4318/v1/traces',
  );
  assert.equal(
    tracingSettings('http://f:1', { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://t:1/x' })?.endpoint,
    'http://f:1/v1/traces',
    'the flag wins',
  );
  assert.equal(tracingSettings('http://f:1', { OTEL_SDK_DISABLED: 'true' }), null);
  assert.equal(tracingSettings('http://f:1', { OTEL_TRACES_EXPORTER: 'none' }), null);
});

test('tracingSettings: protocol, sampler, ratio and batch variables; a bad value names its variable', () => {
  const s = tracingSettings('http://c:4318', {
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: '0.01',
    OTEL_BSP_SCHEDULE_DELAY: '100',
    OTEL_BSP_MAX_QUEUE_SIZE: '10',
  })!;
  assert.equal(s.protocol, 'http/json');
  assert.equal(s.sampler, 'parentbased_traceidratio');
  assert.equal(s.ratio, 0.01);
  assert.equal(s.batch.scheduledDelayMillis, 100);
  assert.equal(s.batch.maxQueueSize, 10);
  assert.equal(s.batch.maxExportBatchSize, 512);
  assert.throws(
    () => tracingSettings('http://c', { OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc' }),
    /gRPC is not built in/,
  );
  assert.throws(() => tracingSettings('http://c', { OTEL_TRACES_SAMPLER: 'sometimes' }), /OTEL_TRACES_SAMPLER must/);
  assert.throws(() => tracingSettings('http://c', { OTEL_TRACES_SAMPLER_ARG: '2' }), /ratio 0..1/);
  assert.throws(() => tracingSettings('http://c', { OTEL_BSP_MAX_QUEUE_SIZE: '0' }), /OTEL_BSP_MAX_QUEUE_SIZE/);
  assert.throws(() => tracingSettings('localhost:4317', {}), /http:\/\/ or https:\/\//);
  assert.throws(() => tracesUrl('grpc://c:4317', true), /gRPC is not built in/);
  assert.throws(() => tracingSettings('http://c', { OTEL_BSP_SCHEDULE_DELAY: '99999999999' }), /2147483647/);
  // A base endpoint's path gets /v1/traces before any query; the logged form drops credentials and query.
  const base = tracingSettings(undefined, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://u:pw@h:4318/?token=abc' })!;
  assert.equal(base.endpoint, 'http://u:pw@h:4318/v1/traces?token=abc');
  assert.equal(loggableEndpoint(base.endpoint), 'http://h:4318/v1/traces');
});

test('carrierOf / contextOf round trip a span context; a bad traceparent starts a new trace', () => {
  const spanContext = { traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331', traceFlags: 1 };
  const carrier = carrierOf(trace.wrapSpanContext(spanContext));
  assert.deepEqual(carrier, { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' });
  assert.ok(isTraceCarrier(carrier));
  assert.deepEqual(trace.getSpanContext(contextOf(carrier)), { ...spanContext, isRemote: true });
  assert.equal(trace.getSpanContext(contextOf({ traceparent: 'garbage' })), undefined);
  assert.equal(contextOf(undefined), ROOT_CONTEXT);
  assert.equal(contextOf({ tracestate: 'a=b' }), ROOT_CONTEXT, 'no traceparent: no parent');
  assert.ok(!isTraceCarrier({ traceparent: 1 }));
  assert.ok(!isTraceCarrier(['x']));
  assert.ok(!isTraceCarrier({ a: 'x'.repeat(513) }));
});

test('startTracing exports over OTLP/JSON with the resource and the sampler', { timeout: 30_000 }, async () => {
  const receiver = await startOtlpReceiver();
  try {
    const on = await startTracing(
      tracingSettings(receiver.url, { OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '10' })!,
      'gateway',
    );
    const span = on.tracer.startSpan('unit', { attributes: { answer: 42 } });
    span.end();
    await on.shutdown();
    await waitFor(() => receiver.spans.length === 1, 'one span');
    assert.deepEqual(receiver.errors, []);
    assert.ok(receiver.contentTypes.has('application/json'));
    const [got] = receiver.spans;
    assert.equal(got!.name, 'unit');
    assert.equal(got!.attributes['answer'], 42);
    assert.equal(got!.resource['service.name'], 'model-gateway');
    assert.equal(got!.resource['model_gateway.role'], 'gateway');
    // Ratio 0: a new trace is never sampled, so nothing is exported.
    const off = await startTracing(
      tracingSettings(receiver.url, { OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '0' })!,
      'gateway',
    );
    const unsampled = off.tracer.startSpan('never');
    assert.equal(unsampled.isRecording(), false);
    unsampled.end();
    await off.shutdown();
    assert.equal(receiver.spans.length, 1);
  } finally {
    await receiver.close();
  }
});

test('isSampled reads the sampled bit of the traceparent flags', () => {
  const tp = (flags: string) => ({ traceparent: `00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-${flags}` });
  assert.ok(isSampled(tp('01')));
  assert.ok(isSampled(tp('03')));
  assert.ok(!isSampled(tp('00')));
  assert.ok(!isSampled(tp('02')));
  assert.ok(!isSampled({}));
  assert.ok(!isSampled({ traceparent: 'short' }));
});

test('PooledIdGenerator: W3C ids (32 and 16 lower-case hex digits), distinct across pool refills', () => {
  const ids = new PooledIdGenerator();
  const seen = new Set<string>();
  // 2000 of each: 96 000 digits, so the 16 384-digit pool is refilled several times.
  for (let i = 0; i < 2000; i++) {
    const t = ids.generateTraceId();
    const s = ids.generateSpanId();
    assert.match(t, /^[0-9a-f]{32}$/);
    assert.match(s, /^[0-9a-f]{16}$/);
    assert.ok(!/^0+$/.test(t) && !/^0+$/.test(s));
    seen.add(t).add(s);
  }
  assert.equal(seen.size, 4000);
});

test("rootUpperBound + traceIdWord decide a root as the SDK's samplers do, for every sampler and edge ratios", () => {
  const ids = new PooledIdGenerator();
  // Random ids, and ids whose words XOR to the extremes (0, 2^32 − 1) and to one either side of a ratio's bound.
  const traceIds = Array.from({ length: 4000 }, () => ids.generateTraceId());
  traceIds.push(
    'ffffffff000000000000000000000000',
    '00000000000000000000000000000001',
    'ffffffffffffffffffffffffffffffff',
  );
  traceIds.push(
    '028f5c28000000000000000000000000',
    '028f5c29000000000000000000000000',
    '7fffffff000000000000000000000000',
  );
  for (const ratio of [0, 1e-9, 0.01, 0.5, 0.999999, 1]) {
    const root = (name: string): Sampler =>
      name.endsWith('always_on')
        ? new AlwaysOnSampler()
        : name.endsWith('always_off')
          ? new AlwaysOffSampler()
          : new TraceIdRatioBasedSampler(ratio);
    for (const name of SAMPLERS) {
      const sampler = name.startsWith('parentbased_') ? new ParentBasedSampler({ root: root(name) }) : root(name);
      const bound = rootUpperBound(name, ratio);
      for (const id of traceIds) {
        const sdk = sampler.shouldSample(ROOT_CONTEXT, id, 'x', SpanKind.SERVER, {}, []).decision;
        assert.equal(
          traceIdWord(id) < bound,
          sdk === SamplingDecision.RECORD_AND_SAMPLED,
          `${name} at ${ratio}, trace id ${id}`,
        );
      }
    }
  }
});

test(
  'RootSamplingTracer: a left-out root is made here, a kept one is the SDK span with the same trace id',
  { timeout: 30_000 },
  async () => {
    const receiver = await startOtlpReceiver();
    try {
      const on = await startTracing(
        tracingSettings(receiver.url, {
          OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
          OTEL_BSP_SCHEDULE_DELAY: '10',
          OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
          OTEL_TRACES_SAMPLER_ARG: '0.5',
        })!,
        'gateway',
      );
      assert.ok((on.tracer as object) instanceof RootSamplingTracer);
      const bound = rootUpperBound('parentbased_traceidratio', 0.5);
      const kept: string[] = [];
      const seen = new Set<string>();
      for (let i = 0; i < 200; i++) {
        const span = on.tracer.startSpan('root', { kind: SpanKind.SERVER }, ROOT_CONTEXT);
        const { traceId, spanId, traceFlags } = span.spanContext();
        assert.match(traceId, /^[0-9a-f]{32}$/);
        assert.match(spanId, /^[0-9a-f]{16}$/);
        // The trace id the decision was made on is the span's: the SDK drew the reserved id, and never again.
        assert.ok(!seen.has(traceId), 'a trace id is used once');
        seen.add(traceId);
        assert.equal(span.isRecording(), traceIdWord(traceId) < bound);
        assert.equal(traceFlags, span.isRecording() ? TraceFlags.SAMPLED : TraceFlags.NONE);
        if (span.isRecording()) {
          kept.push(traceId);
          // A child of a kept root is the SDK's, in the same trace.
          const child = on.tracer.startSpan('child', {}, trace.setSpan(ROOT_CONTEXT, span));
          assert.equal(child.spanContext().traceId, traceId);
          assert.ok(child.isRecording());
          child.end();
        } else {
          // A child of a left-out root is left out too (parent-based), with the root's trace id.
          const child = on.tracer.startSpan('child', {}, trace.setSpan(ROOT_CONTEXT, span));
          assert.equal(child.spanContext().traceId, traceId);
          assert.equal(child.isRecording(), false);
        }
        span.end();
      }
      // Ratio 0.5 over 200 roots: both paths taken (binomial: outside 60..140 has probability below 1e-8).
      assert.ok(kept.length > 60 && kept.length < 140, `${kept.length} of 200 kept`);
      await on.shutdown();
      await waitFor(() => receiver.spans.length === 2 * kept.length, 'every kept root and its child exported');
      assert.deepEqual([...new Set(receiver.spans.map((s) => s.traceId))].sort(), [...kept].sort());
    } finally {
      await receiver.close();
    }
  },
);

/** A logger that keeps its warn and error lines. */
function recordingLog() {
  const lines: Array<{ level: string; obj: Record<string, unknown>; msg: string }> = [];
  return {
    lines,
    warn: (obj: Record<string, unknown>, msg: string) => void lines.push({ level: 'warn', obj, msg }),
    error: (obj: Record<string, unknown>, msg: string) => void lines.push({ level: 'error', obj, msg }),
  };
}

test('otelDiagnostics: warnings and errors as lines, at most 6 a minute, the next one counting the dropped', () => {
  let now = 0;
  const log = recordingLog();
  const d = otelDiagnostics(log, () => now);
  d.info('not logged');
  d.debug('not logged');
  d.verbose('not logged');
  d.error('export failed', { code: 'ECONNREFUSED' });
  for (let i = 0; i < 7; i++) d.warn(`dropped ${i}`);
  assert.equal(log.lines.length, 6);
  assert.deepEqual(log.lines[0], {
    level: 'error',
    obj: { details: ['{"code":"ECONNREFUSED"}'] },
    msg: 'OpenTelemetry: export failed',
  });
  assert.equal(log.lines[5]!.msg, 'OpenTelemetry: dropped 4');
  now = 60_000;
  d.warn('later');
  assert.deepEqual(log.lines[6], { level: 'warn', obj: { suppressed: 2 }, msg: 'OpenTelemetry: later' });
  d.flush(); // nothing held back since: no line
  assert.equal(log.lines.length, 7);
});

test('otelDiagnostics: dropped spans are counted when their line is held back; flush says what was held', () => {
  let now = 0;
  const log = recordingLog();
  const d = otelDiagnostics(log, () => now);
  for (let i = 0; i < 6; i++) d.error('OTLPExporterError: Bad Request');
  // The minute's budget is spent: an outage and two drop reports come later in it.
  d.warn('Dropped 472 spans because maxQueueSize reached');
  d.error('Error: Request timed out');
  d.warn('Dropped 240 spans because maxQueueSize reached');
  assert.equal(log.lines.length, 6);
  d.flush();
  assert.deepEqual(log.lines[6], {
    level: 'warn',
    obj: { suppressed: 3, last: 'Dropped 240 spans because maxQueueSize reached', droppedSpans: 712 },
    msg: 'OpenTelemetry: 3 more diagnostic lines held back',
  });
  // A written drop report carries the running count, then it starts again.
  now = 60_000;
  d.warn('Dropped 5 spans because maxQueueSize reached');
  assert.deepEqual(log.lines[7]!.obj, { droppedSpans: 5 });
  d.warn('Dropped 7 spans because maxQueueSize reached');
  assert.deepEqual(log.lines[8]!.obj, { droppedSpans: 7 });
});

test(
  'startTracing with a log: a refused export and spans dropped at a full queue are logged',
  { timeout: 30_000 },
  async () => {
    // A collector that refuses every batch (400 is not retried, so the export fails at once).
    const collector = createServer((q, s) => {
      q.resume();
      q.on('end', () => {
        s.writeHead(400);
        s.end();
      });
    });
    collector.listen(0, '127.0.0.1');
    await once(collector, 'listening');
    const log = recordingLog();
    try {
      const on = await startTracing(
        tracingSettings(`http://127.0.0.1:${(collector.address() as AddressInfo).port}`, {
          OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
          OTEL_BSP_SCHEDULE_DELAY: '10',
          OTEL_BSP_MAX_QUEUE_SIZE: '1',
          OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '1',
        })!,
        'gateway',
        undefined,
        log,
      );
      // The queue holds one span and exports at one: of three spans ended in the same tick, one or two are dropped.
      for (let i = 0; i < 3; i++) on.tracer.startSpan(`s${i}`, {}, ROOT_CONTEXT).end();
      await waitFor(() => log.lines.some((l) => l.level === 'error'), 'the refused export logged');
      assert.deepEqual(
        log.lines.find((l) => l.level === 'error'),
        { level: 'error', obj: { details: ['{"code":400}'] }, msg: 'OpenTelemetry: OTLPExporterError: Bad Request' },
      );
      // The export took the queued span: the queue takes the next one, and the processor says what it dropped.
      on.tracer.startSpan('s3', {}, ROOT_CONTEXT).end();
      await on.shutdown();
      assert.ok(
        log.lines.some(
          (l) => l.level === 'warn' && /^OpenTelemetry: Dropped [12] spans because maxQueueSize reached$/.test(l.msg),
        ),
        JSON.stringify(log.lines),
      );
      assert.ok(
        log.lines.every((l) => l.msg.startsWith('OpenTelemetry: ')),
        JSON.stringify(log.lines),
      );
    } finally {
      diag.disable();
      setGlobalErrorHandler(loggingErrorHandler()); // core's default again
      collector.close();
    }
  },
);
