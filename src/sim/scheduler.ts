/**
 * A pure, deterministic model of one TokenSpeed DP rank's continuous-batching scheduler: no timers, no sockets,
 * no clocks (the caller passes `nowMs` where a time is needed). The engine loop (`engine.ts`) drives it one round at
 * a time: `plan()` (admission, KV allocation, step time, load snapshot), then after the simulated forward pass,
 * `commit()` (one decode token per planned request, finish checks, stream cadence).
 *
 * Wire behaviour it reproduces (engine-wire.md, TokenSpeed `lightseekorg/tokenspeed` as of PR #1200 / #1079):
 * - section 4.4: `max_new_tokens` (nil or explicit) is clamped to `min(2^30, (context_len − 1) − len(input_ids) − 1)`;
 * - section 4.6: a request with a validation error is admitted already finished and streams exactly one terminal
 *   `abort` row at admission, carrying the **previous** round's load tail; it never counts in `num_running`;
 * - section 4.7: a client ABORT is silent (no row); an abort for a rid not registered yet is remembered (TTL-swept)
 *   and applied when the rid arrives;
 * - section 4.8: finish checks in TokenSpeed's order (`length` at `max_new_tokens` first; then, unless `ignore_eos`,
 *   `stop` on a stop token id or an EOS id, the token included in `output_ids`); stream cadence (`stream`: a row every
 *   `stream_interval` tokens, count mod k == 1 for k > 1; not streaming: the first token, every 50th, the finish);
 *   never an empty batch; a finished request appears in exactly one terminal row;
 * - section 4.9: the load snapshot is sampled once per round after planning and before committing, so the batch
 *   carrying a request's terminal row still counts it in `num_running` and its pages in `kv_active_pages`;
 *   `num_running` counts every registered, not yet finished request **including** the waiting ones.
 *
 * vLLM rules (`finishRules: 'vllm'`, the simulated vLLM EngineCore; engine-wire.md 5.3, 5.9, 5.11; vLLM
 * `v1/core/sched/utils.py` `check_stop`): the engine adds no EOS of its own; below `min_tokens` nothing stops; then
 * the request's EOS id (`_eos_token_id`, `SimRequest.eosTokenIds`) finishes `stop` with no stop reason, a request stop
 * token id finishes `stop` with `stopReason` = that id, and only then `length` (at `max_tokens`, or when prompt +
 * output reach `max_model_len`: the limit is `min(max_tokens, max_model_len − prompt_len)`, no TokenSpeed clamp);
 * `ignoreEos` is not consulted (the gateway already left the EOS ids out, gateway.md 7).
 *
 * Sim-specific choices (not TokenSpeed facts): a request holds `ceil((prompt + generated) / 16)` KV pages, where
 * `generated` includes the token the current round produces; when a running request cannot grow, the newest running
 * requests are **preempted** (retracted) to the head of the waiting queue and their pages freed, then recompute their
 * prompt and generated tokens on re-admission, as vLLM's recompute preemption does (vLLM `v1/core/sched/scheduler.py`
 * `schedule()`: on a failed `allocate_slots` it pops the last running request, frees its blocks and
 * `prepend_request`s it to `waiting`, preempting itself when it is the newest; no new request is admitted in a step
 * that preempted; SGLang's retraction is the same idea); preemptions are counted (`SchedulerState.preemptions`), and
 * `num_running` / `num_waiting` of the round's tail already reflect them (issue #5 part 2); a lone request that outgrows the whole KV cache is finished by the engine with a terminal
 * `abort` row (an engine-initiated abort, which TokenSpeed does report; 4.7); an empty prompt, or a prompt that
 * cannot fit the context or the KV cache, is rejected like a validation error; a round with nothing to run takes no
 * snapshot.
 *
 * Prefix cache (issue 12 part 1; `SchedulerConfig.prefixCaching`, on by default as in vLLM V1 and TokenSpeed): KV
 * pages live in a `SimPrefixCache` (prefix-cache.ts, modelled on vLLM's block pool). Every full 16-token block of a
 * request's tokens (prompt, then generated tokens as they fill a block) is named by its chained hash
 * (src/protocols/block-hash.ts) once computed, and stays resident after the request ends until LRU eviction; blocks in
 * use are shared, never evicted. At admission the leading resident blocks of the request's tokens are hits (at most
 * `floor((tokens − 1) / 16)` blocks: at least one token is always computed, as vLLM's `get_computed_blocks` does);
 * hit tokens take no prefill time and no new page. A request's `cached_tokens` (every TokenSpeed row; vLLM
 * `prefill_stats.num_cached_tokens`) is its hit at first admission; a recompute after preemption may hit more but
 * does not change it. `kv_active_pages` counts pages in use, not idle cached blocks (vLLM's `kv_cache_usage` counts
 * cached-but-free blocks as free too).
 *
 * Heterogeneous ranks (issue #5 part 2, a noisy neighbour): `SchedulerConfig.slowdown` multiplies every step time.
 * Time scale: the scheduler never reads a clock, so its decisions depend only on the order of `add` / `abort` /
 * `plan` / `commit` calls; the engine's `timeScale` only stretches the wall time between them (see `virtual-run.ts`).
 */

import { IdTable } from '../collections/id-table.js';
import { DEFAULT_BLOCK_TOKENS, ROOT_BLOCK_HASH, blockHashes, hashBlock } from '../protocols/block-hash.js';
import { SimPrefixCache, type PrefixMatch } from './prefix-cache.js';
import { SimLoraSlots } from './lora-slots.js';
import { simEmbedding } from './pooling.js';

/** KV page size in tokens (the sim's `prefix_granularity`): one prefix-cache block. */
export const KV_PAGE_TOKENS = DEFAULT_BLOCK_TOKENS;

/** TokenSpeed's upper bound for `max_new_tokens` (engine-wire.md 4.4): 2^30 tokens. */
export const MAX_NEW_TOKENS_CAP = 2 ** 30;

/** Row cadence of a non-streaming request after its first token (engine-wire.md 4.8): every 50 tokens. */
export const NON_STREAM_INTERVAL = 50;

