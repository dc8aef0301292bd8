/**
 * The engine client (dp-routing.md; reference: SMG `connector.rs`, crate `engine_zmq_client`): one per worker. It
 * owns the worker's `EngineLink` (the input ROUTER and output PULL shared by every rank), turns submitted requests
 * into ADD messages sent to the chosen rank's identity, routes decoded output batches to per-request streams,
 * handles cancellation and failures, keeps the in-flight sets and stored loads, applies the release clamp and picks
 * the DP rank of every request.
 *
 * Concurrency model (dp-routing.md section 12.3): every state change that must be atomic happens in one synchronous
 * block with no `await` inside: register → select → reserve → encode (submit), and store load → wave → route →
 * release → clamp (dispatcher, per batch). The only `await`s are the link's sends and the output iterator.
 *
 * Lockstep groups (dp-routing.md 13; `waves.ts`): after every successful ADD, and on a rank's start-wave request,
 * START_DP_WAVE `[clock + 1, nil]` goes to every rank in list order; a group whose kind is still unknown (short ready
 * responses, issue #14) gets it once, after its first ADD, until a wave notification shows it is lockstep. Failures
 * (dp-routing.md 6 and 14.8; issue #3 part 4): ENGINE_CORE_DEAD, a send timeout, 3 consecutive undecodable messages,
 * the client-wide silence watchdog, a per-rank silence watchdog, and a send refused with EHOSTUNREACH (the rank's
 * identity is gone; also probed after every `disconnect` hint) each fail the whole engine group: every live request
 * gets the same terminal error and the client is closed for good (`isAlive()` false, `failed` emitted) while other
 * groups' clients keep serving.
 */
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import { pino, type Logger } from 'pino';
import type { EngineBatch, EngineLoad, EngineProtocol, GenerateRequest, WaveEvent } from '../protocols/types.js';
import { RequestType } from '../protocols/types.js';
import type { ConnectedEngine, EngineLink } from './link.js';
import { EngineClientError, describeError } from './errors.js';
import { createLoadPolicy, type DpPolicy, type RankView } from './policy.js';
import { RequestRegistry, type RegistryEntry } from './registry.js';
import { RequestStreamImpl, type RequestStream } from './request-stream.js';
import { RoutingState, type StoreLoadResult } from './routing-state.js';
import { RankSilenceWatchdogs, SilenceWatchdog } from './watchdog.js';
import { WaveClock, type GroupKind, type KindSource, type LockstepSetting } from './waves.js';

/** Default silence-watchdog timeout in ms (dp-routing.md section 6: 300 s without dispatcher activity). */
export const DEFAULT_SILENCE_TIMEOUT_MS = 300_000;
/** Consecutive undecodable messages that fail the client (dp-routing.md section 6; SMG PR #2175). */
export const MAX_CONSECUTIVE_DECODE_ERRORS = 3;
/**
 * When the liveness probes go out after a `disconnect` hint, in ms after the hint (a new hint restarts the series).
 * Several rounds because libzmq drops a vanished peer's ROUTER pipe asynchronously: a send processes pending socket
 * commands only when about a millisecond has passed since it last did (libzmq `process_commands` throttling), so a
 * probe sent right after the hint may still be accepted into the dying pipe (measured over ipc with zeromq 6.8.0:
 * the immediate probe succeeded, one a few ms later failed with EHOSTUNREACH). Later rounds are certain to see it.
 * No round goes out at 0 ms: a rank that exits cleanly pushes `ENGINE_CORE_DEAD` and then closes its sockets, and an
 * immediate probe could win the race against that sentinel and report the death as `peer-unreachable` instead of
 * `engine-core-dead` (seen in 2 of 13 e2e runs). 20 ms lets the sentinel be read first; a SIGKILLed rank was caught
 * at the 20 ms round in practice anyway.
 */
export const PROBE_SCHEDULE_MS: readonly number[] = Object.freeze([20, 200, 1000]);

/**
 * Constructor options.
 * - `protocol`: the engine family's codec (TokenSpeed or vLLM).
 * - `link`: the connected socket set (after the handshake); the client owns it from now on and closes it on
 *   `close()` or on any fail_all.
 * - `policy`: the unpinned rank-selection policy (default `createLoadPolicy()`, SMG's DP scorer).
 * - `silenceTimeoutMs`: silence timeout in ms (default 300 000; must be a positive finite number), used by both the
 *   client-wide watchdog (dp-routing.md 6) and the per-rank watchdogs (14.8).
 * - `logger`: pino logger (default: silent).
 * - `lockstep`: the group's kind (waves.ts, issue #14): `auto` (default: from the ready responses' `data_parallel_size`,
 *   else from the first wave notification, with one probe wake on the first submit while unknown), `true` (force
 *   lockstep: every submit wakes the group) or `false` (force dense: never woken, wave notifications ignored).
 * - `now`: monotonic clock in ms that stamps stored loads for ageing (dp-routing.md 14.1; default
 *   `performance.now`). Tests pass their own.
 */
export interface EngineClientOptions {
  protocol: EngineProtocol;
  link: EngineLink;
  policy?: DpPolicy;
  silenceTimeoutMs?: number;
  logger?: Logger;
  lockstep?: LockstepSetting;
  now?: () => number;
}

/**
 * Per-submit options.
 * - `dpRank`: pin the request to the engine whose identity decodes to this DP rank (dp-routing.md section 9.1;
 *   gateway.md section 14 `X-data-parallel-rank`). No scoring; the scan start is not advanced.
 * - `signal`: aborting it aborts the request like `RequestStream.cancel()` (section 5). Already aborted at submit →
 *   `submit` rejects with `signal.reason` and nothing is registered or sent.
 */
