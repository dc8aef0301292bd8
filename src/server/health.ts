/**
 * `/health` over several engine groups (gateway.md 4.2: health = liveness of each worker's engine client, probed
 * locally, nothing sent to the engines; issue #3 part 4: a failed group is reported unhealthy while the others keep
 * serving).
 */
import type { BackendGroup, EngineFamily } from './backend.js';
import type { OpenAIErrorBody } from './errors.js';

/**
 * One group's health. `message` is `ok` for a live client and `engine core dead` for a closed one (gateway.md 4.2,
 * SMG's probe messages); `failures` are the client's fail-all events by cause (`engine-core-dead`, `watchdog`,
 * `send-timeout`, ...; at most one, dp-routing.md 6); `dpRanks` are the engine indexes of its connected ranks.
 */
export interface GroupHealth {
  worker: string;
  engine: EngineFamily;
  alive: boolean;
  message: 'ok' | 'engine core dead';
  dpRanks: number[];
  failures: Record<string, number>;
}

/**
 * The `/health` answer: `status` is `ok` when every group is alive, `degraded` when some but not all are, and
 * `unhealthy` when none is; `groups` lists every group in configuration order. An unhealthy body also carries an
 * OpenAI-style `error` (code `engine_dead`) whose message starts with `engine core dead`.
 */
export interface HealthBody {
  status: 'ok' | 'degraded' | 'unhealthy';
  groups: GroupHealth[];
  error?: OpenAIErrorBody['error'];
}

/** The HTTP status and body of `/health`: 200 while at least one group is alive, else 503. Never throws. */
export function healthReport(groups: readonly BackendGroup[]): { statusCode: 200 | 503; body: HealthBody } {
  const report: GroupHealth[] = groups.map((g) => {
    const alive = g.backend.isAlive();
    return {
      worker: g.worker,
      engine: g.engine,
      alive,
      message: alive ? 'ok' : 'engine core dead',
      dpRanks: g.backend.engines.map((e) => e.engineIndex).filter((i): i is number => i !== null),
      failures: { ...g.backend.stats.failures },
    };
  });
  const live = report.filter((g) => g.alive).length;
  if (live > 0) return { statusCode: 200, body: { status: live === report.length ? 'ok' : 'degraded', groups: report } };
  const causes = report
    .map((g) => {
      const list = Object.entries(g.failures).map(([cause, n]) => `${cause}×${n}`).join(', ');
      return `${g.worker}${list ? `: ${list}` : ''}`;
    })
    .join('; ');
  return {
    statusCode: 503,
    body: {
      status: 'unhealthy',
      groups: report,
      error: {
        message: `engine core dead: every engine group's client is closed (failures: ${causes})`,
        type: 'service_unavailable_error',
        param: null,
        code: 'engine_dead',
      },
    },
  };
}
