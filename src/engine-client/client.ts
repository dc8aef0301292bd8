/**
 * The engine client (dp-routing.md; reference: SMG `connector.rs`, crate `engine_zmq_client`): one per engine group,
 * living as long as the gateway (issue #8). It owns the group's `EngineLink`, turns submitted requests into ADD
 * messages sent to the chosen rank's identity, routes decoded output batches to per-request streams, handles
 * cancellation and failures, keeps the in-flight sets and stored loads, applies the release clamp, picks the DP rank
 * of every request and keeps each rank's liveness (rank-liveness.ts): ranks join, stall, die and join again while
 * the group keeps serving.
 *
 * The client is the public face of parts that each own one concern (SMG `engine_zmq_client`: a registry struct and a
 * free dispatcher over shared state): the group state and its synchronous steps (group-state.ts), placement
 * (placement.ts), the output dispatcher (dispatcher.ts, apply-batch.ts, output-faults.ts), the rank lifecycle
 * (rank-lifecycle.ts), the timers (rank-timers.ts) and the failure scope with the control sends (failure-scope.ts,
 * rank-sender.ts).
 *
 * Concurrency model (dp-routing.md section 12.3): every state change that must be atomic is one synchronous function
 * over the group state that takes no callback and returns no promise (group-state.ts, placement.ts, apply-batch.ts;
 * eslint.config.js enforces it): register → select → reserve → encode (submit), store load → wave → route → release →
 * clamp (per batch), and every rank death or stall (its requests fail, its slot empties and it leaves the scoring set
 * in the same step). The only `await`s are the link's sends, the output iterator and the dispatcher's wait while the
 * delivery backlog is at its bound (between two batches, never inside one). What the
 * rows cost the consumers (push-mode listeners: detokenization, SSE, writes) is not part of that step: it runs right
 * after it in slices of a few ms (delivery-queue.ts, issue 9), so one large batch does not stall the event loop.
 *
 * Failure scope follows the engine's own (issue #8 part 1; dp-routing.md 6, 14.8; failure-scope.ts): a dense rank
 * fails alone, a lockstep group as a unit. Faults nobody can pin on a rank never end a group for good (issue 26): an
 * undecodable message or an ENGINE_CORE_DEAD that no vanished identity explains blames only a rank holding requests
 * that went quiet meanwhile (stalled: back when it speaks), rows naming another rank's requests are dropped and
 * ABORTed at the sender, and a rank found dead whose identity answers again is probed back into rotation. Group
 * scope is left for the group silence watchdog and a failed output socket (which also closes the client for good).
 * This file detects: EHOSTUNREACH on a send to a rank's identity, a send timeout to it, its own silence and its own
 * stall name the rank; ENGINE_CORE_DEAD names none (engine-wire.md 1.7) and starts the probe rounds (probes.ts), as
 * does a zeromq `disconnect` hint. Whenever the gateway fails requests, every rank still reachable gets an ABORT for
 * the ones it held.
 */
import { EventEmitter } from 'node:events';
import type { GenerateRequest } from '../protocols/types.js';
import { RequestType } from '../protocols/types.js';
import type { BatchSteps } from './apply-batch.js';
import type { CancelSignal, CancellableSubmitOptions, EngineClientOptions, FlowTicket } from './client-options.js';
import type { BudgetCharge, BudgetLedger } from './budgets.js';
import { runDispatcher } from './dispatcher.js';
import { EngineClientError, describeError } from './errors.js';
import { DEFAULT_FLOW_TICKET } from './flow-control.js';
import { FailureScope } from './failure-scope.js';
import { GroupState, type EngineClientEvents } from './group-state.js';
import type { ConnectedEngine, EngineLink } from './link.js';
import { OutputContract } from './output-contract.js';
import { LoraAdapters } from './lora-adapters.js';
import { OutputFaults } from './output-faults.js';
import { selectAndReserve, type Placement } from './placement.js';
import type { DpPolicy } from './policy.js';
import { classifySendError, delay } from './probes.js';
import { RankLifecycle } from './rank-lifecycle.js';
import type { RankSlot } from './rank-table.js';
import type { RegistryEntry } from './registry.js';
import { recordQueue, recordRoute, type ClientTracing } from './request-spans.js';
import { isSampled } from '../tracing.js';
import { RequestStreamImpl, type RequestStream } from './request-stream.js';
import { rankStateOf, type ClientStats, type GroupStatus, type RankState } from './reports.js';
import type { GroupKind, KindSource } from './waves.js';