export interface SubmitOptions {
  dpRank?: number;
  signal?: AbortSignal;
}

/**
 * One rank's routing state for /metrics and health (gateway.md section 15.3). Only engines with a 2-byte identity
 * (an engine index) appear.
 * - `inFlight`: size of the in-flight set (requests routed there and not yet retired); 0 when idle.
 * - `load`: the stored load (a copy; raw last report, except that the release clamp may have zeroed the queue
 *   counts), or null before the first report.
 * - `dispatchedPinned` / `dispatchedUnpinned`: successful submits to this rank (ADD sent and, for a lockstep group,
 *   the group woken), pinned / scored.
 * - `clampEvents`: how often the release clamp turned non-zero running/waiting counts into 0 (section 10.2).
 * - `loadAgeMs`: ms since `load` was stored (section 14.1), null before the first report.
 * - `soleClientGuard`: true while the rank's reports show another client's work, so the release clamp is
 *   suspended for it (section 14.3); `guardEngagements` / `guardDisengagements` count the transitions.
 * The last four are always filled by `EngineClient`; optional so other `RankState` sources (fakes) need not.
 */
export interface RankState {
  engineIndex: number;
  inFlight: number;
  load: EngineLoad | null;
  dispatchedPinned: number;
  dispatchedUnpinned: number;
  clampEvents: number;
  loadAgeMs?: number | null;
  soleClientGuard?: boolean;
  guardEngagements?: number;
  guardDisengagements?: number;
}

/**
 * Client-wide counters (gateway.md section 15.3, "wire health"). A live object: read it, never write it.
 * - `decodeErrors`: undecodable output messages (all, including the ones that failed the client).
 * - `abortsSent`: ABORT messages the link accepted.
 * - `rankMismatches`: batch rows (or finished ids) whose request the client recorded on another rank
 *   (dp-routing.md section 14.6).
 * - `failures`: fail_all events by cause: `engine-core-dead`, `output-closed`, `output-error`, `output-ended`,
 *   `send-timeout`, `abort-send-failed`, `watchdog` (client-wide silence), `rank-silent` (per-rank silence, 14.8),
 *   `peer-unreachable` (a send refused with EHOSTUNREACH), `probe-send-failed`, `wave-send-failed`,
 *   `decode-errors`. At most one entry is ever counted: fail_all happens once.
 */
export interface ClientStats {
  decodeErrors: number;
  abortsSent: number;
  rankMismatches: number;
  failures: Record<string, number>;
}

/** Events emitted by `EngineClient` (a typed node:events EventEmitter). */
export interface EngineClientEvents {
  /** The client failed for good (fail_all; dp-routing.md section 6). Emitted once; `close()` does not emit it. */
  failed: [error: EngineClientError];
}

interface RankCounters {
  pinned: number;
  unpinned: number;
  clamps: number;
}

/**
 * How a failed link send is treated (dp-routing.md 6, 14.8):
 * - `timeout`: `SendTimeoutError` (engine-wire.md 1.9, SMG PR #2094);
 * - `unreachable`: a `TransportError` with code `EHOSTUNREACH`: the input ROUTER has `mandatory` on
 *   (src/transport/zmq-link.ts), so this means no connected peer has the rank's identity any more: the rank died;
 * - `other`: anything else.
 * Matched by `name` / `code` so the client needs no runtime import of src/transport.
 */
type SendErrorClass = 'timeout' | 'unreachable' | 'other';

function classifySendError(err: unknown): SendErrorClass {
  if (err instanceof Error && err.name === 'SendTimeoutError') return 'timeout';
  if (err instanceof Error && (err as { code?: unknown }).code === 'EHOSTUNREACH') return 'unreachable';
  return 'other';
}

/**
 * A classified send failure: `error` is what the caller reports; `handled` = the client already failed or was
 * closed (fail_all ran, nothing is left to roll back); otherwise the caller applies its own consequence.
 */
interface SendFailure {
  error: EngineClientError;
  handled: boolean;
}

function rankName(engine: ConnectedEngine): string {
  return String(engine.engineIndex ?? '?');
}

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('The operation was aborted', 'AbortError');
}

/**
 * One worker's engine client. Construction starts the dispatcher (the output loop). Health/metrics learn about a
 * fatal failure through the `failed` event (`client.on('failed', (err) => …)`, node:events EventEmitter) or by
 * polling `isAlive()`.
 */
export class EngineClient extends EventEmitter<EngineClientEvents> {
  /** Connected ranks, sorted by identity bytes (engine-wire.md 1.5); positions are the selection scan order. */
  readonly engines: readonly ConnectedEngine[];
  /** The unpinned selection policy in use. */
  readonly policy: DpPolicy;
  /** Live counters (see `ClientStats`). */
  readonly stats: ClientStats = { decodeErrors: 0, abortsSent: 0, rankMismatches: 0, failures: {} };

  private readonly protocol: EngineProtocol;
  private readonly link: EngineLink;
  private readonly logger: Logger;
  private readonly silenceTimeoutMs: number;
  private readonly releaseClamp: boolean;
  private readonly now: () => number;
  private readonly registry = new RequestRegistry();
  private readonly routing = new RoutingState();
  private readonly counters = new Map<number, RankCounters>();
  private consecutiveDecodeErrors = 0;
  private readonly watchdog: SilenceWatchdog;
  private readonly rankWatchdogs: RankSilenceWatchdogs;
  private readonly waves: WaveClock;
  private readonly probeTimers = new Set<ReturnType<typeof setTimeout>>();
  private closeReason: EngineClientError | null = null;
  private closing: Promise<void> | null = null;
  private readonly dispatcherDone: Promise<void>;

