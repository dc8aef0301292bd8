/**
 * What every route shares (`RouteContext`, built once per app by `buildApp`): the engine groups and their chooser,
 * the tokenizer, names, metrics and per-rank statistics, the clock, and the HTTP edge settings the routes apply.
 */
import type { OffLoopTokenizer } from '../tokenizer/off-loop.js';
import type { GatewayTokenizer } from '../tokenizer/tokenizer.js';
import type { AdmissionGate } from './admission.js';
import type { GroupChooser } from './groups.js';
import type { GatewayEvents } from './gateway-events.js';
import type { GatewayMetrics } from './metrics.js';
import type { ReasoningParserName, ToolCallParserName } from './parsers/index.js';
import type { RankStatsBook } from './rank-stats.js';
import type { RequestTraces } from './request-trace.js';
import type { ResponsesStore } from './responses/store.js';
import type { StreamBackpressure } from './sse.js';
import type { TenantDirectory } from './tenant.js';

/** What the generation routes share (built once by `buildApp`). */
export interface RouteContext {
  /** The engine groups and the worker-level choice among them (groups.ts). */
  chooser: GroupChooser;
  tokenizer: GatewayTokenizer;
  /** This process's bounded off-loop tokenizer over `tokenizer` (large prompts, long chats, /tokenize, /detokenize). */
  offLoop: OffLoopTokenizer;
  /** The reported model name: the first of `servedModelNames` (vLLM's `served_model_name[0]`). */
  modelId: string;
  /** Every name a request's `model` may use (`--served-model-name`, one or more; vLLM semantics). */
  servedModelNames: readonly string[];
  metrics: GatewayMetrics;
  /** Per-rank dispatch rates and latency percentiles (`/v1/gateway/ranks`, the dashboard). */
  rankStats: RankStatsBook;
  /**
   * The last events of this process (gateway-events.ts): rank and group events from the backends, 429 bursts from
   * the error handler, engine failures from the request records; served by `/v1/gateway/ranks`.
   */
  events: GatewayEvents;
  /** Monotonic clock in ms (latency metrics). */
  now: () => number;
  /** `system_fingerprint` of every response. */
  systemFingerprint: string;
  /** Requests whose outcome was already counted (the app's error handler counts the rest). */
  counted: WeakSet<object>;
  /** The active tool-call parser (`--tool-call-parser`, or the chat template's default), or null: no `auto`. */
  toolCallParser: ToolCallParserName | null;
  /** The reasoning parser (`--reasoning-parser`), or null: no `reasoning_content`. */
  reasoningParser: ReasoningParserName | null;
  /** A chat request may bring its own `chat_template` (`--trust-request-chat-template`, vLLM's flag). */
  trustRequestChatTemplate: boolean;
  /** Stored Responses-API responses (`store`, `previous_response_id`; responses/store.ts). */
  responses: ResponsesStore;
  /** Per-stream buffer bound and stall timeout of streamed responses (sse.ts). */
  streamBackpressure: StreamBackpressure;
  /** Whether the gateway is draining (admission.ts; `/ready` reports it). */
  admission: AdmissionGate;
  /** The keys and tenants (tenant.ts): each request's tenant and its priority bands. */
  directory: TenantDirectory;
  /** The tenant of each generation request once known, for the error handler's per-tenant count. */
  tenants: WeakMap<object, string>;
  /** Each request's span while tracing is on (request-trace.ts), else null. */
  traces: RequestTraces | null;
}
