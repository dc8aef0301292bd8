/**
 * What an engine client is built with and what a submit takes (client.ts), and the defaults of its two timeouts.
 * Kept apart from the client so the option layer (serve-options.ts), the fronts and the server can name them without
 * the client's machinery.
 */
import type { LoraModule } from './lora-adapters.js';
import type { ClientTracing } from './request-spans.js';
import type { Logger } from 'pino';
import type { EngineProtocol } from '../protocols/types.js';
import type { DeliveryQueueOptions } from './delivery-queue.js';
import type { EngineLink } from './link.js';
import type { DpPolicy } from './policy.js';
import type { KvCacheView } from './kv-cache-view.js';
import type { LockstepSetting } from './waves.js';
import type { BudgetLedger, BudgetLimits } from './budgets.js';

/** Default silence-watchdog timeout in ms (dp-routing.md section 6: 300 s without output). */
export const DEFAULT_SILENCE_TIMEOUT_MS = 300_000;
/**
 * Default stall timeout in ms (issue #8 part 3): a rank holding in-flight requests that sent nothing for this long
 * leaves rotation. 60 s is longer than any normal gap between two batches of a rank, a long prefill included (a
 * 128k-token prompt prefills in seconds to tens of seconds); raise it for slower engines.
 */
export const DEFAULT_RANK_STALL_TIMEOUT_MS = 60_000;
/**
 * Constructor options.
 * - `protocol`: the engine family's codec (TokenSpeed or vLLM).
 * - `link`: the group's socket set (its `dpSize` gives the rank slots); the client attaches to it, owns it from now
 *   on and closes it on `close()`.
 * - `policy`: the unpinned rank-selection policy (default `createLoadPolicy()`, SMG's DP scorer).
 * - `kvCache`: the group's exact index from its ranks' KV-cache events (kv-cache-view.ts), when the group has them:
 *   its counters appear in `stats.kvEvents`. The policy reads it; the client only reports it.
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
  kvCache?: KvCacheView | null;
  silenceTimeoutMs?: number;
  rankStallTimeoutMs?: number;
  logger?: Logger;
  lockstep?: LockstepSetting;
  now?: () => number;
  delivery?: DeliveryQueueOptions;
  validTokenIds?: Uint8Array;
  /**
   * Flow control (flow-control.ts, issue 30): while the group is saturated, unpinned requests wait in the gateway's
   * queue. Absent or null: off (every request goes to a rank at once, as before).
   */
  flowControl?: FlowControlOptions | null;
  /**
   * The gateway's per-tenant budgets (budgets.ts, issue 30 part 4), one ledger shared by every group's client, so a
   * tenant's budget spans the groups. A submit whose ticket carries limits is charged here. Absent or null: none.
   */
  budgets?: BudgetLedger | null;
  /**
   * The LoRA adapters the group serves from the start (`--lora-modules`; lora-adapters.ts). Only for a protocol with
   * utility calls (vLLM); absent: none until loaded at run time.
   */
  loraModules?: readonly LoraModule[];
  /**
   * Tracing (src/tracing.ts): a traced request (`GenerateRequest.trace`) gets `queue` and `route` spans
   * (request-spans.ts). Absent or null: no spans (the trace headers still reach a vLLM rank).
   */
  tracing?: ClientTracing | null;
}

/**
 * Per-submit options.
 * - `dpRank`: pin the request to the rank with this engine index (dp-routing.md section 9.1; gateway.md section 14
 *   `X-data-parallel-rank`). No scoring; the scan start is not advanced.
 * - `signal`: aborting it aborts the request like `RequestStream.cancel()` (section 5). Already aborted at submit →
 *   `submit` rejects with `signal.reason` and nothing is registered or sent. While the request waits in the flow
 *   control queue, it leaves the queue at once.
 * - `flow`: its tenant, band and queue deadline for flow control (`EngineClientOptions.flowControl`).
 */
export interface SubmitOptions {
  dpRank?: number;
  signal?: AbortSignal;
  flow?: FlowTicket;
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
  /** The request's tenant and band for flow control (absent: the default tenant, the standard band). */
  flow?: FlowTicket;
}

/**
 * Flow control's settings (requests, ms; engine-client/flow-control.ts).
 * - `maxInFlightPerRank`: the per-rank in-flight target; absent or null: each rank's `max_num_seqs` (unknown: no
 *   in-flight limit for that rank, only its waiting queue counts).
 * - `maxQueued` / `maxQueuedPerTenant`: the queue's bounds (flow-queue.ts).
 * - `queueTimeoutMs`: how long a request may wait unless it asks for less.
 */
export interface FlowControlOptions {
  readonly maxInFlightPerRank?: number | null;
  readonly maxQueued?: number;
  readonly maxQueuedPerTenant?: number;
  readonly queueTimeoutMs?: number;
}

/**
 * What a submit says about itself for flow control and budgets: its tenant, its band (0 = most urgent), its own
 * deadline, and its tenant's budget.
 */
export interface FlowTicket {
  readonly tenant: string;
  readonly band: number;
  /** ms this request may wait in the queue, at most the group's `queueTimeoutMs`; absent: that. */
  readonly timeoutMs?: number;
  /** The tenant's limits per minute (budgets.ts); absent: no budget. */
  readonly budget?: BudgetLimits;
  /**
   * false for the second and later sub-requests of one HTTP request with n > 1 or several embedding inputs: they
   * take no request and no prompt from the budget, only their own `max_tokens` (the first took the request and the
   * prompt), and an embedding input skips flow control's queue (its lead waited there). Absent: true.
   */
  readonly lead?: boolean;
  /**
   * The prompt tokens the lead charges to the budget instead of its own prompt's: an embeddings request's lead
   * charges every input's. Absent: the request's prompt length.
   */
  readonly promptTokens?: number;
}
