/**
 * Prometheus metrics of one gateway app (gateway.md section 15.3), on a registry of its own (never prom-client's
 * global one, so several apps in one process, e.g. tests, do not collide). Three kinds of series, by who writes them:
 * - engine-side, read at scrape time from each engine group's client: per-rank load, in-flight, dispatches, lifecycle,
 *   the load-signal guards and the output contract (metrics-engine.ts lists them);
 * - recorded by the routes (this module): histograms (seconds) `model_gateway_time_to_first_token_seconds`,
 *   `model_gateway_inter_token_latency_seconds` (per token: the gap between two token-bearing outputs divided by the
 *   tokens of the later one), `model_gateway_e2e_request_latency_seconds`; counter
 *   `model_gateway_requests_total{endpoint, status, finish_reason}` (finish_reason: stop, length, error, cancelled for
 *   a client disconnect, none for a request refused before generation);
 * - read from the app's off-loop tokenizer queue at scrape time (`attachOffLoop`; issue 26 part 5): counter
 *   `model_gateway_tokenizer_jobs_total{outcome=run|started|dropped|discarded|refused}`,
 *   `model_gateway_tokenizer_worker_restarts_total`, gauges `model_gateway_tokenizer_queue_jobs` and `..._queue_chars`
 *   (HTTP-side: each front's queue, summed over the fronts).
 * vLLM-compatible series (issue #13 part 1; metrics-vllm.ts): the names, types and units of vLLM's own `/metrics`, so
 * a cluster router that scrapes vLLM servers can treat the whole gateway as one model server.
 */
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import type { OffLoopStats } from '../tokenizer/off-loop.js';
import { registerEngineSeries, type MetricsGroup } from './metrics-engine.js';
import {
  registerVllmSeries,
  type CacheConfigLabels,
  type VllmFinishedReason,
  type VllmRecordedSeries,
} from './metrics-vllm.js';
import { PrebucketedHistogram, type PrebucketedSeries } from './prebucketed-histogram.js';

/** Request outcome label values of `model_gateway_requests_total`. */
export type RequestOutcome = 'stop' | 'length' | 'tool_calls' | 'error' | 'cancelled' | 'none';

/** The `outcome` label values of `model_gateway_tokenizer_jobs_total` (fields of `OffLoopStats`). */
const OFF_LOOP_OUTCOMES = ['run', 'started', 'dropped', 'discarded', 'refused'] as const;

/** Tenants labelled by name in the per-tenant series; a process counts later ones as `OTHER_TENANT`. */
export const MAX_TENANT_LABELS = 100;
/** Buckets of the queue wait (seconds): flow control's deadline defaults to 30 s. */
const QUEUE_WAIT_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** The label of the tenants past `MAX_TENANT_LABELS`. */
export const OTHER_TENANT = 'other';

const LATENCY_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80,
];
const ITL_BUCKETS = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.2, 0.4, 0.75, 1, 2.5, 5,
];
const E2E_BUCKETS = [0.01, 0.05, 0.1, 0.3, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960];

/**
 * The distinct `vllm:cache_config_info` label sets of `groups` (groups whose ranks have not joined have none).
 * Prefix caching is on in both engine families' defaults and the simulated ranks; the gateway cannot see it off.
 */
function cacheConfigLabels(groups: readonly MetricsGroup[]): CacheConfigLabels[] {
  const seen = new Map<string, CacheConfigLabels>();
  for (const g of groups) {
    const c = g.backend.cacheConfig;
    if (c === null || c === undefined) continue;
    const labels: CacheConfigLabels = {
      ...(c.numGpuBlocks !== null ? { num_gpu_blocks: String(c.numGpuBlocks) } : {}),
      ...(c.blockSize !== null ? { block_size: String(c.blockSize) } : {}),
      enable_prefix_caching: 'True',
    };
    seen.set(JSON.stringify(labels), labels);
  }
  return [...seen.values()];
}

