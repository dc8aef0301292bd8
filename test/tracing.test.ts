/**
 * src/tracing.ts: when tracing is on and how (`tracingSettings` over the flag and the `OTEL_*` variables), the W3C
 * carrier round trip, and a provider that exports over OTLP/JSON to the test receiver (the e2e file covers protobuf).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { trace, ROOT_CONTEXT } from '@opentelemetry/api';
import {
  carrierOf,
  contextOf,
  PooledIdGenerator,
  isSampled,
  isTraceCarrier,
  loggableEndpoint,
  startTracing,
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
  // 500 of each: 24 000 digits, so the 4096-digit pool is refilled several times.
  for (let i = 0; i < 500; i++) {
    const t = ids.generateTraceId();
    const s = ids.generateSpanId();
    assert.match(t, /^[0-9a-f]{32}$/);
    assert.match(s, /^[0-9a-f]{16}$/);
    assert.ok(!/^0+$/.test(t) && !/^0+$/.test(s));
    seen.add(t).add(s);
  }
  assert.equal(seen.size, 1000);
});