export {
  DEFAULT_RANK_STALL_TIMEOUT_MS,
  DEFAULT_SILENCE_TIMEOUT_MS,
  type CancelSignal,
  type CancellableSubmitOptions,
  type EngineClientOptions,
  type SubmitOptions,
} from './client-options.js';
export type { EngineClientEvents } from './group-state.js';
export { DECODE_ATTRIBUTION_MIN_ERRORS, DECODE_ATTRIBUTION_QUIET_MS } from './output-faults.js';
export { PROBE_SCHEDULE_MS } from './probes.js';
export { REVIVAL_PROBE_INTERVAL_MS } from './rank-timers.js';
export type { ClientStats, GroupStatus, RankState } from './reports.js';

/** How long `shutdown` waits for its ABORTs to be accepted by the link, in ms. */
const SHUTDOWN_ABORT_WAIT_MS = 1000;

function abortReason(signal: CancelSignal): unknown {
  return signal.reason ?? new DOMException('The operation was aborted', 'AbortError');
}

/**
 * One engine group's client. Construction attaches to the link and starts the dispatcher (the output loop). Ranks
 * appear as they join (`rank` events; `whenAllJoined()`).
 */
export class EngineClient extends EventEmitter<EngineClientEvents> {
  /** The unpinned selection policy in use. */
  readonly policy: DpPolicy;
  /** Live counters (see `ClientStats`). */
  readonly stats: ClientStats;

  /** The group's state and its synchronous steps. */
  private readonly g: GroupState;
  /** The gateway's tenant budgets (shared by every group's client), or null. */
  private readonly budgets: BudgetLedger | null;
  /** Tracing of traced requests' queue and route spans (request-spans.ts), or null. */
  private readonly tracing: ClientTracing | null;
  private readonly link: EngineLink;
  /** Failures, and the control sends (ABORT, probes, waves, revival). */
  private readonly scope: FailureScope;
  private closing: Promise<void> | null = null;
  private readonly dispatcherDone: Promise<void>;

  /** Build the client over `opts.link` and start the dispatcher. Throws RangeError on a bad timeout. */
  constructor(opts: EngineClientOptions) {
    super();
    this.g = new GroupState(opts, this);
    this.budgets = opts.budgets ?? null;
    this.tracing = opts.tracing ?? null;
    this.policy = this.g.policy;
    this.stats = this.g.stats;
    this.link = opts.link;
    this.scope = new FailureScope(this.g, opts.link, opts.protocol);
    const steps: BatchSteps = {
      scope: this.scope,
      contract: new OutputContract(this.g, this.scope, opts.validTokenIds ?? null),
      faults: new OutputFaults(this.g, this.scope),
    };
    this.link.attach(new RankLifecycle(this.g, this.scope));
    this.dispatcherDone = runDispatcher(this.g, steps, this.link);
    const encodeUtility = opts.protocol.encodeUtility?.bind(opts.protocol);
    this.adapters =
      encodeUtility === undefined
        ? null
        : new LoraAdapters(
            this.g.utility,
            {
              readyRanks: () =>
                this.g.ranks
                  .connected()
                  .filter((s) => s.liveness.state === 'ready')
                  .map((s) => ({ engineIndex: s.index, identity: s.identity })),
              encode: encodeUtility,
              send: (identity, payload) => this.link.send(identity, RequestType.UTILITY, payload),
            },
            opts.loraModules ?? [],
          );
  }

  /**
   * The LoRA adapters the group serves (lora-adapters.ts), or null when its wire has no utility calls (TokenSpeed).
   */
  readonly adapters: LoraAdapters | null;

