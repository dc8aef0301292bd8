/**
 * The vLLM-compatible series of /metrics (issue #13 part 1), read with a Prometheus text parser
 * (parse-prometheus-text-format): every name, type and label the Gateway API Inference Extension's model-server
 * protocol and vLLM's own /metrics define, and the "one model server" aggregation over the gateway's ranks.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import parsePrometheus, { type ParsedFamily } from 'parse-prometheus-text-format';
import type { BackendGroup } from '../../src/server/backend.js';
import { vllmAggregate } from '../../src/server/vllm-aggregate.js';
import { FakeBackend, rankState } from './fake-backend.js';
import { makeApp } from './helpers.js';

/** Name → [type, label names of its samples] of every vLLM series the gateway exports. */
const VLLM_SERIES: Record<string, [ParsedFamily['type'], string[]]> = {
  'vllm:num_requests_running': ['GAUGE', ['model_name']],
  'vllm:num_requests_waiting': ['GAUGE', ['model_name']],
  'vllm:kv_cache_usage_perc': ['GAUGE', ['model_name']],
  'vllm:gpu_cache_usage_perc': ['GAUGE', ['model_name']],
  'vllm:prompt_tokens_total': ['COUNTER', ['model_name']],
  'vllm:generation_tokens_total': ['COUNTER', ['model_name']],
  'vllm:request_success_total': ['COUNTER', ['model_name', 'finished_reason']],
  'vllm:time_to_first_token_seconds': ['HISTOGRAM', ['model_name']],
  'vllm:e2e_request_latency_seconds': ['HISTOGRAM', ['model_name']],
  'vllm:inter_token_latency_seconds': ['HISTOGRAM', ['model_name']],
  'vllm:request_queue_time_seconds': ['HISTOGRAM', ['model_name']],
  'vllm:prefix_cache_queries_total': ['COUNTER', ['model_name']],
  'vllm:prefix_cache_hits_total': ['COUNTER', ['model_name']],
};

/**
 * The parsed families, plus the label sets of every histogram sample. parse-prometheus-text-format folds a
 * histogram's samples into one prom2json bucket map and keeps labels only for unlabelled histograms, so the sample
 * lines of each histogram family are parsed a second time, by the same parser, as plain samples.
 */
function parse(text: string): {
  families: Map<string, ParsedFamily>;
  histogramSamples: Map<string, Array<{ name: string; labels: Record<string, string> }>>;
} {
  const families = new Map(parsePrometheus(text).map((f) => [f.name, f]));
  const histogramSamples = new Map<string, Array<{ name: string; labels: Record<string, string> }>>();
  for (const [name, f] of families) {
    if (f.type !== 'HISTOGRAM') continue;
    const lines = text
      .split('\n')
      .filter((l) => l.startsWith(`${name}_bucket{`) || l.startsWith(`${name}_sum`) || l.startsWith(`${name}_count`));
    const samples = parsePrometheus(lines.join('\n') + '\n').flatMap((f) =>
      f.metrics.map((s) => ({ name: f.name, labels: s.labels ?? {} })),
    );
    histogramSamples.set(name, samples);
  }
  return { families, histogramSamples };
}

function value(f: ParsedFamily | undefined, labels: Record<string, string>): number {
  assert.ok(f, 'family present');
  const m = f.metrics.find((s) => JSON.stringify(s.labels) === JSON.stringify(labels));
  assert.ok(m, `${f.name} has a sample ${JSON.stringify(labels)}: ${JSON.stringify(f.metrics)}`);
  return Number(m.value);
}