  /**
   * Build the client over a connected link and start the dispatcher.
   * Throws RangeError when `silenceTimeoutMs` is not a positive finite number.
   */
  constructor(opts: EngineClientOptions) {
    super();
    const silence = opts.silenceTimeoutMs ?? DEFAULT_SILENCE_TIMEOUT_MS;
    if (!Number.isFinite(silence) || silence <= 0) {
      throw new RangeError(`silenceTimeoutMs must be a positive number of ms, got ${silence}`);
    }
    this.protocol = opts.protocol;
    this.link = opts.link;
    this.engines = opts.link.engines;
    this.policy = opts.policy ?? createLoadPolicy();
    this.releaseClamp = this.policy.releaseClamp ?? true;
    this.now = opts.now ?? (() => performance.now());
    this.silenceTimeoutMs = silence;
    this.watchdog = new SilenceWatchdog(silence, () => this.onSilence());
    this.rankWatchdogs = new RankSilenceWatchdogs(silence, (rank) => this.onRankSilent(rank));
    this.waves = new WaveClock(this.engines, opts.lockstep ?? 'auto');
    this.logger = opts.logger ?? pino({ level: 'silent' });
    for (const e of this.engines) {
      if (e.engineIndex !== null && !this.counters.has(e.engineIndex)) {
        this.counters.set(e.engineIndex, { pinned: 0, unpinned: 0, clamps: 0 });
      }
    }
    this.dispatcherDone = this.runDispatcher();
  }

  /** Maximum context length in tokens: the first engine's `max_model_len` (gateway.md 15.1). Throws `client-closed` without engines. */
  get maxModelLen(): number {
    const first = this.engines[0];
    if (!first) throw new EngineClientError('client-closed', 'no engines connected');
    return first.ready.maxModelLen;
  }

  /**
   * The usable context in tokens: `maxModelLen − protocol.reservedContextTokens` (TokenSpeed: `max_model_len − 2`,
   * engine-wire.md 4.4 last paragraph; vLLM: `max_model_len`). Prompt + completion must fit in it: a prompt of this
   * many tokens or more gets no completion, and the default completion limit is `contextTokenLimit − prompt_len`
   * (gateway.md 9). `maxModelLen` (what /v1/models reports) is left unchanged. Throws `client-closed` without
   * engines, like `maxModelLen`.
   */
  get contextTokenLimit(): number {
    return Math.max(0, this.maxModelLen - this.protocol.reservedContextTokens);
  }

  /**
   * True when the group steps in lockstep (dp-routing.md 13.1, engine-wire.md 5.12; waves.ts): forced by the
   * `lockstep` option, or some rank's ready response has `dataParallelSize > 1`, or (`auto`) a rank sent a wave
   * notification. Then every submit wakes the whole group. May turn true after construction, never back.
   */
  get lockstep(): boolean {
    return this.waves.lockstep;
  }

  /** The group's kind (`lockstep`, `dense`, or `unknown` until evidence arrives; waves.ts) and what decided it. */
  get groupKind(): { kind: GroupKind; decidedBy: KindSource | null } {
    return { kind: this.waves.kind, decidedBy: this.waves.decidedBy };
  }

  /** The wave clock (dp-routing.md 13.1; a wave number ≥ 0, starting at 0), or null for a non-lockstep group. */
  get waveClock(): number | null {
    return this.waves.value;
  }

  /** Number of registered (live) requests. */
  get registeredCount(): number {
    return this.registry.size;
  }

  /** `not closed` (dp-routing.md section 2 `is_alive`); local, sends nothing to the engines. */
  isAlive(): boolean {
    return !this.registry.closed;
  }

