/**
 * What the HTTP app of a `--workers N` front is given instead of the engine clients (docs/workers.md sections
 * 3-6), all through its `FrontChannel` (front-channel.ts):
 * - `RemoteBackend`: a `GenerationBackend` per engine group. `submit` goes to the router, which places the request;
 *   the sync reads (`rankStates()`, `status()`, …) answer from the router's last SNAPSHOT; `refresh()` fetches a fresh
 *   one (what /health, /ready and /v1/gateway/ranks await first). Its events are the engine client's: `joined` from
 *   the router's JOINED records, `rank` and `failed` from what changed between two snapshots.
 * - `sharedConcurrency`: the global `--max-concurrent-requests` count, held by the router (PERMIT / RELEASE).
 * The Responses store is shared-responses-store.ts. The routes cannot tell the difference; no routing state lives here.
 */
import { EventEmitter } from 'node:events';
import type { CancellableSubmitOptions, ClientStats } from '../../engine-client/client.js';
import { EngineClientError } from '../../engine-client/errors.js';
import { newClientStats } from '../../engine-client/reports.js';
import type { ConnectedEngine } from '../../engine-client/link.js';
import type { RequestStream } from '../../engine-client/request-stream.js';
import type { GenerateRequest } from '../../protocols/types.js';
import type {
  AdapterRegistry,
  BackendEvents,
  BackendRankState,
  BackendStatus,
  GenerationBackend,
} from '../../server/backend.js';
import type { AdapterChange } from '../../engine-client/lora-adapters.js';
import type { SharedConcurrencyCap } from '../../server/concurrency.js';
import type { GroupSnapshot } from '../channel/records.js';
import type { FrontChannel } from './front-channel.js';
import { snapshotEvents } from './snapshot-events.js';

const EMPTY_STATS: ClientStats = newClientStats(
  {},
  { requests: 0, predictedTokens: 0, confirmedTokens: 0, reportedTokens: 0 },
);

/** One engine group's engine client as a front sees it, through the router (see the module docs). */
export class RemoteBackend implements GenerationBackend {
  /** The engine client's events as this front learns them: `joined` from JOINED records, the rest from snapshots. */
  private readonly events = new EventEmitter<BackendEvents>();
  /** The group's snapshot the last events were derived from (undefined before the first). */
  private seen: GroupSnapshot | undefined;

  constructor(
    private readonly channel: FrontChannel,
    private readonly group: number,
  ) {
    this.seen = channel.groups[group];
    channel.on('joined', (g, engineIndex, rejoin) => {
      if (g !== this.group) return;
      // The app reads only the engine index of a joined rank.
      const engine = { engineIndex } as unknown as ConnectedEngine;
      this.emit('joined', engine, rejoin);
    });
    channel.on('snapshot', (groups) => this.snapshotArrived(groups[this.group]));
  }

  /**
   * The router's rank and group events are not sent as records: they are read from what changed between two
   * snapshots of the group (snapshot-events.ts), so the app's listeners hear a death, a stall, a state change and a
   * group failure here as they would from the engine client, a snapshot interval late at most.
   */
  private snapshotArrived(next: GroupSnapshot | undefined): void {
    if (next === undefined) return;
    const previous = this.seen;
    this.seen = next;
    for (const e of snapshotEvents(previous, next)) {
      if (e.event === 'rank') this.emit('rank', e.dpRank, e.state, e.cause);
      else
        this.emit(
          'failed',
          new EngineClientError('engine-dead', `engine group failed as a unit (${e.cause})`),
          e.cause,
        );
    }
  }

  /** Emit to the listeners; one that throws is logged, never breaks the channel's delivery (as the engine client). */
  private emit<E extends keyof BackendEvents>(event: E, ...args: BackendEvents[E]): void {
    try {
      this.events.emit(event, ...(args as never));
    } catch (err) {
      this.channel.log.error({ err }, `a '${event}' listener threw`);
    }
  }

  private get snap(): GroupSnapshot | undefined {
    return this.channel.groups[this.group];
  }

  get dpSize(): number {
    return this.snap?.dpSize ?? 0;
  }

  get maxModelLen(): number | null {
    return this.snap?.maxModelLen ?? null;
  }

  get contextTokenLimit(): number {
    return this.snap?.contextTokenLimit ?? 0;
  }

  isAlive(): boolean {
    return this.snap?.alive ?? false;
  }

  canServe(): boolean {
    return this.snap?.canServe ?? false;
  }

  hasRoom(): boolean {
    return this.snap?.hasRoom ?? true;
  }

  status(): BackendStatus {
    return this.snap?.status ?? 'unavailable';
  }

  rankStates(): BackendRankState[] {
    return this.snap?.ranks ?? [];
  }

  get stats(): ClientStats {
    return this.snap?.stats ?? EMPTY_STATS;
  }

  /** Submit through the router, which places it on a rank (select + reserve there); rejects with the router's error. */
  submit(request: GenerateRequest, options?: CancellableSubmitOptions): Promise<RequestStream> {
    return this.channel.submit(this.group, request, options);
  }

  /**
   * The group's LoRA adapters as the last snapshot lists them; a change goes to the router (which asks the ranks)
   * and the front refreshes its snapshot after it. Null when the group serves none (TokenSpeed).
   */
  get adapters(): AdapterRegistry | null {
    const listed = this.snap?.adapters ?? null;
    if (listed === null) return null;
    const change = async (method: string, arg: unknown): Promise<AdapterChange> => {
      const out = (await this.channel.call(method, [this.group, arg])) as AdapterChange;
      await this.channel.refresh();
      return out;
    };
    return {
      list: () => listed,
      get: (name) => listed.find((a) => a.name === name),
      load: (m) => change('lora.load', m),
      unload: (name) => change('lora.unload', name),
    };
  }

  /** Fetch a fresh snapshot from the router (shared by every group of the front). */
  refresh(): Promise<void> {
    return this.channel.refresh();
  }

  /** Listen to the group's events (`GenerationBackend.on`): `joined`, `rank` and `failed`. */
  on<E extends keyof BackendEvents>(event: E, listener: (...args: BackendEvents[E]) => void): this {
    this.events.on(event, listener as never);
    return this;
  }
}

/** The global concurrency cap through the router (concurrency.ts `SharedConcurrencyCap`). */
export function sharedConcurrency(channel: FrontChannel): SharedConcurrencyCap {
  return {
    acquire: () => channel.acquirePermit(),
    release: (ticket) => channel.releasePermit(ticket),
  };
}
