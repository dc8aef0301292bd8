/**
 * The engine-side Prometheus series of a gateway app (gateway.md section 15.3): read at scrape time from each engine
 * group's client (`rankStates()`, `stats`, `canServe()`), registered only where the engine clients live (roles `all`
 * and `engine` of `GatewayMetrics`). Every series carries the group's `group` label (its name, `--group-name`; SMG labels
 * `smg_engine_*` with its `worker` URL, gateway.md 15.3, but a socket path is no label to show: issue 32), so the ranks of several groups (each numbered from 0) never collide:
 * - gauges `model_gateway_engine_running_requests`, `..._waiting_requests`, `..._kv_cache_usage` (ratio 0..1) from
 *   each rank's stored load (absent for a rank that never reported, like SMG), `model_gateway_rank_inflight_requests`
 *   (the in-flight set size: must return to 0 when idle); labels model, group, dp_rank;
 * - gauge `model_gateway_engine_alive` (1 = the group can take requests now, 0 = it cannot: starting, or no rank
 *   ready; gateway.md 4.2), labels model, group, engine (`tokenspeed` | `vllm`): one series per group;
 * - counters mirroring each client's cumulative counts: `model_gateway_rank_dispatches_total{group, dp_rank,
 *   pinned}`, `model_gateway_rank_clamp_events_total{group, dp_rank}`, `model_gateway_decode_errors_total{group}`,
 *   `model_gateway_aborts_sent_total{group}`, `model_gateway_rank_mismatches_total{group}`,
 *   `model_gateway_engine_failures_total{group, cause}` (group-scope failures);
 * - load-signal guards (issue 12; dp-routing.md 14.1, 14.3), per rank: gauges `model_gateway_rank_load_age_seconds`
 *   (age of the stored report) and `model_gateway_rank_sole_client_guard` (1 = another client's work seen, clamp
 *   suspended), counter `model_gateway_rank_sole_client_guard_transitions_total{transition=engaged|disengaged}`;
 * - rank lifecycle (issue #8): gauge `model_gateway_rank_state{group, dp_rank, state}` (1 for the rank's current
 *   state, 0 for the other three), counters `model_gateway_rank_rejoins_total`, `model_gateway_rank_stalls_total`,
 *   `model_gateway_rank_deaths_total{cause}` (labels group, dp_rank), `model_gateway_handshake_rejected_total{group,
 *   reason}` and `model_gateway_orphan_outputs_total{group}`;
 * - the engine output contract (issue 26 part 4; engine-client/output-contract.ts): counters
 *   `model_gateway_rank_engine_errors_total{group, dp_rank, kind}` (kind `max-tokens-overrun`, `invalid-token-id`)
 *   and `model_gateway_unknown_outputs_total{group}` (rows for request ids the gateway never issued);
 * - prefix-cache routing (issue 29 part 3; engine-client/service-rates.ts `RoutingPrecision`), per group: counters
 *   `model_gateway_routing_predictions_total`, `..._predicted_cached_tokens_total`,
 *   `..._confirmed_cached_tokens_total` (Σ min(predicted, reported)) and `..._reported_cached_tokens_total`: routing
 *   precision is confirmed / predicted; with KV events (engine-client/kv-cache-view.ts), counters
 *   `model_gateway_kv_event_batches_total`, `model_gateway_kv_event_unsure_total{reason=unsure|silent}`,
 *   `model_gateway_kv_event_publisher_restarts_total`, `model_gateway_kv_event_frames_dropped_total{reason}`,
 *   `model_gateway_kv_event_replays_total{outcome}` and `model_gateway_kv_index_dropped_stores_total` (the per-rank
 *   block cap bit).
 * Every collector resets and refills its metric at each scrape, so a group or rank that went away leaves no series.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { BackendRankState, BackendStats } from './backend.js';
import { PRIORITY_BANDS } from './priority-band.js';

/** What the scrape-time collectors read from one group's client (an `EngineClient` satisfies it). */
export interface MetricsSource {
  rankStates(): BackendRankState[];
  readonly stats: BackendStats;
  /** The client is open (not closed). */
  isAlive(): boolean;
  /** The group can take a request now (`model_gateway_engine_alive`). */
  canServe(): boolean;
  /** The group's LoRA adapters (`vllm:lora_requests_info` exists while some group has one). */
  readonly adapters?: { list(): readonly unknown[] } | null;
  /** The ranks' KV cache (pages, tokens per page) once one joined (`vllm:cache_config_info`); absent: unknown. */
  readonly cacheConfig?: { numGpuBlocks: number | null; blockSize: number | null } | null;
}

