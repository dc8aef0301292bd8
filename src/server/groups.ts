/**
 * Worker-level routing: which engine group (worker) serves a request (gateway.md section 16: a worker-level policy
 * picks the worker, then the worker's engine client picks the DP rank; issue #3 part 5).
 *
 * Policy (this gateway's, inferred from gateway.md 16 and dp-routing.md 9.2): the group whose **best rank** has the
 * lowest load score wins, where a rank's score is the one the engine client's `load` policy gives it
 * (`fleetScorer`, dp-routing.md 9.2 step 4 with the guards of 14: `max(in-flight, queued)` plus the KV penalty, a
 * TokenSpeed report's waiting requests counted once (14.2), the report weighted down by its age (14.1), and
 * join-shortest-queue on in-flight when none of the group's ranks has a fresh report (14.5)) over its ready ranks'
 * `rankStates()`. So a request goes where the engine client would then find the least-loaded rank, scored the same
 * way. Ties go to the first group in a scan that starts at a
 * rotating position (advanced on every choice), as the rank scan of dp-routing.md 9.2 step 3 does, so idle groups
 * take turns instead of the first group always winning.
 *
 * Only groups that can serve now are candidates (`canServe()`: a ready rank; a lockstep group needs every rank ready;
 * issue #8): a request is never submitted to a group that cannot place it while another one can. A pinned request
 * (`X-data-parallel-rank`, gateway.md 14) is scored the same way among the serving groups whose pinned rank is ready,
 * and the pin then applies inside the chosen group. When no group can take a request, the answer is a 503 with
 * `Retry-After` (the group may be starting, rebuilding, or its ranks dead or stalled), never a wait.
 *
 * The choice is synchronous and reads the client state at the call, so a caller that submits right after it without
 * an `await` in between (the routes do) reserves the chosen rank in the same tick (dp-routing.md 12.3 rule 1).
 */
import {
  DEFAULT_LOAD_HORIZON_MS,
  fleetScorer,
  loadHorizonOf,
  lowestPosition,
  type RankView,
} from '../engine-client/policy.js';
import type { BackendGroup, BackendRankState, EngineTask } from './backend.js';

/** What a group serves when it does not say (`BackendGroup.tasks`). */
const DEFAULT_TASKS: readonly EngineTask[] = ['generate'];
import { ApiError, RETRY_AFTER_STARTING_SECONDS, RETRY_AFTER_UNAVAILABLE_SECONDS } from './errors.js';
import { describeGroups, groupHealth } from './health.js';

/**
 * The best (lowest) load score over a group's ready ranks, as the engine client's `load` policy scores them
 * (`fleetScorer` over `{engineIndex, inFlight, load, loadAgeMs}` of the ready ranks, reports ageing out at
 * `horizonMs`; units: requests plus the dimensionless KV penalty). `Infinity` for a group with no ready rank, so such
 * a group only wins when it is the only candidate. Pure; never throws.
 */
export function bestRankScore(
  states: readonly BackendRankState[],
  horizonMs: number = DEFAULT_LOAD_HORIZON_MS,
): number {
  const views: RankView[] = states
    .filter((s) => s.state === 'ready')
    .map((s) => ({ engineIndex: s.engineIndex, inFlight: s.inFlight, load: s.load, loadAgeMs: s.loadAgeMs ?? null }));
  if (views.length === 0) return Infinity;
  const score = fleetScorer(views, horizonMs);
  return Math.min(...views.map(score));
}

/** The position of the lowest group score, scanning from `start` (engine-client/policy.ts `lowestPosition`). */
export function lowestGroupPosition(scores: readonly number[], start: number): number {
  return lowestPosition(scores, start, 'cannot choose an engine group: no candidates');
}

/**
 * The 503 answered when no engine group can take a request (gateway.md 4.2, 11.3; issue #8 part 4), with
 * `Retry-After`: code `engine_starting` while every group is still starting (its ranks are joining), else
 * `engine_dead`. The message names every group's status and rank states.
 */
export function noLiveGroupError(groups: readonly BackendGroup[]): ApiError {
  const report = groupHealth(groups);
  const starting = report.every((g) => g.status === 'starting');
  const head = starting
    ? 'starting: no engine group can serve yet, ranks are still joining'
    : 'engine core dead: no engine group can serve now';
  return new ApiError(503, `${head} (${describeGroups(report)})`, {
    code: starting ? 'engine_starting' : 'engine_dead',
    retryAfterSeconds: starting ? RETRY_AFTER_STARTING_SECONDS : RETRY_AFTER_UNAVAILABLE_SECONDS,
  });
}

/**
 * The engine groups an app serves and the worker-level choice among them. Group order is the configuration order
 * (`/health` lists them in it). Not thread-shared state: one instance per app.
 */
export class GroupChooser {
  /** Every group, alive or not, in configuration order. */
  readonly groups: readonly BackendGroup[];
  /** Rotating scan start of the tie-break (number of choices made so far). */
  private scanStart = 0;
  /** The report ageing horizon of the rank choice (`--load-horizon-ms`, ms), so groups are scored as ranks are. */
  readonly loadHorizonMs: number;

  /**
   * `opts.loadHorizonMs`: the engine clients' report ageing horizon (default `DEFAULT_LOAD_HORIZON_MS`). Throws
   * RangeError on an empty list, a duplicate worker URL or name, or a bad horizon.
   */
  constructor(groups: readonly BackendGroup[], opts: { loadHorizonMs?: number } = {}) {
    this.loadHorizonMs = loadHorizonOf(opts);
    if (groups.length === 0) throw new RangeError('GroupChooser needs at least one engine group');
    const seen = new Set<string>();
    const names = new Set<string>();
    for (const g of groups) {
      if (seen.has(g.worker)) throw new RangeError(`duplicate engine group worker name ${JSON.stringify(g.worker)}`);
      if (names.has(g.name)) throw new RangeError(`duplicate engine group name ${JSON.stringify(g.name)}`);
      seen.add(g.worker);
      names.add(g.name);
    }
    this.groups = [...groups];
  }