  /**
   * Submit one request (dp-routing.md section 3). Synchronously, before the first `await`: validate, register,
   * select a rank and reserve its in-flight slot (one step), encode (with the pinned rank as `AddTarget.dpRank`, so
   * vLLM sets `data_parallel_rank`; gateway.md 14); then send `[identity, 00, payload]` through the link, wake the
   * group if it is lockstep (step 6, dp-routing.md 13.2: clock + 1, START_DP_WAVE `[clock, nil]` to every rank in
   * list order, the holder included) and resolve with the request's stream. Every failure rolls back synchronously
   * (registry entry removed, slot released; a failed wake also sends an ABORT for the request, its result ignored)
   * and rejects with an `EngineClientError`:
   * `client-closed` (closed client, no engines, or the client failed while a send was pending),
   * `duplicate-request-id`, `invalid-dp-rank`, `encode` (also for an empty request id), `transport` (a send failed),
   * `engine-dead` (a send timed out or was refused with EHOSTUNREACH; this also fails every other request,
   * section 6 / 14.8). A pre-aborted `signal` rejects with its reason, as does a signal that fires while a send is
   * pending (the ABORT is sent in that case).
   */
  async submit(request: GenerateRequest, options: SubmitOptions = {}): Promise<RequestStream> {
    const { dpRank, signal } = options;
    // 1. Validate (TokenSpeed and vLLM text requests: nothing protocol-specific at this level).
    if (typeof request?.requestId !== 'string' || request.requestId.length === 0) {
      throw new EngineClientError('encode', 'request id must be a non-empty string');
    }
    if (signal?.aborted) throw abortReason(signal);
    if (this.registry.closed) throw this.clientClosedError(); // names the failure that closed the client
    const id = request.requestId;

    // 2. Register before any reservation (section 3 step 2, section 7).
    let detachSignal: () => void = () => {};
    const promptTokens = Array.isArray(request.promptTokenIds) ? request.promptTokenIds.length : 0;
    const stream: RequestStreamImpl = new RequestStreamImpl(
      id,
      promptTokens,
      () => this.abandon(entry),
      () => detachSignal(),
    );
    const entry: RegistryEntry = { requestId: id, stream, engine: null, engineIndex: null };
    this.registry.register(entry);

    // 3. Select and reserve in the same synchronous step (section 9, section 12.3 rule 1).
    let engine: ConnectedEngine;
    let pinned: boolean;
    try {
      ({ engine, pinned } = this.selectAndReserve(request, dpRank));
    } catch (err) {
      this.rollback(entry, err);
      throw err;
    }
    entry.engine = engine;
    entry.engineIndex = engine.engineIndex;
    stream.engineIndex = engine.engineIndex;
    // Armed after the rank's own watchdog (selectAndReserve), so when everything is silent the per-rank one fires
    // first and names the rank.
    this.touchWatchdog(false);

    // 4. Encode. The pinned rank is the only target information a payload carries (gateway.md 14).
    let payload: Uint8Array;
    try {
      payload = this.protocol.encodeAdd(request, { dpRank: pinned ? engine.engineIndex : null });
    } catch (err) {
      const e = new EngineClientError('encode', `cannot encode request ${JSON.stringify(id)}: ${describeError(err)}`, {
        cause: err,
        requestId: id,
      });
      this.rollback(entry, e);
      throw e;
    }

    if (signal) {
      const onAbort = (): void => stream.cancel();
      signal.addEventListener('abort', onAbort, { once: true });
      detachSignal = () => signal.removeEventListener('abort', onAbort);
    }

    // 5. Send through the link's FIFO send queue, bounded by its send timeout.
    try {
      await this.link.send(engine.identity, RequestType.ADD, payload);
    } catch (err) {
      const f = this.sendFailed(err, `sending request ${JSON.stringify(id)} to DP rank ${rankName(engine)}`, id);
      if (!f.handled) this.rollback(entry, f.error);
      throw f.error;
    }
    // The client failed or closed while this ADD was queued (section 12.3 rule 4): queued sends fail with
    // client-closed (the message names the original failure; the stream itself already received it).
    if (this.registry.closed) throw this.clientClosedError();
    if (signal?.aborted) throw abortReason(signal);

    // 6. Wake a lockstep group after EVERY successful ADD (section 13.2; nothing for a dense group), and a group of
    // unknown kind after its first one (waves.ts `submitWake`: the no-hang probe before lockstep detection).
    const wave = this.waves.submitWake();
    if (wave !== null) {
      const failure = await this.wakeGroup(wave);
      if (failure) {
        if (!failure.handled) {
          const live = this.registry.get(id) === entry; // not already finished by the engine
          this.rollback(entry, failure.error);
          if (live) this.sendAbort(engine, id).catch(() => {}); // section 3 step 6: its result is ignored
        }
        throw failure.error;
      }
      if (this.registry.closed) throw this.clientClosedError();
      if (signal?.aborted) throw abortReason(signal);
    }

    // 7. Return the stream.
    if (engine.engineIndex !== null) {
      const c = this.counters.get(engine.engineIndex);
      if (c) {
        if (pinned) c.pinned++;
        else c.unpinned++;
      }
    }
    return stream;
  }

  /**
   * Explicit abort (dp-routing.md section 5): remove the registry entry, release the in-flight slot, end the stream
   * (its reader gets a stream-closed error naming the id, as in SMG where removing the entry closes the sink), send
   * `[identity, 01, ["<id>"]]` to the recorded rank and resolve with the send's result. Never waits for an engine
   * confirmation. An unknown or already finished id is a no-op (nothing is sent: the rank is unknown).
   * Rejects with `engine-dead` (send timeout, which fails the client) or `transport` (which also fails the client:
   * the section 14.8 gap, see `sendAbort`).
   */
  async abort(requestId: string): Promise<void> {
    const entry = this.registry.get(requestId);
    if (!entry) return;
    this.retire(entry);
    entry.stream.closeWithoutTerminal();
    if (entry.engine) await this.sendAbort(entry.engine, requestId);
  }

  /** Per-rank routing state, in engine (identity) order; engines without an index are left out. */
  rankStates(): RankState[] {
    const out: RankState[] = [];
    for (const e of this.engines) {
      const idx = e.engineIndex;
      if (idx === null) continue;
      const c = this.counters.get(idx) ?? { pinned: 0, unpinned: 0, clamps: 0 };
      const guard = this.routing.soleClientGuard(idx);
      out.push({
        engineIndex: idx,
        inFlight: this.routing.inFlightCount(idx),
        load: this.routing.load(idx),
        dispatchedPinned: c.pinned,
        dispatchedUnpinned: c.unpinned,
        clampEvents: c.clamps,
        loadAgeMs: this.routing.loadAgeMs(idx, this.now()),
        soleClientGuard: guard.engaged,
        guardEngagements: guard.engagements,
        guardDisengagements: guard.disengagements,
      });
    }
    return out;
  }

  /**
   * Shut the client down ("client dropped", dp-routing.md section 4): mark it closed, end every live stream with a
   * stream-closed error naming its id, clear the in-flight sets, stop the watchdog, close the link and wait for the
   * dispatcher to exit. No ABORTs are sent. Idempotent; never rejects. Does not emit `failed`.
   */
  close(): Promise<void> {
    this.closing ??= this.doClose();
    return this.closing;
  }