/** One engine group as the collectors see it (a `BackendGroup` satisfies it): label values and its client. */
export interface MetricsGroup {
  /** The group's name (`--group-name`): the `group` label. Never the socket path (issue 32). */
  readonly name: string;
  readonly engine: string;
  readonly backend: MetricsSource;
}

/** What the engine-side collectors read: the app's `model` label, where they register, and the groups now. */
export interface EngineSeriesContext {
  readonly model: string;
  /** The registries to register in (empty: none, for an HTTP-only front). */
  readonly registers: Registry[];
  /** The groups at scrape time (`GatewayMetrics.attach` may replace the list). */
  readonly groups: () => readonly MetricsGroup[];
}

/** The rank liveness states (`model_gateway_rank_state`'s `state` label values). */
const RANK_STATES = ['joining', 'ready', 'stalled', 'dead'] as const;

/**
 * Register every engine-side series of the module comment in `ctx.registers`, in the order a scrape lists them.
 * Throws Error when a registry already has a metric of one of these names.
 */
export function registerEngineSeries(ctx: EngineSeriesContext): void {
  registerRankLoadSeries(ctx);
  registerClientCounters(ctx);
  registerLifecycleSeries(ctx);
  registerOutputContractSeries(ctx);
  registerCacheRoutingSeries(ctx);
  registerFlowControlSeries(ctx);
}

/** Every rank of every group, with the group's label. */
function ranks(ctx: EngineSeriesContext): Array<{ group: string; rank: BackendRankState }> {
  return ctx.groups().flatMap((g) => g.backend.rankStates().map((rank) => ({ group: g.name, rank })));
}

/** The name, help, labels (model, group, dp_rank) and registries of a per-rank series. */
function perRank(ctx: EngineSeriesContext, name: string, help: string) {
  return { name, help, labelNames: ['model', 'group', 'dp_rank'], registers: ctx.registers };
}

/**
 * A per-rank gauge, reset and refilled at every scrape with `pick(rank)`; a rank whose pick is null (no stored load
 * yet) gets no sample.
 */
function rankGauge(
  ctx: EngineSeriesContext,
  name: string,
  help: string,
  pick: (r: BackendRankState) => number | null,
): void {
  const model = ctx.model;
  new Gauge({
    ...perRank(ctx, name, help),
    collect() {
      this.reset();
      for (const { group, rank } of ranks(ctx)) {
        const value = pick(rank);
        if (value !== null) this.set({ model, group, dp_rank: String(rank.engineIndex) }, value);
      }
    },
  });
}

/** A per-rank counter mirroring a cumulative count of each rank at every scrape. */
function rankCounter(ctx: EngineSeriesContext, name: string, help: string, pick: (r: BackendRankState) => number) {
  const model = ctx.model;
  new Counter({
    ...perRank(ctx, name, help),
    collect() {
      this.reset();
      for (const { group, rank: r } of ranks(ctx)) this.inc({ model, group, dp_rank: String(r.engineIndex) }, pick(r));
    },
  });
}

/** A per-group counter (labels model, group) mirroring one of the client's cumulative `stats` at every scrape. */
function statCounter(ctx: EngineSeriesContext, name: string, help: string, pick: (s: BackendStats) => number): void {
  const model = ctx.model;
  new Counter({
    name,
    help,
    labelNames: ['model', 'group'],
    registers: ctx.registers,
    collect() {
      this.reset();
      for (const g of ctx.groups()) this.inc({ model, group: g.name }, pick(g.backend.stats));
    },
  });
}

/** A counter with one series per key of a `Record<key, count>` read at scrape time, for every labelled row. */
function recordCounter(
  ctx: EngineSeriesContext,
  name: string,
  help: string,
  labels: string[],
  key: string,
  rows: () => Array<[Record<string, string>, Readonly<Record<string, number>>]>,
): void {
  const model = ctx.model;
  new Counter({
    name,
    help,
    labelNames: ['model', ...labels, key],
    registers: ctx.registers,
    collect() {
      this.reset();
      for (const [values, counts] of rows())
        for (const [k, n] of Object.entries(counts)) this.inc({ model, ...values, [key]: k }, n);
    },
  });
}

