/**
 * In-memory test doubles for the engine client: a fake `EngineLink` (records every send, lets a test push output
 * messages and wait until the dispatcher has processed each one) and a JSON `EngineProtocol` (the real TokenSpeed
 * codec is tested elsewhere). Nothing here touches sockets or timers.
 */
import type { BudgetLedger } from '../../src/engine-client/budgets.js';
import type { FlowControlOptions } from '../../src/engine-client/flow-control.js';
import type { ConnectedEngine, EngineLink, LinkListener, OutputMessage } from '../../src/engine-client/link.js';
import type {
  AddTarget,
  EngineBatch,
  EngineLoad,
  EngineOutput,
  EngineOutputRow,
  EngineProtocol,
  FinishReason,
  GenerateRequest,
  ReadyResponse,
  RequestTypeByte,
} from '../../src/protocols/types.js';
import { DEFAULT_SAMPLING, RequestType } from '../../src/protocols/types.js';
import { DEFAULT_READY_RESPONSE } from '../../src/protocols/handshake.js';
import { EngineClient } from '../../src/engine-client/client.js';
import type { DpPolicy } from '../../src/engine-client/policy.js';
import type { DeliveryQueueOptions } from '../../src/engine-client/delivery-queue.js';
import type { LockstepSetting } from '../../src/engine-client/waves.js';
import type { Logger } from 'pino';

const enc = new TextEncoder();
const dec = new TextDecoder();

/** A ready response good enough for the client (only maxModelLen is read); TokenSpeed defaults elsewhere. */
export const READY: ReadyResponse = { ...DEFAULT_READY_RESPONSE, maxModelLen: 4096, instanceId: 'test' };

/** 2-byte little-endian identity of `index` (engine-wire.md 1.5). */
export function identityOf(index: number): Uint8Array {
  return Uint8Array.of(index & 0xff, index >> 8);
}

/**
 * `count` engines with indices 0..count-1, in identity order. `dataParallelSize` > 1 makes the group lockstep
 * (dp-routing.md 13.1); default 1 (dense).
 */
export function makeEngines(count: number, opts: { dataParallelSize?: number | null } = {}): ConnectedEngine[] {
  // null = not reported (the short ready response, issue #14).
  const dataParallelSize = opts.dataParallelSize === undefined ? 1 : opts.dataParallelSize;
  const engines = Array.from({ length: count }, (_, i) => ({
    identity: identityOf(i),
    engineIndex: i,
    ready: { ...READY, maxModelLen: 4096 + i, dataParallelSize },
  }));
  // Identity order = lexicographic bytes (LE); for < 256 ranks that is index order.
  return engines;
}

/** One send the client made. `decoded` is the fake protocol's JSON payload. */
export interface SentFrame {
  identity: Uint8Array;
  engineIndex: number;
  type: RequestTypeByte;
  payload: Uint8Array;
  decoded: unknown;
}

interface Queued {
  msg: OutputMessage;
  processed: () => void;
}

/** An error shaped like src/transport's `SendTimeoutError` (the client checks `name`). */
export class FakeSendTimeoutError extends Error {
  constructor(message = 'send timed out after 10000 ms') {
    super(message);
    this.name = 'SendTimeoutError';
  }
}

/** An error shaped like src/transport's `TransportError` (`code` e.g. 'EHOSTUNREACH'). */
export class FakeTransportError extends Error {
  readonly code: string | undefined;
  constructor(message: string, code?: string) {
    super(message);
    this.name = 'TransportError';
    this.code = code;
  }
}

/** What src/transport's link rejects with when the identity is no longer connected (ROUTER mandatory). */
export function unreachable(engineIndex: number): FakeTransportError {
  return new FakeTransportError(
    `send to engine ${engineIndex}: no connected engine with this identity (EHOSTUNREACH)`,
    'EHOSTUNREACH',
  );
}

/** Decodes a sent payload for `SentFrame.decoded` (default: JSON, as `JsonProtocol` writes). */
export type PayloadDecoder = (type: RequestTypeByte, payload: Uint8Array) => unknown;

const jsonDecoder: PayloadDecoder = (_type, payload) => JSON.parse(dec.decode(payload));

/**
 * In-memory `EngineLink`. The engines given at construction have joined already (they are reported to the client
 * when it attaches); `join`, `hello` and `joinFailed` play the handshake service for later ranks. `dpSize` defaults
 * to one slot per given engine.
 */
