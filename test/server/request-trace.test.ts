/**
 * Request spans in the app (src/server/request-trace.ts), read from an in-memory exporter: what a generation request's
 * span holds, a 5xx recorded as an error with its exception, a mid-stream engine failure marked failed, and the
 * client's parent. The OTLP path end to end is test/e2e/tracing.test.ts.
 */
import { once } from 'node:events';
import { connect } from 'node:net';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SpanStatusCode, type Tracer } from '@opentelemetry/api';
import { pino, type Logger } from 'pino';
import {
  InMemorySpanExporter,
  ParentBasedSampler,
  SimpleSpanProcessor,
  TraceIdRatioBasedSampler,
  TracerProvider,
} from '@opentelemetry/sdk-trace';
import { PooledIdGenerator, RootSamplingTracer, rootUpperBound, traceIdWord } from '../../src/tracing.js';
import { FakeBackend } from './fake-backend.js';
import { waitFor } from '../helpers/async.js';
import { captureLogs } from '../helpers/logs.js';
import { listenApp, makeApp } from './helpers.js';

/** Tracing as startTracing builds it (RootSamplingTracer at `ratio`, pooled ids), exporting into memory. */
function rootSampling(ratio: number) {
  const exporter = new InMemorySpanExporter();
  const ids = new PooledIdGenerator();
  const provider = new TracerProvider({
    idGenerator: ids,
    sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(ratio) }),
    spanProcessors: [new SimpleSpanProcessor({ exporter })],
  });
  const bound = rootUpperBound('parentbased_traceidratio', ratio);
  return { exporter, ids, bound, tracer: new RootSamplingTracer(provider.getTracer('test'), bound, ids) };
}

/** An app over one fake rank of `engine` that answers one token, and the trace headers each submission carried. */
async function oneRankApp(engine: 'tokenspeed' | 'vllm', tracer: Tracer, logger: Logger) {
  const backend = new FakeBackend({ ranks: [0] });
  const sent: Array<Record<string, string> | undefined> = [];
  backend.onSubmit = (s) => {
    sent.push(s.request.trace);
    s.stream.pushAll([9707], 'length');
  };
  const groups = [{ worker: 'w', name: `${engine}-0`, engine, backend }];
  return { app: (await makeApp({ backend, tracer, logger, groups })).app, sent };
}

function tracing() {
  const exporter = new InMemorySpanExporter();
  const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
  return { exporter, tracer: provider.getTracer('test') };
}

test('a generation request: SERVER span with the outcome, tokenize child, first_token event, trace headers sent', async () => {
  const { exporter, tracer } = tracing();
  const backend = new FakeBackend({ ranks: [0, 1] });
  const sent: Array<Record<string, string> | undefined> = [];
  backend.onSubmit = (s) => {
    sent.push(s.request.trace);
    s.stream.pushAll([9707, 11], 'length');
  };
  const { app } = await makeApp({ backend, tracer });
  try {
    const res = await app.inject({
      method: 'POST',
      url: '/v1/completions',
      headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
      payload: { prompt: 'hello', max_tokens: 2, n: 2 },
    });
    assert.equal(res.statusCode, 200);
    const spans = exporter.getFinishedSpans();
    const request = spans.find((s) => s.name === 'POST /v1/completions')!;
    assert.equal(request.spanContext().traceId, '0af7651916cd43dd8448eb211c80319c');
    assert.equal(request.parentSpanContext?.spanId, 'b7ad6b7169203331');
    assert.equal(request.attributes['http.response.status_code'], 200);
    assert.equal(request.attributes['gen_ai.usage.output_tokens'], 4);
    assert.deepEqual(request.attributes['gen_ai.response.finish_reasons'], ['length', 'length']);
    assert.deepEqual(request.attributes['model_gateway.dp_ranks'], [0, 0]);
    assert.ok(request.events.some((e) => e.name === 'first_token'));
    const tokenize = spans.find((s) => s.name === 'tokenize')!;
    assert.equal(tokenize.parentSpanContext?.spanId, request.spanContext().spanId);
    // Both sub-requests carry the request span's headers (the engine client's spans and vLLM's trace_headers).
    assert.equal(sent.length, 2);
    for (const t of sent)
      assert.equal(t?.traceparent, `00-${request.spanContext().traceId}-${request.spanContext().spanId}-01`);
  } finally {
    await app.close();
  }
});

