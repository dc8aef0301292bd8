/**
 * Prometheus metrics of one gateway app (gateway.md section 15.3), on a registry of its own (never prom-client's
 * global one, so several apps in one process, e.g. tests, do not collide).
 *
 * Read at scrape time from each engine group's client (`rankStates()`, `stats`, `canServe()`); every engine-side
 * series carries the group's `worker` label (its worker URL, as SMG labels `smg_engine_*` with `worker`, gateway.md
 * 15.3), so the ranks of several groups (each numbered from 0) never collide:
 * - gauges `model_gateway_engine_running_requests`, `..._waiting_requests`, `..._kv_cache_usage` (ratio 0..1) from
 *   each rank's stored load (absent for a rank that never reported, like SMG), `model_gateway_rank_inflight_requests`
 *   (the in-flight set size: must return to 0 when idle); labels model, worker, dp_rank;
 * - gauge `model_gateway_engine_alive` (1 = the group can take requests now, 0 = it cannot: starting, or no rank
 *   ready; gateway.md 4.2), labels model, worker, engine (`tokenspeed` | `vllm`): one series per group;
 * - counters mirroring each client's cumulative counts: `model_gateway_rank_dispatches_total{worker, dp_rank,
 *   pinned}`, `model_gateway_rank_clamp_events_total{worker, dp_rank}`, `model_gateway_decode_errors_total{worker}`,
 *   `model_gateway_aborts_sent_total{worker}`, `model_gateway_rank_mismatches_total{worker}`,
 *   `model_gateway_engine_failures_total{worker, cause}` (group-scope failures);
 * - load-signal guards (issue 12; dp-routing.md 14.1, 14.3), per rank: gauges `model_gateway_rank_load_age_seconds`
 *   (age of the stored report) and `model_gateway_rank_sole_client_guard` (1 = another client's work seen, clamp
 *   suspended), counter `model_gateway_rank_sole_client_guard_transitions_total{transition=engaged|disengaged}`;
 * - rank lifecycle (issue #8; their own block below): gauge `model_gateway_rank_state{worker, dp_rank, state}`
 *   (1 for the rank's current state, 0 for the other three), counters `model_gateway_rank_rejoins_total`,
 *   `model_gateway_rank_stalls_total`, `model_gateway_rank_deaths_total{cause}` (labels worker, dp_rank),
 *   `model_gateway_handshake_rejected_total{worker, reason}` and `model_gateway_orphan_outputs_total{worker}`;
 * - the engine output contract (issue 26 part 4; engine-client/output-contract.ts): counters
 *   `model_gateway_rank_engine_errors_total{worker, dp_rank, kind}` (kind `max-tokens-overrun`, `invalid-token-id`)
 *   and `model_gateway_unknown_outputs_total{worker}` (rows for request ids the gateway never issued).
 * Recorded by the routes:
 * - histograms (seconds) `model_gateway_time_to_first_token_seconds`, `model_gateway_inter_token_latency_seconds`
 *   (per token: the gap between two token-bearing outputs divided by the tokens of the later one),
 *   `model_gateway_e2e_request_latency_seconds`;
 * - counter `model_gateway_requests_total{endpoint, status, finish_reason}` (finish_reason: stop, length, error,
 *   cancelled for a client disconnect, none for a request refused before generation).
 * Read from the app's off-loop tokenizer queue at scrape time (`attachOffLoop`; issue 26 part 5): counter
 * `model_gateway_tokenizer_jobs_total{outcome=run|started|dropped|discarded|refused}`,
 * `model_gateway_tokenizer_worker_restarts_total`, gauges
 * `model_gateway_tokenizer_queue_jobs` and `..._queue_chars` (HTTP-side: each front's queue, summed over the fronts).
 * vLLM-compatible series (the block "vLLM-compatible series" below; issue #13 part 1): the names, types and units of
 * vLLM's own `/metrics`, one series per served model (label `model_name` = the first served model name, as vLLM), so a
 * cluster router that scrapes vLLM servers (the Gateway API Inference Extension's model-server protocol, llm-d's
 * endpoint picker) can treat the whole gateway as one model server: see `vllmAggregate` and docs/multi-node.md.
 */