export class FakeLink implements EngineLink {
  readonly engines: readonly ConnectedEngine[];
  readonly dpSize: number;
  readonly handshakeRejected: Record<string, number> = {};
  readonly sent: SentFrame[] = [];
  listener: LinkListener | null = null;
  /** Called for every send after recording it; may throw or return a rejecting/pending promise. */
  sendHook: ((frame: SentFrame) => void | Promise<void>) | null = null;
  closeCalls = 0;
  private closedFlag = false;
  private readonly queue: Queued[] = [];
  private taker: ((item: Queued | null) => void) | null = null;
  private outputsStarted = false;
  private endPending = false;

  private readonly decode: PayloadDecoder;

  constructor(
    engines: number | ConnectedEngine[],
    decode: PayloadDecoder = jsonDecoder,
    opts: { dpSize?: number } = {},
  ) {
    this.engines = typeof engines === 'number' ? makeEngines(engines) : engines;
    this.dpSize = opts.dpSize ?? Math.max(1, ...this.engines.map((e) => e.engineIndex + 1));
    this.decode = decode;
  }

  attach(listener: LinkListener): void {
    if (this.listener) throw new Error('FakeLink: attached twice');
    this.listener = listener;
    for (const e of this.engines) listener.joined(e);
  }

  /** A rank completes its handshake (a fresh process with this index; default ready response as `makeEngines`). */
  join(engine: ConnectedEngine | number): void {
    const e = typeof engine === 'number' ? makeEngines(engine + 1)[engine]! : engine;
    this.listener!.joined(e);
  }

  /** A HELLO for `index` arrives: resolves with the client's admission decision. */
  hello(index: number): Promise<boolean> {
    return this.listener!.admitHello(index);
  }

  /** A handshake that was let in does not finish. */
  joinFailed(index: number, reason = 'handshake timed out'): void {
    this.listener!.joinFailed(index, reason);
  }

  get closed(): boolean {
    return this.closedFlag;
  }

  async send(identity: Uint8Array, type: RequestTypeByte, payload: Uint8Array): Promise<void> {
    if (this.closedFlag) throw new FakeTransportError('link is closed');
    const frame: SentFrame = {
      identity,
      engineIndex: identity[0] | (identity[1] << 8),
      type,
      payload,
      decoded: this.decode(type, payload),
    };
    this.sent.push(frame);
    if (this.sendHook) await this.sendHook(frame);
  }

  async *outputs(): AsyncIterable<OutputMessage> {
    if (this.outputsStarted) throw new Error('FakeLink.outputs() may be iterated once');
    this.outputsStarted = true;
    for (;;) {
      const item = await this.take();
      if (!item) return;
      try {
        yield item.msg;
      } finally {
        item.processed();
      }
    }
  }

  async close(): Promise<void> {
    this.closeCalls++;
    if (this.closedFlag) return;
    this.closedFlag = true;
    const t = this.taker;
    this.taker = null;
    t?.(null);
    for (const q of this.queue.splice(0)) q.processed();
  }

  /**
   * Push one output message; resolves once the dispatcher has fully processed it (it asked for the next message
   * or stopped iterating), or immediately when the link is closed.
   */
  deliver(msg: OutputMessage): Promise<void> {
    if (this.closedFlag) return Promise.resolve();
    return new Promise((resolve) => {
      const item: Queued = { msg, processed: resolve };
      const t = this.taker;
      if (t) {
        this.taker = null;
        t(item);
      } else {
        this.queue.push(item);
      }
    });
  }

  /** Push a batch encoded by the fake protocol and wait until it is processed. */
  deliverBatch(batch: EngineBatch): Promise<void> {
    return this.deliver({ kind: 'frames', frames: [encodeBatch(batch)] });
  }

  /** End the output stream (as if the receive loop ended) without closing sends. */
  endOutputs(): void {
    const t = this.taker;
    this.taker = null;
    if (t) t(null);
    else this.endPending = true;
  }

  private take(): Promise<Queued | null> {
    const q = this.queue.shift();
    if (q) return Promise.resolve(q);
    if (this.closedFlag || this.endPending) return Promise.resolve(null);
    return new Promise((resolve) => {
      this.taker = resolve;
    });
  }