test('vllm:* series: names, types and labels as vLLM; one series per model; counters and histograms fill in', async () => {
  const tokenspeed = new FakeBackend({ ranks: [0, 1, 2] });
  tokenspeed.rankStatesValue = [
    // TokenSpeed's running count includes its waiting queue: 5 running of which 2 wait → 3 running in vLLM's sense.
    rankState(0, {
      inFlight: 5,
      load: { numRunning: 5, numWaiting: 2, kvCacheUsage: 0.5 },
      dispatchedPinned: 0,
      dispatchedUnpinned: 9,
      clampEvents: 0,
    }),
    rankState(1, {
      inFlight: 1,
      load: { numRunning: 1, numWaiting: 0, kvCacheUsage: 0.1 },
      dispatchedPinned: 0,
      dispatchedUnpinned: 3,
      clampEvents: 1,
    }),
    rankState(2, { inFlight: 0, load: null, dispatchedPinned: 0, dispatchedUnpinned: 0, clampEvents: 0 }),
  ];
  const vllm = new FakeBackend({ ranks: [0] });
  vllm.rankStatesValue = [
    rankState(0, {
      inFlight: 4,
      load: { numRunning: 3, numWaiting: 1, kvCacheUsage: 0.3 },
      dispatchedPinned: 0,
      dispatchedUnpinned: 4,
      clampEvents: 0,
    }),
  ];
  const dead = new FakeBackend({ ranks: [0] });
  dead.alive = false;
  dead.rankStatesValue = [
    rankState(0, {
      inFlight: 0,
      load: { numRunning: 50, numWaiting: 50, kvCacheUsage: 1 },
      dispatchedPinned: 0,
      dispatchedUnpinned: 1,
      clampEvents: 0,
    }),
  ];
  tokenspeed.onSubmit = (s) => s.stream.pushAll([9707, 11, 1879], 'length');
  vllm.onSubmit = (s) => s.stream.pushAll([9707, 11, 1879], 'length');
  (vllm as unknown as { cacheConfig: unknown }).cacheConfig = { numGpuBlocks: 4096, blockSize: 16 };
  const groups: BackendGroup[] = [
    { worker: 'ipc:///tmp/fake/ts', name: 'ts', engine: 'tokenspeed', backend: tokenspeed },
    { worker: 'ipc:///tmp/fake/vl', name: 'vl', engine: 'vllm', backend: vllm },
    { worker: 'ipc:///tmp/fake/dead', name: 'dead', engine: 'tokenspeed', backend: dead },
  ];
  const { app } = await makeApp({ groups, servedModelNames: ['qwen3', 'Qwen/Qwen3-8B'] });
  try {
    const before = parse((await app.inject({ method: 'GET', url: '/metrics' })).body);
    // Every series exists from the first scrape, as vLLM creates its series at start-up.
    for (const [name, [type, labels]] of Object.entries(VLLM_SERIES)) {
      const f = before.families.get(name);
      assert.ok(f, `${name} is exported`);
      assert.equal(f.type, type, name);
      assert.ok(f.help.length > 0, `${name} has a HELP line`);
      if (type === 'HISTOGRAM') {
        const samples = before.histogramSamples.get(name)!;
        assert.ok(
          samples.some((s) => s.name === `${name}_bucket` && s.labels.le === '+Inf'),
          `${name} has a +Inf bucket`,
        );
        assert.ok(
          samples.some((s) => s.name === `${name}_count`) && samples.some((s) => s.name === `${name}_sum`),
          `${name} _count and _sum`,
        );
        for (const s of samples) {
          const names = Object.keys(s.labels)
            .filter((l) => l !== 'le')
            .sort();
          assert.deepEqual(names, labels, `${s.name} labels`);
          assert.equal(s.labels.model_name, 'qwen3');
        }
      } else {
        for (const s of f.metrics) {
          assert.deepEqual(Object.keys(s.labels ?? {}).sort(), [...labels].sort(), `${name} labels`);
          assert.equal(s.labels?.model_name, 'qwen3', 'model_name is the first served model name');
        }
      }
    }
    // One model server: one sample per gauge, the aggregate over the live ranks (the dead group is left out).
    for (const g of [
      'vllm:num_requests_running',
      'vllm:num_requests_waiting',
      'vllm:kv_cache_usage_perc',
      'vllm:gpu_cache_usage_perc',
    ]) {
      assert.equal(before.families.get(g)!.metrics.length, 1, `${g} has one series`);
    }
    const m = { model_name: 'qwen3' };
    assert.equal(value(before.families.get('vllm:num_requests_running'), m), 3 + 1 + 3);
    assert.equal(value(before.families.get('vllm:num_requests_waiting'), m), 2 + 0 + 1);
    assert.ok(
      Math.abs(value(before.families.get('vllm:kv_cache_usage_perc'), m) - (0.5 + 0.1 + 0.3) / 3) < 1e-12,
      'mean KV usage',
    );
    assert.equal(
      value(before.families.get('vllm:gpu_cache_usage_perc'), m),
      value(before.families.get('vllm:kv_cache_usage_perc'), m),
    );
    assert.deepEqual(
      before.families
        .get('vllm:request_success_total')!
        .metrics.map((s) => s.labels?.finished_reason)
        .sort(),
      ['abort', 'length', 'stop'],
    );

    // Two finished requests (one per group; the model may be any served name), one refused before generation.
    for (const model of ['qwen3', 'Qwen/Qwen3-8B']) {
      const res = await app.inject({
        method: 'POST',
        url: '/v1/completions',
        payload: { model, prompt: 'hello there', max_tokens: 3 },
      });
      assert.equal(res.statusCode, 200, res.body);
      assert.equal(res.json().model, 'qwen3', 'responses report the first served name');
    }
    assert.equal(
      (await app.inject({ method: 'POST', url: '/v1/completions', payload: { model: 'other', prompt: 'x' } }))
        .statusCode,
      404,
    );

    const after = parse((await app.inject({ method: 'GET', url: '/metrics' })).body);
    const promptLen = 2; // "hello there" in Qwen3's tokenizer
    assert.equal(value(after.families.get('vllm:prompt_tokens_total'), m), 2 * promptLen);
    assert.equal(value(after.families.get('vllm:generation_tokens_total'), m), 2 * 3);
    assert.equal(value(after.families.get('vllm:request_success_total'), { ...m, finished_reason: 'length' }), 2);
    assert.equal(value(after.families.get('vllm:request_success_total'), { ...m, finished_reason: 'stop' }), 0);
    // Each finished request's prompt was a prefix-cache query; the queue time is the gateway's placement wait.
    assert.equal(value(after.families.get('vllm:prefix_cache_queries_total'), m), 2 * promptLen);
    assert.ok(value(after.families.get('vllm:prefix_cache_hits_total'), m) <= 2 * promptLen);
    // The KV-cache configuration of the group whose ranks reported one (vLLM's info gauge, value 1).
    assert.deepEqual(after.families.get('vllm:cache_config_info')?.metrics, [
      { labels: { num_gpu_blocks: '4096', block_size: '16', enable_prefix_caching: 'True' }, value: '1' },
    ]);
    const ttftCount = after.histogramSamples
      .get('vllm:time_to_first_token_seconds')!
      .find((s) => s.name.endsWith('_count'));
    assert.ok(ttftCount, 'a TTFT _count sample');
    const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    assert.ok(
      text.split('\n').includes('vllm:time_to_first_token_seconds_count{model_name="qwen3"} 2'),
      'two TTFT samples',
    );
    assert.ok(
      text.split('\n').includes('vllm:e2e_request_latency_seconds_count{model_name="qwen3"} 2'),
      'two e2e samples',
    );
    assert.ok(
      text.split('\n').includes('vllm:request_queue_time_seconds_count{model_name="qwen3"} 2'),
      'two queue-time samples',
    );
    assert.ok(text.includes('vllm:inter_token_latency_seconds_bucket{le="80",model_name="qwen3"}'), 'vLLM ITL buckets');
    // vLLM's buckets.
    assert.ok(
      text.includes('vllm:time_to_first_token_seconds_bucket{le="2560",model_name="qwen3"}'),
      'vLLM TTFT buckets',
    );
    assert.ok(
      text.includes('vllm:e2e_request_latency_seconds_bucket{le="7680",model_name="qwen3"}'),
      'vLLM e2e buckets',
    );
    // The gateway's own series keep their names beside the vLLM ones.
    assert.ok(after.families.has('model_gateway_rank_inflight_requests'), 'model_gateway_* series stay');
  } finally {
    await app.close();
  }
});

