/**
 * An in-memory `GenerationBackend` for the route tests: records every submit and lets the test script each
 * request's outputs (or failures) through a `FakeStream`.
 */
import { EventEmitter } from 'node:events';
import type { FlowTicket } from '../../src/engine-client/flow-control.js';
import type { ConnectedEngine } from '../../src/engine-client/link.js';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { DEFAULT_READY_RESPONSE } from '../../src/protocols/handshake.js';
import type {
  EngineOutput,
  FinishReason,
  GenerateRequest,
  ReadyResponse,
  TokenCandidate,
} from '../../src/protocols/types.js';
import type {
  BackendEvents,
  BackendRankState,
  BackendStats,
  BackendStatus,
  BackendStream,
  GenerationBackend,
} from '../../src/server/backend.js';

/** A rank state with every counter 0, state `ready` and no load, overridden by `fields`. */
export function rankState(engineIndex: number, fields: Partial<BackendRankState> = {}): BackendRankState {
  return {
    engineIndex,
    state: 'ready',
    cause: null,
    inFlight: 0,
    load: null,
    dispatchedPinned: 0,
    dispatchedUnpinned: 0,
    clampEvents: 0,
    abortsSent: 0,
    rejoins: 0,
    stalls: 0,
    deaths: {},
    ...fields,
  };
}

type Item = { output: EngineOutput } | { error: Error } | { end: true };

/** One scripted request stream. `cancelled` resolves when the gateway cancels it. */
export class FakeStream implements BackendStream {
  readonly requestId: string;
  readonly engineIndex: number | null;
  cancelCount = 0;
  /** True once `cancel()` ran while the stream was unfinished (the real client would send ABORT). */
  abortedUnfinished = false;
  readonly cancelled: Promise<void>;
  private resolveCancelled!: () => void;
  private readonly items: Item[] = [];
  private waiter: ((r: IteratorResult<EngineOutput>) => void) | null = null;
  private waiterReject: ((e: unknown) => void) | null = null;
  private completion = 0;
  private done = false;
  /** Prompt tokens the fake engine reports as served from its prefix cache (every output). */
  cachedTokens = 0;

  constructor(
    requestId: string,
    engineIndex: number | null,
    private readonly promptTokens: number,
  ) {
    this.requestId = requestId;
    this.engineIndex = engineIndex;
    this.cancelled = new Promise((r) => (this.resolveCancelled = r));
  }

  /**
   * Deliver one output with `ids` (terminal when `finish` is given), their `logprobs` (default none) and, like a
   * vLLM rank asked for top logprobs, each token's ranked candidates `topLogprobs`.
   */
  push(
    ids: number[],
    finish: FinishReason | null = null,
    logprobs: number[] = [],
    topLogprobs?: TokenCandidate[][],
  ): void {
    this.completion += ids.length;
    this.feed({
      output: {
        requestId: this.requestId,
        newTokenIds: ids,
        finishReason: finish,
        promptTokens: this.promptTokens,
        completionTokens: this.completion,
        cachedTokens: this.cachedTokens,
        logprobs,
        ...(topLogprobs !== undefined ? { topLogprobs } : {}),
      },
    });
  }

  /** Deliver every id as its own output, the last one terminal with `finish`. */
  pushAll(ids: number[], finish: FinishReason = 'stop'): void {
    ids.forEach((id, i) => this.push([id], i === ids.length - 1 ? finish : null));
    if (ids.length === 0) this.push([], finish);
  }

  /** Make the next read throw `error`. */
  fail(error: Error): void {
    this.feed({ error });
  }

  /** End the stream without a terminal output. */
  end(): void {
    this.feed({ end: true });
  }

  cancel(): void {
    this.cancelCount++;
    if (this.done) return;
    this.done = true;
    this.abortedUnfinished = true;
    this.items.length = 0;
    this.resolveCancelled();
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = null;
      w({ done: true, value: undefined });
    }
  }

  get isCancelled(): boolean {
    return this.abortedUnfinished;
  }

  /** True once the stream got its terminal output or was cancelled (nothing more will be delivered). */
  get isDone(): boolean {
    return this.done;
  }

  private feed(item: Item): void {
    if (this.done) return;
    if ('output' in item && item.output.finishReason !== null) this.done = true;
    if (this.waiter) {
      const w = this.waiter;
      const rej = this.waiterReject!;
      this.waiter = null;
      this.waiterReject = null;
      this.deliver(item, w, rej);
    } else {
      this.items.push(item);
    }
  }

  private deliver(item: Item, resolve: (r: IteratorResult<EngineOutput>) => void, reject: (e: unknown) => void): void {
    if ('output' in item) resolve({ done: false, value: item.output });
    else if ('error' in item) reject(item.error);
    else resolve({ done: true, value: undefined });
  }

  [Symbol.asyncIterator](): AsyncIterator<EngineOutput> {
    return {
      next: () =>
        new Promise<IteratorResult<EngineOutput>>((resolve, reject) => {
          const item = this.items.shift();
          if (item !== undefined) return this.deliver(item, resolve, reject);
          if (this.done && this.isCancelled) return resolve({ done: true, value: undefined });
          this.waiter = resolve;
          this.waiterReject = reject;
        }),
      return: async () => {
        this.cancel();
        return { done: true, value: undefined };
      },
    };
  }
}

/** One recorded submit. */
export interface Submission {
  request: GenerateRequest;
  dpRank: number | undefined;
  signal: AbortSignal | undefined;
  stream: FakeStream;
  /** The flow-control ticket the route passed (tenant, band). */
  flow: FlowTicket | undefined;
}

/** The fake ranks' ready response: only maxModelLen is read by the routes; TokenSpeed defaults elsewhere. */
const READY: ReadyResponse = { ...DEFAULT_READY_RESPONSE, maxModelLen: 4096, instanceId: 'fake' };