  /** ADD frames sent so far. */
  adds(): SentFrame[] {
    return this.sent.filter((f) => f.type === RequestType.ADD);
  }

  /** ABORT frames sent so far (request aborts and empty-list liveness probes). */
  aborts(): SentFrame[] {
    return this.sent.filter((f) => f.type === RequestType.ABORT);
  }

  /** START_DP_WAVE frames sent so far. */
  waves(): SentFrame[] {
    return this.sent.filter((f) => f.type === RequestType.START_DP_WAVE);
  }

  /** Number of ADDs per engine index (length = dpSize). */
  addsPerRank(): number[] {
    const counts = Array.from({ length: this.dpSize }, () => 0);
    for (const f of this.adds()) counts[f.engineIndex]++;
    return counts;
  }

  /** The engine index the ADD for `requestId` went to (throws when there is none). */
  rankOf(requestId: string): number {
    const f = this.adds().find((a) => (a.decoded as { rid: string }).rid === requestId);
    if (!f) throw new Error(`no ADD sent for ${requestId}`);
    return f.engineIndex;
  }
}

/**
 * JSON wire for tests: ADD = {rid, prompt, dpRank}; ABORT = [ids]; START_DP_WAVE = [wave, null] (only with
 * `waves: true`, like vLLM; without it the protocol has no wave message, like TokenSpeed); output = the EngineBatch
 * as JSON.
 */
export class JsonProtocol implements EngineProtocol {
  readonly name = 'tokenspeed' as const;
  /** As TokenSpeed's (engine-wire.md 4.4); tests may change it. */
  reservedContextTokens = 2;
  /** When set, encodeAdd throws it. */
  encodeAddError: Error | null = null;
  /** Every `target` encodeAdd received, in order. */
  readonly addTargets: (AddTarget | undefined)[] = [];
  encodeStartWave?: (wave: number) => Uint8Array;

  constructor(opts: { waves?: boolean } = {}) {
    if (opts.waves) this.encodeStartWave = (wave: number) => enc.encode(JSON.stringify([wave, null]));
  }

  encodeAdd(request: GenerateRequest, target?: AddTarget): Uint8Array {
    this.addTargets.push(target);
    if (this.encodeAddError) throw this.encodeAddError;
    return enc.encode(
      JSON.stringify({ rid: request.requestId, prompt: request.promptTokenIds, dpRank: target?.dpRank }),
    );
  }

  encodeAbort(requestIds: readonly string[]): Uint8Array {
    return enc.encode(JSON.stringify(requestIds));
  }

  decodeOutput(frames: readonly Uint8Array[]): EngineBatch {
    if (frames.length === 0) throw new Error('FakeBatch: no frames');
    let v: unknown;
    try {
      v = JSON.parse(dec.decode(frames[0]));
    } catch (err) {
      throw new Error(`FakeBatch: not JSON (${(err as Error).message})`);
    }
    if (typeof v !== 'object' || v === null) throw new Error('FakeBatch: expected an object');
    const b = v as EngineBatch;
    if (!Number.isInteger(b.engineIndex)) throw new Error('FakeBatch.engineIndex: expected int');
    if (!Array.isArray(b.outputs)) throw new Error('FakeBatch.outputs: expected array');
    if (!Array.isArray(b.finishedRequestIds)) throw new Error('FakeBatch.finishedRequestIds: expected array');
    return b;
  }
}

/** JSON payload of a batch, as the fake protocol decodes it. */
export function encodeBatch(batch: EngineBatch): Uint8Array {
  return enc.encode(JSON.stringify(batch));
}

/** One output row (TokenSpeed-like: every token count reported; `completionTokens` = this row's tokens). */
export function row(
  requestId: string,
  finishReason: FinishReason | null = null,
  tokens: number[] = [7],
): EngineOutputRow {
  return {
    requestId,
    newTokenIds: tokens,
    finishReason,
    promptTokens: 3,
    completionTokens: tokens.length,
    cachedTokens: 0,
    logprobs: [],
  };
}

/**
 * A batch from `engineIndex`: `finishedRequestIds` defaults to the rids of the terminal rows (TokenSpeed).
 */
