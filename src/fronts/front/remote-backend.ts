/**
 * What the HTTP app of a `--workers N` front is given instead of the engine clients (docs/workers.md sections
 * 3-6), all through its `FrontChannel` (front-channel.ts):
 * - `RemoteBackend`: a `GenerationBackend` per engine group. `submit` goes to the router, which places the request;
 *   the sync reads (`rankStates()`, `status()`, …) answer from the router's last SNAPSHOT; `refresh()` fetches a fresh
 *   one (what /health, /ready and /v1/gateway/ranks await first).
 * - `sharedConcurrency`: the global `--max-concurrent-requests` count, held by the router (PERMIT / RELEASE).
 * The Responses store is shared-responses-store.ts. The routes cannot tell the difference; no routing state lives here.
 */
import type { CancellableSubmitOptions, ClientStats } from '../../engine-client/client.js';
import { newClientStats } from '../../engine-client/reports.js';
import type { ConnectedEngine } from '../../engine-client/link.js';
import type { RequestStream } from '../../engine-client/request-stream.js';
import type { GenerateRequest } from '../../protocols/types.js';
import type { AdapterRegistry, BackendRankState, BackendStatus, GenerationBackend } from '../../server/backend.js';
import type { AdapterChange } from '../../engine-client/lora-adapters.js';
import type { SharedConcurrencyCap } from '../../server/concurrency.js';
import type { GroupSnapshot } from '../channel/records.js';
import type { FrontChannel } from './front-channel.js';

const EMPTY_STATS: ClientStats = newClientStats(
  {},
  { requests: 0, predictedTokens: 0, confirmedTokens: 0, reportedTokens: 0 },
);

/** One engine group's engine client as a front sees it, through the router (see the module docs). */
export class RemoteBackend implements GenerationBackend {
  private readonly joinedListeners: Array<(engine: ConnectedEngine, rejoin: boolean) => void> = [];

  constructor(
    private readonly channel: FrontChannel,
    private readonly group: number,
  ) {
    channel.on('joined', (g, engineIndex, rejoin) => {
      if (g !== this.group) return;
      // The app reads only the engine index of a joined rank.
      const engine = { engineIndex } as unknown as ConnectedEngine;
      for (const l of this.joinedListeners) l(engine, rejoin);
    });
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

  on(event: 'joined', listener: (engine: ConnectedEngine, rejoin: boolean) => void): this {
    if (event === 'joined') this.joinedListeners.push(listener);
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