test('a 5xx is recorded as an error with its exception; a mid-stream engine failure marks the span failed', async () => {
  const { exporter, tracer } = tracing();
  const backend = new FakeBackend({ ranks: [0] });
  backend.onSubmit = (s) => {
    s.stream.push([9707]);
    setTimeout(() => s.stream.fail(Object.assign(new Error('engine core dead'), { kind: 'engine-dead' })), 5);
  };
  const { app } = await makeApp({ backend, tracer });
  try {
    const streamed = await app.inject({
      method: 'POST',
      url: '/v1/completions',
      payload: { prompt: 'x', max_tokens: 5, stream: true },
    });
    assert.equal(streamed.statusCode, 200);
    const failed = exporter.getFinishedSpans().find((s) => s.name === 'POST /v1/completions')!;
    assert.equal(failed.status.code, SpanStatusCode.ERROR);
    assert.match(failed.status.message ?? '', /engine core dead/);
    exporter.reset();
    backend.alive = false;
    const dead = await app.inject({ method: 'POST', url: '/v1/completions', payload: { prompt: 'x', max_tokens: 5 } });
    assert.equal(dead.statusCode, 503);
    await new Promise((r) => setImmediate(r));
    const span = exporter.getFinishedSpans().find((s) => s.name === 'POST /v1/completions')!;
    assert.equal(span.attributes['http.response.status_code'], 503);
    assert.equal(span.status.code, SpanStatusCode.ERROR);
    assert.ok(
      span.events.some((e) => e.name === 'exception'),
      'the exception is recorded',
    );
  } finally {
    await app.close();
  }
});

test('a request refused at submit (after its record exists) still ends its span, with the status', async () => {
  const { exporter, tracer } = tracing();
  const backend = new FakeBackend({ ranks: [0] });
  backend.submitError = Object.assign(new Error('the queue is full'), { kind: 'overloaded' });
  const { app } = await makeApp({ backend, tracer });
  try {
    const res = await app.inject({ method: 'POST', url: '/v1/completions', payload: { prompt: 'x', max_tokens: 5 } });
    assert.ok(res.statusCode >= 400, String(res.statusCode));
    await new Promise((r) => setImmediate(r));
    const span = exporter.getFinishedSpans().find((s) => s.name === 'POST /v1/completions');
    assert.ok(span !== undefined, 'the request span was exported');
    assert.equal(span.attributes['http.response.status_code'], res.statusCode);
    // Probes with a query string get no span either.
    exporter.reset();
    await app.inject({ method: 'GET', url: '/health?verbose=1' });
    await app.inject({ method: 'GET', url: '/metrics?x=1' });
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(
      exporter.getFinishedSpans().map((s) => s.name),
      [],
    );
  } finally {
    await app.close();
  }
});

test('an unsampled request: headers only to a vLLM group (flags 00); its log lines carry both ids', async () => {
  const unsampled = '5bf92f3577b34da6a3ce929d0e0e4737';
  for (const engine of ['tokenspeed', 'vllm'] as const) {
    const { exporter, tracer } = tracing();
    const { logger, records } = captureLogs('debug');
    const { app, sent } = await oneRankApp(engine, tracer, logger);
    try {
      const res = await app.inject({
        method: 'POST',
        url: '/v1/completions',
        headers: { traceparent: `00-${unsampled}-00f067aa0ba902b7-00`, 'x-request-id': 'req-unsampled' },
        payload: { prompt: 'hello', max_tokens: 1 },
      });
      assert.equal(res.statusCode, 200);
      assert.deepEqual(exporter.getFinishedSpans(), [], engine);
      if (engine === 'vllm') {
        assert.equal(sent.length, 1);
        assert.match(sent[0]?.traceparent ?? '', new RegExp(`^00-${unsampled}-[0-9a-f]{16}-00$`));
      } else assert.deepEqual(sent, [undefined], 'TokenSpeed has no field for them');
      const lines = records.filter((r) => r['requestId'] === 'req-unsampled');
      assert.ok(lines.length > 0, JSON.stringify(records));
      for (const line of lines) assert.equal(line['traceId'], unsampled, JSON.stringify(line));
    } finally {
      await app.close();
    }
  }
});