/**
 * The simulated duration of one round's forward pass, in ms:
 * `baseMs + perPrefillTokenMs × prefill_tokens + perDecodeTokenMs × decode_tokens`.
 */
export interface StepTimeModel {
  /** Fixed cost of any round that runs a forward pass (ms). */
  baseMs: number;
  /** Cost per prompt (or recomputed) token prefilled this round (ms/token). */
  perPrefillTokenMs: number;
  /** Cost per request decoding one token this round (ms/token). */
  perDecodeTokenMs: number;
  /** Cost of loading one LoRA adapter into a GPU slot this round (ms; lora-slots.ts). Absent: `DEFAULT_LORA_LOAD_MS`. */
  perLoraLoadMs?: number;
}

/** Default cost of one LoRA adapter load (ms): a small adapter moved from host memory into a GPU slot. */
export const DEFAULT_LORA_LOAD_MS = 25;

/** Step-time defaults, roughly a small model on one GPU: 64 decoding requests ≈ 14 ms, a 1000-token prefill ≈ 28 ms. */
export const DEFAULT_STEP_TIME_MODEL: Readonly<StepTimeModel> = Object.freeze({
  baseMs: 8,
  perPrefillTokenMs: 0.02,
  perDecodeTokenMs: 0.1,
});

/** Fixed configuration of one simulated rank. */
export interface SchedulerConfig {
  /** The rank's engine index, stamped on every batch (engine-wire.md 4.8 `engine_index`). */
  engineIndex: number;
  /** Cap on running (admitted) requests, ≥ 1 (TokenSpeed `max_running_requests`, reported as `max_num_seqs`). */
  maxRunning: number;
  /** Usable device KV pages of 16 tokens, ≥ 1 (`kv_total_pages`, `num_gpu_blocks`). */
  kvTotalPages: number;
  /** Context length in tokens (`max_model_len`), ≥ 3. */
  maxModelLen: number;
  /** The model's EOS token ids (finish check 2, engine-wire.md 4.8). */
  eosTokenIds: readonly number[];
  /** Step-time model; defaults to `DEFAULT_STEP_TIME_MODEL`. */
  stepTime?: StepTimeModel;
  /**
   * Multiplier (ratio > 0, finite) on every round's step time, for a heterogeneous rank (e.g. 2.0 = a noisy neighbour
   * halves its speed; issue #5 part 2). Default 1. Changes `RoundPlan.stepTimeMs` only, never a scheduling decision.
   */
  slowdown?: number;
  /** Server default `--stream-interval` in tokens (engine-wire.md 1.2), default 1. */
  streamInterval?: number;
  /** How long an abort for a not-yet-registered rid is remembered (ms, against the caller's `nowMs`), default 60 000. */
  pendingAbortTtlMs?: number;
  /**
   * Whose limit clamp and finish checks to apply (default `'tokenspeed'`, engine-wire.md 4.4 / 4.8; `'vllm'`: see the
   * module comment, engine-wire.md 5.9 / 5.11).
   */
  finishRules?: FinishRules;
  /** Keep computed full blocks as a prefix cache (see the module comment). Default true. */
  prefixCaching?: boolean;
  /**
   * Record the prefix cache's KV events for `takeKvEvents` (a block newly resident, a block evicted; kv-events.ts
   * publishes them). Default false.
   */
  kvEvents?: boolean;
  /**
   * How the waiting queue is ordered (vLLM `--scheduling-policy`; default `'fcfs'`). `'priority'`: by the request's
   * `priority` (lower first), then arrival, and a shortage of KV pages preempts the running request with the largest
   * (priority, arrival) instead of the newest (vLLM `v1/core/sched/scheduler.py` `schedule()`, `request_queue.py`).
   */
  schedulingPolicy?: SchedulingPolicy;
  /**
   * LoRA adapters a step may run at once (vLLM `--max-loras`, default 1): a waiting request whose adapter would be one
   * too many is skipped until a running adapter's requests finish (lora-slots.ts).
   */
  maxLoras?: number;
}

/** vLLM's `--scheduling-policy` values the simulated ranks model. */
export const SCHEDULING_POLICIES = ['fcfs', 'priority'] as const;
export type SchedulingPolicy = (typeof SCHEDULING_POLICIES)[number];

/**
 * A change to a rank's prefix cache, in the scheduler's own block hashes (src/protocols/block-hash.ts): a block that
 * became resident (its parent block, null for a sequence's first, and its `KV_PAGE_TOKENS` token ids), or one that was
 * evicted. In the order they happened: an allocation's evictions come before the blocks it then stores, as in vLLM.
 */
export type SimKvEvent =
  | { readonly kind: 'stored'; readonly hash: number; readonly parent: number | null; readonly tokens: number[] }
  | { readonly kind: 'removed'; readonly hash: number }
  | { readonly kind: 'cleared'; readonly hashes: readonly number[] };

/** Whose `max_new_tokens` clamp and finish-check order the scheduler applies. */
export type FinishRules = 'tokenspeed' | 'vllm';

/** One sampled token and its log-probability (natural log). */
export interface SampledToken {
  tokenId: number;
  logprob: number;
}

/** Where a request's generated tokens come from (the text model, or a scripted list in tests). */
export interface TokenSource {
  /**
   * The next token. `allowStop` is false while `min_new_tokens` is not reached or with `ignore_eos`: the source should
   * then not produce an EOS token (TokenSpeed masks stop tokens below `min_new_tokens`).
   */
  next(ctx: { allowStop: boolean }): SampledToken;
}