  /** Number of rank slots (engine indexes 0..dpSize−1). */
  get dpSize(): number {
    return this.g.ranks.size;
  }

  /** The connected ranks (ready or stalled), in identity order (engine-wire.md 1.5). */
  get engines(): readonly ConnectedEngine[] {
    return this.g.ranks.connected().map((s) => s.engine!);
  }

  /**
   * Maximum context length in tokens: the `max_model_len` of the first rank (identity order) that ever joined
   * (gateway.md 15.1), or null before any rank joined.
   */
  get maxModelLen(): number | null {
    for (const s of this.g.ranks.slots) if (s.engine !== null) return s.engine.ready.maxModelLen;
    return null;
  }

  /**
   * The KV cache as the first joined rank's ready response describes it (`vllm:cache_config_info`): its pages
   * (`num_gpu_blocks`) and tokens per page (vLLM `block_size`, TokenSpeed `prefix_granularity`), each null when not
   * reported; null before any rank joined.
   */
  get cacheConfig(): { numGpuBlocks: number | null; blockSize: number | null } | null {
    for (const s of this.g.ranks.slots)
      if (s.engine !== null)
        return { numGpuBlocks: s.engine.ready.numGpuBlocks, blockSize: s.engine.ready.prefixGranularity };
    return null;
  }

  /**
   * The usable context in tokens: `maxModelLen − protocol.reservedContextTokens` (TokenSpeed: `max_model_len − 2`,
   * engine-wire.md 4.4 last paragraph; vLLM: `max_model_len`), 0 before any rank joined. Prompt + completion must
   * fit in it (gateway.md 9).
   */
  get contextTokenLimit(): number {
    const len = this.maxModelLen;
    return len === null ? 0 : Math.max(0, len - this.g.protocol.reservedContextTokens);
  }

  /**
   * True when the group steps in lockstep (dp-routing.md 13.1, engine-wire.md 5.12; waves.ts): forced by the `lockstep`
   * option, or some rank's ready response has `dataParallelSize > 1`, or (`auto`) a rank sent a wave notification.
   * May turn true after construction, never back.
   */
  get lockstep(): boolean {
    return this.g.waves.lockstep;
  }

  /** The group's kind (`lockstep`, `dense`, or `unknown` until evidence arrives; waves.ts) and what decided it. */
  get groupKind(): { kind: GroupKind; decidedBy: KindSource | null } {
    return { kind: this.g.waves.kind, decidedBy: this.g.waves.decidedBy };
  }

  /** The wave clock (dp-routing.md 13.1; a wave number ≥ 0), or null for a non-lockstep group. */
  get waveClock(): number | null {
    return this.g.waves.value;
  }

  /**
   * Whether an unpinned request submitted now would go to a rank at once: always without flow control, else while
   * nothing waits and the group has room (flow-control.ts). Read by the group choice.
   */
  hasRoom(): boolean {
    return this.g.gate === null || this.g.gate.wouldAdmit();
  }

  /** Whether flow control is on: an unpinned submit may wait in the gateway's queue (flow-control.ts). */
  get flowControlled(): boolean {
    return this.g.gate !== null;
  }

  /** Number of registered (live) requests. */
  get registeredCount(): number {
    return this.g.registry.size;
  }

  /** The client is open (not closed by `close()`/`shutdown()` or a failed output socket); sends nothing. */
  isAlive(): boolean {
    return !this.g.registry.closed;
  }

  /** Whether an unpinned request can be placed now: a dense group with a ready rank, a lockstep group all ready. */
  canServe(): boolean {
    return this.g.canServe();
  }

  /** The group's serving status (see `GroupStatus`). */
  status(): GroupStatus {
    return this.g.status();
  }

  /** Resolves once every rank slot has joined at least once; rejects with `client-closed` if the client closes first. */
  whenAllJoined(): Promise<void> {
    if (this.g.ranks.allJoinedOnce()) return Promise.resolve();
    if (this.g.registry.closed) return Promise.reject(this.g.clientClosedError());
    return this.g.joinWaiters.wait();
  }