test('new roots at 1/2: a left-out one gets a span only when an engine asks; log lines, vLLM headers and export agree', async () => {
  const { exporter, ids, bound, tracer } = rootSampling(0.5);
  let spanIdsMade = 0;
  const generateSpanId = ids.generateSpanId.bind(ids);
  ids.generateSpanId = () => (spanIdsMade++, generateSpanId());
  // TokenSpeed at `info`: each request's `request finished` line carries its trace id, and nothing asks for a left-out
  // root's span. vLLM at `debug`: lines, and headers that need a span id.
  const cases = [
    { engine: 'tokenspeed', level: 'info' },
    { engine: 'vllm', level: 'debug' },
  ] as const;
  for (const { engine, level } of cases) {
    const { logger, records } = captureLogs(level);
    const { app, sent } = await oneRankApp(engine, tracer, logger);
    try {
      exporter.reset();
      spanIdsMade = 0;
      const requestIds = Array.from({ length: 60 }, (_, i) => `${engine}-${level}-${i}`);
      const headersOf = new Map<string, Array<Record<string, string> | undefined>>();
      for (const id of requestIds) {
        sent.length = 0;
        const res = await app.inject({
          method: 'POST',
          url: '/v1/completions',
          headers: { 'x-request-id': id },
          payload: { prompt: 'hello', max_tokens: 1 },
        });
        assert.equal(res.statusCode, 200);
        headersOf.set(id, [...sent]);
      }
      const spans = exporter.getFinishedSpans();
      const keptIds = new Set(
        spans.filter((s) => s.name === 'POST /v1/completions').map((s) => s.spanContext().traceId),
      );
      // Binomial(60, 1/2) outside 10..50 has probability below 1e-7.
      assert.ok(keptIds.size >= 10 && keptIds.size <= 50, `${keptIds.size} of 60 kept`);
      for (const id of keptIds) assert.ok(traceIdWord(id) < bound, id);
      const leftOut = 60 - keptIds.size;
      assert.equal(spanIdsMade, spans.length + (engine === 'vllm' ? leftOut : 0), `${engine} at ${level}: span ids`);
      const traceIds = new Set<string>();
      for (const id of requestIds) {
        const lines = records.filter((r) => r['requestId'] === id);
        assert.ok(lines.length > 0, `${id} logged`);
        const traceId = lines[0]!['traceId'] as string;
        assert.match(traceId, /^[0-9a-f]{32}$/);
        for (const line of lines) assert.equal(line['traceId'], traceId, JSON.stringify(line));
        traceIds.add(traceId);
        const kept = keptIds.has(traceId);
        assert.equal(traceIdWord(traceId) < bound, kept, `${id}: the sampling word decides`);
        const headers = headersOf.get(id)!;
        assert.equal(headers.length, 1, `${id} reached the rank once`);
        // A sampled request's headers go to any engine (its engine-client spans join them); a left-out one's to vLLM only.
        if (engine === 'tokenspeed' && !kept) assert.equal(headers[0], undefined, 'TokenSpeed has no field for them');
        else
          assert.match(headers[0]?.traceparent ?? '', new RegExp(`^00-${traceId}-[0-9a-f]{16}-0${kept ? 1 : 0}$`), id);
      }
      assert.equal(traceIds.size, 60, 'one trace per request');
    } finally {
      await app.close();
    }
  }
});

test("the trace id joins a logger's own bindings and mixin", async () => {
  const { tracer } = tracing();
  const lines: Array<Record<string, unknown>> = [];
  const logger = pino(
    { level: 'debug', mixin: () => ({ role: 'front' }) },
    { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) },
  ).child({ component: 'http' });
  const backend = new FakeBackend({ ranks: [0] });
  backend.onSubmit = (s) => s.stream.pushAll([9707], 'length');
  const { app } = await makeApp({ backend, tracer, logger });
  try {
    const traceId = '0af7651916cd43dd8448eb211c80319c';
    const headers = { traceparent: `00-${traceId}-b7ad6b7169203331-01`, 'x-request-id': 'joined' };
    const res = await app.inject({
      method: 'POST',
      url: '/v1/completions',
      headers,
      payload: { prompt: 'hello', max_tokens: 1 },
    });
    assert.equal(res.statusCode, 200);
    const own = lines.filter((l) => l['requestId'] === 'joined');
    assert.ok(own.length >= 2, JSON.stringify(lines)); // the submit (debug) and `request finished` lines
    for (const line of own)
      assert.deepEqual(
        [line['traceId'], line['role'], line['component']],
        [traceId, 'front', 'http'],
        JSON.stringify(line),
      );
    // Lines not about a request keep the logger's own fields and get no trace id.
    logger.info('plain');
    assert.deepEqual([lines.at(-1)!['role'], 'traceId' in lines.at(-1)!], ['front', false]);
  } finally {
    await app.close();
  }
});

test('a URL fastify refuses before the hooks ends its span (400) and logs its trace id; a client that leaves unanswered is 499', async () => {
  const { exporter, tracer } = tracing();
  const { logger, records } = captureLogs('info');
  const { app, port } = await listenApp({ tracer, logger });
  try {
    const traceId = 'fffffffffffffffffffffffffffffc24';
    const res = await app.inject({
      method: 'GET',
      url: '/v1/%zz',
      headers: { traceparent: `00-${traceId}-b7ad6b7169203331-01` },
    });
    assert.equal(res.statusCode, 400);
    const bad = exporter.getFinishedSpans().find((s) => s.spanContext().traceId === traceId);
    assert.ok(bad !== undefined, 'the refused request span was exported');
    assert.equal(bad.name, 'GET unknown route');
    assert.equal(bad.attributes['http.response.status_code'], 400);
    const refusal = records.filter((r) => r['traceId'] === traceId);
    assert.equal(refusal.length, 1, JSON.stringify(records));
    assert.equal(refusal[0]!['status'], 400, JSON.stringify(refusal[0]));

    // A body that never completes: the client closes with 10 of 100 bytes sent, and no response is written.
    exporter.reset();
    const socket = connect(port, '127.0.0.1');
    await once(socket, 'connect');
    // fastify's own 'request' listener (routing, the span, the hooks) runs before this one.
    const received = once(app.server, 'request');
    socket.write(
      'POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"prompt":',
    );
    await received;
    socket.destroy();
    await waitFor(
      () => exporter.getFinishedSpans().some((s) => s.name === 'POST /v1/completions'),
      'the left request span',
    );
    const left = exporter.getFinishedSpans().find((s) => s.name === 'POST /v1/completions')!;
    assert.equal(left.attributes['http.response.status_code'], 499);
  } finally {
    await app.close();
  }
});