/** A decoded, finalized request as the scheduler sees it (built from `TokenizedGenerateReqInput` by the engine). */
export interface SimRequest {
  rid: string;
  promptTokenIds: readonly number[];
  /** Requested limit in tokens; null = clamp to the context (engine-wire.md 4.4). */
  maxNewTokens: number | null;
  /** Stop tokens are masked until this many tokens were generated. */
  minNewTokens: number;
  /** Request stop token ids (null or empty = none); the matching token is included in the output. */
  stopTokenIds: readonly number[] | null;
  /**
   * This request's EOS ids for the finish check. TokenSpeed rules: absent = the rank's `eosTokenIds`. vLLM rules:
   * absent = none (EngineCore stops on EOS only when the request names it, `_eos_token_id`).
   */
  eosTokenIds?: readonly number[];
  /** TokenSpeed rules: skip the stop/EOS check and keep the source from emitting EOS. Ignored under vLLM rules. */
  ignoreEos: boolean;
  /** Streaming cadence (engine-wire.md 4.8). */
  stream: boolean;
  /** Per-request `stream_interval` in tokens; null = the server default. */
  streamInterval: number | null;
  /** Fill the logprob columns. */
  returnLogprob: boolean;
  /** The LoRA adapter the request runs with (vLLM `lora_request`: its int id, name, path); absent: the base model. */
  lora?: { id: number; name: string; path: string };
  /** Non-null: the request is admitted finished with a terminal `abort` row (engine-wire.md 4.6). */
  validationError: string | null;
  tokens: TokenSource;
  /** vLLM's request `priority` (lower is served first under `schedulingPolicy: 'priority'`); absent = 0. */
  priority?: number;
  /** vLLM's `trace_headers` (W3C `traceparent`, `tracestate`); absent: the request is not traced. */
  traceHeaders?: Readonly<Record<string, string>>;
  /**
   * Present: a pooling request (vLLM `PoolingParams`, task `embed`): it is prefilled, then finishes in the same step
   * with `stop` and no token, its row carrying the pooled vector (pooling.ts). Elements; whether to normalize.
   */
  pooling?: { dimensions: number; normalize: boolean };
}

/** A finish reason as it travels in `finished_reasons` ("" = not finished). */
export type SimFinishReason = '' | 'stop' | 'length' | 'abort';

/** One output row (one column entry of `BatchTokenIDOutSlim`, engine-wire.md 4.8). */
export interface SimRow {
  rid: string;
  /** New token ids since this rid's previous row. */
  outputIds: number[];
  finishedReason: SimFinishReason;
  /** len(input_ids). */
  promptTokens: number;
  /** Cumulative generated tokens. */
  completionTokens: number;
  /** Prompt tokens served from the prefix cache at the request's first admission (0 before it was admitted). */
  cachedTokens: number;
  /** Logprob of each new token; [] unless requested. */
  logprobVals: readonly number[];
  /** Token id of each logprob; [] unless requested. */
  logprobIdx: readonly number[];
  /** For a `stop` finish on one of the request's stop token ids (not an EOS id): that id (vLLM `stop_reason`); else null. */
  stopReason: number | null;
  /**
   * Tokens (re)computed by the prefill scheduled since this rid's previous row (prompt, plus already generated tokens
   * for a retracted request, minus the prefix-cache hits of that prefill), or null when no prefill ran since then
   * (vLLM `prefill_stats.num_computed_tokens`, engine-wire.md 5.9).
   */
  prefillTokens: number | null;
  /** A pooling request's vector, on its terminal row only (vLLM `pooling_output`). */
  pooled?: Float32Array;
}

/** The four-field load tail of the 14-element `BatchTokenIDOutSlim` (engine-wire.md 4.9). Counts; pages. */
export interface LoadTail {
  numRunning: number;
  numWaiting: number;
  kvActivePages: number;
  /** 0 = no snapshot yet. */
  kvTotalPages: number;
}

/** One output batch (never empty): rows plus the rank's engine index and load tail. */
export interface SimBatch {
  engineIndex: number;
  rows: SimRow[];
  tail: LoadTail;
}

/** What `plan()` decided for this round. */
export interface RoundPlan {
  /** Terminal `abort` rows of requests rejected at admission, stamped with the previous tail; null when none. */
  admission: SimBatch | null;
  /** Requests that will produce a token when `commit()` runs. */
  plannedCount: number;
  /** Tokens prefilled this round (new admissions plus recomputed retracted requests), prefix-cache hits excluded. */
  prefillTokens: number;
  /** Prefix-cache lookups this round: admissions, and the tokens they looked up (vLLM `prefix_cache_stats`). */
  cacheRequests: number;
  cacheQueryTokens: number;
  /** Tokens of those lookups served from the prefix cache. */
  cacheHitTokens: number;
  /** Requests decoding one token this round without a prefill. */
  decodeTokens: number;
  /** Simulated forward-pass duration (ms, including the rank's `slowdown`); 0 when nothing is planned. */
  stepTimeMs: number;
  /** Requests preempted this round: moved back to the waiting queue because the KV cache ran out. */
  retracted: number;
  /** The tail sampled this round (the previous one when nothing was planned). */
  tail: LoadTail;
}

/** Outcome of `add()`. */
export type AddResult =
  /** Registered and queued. */
  | 'queued'
  /** Admitted finished: a terminal `abort` row goes out with the next `plan()`. */
  | 'rejected'
  /** An earlier ABORT named this rid: dropped silently. */
  | 'aborted'
  /** A request with this rid is already registered: dropped (nothing emitted). */
  | 'duplicate';

/** Counters for logs and tests. */
export interface SchedulerState {
  running: number;
  waiting: number;
  /** Registered, not finished (waiting + running). */
  registered: number;
  /** Pages in use (kv_active_pages). */
  activePages: number;
  /** Pages not in use: free ones plus idle cached blocks (evictable). */
  freePages: number;
  /** Idle prefix-cache blocks (resident, referenced by no request; part of `freePages`). */
  cachedPages: number;
  /** Idle blocks evicted since start. */
  cacheEvictions: number;
  /** Cumulative prefix-cache lookups since start: admissions, tokens looked up, tokens hit. */
  cacheRequests: number;
  cacheQueryTokens: number;
  cacheHitTokens: number;
  pendingAborts: number;
  pendingRejections: number;
  /** True between `plan()` and `commit()`. */
  roundOpen: boolean;
  /** Cumulative preemptions (running requests moved back to the waiting queue for lack of KV pages) since start. */
  preemptions: number;
  /** Cumulative LoRA adapter loads into GPU slots since start (lora-slots.ts). */
  loraLoads: number;
  /** Adapter name → running / waiting requests with it (vLLM's `running_lora_adapters`, `waiting_lora_adapters`). */
  loraRunning: Record<string, number>;
  loraWaiting: Record<string, number>;
}