/** The metrics of one gateway app. Create once per app; `attach` the engine client before the first scrape. */
export class GatewayMetrics {
  /** The app's own registry; `/metrics` renders it. */
  readonly registry = new Registry();
  readonly modelId: string;
  private groups: readonly MetricsGroup[] = [];
  private offLoop: { stats(): OffLoopStats } | null = null;

  /**
   * The latency histograms are counted outside prom-client's per-call label hashing (prebucketed-histogram.ts): ITL
   * per token, TTFT and E2E per request (~0.8 µs per prom-client observe, four per request).
   */
  private readonly ttft: PrebucketedHistogram;
  private readonly itl: PrebucketedHistogram;
  /** `itl`'s series per endpoint (the per-output hot path skips the label lookup). */
  private readonly itlChildren = new Map<string, PrebucketedSeries>();
  private readonly e2e: PrebucketedHistogram;
  private readonly requests: Counter<'model' | 'endpoint' | 'status' | 'finish_reason'>;
  private readonly tenantRequests: Counter<'model' | 'tenant' | 'status'>;
  private readonly tenantTokens: Counter<'model' | 'tenant' | 'kind'>;
  private readonly tenantRejections: Counter<'model' | 'tenant' | 'reason'>;
  private readonly tenantQueueWait: PrebucketedHistogram;
  private readonly queueWaitChildren = new Map<string, PrebucketedSeries>();
  /** Tenant names labelled so far (at most `MAX_TENANT_LABELS`; the rest count as `other`). */
  private readonly tenantLabels = new Set<string>();
  /** The series of `ttft` and `e2e` per endpoint. */
  private readonly ttftChildren = new Map<string, PrebucketedSeries>();
  private readonly e2eChildren = new Map<string, PrebucketedSeries>();
  /** The vLLM-compatible counters and the one series of each vLLM histogram. */
  private readonly vllm: VllmRecordedSeries;
  /**
   * Labelled children of the per-request series, by their varying labels (`model` is fixed per app): a call with a
   * label object hashes it on every call. Bounded: endpoints, HTTP statuses and outcomes are small fixed sets.
   */
  private readonly children = new Map<string, { inc(v?: number): void }>();

