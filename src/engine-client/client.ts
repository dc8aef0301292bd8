/**
 * The engine client (dp-routing.md; reference: SMG `connector.rs`, crate `engine_zmq_client`): one per engine group,
 * living as long as the gateway (issue #8). It owns the group's `EngineLink`, turns submitted requests into ADD
 * messages sent to the chosen rank's identity, routes decoded output batches to per-request streams, handles
 * cancellation and failures, keeps the in-flight sets and stored loads, applies the release clamp, picks the DP rank
 * of every request and keeps each rank's liveness (rank-liveness.ts): ranks join, stall, die and join again while
 * the group keeps serving.
 *
 * Concurrency model (dp-routing.md section 12.3): every state change that must be atomic happens in one synchronous
 * block with no `await` inside: register → select → reserve → encode (submit), store load → wave → route → release →
 * clamp (dispatcher, per batch, batch-router.ts), and every rank death or stall (its requests fail, its slot empties
 * and it leaves the scoring set in the same step). The only `await`s are the link's sends, the output iterator and
 * the dispatcher's wait while the delivery backlog is at its bound (between two batches, never inside one). What the
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
import { performance } from 'node:perf_hooks';
import { pino, type Logger } from 'pino';
import type { EngineBatch, EngineProtocol, GenerateRequest, WaveEvent } from '../protocols/types.js';
import { RequestType } from '../protocols/types.js';
import { planBatch } from './batch-router.js';
import { DeliveryQueue, type DeliveryQueueOptions } from './delivery-queue.js';
import type { ConnectedEngine, EngineLink, LinkListener } from './link.js';
import { EngineClientError, describeError } from './errors.js';
import { createLoadPolicy, type DpPolicy, type RankView } from './policy.js';
import { FailureScope } from './failure-scope.js';
import { OutputContract } from './output-contract.js';
import { PROBE_SCHEDULE_MS, ProbeRounds, classifySendError, delay, unrefTimer } from './probes.js';
import { isConnected, isRevivable, type LivenessEvent, type RankStateName } from './rank-liveness.js';
import { LogThrottle } from './log-throttle.js';
import { ForeignRequests } from './foreign-requests.js';
import { RankSender } from './rank-sender.js';
import { RankTable, type RankSlot } from './rank-table.js';
import { RequestRegistry, type RegistryEntry } from './registry.js';
import { RequestStreamImpl, type RequestStream } from './request-stream.js';
import {
  logGuardTransition,
  newClientStats,
  rankStateOf,
  type ClientStats,
  type GroupStatus,
  type RankState,
} from './reports.js';
import { RoutingState } from './routing-state.js';
import { RankSilenceWatchdogs, SilenceWatchdog } from './watchdog.js';
import { WaveClock, type GroupKind, type KindSource, type LockstepSetting } from './waves.js';

export { PROBE_SCHEDULE_MS } from './probes.js';
export type { ClientStats, GroupStatus, RankState } from './reports.js';

/** Default silence-watchdog timeout in ms (dp-routing.md section 6: 300 s without output). */
export const DEFAULT_SILENCE_TIMEOUT_MS = 300_000;
/**
 * Default stall timeout in ms (issue #8 part 3): a rank holding in-flight requests that sent nothing for this long
 * leaves rotation. 60 s is longer than any normal gap between two batches of a rank, a long prefill included (a
 * 128k-token prompt prefills in seconds to tens of seconds); raise it for slower engines.
 */
export const DEFAULT_RANK_STALL_TIMEOUT_MS = 60_000;
/**
 * Undecodable messages a rank must have been quiet through before it is taken for their sender (SMG PR #2175 fails
 * the whole group after 3 in a row; issue 26: any process that reaches the socket can push such frames, so only a
 * rank that also went quiet is blamed, `DECODE_ATTRIBUTION_QUIET_MS`).
 */
export const DECODE_ATTRIBUTION_MIN_ERRORS = 3;
/**
 * How long a rank holding requests must have sent nothing decodable, while undecodable messages arrive, to be taken
 * for their sender (issue 26): far above the gap between two batches of a working rank, so a rank that keeps
 * streaming is never blamed for someone else's frames.
 */
export const DECODE_ATTRIBUTION_QUIET_MS = 3000;
/** How often a dead rank's identity is probed to see whether it answers again (issue 26), in ms. */
export const REVIVAL_PROBE_INTERVAL_MS = 500;
/** At most one log line per this many ms about undecodable output, and about rows naming another rank's requests. */
const WIRE_FAULT_LOG_INTERVAL_MS = 10_000;
/** How long `shutdown` waits for its ABORTs to be accepted by the link, in ms. */
const SHUTDOWN_ABORT_WAIT_MS = 1000;

/**
 * Constructor options.
 * - `protocol`: the engine family's codec (TokenSpeed or vLLM).
 * - `link`: the group's socket set (its `dpSize` gives the rank slots); the client attaches to it, owns it from now
 *   on and closes it on `close()`.
 * - `policy`: the unpinned rank-selection policy (default `createLoadPolicy()`, SMG's DP scorer).
 * - `silenceTimeoutMs`: the group silence watchdog and the per-rank silence watchdogs (a rank holding requests and
 *   silent this long is dead), in ms (default 300 000).
 * - `rankStallTimeoutMs`: a rank holding requests and silent this long is stalled (default 60 000).
 * - `logger`: pino logger (default: silent).
 * - `lockstep`: the group's kind (waves.ts, issue #14): `auto` (default: from the joining ranks' `data_parallel_size`,
 *   else from the first wave notification, with one probe wake on the first submit while unknown), `true` (force
 *   lockstep: every submit wakes the group) or `false` (force dense: never woken, wave notifications ignored).
 * - `now`: monotonic clock in ms that stamps stored loads for ageing (dp-routing.md 14.1; default
 *   `performance.now`). Tests pass their own.
 * - `delivery`: how outputs reach push-mode listeners (delivery-queue.ts: a 4 ms slice budget, 4096 queued
 *   hand-offs before the dispatcher stops reading engine output); tests pass a fake clock.
 * - `validTokenIds`: the tokenizer's token ids as a byte mask (tokenizer/token-id-mask.ts); a row with any other id
 *   fails its request as the rank's fault (output-contract.ts). Absent: token ids are not checked.
 * Both timeouts must be positive finite numbers of ms.
 */
export interface EngineClientOptions {
  protocol: EngineProtocol;
  link: EngineLink;
  policy?: DpPolicy;
  silenceTimeoutMs?: number;
  rankStallTimeoutMs?: number;
  logger?: Logger;
  lockstep?: LockstepSetting;
  now?: () => number;
  delivery?: DeliveryQueueOptions;
  validTokenIds?: Uint8Array;
}

/**
 * Per-submit options.
 * - `dpRank`: pin the request to the rank with this engine index (dp-routing.md section 9.1; gateway.md section 14
 *   `X-data-parallel-rank`). No scoring; the scan start is not advanced.
 * - `signal`: aborting it aborts the request like `RequestStream.cancel()` (section 5). Already aborted at submit →
 *   `submit` rejects with `signal.reason` and nothing is registered or sent.
 */