type ReqState = 'waiting' | 'running' | 'done';

interface Req {
  spec: SimRequest;
  /** The order requests were added in (vLLM orders equal priorities by arrival time). */
  arrival: number;
  promptLen: number;
  /** Clamped limit. */
  maxNew: number;
  stopIds: ReadonlySet<number>;
  /** EOS ids of the finish check (see `SimRequest.eosTokenIds`). */
  eosIds: ReadonlySet<number>;
  /** vLLM rules: whether an EOS token from the source would end the request (else the source must not emit one). */
  sourceMayStop: boolean;
  interval: number;
  generated: number;
  /** Pages held: the first `held` are the hashed blocks `hashes[0 .. held)`, the rest private (prefix-cache.ts). */
  pages: number;
  held: number;
  /** Prompt then generated token ids (the sequence the block hashes cover). */
  tokenIds: number[];
  /** Chained hashes of every full block of `tokenIds` (extended as generated tokens fill a block). */
  hashes: number[];
  /** Prefix-cache hit tokens of the current admission (skipped by its prefill). */
  hitTokens: number;
  /** Hit tokens at first admission (`SimRow.cachedTokens`); null before it. */
  cachedTokens: number | null;
  /** Needs a (re)prefill of prompt + generated tokens when next run. */
  needsPrefill: boolean;
  /** Outgrew the whole KV cache: `commit()` finishes it with `abort` instead of decoding. */
  outOfMemory: boolean;
  state: ReqState;
  pendingIds: number[];
  pendingLogprobs: number[];
  /** Tokens of a prefill not yet reported in a row (see `SimRow.prefillTokens`). */
  pendingPrefill: number | null;
}

/** Pages needed to hold `tokens` tokens of KV. */
export function pagesFor(tokens: number): number {
  return Math.ceil(tokens / KV_PAGE_TOKENS);
}

/**
 * The engine's `max_new_tokens` clamp (engine-wire.md 4.4): `min(2^30, (context_len − 1) − prompt_len − 1)` applied to
 * the requested value (nil = no request limit). Can be negative for an over-long prompt.
 */
export function clampMaxNewTokens(requested: number | null, promptLen: number, maxModelLen: number): number {
  const bound = Math.min(MAX_NEW_TOKENS_CAP, maxModelLen - 1 - promptLen - 1);
  return requested === null ? bound : Math.min(requested, bound);
}

/**
 * vLLM EngineCore's output limit (engine-wire.md 5.3 `max_tokens`; vLLM `check_stop`): `min(max_tokens,
 * max_model_len − prompt_len)` (null = no request limit). Negative for a prompt longer than the context.
 */
export function vllmMaxNewTokens(requested: number | null, promptLen: number, maxModelLen: number): number {
  const bound = maxModelLen - promptLen;
  return requested === null ? bound : Math.min(requested, bound);
}

/** The logprob columns of a row that did not ask for them (shared: rows are read, never written, by their users). */
const NO_LOGPROBS: readonly number[] = Object.freeze([]);

const NO_ADAPTERS: Record<string, number> = Object.freeze({}) as Record<string, number>;

/** Adapter name → requests of `reqs` that run with it. */
function adapterCounts(reqs: readonly Req[]): Record<string, number> {
  // No prototype: an adapter may be named `constructor` or `__proto__`.
  const out = Object.create(null) as Record<string, number>;
  for (const r of reqs) {
    const name = r.spec.lora?.name;
    if (name !== undefined) out[name] = (out[name] ?? 0) + 1;
  }
  return out;
}

const ZERO_TAIL: LoadTail = Object.freeze({ numRunning: 0, numWaiting: 0, kvActivePages: 0, kvTotalPages: 0 });

/** Whether `a` is served before `b` under the priority policy: lower `priority` (absent = 0), then earlier arrival. */
function sortsBefore(a: Req, b: Req): boolean {
  const pa = a.spec.priority ?? 0;
  const pb = b.spec.priority ?? 0;
  return pa !== pb ? pa < pb : a.arrival < b.arrival;
}

/**
 * The continuous-batching scheduler of one simulated rank. Not re-entrant: call `plan()` then `commit()` in turn;
 * `add()` and `abort()` may be called at any time, including between them.
 *
 * Throws `RangeError` from the constructor on a non-positive cap, page count or context length, and `Error` when
 * `plan()` is called while a round is still open.
 */
export class SimScheduler {
  readonly config: Readonly<Required<SchedulerConfig>>;
  private readonly vllm: boolean;
  private readonly eos: ReadonlySet<number>;
  private readonly waiting: Req[] = [];
  private readonly running: Req[] = [];
  /** `schedulingPolicy` is `'priority'`. */
  private readonly byPriority: boolean;
  private arrivals = 0;
  /** An `IdTable`, not a `Map`: one request comes and goes per request (collections/id-table.ts says why). */
  private readonly registered = new IdTable<Req>();
  private readonly rejected: Req[] = [];
  private readonly pendingAborts = new Map<string, number>();
  private planned: Req[] | null = null;
  private readonly cache: SimPrefixCache;
  /** The KV events since the last `takeKvEvents` (null: not recorded). */
  private kvEvents: SimKvEvent[] | null = null;
  private preemptions = 0;
  /** The rank's LoRA slots and the adapters of its running requests (lora-slots.ts). */
  private readonly loras: SimLoraSlots;
  private readonly cacheTotals = { requests: 0, queryTokens: 0, hitTokens: 0 };
  private tail: LoadTail = ZERO_TAIL;

