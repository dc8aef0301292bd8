/**
 * Tracing end to end (issue 32 part 1): a gateway with `--otlp-traces-endpoint` over simulated vLLM ranks that trace
 * too, all exporting to an OTLP receiver in this file (test/helpers/otlp-receiver.ts decodes the exporters' protobuf).
 * Each request is one trace: the gateway's SERVER span (a child of the client's `traceparent` when it sent one) with
 * its `tokenize` and `route` children and its `first_token` event, and the rank's span, which is a child of the
 * gateway's span because the rank got its headers as `trace_headers`. In both modes: with `--workers N` the route span
 * comes from the router, the request span from a front, and they share the trace. Log lines about a request carry
 * its request id and trace id.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { waitFor } from '../helpers/async.js';
import { captureLogs, type LogRecord } from '../helpers/logs.js';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { DEFAULT_SIM_ARGS, startTestGateway, type TestGateway } from '../helpers/test-gateway.js';

const MODEL = 'sim-tracing';
const TIMEOUT = { timeout: 60_000 };
// Spans leave in batches: a short delay keeps the test quick (inherited by the child gateway and the ranks).
process.env['OTEL_BSP_SCHEDULE_DELAY'] = '50';

const SERVER = 2; // OTLP SpanKind SPAN_KIND_SERVER

describe('OpenTelemetry traces from the gateway into the vLLM ranks', () => {
  let receiver: OtlpReceiver;
  let gateway: TestGateway;
  const captured = captureLogs('info');
  const logs = (): LogRecord[] => (gateway.workers > 1 ? gateway.logs : captured.records);

  before(async () => {
    receiver = await startOtlpReceiver();
    gateway = await startTestGateway({
      logger: captured.logger,
      childLogLevel: 'info',
      modelId: MODEL,
      engine: 'vllm',
      sim: 2,
      simArgs: [...DEFAULT_SIM_ARGS, '--otlp-traces-endpoint', receiver.url],
      otlpTracesEndpoint: receiver.url,
    });
  });
  after(async () => {
    await gateway?.close();
    await receiver?.close();
  });

  const inTrace = (traceId: string): ReceivedSpan[] => receiver.spans.filter((s) => s.traceId === traceId);
  /** The gateway's request spans (SERVER spans of the gateway or a front). */
  const requestSpans = (): ReceivedSpan[] =>
    receiver.spans.filter((s) => s.kind === SERVER && s.resource['service.name'] === 'model-gateway');
  /** Wait until trace `traceId` holds a span of each name in `names`. */
  const waitForTrace = async (traceId: string, names: string[]): Promise<ReceivedSpan[]> => {
    await waitFor(
      () => names.every((n) => inTrace(traceId).some((s) => s.name === n)),
      `spans ${names.join(', ')} of trace ${traceId} (have ${inTrace(traceId)
        .map((s) => s.name)
        .join(', ')})`,
      20_000,
    );
    return inTrace(traceId);
  };

  test(
    'a client traceparent: the request span, tokenize, route, first token, and the rank span join its trace',
    TIMEOUT,
    async () => {
      const traceId = '0af7651916cd43dd8448eb211c80319c';
      const parent = 'b7ad6b7169203331';
      const res = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          traceparent: `00-${traceId}-${parent}-01`,
          'x-request-id': 'trace-test-1',
        },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8 }),
      });
      assert.equal(res.status, 200);
      const spans = await waitForTrace(traceId, [
        'POST /v1/chat/completions',
        'tokenize',
        'route',
        'sim_engine_request',
      ]);
      const request = spans.find((s) => s.name === 'POST /v1/chat/completions')!;
      assert.equal(request.parentSpanId, parent, "the client's span is the parent");
      assert.equal(request.kind, SERVER);
      assert.equal(request.attributes['http.response.status_code'], 200);
      assert.equal(request.attributes['http.route'], '/v1/chat/completions');
      assert.equal(request.attributes['model_gateway.group'], 'vllm-0');
      assert.ok((request.attributes['gen_ai.usage.output_tokens'] as number) > 0);
      assert.deepEqual(request.attributes['gen_ai.response.finish_reasons'], ['length']);
      const first = request.events.find((e) => e.name === 'first_token');
      assert.ok(first !== undefined && (first.attributes['model_gateway.ttft_ms'] as number) >= 0, 'first_token event');
      assert.equal(request.resource['model_gateway.role'], gateway.workers > 1 ? 'front' : 'gateway');

      const tokenize = spans.find((s) => s.name === 'tokenize')!;
      assert.equal(tokenize.parentSpanId, request.spanId);
      assert.ok((tokenize.attributes['gen_ai.usage.input_tokens'] as number) > 0);

      const route = spans.find((s) => s.name === 'route')!;
      assert.equal(route.parentSpanId, request.spanId);
      assert.equal(route.attributes['model_gateway.group'], 'vllm-0');
      assert.equal(route.attributes['model_gateway.policy'], 'load');
      assert.equal(route.attributes['model_gateway.candidates'], 2);
      assert.equal(route.attributes['model_gateway.pinned'], false);
      assert.ok([0, 1].includes(route.attributes['model_gateway.dp_rank'] as number));
      assert.equal(typeof route.attributes['model_gateway.rank.in_flight'], 'number');
      // With --workers N the decision is the router's: another process, the same trace.
      assert.equal(route.resource['model_gateway.role'], gateway.workers > 1 ? 'router' : 'gateway');

      // The rank got the request span's headers as trace_headers: its span is the request span's child.
      const engine = spans.find((s) => s.name === 'sim_engine_request')!;
      assert.equal(engine.parentSpanId, request.spanId);
      assert.equal(engine.resource['model_gateway.role'], 'engine');
      assert.equal(engine.attributes['model_gateway.dp_rank'], route.attributes['model_gateway.dp_rank']);
      assert.equal(engine.attributes['gen_ai.usage.output_tokens'], request.attributes['gen_ai.usage.output_tokens']);

      // Every line about the request names it by the client's id and the trace.
      await waitFor(
        () => logs().some((l) => l.msg === 'request finished' && l['requestId'] === 'trace-test-1'),
        `log ${JSON.stringify(logs().filter((l) => l.msg === 'request finished'))}`,
      );
      const line = logs().find((l) => l.msg === 'request finished' && l['requestId'] === 'trace-test-1')!;
      assert.equal(line['traceId'], traceId);
      assert.deepEqual(receiver.errors, []);
    },
  );

  test('without a traceparent every request is a trace of its own, streamed or not', TIMEOUT, async () => {
    const before = new Set(requestSpans().map((s) => s.traceId));
    const send = (stream: boolean) =>
      fetch(`${gateway.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, prompt: 'Once', max_tokens: 6, stream }),
      }).then(async (r) => {
        assert.equal(r.status, 200);
        await r.text();
      });
    await Promise.all([send(false), send(true), send(false), send(true)]);
    await waitFor(
      () => requestSpans().filter((s) => !before.has(s.traceId) && s.name === 'POST /v1/completions').length === 4,
      'four request spans',
      20_000,
    );
    const fresh = requestSpans().filter((s) => !before.has(s.traceId) && s.name === 'POST /v1/completions');
    assert.equal(new Set(fresh.map((s) => s.traceId)).size, 4, 'four traces');
    for (const r of fresh) {
      assert.equal(r.parentSpanId, '', 'a new trace: the request span is its root');
      const spans = await waitForTrace(r.traceId, ['route', 'sim_engine_request', 'tokenize']);
      assert.equal(spans.filter((s) => s.kind === SERVER && s.resource['service.name'] === 'model-gateway').length, 1);
      assert.equal(spans.find((s) => s.name === 'sim_engine_request')!.parentSpanId, r.spanId);
    }
  });

  test(
    'refused and unknown requests have spans with their status; probes, scrapes and unsampled traces have none',
    TIMEOUT,
    async () => {
      // A caller that did not sample its trace (flags 00): the gateway follows it (parent-based sampling) and exports
      // nothing for it; the rank gets the headers and follows it too.
      const unsampled = '5bf92f3577b34da6a3ce929d0e0e4737';
      const quiet = await fetch(`${gateway.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', traceparent: `00-${unsampled}-00f067aa0ba902b7-00` },
        body: JSON.stringify({ model: MODEL, prompt: 'x', max_tokens: 2 }),
      });
      assert.equal(quiet.status, 200);
      await quiet.text();
      const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
      const headers = { 'content-type': 'application/json', traceparent: `00-${traceId}-00f067aa0ba902b7-01` };
      const bad = await fetch(`${gateway.url}/v1/completions`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ model: MODEL, prompt: 'x', top_p: 0 }),
      });
      assert.equal(bad.status, 400);
      const unknown = await fetch(`${gateway.url}/v1/nothing-here`, { headers });
      assert.equal(unknown.status, 404);
      await fetch(`${gateway.url}/health`, { headers });
      await fetch(`${gateway.url}/metrics`, { headers });
      const spans = await waitForTrace(traceId, ['POST /v1/completions', 'GET unknown route']);
      assert.equal(spans.find((s) => s.name === 'POST /v1/completions')!.attributes['http.response.status_code'], 400);
      assert.equal(spans.find((s) => s.name === 'GET unknown route')!.attributes['http.response.status_code'], 404);
      assert.ok(!spans.some((s) => /health|metrics/.test(s.name)), spans.map((s) => s.name).join(', '));
      assert.deepEqual(inTrace(unsampled), [], 'nothing exported for the unsampled trace');
    },
  );
});
