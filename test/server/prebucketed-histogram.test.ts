/**
 * PrebucketedHistogram (issue 9, the ITL histogram observed per token): its scrape is exactly a prom-client
 * Histogram's after the same observations, alone and aggregated across registries (the `--workers N` fronts).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AggregatorRegistry, Histogram, Registry } from 'prom-client';
import { PrebucketedHistogram } from '../../src/server/prebucketed-histogram.js';
import { GatewayMetrics } from '../../src/server/metrics.js';

const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.1, 1];
const spec = {
  name: 'x_latency_seconds',
  help: 'A latency, seconds',
  labelNames: ['model', 'endpoint'] as const,
  buckets: BUCKETS,
};

/** A prom-client Histogram and a PrebucketedHistogram on registries of their own, fed the same samples. */
function pair() {
  const ref = new Registry();
  const ours = new Registry();
  const histogram = new Histogram({ ...spec, labelNames: [...spec.labelNames], registers: [ref] });
  const pre = new PrebucketedHistogram({ ...spec, registers: [ours] });
  return {
    ref,
    ours,
    pre,
    observe(labels: { model: string; endpoint: string }, value: number, times = 1) {
      const child = histogram.labels(labels);
      for (let i = 0; i < times; i++) child.observe(value);
      pre.child(labels).observe(value, times);
    },
  };
}

test('the exposition text equals prom-client Histogram’s for the same observations (order, buckets, +Inf, sum bits)', async () => {
  const p = pair();
  assert.equal(await p.ours.metrics(), await p.ref.metrics(), 'no samples: HELP and TYPE only');
  const a = { model: 'm', endpoint: '/v1/chat/completions' };
  const b = { model: 'm', endpoint: '/v1/completions' };
  // Values on bounds, between them, above the last one, and sums whose float result depends on the addition order.
  p.observe(b, 0.1);
  p.observe(a, 0.0005);
  p.observe(a, 0.0007, 3);
  p.observe(a, 0.1 + 0.2, 7);
  p.observe(a, 2.5);
  p.observe(b, 0.001, 50);
  p.observe(b, 1e-7, 0); // zero samples: nothing
  const text = await p.ours.metrics();
  assert.equal(text, await p.ref.metrics());
  assert.ok(
    text.indexOf('endpoint="/v1/completions"') < text.indexOf('endpoint="/v1/chat/completions"'),
    'first observed first',
  );
  assert.ok(text.includes('x_latency_seconds_bucket{le="+Inf",model="m",endpoint="/v1/chat/completions"} 12'));
});

test('aggregated across registries (AggregatorRegistry.aggregate over getMetricsAsJSON) it sums like prom-client’s', async () => {
  const fronts = [pair(), pair()];
  fronts[0]!.observe({ model: 'm', endpoint: 'e' }, 0.003, 4);
  fronts[1]!.observe({ model: 'm', endpoint: 'e' }, 0.02, 2);
  fronts[1]!.observe({ model: 'm', endpoint: 'f' }, 0.5);
  const merged = async (pick: 'ref' | 'ours') =>
    AggregatorRegistry.aggregate(await Promise.all(fronts.map((f) => f[pick].getMetricsAsJSON()))).metrics();
  const ours = await merged('ours');
  assert.equal(ours, await merged('ref'));
  assert.ok(ours.includes('x_latency_seconds_count{model="m",endpoint="e"} 6'));
});

test('reset empties the scrape; a child handed out before keeps counting and lists again', async () => {
  const p = pair();
  const child = p.pre.child({ model: 'm', endpoint: 'e' });
  child.observe(0.004);
  p.ours.resetMetrics();
  assert.ok(!(await p.ours.metrics()).includes('x_latency_seconds_count'));
  child.observe(0.004, 2);
  assert.ok((await p.ours.metrics()).includes('x_latency_seconds_count{model="m",endpoint="e"} 2'));
});

test('bad labels and non-finite values throw, as prom-client does', () => {
  const p = pair();
  assert.throws(() => p.pre.child({ model: 'm' } as never), /labels must be exactly model, endpoint/);
  assert.throws(() => p.pre.child({ model: 'm', endpoint: 'e', extra: 'x' } as never), /labels must be exactly/);
  assert.throws(() => p.pre.child({ model: 'm', endpoint: 'e' }).observe(Number.NaN), TypeError);
});