  constructor(config: SchedulerConfig) {
    const intAtLeast = (name: string, v: number, min: number): void => {
      if (!Number.isSafeInteger(v) || v < min)
        throw new RangeError(`SchedulerConfig.${name}: expected an integer ≥ ${min}, got ${v}`);
    };
    intAtLeast('engineIndex', config.engineIndex, 0);
    intAtLeast('maxRunning', config.maxRunning, 1);
    intAtLeast('kvTotalPages', config.kvTotalPages, 1);
    intAtLeast('maxModelLen', config.maxModelLen, 3);
    const stepTime = config.stepTime ?? DEFAULT_STEP_TIME_MODEL;
    for (const [k, v] of Object.entries(stepTime)) {
      if (!Number.isFinite(v) || v < 0)
        throw new RangeError(`SchedulerConfig.stepTime.${k}: expected a finite number ≥ 0, got ${v}`);
    }
    const slowdown = config.slowdown ?? 1;
    if (!Number.isFinite(slowdown) || slowdown <= 0) {
      throw new RangeError(`SchedulerConfig.slowdown: expected a finite number > 0, got ${slowdown}`);
    }
    const streamInterval = config.streamInterval ?? 1;
    intAtLeast('streamInterval', streamInterval, 1);
    this.config = Object.freeze({
      engineIndex: config.engineIndex,
      maxRunning: config.maxRunning,
      kvTotalPages: config.kvTotalPages,
      maxModelLen: config.maxModelLen,
      eosTokenIds: [...config.eosTokenIds],
      stepTime: { ...stepTime },
      slowdown,
      streamInterval,
      pendingAbortTtlMs: config.pendingAbortTtlMs ?? 60_000,
      finishRules: config.finishRules ?? 'tokenspeed',
      prefixCaching: config.prefixCaching ?? true,
      kvEvents: config.kvEvents ?? false,
      schedulingPolicy: config.schedulingPolicy ?? 'fcfs',
      maxLoras: config.maxLoras ?? 1,
    });
    intAtLeast('maxLoras', this.config.maxLoras, 1);
    this.loras = new SimLoraSlots(this.config.maxLoras);
    if (!SCHEDULING_POLICIES.includes(this.config.schedulingPolicy)) {
      throw new RangeError(
        `SchedulerConfig.schedulingPolicy: expected one of ${SCHEDULING_POLICIES.join(', ')}, got ${JSON.stringify(this.config.schedulingPolicy)}`,
      );
    }
    this.byPriority = this.config.schedulingPolicy === 'priority';
    this.cache = new SimPrefixCache(this.config.kvTotalPages, this.config.prefixCaching);
    if (this.config.kvEvents) {
      const events: SimKvEvent[] = [];
      this.kvEvents = events;
      this.cache.onEvict = (hash) => events.push({ kind: 'removed', hash });
    }
    if (this.config.finishRules !== 'tokenspeed' && this.config.finishRules !== 'vllm') {
      throw new RangeError(
        `SchedulerConfig.finishRules: expected 'tokenspeed' or 'vllm', got ${JSON.stringify(this.config.finishRules)}`,
      );
    }
    this.vllm = this.config.finishRules === 'vllm';
    this.eos = new Set(config.eosTokenIds);
  }

  /**
   * Register one request (arrival). Returns what happened to it (see `AddResult`). A request with a validation error,
   * an empty prompt, or a prompt too long for the context or for the whole KV cache is rejected: its terminal `abort`
   * row goes out with the next `plan()`. `nowMs` is only used to sweep remembered aborts.
   */
  add(spec: SimRequest, nowMs = 0): AddResult {
    this.sweepPendingAborts(nowMs);
    if (this.pendingAborts.delete(spec.rid)) return 'aborted';
    if (this.registered.has(spec.rid)) return 'duplicate';
    const promptLen = spec.promptTokenIds.length;
    const maxNew = this.limitFor(spec, promptLen);
    const stopIds = new Set(spec.stopTokenIds ?? []);
    const eosIds =
      spec.eosTokenIds !== undefined ? new Set(spec.eosTokenIds) : this.vllm ? new Set<number>() : this.eos;
    const req: Req = {
      spec,
      arrival: this.arrivals++,
      promptLen,
      maxNew,
      stopIds,
      eosIds,
      sourceMayStop: this.config.eosTokenIds.some((id) => stopIds.has(id) || eosIds.has(id)),
      interval: spec.streamInterval ?? this.config.streamInterval,
      generated: 0,
      pages: 0,
      held: 0,
      tokenIds: [],
      hashes: [],
      hitTokens: 0,
      cachedTokens: null,
      needsPrefill: true,
      outOfMemory: false,
      state: 'waiting',
      pendingIds: [],
      pendingLogprobs: [],
      pendingPrefill: null,
    };
    if (this.rejectionReason(spec, promptLen, maxNew) !== null) {
      req.state = 'done';
      this.rejected.push(req);
      return 'rejected';
    }
    req.tokenIds = [...spec.promptTokenIds];
    if (this.config.prefixCaching) req.hashes = blockHashes(req.tokenIds, KV_PAGE_TOKENS);
    this.registered.set(spec.rid, req);
    if (this.byPriority) this.enqueueByPriority(req);
    else this.waiting.push(req);
    return 'queued';
  }

  /**
   * Why `spec` is admitted finished, or null. Validation errors come first (engine-wire.md 4.6), then the sim's own
   * capacity checks.
   */
  rejectionReason(
    spec: SimRequest,
    promptLen = spec.promptTokenIds.length,
    maxNew = this.limitFor(spec, promptLen),
  ): string | null {
    if (spec.validationError !== null) return spec.validationError;
    if (promptLen === 0) return 'empty prompt';
    if (maxNew < 0) return `prompt of ${promptLen} tokens does not fit max_model_len ${this.config.maxModelLen}`;
    const needPages = pagesFor(promptLen + 1);
    if (needPages > this.config.kvTotalPages) {
      return `prompt of ${promptLen} tokens needs ${needPages} KV pages, the rank has ${this.config.kvTotalPages}`;
    }
    return null;
  }

  /**
   * Client ABORT (engine-wire.md 4.7): each registered rid is dropped and its pages freed, emitting nothing (also
   * when it is planned in the open round); an unknown rid is remembered and applied on arrival. A rid already
   * rejected at admission is left alone (its terminal row still goes out). Returns how many registered requests were
   * dropped.
   */
  abort(rids: readonly string[], nowMs = 0): number {
    this.sweepPendingAborts(nowMs);
    let dropped = 0;
    for (const rid of rids) {
      const req = this.registered.get(rid);
      if (req !== undefined) {
        this.retire(req);
        dropped += 1;
      } else if (!this.rejected.some((r) => r.spec.rid === rid)) {
        this.pendingAborts.delete(rid);
        this.pendingAborts.set(rid, nowMs);
      }
    }
    return dropped;
  }