/** Per-rank load, in-flight and dispatch series, group liveness, and the load-signal guards (issue 12). */
function registerRankLoadSeries(ctx: EngineSeriesContext): void {
  const model = ctx.model;
  rankGauge(
    ctx,
    'model_gateway_engine_running_requests',
    'Requests the DP rank last reported as running (TokenSpeed counts waiting ones too), from its stored load',
    (r) => r.load?.numRunning ?? null,
  );
  rankGauge(
    ctx,
    'model_gateway_engine_waiting_requests',
    "Length of the DP rank's scheduler waiting queue, from its stored load",
    (r) => r.load?.numWaiting ?? null,
  );
  rankGauge(
    ctx,
    'model_gateway_engine_kv_cache_usage',
    'KV cache usage of the DP rank as a ratio 0..1, from its stored load',
    (r) => r.load?.kvCacheUsage ?? null,
  );
  rankGauge(
    ctx,
    'model_gateway_rank_inflight_requests',
    "Size of the DP rank's in-flight set (routed by this gateway, not yet retired)",
    (r) => r.inFlight,
  );
  new Gauge({
    name: 'model_gateway_engine_alive',
    help: 'Whether the engine group can take requests now (1) or not (0: starting, or no rank ready)',
    labelNames: ['model', 'group', 'engine'],
    registers: ctx.registers,
    collect() {
      this.reset();
      for (const g of ctx.groups()) this.set({ model, group: g.name, engine: g.engine }, g.backend.canServe() ? 1 : 0);
    },
  });
  new Counter({
    name: 'model_gateway_rank_dispatches_total',
    help: 'Requests dispatched to the DP rank, pinned (X-data-parallel-rank) or chosen by the DP policy',
    labelNames: ['model', 'group', 'dp_rank', 'pinned'],
    registers: ctx.registers,
    collect() {
      this.reset();
      for (const { group, rank: r } of ranks(ctx)) {
        this.inc({ model, group, dp_rank: String(r.engineIndex), pinned: 'true' }, r.dispatchedPinned);
        this.inc({ model, group, dp_rank: String(r.engineIndex), pinned: 'false' }, r.dispatchedUnpinned);
      }
    },
  });
  rankCounter(
    ctx,
    'model_gateway_rank_clamp_events_total',
    'Release-clamp (zero-on-empty) events of the DP rank',
    (r) => r.clampEvents,
  );

  // Load-signal guards (issue 12; dp-routing.md 14.1, 14.3): report age and the sole-client guard per rank.
  rankGauge(
    ctx,
    'model_gateway_rank_load_age_seconds',
    "Seconds since the DP rank's stored load report arrived; it counts less as it ages and not at all past the horizon",
    (r) => (r.loadAgeMs === undefined || r.loadAgeMs === null ? null : r.loadAgeMs / 1000),
  );
  rankGauge(
    ctx,
    'model_gateway_rank_sole_client_guard',
    "1 while the DP rank's reports show another client's work there, so zero-on-empty is suspended for it",
    (r) => (r.soleClientGuard === undefined ? null : r.soleClientGuard ? 1 : 0),
  );
  new Counter({
    name: 'model_gateway_rank_sole_client_guard_transitions_total',
    help: 'Times the sole-client guard of the DP rank engaged (foreign work seen) or disengaged (reports agree again)',
    labelNames: ['model', 'group', 'dp_rank', 'transition'],
    registers: ctx.registers,
    collect() {
      this.reset();
      for (const { group, rank: r } of ranks(ctx)) {
        if (r.guardEngagements === undefined) continue;
        const dp_rank = String(r.engineIndex);
        this.inc({ model, group, dp_rank, transition: 'engaged' }, r.guardEngagements);
        this.inc({ model, group, dp_rank, transition: 'disengaged' }, r.guardDisengagements ?? 0);
      }
    },
  });
}