  private async doClose(): Promise<void> {
    if (!this.registry.closed) {
      this.closeReason = new EngineClientError('client-closed', 'engine client is shutting down');
      const entries = this.registry.closeAndDrain();
      this.routing.clearInFlight();
      for (const e of entries) e.stream.closeWithoutTerminal();
    }
    this.clearWatchdog();
    try {
      await this.link.close();
    } catch (err) {
      this.logger.warn({ err }, 'engine link close failed');
    }
    await this.dispatcherDone;
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Selection (dp-routing.md section 9)

  /**
   * Pick the engine and reserve the in-flight slot, synchronously. Pinned: the engine whose identity decodes to
   * `dpRank`, else invalid-dp-rank (section 9.1). Unpinned: the policy over one `RankView` per engine (section 9.2).
   * Either way the policy's `onDispatch` hook then sees the request, in the same step.
   */
  private selectAndReserve(
    request: GenerateRequest,
    dpRank: number | undefined,
  ): { engine: ConnectedEngine; pinned: boolean } {
    const id = request.requestId;
    const engines = this.engines;
    if (dpRank !== undefined) {
      const engine = engines.find((e) => e.engineIndex !== null && e.engineIndex === dpRank);
      if (!engine || engine.engineIndex === null) {
        const validRanks = engines.flatMap((e) => (e.engineIndex === null ? [] : [e.engineIndex]));
        throw new EngineClientError(
          'invalid-dp-rank',
          `DP rank ${String(dpRank)} is not connected: this worker has ${engines.length} engine(s)` +
            ` (valid ranks: ${validRanks.length > 0 ? validRanks.join(', ') : 'none'})`,
          { dpRank, engineCount: engines.length, validRanks },
        );
      }
      this.reserve(engine.engineIndex, id);
      this.policy.onDispatch?.(engine.engineIndex, request);
      return { engine, pinned: true };
    }
    if (engines.length === 0) throw new EngineClientError('client-closed', 'no engines connected');
    const now = this.now();
    const views: RankView[] = engines.map((e) => ({
      engineIndex: e.engineIndex,
      inFlight: e.engineIndex === null ? 0 : this.routing.inFlightCount(e.engineIndex),
      load: e.engineIndex === null ? null : this.routing.load(e.engineIndex),
      loadAgeMs: e.engineIndex === null ? null : this.routing.loadAgeMs(e.engineIndex, now),
    }));
    const pos = this.policy.select(views, request);
    if (!Number.isInteger(pos) || pos < 0 || pos >= engines.length) {
      throw new RangeError(
        `DP policy ${this.policy.name} returned position ${pos}, expected an integer in 0..${engines.length - 1}`,
      );
    }
    const engine = engines[pos];
    if (engine.engineIndex !== null) {
      this.reserve(engine.engineIndex, id);
      this.policy.onDispatch?.(engine.engineIndex, request);
    }
    return { engine, pinned: false };
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Retirement (dp-routing.md sections 5, 10)

  /** Add `id` to `inflight[rank]` and arm the rank's silence watchdog if it was idle (14.8). */
  private reserve(rank: number, id: string): void {
    this.routing.reserve(rank, id);
    this.syncRankWatchdog(rank, false);
  }

  /**
   * `release(rank, ids)` with the clamp setting of the policy; counts clamp events; disarms the rank's silence
   * watchdog when its in-flight set empties. Every shrink of an in-flight set goes through here (or
   * `clearInFlight` on fail_all / close, which stop every watchdog).
   */
  private release(rank: number, ids: Iterable<string>): void {
    if (this.routing.release(rank, ids, this.releaseClamp)) {
      const c = this.counters.get(rank);
      if (c) c.clamps++;
    }
    this.syncRankWatchdog(rank, false);
  }

  /** Remove `entry` if it is still live and release its slot on the recorded rank. Returns whether it was live. */
  private retire(entry: RegistryEntry): boolean {
    if (!this.registry.removeEntry(entry)) return false;
    if (entry.engineIndex !== null) this.release(entry.engineIndex, [entry.requestId]);
    this.touchWatchdog(false);
    return true;
  }

  /** Synchronous rollback of a failed submit (section 3, section 12.3 rule 5). */
  private rollback(entry: RegistryEntry, err: unknown): void {
    this.retire(entry);
    entry.stream.fail(err instanceof Error ? err : new Error(String(err)));
  }

  /**
   * Auto-abort of an abandoned, unfinished stream (section 5): remove the entry, release the slot and send the
   * ABORT, all started in the same turn as the cancel (section 14.9: the ABORT reaches the link within one
   * event-loop turn). Idempotent: a retired request is not aborted again.
   */
  private abandon(entry: RegistryEntry): void {
    if (!this.retire(entry)) return;
    if (entry.engine) this.sendAbort(entry.engine, entry.requestId).catch(() => {});
  }

  /**
   * Send `[identity, 01, ["<id>"]]` (engine-wire.md 4.7). On a send timeout the client fails with engine-dead
   * (section 6). On any other send failure the client also fails (transport): SMG's dispatcher merely exits there,
   * leaving the registry open and live streams hanging (dp-routing.md section 14.8, "always fail_all when the
   * dispatcher exits for any reason" — the going-beyond fix). After the client closed, rejects with client-closed.
   */
  private async sendAbort(engine: ConnectedEngine, requestId: string): Promise<void> {
    let payload: Uint8Array;
    try {
      payload = this.protocol.encodeAbort([requestId]);
    } catch (err) {
      const e = new EngineClientError('encode', `cannot encode ABORT for ${JSON.stringify(requestId)}: ${describeError(err)}`, {
        cause: err,
        requestId,
      });
      this.logger.error({ err: e }, 'ABORT not sent');
      throw e;
    }
    try {
      await this.link.send(engine.identity, RequestType.ABORT, payload);
      this.stats.abortsSent++;
    } catch (err) {
      const f = this.sendFailed(err, `ABORT to DP rank ${rankName(engine)}`, requestId);
      if (!f.handled) this.failAll(f.error, 'abort-send-failed');
      throw f.error;
    }
  }

  /**
   * Classify a failed send and apply the consequences every send shares (dp-routing.md 6, 14.8):
   * - the client is already closed or failed → `client-closed` naming the original failure (handled);
   * - send timeout → fail_all with `engine-dead` (cause `send-timeout`; engine-wire.md 1.9, SMG PR #2094) (handled);
   * - EHOSTUNREACH → the rank's identity is no longer connected (the ROUTER has `mandatory` on, zmq-link.ts), so the
   *   rank is dead: fail_all with `engine-dead` (cause `peer-unreachable`; issue #3 part 4, 14.8) (handled);
   * - anything else → a `transport` error the caller applies (not handled).
   * `what` names the send ("ABORT to DP rank 1"); every message starts with it.
   */
  private sendFailed(err: unknown, what: string, requestId?: string): SendFailure {
    if (this.registry.closed) return { error: this.clientClosedError(), handled: true };
    const details = requestId === undefined ? { cause: err } : { cause: err, requestId };
    switch (classifySendError(err)) {
      case 'timeout': {
        const e = new EngineClientError('engine-dead', `${what} timed out: ${describeError(err)}`, details);
        this.failAll(e, 'send-timeout');
        return { error: e, handled: true };
      }
      case 'unreachable': {
        const e = new EngineClientError(
          'engine-dead',
          `${what} failed: the rank is gone (EHOSTUNREACH: no connected engine has its identity): ${describeError(err)}`,
          details,
        );
        this.failAll(e, 'peer-unreachable');
        return { error: e, handled: true };
      }
      default:
        return { error: new EngineClientError('transport', `${what} failed: ${describeError(err)}`, details), handled: false };
    }
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Lockstep waves (dp-routing.md section 13)

  /**
   * `wake_group()` (13.2), the clock already bumped to `wave`: START_DP_WAVE `[wave, nil]` (engine-wire.md 5.7) to
   * EVERY engine in list (identity) order, the holder of the new request included. All sends are queued in the same
   * synchronous step, so the link's FIFO keeps them in order and together. The clock ticks but nothing is sent when the
   * protocol has no wave message (TokenSpeed; 13.2 inferred). Never rejects: resolves with null on success, else with
   * the failure (a timeout or EHOSTUNREACH on any rank has already failed the client; for several failures the fatal
   * one wins).
   */
  private async wakeGroup(wave: number): Promise<SendFailure | null> {
    if (this.protocol.encodeStartWave === undefined) return null;
    let payload: Uint8Array;
    try {
      payload = this.protocol.encodeStartWave(wave);
    } catch (err) {
      const e = new EngineClientError('encode', `cannot encode START_DP_WAVE [${wave}, nil]: ${describeError(err)}`, { cause: err });
      return { error: e, handled: false };
    }
    const sends = this.engines.map((engine) =>
      this.link.send(engine.identity, RequestType.START_DP_WAVE, payload).then(
        () => null,
        (err: unknown) => ({ engine, err }),
      ),
    );
    const failed = (await Promise.all(sends)).filter((f) => f !== null);
    if (failed.length === 0) return null;
    const first = failed.find((f) => classifySendError(f.err) !== 'other') ?? failed[0];
    return this.sendFailed(first.err, `START_DP_WAVE [${wave}, nil] to DP rank ${rankName(first.engine)}`);
  }

  /**
   * `observe_wave(event)` (13.3), dispatcher step 3: complete(w) → clock ← max(clock, w + 1), no wake; start(w) →
   * clock ← max(clock, w), then `wake_group()` (a failed wake fails the client: the dispatcher has no caller to
   * hand it to, 14.8 "always fail_all"). In `auto` mode the first notification makes a group of unknown kind lockstep
   * (waves.ts; logged), and wakes it when requests are in flight. A dense group logs and ignores the event (13.1).
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
    void this.wakeGroup(wave).then((f) => {
      if (f && !f.handled) this.failAll(f.error, 'wave-send-failed');
    });
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Dispatcher (dp-routing.md section 8) and failures (section 6)

  private async runDispatcher(): Promise<void> {
    try {
      for await (const msg of this.link.outputs()) {
        if (this.registry.closed) return;
        switch (msg.kind) {
          case 'frames':
            this.handleFrames(msg.frames);
            this.touchWatchdog(true); // re-armed on every dispatcher wake-up (section 8)
            break;
          case 'dead':
            this.failAll(
              new EngineClientError('engine-dead', 'engine core dead: ENGINE_CORE_DEAD received on the output socket'),
              'engine-core-dead',
            );
            return;
          case 'closed':
            this.failAll(
              new EngineClientError('transport', `engine output socket failed: ${describeError(msg.error)}`, {
                cause: msg.error,
              }),
              'output-closed',
            );
            return;
          case 'disconnect':
            // A hint, not proof of death (link.ts); deliberately does not re-arm the watchdog. The link reports
            // disconnects of both data sockets (input ROUTER and output PULL) and `address` is the gateway's own
            // bound endpoint of the socket concerned; the link seam does not expose its endpoints, so the message
            // names the address rather than guessing the socket. Which rank went away is unknown: probe them all.
            this.logger.warn({ address: msg.address }, `engine peer disconnected from the gateway socket bound at ${msg.address}`);
            this.scheduleProbes(msg.address);
            break;
        }
        if (this.registry.closed) return;
      }
      this.failAll(new EngineClientError('client-closed', 'engine output stream ended'), 'output-ended');
    } catch (err) {
      this.failAll(
        new EngineClientError('transport', `engine output receive failed: ${describeError(err)}`, { cause: err }),
        'output-error',
      );
    }
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

  /** A single undecodable message is logged, counted and skipped; 3 in a row fail the client (SMG PR #2175). */
  private onDecodeError(err: unknown): void {
    this.stats.decodeErrors++;
    this.consecutiveDecodeErrors++;
    if (this.consecutiveDecodeErrors >= MAX_CONSECUTIVE_DECODE_ERRORS) {
      this.failAll(
        new EngineClientError(
          'decode',
          `${this.consecutiveDecodeErrors} consecutive undecodable engine output messages; last: ${describeError(err)}`,
          { cause: err },
        ),
        'decode-errors',
      );
      return;
    }
    this.logger.warn(
      { err, consecutive: this.consecutiveDecodeErrors },
      'skipping an undecodable engine output message',
    );
  }

  /**
   * One decoded batch, in one synchronous block (dp-routing.md section 8 and 12.3 rule 2):
   * 1. reset the consecutive-decode-error count;
   * 2. store the load report (if any) as `load[batch.engineIndex]` BEFORE any release;
   * 4-5. `finished` = the batch's finished ids plus its terminal rows; route every row in batch order (terminal →
   *      remove entry, deliver; non-terminal for an unknown id → dropped); then remove every finished id from the
   *      registry (an id finished without a terminal row gets a stream-closed error);
   * 6. `release(batch.engineIndex, finished)` for EVERY batch, even with `finished` empty (this is what clamps an
   *    idle rank's stale report, section 10.3).
   * Rank fidelity (section 14.6, going beyond): a row or finished id whose request was recorded on another rank is
   * counted in `stats.rankMismatches` and logged; besides the spec's release by the batch's engine index, such an id
   * is ALSO released from its recorded rank, so a sender that misnames itself (e.g. the 9-element TokenSpeed layout
   * that always says rank 0) cannot leak slots on the other ranks.
   */
  private applyBatch(batch: EngineBatch): void {
    this.consecutiveDecodeErrors = 0;
    const rank = batch.engineIndex;
    if (batch.load) this.onStoredLoad(rank, this.routing.storeLoad(rank, batch.load, this.now()));
    if (batch.wave) this.observeWave(rank, batch.wave);

    const finished = new Set<string>(batch.finishedRequestIds);
    const retiredOn = new Map<string, number | null>();
    // Ranks this batch proves alive (14.8): the named one, plus the recorded rank of every live request it carries
    // (request ids are unique per client, so only that rank can have produced the row, even if it misnames itself).
    const heardFrom = new Set<number>([rank]);
    let mismatches = 0;
    for (const out of batch.outputs) {
      const terminal = out.finishReason !== null;
      if (terminal) finished.add(out.requestId);
      const entry = this.registry.get(out.requestId);
      if (!entry) continue; // unknown or already retired (e.g. aborted): dropped silently (section 2)
      if (entry.engineIndex !== null) heardFrom.add(entry.engineIndex);
      if (entry.engineIndex !== null && entry.engineIndex !== rank) mismatches++;
      if (terminal) {
        this.registry.removeEntry(entry);
        retiredOn.set(entry.requestId, entry.engineIndex);
        entry.stream.deliver(out);
      } else if (!entry.stream.deliver(out)) {
        // Consumer gone (cannot normally happen: a cancel retires synchronously) → treat as abandoned.
        this.abandon(entry);
      }
    }
    for (const id of finished) {
      const entry = this.registry.remove(id);
      if (!entry) continue;
      if (entry.engineIndex !== null) heardFrom.add(entry.engineIndex);
      if (entry.engineIndex !== null && entry.engineIndex !== rank) mismatches++;
      retiredOn.set(id, entry.engineIndex);
      entry.stream.closeWithoutTerminal();
    }

    this.release(rank, finished);
    for (const [id, recorded] of retiredOn) {
      if (recorded !== null && recorded !== rank) this.release(recorded, [id]);
    }
    for (const r of heardFrom) this.syncRankWatchdog(r, true);
    if (mismatches > 0) {
      this.stats.rankMismatches += mismatches;
      this.logger.warn(
        { engineIndex: rank, mismatches },
        'output batch names a different DP rank than the one its requests were sent to (rank fidelity, dp-routing.md 14.6)',
      );
    }
  }

  /**
   * The sole-client guard changed for `rank` (dp-routing.md 14.3; routing-state.ts): one log line per transition
   * (the counts are in `rankStates()` and /metrics).
   */
  private onStoredLoad(rank: number, r: StoreLoadResult): void {
    if (r.transition === 'engaged') {
      this.logger.warn(
        { engineIndex: rank, ...r.evidence },
        `DP rank ${rank} reports ${r.evidence.reported} requests but this gateway has ${r.evidence.own} in flight there: ` +
          'another client is using the engine; zero-on-empty suspended for this rank, its stored load ages out instead (dp-routing.md 14.3)',
      );
    } else if (r.transition === 'disengaged') {
      this.logger.info(
        { engineIndex: rank, ...r.evidence },
        `DP rank ${rank} reports agree with this gateway's in-flight count again; zero-on-empty resumed (dp-routing.md 14.3)`,
      );
    }
  }

  /**
   * fail_all (dp-routing.md sections 2 and 6): close the registry for good, deliver the same `error` to every live
   * stream, clear every in-flight set (stored loads are kept), stop the watchdog, close the link, count the cause
   * and emit `failed`. Idempotent: only the first failure counts.
   */
  private failAll(error: EngineClientError, cause: string): void {
    if (this.registry.closed) return;
    this.closeReason = error;
    const entries = this.registry.closeAndDrain();
    this.routing.clearInFlight();
    for (const e of this.engines) if (e.engineIndex !== null) this.policy.forgetRank?.(e.engineIndex); // the group died
    this.clearWatchdog();
    this.stats.failures[cause] = (this.stats.failures[cause] ?? 0) + 1;
    this.logger.error({ err: error, cause, liveRequests: entries.length }, 'engine client failed');
    for (const e of entries) e.stream.fail(error);
    this.link.close().catch((err: unknown) => this.logger.warn({ err }, 'engine link close failed'));
    try {
      this.emit('failed', error);
    } catch (err) {
      this.logger.error({ err }, "a 'failed' listener threw");
    }
  }

  private clientClosedError(): EngineClientError {
    const reason = this.closeReason;
    const suffix = reason && reason.kind !== 'client-closed' ? ` (engine client failed: ${reason.message})` : '';
    return new EngineClientError('client-closed', `engine client is shutting down${suffix}`, { cause: reason ?? undefined });
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Silence watchdog (dp-routing.md section 6)

  /**
   * Armed while requests are registered; restarted (`reset`) on every dispatcher wake-up. Queued aborts do not
   * restart it (unlike SMG; section 14.8 notes that client cancels would otherwise keep a dead engine looking alive),
   * and a `disconnect` hint does not either.
   */
  private touchWatchdog(reset: boolean): void {
    this.watchdog.touch(!this.registry.closed && this.registry.size > 0, reset);
  }

  private clearWatchdog(): void {
    this.watchdog.stop();
    this.rankWatchdogs.stopAll();
    for (const t of this.probeTimers) clearTimeout(t);
    this.probeTimers.clear();
  }

  /**
   * Per-rank watchdog sync (14.8): live = the client is open and `inflight[rank]` is non-empty; `reset` = this rank
   * was just heard from.
   */
  private syncRankWatchdog(rank: number, reset: boolean): void {
    this.rankWatchdogs.touch(rank, !this.registry.closed && this.routing.inFlightCount(rank) > 0, reset);
  }

  /**
   * A rank held in-flight requests and sent nothing for `silenceTimeoutMs` (14.8 "going beyond"; issue #3 part 4:
   * SIGKILL sends no ENGINE_CORE_DEAD and the other ranks' output keeps the client-wide watchdog quiet). The whole
   * engine group fails with engine-dead (cause `rank-silent`), as for every other engine failure: the client is
   * one group, and the gateway rebuilds it (dp-routing.md 6).
   */
  private onRankSilent(rank: number): void {
    const held = this.routing.inFlightCount(rank);
    if (this.registry.closed || held === 0) return;
    this.failAll(
      new EngineClientError(
        'engine-dead',
        `DP rank ${rank} sent no output for ${this.silenceTimeoutMs} ms while holding ${held} in-flight request(s) ` +
          '(per-rank silence watchdog); failing its engine group',
      ),
      'rank-silent',
    );
  }

  /**
   * After a `disconnect` hint: one probe round at each delay of {@link PROBE_SCHEDULE_MS}; a new
   * hint cancels the pending rounds and starts the series again. Timers are unref'd and cleared by fail_all/close.
   */
  private scheduleProbes(address: string): void {
    for (const t of this.probeTimers) clearTimeout(t);
    this.probeTimers.clear();
    for (const delay of PROBE_SCHEDULE_MS) {
      if (delay <= 0) {
        this.probeRanks(address);
        continue;
      }
      const timer = setTimeout(() => {
        this.probeTimers.delete(timer);
        this.probeRanks(address);
      }, delay);
      if (typeof timer === 'object' && typeof timer.unref === 'function') timer.unref();
      this.probeTimers.add(timer);
    }
  }

  /**
   * One probe round after a `disconnect` hint (zeromq saw a peer of the input ROUTER or output PULL go away, without
   * saying which): send a harmless probe, an ABORT with the empty list `[]` (engine-wire.md 4.7: valid, aborts
   * nothing), to every rank. The input ROUTER has `mandatory` on, so a probe to a vanished identity is refused with EHOSTUNREACH and
   * `sendFailed` fails the group (cause `peer-unreachable`); a timeout fails it too (send-timeout); any other send
   * failure fails it as a transport error (cause `probe-send-failed`; 14.8 "always fail_all"). Live ranks just drop
   * the empty ABORT. Probes are not counted in `stats.abortsSent`. Sent even when idle, so /health turns unhealthy
   * as soon as a rank is gone, not at the next request.
   */
  private probeRanks(address: string): void {
    if (this.registry.closed) return;
    let payload: Uint8Array;
    try {
      payload = this.protocol.encodeAbort([]);
    } catch (err) {
      this.logger.error({ err }, 'cannot encode the empty ABORT liveness probe');
      return;
    }
    for (const engine of this.engines) {
      this.link.send(engine.identity, RequestType.ABORT, payload).then(
        () => {},
        (err: unknown) => {
          const what = `liveness probe (empty ABORT) to DP rank ${rankName(engine)} after a peer disconnect at ${address}`;
          const f = this.sendFailed(err, what);
          if (!f.handled) this.failAll(f.error, 'probe-send-failed');
        },
      );
    }
  }

  private onSilence(): void {
    const live = this.registry.size;
    if (this.registry.closed || live === 0) return;
    this.failAll(
      new EngineClientError(
        'engine-dead',
        `no engine output for ${this.silenceTimeoutMs} ms while ${live} request(s) were in flight (silence watchdog)`,
      ),
      'watchdog',
    );
  }
}