  /** True while a request with this rid is registered (waiting or running, not finished or aborted). */
  has(rid: string): boolean {
    return this.registered.has(rid);
  }

  /**
   * Take the pending admission rejections now, without a round: their terminal `abort` rows stamped with the last
   * tail, or null when none. `plan()` does this itself; an engine that answers bad requests on arrival (the vLLM
   * flavour) calls it right after `add()`.
   */
  takeRejections(): SimBatch | null {
    if (this.rejected.length === 0) return null;
    const rows = this.rejected.map((r) => this.row(r, [], [], 'abort'));
    this.rejected.length = 0;
    return { engineIndex: this.config.engineIndex, rows, tail: this.tail };
  }

  /** True while anything is registered or a rejection row is pending: the engine should keep running rounds. */
  hasWork(): boolean {
    return this.registered.size > 0 || this.rejected.length > 0;
  }

  /** The last sampled load tail (all zeros before the first round that ran). */
  currentTail(): LoadTail {
    return this.tail;
  }

  /**
   * The rank's true outstanding work in tokens: over every registered request, the tokens its next prefill must
   * (re)compute (prompt + generated, when it needs one, minus what the prefix cache holds of them right now) plus
   * the output tokens it may still generate (limit − generated). What the benchmark's `oracle` DP policy reads
   * (src/engine-client/policies.ts `OracleSource`; issue #5 part 1). An upper bound: a request may stop early on EOS
   * or a stop token.
   */
  outstandingTokens(): number {
    let total = 0;
    for (const r of this.registered.values()) {
      if (r.needsPrefill) total += r.promptLen + r.generated - this.hitBlocks(r).blocks * KV_PAGE_TOKENS;
      total += Math.max(0, r.maxNew - r.generated);
    }
    return total;
  }

  /**
   * How many leading blocks of `tokens` this rank's prefix cache holds now (in use or idle), in tokens (a multiple
   * of 16). For tests and benchmarks; reads only.
   */
  cachedPrefixTokens(tokens: readonly number[]): number {
    if (!this.config.prefixCaching) return 0;
    return this.cache.match(blockHashes(tokens, KV_PAGE_TOKENS)).blocks * KV_PAGE_TOKENS;
  }

  /** Counters (for logs and tests). */
  state(): SchedulerState {
    return {
      running: this.running.length,
      waiting: this.waiting.length,
      registered: this.registered.size,
      activePages: this.cache.inUsePages(),
      freePages: this.cache.availablePages(),
      cachedPages: this.cache.counts().idle,
      cacheEvictions: this.cache.counts().evictions,
      cacheRequests: this.cacheTotals.requests,
      cacheQueryTokens: this.cacheTotals.queryTokens,
      cacheHitTokens: this.cacheTotals.hitTokens,
      pendingAborts: this.pendingAborts.size,
      pendingRejections: this.rejected.length,
      roundOpen: this.planned !== null,
      preemptions: this.preemptions,
      loraLoads: this.loras.loads,
      // Counted only while some request runs with an adapter (the per-step stats read this).
      loraRunning: this.loras.active() ? adapterCounts(this.running) : NO_ADAPTERS,
      loraWaiting:
        this.loras.active() || this.waiting.some((r) => r.spec.lora) ? adapterCounts(this.waiting) : NO_ADAPTERS,
    };
  }

  /**
   * Start a round: stream the admission rejections (previous tail), grow running requests by one token of KV
   * (retracting the newest when pages run out), admit from the FIFO waiting queue while the cap and the free pages
   * allow (no skipping past a head that does not fit its pages; a request whose LoRA adapter would be one more than
   * `maxLoras` is skipped, as vLLM does), compute the step time (LoRA loads included), and sample the load tail.
   * Throws `Error` if the previous round was not committed.
   */
  plan(): RoundPlan {
    if (this.planned !== null) throw new Error('SimScheduler.plan(): the previous round was not committed');
    const admission = this.takeRejections();

    // Grow every running request by the token it decodes this round; retract the newest on shortage.
    let retracted = 0;
    for (let i = 0; i < this.running.length; i++) {
      const r = this.running[i];
      const extra = pagesFor(r.promptLen + r.generated + 1) - r.pages;
      let victim = this.preemptionVictim();
      while (extra > this.freePages() && victim !== null && victim !== r && this.running.length > 1) {
        if (this.running.indexOf(victim) < i) i -= 1; // an earlier request leaves: r moves one place up
        this.retract(victim);
        retracted += 1;
        victim = this.preemptionVictim();
      }
      if (extra > this.freePages()) {
        if (this.running.length > 1) {
          // The others keep running (older ones, or under the priority policy more urgent ones); r waits for them.
          this.retract(r);
          retracted += 1;
          i -= 1;
        } else {
          // r runs alone and still cannot grow: it needs more than the whole cache.
          r.outOfMemory = true;
        }
        continue;
      }
      if (extra > 0) {
        this.cache.allocate(extra);
        r.pages += extra;
      }
    }

    // Admit in FIFO order (not in a round that had to retract, to avoid thrashing).
    const lookups = { requests: 0, queryTokens: 0, hitTokens: 0 };
    let loraLoads = 0;
    if (retracted === 0) {
      let at = 0;
      while (at < this.waiting.length && this.running.length < this.config.maxRunning) {
        const head = this.waiting[at]!;
        // vLLM skips a request whose adapter would exceed max_loras in this step, and looks further down the queue.
        if (head.spec.lora !== undefined && !this.loras.canRun(head.spec.lora.id)) {
          at += 1;
          continue;
        }
        const need = pagesFor(head.promptLen + head.generated + 1);
        if (need > this.config.kvTotalPages) {
          // A retracted request that can never fit again: the engine finishes it (see outOfMemory).
          this.waiting.splice(at, 1);
          head.state = 'running';
          head.outOfMemory = true;
          if (head.spec.lora !== undefined) this.loras.start(head.spec.lora.id);
          this.running.push(head);
          continue;
        }
        // Cached leading blocks are shared, not allocated: only the rest needs free (or evictable) pages.
        const hit = this.hitBlocks(head);
        if (need - hit.blocks > this.freePages() - hit.idle) break;
        this.waiting.splice(at, 1);
        if (head.spec.lora !== undefined && this.loras.start(head.spec.lora.id)) loraLoads += 1;
        this.cache.acquire(head.hashes, hit.blocks);
        this.cache.allocate(need - hit.blocks);
        head.state = 'running';
        head.pages = need;
        head.held = hit.blocks;
        head.hitTokens = hit.blocks * KV_PAGE_TOKENS;
        head.cachedTokens ??= Math.min(head.hitTokens, head.promptLen);
        head.needsPrefill = true;
        this.running.push(head);
        lookups.requests += 1;
        lookups.queryTokens += head.promptLen + head.generated;
        lookups.hitTokens += head.hitTokens;
      }
    }
    this.cacheTotals.requests += lookups.requests;
    this.cacheTotals.queryTokens += lookups.queryTokens;
    this.cacheTotals.hitTokens += lookups.hitTokens;

    let prefillTokens = 0;
    let decodeTokens = 0;
    for (const r of this.running) {
      if (r.outOfMemory) continue;
      if (r.needsPrefill) prefillTokens += r.promptLen + r.generated - r.hitTokens;
      else decodeTokens += 1;
    }
    const plannedCount = this.running.length;
    const st = this.config.stepTime;
    const stepTimeMs =
      plannedCount === 0
        ? 0
        : (st.baseMs +
            st.perPrefillTokenMs * prefillTokens +
            st.perDecodeTokenMs * decodeTokens +
            (st.perLoraLoadMs ?? DEFAULT_LORA_LOAD_MS) * loraLoads) *
          this.config.slowdown;
    if (plannedCount > 0) {
      this.tail = {
        numRunning: this.registered.size,
        numWaiting: this.waiting.length,
        kvActivePages: this.cache.inUsePages(),
        kvTotalPages: this.config.kvTotalPages,
      };
      this.planned = this.running.slice();
    }
    return {
      admission,
      plannedCount,
      prefillTokens,
      decodeTokens,
      stepTimeMs,
      retracted,
      cacheRequests: lookups.requests,
      cacheQueryTokens: lookups.queryTokens,
      cacheHitTokens: lookups.hitTokens,
      tail: this.tail,
    };
  }

