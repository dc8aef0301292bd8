/**
 * The vLLM-compatible series of a gateway app (issue #13 part 1): the names, types, units and histogram buckets of
 * vLLM's own `/metrics` (its Prometheus logger, vllm/v1/metrics/loggers.py), one series per served model (label
 * `model_name` = the first served model name, as vLLM), so a cluster router that scrapes vLLM servers (the Gateway
 * API Inference Extension's model-server protocol, llm-d's endpoint picker) can treat the whole gateway as one model
 * server: see `vllmAggregate` and docs/multi-node.md.
 *
 * The gauges are the aggregate over the live ranks, read at scrape time (a cluster router reads one series per
 * server; per-rank detail stays in the model_gateway_* series of metrics-engine.ts); the counters and histograms are
 * recorded by the routes through `GatewayMetrics`.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import { PrebucketedHistogram, type PrebucketedSeries } from './prebucketed-histogram.js';
import { vllmAggregate, type AggregateGroup } from './vllm-aggregate.js';

/** vLLM's `finished_reason` values of `vllm:request_success_total` (vLLM `FinishReason`: stop, length, abort). */
export const VLLM_FINISHED_REASONS = ['stop', 'length', 'abort'] as const;
export type VllmFinishedReason = (typeof VLLM_FINISHED_REASONS)[number];

/** vLLM's buckets (seconds) of `vllm:time_to_first_token_seconds` and `vllm:e2e_request_latency_seconds`. */
const VLLM_TTFT_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560,
];
const VLLM_E2E_BUCKETS = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680];
/** vLLM's buckets (seconds) of `vllm:inter_token_latency_seconds`. */
const VLLM_ITL_BUCKETS = [
  0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80,
];
/** vLLM's request-latency buckets (seconds), which its queue-time histogram uses too (`vllm:request_queue_time_seconds`). */
const VLLM_QUEUE_BUCKETS = VLLM_E2E_BUCKETS;

/** The recorded vLLM series (each with its one `model_name` label set); the routes write them per request. */
export interface VllmRecordedSeries {
  readonly promptTokens: Counter<'model_name'>;
  readonly generationTokens: Counter<'model_name'>;
  readonly requestSuccess: Counter<'model_name' | 'finished_reason'>;
  /** The one series of `vllm:time_to_first_token_seconds` (seconds). */
  readonly ttft: PrebucketedSeries;
  /** The one series of `vllm:e2e_request_latency_seconds` (seconds). */
  readonly e2e: PrebucketedSeries;
  /** The one series of `vllm:inter_token_latency_seconds` (seconds per token). */
  readonly itl: PrebucketedSeries;
  /** The one series of `vllm:request_queue_time_seconds` (seconds). */
  readonly queueTime: PrebucketedSeries;
  /** `vllm:prefix_cache_queries_total` / `_hits_total` (tokens). */
  readonly prefixQueries: Counter<'model_name'>;
  readonly prefixHits: Counter<'model_name'>;
}

/**
 * The cache configuration `vllm:cache_config_info` reports for one group (its labels; values as strings, as vLLM's
 * info gauges): what the ranks' ready responses said. Absent values are left out.
 */
export interface CacheConfigLabels {
  num_gpu_blocks?: string;
  block_size?: string;
  enable_prefix_caching?: string;
}

/**
 * Register the vLLM-compatible series: the scrape-time gauges in `registers` (engine side), the recorded counters
 * and histograms in `httpRegisters` (HTTP side), each series at zero from the first scrape as vLLM creates them at
 * start-up. `groups` gives the engine groups at scrape time. Throws Error when a registry already has one of the names.
 */