  /**
   * `role` (issue 9, `--workers N`): `all` (default, one process), `engine` (the router process: only the series read
   * from the engine clients at scrape time), `http` (a front: only the series the routes record). The two partial
   * registries have disjoint series, so the router's plus the fronts' aggregate (prom-client AggregatorRegistry) is
   * the one-process set with nothing counted twice.
   */
  constructor(opts: { modelId: string; role?: 'all' | 'engine' | 'http'; maxLoras?: number }) {
    this.modelId = opts.modelId;
    const role = opts.role ?? 'all';
    // Engine-side series (scrape-time collectors) register here; the recorded (HTTP-side) ones in `httpRegisters`.
    const registers = role === 'http' ? [] : [this.registry];
    const httpRegisters = role === 'engine' ? [] : [this.registry];
    const model = opts.modelId;
    const groups = (): readonly MetricsGroup[] => this.groups;
    registerEngineSeries({ model, registers, groups });
    registerOffLoopSeries(model, httpRegisters, () => this.offLoop?.stats() ?? null);

    // A latency histogram in seconds, labelled model and endpoint, observed by the routes.
    const latencyHistogram = (name: string, help: string, buckets: number[]) =>
      new PrebucketedHistogram({ name, help, labelNames: ['model', 'endpoint'], buckets, registers: httpRegisters });
    this.ttft = latencyHistogram(
      'model_gateway_time_to_first_token_seconds',
      'Time from request arrival to the first generated token (TTFT), seconds',
      LATENCY_BUCKETS,
    );
    this.itl = latencyHistogram(
      'model_gateway_inter_token_latency_seconds',
      'Inter-token latency (ITL) per generated token after the first, seconds',
      ITL_BUCKETS,
    );
    this.e2e = latencyHistogram(
      'model_gateway_e2e_request_latency_seconds',
      'Time from request arrival to its terminal outcome, seconds',
      E2E_BUCKETS,
    );
    this.requests = new Counter({
      name: 'model_gateway_requests_total',
      help: 'Requests by endpoint, HTTP status and finish reason (cancelled = client disconnect, none = refused)',
      labelNames: ['model', 'endpoint', 'status', 'finish_reason'],
      registers: httpRegisters,
    });
    this.tenantRequests = new Counter({
      name: 'model_gateway_tenant_requests_total',
      help: `Generation requests by tenant (an API key's digest, or the x-gateway-fairness-id; the first ${MAX_TENANT_LABELS} names, then other) and HTTP status`,
      labelNames: ['model', 'tenant', 'status'],
      registers: httpRegisters,
    });
    this.tenantTokens = new Counter({
      name: 'model_gateway_tenant_tokens_total',
      help: 'Tokens of the answered (200) generation requests by tenant and kind: prompt, completion, cached (the usage each answer reported)',
      labelNames: ['model', 'tenant', 'kind'],
      registers: httpRegisters,
    });
    this.tenantRejections = new Counter({
      name: 'model_gateway_tenant_rejections_total',
      help: 'Generation requests refused before their answer started, by tenant and reason (the error code: rate_limit_exceeded, overloaded, priority_not_allowed, ...)',
      labelNames: ['model', 'tenant', 'reason'],
      registers: httpRegisters,
    });
    this.tenantQueueWait = new PrebucketedHistogram({
      name: 'model_gateway_tenant_queue_wait_seconds',
      help: "Time a generation request waited to be placed on a rank (flow control's queue included; refused ones too), by tenant, seconds",
      labelNames: ['model', 'tenant'],
      buckets: QUEUE_WAIT_BUCKETS,
      registers: httpRegisters,
    });
    const maxLoras = opts.maxLoras ?? 1;
    this.vllm = registerVllmSeries({
      model,
      registers,
      httpRegisters,
      groups,
      // The LoRA info series exists while some group serves an adapter.
      lora: () =>
        this.groups.some(
          (g) => ((g.backend as { adapters?: { list(): unknown[] } | null }).adapters?.list().length ?? 0) > 0,
        )
          ? { maxLoras }
          : null,
      cacheConfig: () => cacheConfigLabels(this.groups),
    });
  }

  /** A tenant's label: its name, or `other` past the first `MAX_TENANT_LABELS` names this process labelled. */
  private tenantLabel(tenant: string): string {
    if (this.tenantLabels.has(tenant)) return tenant;
    if (this.tenantLabels.size >= MAX_TENANT_LABELS) return OTHER_TENANT;
    this.tenantLabels.add(tenant);
    return tenant;
  }

  /**
   * Record how long a request of `tenant` waited to be placed (seconds; see `tenantQueueWait`), also as
   * `vllm:request_queue_time_seconds` (the gateway's queue: the engine's own waiting time is not on its wire for
   * every engine family).
   */
  observeQueueWait(tenant: string, seconds: number): void {
    const label = this.tenantLabel(tenant);
    let series = this.queueWaitChildren.get(label);
    if (series === undefined) {
      series = this.tenantQueueWait.child({ model: this.modelId, tenant: label });
      this.queueWaitChildren.set(label, series);
    }
    series.observe(seconds);
    this.vllm.queueTime.observe(seconds);
  }

  /**
   * Export this process's own `process_*` and `nodejs_*` series (prom-client's default metrics: CPU seconds, memory,
   * event-loop lag, GC, handles) with label `role`: `gateway` (one process), `router`, or `front` (`--workers N`: the
   * fronts' series are summed into one `role="front"` set by the aggregation, the router's kept apart). Once per
   * process: the collectors watch process-wide state (an event-loop delay monitor), so apps built in tests call none.
   */
  collectProcessMetrics(role: 'gateway' | 'router' | 'front'): void {
    collectDefaultMetrics({ register: this.registry, labels: { role } });
  }