export function batch(
  engineIndex: number,
  outputs: EngineOutputRow[],
  load?: EngineLoad,
  finished?: string[],
): EngineBatch {
  const b: EngineBatch = {
    engineIndex,
    outputs,
    finishedRequestIds: finished ?? outputs.filter((o) => o.finishReason !== null).map((o) => o.requestId),
  };
  if (load) b.load = load;
  return b;
}

/** A load report. */
export function load(numRunning: number, numWaiting: number, kvCacheUsage = 0): EngineLoad {
  return { numRunning, numWaiting, kvCacheUsage };
}

/**
 * The stale terminal report of dp-routing.md 10.3 as a sole client sees it: r0 holds `last` and 7 earlier requests,
 * r1 holds `held`. One batch finishes the 7 (report: 8 running), then `last` finishes in a batch whose report
 * (`staleReport`, e.g. 3 running / 5 waiting) still counts the requests just retired: more than r0's in-flight set
 * but within what this client released there lately, so the sole-client guard (14.3) stays off. Resolves with the
 * drained stream of `last`.
 */
export async function finishWithStaleReport(
  client: EngineClient,
  link: FakeLink,
  staleReport: EngineLoad,
): Promise<{ outputs: EngineOutput[]; error?: unknown }> {
  const early = Array.from({ length: 7 }, (_, i) => `early-${i}`);
  for (const id of early) await client.submit(req(id), { dpRank: 0 });
  const last = await client.submit(req('last'), { dpRank: 0 });
  await client.submit(req('held'), { dpRank: 1 });
  await link.deliverBatch(
    batch(
      0,
      early.map((id) => row(id, 'stop')),
      load(8, 0, staleReport.kvCacheUsage),
    ),
  );
  await link.deliverBatch(batch(0, [row('last', 'stop')], staleReport));
  return drain(last);
}

/** A minimal request. */
export function req(requestId: string): GenerateRequest {
  return {
    requestId,
    promptTokenIds: [1, 2, 3],
    sampling: { ...DEFAULT_SAMPLING },
    stream: true,
    returnLogprob: false,
  };
}

/**
 * A client over a fresh fake link and JSON protocol. Close it at the end of the test. `waves`: the protocol has a
 * wave message (vLLM-like); pair it with engines from `makeEngines(n, { dataParallelSize: 2 })` for a lockstep group.
 */
export function setup(
  ranks: number | ConnectedEngine[],
  opts: {
    policy?: DpPolicy;
    silenceTimeoutMs?: number;
    rankStallTimeoutMs?: number;
    logger?: Logger;
    reservedContextTokens?: number;
    waves?: boolean;
    lockstep?: LockstepSetting;
    now?: () => number;
    /** How outputs reach push-mode listeners (slice budget, fake clock; delivery-queue.ts). */
    delivery?: DeliveryQueueOptions;
    /** Rank slots (default: one per engine given). */
    dpSize?: number;
    /** Token ids the client accepts (output-contract.ts; default: unchecked). */
    validTokenIds?: Uint8Array;
    /** Flow control (flow-control.ts; default off). */
    flowControl?: FlowControlOptions;
    /** Tenant budgets (budgets.ts; default none). */
    budgets?: BudgetLedger;
  } = {},
): { client: EngineClient; link: FakeLink; protocol: JsonProtocol } {
  const { reservedContextTokens, waves, dpSize, ...clientOpts } = opts;
  const link = new FakeLink(ranks, undefined, dpSize === undefined ? {} : { dpSize });
  const protocol = new JsonProtocol({ waves });
  if (reservedContextTokens !== undefined) protocol.reservedContextTokens = reservedContextTokens;
  const client = new EngineClient({ protocol, link, ...clientOpts });
  return { client, link, protocol };
}

/** Let pending microtasks and one macrotask turn run. */
export function tick(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** Read a stream to its end; returns the outputs, or the error it threw as `error`. */
export async function drain(
  stream: AsyncIterable<EngineOutput>,
): Promise<{ outputs: EngineOutput[]; error?: unknown }> {
  const outputs: EngineOutput[] = [];
  try {
    for await (const o of stream) outputs.push(o);
  } catch (error) {
    return { outputs, error };
  }
  return { outputs };
}

/** In-flight count per rank, in engine order. */
export function inFlight(client: EngineClient): number[] {
  return client.rankStates().map((s) => s.inFlight);
}

/** Liveness state per rank, in engine order. */
export function states(client: EngineClient): string[] {
  return client.rankStates().map((s) => s.state);
}