export function registerVllmSeries(opts: {
  model: string;
  registers: Registry[];
  httpRegisters: Registry[];
  groups: () => readonly AggregateGroup[];
  /** Whether LoRA is served (some group has adapters) and each rank's `--max-loras`; null/absent: no LoRA series. */
  lora?: () => { maxLoras: number } | null;
  /** The cache configuration of each group that knows one (`vllm:cache_config_info`); absent: none. */
  cacheConfig?: () => readonly CacheConfigLabels[];
}): VllmRecordedSeries {
  const { registers, httpRegisters, groups } = opts;
  const modelName = { model_name: opts.model };
  const aggregate = () => vllmAggregate(groups());
  const vllmGauge = (name: string, help: string, pick: (a: ReturnType<typeof vllmAggregate>) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ['model_name'],
      registers,
      collect() {
        this.set(modelName, pick(aggregate()));
      },
    });
  vllmGauge(
    'vllm:num_requests_running',
    'Number of requests in model execution batches (sum over the DP ranks)',
    (a) => a.running,
  );
  vllmGauge(
    'vllm:num_requests_waiting',
    'Number of requests waiting to be processed (sum over the DP ranks)',
    (a) => a.waiting,
  );
  vllmGauge(
    'vllm:kv_cache_usage_perc',
    'KV-cache usage, 1 means 100 percent usage (mean over the DP ranks)',
    (a) => a.kvCacheUsage,
  );
  // vLLM's name before 0.9, still the default KV metric of older Inference Extension endpoint pickers.
  vllmGauge(
    'vllm:gpu_cache_usage_perc',
    'GPU KV-cache usage, 1 means 100 percent usage. DEPRECATED: use vllm:kv_cache_usage_perc',
    (a) => a.kvCacheUsage,
  );
  // vLLM's LoRA info series: its value is the time of the scrape, its labels name the adapters the ranks hold
  // requests for (comma-separated) and the adapters a rank may hold at once; only while some group serves adapters.
  new Gauge({
    name: 'vllm:lora_requests_info',
    help: 'Running stats on lora requests.',
    labelNames: ['max_lora', 'waiting_lora_adapters', 'running_lora_adapters'],
    registers,
    collect() {
      this.reset();
      const info = opts.lora?.();
      if (info === null || info === undefined) return;
      const names = (pick: 'running' | 'waiting') => {
        const set = new Set<string>();
        for (const g of groups())
          for (const r of g.backend.rankStates())
            for (const [name, n] of Object.entries(r.loraAdapters?.[pick] ?? {})) if (n > 0) set.add(name);
        return [...set].sort().join(',');
      };
      this.set(
        {
          max_lora: String(info.maxLoras),
          waiting_lora_adapters: names('waiting'),
          running_lora_adapters: names('running'),
        },
        Date.now() / 1000,
      );
    },
  });
  // vLLM's info gauge of its KV-cache configuration (value 1): one series per distinct configuration of the groups.
  new Gauge({
    name: 'vllm:cache_config_info',
    help: 'Information of the LLMEngine CacheConfig',
    labelNames: ['num_gpu_blocks', 'block_size', 'enable_prefix_caching'],
    registers,
    collect() {
      this.reset();
      for (const labels of opts.cacheConfig?.() ?? []) this.set({ ...labels }, 1);
    },
  });
  const vllmCounter = <L extends string>(name: string, help: string, labelNames: L[]) =>
    new Counter<L>({ name, help, labelNames, registers: httpRegisters });
  const promptTokens = vllmCounter('vllm:prompt_tokens_total', 'Number of prefill tokens processed', ['model_name']);
  const generationTokens = vllmCounter('vllm:generation_tokens_total', 'Number of generation tokens processed', [
    'model_name',
  ]);
  const requestSuccess = vllmCounter('vllm:request_success_total', 'Count of successfully processed requests', [
    'model_name',
    'finished_reason',
  ]);
  const vllmHistogram = (name: string, help: string, buckets: number[]) =>
    new PrebucketedHistogram({ name, help, labelNames: ['model_name'], buckets, registers: httpRegisters });
  const ttft = vllmHistogram(
    'vllm:time_to_first_token_seconds',
    'Histogram of time to first token in seconds',
    VLLM_TTFT_BUCKETS,
  );
  const e2e = vllmHistogram(
    'vllm:e2e_request_latency_seconds',
    'Histogram of e2e request latency in seconds',
    VLLM_E2E_BUCKETS,
  );
  const itl = vllmHistogram(
    'vllm:inter_token_latency_seconds',
    'Histogram of inter-token latency in seconds',
    VLLM_ITL_BUCKETS,
  );
  // The gateway's queue: the time a request waited to be placed on a rank (flow control), not the engine's own.
  const queueTime = vllmHistogram(
    'vllm:request_queue_time_seconds',
    'Histogram of time spent in WAITING phase for request',
    VLLM_QUEUE_BUCKETS,
  );
  const prefixQueries = vllmCounter(
    'vllm:prefix_cache_queries_total',
    'Prefix cache queries, in terms of number of queried tokens',
    ['model_name'],
  );
  const prefixHits = vllmCounter(
    'vllm:prefix_cache_hits_total',
    'Prefix cache hits, in terms of number of cached tokens',
    ['model_name'],
  );
  // Series exist from the first scrape (zero), as vLLM creates them at start-up.
  prefixQueries.inc(modelName, 0);
  prefixHits.inc(modelName, 0);
  promptTokens.inc(modelName, 0);
  generationTokens.inc(modelName, 0);
  for (const reason of VLLM_FINISHED_REASONS) requestSuccess.inc({ ...modelName, finished_reason: reason }, 0);
  return {
    promptTokens,
    generationTokens,
    requestSuccess,
    ttft: ttft.zero(modelName),
    e2e: e2e.zero(modelName),
    itl: itl.zero(modelName),
    queueTime: queueTime.zero(modelName),
    prefixQueries,
    prefixHits,
  };
}