import { Counter, Gauge, Registry } from 'prom-client';
import type { OffLoopStats } from '../tokenizer/off-loop.js';
import type { BackendRankState, BackendStats } from './backend.js';
import { PrebucketedHistogram, type PrebucketedSeries } from './prebucketed-histogram.js';
import { vllmAggregate } from './vllm-aggregate.js';

/** What the scrape-time collectors read from one group's client (an `EngineClient` satisfies it). */
export interface MetricsSource {
  rankStates(): BackendRankState[];
  readonly stats: BackendStats;
  /** The client is open (not closed). */
  isAlive(): boolean;
  /** The group can take a request now (`model_gateway_engine_alive`). */
  canServe(): boolean;
}

/** One engine group as the collectors see it (a `BackendGroup` satisfies it): label values and its client. */
export interface MetricsGroup {
  readonly worker: string;
  readonly engine: string;
  readonly backend: MetricsSource;
}

/** Request outcome label values of `model_gateway_requests_total`. */
export type RequestOutcome = 'stop' | 'length' | 'tool_calls' | 'error' | 'cancelled' | 'none';

/** The `outcome` label values of `model_gateway_tokenizer_jobs_total` (fields of `OffLoopStats`). */
const OFF_LOOP_OUTCOMES = ['run', 'started', 'dropped', 'discarded', 'refused'] as const;

/** The rank liveness states (`model_gateway_rank_state`'s `state` label values). */
const RANK_STATES = ['joining', 'ready', 'stalled', 'dead'] as const;