/** The group clients' cumulative counts: decode errors, aborts, mismatches, revivals, group-scope failures. */
function registerClientCounters(ctx: EngineSeriesContext): void {
  statCounter(
    ctx,
    'model_gateway_decode_errors_total',
    'Engine output messages that failed to decode',
    (s) => s.decodeErrors,
  );
  statCounter(ctx, 'model_gateway_aborts_sent_total', 'ABORT messages sent to engine ranks', (s) => s.abortsSent);
  statCounter(
    ctx,
    'model_gateway_rank_mismatches_total',
    'Output rows naming a DP rank other than the one their request was sent to; dropped and ABORTed at the sender',
    (s) => s.rankMismatches,
  );
  statCounter(
    ctx,
    'model_gateway_unattributed_engine_dead_total',
    'ENGINE_CORE_DEAD frames no vanished identity and no quiet rank explained (every rank still answered); ignored',
    (s) => s.unattributedSentinels,
  );
  statCounter(
    ctx,
    'model_gateway_decode_suspects_total',
    'DP ranks taken out of rotation for sending nothing decodable while undecodable output arrived',
    (s) => s.decodeSuspects,
  );
  statCounter(
    ctx,
    'model_gateway_rank_revivals_total',
    'Dead DP ranks that answered again and came back into rotation',
    (s) => s.revivals,
  );
  recordCounter(
    ctx,
    'model_gateway_engine_failures_total',
    'Group-scope failures (every request of the group failed) by cause',
    ['group'],
    'cause',
    () => ctx.groups().map((g) => [{ group: g.name }, g.backend.stats.failures]),
  );
}

/** Rank lifecycle (issue #8): per-rank state, rejoins, stalls, deaths; refused handshake messages; orphan outputs. */
function registerLifecycleSeries(ctx: EngineSeriesContext): void {
  const model = ctx.model;
  new Gauge({
    name: 'model_gateway_rank_state',
    help: 'Liveness of the DP rank: 1 for its current state (joining, ready, stalled, dead), 0 for the others',
    labelNames: ['model', 'group', 'dp_rank', 'state'],
    registers: ctx.registers,
    collect() {
      this.reset();
      for (const { group, rank: r } of ranks(ctx)) {
        for (const state of RANK_STATES)
          this.set({ model, group, dp_rank: String(r.engineIndex), state }, r.state === state ? 1 : 0);
      }
    },
  });
  rankCounter(
    ctx,
    'model_gateway_rank_rejoins_total',
    'Handshakes the DP rank completed after its first (a restarted engine joining again)',
    (r) => r.rejoins,
  );
  rankCounter(
    ctx,
    'model_gateway_rank_stalls_total',
    'Times the DP rank held requests and sent nothing for the stall timeout',
    (r) => r.stalls,
  );
  recordCounter(
    ctx,
    'model_gateway_rank_deaths_total',
    'Times the DP rank was found dead, by cause',
    ['group', 'dp_rank'],
    'cause',
    () => ranks(ctx).map(({ group, rank: r }) => [{ group, dp_rank: String(r.engineIndex) }, r.deaths]),
  );
  recordCounter(
    ctx,
    'model_gateway_handshake_rejected_total',
    'Handshake-socket and input-socket messages the gateway refused and ignored, by reason',
    ['group'],
    'reason',
    () => ctx.groups().map((g) => [{ group: g.name }, g.backend.stats.handshakeRejected]),
  );
  statCounter(
    ctx,
    'model_gateway_orphan_outputs_total',
    'Output rows for requests their rank no longer owns (failed by a death, stall or group failure); each id is ABORTed once',
    (s) => s.orphanOutputs,
  );
}

/** The engine output contract (issue 26 part 4): contract breaks per rank, rows for ids never issued. */
function registerOutputContractSeries(ctx: EngineSeriesContext): void {
  recordCounter(
    ctx,
    'model_gateway_rank_engine_errors_total',
    'Outputs of the DP rank that broke the output contract, by kind: max-tokens-overrun (tokens past max_tokens: cut ' +
      "there, the rest ABORTed), invalid-token-id (a token id outside the tokenizer's vocabulary: the request failed, 502)",
    ['group', 'dp_rank'],
    'kind',
    () => ranks(ctx).map(({ group, rank: r }) => [{ group, dp_rank: String(r.engineIndex) }, r.engineErrors ?? {}]),
  );
  statCounter(
    ctx,
    'model_gateway_unknown_outputs_total',
    'Output rows for request ids this gateway never issued (or forgot long ago); dropped',
    (s) => s.unknownOutputs,
  );
}