test('vllmAggregate: an idle gateway and one without reports read 0; a rank in state dead or joining is left out', () => {
  const rank = (
    engineIndex: number,
    load: { numRunning: number; numWaiting: number; kvCacheUsage: number } | null,
    state?: 'dead' | 'joining',
  ) => rankState(engineIndex, { load, ...(state ? { state } : {}) });
  const group = (engine: string, ranks: ReturnType<typeof rank>[], alive = true) => ({
    engine,
    backend: { rankStates: () => ranks, isAlive: () => alive },
  });
  assert.deepEqual(vllmAggregate([group('tokenspeed', [rank(0, null), rank(1, null)])]), {
    running: 0,
    waiting: 0,
    kvCacheUsage: 0,
    ranks: 2,
    inFlight: 0,
  });
  const agg = vllmAggregate([
    group('vllm', [
      rank(0, { numRunning: 2, numWaiting: 1, kvCacheUsage: 0.2 }),
      rank(1, { numRunning: 9, numWaiting: 9, kvCacheUsage: 0.9 }, 'dead'),
    ]),
    group('tokenspeed', [rank(0, { numRunning: 1, numWaiting: 4, kvCacheUsage: 0.4 }), rank(1, null, 'joining')]),
  ]);
  // TokenSpeed: running never goes below 0 when its report counts more waiting than running (a stale tail).
  assert.deepEqual(agg, { running: 2, waiting: 5, kvCacheUsage: 0.30000000000000004, ranks: 2, inFlight: 0 });
});