  /** Read the off-loop tokenizer queue's counters (`stats()`) at every scrape (the app's queue; replaces any earlier). */
  attachOffLoop(source: { stats(): OffLoopStats }): void {
    this.offLoop = source;
  }

  /**
   * Read per-rank state and client counters from these groups at every scrape (replaces any earlier list). Worker
   * names should be unique (they are the `worker` label values).
   */
  attach(groups: readonly MetricsGroup[]): void {
    this.groups = [...groups];
  }

  /** Record a TTFT sample (seconds), also as `vllm:time_to_first_token_seconds`. */
  observeTtft(endpoint: string, seconds: number): void {
    this.endpointSeries(this.ttftChildren, this.ttft, endpoint).observe(seconds);
    this.vllm.ttft.observe(seconds);
  }

  /** The series of `endpoint` in `histogram` (labels model, endpoint), cached in `cache`. */
  private endpointSeries(
    cache: Map<string, PrebucketedSeries>,
    histogram: PrebucketedHistogram,
    endpoint: string,
  ): PrebucketedSeries {
    let series = cache.get(endpoint);
    if (series === undefined) cache.set(endpoint, (series = histogram.child({ model: this.modelId, endpoint })));
    return series;
  }

  /** The cached counter child under `key` (see `children`), made by `make` on first use. */
  private counterChild(key: string, make: () => { inc(v?: number): void }): { inc(v?: number): void } {
    let child = this.children.get(key) as { inc(v?: number): void } | undefined;
    if (child === undefined) this.children.set(key, (child = make()));
    return child;
  }

  /**
   * Record `tokens` ITL samples of `secondsPerToken` each (called once per engine output; a child per endpoint), also
   * as `vllm:inter_token_latency_seconds`.
   */
  observeItl(endpoint: string, secondsPerToken: number, tokens = 1): void {
    let child = this.itlChildren.get(endpoint);
    if (child === undefined) {
      child = this.itl.child({ model: this.modelId, endpoint });
      this.itlChildren.set(endpoint, child);
    }
    child.observe(secondsPerToken, tokens);
    this.vllm.itl.observe(secondsPerToken, tokens);
  }

  /** Record an end-to-end latency sample (seconds), also as `vllm:e2e_request_latency_seconds`. */
  observeE2e(endpoint: string, seconds: number): void {
    this.endpointSeries(this.e2eChildren, this.e2e, endpoint).observe(seconds);
    this.vllm.e2e.observe(seconds);
  }

  /**
   * Count one finished engine request (each choice of an `n > 1` request is one, as in vLLM) in the vLLM counters:
   * `promptTokens` into `vllm:prompt_tokens_total`, `generationTokens` into `vllm:generation_tokens_total` (tokens),
   * and one `vllm:request_success_total{finished_reason}` (`abort` = the client went away). With `cachedTokens` (a
   * finished request's reported prefix-cache hits), its prompt counts in `vllm:prefix_cache_queries_total` and its
   * cached tokens in `vllm:prefix_cache_hits_total`.
   */
  countEngineRequest(
    finishedReason: VllmFinishedReason,
    promptTokens: number,
    generationTokens: number,
    cachedTokens: number | null = null,
  ): void {
    const labels = { model_name: this.modelId };
    // The prefix-cache lookup of a request that finished: its prompt queried, its reported cached tokens hit.
    if (cachedTokens !== null && promptTokens > 0) {
      this.counterChild('vllm prefix queries', () => this.vllm.prefixQueries.labels(labels)).inc(promptTokens);
      if (cachedTokens > 0)
        this.counterChild('vllm prefix hits', () => this.vllm.prefixHits.labels(labels)).inc(cachedTokens);
    }
    if (promptTokens > 0)
      this.counterChild('vllm prompt', () => this.vllm.promptTokens.labels(labels)).inc(promptTokens);
    if (generationTokens > 0)
      this.counterChild('vllm generation', () => this.vllm.generationTokens.labels(labels)).inc(generationTokens);
    this.counterChild(`vllm success ${finishedReason}`, () =>
      this.vllm.requestSuccess.labels({ ...labels, finished_reason: finishedReason }),
    ).inc();
  }