  /**
   * Submit one request (dp-routing.md section 3). With flow control on (`EngineClientOptions.flowControl`), an unpinned
   * request first waits in the gateway's queue while the group is saturated (flow-control.ts; it rejects with
   * `overloaded` at its deadline or when the queue is full, with `unavailable` when no rank can serve any more, and with
   * the signal's reason when its client leaves); once it may go, the steps below run. Synchronously, before the first
   * `await` (once admitted): validate, register, select
   * a ready rank and reserve its in-flight slot (one step, `policy.onDispatch` inside it), encode (with the pinned rank
   * as `AddTarget.dpRank`, gateway.md 14); then send `[identity, 00, payload]`, wake the group if it is lockstep
   * (13.2) and resolve with the request's stream. An ADD refused with EHOSTUNREACH or a send timeout reached no engine
   * (zmq-link.ts): the rank is marked dead and an unpinned request is placed on another ready rank instead.
   * Every other failure rolls back synchronously and rejects with an `EngineClientError`:
   * `client-closed`, `duplicate-request-id`, `invalid-dp-rank` (outside 0..dpSize−1), `unavailable` (no ready rank,
   * or the pinned one is not ready), `encode` (also for an empty request id or no prompt token id list), `transport` (a send failed), `engine-dead`
   * (the pinned rank died on the send; or a lockstep wake found a rank dead). A policy that throws (`select` returning
   * a position out of range: RangeError; `onDispatch` throwing) rejects with that error, nothing reserved. A pre-aborted `signal` rejects with its reason, as does a signal that fires
   * while a send is pending (the ABORT is sent in that case). If the request failed while its ADD was queued (its rank
   * died or stalled), the stream is returned and yields that error.
   */
  async submit(request: GenerateRequest, options: CancellableSubmitOptions = {}): Promise<RequestStream> {
    const charge = this.chargeBudget(request, options.flow);
    if (charge === null) return this.admit(request, options, null);
    try {
      return await this.admit(request, options, charge);
    } catch (err) {
      charge.refund();
      throw err;
    }
  }

  /**
   * Charge the request's tenant budget (budgets.ts) when its ticket carries one. Returns null without one.
   * @throws EngineClientError `rate-limited` when the budget cannot take the request (nothing else happened yet).
   */
  private chargeBudget(request: GenerateRequest, flow: FlowTicket | undefined): BudgetCharge | null {
    if (this.budgets === null || flow?.budget === undefined) return null;
    // An embeddings request's lead names the prompt tokens of all its inputs (its siblings take none).
    const prompt = flow.promptTokens ?? (Array.isArray(request?.promptTokenIds) ? request.promptTokenIds.length : 0);
    const reserve = request?.sampling?.maxNewTokens ?? 0;
    return this.budgets.admit(
      flow.tenant,
      flow.budget,
      prompt,
      Number.isFinite(reserve) ? reserve : 0,
      flow.lead !== false,
    );
  }

  /** `submit` past the budget: through flow control's queue when the group is saturated, then `submitNow`. */
  private async admit(
    request: GenerateRequest,
    options: CancellableSubmitOptions,
    charge: BudgetCharge | null,
  ): Promise<RequestStream> {
    const gate = this.g.gate;
    // An embeddings request passes flow control as one request: its lead input waits, the others follow it.
    const follows = request?.pooling !== undefined && options.flow?.lead === false;
    if (
      gate === null ||
      follows ||
      options.dpRank !== undefined ||
      !this.g.canServe() ||
      typeof request?.requestId !== 'string'
    ) {
      return this.submitNow(request, options, charge);
    }
    const wait = gate.admit(request?.requestId, options.flow ?? DEFAULT_FLOW_TICKET, options.signal);
    if (wait === null) return this.submitNow(request, options, charge);
    const tracing = request.trace === undefined || !isSampled(request.trace) ? null : this.tracing;
    const queuedAt = tracing === null ? 0 : this.g.now();
    try {
      await wait;
    } catch (err) {
      if (tracing !== null) recordQueue(tracing, request, queuedAt, this.g.now(), err);
      throw err;
    }
    if (tracing !== null) recordQueue(tracing, request, queuedAt, this.g.now(), null);
    // Granted: the reservation happens in submitNow's synchronous first step, then the grant stops holding room.
    const submitted = this.submitNow(request, options, charge);
    gate.placed();
    return submitted;
  }

