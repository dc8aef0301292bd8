/**
 * The engine groups the router serves to its fronts, and the snapshot of them every front answers /health, /ready and
 * /v1/gateway/ranks from (SNAPSHOT records; router-service.ts says when they are sent).
 */
import type { EngineFamily, EngineTask, GenerationBackend } from '../../server/backend.js';
import type { GroupSnapshot } from '../channel/records.js';

/** One served group as the router service sees it: its real engine client and its names. */
export interface ServedGroup {
  readonly worker: string;
  readonly name: string;
  readonly engine: EngineFamily;
  /** What the group serves (`--tasks`); absent = `['generate']`. */
  readonly tasks?: readonly EngineTask[];
  readonly backend: GenerationBackend & {
    on(event: 'joined' | 'rank' | 'failed', listener: (...args: never[]) => void): unknown;
  };
}

/** Every group's state now (what a front's RemoteBackend answers from), in the order of `groups`. */
export function groupSnapshots(groups: readonly ServedGroup[]): GroupSnapshot[] {
  return groups.map((g) => {
    const b = g.backend;
    const st = b.stats;
    return {
      worker: g.worker,
      name: g.name,
      engine: g.engine,
      tasks: [...(g.tasks ?? ['generate'])],
      dpSize: b.dpSize,
      maxModelLen: b.maxModelLen,
      contextTokenLimit: b.contextTokenLimit,
      alive: b.isAlive(),
      canServe: b.canServe(),
      status: b.status(),
      ranks: b.rankStates(),
      hasRoom: b.hasRoom?.() ?? true,
      adapters: b.adapters ? b.adapters.list() : null,
      // Every counter as it is now; the records copied so the snapshot does not change under the encoder.
      stats: {
        ...st,
        failures: { ...st.failures },
        rankDeaths: { ...st.rankDeaths },
        handshakeRejected: { ...st.handshakeRejected },
      },
    };
  });
}