  /** Count one finished HTTP request. */
  countRequest(endpoint: string, status: number, finishReason: RequestOutcome): void {
    this.counterChild(`requests ${endpoint} ${status} ${finishReason}`, () =>
      this.requests.labels({ model: this.modelId, endpoint, status: String(status), finish_reason: finishReason }),
    ).inc();
  }

  /**
   * Count one finished generation request of `tenant` with its HTTP `status`, and with `usage` (tokens) the usage its
   * answer reported; `rejection`, for a request refused before its answer started, the reason (its error code). A
   * tenant name past the first `MAX_TENANT_LABELS` is labelled `other` (the fairness header is the client's choice:
   * the series stay bounded).
   */
  countTenant(
    name: string,
    status: number,
    usage: { prompt: number; completion: number; cached: number } | null,
    rejection: string | null = null,
  ): void {
    const tenant = this.tenantLabel(name);
    const model = this.modelId;
    this.counterChild(`tenant ${tenant} ${status}`, () =>
      this.tenantRequests.labels({ model, tenant, status: String(status) }),
    ).inc();
    if (rejection !== null)
      this.counterChild(`tenant rejection ${tenant} ${rejection}`, () =>
        this.tenantRejections.labels({ model, tenant, reason: rejection }),
      ).inc();
    if (usage === null) return;
    for (const kind of ['prompt', 'completion', 'cached'] as const) {
      if (usage[kind] > 0)
        this.counterChild(`tenant tokens ${tenant} ${kind}`, () =>
          this.tenantTokens.labels({ model, tenant, kind }),
        ).inc(usage[kind]);
    }
  }

  /** The exposition text (Prometheus text format 0.0.4) and its content type. */
  async render(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}

/**
 * Register the off-loop tokenizer queue's series (issue 26 part 5; HTTP-side) in `registers`, read from `stats()` at
 * every scrape (null: no queue attached yet, the series read 0 or nothing).
 */
function registerOffLoopSeries(model: string, registers: Registry[], stats: () => OffLoopStats | null): void {
  new Counter({
    name: 'model_gateway_tokenizer_jobs_total',
    help:
      'Off-loop tokenizer jobs (large prompts, long chats, /tokenize, /detokenize) by outcome: run (handed to the worker), ' +
      'started (begun by the worker), dropped (the client left while it waited), discarded (the client left once it was ' +
      'handed over), refused (queue full: 429)',
    labelNames: ['model', 'outcome'],
    registers,
    collect() {
      this.reset();
      const s = stats();
      if (s !== null) for (const outcome of OFF_LOOP_OUTCOMES) this.inc({ model, outcome }, s[outcome]);
    },
  });
  new Counter({
    name: 'model_gateway_tokenizer_worker_restarts_total',
    help: 'Off-loop tokenizer workers terminated because the large job they ran was abandoned by its client',
    labelNames: ['model'],
    registers,
    collect() {
      this.reset();
      this.inc({ model }, stats()?.restarts ?? 0);
    },
  });
  new Gauge({
    name: 'model_gateway_tokenizer_queue_jobs',
    help: 'Off-loop tokenizer jobs waiting or running now',
    labelNames: ['model'],
    registers,
    collect() {
      this.set({ model }, stats()?.queuedJobs ?? 0);
    },
  });
  new Gauge({
    name: 'model_gateway_tokenizer_queue_chars',
    help: 'Characters of the off-loop tokenizer jobs waiting or running now (tokenizer/off-loop.ts job sizes)',
    labelNames: ['model'],
    registers,
    collect() {
      this.set({ model }, stats()?.queuedChars ?? 0);
    },
  });
}