/** Flow control (issue 30 part 3; engine-client/flow-control.ts): the queue per band, how queued requests ended. */
function registerFlowControlSeries(ctx: EngineSeriesContext): void {
  const model = ctx.model;
  new Gauge({
    name: 'model_gateway_flow_control_queued_requests',
    help: "Requests waiting in the engine group's flow-control queue (the group is saturated), by priority band",
    labelNames: ['model', 'group', 'band'],
    registers: ctx.registers,
    collect() {
      this.reset();
      for (const g of ctx.groups()) {
        const f = g.backend.stats.flowControl;
        if (f === null) continue;
        f.queuedByBand.forEach((n, b) => this.set({ model, group: g.name, band: PRIORITY_BANDS[b] ?? String(b) }, n));
      }
    },
  });
  recordCounter(
    ctx,
    'model_gateway_flow_control_requests_total',
    'Requests that met a saturated engine group, by how they ended: granted (waited, then let through to placement), refused (not queued: queue or tenant share full), timed_out, shed (dropped for a more urgent request), left (the client left while waiting), unavailable (no rank could serve any more)',
    ['group'],
    'outcome',
    () =>
      ctx.groups().flatMap((g) => {
        const f = g.backend.stats.flowControl;
        return f === null ? [] : [[{ group: g.name }, f.outcomes] as [Record<string, string>, Record<string, number>]];
      }),
  );
}

/** Prefix-cache routing (issue 29 part 3): the policy's predictions against the engines' reports; KV-event streams. */
function registerCacheRoutingSeries(ctx: EngineSeriesContext): void {
  const precision: Array<[string, string, (p: BackendStats['routingPrecision']) => number]> = [
    ['predictions', 'Requests placed by the policy whose engine reported cached_tokens', (p) => p.requests],
    [
      'predicted_cached_tokens',
      'Prompt tokens the policy expected the chosen rank to serve from its cache',
      (p) => p.predictedTokens,
    ],
    [
      'confirmed_cached_tokens',
      'Of those, tokens the engine did serve from its cache (sum of min(predicted, reported)); precision = confirmed / predicted',
      (p) => p.confirmedTokens,
    ],
    [
      'reported_cached_tokens',
      'Prompt tokens the engines reported served from cache for those requests',
      (p) => p.reportedTokens,
    ],
  ];
  for (const [name, help, pick] of precision) {
    statCounter(ctx, `model_gateway_routing_${name}_total`, help, (s) => pick(s.routingPrecision));
  }
  const kv = (s: BackendStats) => s.kvEvents;
  type KvStats = NonNullable<BackendStats['kvEvents']>;
  /** A per-group counter with one series per key of `pick`'s record, for the groups that have KV events. */
  const kvRecord = (name: string, help: string, key: string, pick: (k: KvStats) => Record<string, number>): void =>
    recordCounter(ctx, name, help, ['group'], key, () =>
      ctx.groups().flatMap((g) => {
        const k = kv(g.backend.stats);
        return k === null ? [] : [[{ group: g.name }, pick(k)] as [Record<string, string>, Record<string, number>]];
      }),
    );
  statCounter(
    ctx,
    'model_gateway_kv_event_batches_total',
    'KV-event batches applied to the exact index',
    (s) => kv(s)?.view.batches ?? 0,
  );
  kvRecord(
    'model_gateway_kv_event_unsure_total',
    "Times a rank's exact index stopped being trusted (scored by the approximate index meanwhile), by reason: unsure (lost batches, undecodable frames) or silent (no events after prompts were routed there)",
    'reason',
    (k) => ({ unsure: k.view.unsure, silent: k.view.silent }),
  );
  statCounter(
    ctx,
    'model_gateway_kv_event_publisher_restarts_total',
    "KV-event publishers seen restarting (seq back to 0): the rank's index was forgotten",
    (s) => kv(s)?.view.resets ?? 0,
  );
  kvRecord(
    'model_gateway_kv_event_frames_dropped_total',
    'KV-event messages dropped by the subscribers, by reason: undecodable (logged; the rank turns unsure) or other_topic',
    'reason',
    (k) => ({ undecodable: k.streams.badFrames, other_topic: k.streams.otherTopics }),
  );
  kvRecord(
    'model_gateway_kv_event_replays_total',
    "Replays asked of the ranks' replay sockets (on each connect and each seq gap), by outcome: requested, failed (timed out or the socket failed)",
    'outcome',
    (k) => ({ requested: k.streams.replays, failed: k.streams.replayFailures }),
  );
  statCounter(
    ctx,
    'model_gateway_kv_index_dropped_stores_total',
    'Announced blocks the exact index did not keep: the per-rank block cap was reached',
    (s) => kv(s)?.index.droppedStores ?? 0,
  );
}
