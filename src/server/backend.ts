/**
 * The narrow view of the engine client that the HTTP layer needs (architecture.md "The seams": server/ knows no wire
 * details). `EngineClient` (src/engine-client/client.ts) satisfies it structurally; the route tests use an in-memory
 * fake. The shapes are the engine client's own (notes/apis.md, dp-routing.md sections 2-6 and 10), imported as types
 * only; the one runtime import of engine-client/ in server/ is the pure `fleetScorer` of policy.ts (groups.ts scores
 * groups with the same function the client's `load` policy scores ranks with).
 */
import type {
  CancellableSubmitOptions,
  ClientStats,
  EngineClientEvents,
  GroupStatus,
  RankState,
} from '../engine-client/client.js';
import type { RequestStream } from '../engine-client/request-stream.js';
import type { GenerateRequest, LoraTarget } from '../protocols/types.js';
import type { AdapterChange, LoraModule } from '../engine-client/lora-adapters.js';

/**
 * One submitted request's result stream: the engine client's `RequestStream` (dp-routing.md section 4). Yields the
 * request's outputs in order and ends after the terminal one (`finishReason !== null`); throws the engine client's
 * error (an `EngineClientError`, engine-client/errors.ts; its HTTP status in errors.ts) when the client fails (dp-routing.md
 * section 6). `cancel()` abandons an unfinished stream: ABORT to the owning rank, in-flight slot released at once
 * (dp-routing.md section 5); idempotent; a no-op after the terminal output.
 */
export type BackendStream = RequestStream;

/**
 * Per-rank routing state read at scrape time: the engine client's `RankState` (dp-routing.md sections 10-11;
 * counts in requests, KV usage 0..1; `load` null before the rank's first report).
 */
export type BackendRankState = RankState;

/** Cumulative client-wide wire-health counters: the engine client's `ClientStats` (gateway.md section 15.3). */
export type BackendStats = ClientStats;

/**
 * A group's LoRA adapters (the engine client's `LoraAdapters`; a `--workers` front's view through the router):
 * `list` / `get` read the adapters served now; `load` / `unload` change them on every rank (resolving why not, or
 * rejecting with the engine client's error when the ranks cannot be asked).
 */
export interface AdapterRegistry {
  list(): LoraTarget[];
  get(name: string): LoraTarget | undefined;
  load(m: LoraModule): Promise<AdapterChange>;
  unload(name: string): Promise<AdapterChange>;
}

/** What a backend's `on` may tell: the engine client's events (engine-client/group-state.ts `EngineClientEvents`). */
export type BackendEvents = EngineClientEvents;

/** A group's serving status: the engine client's `GroupStatus` (`starting` | `ok` | `degraded` | `unavailable`). */
export type BackendStatus = GroupStatus;

/**
 * What the routes, health and metrics need from the engine client.
 * - `submit` rejects with the engine client's `EngineClientError`; its HTTP status by kind is errors.ts
 *   `ENGINE_ERROR_STATUS` (503 for a dead, stalled or unavailable rank, 400 for an invalid pinned rank).
 * - `dpSize`: the group's rank slots (engine indexes 0..dpSize−1, the values `X-data-parallel-rank` may name).
 * - `maxModelLen`: tokens, from the first engine's ready response (gateway.md 9.1); what /v1/models reports; null
 *   before any rank joined.
 * - `contextTokenLimit`: tokens, the usable context = `maxModelLen` minus what the engine protocol reserves
 *   (TokenSpeed: 2, engine-wire.md 4.4 last paragraph); admission and the default completion limit use it
 *   (gateway.md 9).
 * - `isAlive()`: the client is open (gateway.md 4.2); `canServe()`: a request can be placed now (a ready rank; a
 *   lockstep group needs all); `status()`: the group's serving status for /health and /ready. All local: nothing is
 *   sent to the engines.
 * - `rankStates()`: every rank slot, with its liveness `state`.
 */
export interface GenerationBackend {
  readonly dpSize: number;
  readonly maxModelLen: number | null;
  readonly contextTokenLimit: number;
  isAlive(): boolean;
  canServe(): boolean;
  status(): BackendStatus;
  submit(request: GenerateRequest, options?: CancellableSubmitOptions): Promise<BackendStream>;
  rankStates(): BackendRankState[];
  readonly stats: BackendStats;
  /**
   * Optional: the LoRA adapters the group serves (vLLM groups; engine-client/lora-adapters.ts), or null/absent when
   * it serves none (TokenSpeed).
   */
  readonly adapters?: AdapterRegistry | null;
  /**
   * Optional: whether a submit may wait in the group's flow-control queue (engine-client/flow-control.ts); a caller
   * that can abort a request before its submit settles passes a signal then.
   */
  readonly flowControlled?: boolean;
  /**
   * Optional: whether an unpinned request submitted now would go to a rank without waiting in flow control's queue
   * (absent: always). The group choice prefers groups that have room.
   */
  hasRoom?(): boolean;
  /**
   * Optional: subscribe to the group's events (the engine client's `EngineClientEvents`): `joined` (a rank completed a
   * handshake; `rejoin` true when the slot held an earlier process of that rank), `rank` (a rank changed state, with
   * the cause of a death or stall) and `failed` (the group failed as a unit, with its cause). The app drops a rejoined
   * rank's per-rank latency samples and keeps the dashboard's event list (gateway-events.ts) from them.
   */
  on?<E extends keyof BackendEvents>(event: E, listener: (...args: BackendEvents[E]) => void): unknown;
  /**
   * Optional: bring the sync reads (`rankStates()`, `status()`, …) up to date. Absent for the engine client (its
   * reads are live); a front of `--workers N` answers from the router's last snapshot and fetches a fresh one here
   * (src/fronts/front/remote-backend.ts). Never rejects.
   */
  refresh?(): Promise<void>;
}

/** Await `refresh()` of every group's backend that has one (see `GenerationBackend.refresh`). */
export async function refreshBackends(groups: readonly BackendGroup[]): Promise<void> {
  await Promise.all(groups.map((g) => g.backend.refresh?.()));
}

/** The engine family a group speaks, pinned on the command line (gateway.md 2.2 "Runtime"). */
export type EngineFamily = 'tokenspeed' | 'vllm';

/**
 * What an engine group serves (vLLM's task names): `generate` (chat, completions, Responses) and `embed` (pooling:
 * /v1/embeddings, vLLM only; docs/wire/vllm-pooling.md).
 */
export const ENGINE_TASKS = ['generate', 'embed'] as const;
export type EngineTask = (typeof ENGINE_TASKS)[number];

/**
 * One engine group (one worker: one `ipc://` socket set, N DP ranks, one engine client; gateway.md 3) as the HTTP
 * layer sees it.
 * - `worker`: its worker URL (`ipc://<path>`), unique within an app: in /health only with `?verbose=1`.
 * - `name`: its name (`--group-name`, options.ts `GROUP_NAME`), unique within an app: the `group` label of /metrics,
 *   its title on the dashboard and in /health.
 * - `engine`: the engine family (`tokenspeed` | `vllm`).
 * - `backend`: its engine client.
 */
export interface BackendGroup {
  readonly worker: string;
  readonly name: string;
  readonly engine: EngineFamily;
  readonly backend: GenerationBackend;
  /** What the group serves (`--tasks`); absent = `['generate']`. */
  readonly tasks?: readonly EngineTask[];
}