  /** `submit` once flow control let the request through (or without it): register, place, send. */
  private async submitNow(
    request: GenerateRequest,
    options: CancellableSubmitOptions,
    charge: BudgetCharge | null,
  ): Promise<RequestStream> {
    const { dpRank, signal } = options;
    const { entry, hook } = this.register(request, signal, charge);
    const { slot, pinned } = await this.placeAndSend(request, entry, dpRank, signal, hook);
    if (this.g.registry.closed) throw this.g.clientClosedError();
    if (signal?.aborted) throw abortReason(signal);
    // Wake a lockstep group after EVERY successful ADD (section 13.2; nothing for a dense group), and a group of unknown
    // kind after its first one (waves.ts `submitWake`: the no-hang probe before lockstep detection).
    const wave = this.g.registry.get(entry.requestId) === entry ? this.g.waves.submitWake() : null;
    if (wave !== null) await this.wake(entry, slot, wave, signal);
    if (pinned) slot.counters.pinned++;
    else slot.counters.unpinned++;
    return entry.stream;
  }

  /**
   * Validate `request` and register it with a fresh stream, before any reservation (section 3 step 2, section 7).
   * Throws `encode` (no request id, no prompt token id list), the signal's reason, or `client-closed`; nothing is
   * registered then. `hook.detach` removes the signal's listener once one is added (`placeAndSend`).
   */
  private register(
    request: GenerateRequest,
    signal: CancelSignal | undefined,
    charge: BudgetCharge | null,
  ): { entry: RegistryEntry; hook: { detach: () => void } } {
    if (typeof request?.requestId !== 'string' || request.requestId.length === 0) {
      throw new EngineClientError('encode', 'request id must be a non-empty string');
    }
    if (!Array.isArray(request.promptTokenIds)) {
      throw new EngineClientError(
        'encode',
        `request ${JSON.stringify(request.requestId)} has no prompt token id list`,
        { requestId: request.requestId },
      );
    }
    if (signal?.aborted) throw abortReason(signal);
    if (this.g.registry.closed) throw this.g.clientClosedError();
    const hook = { detach: (): void => {} };
    const stream: RequestStreamImpl = new RequestStreamImpl(
      request.requestId,
      request.promptTokenIds.length,
      () => this.scope.abandon(entry),
      () => {
        hook.detach();
        // The request ended (terminal row, failure, or its consumer left): its unused reservation goes back.
        charge?.settle(entry.tokens);
      },
      this.g.delivery,
    );
    const entry: RegistryEntry = {
      requestId: request.requestId,
      stream,
      engineIndex: null,
      tokenLimit: request.sampling?.maxNewTokens ?? Infinity,
      tokens: 0,
    };
    this.g.registry.register(entry);
    if (charge !== null) stream.budget = charge.snapshot;
    return { entry, hook };
  }