test('GatewayMetrics renders model_gateway_inter_token_latency_seconds as prom-client’s Histogram would', async () => {
  const metrics = new GatewayMetrics({ modelId: 'm' });
  const ref = new Registry();
  const histogram = new Histogram({
    name: 'model_gateway_inter_token_latency_seconds',
    help: 'Inter-token latency (ITL) per generated token after the first, seconds',
    labelNames: ['model', 'endpoint'],
    buckets: [
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.2, 0.4, 0.75, 1, 2.5, 5,
    ],
    registers: [ref],
  });
  const samples: Array<[string, number, number]> = [
    ['/v1/chat/completions', 0.012, 1],
    ['/v1/completions', 0.0004, 50],
    ['/v1/chat/completions', 7, 2],
  ];
  for (const [endpoint, seconds, tokens] of samples) {
    metrics.observeItl(endpoint, seconds, tokens);
    for (let i = 0; i < tokens; i++) histogram.observe({ model: 'm', endpoint }, seconds);
  }
  const block = (text: string) =>
    text.split('\n\n').find((b) => b.includes('# HELP model_gateway_inter_token_latency_seconds '));
  assert.equal(block((await metrics.render()).body), (await ref.metrics()).trimEnd());
  // …and it is the pre-bucketed metric, not a prom-client Histogram (whose text would be the same).
  assert.ok(
    metrics.registry.getSingleMetric('model_gateway_inter_token_latency_seconds') instanceof PrebucketedHistogram,
  );
  // The front role (`--workers N`) records it too; the engine role does not.
  assert.ok(
    (await new GatewayMetrics({ modelId: 'm', role: 'http' }).render()).body.includes(
      '# TYPE model_gateway_inter_token_latency_seconds histogram',
    ),
  );
  assert.ok(
    !(await new GatewayMetrics({ modelId: 'm', role: 'engine' }).render()).body.includes(
      'model_gateway_inter_token_latency_seconds',
    ),
  );
});

test('zero lists a series with zero counts before its first sample, as prom-client’s Histogram.zero', async () => {
  const p = pair();
  const labels = { model: 'm', endpoint: 'e' };
  p.pre.zero(labels);
  (p.ref.getSingleMetric(spec.name) as Histogram<'model' | 'endpoint'>).zero(labels);
  assert.equal(await p.ours.metrics(), await p.ref.metrics());
  assert.ok((await p.ours.metrics()).includes('x_latency_seconds_count{model="m",endpoint="e"} 0'));
  p.observe(labels, 0.002, 2);
  assert.equal(await p.ours.metrics(), await p.ref.metrics());
});

test('GatewayMetrics renders the TTFT and E2E histograms (model_gateway_* and vllm:*) as prom-client’s Histograms would', async () => {
  const metrics = new GatewayMetrics({ modelId: 'm' });
  const ref = new Registry();
  const ref4 = (name: string, help: string, labelNames: string[], buckets: number[]) =>
    new Histogram({ name, help, labelNames, buckets, registers: [ref] });
  const latency = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];
  const ttft = ref4(
    'model_gateway_time_to_first_token_seconds',
    'Time from request arrival to the first generated token (TTFT), seconds',
    ['model', 'endpoint'],
    latency,
  );
  const e2e = ref4(
    'model_gateway_e2e_request_latency_seconds',
    'Time from request arrival to its terminal outcome, seconds',
    ['model', 'endpoint'],
    [0.01, 0.05, 0.1, 0.3, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960],
  );
  const vllmTtft = ref4(
    'vllm:time_to_first_token_seconds',
    'Histogram of time to first token in seconds',
    ['model_name'],
    [...latency, 160, 640, 2560],
  );
  const vllmE2e = ref4(
    'vllm:e2e_request_latency_seconds',
    'Histogram of e2e request latency in seconds',
    ['model_name'],
    [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680],
  );
  vllmTtft.zero({ model_name: 'm' });
  vllmE2e.zero({ model_name: 'm' });
  const names = [
    'model_gateway_time_to_first_token_seconds',
    'model_gateway_e2e_request_latency_seconds',
    'vllm:time_to_first_token_seconds',
    'vllm:e2e_request_latency_seconds',
  ];
  const block = (text: string, name: string) =>
    text
      .split('\n\n')
      .find((b) => b.includes(`# HELP ${name} `))
      ?.trimEnd();
  const same = async () => {
    const ours = (await metrics.render()).body;
    const theirs = await ref.metrics();
    for (const name of names) assert.equal(block(ours, name), block(theirs, name), name);
  };
  await same(); // before any sample: the vLLM series at zero, the others absent
  for (const [endpoint, seconds] of [
    ['/v1/completions', 0.03],
    ['/v1/chat/completions', 0.0004],
    ['/v1/completions', 0.1 + 0.2],
    ['/v1/chat/completions', 3000],
  ] as const) {
    metrics.observeTtft(endpoint, seconds);
    metrics.observeE2e(endpoint, seconds * 2);
    ttft.observe({ model: 'm', endpoint }, seconds);
    vllmTtft.observe({ model_name: 'm' }, seconds);
    e2e.observe({ model: 'm', endpoint }, seconds * 2);
    vllmE2e.observe({ model_name: 'm' }, seconds * 2);
  }
  await same();
  for (const name of names) assert.ok(metrics.registry.getSingleMetric(name) instanceof PrebucketedHistogram, name);
});