const LATENCY_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80,
];
const ITL_BUCKETS = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.2, 0.4, 0.75, 1, 2.5, 5,
];
/** vLLM's `finished_reason` values of `vllm:request_success_total` (vLLM `FinishReason`: stop, length, abort). */
export const VLLM_FINISHED_REASONS = ['stop', 'length', 'abort'] as const;
export type VllmFinishedReason = (typeof VLLM_FINISHED_REASONS)[number];
/** vLLM's buckets (seconds) of `vllm:time_to_first_token_seconds` and `vllm:e2e_request_latency_seconds`. */
const VLLM_TTFT_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560,
];
const VLLM_E2E_BUCKETS = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680];
const E2E_BUCKETS = [0.01, 0.05, 0.1, 0.3, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960];

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
  private readonly vllmTtft: PrebucketedHistogram;
  private readonly vllmE2e: PrebucketedHistogram;
  /** The series of `ttft` and `e2e` per endpoint, and the one series of each vLLM histogram. */
  private readonly ttftChildren = new Map<string, PrebucketedSeries>();
  private readonly e2eChildren = new Map<string, PrebucketedSeries>();
  private readonly vllmTtftSeries: PrebucketedSeries;
  private readonly vllmE2eSeries: PrebucketedSeries;
  private readonly vllmPromptTokens: Counter<'model_name'>;
  private readonly vllmGenerationTokens: Counter<'model_name'>;
  private readonly vllmRequestSuccess: Counter<'model_name' | 'finished_reason'>;
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
  constructor(opts: { modelId: string; role?: 'all' | 'engine' | 'http' }) {
    this.modelId = opts.modelId;
    const role = opts.role ?? 'all';
    // Engine-side series (scrape-time collectors) register here; the recorded (HTTP-side) ones in `httpRegisters`.
    const registers = role === 'http' ? [] : [this.registry];
    const httpRegisters = role === 'engine' ? [] : [this.registry];
    const model = opts.modelId;
    const groups = (): readonly MetricsGroup[] => this.groups;
    /** Every rank of every group, with the group's worker label. */
    const ranks = (): Array<{ worker: string; rank: BackendRankState }> =>
      groups().flatMap((g) => g.backend.rankStates().map((rank) => ({ worker: g.worker, rank })));

    // The name, help, labels (model, worker, dp_rank) and registries of a per-rank series.
    const perRank = (name: string, help: string) => ({
      name,
      help,
      labelNames: ['model', 'worker', 'dp_rank'],
      registers,
    });
    // A per-rank gauge, reset and refilled at every scrape with `pick(rank)`; a rank whose pick is null (no stored load
    // yet) gets no sample.
    const rankGauge = (name: string, help: string, pick: (r: BackendRankState) => number | null) =>
      new Gauge({
        ...perRank(name, help),
        collect() {
          this.reset();
          for (const { worker, rank } of ranks()) {
            const value = pick(rank);
            if (value !== null) this.set({ model, worker, dp_rank: String(rank.engineIndex) }, value);
          }
        },
      });
    // A per-rank counter mirroring a cumulative count of each rank at every scrape.
    const rankCounter = (name: string, help: string, pick: (r: BackendRankState) => number) =>
      new Counter({
        ...perRank(name, help),
        collect() {
          this.reset();
          for (const { worker, rank: r } of ranks())
            this.inc({ model, worker, dp_rank: String(r.engineIndex) }, pick(r));
        },
      });
    rankGauge(
      'model_gateway_engine_running_requests',
      'Requests the DP rank last reported as running (TokenSpeed counts waiting ones too), from its stored load',
      (r) => r.load?.numRunning ?? null,
    );
    rankGauge(
      'model_gateway_engine_waiting_requests',
      "Length of the DP rank's scheduler waiting queue, from its stored load",
      (r) => r.load?.numWaiting ?? null,
    );
    rankGauge(
      'model_gateway_engine_kv_cache_usage',
      'KV cache usage of the DP rank as a ratio 0..1, from its stored load',
      (r) => r.load?.kvCacheUsage ?? null,
    );
    rankGauge(
      'model_gateway_rank_inflight_requests',
      "Size of the DP rank's in-flight set (routed by this gateway, not yet retired)",
      (r) => r.inFlight,
    );
    new Gauge({
      name: 'model_gateway_engine_alive',
      help: 'Whether the engine group can take requests now (1) or not (0: starting, or no rank ready)',
      labelNames: ['model', 'worker', 'engine'],
      registers,
      collect() {
        this.reset();
        for (const g of groups()) this.set({ model, worker: g.worker, engine: g.engine }, g.backend.canServe() ? 1 : 0);
      },
    });
    new Counter({
      name: 'model_gateway_rank_dispatches_total',
      help: 'Requests dispatched to the DP rank, pinned (X-data-parallel-rank) or chosen by the DP policy',
      labelNames: ['model', 'worker', 'dp_rank', 'pinned'],
      registers,
      collect() {
        this.reset();
        for (const { worker, rank: r } of ranks()) {
          this.inc({ model, worker, dp_rank: String(r.engineIndex), pinned: 'true' }, r.dispatchedPinned);
          this.inc({ model, worker, dp_rank: String(r.engineIndex), pinned: 'false' }, r.dispatchedUnpinned);
        }
      },
    });
    rankCounter(
      'model_gateway_rank_clamp_events_total',
      'Release-clamp (zero-on-empty) events of the DP rank',
      (r) => r.clampEvents,
    );

    // --- Load-signal guards (issue 12; dp-routing.md 14.1, 14.3): report age and the sole-client guard per rank.
    rankGauge(
      'model_gateway_rank_load_age_seconds',
      "Seconds since the DP rank's stored load report arrived; it counts less as it ages and not at all past the horizon",
      (r) => (r.loadAgeMs === undefined || r.loadAgeMs === null ? null : r.loadAgeMs / 1000),
    );
    rankGauge(
      'model_gateway_rank_sole_client_guard',
      "1 while the DP rank's reports show another client's work there, so zero-on-empty is suspended for it",
      (r) => (r.soleClientGuard === undefined ? null : r.soleClientGuard ? 1 : 0),
    );
    new Counter({
      name: 'model_gateway_rank_sole_client_guard_transitions_total',
      help: 'Times the sole-client guard of the DP rank engaged (foreign work seen) or disengaged (reports agree again)',
      labelNames: ['model', 'worker', 'dp_rank', 'transition'],
      registers,
      collect() {
        this.reset();
        for (const { worker, rank: r } of ranks()) {
          if (r.guardEngagements === undefined) continue;
          const dp_rank = String(r.engineIndex);
          this.inc({ model, worker, dp_rank, transition: 'engaged' }, r.guardEngagements);
          this.inc({ model, worker, dp_rank, transition: 'disengaged' }, r.guardDisengagements ?? 0);
        }
      },
    });
    // --- End of the load-signal guard block.

    const statCounter = (name: string, help: string, pick: (s: BackendStats) => number) =>
      new Counter({
        name,
        help,
        labelNames: ['model', 'worker'],
        registers,
        collect() {
          this.reset();
          for (const g of groups()) this.inc({ model, worker: g.worker }, pick(g.backend.stats));
        },
      });
    statCounter(
      'model_gateway_decode_errors_total',
      'Engine output messages that failed to decode',
      (s) => s.decodeErrors,
    );
    statCounter('model_gateway_aborts_sent_total', 'ABORT messages sent to engine ranks', (s) => s.abortsSent);
    statCounter(
      'model_gateway_rank_mismatches_total',
      'Output rows naming a DP rank other than the one their request was sent to; dropped and ABORTed at the sender',
      (s) => s.rankMismatches,
    );
    statCounter(
      'model_gateway_unattributed_engine_dead_total',
      'ENGINE_CORE_DEAD frames no vanished identity and no quiet rank explained (every rank still answered); ignored',
      (s) => s.unattributedSentinels,
    );
    statCounter(
      'model_gateway_decode_suspects_total',
      'DP ranks taken out of rotation for sending nothing decodable while undecodable output arrived',
      (s) => s.decodeSuspects,
    );
    statCounter(
      'model_gateway_rank_revivals_total',
      'Dead DP ranks that answered again and came back into rotation',
      (s) => s.revivals,
    );
    // A counter with one series per key of a `Record<key, count>` read at scrape time, for every labelled row.
    const recordCounter = (
      name: string,
      help: string,
      labels: string[],
      key: string,
      rows: () => Array<[Record<string, string>, Readonly<Record<string, number>>]>,
    ) =>
      new Counter({
        name,
        help,
        labelNames: ['model', ...labels, key],
        registers,
        collect() {
          this.reset();
          for (const [values, counts] of rows())
            for (const [k, n] of Object.entries(counts)) this.inc({ model, ...values, [key]: k }, n);
        },
      });
    recordCounter(
      'model_gateway_engine_failures_total',
      'Group-scope failures (every request of the group failed) by cause',
      ['worker'],
      'cause',
      () => groups().map((g) => [{ worker: g.worker }, g.backend.stats.failures]),
    );

    // ---- Rank lifecycle (issue #8): per-rank state, rejoins, stalls, deaths; refused handshake messages -------------
    new Gauge({
      name: 'model_gateway_rank_state',
      help: 'Liveness of the DP rank: 1 for its current state (joining, ready, stalled, dead), 0 for the others',
      labelNames: ['model', 'worker', 'dp_rank', 'state'],
      registers,
      collect() {
        this.reset();
        for (const { worker, rank: r } of ranks()) {
          for (const state of RANK_STATES)
            this.set({ model, worker, dp_rank: String(r.engineIndex), state }, r.state === state ? 1 : 0);
        }
      },
    });
    rankCounter(
      'model_gateway_rank_rejoins_total',
      'Handshakes the DP rank completed after its first (a restarted engine joining again)',
      (r) => r.rejoins,
    );
    rankCounter(
      'model_gateway_rank_stalls_total',
      'Times the DP rank held requests and sent nothing for the stall timeout',
      (r) => r.stalls,
    );
    recordCounter(
      'model_gateway_rank_deaths_total',
      'Times the DP rank was found dead, by cause',
      ['worker', 'dp_rank'],
      'cause',
      () => ranks().map(({ worker, rank: r }) => [{ worker, dp_rank: String(r.engineIndex) }, r.deaths]),
    );
    recordCounter(
      'model_gateway_handshake_rejected_total',
      'Handshake-socket and input-socket messages the gateway refused and ignored, by reason',
      ['worker'],
      'reason',
      () => groups().map((g) => [{ worker: g.worker }, g.backend.stats.handshakeRejected]),
    );
    statCounter(
      'model_gateway_orphan_outputs_total',
      'Output rows for requests their rank no longer owns (failed by a death, stall or group failure); each id is ABORTed once',
      (s) => s.orphanOutputs,
    );
    // --- The engine output contract (issue 26 part 4).
    recordCounter(
      'model_gateway_rank_engine_errors_total',
      'Outputs of the DP rank that broke the output contract, by kind: max-tokens-overrun (tokens past max_tokens: cut ' +
        "there, the rest ABORTed), invalid-token-id (a token id outside the tokenizer's vocabulary: the request failed, 502)",
      ['worker', 'dp_rank'],
      'kind',
      () => ranks().map(({ worker, rank: r }) => [{ worker, dp_rank: String(r.engineIndex) }, r.engineErrors ?? {}]),
    );
    statCounter(
      'model_gateway_unknown_outputs_total',
      'Output rows for request ids this gateway never issued (or forgot long ago); dropped',
      (s) => s.unknownOutputs,
    );

    // ---- The off-loop tokenizer queue (issue 26 part 5), read from the app's queue at scrape time ------------------
    const offLoop = (): OffLoopStats | null => this.offLoop?.stats() ?? null;
    new Counter({
      name: 'model_gateway_tokenizer_jobs_total',
      help:
        'Off-loop tokenizer jobs (large prompts, long chats, /tokenize, /detokenize) by outcome: run (handed to the worker), ' +
        'started (begun by the worker), dropped (the client left while it waited), discarded (the client left once it was ' +
        'handed over), refused (queue full: 429)',
      labelNames: ['model', 'outcome'],
      registers: httpRegisters,
      collect() {
        this.reset();
        const s = offLoop();
        if (s !== null) for (const outcome of OFF_LOOP_OUTCOMES) this.inc({ model, outcome }, s[outcome]);
      },
    });
    new Counter({
      name: 'model_gateway_tokenizer_worker_restarts_total',
      help: 'Off-loop tokenizer workers terminated because the large job they ran was abandoned by its client',
      labelNames: ['model'],
      registers: httpRegisters,
      collect() {
        this.reset();
        this.inc({ model }, offLoop()?.restarts ?? 0);
      },
    });
    new Gauge({
      name: 'model_gateway_tokenizer_queue_jobs',
      help: 'Off-loop tokenizer jobs waiting or running now',
      labelNames: ['model'],
      registers: httpRegisters,
      collect() {
        this.set({ model }, offLoop()?.queuedJobs ?? 0);
      },
    });
    new Gauge({
      name: 'model_gateway_tokenizer_queue_chars',
      help: 'Characters of the off-loop tokenizer jobs waiting or running now (tokenizer/off-loop.ts job sizes)',
      labelNames: ['model'],
      registers: httpRegisters,
      collect() {
        this.set({ model }, offLoop()?.queuedChars ?? 0);
      },
    });

    // A latency histogram in seconds, labelled model and endpoint, observed by the routes.
    const latencyHistogram = (name: string, help: string, buckets: number[]) =>
      new PrebucketedHistogram({ name, help, labelNames: ['model', 'endpoint'], buckets, registers: httpRegisters });
    this.ttft = latencyHistogram(
      'model_gateway_time_to_first_token_seconds',
      'Time from request arrival to the first generated token (TTFT), seconds',
      LATENCY_BUCKETS,
    );
    this.itl = new PrebucketedHistogram({
      name: 'model_gateway_inter_token_latency_seconds',
      help: 'Inter-token latency (ITL) per generated token after the first, seconds',
      labelNames: ['model', 'endpoint'],
      buckets: ITL_BUCKETS,
      registers: httpRegisters,
    });
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

    // ---- vLLM-compatible series (issue #13 part 1) ----
    // Names, types, units and histogram buckets as vLLM's Prometheus logger (vllm/v1/metrics/loggers.py); label
    // `model_name` only: the gateway is one model server, so the gauges are the aggregate over its live ranks (a
    // cluster router reads one series per server; per-rank detail stays in the model_gateway_* series above).
    const modelName = { model_name: model };
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
    const vllmCounter = <L extends string>(name: string, help: string, labelNames: L[]) =>
      new Counter<L>({ name, help, labelNames, registers: httpRegisters });
    this.vllmPromptTokens = vllmCounter('vllm:prompt_tokens_total', 'Number of prefill tokens processed', [
      'model_name',
    ]);
    this.vllmGenerationTokens = vllmCounter('vllm:generation_tokens_total', 'Number of generation tokens processed', [
      'model_name',
    ]);
    this.vllmRequestSuccess = vllmCounter('vllm:request_success_total', 'Count of successfully processed requests', [
      'model_name',
      'finished_reason',
    ]);
    this.vllmTtft = new PrebucketedHistogram({
      name: 'vllm:time_to_first_token_seconds',
      help: 'Histogram of time to first token in seconds',
      labelNames: ['model_name'],
      buckets: VLLM_TTFT_BUCKETS,
      registers: httpRegisters,
    });
    this.vllmE2e = new PrebucketedHistogram({
      name: 'vllm:e2e_request_latency_seconds',
      help: 'Histogram of e2e request latency in seconds',
      labelNames: ['model_name'],
      buckets: VLLM_E2E_BUCKETS,
      registers: httpRegisters,
    });
    // Series exist from the first scrape (zero), as vLLM creates them at start-up.
    this.vllmPromptTokens.inc(modelName, 0);
    this.vllmGenerationTokens.inc(modelName, 0);
    for (const reason of VLLM_FINISHED_REASONS)
      this.vllmRequestSuccess.inc({ ...modelName, finished_reason: reason }, 0);
    this.vllmTtftSeries = this.vllmTtft.zero(modelName);
    this.vllmE2eSeries = this.vllmE2e.zero(modelName);
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
    this.vllmTtftSeries.observe(seconds);
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

  /** Record `tokens` ITL samples of `secondsPerToken` each (called once per engine output; a child per endpoint). */
  observeItl(endpoint: string, secondsPerToken: number, tokens = 1): void {
    let child = this.itlChildren.get(endpoint);
    if (child === undefined) {
      child = this.itl.child({ model: this.modelId, endpoint });
      this.itlChildren.set(endpoint, child);
    }
    child.observe(secondsPerToken, tokens);
  }

  /** Record an end-to-end latency sample (seconds), also as `vllm:e2e_request_latency_seconds`. */
  observeE2e(endpoint: string, seconds: number): void {
    this.endpointSeries(this.e2eChildren, this.e2e, endpoint).observe(seconds);
    this.vllmE2eSeries.observe(seconds);
  }

  /**
   * Count one finished engine request (each choice of an `n > 1` request is one, as in vLLM) in the vLLM counters:
   * `promptTokens` into `vllm:prompt_tokens_total`, `generationTokens` into `vllm:generation_tokens_total` (tokens),
   * and one `vllm:request_success_total{finished_reason}` (`abort` = the client went away).
   */
  countEngineRequest(finishedReason: VllmFinishedReason, promptTokens: number, generationTokens: number): void {
    const labels = { model_name: this.modelId };
    if (promptTokens > 0)
      this.counterChild('vllm prompt', () => this.vllmPromptTokens.labels(labels)).inc(promptTokens);
    if (generationTokens > 0)
      this.counterChild('vllm generation', () => this.vllmGenerationTokens.labels(labels)).inc(generationTokens);
    this.counterChild(`vllm success ${finishedReason}`, () =>
      this.vllmRequestSuccess.labels({ ...labels, finished_reason: finishedReason }),
    ).inc();
  }

  /** Count one finished HTTP request. */
  countRequest(endpoint: string, status: number, finishReason: RequestOutcome): void {
    this.counterChild(`requests ${endpoint} ${status} ${finishReason}`, () =>
      this.requests.labels({ model: this.modelId, endpoint, status: String(status), finish_reason: finishReason }),
    ).inc();
  }

  /** The exposition text (Prometheus text format 0.0.4) and its content type. */
  async render(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