  /**
   * Place the registered `entry` on a rank (select + reserve in one synchronous step, section 9, section 12.3 rule 1),
   * encode its ADD once and send it; an unpinned ADD that reached no engine is placed again on another ready rank
   * (`addFailed`). The signal's listener is added on the first attempt. Every failure is rolled back and thrown.
   */
  private async placeAndSend(
    request: GenerateRequest,
    entry: RegistryEntry,
    dpRank: number | undefined,
    signal: CancelSignal | undefined,
    hook: { detach: () => void },
  ): Promise<{ slot: RankSlot; pinned: boolean }> {
    const stream = entry.stream;
    let payload: Uint8Array | null = null;
    for (let attempt = 0; ; attempt++) {
      let placed: Placement;
      try {
        placed = selectAndReserve(this.g, request, dpRank);
      } catch (err) {
        this.g.rollback(entry, err);
        throw err;
      }
      const { slot, pinned } = placed;
      if (this.tracing !== null && request.trace !== undefined && isSampled(request.trace))
        this.traceRoute(request, entry, placed, attempt);
      entry.engineIndex = slot.index;
      stream.engineIndex = slot.index;
      this.g.touchGroupTimer(false);
      payload ??= this.encodeAdd(request, entry, pinned ? slot.index : null);
      if (attempt === 0 && signal) {
        const onAbort = (): void => stream.cancel();
        signal.addEventListener('abort', onAbort, { once: true });
        hook.detach = () => signal.removeEventListener('abort', onAbort);
      }
      try {
        await this.link.send(slot.identity, RequestType.ADD, payload);
        return placed;
      } catch (err) {
        this.addFailed(entry, slot, !pinned && attempt < this.g.ranks.size, err, signal); // throws unless it may retry
      }
    }
  }

  /** The ADD payload of `request` (`dpRank`: the pinned rank, else null); an encode failure is rolled back and thrown. */
  private encodeAdd(request: GenerateRequest, entry: RegistryEntry, dpRank: number | null): Uint8Array {
    try {
      return this.g.protocol.encodeAdd(request, { dpRank });
    } catch (err) {
      const e = new EngineClientError(
        'encode',
        `cannot encode request ${JSON.stringify(entry.requestId)}: ${describeError(err)}`,
        { cause: err, requestId: entry.requestId },
      );
      this.g.rollback(entry, e);
      throw e;
    }
  }

  /**
   * START_DP_WAVE `wave` to every connected rank after `entry`'s ADD. A failed wake rolls the request back (ABORTed on
   * `slot` if it was still live, section 3 step 6) and is thrown.
   */
  private async wake(
    entry: RegistryEntry,
    slot: RankSlot,
    wave: number,
    signal: CancelSignal | undefined,
  ): Promise<void> {
    const id = entry.requestId;
    const failure = await this.scope.sender.startWave(this.g.ranks.connected(), wave);
    if (failure !== null) {
      const live = this.g.registry.get(id) === entry;
      this.g.rollback(entry, failure, live);
      if (live) void this.scope.abortOn(slot.index, [id]); // its result is ignored
      throw failure;
    }
    if (this.g.registry.closed) throw this.g.clientClosedError();
    if (signal?.aborted) throw abortReason(signal);
  }

  /**
   * A submit's ADD to `slot` failed (section 3 step 5). Throws what the caller reports: `client-closed`, the signal's
   * reason, the error that ended the request while its ADD was queued, a `transport` error (rolled back), or, when the
   * ADD reached no engine (a timeout or EHOSTUNREACH: the rank is dead), its engine-dead error; returns (request off
   * the dead rank, nothing rolled back) only when `retryable` and the request may be placed on another rank.
   */
  /** The route span of a traced request's placement (after select + reserve, so the prediction is known). */
  private traceRoute(request: GenerateRequest, entry: RegistryEntry, placed: Placement, attempt: number): void {
    recordRoute(
      this.tracing!,
      request,
      {
        dpRank: placed.slot.index,
        pinned: placed.pinned,
        policy: this.g.policy.name,
        candidates: placed.candidates,
        view: placed.view,
        predictedCachedTokens: entry.service?.predictedCachedTokens ?? null,
        attempt,
      },
      this.g.now(),
    );
  }