  /**
   * Finish the round's forward pass: every planned request still running produces one token; finish checks and the
   * stream cadence decide the rows. Finished requests are released after the snapshot (visible in a later round's
   * tail). Returns the round's batch stamped with this round's tail, or null when no row is due (never empty) or
   * when no round is open (a `plan()` that planned nothing leaves none open).
   */
  commit(): SimBatch | null {
    const planned = this.planned;
    this.planned = null;
    if (planned === null) return null;
    const rows: SimRow[] = [];
    for (const r of planned) {
      if (r.state !== 'running') continue; // aborted (or retracted) since plan()
      if (r.outOfMemory) {
        rows.push(this.row(r, r.pendingIds, r.pendingLogprobs, 'abort'));
        this.retire(r);
        continue;
      }
      if (r.needsPrefill) {
        r.pendingPrefill = r.promptLen + r.generated - r.hitTokens;
        this.cacheComputedBlocks(r); // the prefill computed every full block of prompt + generated
      }
      r.needsPrefill = false;
      const spec = r.spec;
      if (spec.pooling !== undefined) {
        // A pooling request ends with its prefill: the pooler reads the prompt's hidden states, nothing is sampled.
        const row = this.row(r, [], [], 'stop');
        row.pooled = simEmbedding(spec.promptTokenIds, spec.pooling.dimensions, spec.pooling.normalize);
        rows.push(row);
        this.retire(r);
        continue;
      }
      // Below min_new_tokens both engines mask stop tokens, so none can end the request. TokenSpeed: ignore_eos skips
      // check 2. vLLM: the source may only emit EOS when EOS would end the request (its stop set names it).
      const minReached = r.generated >= spec.minNewTokens;
      const allowStop = this.vllm ? minReached && r.sourceMayStop : !spec.ignoreEos && minReached;
      const tok = spec.tokens.next({ allowStop });
      r.generated += 1;
      r.pendingIds.push(tok.tokenId);
      r.tokenIds.push(tok.tokenId);
      if (this.config.prefixCaching && r.tokenIds.length % KV_PAGE_TOKENS === 0) {
        const parent = r.hashes.length === 0 ? ROOT_BLOCK_HASH : r.hashes[r.hashes.length - 1];
        r.hashes.push(hashBlock(parent, r.tokenIds, r.tokenIds.length - KV_PAGE_TOKENS, KV_PAGE_TOKENS));
        this.cacheComputedBlocks(r);
      }
      if (spec.returnLogprob) r.pendingLogprobs.push(tok.logprob);
      let finish: SimFinishReason = '';
      let stopReason: number | null = null;
      if (this.vllm) {
        // vLLM check_stop order: EOS, stop token ids, then the length limit.
        if (minReached && r.eosIds.has(tok.tokenId)) finish = 'stop';
        else if (minReached && r.stopIds.has(tok.tokenId)) {
          finish = 'stop';
          stopReason = tok.tokenId;
        } else if (r.generated >= r.maxNew) finish = 'length';
      } else if (r.generated >= r.maxNew) finish = 'length';
      else if (allowStop && (r.stopIds.has(tok.tokenId) || r.eosIds.has(tok.tokenId))) {
        finish = 'stop';
        if (!r.eosIds.has(tok.tokenId)) stopReason = tok.tokenId;
      }
      if (finish !== '' || this.cadenceDue(r)) {
        const ids = r.pendingIds;
        const lps = r.pendingLogprobs;
        r.pendingIds = [];
        // Without logprobs nothing is ever pushed onto it: keep the (empty) list.
        if (spec.returnLogprob) r.pendingLogprobs = [];
        rows.push(this.row(r, ids, lps, finish, stopReason));
      }
      if (finish !== '') this.retire(r);
    }
    return rows.length > 0 ? { engineIndex: this.config.engineIndex, rows, tail: this.tail } : null;
  }