  /** The groups that can serve now (`backend.canServe()`), in configuration order. */
  alive(): BackendGroup[] {
    return this.groups.filter((g) => g.backend.canServe());
  }

  /** The DP ranks any group has (0..dpSize−1 of each), ascending: what `X-data-parallel-rank` may name. */
  validRanks(): number[] {
    const max = Math.max(...this.groups.map((g) => g.backend.dpSize));
    return Array.from({ length: max }, (_, i) => i);
  }

  /**
   * Tokens: the `max_model_len` reported by /v1/models (gateway.md 15.1: the first engine's handshake value), taken
   * as the smallest over the serving groups (over every group that knows it when none serves), i.e. the context
   * every group can serve; null before any rank of any group joined.
   */
  get maxModelLen(): number | null {
    const live = this.alive();
    const known = (live.length > 0 ? live : this.groups)
      .map((g) => g.backend.maxModelLen)
      .filter((n): n is number => n !== null);
    if (known.length > 0) return Math.min(...known);
    const any = this.groups.map((g) => g.backend.maxModelLen).filter((n): n is number => n !== null);
    return any.length > 0 ? Math.min(...any) : null;
  }

  /**
   * The groups that serve `task` (`BackendGroup.tasks`, absent = generate), alive or not, in configuration order.
   * Throws `ApiError` 400 (`param` `model`, code `unsupported_task`) when none does: the model is not served for it
   * (vLLM answers a model without the task the same way).
   */
  serving(task: EngineTask): BackendGroup[] {
    const out = this.groups.filter((g) => (g.tasks ?? DEFAULT_TASKS).includes(task));
    if (out.length > 0) return out;
    const what =
      task !== 'embed'
        ? `the ${task} task`
        : this.groups.every((g) => g.engine === 'tokenspeed')
          ? 'embeddings: TokenSpeed engines cannot pool (their request has no pooling field)'
          : 'embeddings (no engine group serves the embed task)';
    throw new ApiError(400, `This gateway's model does not serve ${what}; see --tasks`, {
      param: 'model',
      code: 'unsupported_task',
    });
  }

  /**
   * The groups that serve `task` (default `generate`; `serving`) and can serve now, in configuration order,
   * restricted to those whose DP rank `dpRank` is ready when it is given. Throws `ApiError` 400 when no group serves
   * `task`, 503 with `Retry-After` (`noLiveGroupError`) when no group can serve; with
   * `dpRank`, 400 (`invalid_dp_rank`, param `X-data-parallel-rank`) when no group has that rank at all, and 503 with
   * `Retry-After` (`rank_unavailable`) when the groups that have it cannot place a request on it now.
   */
  candidates(dpRank?: number, task: EngineTask = 'generate'): BackendGroup[] {
    const serving = this.serving(task);
    const live = serving.filter((g) => g.backend.canServe());
    if (live.length === 0) throw noLiveGroupError(serving);
    if (dpRank === undefined) return live;
    const having = serving.filter((g) => dpRank >= 0 && dpRank < g.backend.dpSize);
    if (having.length === 0) {
      throw new ApiError(
        400,
        `X-data-parallel-rank must be one of ${this.validRanks().join(', ')} (the DP ranks of the engine groups); got '${dpRank}'`,
        {
          param: 'X-data-parallel-rank',
          code: 'invalid_dp_rank',
        },
      );
    }
    const ready = having.filter(
      (g) =>
        g.backend.canServe() && g.backend.rankStates().some((r) => r.engineIndex === dpRank && r.state === 'ready'),
    );
    if (ready.length === 0) {
      const states = having
        .map(
          (g) =>
            `${g.name}: ${g.backend.canServe() ? (g.backend.rankStates().find((r) => r.engineIndex === dpRank)?.state ?? 'unknown') : `group ${g.backend.status()}`}`,
        )
        .join('; ');
      throw new ApiError(
        503,
        `DP rank ${dpRank} cannot take requests now (${states}); retry later or send the request unpinned`,
        {
          code: 'rank_unavailable',
          retryAfterSeconds: RETRY_AFTER_UNAVAILABLE_SECONDS,
        },
      );
    }
    return ready;
  }

  /**
   * Choose among `candidates` (non-empty, e.g. from `candidates()`): the lowest `bestRankScore` of each group's
   * `rankStates()`, ties by the rotating scan start, which advances by one on every call. Throws RangeError on an
   * empty list.
   */
  choose(candidates: readonly BackendGroup[]): BackendGroup {
    if (candidates.length === 0) throw new RangeError('cannot choose an engine group: no candidates');
    const start = this.scanStart;
    this.scanStart = this.scanStart >= Number.MAX_SAFE_INTEGER ? 0 : this.scanStart + 1;
    if (candidates.length === 1) return candidates[0]!;
    // With flow control, a saturated group would make the request wait while another has room: prefer those.
    const open = candidates.filter((g) => g.backend.hasRoom?.() !== false);
    const pool = open.length > 0 ? open : candidates;
    const scores = pool.map((g) => bestRankScore(g.backend.rankStates(), this.loadHorizonMs));
    return pool[lowestGroupPosition(scores, start)]!;
  }
}