/**
 * The fake engine client. `onSubmit` scripts each request (called synchronously after the stream is created);
 * `submitError` makes every submit reject; `submitGate` delays submit until it resolves (the signal still aborts it).
 * `alive` drives `isAlive`, `canServe` and `status` (`ok` / `unavailable`) unless `statusValue` is set; `dpSize` is
 * one more than the largest rank given; `rankStatesValue` defaults to one `ready` state per rank given.
 */
export class FakeBackend implements GenerationBackend {
  readonly engines: ConnectedEngine[];
  readonly dpSize: number;
  maxModelLen: number | null;
  statusValue: BackendStatus | null = null;
  /** Context tokens the fake engine reserves (TokenSpeed's 2 by default, engine-wire.md 4.4). */
  reservedContextTokens = 2;
  alive = true;
  readonly submissions: Submission[] = [];
  onSubmit: ((s: Submission) => void) | null = null;
  submitError: Error | null = null;
  submitGate: Promise<void> | null = null;
  rankStatesValue: BackendRankState[];
  readonly stats: BackendStats = {
    decodeErrors: 0,
    abortsSent: 0,
    rankMismatches: 0,
    failures: {},
    rankDeaths: {},
    orphanOutputs: 0,
    unknownOutputs: 0,
    unattributedSentinels: 0,
    decodeSuspects: 0,
    revivals: 0,
    handshakeRejected: {},
    routingPrecision: { requests: 0, predictedTokens: 0, confirmedTokens: 0, reportedTokens: 0 },
    kvEvents: null,
    flowControl: null,
  };
  /** The engine client's events, as `emitJoined` and `emitEvent` drive them. */
  private readonly events = new EventEmitter<BackendEvents>();
  private submittedWaiters: Array<(s: Submission) => void> = [];
  private callWaiters: Array<(c: { request: GenerateRequest; signal: AbortSignal | undefined }) => void> = [];

  /** Resolves when the next `submit` call starts (before the gate), with its request and signal. */
  nextSubmitCall(): Promise<{ request: GenerateRequest; signal: AbortSignal | undefined }> {
    return new Promise((resolve) => this.callWaiters.push(resolve));
  }

  constructor(opts: { ranks?: number[]; maxModelLen?: number } = {}) {
    const ranks = opts.ranks ?? [0, 1];
    this.engines = ranks.map((i) => ({
      identity: Uint8Array.of(i & 0xff, i >> 8),
      engineIndex: i,
      ready: { ...READY, dataParallelRank: i },
    }));
    this.dpSize = Math.max(0, ...ranks) + 1;
    this.rankStatesValue = ranks.map((i) => rankState(i));
    this.maxModelLen = opts.maxModelLen ?? READY.maxModelLen;
  }

  /** `maxModelLen − reservedContextTokens`, as `EngineClient.contextTokenLimit`. */
  get contextTokenLimit(): number {
    return this.maxModelLen === null ? 0 : this.maxModelLen - this.reservedContextTokens;
  }

  isAlive(): boolean {
    return this.alive;
  }

  canServe(): boolean {
    const st = this.status();
    return st === 'ok' || st === 'degraded';
  }

  status(): BackendStatus {
    return this.statusValue ?? (this.alive ? 'ok' : 'unavailable');
  }

  rankStates(): BackendRankState[] {
    return this.rankStatesValue;
  }

  /** The engine client's events: `emitJoined` and `emitEvent` drive them. */
  on<E extends keyof BackendEvents>(event: E, listener: (...args: BackendEvents[E]) => void): this {
    this.events.on(event, listener as never);
    return this;
  }

  /** Tell the `joined` listeners that the rank at `engineIndex` (re)joined. */
  emitJoined(engineIndex: number, rejoin: boolean): void {
    const engine = this.engines.find((e) => e.engineIndex === engineIndex);
    if (engine === undefined) throw new RangeError(`the fake has no rank ${engineIndex}`);
    this.emitEvent('joined', engine, rejoin);
  }

  /** Emit one of the engine client's events (`rank`: a state change; `failed`: the group failed as a unit). */
  emitEvent<E extends keyof BackendEvents>(event: E, ...args: BackendEvents[E]): void {
    this.events.emit(event, ...(args as never));
  }

  /** Resolves with the next submission (or the latest one if it already happened and nobody took it). */
  nextSubmission(): Promise<Submission> {
    return new Promise((resolve) => this.submittedWaiters.push(resolve));
  }

  async submit(
    request: GenerateRequest,
    options: { dpRank?: number; signal?: AbortSignal; flow?: FlowTicket } = {},
  ): Promise<BackendStream> {
    const { dpRank, signal, flow } = options;
    for (const w of this.callWaiters.splice(0)) w({ request, signal });
    if (this.submitGate) {
      await Promise.race([
        this.submitGate,
        new Promise<void>((_, reject) => {
          if (signal?.aborted) reject(signal.reason);
          signal?.addEventListener('abort', () => reject(signal.reason), { once: true });
        }),
      ]);
    }
    if (this.submitError) throw this.submitError;
    if (dpRank !== undefined && !this.engines.some((e) => e.engineIndex === dpRank)) {
      throw new EngineClientError('invalid-dp-rank', `no rank ${dpRank}`, { dpRank, engineCount: this.engines.length });
    }
    const stream = new FakeStream(request.requestId, dpRank ?? 0, request.promptTokenIds.length);
    signal?.addEventListener('abort', () => stream.cancel(), { once: true });
    const s: Submission = { request, dpRank, signal, stream, flow };
    this.submissions.push(s);
    this.onSubmit?.(s);
    for (const w of this.submittedWaiters.splice(0)) w(s);
    return stream;
  }
}