  private cadenceDue(r: Req): boolean {
    const n = r.generated;
    if (r.spec.stream) return r.interval <= 1 ? true : n % r.interval === 1;
    return n === 1 || n % NON_STREAM_INTERVAL === 0;
  }

  private row(r: Req, ids: number[], lps: number[], finish: SimFinishReason, stopReason: number | null = null): SimRow {
    const prefillTokens = r.pendingPrefill;
    r.pendingPrefill = null;
    return {
      rid: r.spec.rid,
      outputIds: ids,
      finishedReason: finish,
      promptTokens: r.promptLen,
      completionTokens: r.generated,
      cachedTokens: r.cachedTokens ?? 0,
      logprobVals: r.spec.returnLogprob ? lps : NO_LOGPROBS,
      logprobIdx: r.spec.returnLogprob ? ids.slice() : NO_LOGPROBS,
      stopReason,
      prefillTokens,
    };
  }

  /** The request's output limit under this rank's rules (engine-wire.md 4.4, or `vllmMaxNewTokens`). */
  private limitFor(spec: SimRequest, promptLen: number): number {
    return this.vllm
      ? vllmMaxNewTokens(spec.maxNewTokens, promptLen, this.config.maxModelLen)
      : clampMaxNewTokens(spec.maxNewTokens, promptLen, this.config.maxModelLen);
  }

  private freePages(): number {
    return this.cache.availablePages();
  }

  /** The leading blocks of `r`'s tokens the cache holds, capped so that at least one token is computed. */
  private hitBlocks(r: Req): PrefixMatch {
    const maxBlocks = Math.floor((r.promptLen + r.generated - 1) / KV_PAGE_TOKENS);
    return this.cache.match(r.hashes, Math.max(0, maxBlocks));
  }

  /**
   * Turn `r`'s private pages that now hold computed full blocks into hashed blocks: `hashes[held ..]`, as far as
   * its pages reach (a running request's pages always cover its full blocks).
   */
  private cacheComputedBlocks(r: Req): void {
    const events = this.kvEvents;
    while (r.held < r.hashes.length && r.held < r.pages) {
      const hash = r.hashes[r.held];
      const fresh = events !== null && !this.cache.isResident(hash);
      if (!this.cache.promote(hash)) return;
      if (fresh) {
        const start = r.held * KV_PAGE_TOKENS;
        const parent = r.held === 0 ? null : r.hashes[r.held - 1];
        events.push({ kind: 'stored', hash, parent, tokens: r.tokenIds.slice(start, start + KV_PAGE_TOKENS) });
      }
      r.held += 1;
    }
  }

  /**
   * Resets the prefix cache (vLLM `reset_prefix_cache`): every idle block is dropped and, with `kvEvents`, a `cleared`
   * event names them (vLLM announces `AllBlocksCleared`, TokenSpeed one removal per page: kv-events.ts). False, and
   * nothing changes, while a running or waiting request holds cached blocks.
   */
  resetPrefixCache(): boolean {
    const dropped = this.cache.reset();
    if (dropped === null) return false;
    this.kvEvents?.push({ kind: 'cleared', hashes: dropped });
    return true;
  }

  /** The KV events recorded since the last call, oldest first (empty unless `kvEvents` is on). */
  takeKvEvents(): SimKvEvent[] {
    const events = this.kvEvents;
    if (events === null || events.length === 0) return [];
    const out = events.splice(0, events.length);
    return out;
  }

  /** Give `r`'s pages back to the pool: private ones freed, hashed blocks released (they stay cached). */
  private releasePages(r: Req): void {
    this.cache.release(r.pages - r.held, r.hashes.slice(0, r.held));
    r.pages = 0;
    r.held = 0;
  }

  /** Move a running request back to the head of the waiting queue, freeing its pages (recomputed on re-admission). */
  private retract(r: Req): void {
    this.preemptions += 1;
    const i = this.running.indexOf(r);
    if (i >= 0) this.running.splice(i, 1);
    if (r.spec.lora !== undefined) this.loras.stop(r.spec.lora.id);
    this.releasePages(r);
    r.needsPrefill = true;
    r.state = 'waiting';
    // vLLM prepends a preempted request under FCFS; its priority queue re-sorts it by (priority, arrival).
    if (this.byPriority) this.enqueueByPriority(r);
    else this.waiting.unshift(r);
  }

  /** Insert `r` into `waiting` by (priority, arrival): after every request that sorts before it or ties with it. */
  private enqueueByPriority(r: Req): void {
    let i = this.waiting.length;
    while (i > 0 && sortsBefore(r, this.waiting[i - 1]!)) i--;
    this.waiting.splice(i, 0, r);
  }

  /**
   * The running request a KV shortage preempts: the newest (FCFS, the end of `running`), or under the priority policy
   * the one with the largest (priority, arrival), as vLLM picks it. Null when `running` is empty.
   */
  private preemptionVictim(): Req | null {
    if (!this.byPriority) return this.running.at(-1) ?? null;
    let victim: Req | null = null;
    for (const r of this.running) if (victim === null || sortsBefore(victim, r)) victim = r;
    return victim;
  }

  /** Drop a registered request (finished or aborted) and free its pages. */
  private retire(r: Req): void {
    if (r.state === 'running') {
      const i = this.running.indexOf(r);
      if (i >= 0) this.running.splice(i, 1);
      if (r.spec.lora !== undefined) this.loras.stop(r.spec.lora.id);
    } else if (r.state === 'waiting') {
      const i = this.waiting.indexOf(r);
      if (i >= 0) this.waiting.splice(i, 1);
    }
    this.releasePages(r);
    r.state = 'done';
    this.registered.delete(r.spec.rid);
  }

  private sweepPendingAborts(nowMs: number): void {
    const ttl = this.config.pendingAbortTtlMs;
    for (const [rid, at] of this.pendingAborts) {
      if (nowMs - at <= ttl) break; // insertion order = time order
      this.pendingAborts.delete(rid);
    }
  }
}