  private addFailed(
    entry: RegistryEntry,
    slot: RankSlot,
    retryable: boolean,
    err: unknown,
    signal: CancelSignal | undefined,
  ): void {
    const id = entry.requestId;
    const what = `sending request ${JSON.stringify(id)} to DP rank ${slot.index}`;
    if (this.g.registry.closed) throw this.g.clientClosedError();
    if (signal?.aborted) throw abortReason(signal);
    const live = this.g.registry.get(id) === entry;
    if (!live && entry.stream.failure !== null) throw entry.stream.failure;
    if (classifySendError(err) === 'other' || !live) {
      const e = new EngineClientError('transport', `${what} failed: ${describeError(err)}`, {
        cause: err,
        requestId: id,
      });
      this.g.rollback(entry, e);
      throw e;
    }
    // Nothing reached an engine: take the request off the rank before the rank's death fails what it holds.
    this.g.release(slot.index, [id]);
    entry.engineIndex = null;
    const error = this.scope.sendFailed(slot, what, err);
    if (retryable && this.g.registry.get(id) === entry) {
      this.g.logger.info(
        { engineRequestId: id, engineIndex: slot.index },
        'ADD reached no engine; placing the request on another ready rank',
      );
      return;
    }
    this.g.rollback(entry, error);
    throw error;
  }

  /**
   * Explicit abort (dp-routing.md section 5): remove the registry entry, release the in-flight slot, end the stream
   * (its reader gets a stream-closed error naming the id; a push-mode listener none of the outputs still queued for
   * it), send `[identity, 01, ["<id>"]]` to the recorded rank and
   * resolve once the link accepted it. Never waits for an engine confirmation. An unknown or finished id is a no-op.
   * Rejects with `engine-dead` (the rank was found dead on this send) or `transport` (any other send failure).
   */
  async abort(requestId: string): Promise<void> {
    const entry = this.g.registry.get(requestId);
    if (!entry) return;
    const rank = entry.engineIndex;
    this.g.retire(entry, rank !== null);
    entry.stream.closeWithoutTerminal(true);
    if (rank !== null) {
      const error = await this.scope.abortOn(rank, [requestId]);
      if (error !== null) throw error;
    }
  }

  /** Every rank slot's state, in identity order (see `RankState`). */
  rankStates(): RankState[] {
    const now = this.g.now();
    return this.g.ranks.slots.map((s) => {
      const state = rankStateOf(s, {
        inFlight: this.g.routing.inFlightCount(s.index),
        load: this.g.routing.load(s.index),
        loadAgeMs: this.g.routing.loadAgeMs(s.index, now),
        guard: this.g.routing.soleClientGuard(s.index),
        aborting: this.g.routing.abortingCount(s.index),
      });
      const lora = this.g.loraCounts.get(s.index);
      if (lora !== undefined) state.loraAdapters = lora;
      return state;
    });
  }

  /**
   * Shut the client down ("client dropped", dp-routing.md section 4): mark it closed, end every live stream with a
   * stream-closed error naming its id, clear the in-flight sets, stop the timers, close the link and wait for the
   * dispatcher to exit. No ABORTs are sent (see `shutdown`). Idempotent; never rejects. Does not emit `failed`.
   */
  close(): Promise<void> {
    this.closing ??= this.doClose(null);
    return this.closing;
  }

  /**
   * End of a graceful drain: every request still live ends with a `client-closed` error carrying `message`, every
   * connected rank gets an ABORT for what it held (waited for up to 1 s), then `close()`. Idempotent; never rejects.
   */
  shutdown(message: string): Promise<void> {
    this.closing ??= this.doClose(new EngineClientError('client-closed', message));
    return this.closing;
  }

  private async doClose(error: EngineClientError | null): Promise<void> {
    this.g.utility.failAll(error ?? new EngineClientError('client-closed', 'engine client is shutting down'));
    const entries = this.g.closeForGood(
      error ?? new EngineClientError('client-closed', 'engine client is shutting down'),
    );
    if (entries !== null) {
      const aborts = error === null ? [] : this.scope.abortHeld(entries);
      for (const e of entries) {
        if (error === null) e.stream.closeWithoutTerminal();
        else e.stream.fail(error);
      }
      if (aborts.length > 0) await Promise.race([Promise.allSettled(aborts), delay(SHUTDOWN_ABORT_WAIT_MS)]);
    }
    try {
      await this.link.close();
    } catch (err) {
      this.g.logger.warn({ err }, 'engine link close failed');
    }
    await this.dispatcherDone;
  }
}