export interface SubmitOptions {
  dpRank?: number;
  signal?: AbortSignal;
}

/**
 * The part of `AbortSignal` a submit uses: `aborted`, `reason`, and one `abort` listener added and later removed. An
 * `AbortSignal` is one; so is the HTTP layer's lighter per-request signal (server/disconnect.ts `DisconnectSignal`).
 */
export interface CancelSignal {
  readonly aborted: boolean;
  readonly reason: unknown;
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: 'abort', listener: () => void): void;
}

/** `SubmitOptions` with any {@link CancelSignal} (what `EngineClient.submit` and the server's backends accept). */
export interface CancellableSubmitOptions {
  dpRank?: number;
  signal?: CancelSignal;
}

/** Events emitted by `EngineClient` (a typed node:events EventEmitter). */
export interface EngineClientEvents {
  /** The group failed as a unit (its requests got `error`); emitted per group-scope failure. */
  failed: [error: EngineClientError];
  /** A rank changed state (`cause`: why it died or stalled, else null). */
  rank: [engineIndex: number, state: RankStateName, cause: string | null];
  /** A rank completed its handshake (`rejoin`: not its slot's first); emitted before it takes requests. */
  joined: [engine: ConnectedEngine, rejoin: boolean];
}

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

  private readonly protocol: EngineProtocol;
  private readonly link: EngineLink;
  private readonly logger: Logger;
  private readonly silenceTimeoutMs: number;
  private readonly stallTimeoutMs: number;
  private readonly releaseClamp: boolean;
  private readonly now: () => number;
  private readonly registry = new RequestRegistry();
  /** Push-mode hand-offs, sliced (delivery-queue.ts); the routing state never waits for it. */
  private readonly delivery: DeliveryQueue;
  private readonly routing = new RoutingState();
  private readonly ranks: RankTable;
  private readonly decodeLog = new LogThrottle(WIRE_FAULT_LOG_INTERVAL_MS);
  private readonly mismatchLog = new LogThrottle(WIRE_FAULT_LOG_INTERVAL_MS);
  /**
   * Per engine index: when the rank last sent a decodable batch, or got a request while it held none, whichever is
   * later (the client's clock, ms); what `quietMs` measures from.
   */
  private readonly quietSince: Float64Array;
  /** Per engine index: `stats.decodeErrors` when `quietSince` was last set (undecodable messages since = the difference). */
  private readonly decodeErrorsAtQuiet: Float64Array;
  /** The revival probe timer (null while no dead rank may come back) and the slots with a probe in flight. */
  private revivalTimer: ReturnType<typeof setTimeout> | null = null;
  private readonly revivalProbing = new Set<number>();
  /** Dead ranks a decodable batch came from since they died (a `rank-silent` rank needs this to come back). */
  private readonly heardWhileDead = new Set<number>();
  private readonly watchdog: SilenceWatchdog;
  private readonly silentRanks: RankSilenceWatchdogs;
  private readonly stalledRanks: RankSilenceWatchdogs;
  private readonly waves: WaveClock;
  private readonly probes: ProbeRounds;
  private readonly sender: RankSender;
  private readonly scope: FailureScope;
  /** The checks on every row (max_tokens, token ids, unknown ids; issue 26 part 4). */
  private readonly contract: OutputContract;
  /** Adopted ranks' rows for the previous gateway's requests: ABORTed once each (foreign-requests.ts). */
  private readonly foreign = new ForeignRequests();
  private serving = false;
  private everServed = false;
  private readonly joinWaiters: Array<{ resolve: () => void; reject: (e: Error) => void }> = [];
  private closeReason: EngineClientError | null = null;
  private closing: Promise<void> | null = null;
  private readonly dispatcherDone: Promise<void>;

  /** Build the client over `opts.link` and start the dispatcher. Throws RangeError on a bad timeout. */
  constructor(opts: EngineClientOptions) {
    super();
    const ms = (name: string, v: number | undefined, dflt: number): number => {
      const x = v ?? dflt;
      if (!Number.isFinite(x) || x <= 0) throw new RangeError(`${name} must be a positive number of ms, got ${x}`);
      return x;
    };
    this.silenceTimeoutMs = ms('silenceTimeoutMs', opts.silenceTimeoutMs, DEFAULT_SILENCE_TIMEOUT_MS);
    this.stallTimeoutMs = ms('rankStallTimeoutMs', opts.rankStallTimeoutMs, DEFAULT_RANK_STALL_TIMEOUT_MS);
    this.protocol = opts.protocol;
    this.link = opts.link;
    this.policy = opts.policy ?? createLoadPolicy();
    this.releaseClamp = this.policy.releaseClamp ?? true;
    this.now = opts.now ?? (() => performance.now());
    this.logger = opts.logger ?? pino({ level: 'silent' });
    this.delivery = new DeliveryQueue(opts.delivery);
    this.stats = newClientStats(opts.link.handshakeRejected);
    this.ranks = new RankTable(opts.link.dpSize);
    this.quietSince = new Float64Array(opts.link.dpSize);
    this.decodeErrorsAtQuiet = new Float64Array(opts.link.dpSize);
    this.waves = new WaveClock([], opts.lockstep ?? 'auto');
    this.watchdog = new SilenceWatchdog(this.silenceTimeoutMs, () => this.onGroupSilence());
    this.silentRanks = new RankSilenceWatchdogs(this.silenceTimeoutMs, (rank) => this.onRankSilent(rank));
    this.stalledRanks = new RankSilenceWatchdogs(this.stallTimeoutMs, (rank) => this.onRankStalled(rank));
    this.probes = new ProbeRounds(PROBE_SCHEDULE_MS, (last) => this.probeRound(last));
    this.sender = new RankSender(opts.link, opts.protocol, this.stats, this.logger, {
      rankUnusable: (slot, what, err) => this.scope.sendFailed(slot, what, err),
      closedError: () => (this.registry.closed ? this.clientClosedError() : null),
      untracked: (id) => this.registry.remember(id),
    });
    this.scope = new FailureScope({
      registry: this.registry,
      ranks: this.ranks,
      waves: this.waves,
      sender: this.sender,
      stats: this.stats,
      logger: this.logger,
      transition: (index, event) => void this.transition(index, event),
      forgetRank: (index) => this.forgetRankState(index),
      release: (rank, ids, aborted) => this.release(rank, ids, aborted),
      clearInFlight: () => {
        this.routing.clearInFlight();
        this.watchdog.stop();
        this.silentRanks.stopAll();
        this.stalledRanks.stopAll();
      },
      timersChanged: (rank) => {
        this.syncRankWatchdogs(rank, false);
        this.touchWatchdog(false);
      },
      quietMs: (rank) => this.quietMs(rank),
      groupFailed: (error) => this.notify('failed', error),
    });
    this.contract = new OutputContract(
      {
        registry: this.registry,
        ranks: this.ranks,
        stats: this.stats,
        logger: this.logger,
        now: this.now,
        retire: (entry) => this.retire(entry),
        abandon: (entry) => this.abandon(entry),
      },
      opts.validTokenIds ?? null,
    );
    const listener: LinkListener = {
      admitHello: (index) => this.admitHello(index),
      joined: (engine) => this.onJoined(engine),
      joinFailed: (index, reason) => this.onJoinFailed(index, reason),
    };
    this.link.attach(listener);
    this.dispatcherDone = this.runDispatcher();
  }

  /** Number of rank slots (engine indexes 0..dpSize−1). */
  get dpSize(): number {
    return this.ranks.size;
  }

  /** The connected ranks (ready or stalled), in identity order (engine-wire.md 1.5). */
  get engines(): readonly ConnectedEngine[] {
    return this.ranks.connected().map((s) => s.engine!);
  }

  /**
   * Maximum context length in tokens: the `max_model_len` of the first rank (identity order) that ever joined
   * (gateway.md 15.1), or null before any rank joined.
   */
  get maxModelLen(): number | null {
    for (const s of this.ranks.slots) if (s.engine !== null) return s.engine.ready.maxModelLen;
    return null;
  }

  /**
   * The usable context in tokens: `maxModelLen − protocol.reservedContextTokens` (TokenSpeed: `max_model_len − 2`,
   * engine-wire.md 4.4 last paragraph; vLLM: `max_model_len`), 0 before any rank joined. Prompt + completion must
   * fit in it (gateway.md 9).
   */
  get contextTokenLimit(): number {
    const len = this.maxModelLen;
    return len === null ? 0 : Math.max(0, len - this.protocol.reservedContextTokens);
  }

  /**
   * True when the group steps in lockstep (dp-routing.md 13.1, engine-wire.md 5.12; waves.ts): forced by the `lockstep`
   * option, or some rank's ready response has `dataParallelSize > 1`, or (`auto`) a rank sent a wave notification.
   * May turn true after construction, never back.
   */
  get lockstep(): boolean {
    return this.waves.lockstep;
  }

  /** The group's kind (`lockstep`, `dense`, or `unknown` until evidence arrives; waves.ts) and what decided it. */
  get groupKind(): { kind: GroupKind; decidedBy: KindSource | null } {
    return { kind: this.waves.kind, decidedBy: this.waves.decidedBy };
  }

  /** The wave clock (dp-routing.md 13.1; a wave number ≥ 0), or null for a non-lockstep group. */
  get waveClock(): number | null {
    return this.waves.value;
  }

  /** Number of registered (live) requests. */
  get registeredCount(): number {
    return this.registry.size;
  }

  /** The client is open (not closed by `close()`/`shutdown()` or a failed output socket); sends nothing. */
  isAlive(): boolean {
    return !this.registry.closed;
  }

  /** Whether an unpinned request can be placed now: a dense group with a ready rank, a lockstep group all ready. */
  canServe(): boolean {
    if (this.registry.closed) return false;
    return this.waves.lockstep ? this.ranks.allReady() : this.ranks.anyReady();
  }

  /** The group's serving status (see `GroupStatus`). */
  status(): GroupStatus {
    if (this.canServe()) return this.ranks.allReady() ? 'ok' : 'degraded';
    return this.everServed || this.registry.closed ? 'unavailable' : 'starting';
  }

  /** Resolves once every rank slot has joined at least once; rejects with `client-closed` if the client closes first. */
  whenAllJoined(): Promise<void> {
    if (this.ranks.allJoinedOnce()) return Promise.resolve();
    if (this.registry.closed) return Promise.reject(this.clientClosedError());
    return new Promise((resolve, reject) => this.joinWaiters.push({ resolve, reject }));
  }

  /**
   * Submit one request (dp-routing.md section 3). Synchronously, before the first `await`: validate, register, select
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
    const { dpRank, signal } = options;
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
    if (this.registry.closed) throw this.clientClosedError();
    const id = request.requestId;

    // Register before any reservation (section 3 step 2, section 7).
    let detachSignal: () => void = () => {};
    const promptTokens = request.promptTokenIds.length;
    const stream: RequestStreamImpl = new RequestStreamImpl(
      id,
      promptTokens,
      () => this.abandon(entry),
      () => detachSignal(),
      this.delivery,
    );
    const entry: RegistryEntry = {
      requestId: id,
      stream,
      engineIndex: null,
      tokenLimit: request.sampling?.maxNewTokens ?? Infinity,
      tokens: 0,
    };
    this.registry.register(entry);

    let payload: Uint8Array | null = null;
    let slot: RankSlot;
    let pinned: boolean;
    for (let attempt = 0; ; attempt++) {
      // Select and reserve in the same synchronous step (section 9, section 12.3 rule 1).
      try {
        ({ slot, pinned } = this.selectAndReserve(request, dpRank));
      } catch (err) {
        this.rollback(entry, err);
        throw err;
      }
      entry.engineIndex = slot.index;
      stream.engineIndex = slot.index;
      this.touchWatchdog(false);
      if (payload === null) {
        try {
          payload = this.protocol.encodeAdd(request, { dpRank: pinned ? slot.index : null });
        } catch (err) {
          const e = new EngineClientError(
            'encode',
            `cannot encode request ${JSON.stringify(id)}: ${describeError(err)}`,
            { cause: err, requestId: id },
          );
          this.rollback(entry, e);
          throw e;
        }
      }
      if (attempt === 0 && signal) {
        const onAbort = (): void => stream.cancel();
        signal.addEventListener('abort', onAbort, { once: true });
        detachSignal = () => signal.removeEventListener('abort', onAbort);
      }
      try {
        await this.link.send(slot.identity, RequestType.ADD, payload);
        break;
      } catch (err) {
        this.addFailed(entry, slot, !pinned && attempt < this.ranks.size, err, signal); // throws unless it may retry
      }
    }
    if (this.registry.closed) throw this.clientClosedError();
    if (signal?.aborted) throw abortReason(signal);

    // Wake a lockstep group after EVERY successful ADD (section 13.2; nothing for a dense group), and a group of
    // unknown kind after its first one (waves.ts `submitWake`: the no-hang probe before lockstep detection).
    const wave = this.registry.get(id) === entry ? this.waves.submitWake() : null;
    if (wave !== null) {
      const failure = await this.sender.startWave(this.ranks.connected(), wave);
      if (failure !== null) {
        const live = this.registry.get(id) === entry;
        this.rollback(entry, failure, live);
        if (live) void this.sendAbort(slot.index, [id]); // section 3 step 6: its result is ignored
        throw failure;
      }
      if (this.registry.closed) throw this.clientClosedError();
      if (signal?.aborted) throw abortReason(signal);
    }
    if (pinned) slot.counters.pinned++;
    else slot.counters.unpinned++;
    return stream;
  }

  /**
   * A submit's ADD to `slot` failed (section 3 step 5). Throws what the caller reports: `client-closed`, the signal's
   * reason, the error that ended the request while its ADD was queued, a `transport` error (rolled back), or, when the
   * ADD reached no engine (a timeout or EHOSTUNREACH: the rank is dead), its engine-dead error; returns (request off
   * the dead rank, nothing rolled back) only when `retryable` and the request may be placed on another rank.
   */
  private addFailed(
    entry: RegistryEntry,
    slot: RankSlot,
    retryable: boolean,
    err: unknown,
    signal: CancelSignal | undefined,
  ): void {
    const id = entry.requestId;
    const what = `sending request ${JSON.stringify(id)} to DP rank ${slot.index}`;
    if (this.registry.closed) throw this.clientClosedError();
    if (signal?.aborted) throw abortReason(signal);
    const live = this.registry.get(id) === entry;
    if (!live && entry.stream.failure !== null) throw entry.stream.failure;
    if (classifySendError(err) === 'other' || !live) {
      const e = new EngineClientError('transport', `${what} failed: ${describeError(err)}`, {
        cause: err,
        requestId: id,
      });
      this.rollback(entry, e);
      throw e;
    }
    // Nothing reached an engine: take the request off the rank before the rank's death fails what it holds.
    this.release(slot.index, [id]);
    entry.engineIndex = null;
    const error = this.scope.sendFailed(slot, what, err);
    if (retryable && this.registry.get(id) === entry) {
      this.logger.info(
        { requestId: id, engineIndex: slot.index },
        'ADD reached no engine; placing the request on another ready rank',
      );
      return;
    }
    this.rollback(entry, error);
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
    const entry = this.registry.get(requestId);
    if (!entry) return;
    const rank = entry.engineIndex;
    this.retire(entry, rank !== null);
    entry.stream.closeWithoutTerminal(true);
    if (rank !== null) {
      const error = await this.sendAbort(rank, [requestId]);
      if (error !== null) throw error;
    }
  }

  /** Every rank slot's state, in identity order (see `RankState`). */
  rankStates(): RankState[] {
    const now = this.now();
    return this.ranks.slots.map((s) =>
      rankStateOf(s, {
        inFlight: this.routing.inFlightCount(s.index),
        load: this.routing.load(s.index),
        loadAgeMs: this.routing.loadAgeMs(s.index, now),
        guard: this.routing.soleClientGuard(s.index),
        aborting: this.routing.abortingCount(s.index),
      }),
    );
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
    if (!this.registry.closed) {
      this.closeReason = error ?? new EngineClientError('client-closed', 'engine client is shutting down');
      const entries = this.registry.closeAndDrain();
      this.routing.clearInFlight();
      const aborts = error === null ? [] : this.scope.abortHeld(entries);
      for (const e of entries) {
        if (error === null) e.stream.closeWithoutTerminal();
        else e.stream.fail(error);
      }
      if (aborts.length > 0) await Promise.race([Promise.allSettled(aborts), delay(SHUTDOWN_ABORT_WAIT_MS)]);
    }
    this.stopTimers();
    for (const w of this.joinWaiters.splice(0)) w.reject(this.clientClosedError());
    try {
      await this.link.close();
    } catch (err) {
      this.logger.warn({ err }, 'engine link close failed');
    }
    await this.dispatcherDone;
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Ranks joining (the link's handshake service) and rank state

  /** Apply a liveness event; logs and emits `rank` on a change; notices the group starting to serve again. */
  private transition(index: number, event: LivenessEvent): boolean {
    const previous = this.ranks.apply(index, event);
    if (previous === null) return false;
    const l = this.ranks.slot(index)!.liveness;
    const level = l.state === 'dead' || l.state === 'stalled' ? 'warn' : 'info';
    this.logger[level](
      { engineIndex: index, from: previous, to: l.state, cause: l.cause, epoch: l.epoch },
      `DP rank ${index}: ${previous} → ${l.state}`,
    );
    if (l.state === 'dead') this.heardWhileDead.delete(index);
    if (l.state === 'dead' && isRevivable(l.cause)) this.scheduleRevival();
    const wasServing = this.serving;
    this.serving = this.canServe();
    if (this.serving) this.everServed = true;
    if (this.serving && !wasServing) this.scope.rebuildWaves();
    this.notify('rank', index, l.state, l.cause);
    return true;
  }

  /**
   * A HELLO for `index` (link listener): a slot that is not connected lets it in at once; a connected holder is probed
   * first (probes.ts): refused with EHOSTUNREACH (or stuck past the send timeout) → it is dead and the newcomer is let
   * in; still answering after every round → the newcomer is refused (two engines with one index).
   */
  private async admitHello(index: number): Promise<boolean> {
    const slot = this.ranks.slot(index);
    if (slot === undefined || this.registry.closed) return false;
    if (isConnected(slot.liveness.state)) {
      const epoch = slot.liveness.epoch;
      const holderGone = () => !isConnected(slot.liveness.state) || slot.liveness.epoch !== epoch;
      let elapsed = 0;
      for (const ms of PROBE_SCHEDULE_MS) {
        await delay(ms - elapsed); // the rounds go out at the schedule's offsets after the HELLO
        elapsed = ms;
        if (this.registry.closed) return false;
        if (holderGone()) break;
        await this.sender.probe(
          slot,
          `liveness probe (empty ABORT) to DP rank ${index}, whose engine index a new HELLO claims`,
        );
        if (holderGone()) break;
      }
      if (!holderGone()) return false;
    }
    this.transition(index, { kind: 'hello' });
    return true;
  }

  /**
   * A rank completed its handshake (link listener): a fresh process, so a fresh stored load, fresh watchdogs, an
   * empty in-flight set and nothing remembered by the policy (`forgetRank`); a live holder of the index is retired
   * first (cause `replaced`). A lockstep group may start serving again here. An adopted rank (`engine.adopted`: a
   * running engine of the previous gateway, link.ts) joins the same way, with the recorded ready response; its rows
   * for requests this gateway never issued are ABORTed once each (`abortForeign`).
   */
  private onJoined(engine: ConnectedEngine): void {
    const index = engine.engineIndex;
    const slot = this.ranks.slot(index);
    if (slot === undefined || this.registry.closed) return;
    if (isConnected(slot.liveness.state)) {
      this.scope.rankDied(
        index,
        'replaced',
        `DP rank ${index} was replaced: a new engine process joined with its engine index`,
      );
    }
    if (slot.liveness.epoch > 0) slot.counters.rejoins++;
    this.scope.noteJoined(index);
    this.forgetRankState(index, slot.liveness.epoch > 0);
    if (engine.adopted === true) this.foreign.adopt(index);
    slot.engine = engine;
    // A new process may speak another version of the wire (vLLM: its EngineCoreOutput layout).
    this.protocol.noteRankJoined?.(index, engine.ready);
    this.waves.noteRank(engine.ready);
    const r = engine.ready;
    const rejoin = slot.liveness.epoch > 0;
    this.logger.info(
      {
        engineIndex: index,
        maxModelLen: r.maxModelLen,
        numGpuBlocks: r.numGpuBlocks,
        dataParallelRank: r.dataParallelRank,
        dataParallelSize: r.dataParallelSize,
        readyForm: r.form,
        vllmVersion: r.vllmVersion,
        dtype: r.dtype,
        adopted: engine.adopted === true,
      },
      engine.adopted === true
        ? `DP rank ${index} adopted from the previous gateway's handshake`
        : rejoin
          ? `DP rank ${index} rejoined`
          : `DP rank ${index} joined`,
    );
    this.notify('joined', engine, rejoin);
    this.transition(index, { kind: 'joined' });
    if (this.ranks.allJoinedOnce()) for (const w of this.joinWaiters.splice(0)) w.resolve();
  }

  private onJoinFailed(index: number, reason: string): void {
    this.logger.warn({ engineIndex: index, reason }, `DP rank ${index} did not finish its handshake`);
    this.transition(index, { kind: 'handshake-failed' });
  }

  /**
   * Drop what belonged to `index`'s previous process: stored load, in-flight set, timers, and (unless this is the
   * slot's first join, when there is nothing to forget) the policy's state (`forgetRank`, interface A).
   */
  private forgetRankState(index: number, tellPolicy = true): void {
    this.routing.forgetRank(index);
    this.foreign.forget(index);
    this.silentRanks.stop(index);
    this.stalledRanks.stop(index);
    if (tellPolicy) this.policy.forgetRank?.(index);
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Selection (dp-routing.md section 9)

  /**
   * Pick the rank and reserve the in-flight slot, synchronously, and tell the policy (`onDispatch`). Pinned: the slot
   * of `dpRank` (else invalid-dp-rank, section 9.1), which must be ready (else `unavailable`). Unpinned: the policy
   * over one `RankView` per ready rank, in identity order (section 9.2), else `unavailable`.
   */
  private selectAndReserve(request: GenerateRequest, dpRank: number | undefined): { slot: RankSlot; pinned: boolean } {
    if (dpRank !== undefined) {
      const slot = this.ranks.slot(dpRank);
      if (slot === undefined) {
        const validRanks = this.ranks.slots.map((s) => s.index);
        throw new EngineClientError(
          'invalid-dp-rank',
          `DP rank ${String(dpRank)} does not exist: this engine group has ${this.ranks.size} rank(s) (valid ranks: ${validRanks.join(', ')})`,
          { dpRank, engineCount: this.ranks.size, validRanks },
        );
      }
      if (slot.liveness.state !== 'ready' || !this.canServe()) {
        const why =
          slot.liveness.state !== 'ready'
            ? `it is ${slot.liveness.state}`
            : `its lockstep group is not serving (${this.ranks.describe()})`;
        throw new EngineClientError('unavailable', `DP rank ${dpRank} cannot take requests now: ${why}`, { dpRank });
      }
      this.reserve(slot.index, request);
      return { slot, pinned: true };
    }
    if (!this.canServe()) {
      throw new EngineClientError(
        'unavailable',
        `no DP rank of this engine group can take requests now (${this.waves.lockstep ? 'a lockstep group needs every rank ready; ' : ''}${this.ranks.describe()})`,
      );
    }
    const ready = this.ranks.inState('ready');
    const now = this.now();
    const views: RankView[] = ready.map((s) => ({
      engineIndex: s.index,
      inFlight: this.routing.inFlightCount(s.index),
      load: this.routing.load(s.index),
      loadAgeMs: this.routing.loadAgeMs(s.index, now),
      service: this.routing.rates.view(s.index),
    }));
    const pos = this.policy.select(views, request);
    if (!Number.isInteger(pos) || pos < 0 || pos >= ready.length) {
      throw new RangeError(
        `DP policy ${this.policy.name} returned position ${pos}, expected an integer in 0..${ready.length - 1}`,
      );
    }
    const slot = ready[pos]!;
    this.reserve(slot.index, request);
    return { slot, pinned: false };
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Retirement (dp-routing.md sections 5, 10)

  /**
   * Add the request to `inflight[rank]`, start its service-rate accounting, arm the rank's watchdogs if it was idle
   * (14.8), tell the policy. If any of that throws, the slot is released again and the error rethrown (the submit's
   * rollback releases only a request whose rank it has recorded, which happens after this returns).
   */
  private reserve(rank: number, request: GenerateRequest): void {
    this.routing.reserve(rank, request.requestId);
    if (this.routing.inFlightCount(rank) === 1) this.markHeard(rank, this.now());
    try {
      const sample = this.routing.rates.dispatched(rank, request.requestId, request.promptTokenIds.length, this.now());
      const entry = this.registry.get(request.requestId); // registered before selection (section 3 step 2)
      if (entry !== undefined) entry.service = sample;
      this.syncRankWatchdogs(rank, false);
      this.policy.onDispatch?.(rank, request);
    } catch (err) {
      // The caller's rollback releases only a request whose engineIndex is set, which happens after this returns:
      // undo the reservation here, so a throw (a malformed request, a policy's onDispatch) leaves no slot held.
      this.release(rank, [request.requestId]);
      throw err;
    }
  }

  /**
   * `release(rank, ids)` with the clamp setting of the policy; counts clamp events; disarms the rank's watchdogs when
   * its in-flight set empties. `aborted`: the gateway ABORTs these ids on the rank, whose reports may count them
   * until it applies the ABORT (`RoutingState.releaseAborted`, dp-routing.md 14.3).
   */
  private release(rank: number, ids: Iterable<string>, aborted = false): void {
    const clamped = aborted
      ? this.routing.releaseAborted(rank, ids, this.releaseClamp)
      : this.routing.release(rank, ids, this.releaseClamp);
    if (clamped) {
      const slot = this.ranks.slot(rank);
      if (slot) slot.counters.clamps++;
    }
    this.syncRankWatchdogs(rank, false);
  }

  /** ABORT `ids` on `rank` through the sender (see `RankSender.abort`); null once accepted. Never rejects. */
  private sendAbort(rank: number, ids: readonly string[]): Promise<EngineClientError | null> {
    const slot = this.ranks.slot(rank);
    return slot === undefined ? Promise.resolve(null) : this.sender.abort(slot, ids);
  }

  /**
   * Remove `entry` if it is still live and release its slot on the recorded rank (`aborted`: the caller ABORTs it
   * there). Returns whether it was live.
   */
  private retire(entry: RegistryEntry, aborted = false): boolean {
    if (!this.registry.removeEntry(entry)) return false;
    if (entry.engineIndex !== null) this.release(entry.engineIndex, [entry.requestId], aborted);
    this.touchWatchdog(false);
    return true;
  }

  /** Synchronous rollback of a failed submit (section 3, section 12.3 rule 5); `aborted`: the caller ABORTs it. */
  private rollback(entry: RegistryEntry, err: unknown, aborted = false): void {
    this.retire(entry, aborted);
    entry.stream.fail(err instanceof Error ? err : new Error(String(err)));
  }

  /**
   * Auto-abort of an abandoned, unfinished stream (section 5): remove the entry, release the slot and send the
   * ABORT, all started in the same turn as the cancel (section 14.9). Idempotent.
   */
  private abandon(entry: RegistryEntry): void {
    const rank = entry.engineIndex;
    if (!this.retire(entry, rank !== null)) return;
    if (rank !== null) void this.sendAbort(rank, [entry.requestId]);
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Lockstep waves (dp-routing.md section 13)

  /**
   * `observe_wave(event)` (13.3), dispatcher step 3: complete(w) → clock ← max(clock, w + 1), no wake; start(w) →
   * clock ← max(clock, w), then `wake_group()` (13.2: clock + 1, START_DP_WAVE to every connected rank in identity
   * order, `RankSender.startWave`). In `auto` mode the first notification makes a group of unknown kind lockstep
   * (waves.ts; logged), and wakes it when requests are in flight. A dense group logs and ignores the event.
   */
  private observeWave(rank: number, event: WaveEvent): void {
    const before = this.waves.decidedBy;
    const decision = this.waves.observe(event, this.registry.size > 0);
    if (decision === 'ignored') {
      this.logger.warn(
        { engineIndex: rank, wave: event, decidedBy: this.waves.decidedBy },
        this.waves.decidedBy === 'option'
          ? 'wave notification ignored: the group is configured dense (lockstep: false)'
          : 'wave notification from a group that is not lockstep ignored (every rank reported data_parallel_size <= 1; dp-routing.md 13.1)',
      );
      return;
    }
    if (before === null && this.waves.decidedBy === 'wave-notification') {
      this.logger.info(
        { engineIndex: rank, wave: event, waveClock: this.waves.value, inFlight: this.registry.size },
        'lockstep group detected from a wave notification (no data_parallel_size in the ready responses); waking it on every submit from now on',
      );
    } else {
      this.logger.debug({ engineIndex: rank, wave: event, clock: this.waves.value }, 'wave notification applied');
    }
    if (decision !== 'wake') return;
    const wave = this.waves.bump();
    if (wave === null) return;
    // Nobody waits on this wake: if its broadcast fails, the group's ranks never start the wave and every request of
    // the group would hang until its stall, so the group fails now (a rank found dead on it already failed it).
    void this.sender.startWave(this.ranks.connected(), wave).then((e) => {
      if (e !== null && e.kind === 'transport' && !this.registry.closed)
        this.scope.failGroup(e, 'wave-send-failed', false);
    });
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Dispatcher (dp-routing.md section 8) and output-side failures (section 6)

  private async runDispatcher(): Promise<void> {
    try {
      for await (const msg of this.link.outputs()) {
        if (this.registry.closed) return;
        switch (msg.kind) {
          case 'frames': {
            this.handleFrames(msg.frames);
            this.touchWatchdog(true); // re-armed on every batch or decode error (section 8)
            // Bounded backlog of sliced deliveries: stop reading (ZeroMQ queues meanwhile) until it shrinks.
            const backlog = this.delivery.whenBelowLimit();
            if (backlog !== null) await backlog;
            break;
          }
          case 'dead': {
            // Names no rank (engine-wire.md 1.7): the probe rounds find the one whose identity vanished, unless a
            // rank was just found gone (its clean exit seen before its sentinel was read: failure-scope.ts).
            const sentinel = this.scope.noteSentinel();
            if ('tiedTo' in sentinel) {
              this.logger.warn(
                { engineIndex: sentinel.tiedTo },
                `ENGINE_CORE_DEAD received from DP rank ${sentinel.tiedTo}, already found gone`,
              );
              break;
            }
            this.logger.warn(
              { pendingSentinels: sentinel.pending },
              'ENGINE_CORE_DEAD received; probing every rank to find the dying one',
            );
            this.probes.start();
            break;
          }
          case 'closed':
            this.outputFailed(
              new EngineClientError('transport', `engine output socket failed: ${describeError(msg.error)}`, {
                cause: msg.error,
              }),
              'output-closed',
            );
            return;
          case 'disconnect':
            // A hint, not proof of death (link.ts); it does not re-arm the watchdog. `address` is the gateway's own
            // bound endpoint of the socket concerned; which rank went away is unknown: probe them all.
            this.logger.warn(
              { address: msg.address },
              `engine peer disconnected from the gateway socket bound at ${msg.address}`,
            );
            this.probes.start();
            break;
        }
        if (this.registry.closed) return;
      }
      this.outputFailed(new EngineClientError('client-closed', 'engine output stream ended'), 'output-ended');
    } catch (err) {
      this.outputFailed(
        new EngineClientError('transport', `engine output receive failed: ${describeError(err)}`, { cause: err }),
        'output-error',
      );
    }
  }

  /** The output socket is gone: nothing can be received any more. Group-scope failure, then the client closes for good. */
  private outputFailed(error: EngineClientError, cause: string): void {
    if (this.registry.closed) return;
    this.scope.failGroup(error, cause, true);
    this.closeReason = error;
    this.registry.closeAndDrain();
    this.stopTimers();
    for (const w of this.joinWaiters.splice(0)) w.reject(this.clientClosedError());
    this.link.close().catch((err: unknown) => this.logger.warn({ err }, 'engine link close failed'));
  }

  private handleFrames(frames: Uint8Array[]): void {
    let batch: EngineBatch;
    try {
      batch = this.protocol.decodeOutput(frames);
    } catch (err) {
      this.onDecodeError(err);
      return;
    }
    this.applyBatch(batch);
  }

  /**
   * An undecodable message is counted, logged (the first one, then a summary line per interval) and skipped. Every
   * ready rank that holds requests, sent nothing decodable for `DECODE_ATTRIBUTION_QUIET_MS` and was quiet through at
   * least `DECODE_ATTRIBUTION_MIN_ERRORS` undecodable messages is taken for their sender: it is stalled with a
   * `decode` error naming it (its requests end; it is back in rotation when it sends a decodable batch). Ranks that
   * keep streaming are never blamed, and the group never fails on frames no rank can be tied to (issue 26: a rogue
   * sender, or one broken rank among healthy ones).
   */
  private onDecodeError(err: unknown): void {
    this.stats.decodeErrors++;
    const now = this.now();
    const verdict = this.decodeLog.note(now);
    if (verdict.log) {
      this.logger.warn(
        { err, skipped: verdict.count, ...(verdict.sinceMs === null ? {} : { sinceMs: verdict.sinceMs }) },
        `skipping ${verdict.count === 1 ? 'an undecodable engine output message' : `${verdict.count} undecodable engine output messages`}` +
          `${verdict.sinceMs === null ? '' : ' since the last such line'} (model_gateway_decode_errors_total counts them all)`,
      );
    }
    for (const slot of this.ranks.inState('ready')) {
      const held = this.routing.inFlightCount(slot.index);
      if (held === 0) continue;
      const quiet = this.quietMs(slot.index, now);
      const through = this.stats.decodeErrors - this.decodeErrorsAtQuiet[slot.index]!;
      if (quiet < DECODE_ATTRIBUTION_QUIET_MS || through < DECODE_ATTRIBUTION_MIN_ERRORS) continue;
      this.stats.decodeSuspects++;
      const error = new EngineClientError(
        'decode',
        `DP rank ${slot.index} sent no decodable output for ${Math.round(quiet)} ms while holding ${held} request(s), and ` +
          `${through} undecodable messages arrived on its group's output socket meanwhile (last: ${describeError(err)}); ` +
          'taken out of rotation until it sends decodable output (engine/gateway version skew?)',
        { cause: err, dpRank: slot.index },
      );
      this.logger.error({ engineIndex: slot.index, err: error }, `DP rank ${slot.index}: its output does not decode`);
      this.scope.stalled(slot, error);
    }
  }

  /** `rank` sent a decodable batch, or got a request while holding none, at `now`: its quiet time starts over. */
  private markHeard(rank: number, now: number): void {
    if (rank < 0 || rank >= this.quietSince.length) return;
    this.quietSince[rank] = now;
    this.decodeErrorsAtQuiet[rank] = this.stats.decodeErrors;
  }

  /**
   * How long `rank` has held requests without a decodable batch naming it, in ms (0 when it holds none or is not
   * connected): from its last batch, or from when it got a request while holding none, whichever is later.
   */
  private quietMs(rank: number, now = this.now()): number {
    if (this.routing.inFlightCount(rank) === 0 || rank < 0 || rank >= this.quietSince.length) return 0;
    return Math.max(0, now - this.quietSince[rank]!);
  }

  /**
   * One decoded batch, in one synchronous block (dp-routing.md section 8 and 12.3 rule 2): reset the decode-error
   * count; a stalled rank that speaks is back in rotation; store the load report BEFORE any release (only for a
   * connected rank: a dead rank's late batch must not resurrect a load); apply the wave event; route the rows
   * (batch-router.ts `planBatch`: each live request's stream takes its rows now, its push-mode listener hears of them
   * in the sliced delivery that follows, delivery-queue.ts); release `finished` from the batch's rank for EVERY batch (the clamp, 10.3);
   * drop rows naming another rank's requests and ABORT them at the sender (14.6, issue 26); re-arm the watchdogs of
   * the batch's rank; and drop rows for requests their rank no longer owns, counting them and ABORTing each id once.
   */
  private applyBatch(batch: EngineBatch): void {
    const rank = batch.engineIndex;
    const slot = this.ranks.slot(rank);
    if (slot !== undefined) slot.counters.batches++;
    const live = slot !== undefined && isConnected(slot.liveness.state);
    const now = this.now();
    if (live) this.markHeard(rank, now);
    else if (slot?.liveness.state === 'dead') this.heardWhileDead.add(rank);
    if (live && batch.load) logGuardTransition(this.logger, rank, this.routing.storeLoad(rank, batch.load, now));
    if (live && batch.wave) this.observeWave(rank, batch.wave);

    const plan = planBatch(batch, (id) => this.registry.get(id));
    // Service rates only from a connected rank, through each entry's own sample (no lookup per row).
    const rates = live ? this.routing.rates : null;
    const { entries, rows } = plan;
    for (let i = 0; i < entries.length; i++) {
      const entry = entries[i]!;
      const row = this.contract.check(entry, rows[i]!, rank); // the row itself, unless the engine broke the contract
      if (row === null) continue;
      if (rates !== null && entry.service !== undefined) rates.observeRow(rank, entry.service, row, now);
      if (row.finishReason !== null) {
        this.registry.removeEntry(entry);
        entry.stream.deliver(row);
      } else if (!entry.stream.deliver(row)) {
        this.abandon(entry); // consumer gone (cannot normally happen: a cancel retires synchronously)
      }
    }
    for (const e of plan.closedWithoutTerminal) {
      this.registry.removeEntry(e);
      e.stream.closeWithoutTerminal();
    }
    this.release(rank, plan.finished);
    if (slot?.liveness.state === 'stalled') this.transition(rank, { kind: 'heard' });
    this.syncRankWatchdogs(rank, true);
    if (plan.mismatches > 0) this.onMismatches(rank, plan.mismatches, plan.foreign, now);
    for (const id of plan.unknownRows) {
      this.routing.noteRow(rank, id);
      this.scope.orphanRow(id, plan.finished.has(id));
    }
    if (plan.unknownRows.length > 0) this.contract.unknownRows(plan.unknownRows, rank);
    if (live && plan.unknownRows.length > 0 && this.foreign.isAdopted(rank))
      this.abortForeign(slot, plan.unknownRows, plan.finished);
    if (plan.unknownRows.length > 0 && !live) {
      this.logger.debug(
        { engineIndex: rank, rows: plan.unknownRows.length },
        'output from a rank that is not connected dropped',
      );
    }
  }

  /**
   * A batch naming `rank` carried `count` rows or finished ids of requests sent to another rank (rank fidelity, 14.6;
   * issue 26): none was applied (the owners keep their streams). The rows' ids are ABORTed at `rank`, the sender the
   * batch claims to be, so a misbehaving engine stops producing them; counted, and logged at a bounded rate.
   */
  private onMismatches(rank: number, count: number, foreign: readonly string[], now: number): void {
    this.stats.rankMismatches += count;
    if (
      foreign.length > 0 &&
      this.ranks.slot(rank) !== undefined &&
      isConnected(this.ranks.slot(rank)!.liveness.state)
    ) {
      void this.sendAbort(rank, foreign);
    }
    const verdict = this.mismatchLog.note(now, count);
    if (!verdict.log) return;
    this.logger.warn(
      {
        engineIndex: rank,
        mismatches: verdict.count,
        sampleRequestId: foreign[0],
        ...(verdict.sinceMs === null ? {} : { sinceMs: verdict.sinceMs }),
      },
      `dropped ${verdict.count} output row(s) or finished id(s) naming DP rank ${rank} for requests sent to another rank` +
        `${verdict.sinceMs === null ? '' : ' since the last such line'}; their ids were ABORTed at rank ${rank} (rank fidelity, ` +
        'dp-routing.md 14.6; a TokenSpeed sender without engine_index under DP > 1 looks like this too)',
    );
  }

  /** ABORT, once each, the ids an adopted rank still runs for the previous gateway (foreign-requests.ts). */
  private abortForeign(slot: RankSlot, unknownRows: readonly string[], finished: ReadonlySet<string>): void {
    const { ids, first } = this.foreign.toAbort(slot.index, unknownRows, finished);
    if (ids.length === 0) return;
    if (first) {
      this.logger.info(
        { engineIndex: slot.index, requestIds: ids.length },
        `DP rank ${slot.index} still runs requests of the previous gateway; ABORTing each once`,
      );
    }
    void this.sender.abort(slot, ids);
  }

  /** Emit `event` to its listeners; a listener that throws is logged, never breaks the client. */
  private notify<E extends keyof EngineClientEvents>(event: E, ...args: EngineClientEvents[E]): void {
    try {
      // `as never`: TypeScript cannot relate a generic E's tuple to EventEmitter's conditional parameter type.
      this.emit(event, ...(args as never));
    } catch (err) {
      this.logger.error({ err }, `a '${event}' listener threw`);
    }
  }

  /** `client-closed` naming what closed the client (a failure, or the shutdown message). */
  private clientClosedError(): EngineClientError {
    const base = 'engine client is shutting down';
    const reason = this.closeReason;
    let suffix = '';
    if (reason !== null && reason.kind !== 'client-closed') suffix = ` (engine client failed: ${reason.message})`;
    else if (reason !== null && reason.message !== base) suffix = ` (${reason.message})`;
    return new EngineClientError('client-closed', `${base}${suffix}`, { cause: reason ?? undefined });
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Timers: group silence watchdog (section 6), per-rank silence and stall timers (14.8; issue #8 part 3), probes

  /**
   * The group watchdog is armed while requests are registered and restarted on every batch or decode error. Queued
   * aborts and `disconnect` hints do not restart it (14.8: client cancels would keep a dead engine looking alive).
   */
  private touchWatchdog(reset: boolean): void {
    this.watchdog.touch(!this.registry.closed && this.registry.size > 0, reset);
  }

  private stopTimers(): void {
    this.watchdog.stop();
    this.silentRanks.stopAll();
    this.stalledRanks.stopAll();
    this.probes.cancel();
    if (this.revivalTimer !== null) clearTimeout(this.revivalTimer);
    this.revivalTimer = null;
  }

  /**
   * Probe dead ranks that may still be the same working process (rank-liveness.ts `isRevivable`; issue 26) every
   * `REVIVAL_PROBE_INTERVAL_MS` while there are any: the input ROUTER refuses a send to an identity no peer holds
   * (probes.ts), so a probe it accepts means the rank's engine is connected again, and it is back in rotation
   * (`revive`). A rank whose process is gone keeps failing the probe at no cost; one that says HELLO leaves `dead`
   * and is not probed.
   */
  private scheduleRevival(): void {
    if (this.revivalTimer !== null || this.registry.closed) return;
    this.revivalTimer = unrefTimer(() => {
      this.revivalTimer = null;
      if (this.registry.closed) return;
      const candidates = this.ranks.slots.filter(
        (s) => s.liveness.state === 'dead' && isRevivable(s.liveness.cause) && s.engine !== null,
      );
      if (candidates.length === 0) return;
      for (const slot of candidates) {
        if (this.revivalProbing.has(slot.index) || !this.mayRevive(slot)) continue;
        this.revivalProbing.add(slot.index);
        const epoch = slot.liveness.epoch;
        void this.sender.probeDead(slot).then((answered) => {
          this.revivalProbing.delete(slot.index);
          if (answered && slot.liveness.state === 'dead' && slot.liveness.epoch === epoch && !this.registry.closed)
            this.revive(slot.index);
        });
      }
      this.scheduleRevival();
    }, REVIVAL_PROBE_INTERVAL_MS);
  }

  /**
   * Whether a dead `slot` may be probed back now: a rank found dead by its silence (`rank-silent`) holds its socket
   * while hung (SIGSTOP), so a probe is accepted into the pipe although nobody reads it; it must first have sent a
   * batch since it died. The other revivable causes lost the identity (or were never the rank's fault): a probe the
   * ROUTER accepts is proof enough.
   */
  private mayRevive(slot: RankSlot): boolean {
    return slot.liveness.cause !== 'rank-silent' || this.heardWhileDead.has(slot.index);
  }

  /** A dead rank answers again as the same process: back in rotation, told to drop what it was failed with. */
  private revive(index: number): void {
    const slot = this.ranks.slot(index)!;
    const cause = slot.liveness.cause;
    this.stats.revivals++;
    slot.counters.revivals++;
    this.logger.warn(
      { engineIndex: index, deathCause: cause },
      `DP rank ${index} answers again (its engine is connected to the input socket): back in rotation`,
    );
    this.routing.forgetRank(index);
    this.markHeard(index, this.now());
    this.scope.revived(index);
    this.transition(index, { kind: 'revived' });
  }

  /**
   * Per-rank timers: armed while the rank is connected and holds in-flight requests (the stall timer only while it is
   * `ready`); `reset` = the rank was just heard from.
   */
  private syncRankWatchdogs(rank: number, reset: boolean): void {
    const state = this.ranks.slot(rank)?.liveness.state;
    const live =
      !this.registry.closed && state !== undefined && isConnected(state) && this.routing.inFlightCount(rank) > 0;
    this.silentRanks.touch(rank, live, reset);
    this.stalledRanks.touch(rank, live && state === 'ready', reset);
  }

  /** A rank held requests and sent nothing for `silenceTimeoutMs` (14.8): it is dead (cause `rank-silent`). */
  private onRankSilent(rank: number): void {
    const held = this.routing.inFlightCount(rank);
    if (this.registry.closed || held === 0) return;
    this.scope.rankDied(
      rank,
      'rank-silent',
      `DP rank ${rank} sent no output for ${this.silenceTimeoutMs} ms while holding ${held} in-flight request(s) (per-rank silence watchdog)`,
    );
  }

  /**
   * A ready rank held requests and sent nothing for `rankStallTimeoutMs` (issue #8 part 3): `FailureScope.stalled`
   * takes it out of rotation and ends its requests.
   */
  private onRankStalled(rank: number): void {
    const held = this.routing.inFlightCount(rank);
    const slot = this.ranks.slot(rank);
    if (this.registry.closed || held === 0 || slot?.liveness.state !== 'ready') return;
    const error = new EngineClientError(
      'rank-stalled',
      `DP rank ${rank} stalled: it sent no output for ${this.stallTimeoutMs} ms while holding ${held} in-flight request(s) ` +
        '(--rank-stall-timeout-ms); it is out of rotation until it speaks again',
      { dpRank: rank },
    );
    this.scope.stalled(slot, error);
  }

  /** One probe round (after a `disconnect` hint or ENGINE_CORE_DEAD); the last one settles unattributed sentinels. */
  private probeRound(last: boolean): void {
    if (this.registry.closed) return;
    const probes = this.ranks
      .connected()
      .map((s) => this.sender.probe(s, `liveness probe (empty ABORT) to DP rank ${s.index}`));
    if (last)
      void Promise.allSettled(probes).then(() =>
        this.scope.settleSentinels(PROBE_SCHEDULE_MS[PROBE_SCHEDULE_MS.length - 1]!),
      );
  }

  private onGroupSilence(): void {
    const live = this.registry.size;
    if (this.registry.closed || live === 0) return;
    this.scope.failGroup(
      new EngineClientError(
        'engine-dead',
        `no engine output for ${this.silenceTimeoutMs} ms while ${live} request(s) were in flight (group silence watchdog)`,
      ),
      'watchdog',
      true,
    );
  }
}
