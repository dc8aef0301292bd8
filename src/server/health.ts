/**
 * `/health` (liveness) and `/ready` (readiness) over several engine groups (gateway.md 4.2: health = liveness of each
 * worker's engine client, probed locally, nothing sent to the engines; issue #8 parts 4, 6 and 7: the gateway serves
 * before its ranks join, a group is reported with each rank's state, and readiness turns 503 while draining).
 *
 * Both read the same per-group report. `/health` answers 200 while some group can serve and 503 otherwise (`starting`
 * before any group could ever serve, `unhealthy` after); `/ready` answers 200 `ready` while some group can serve and
 * the gateway is not draining, else 503 (`draining`, `starting` or `unavailable`).
 */
import type { BackendGroup, BackendStatus, EngineFamily } from './backend.js';
import type { OpenAIErrorBody } from './errors.js';

/** One rank slot of a group: its engine index and liveness state (`joining` | `ready` | `stalled` | `dead`). */
export interface RankHealth {
  engineIndex: number;
  state: string;
  /** Why it is dead (or `stall`), else null. */
  cause: string | null;
}

/**
 * One group's health.
 * - `alive`: it can take requests now; `status`: `ok` | `degraded` | `starting` | `unavailable` (engine client
 *   `GroupStatus`); `message`: `ok`, `degraded`, `starting`, or `engine core dead` (SMG's probe message) when it can
 *   no longer serve.
 * - `joined` / `expected`: connected ranks (ready or stalled) / rank slots; `ranks`: every slot's state;
 *   `dpRanks`: the engine indexes of the connected ranks.
 * - `failures`: its group-scope failures by cause (`decode-errors`, `engine-core-dead`, `watchdog`, ...).
 */
export interface GroupHealth {
  /** The group's name (`--group-name`). */
  name: string;
  /** Its worker URL (`ipc://<path>`): only with `?verbose=1` (the plain body replaces it by `name`; health-redact.ts). */
  worker: string;
  engine: EngineFamily;
  alive: boolean;
  status: BackendStatus;
  message: 'ok' | 'degraded' | 'starting' | 'engine core dead';
  joined: number;
  expected: number;
  dpRanks: number[];
  ranks: RankHealth[];
  failures: Record<string, number>;
}

/**
 * The `/health` answer: `status` is `ok` when every group is ok, `degraded` when some can serve, `starting` when none
 * can serve and none ever could, `unhealthy` when none can serve after one did. A 503 body also carries an
 * OpenAI-style `error` (code `engine_starting` or `engine_dead`).
 */
export interface HealthBody {
  status: 'ok' | 'degraded' | 'starting' | 'unhealthy';
  groups: GroupHealth[];
  error?: OpenAIErrorBody['error'];
}

/** The `/ready` answer (see the module docs). */
export interface ReadyBody {
  status: 'ready' | 'draining' | 'starting' | 'unavailable';
  groups: GroupHealth[];
}

const MESSAGES: Record<BackendStatus, GroupHealth['message']> = {
  ok: 'ok',
  degraded: 'degraded',
  starting: 'starting',
  unavailable: 'engine core dead',
};

/** Every group's health, in configuration order. Never throws. */
export function groupHealth(groups: readonly BackendGroup[]): GroupHealth[] {
  return groups.map((g) => {
    const status = g.backend.status();
    const ranks = g.backend.rankStates().map((r) => ({ engineIndex: r.engineIndex, state: r.state, cause: r.cause }));
    const connected = ranks.filter((r) => r.state === 'ready' || r.state === 'stalled');
    return {
      name: g.name,
      worker: g.worker,
      engine: g.engine,
      alive: g.backend.canServe(),
      status,
      message: MESSAGES[status],
      joined: connected.length,
      expected: g.backend.dpSize,
      dpRanks: connected.map((r) => r.engineIndex),
      ranks,
      failures: { ...g.backend.stats.failures },
    };
  });
}

/** `vllm-0 (vllm): starting, 1 of 2 rank(s) joined (rank 0 ready, rank 1 joining)` for messages. */
export function describeGroups(report: readonly GroupHealth[]): string {
  return report
    .map(
      (g) =>
        `${g.name} (${g.engine}): ${g.status}, ${g.joined} of ${g.expected} rank(s) joined (${g.ranks.map((r) => `rank ${r.engineIndex} ${r.state}`).join(', ')})`,
    )
    .join('; ');
}

/** The HTTP status and body of `/health`: 200 while at least one group can serve, else 503. Never throws. */
export function healthReport(groups: readonly BackendGroup[]): { statusCode: 200 | 503; body: HealthBody } {
  const report = groupHealth(groups);
  const live = report.filter((g) => g.alive).length;
  if (live > 0)
    return {
      statusCode: 200,
      body: { status: report.every((g) => g.status === 'ok') ? 'ok' : 'degraded', groups: report },
    };
  if (report.every((g) => g.status === 'starting')) {
    return {
      statusCode: 503,
      body: {
        status: 'starting',
        groups: report,
        error: {
          message: `starting: no engine group can serve yet, waiting for ranks to join (${describeGroups(report)})`,
          type: 'service_unavailable_error',
          param: null,
          code: 'engine_starting',
        },
      },
    };
  }
  const causes = report
    .map((g) => {
      const list = Object.entries(g.failures)
        .map(([cause, n]) => `${cause}×${n}`)
        .join(', ');
      return `${g.name}${list ? `: ${list}` : ''}`;
    })
    .join('; ');
  return {
    statusCode: 503,
    body: {
      status: 'unhealthy',
      groups: report,
      error: {
        message: `engine core dead: no engine group can serve (${describeGroups(report)}; group failures: ${causes})`,
        type: 'service_unavailable_error',
        param: null,
        code: 'engine_dead',
      },
    },
  };
}

/**
 * The HTTP status and body of `/ready`: 200 `ready` while some group can serve and the gateway accepts requests;
 * 503 `draining` once a shutdown began, else 503 `starting` (no group ever could serve) or `unavailable`. Never throws.
 */
export function readyReport(
  groups: readonly BackendGroup[],
  draining: boolean,
): { statusCode: 200 | 503; body: ReadyBody } {
  const report = groupHealth(groups);
  if (draining) return { statusCode: 503, body: { status: 'draining', groups: report } };
  if (report.some((g) => g.alive)) return { statusCode: 200, body: { status: 'ready', groups: report } };
  return {
    statusCode: 503,
    body: { status: report.every((g) => g.status === 'starting') ? 'starting' : 'unavailable', groups: report },
  };
}
