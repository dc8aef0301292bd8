/**
 * The gateway's recent events for the dashboard (issue 32 part 4): ranks joining, rejoining, stalling and dying (with
 * the death cause the engine client recorded, rank-liveness.ts `DeathCause`), groups failing as a unit, and two kinds
 * that come per request and so are counted in bursts: 429 refusals and requests an engine failed. Each is one
 * `GatewayEvent` in a ring of the last `capacity` (default 200), served by `GET /v1/gateway/ranks`.
 *
 * A burst is a window of `burstWindowMs` (default 1 s) that opens at its first refusal (or failure) and becomes one
 * event when it closes: "429 ×N in 1 s". Windows close lazily, when the list is read or another event is recorded at
 * or after their end, so there is no timer; an event is stamped with its window's end, which keeps the list in time
 * order. Open windows are keyed by kind, group and DP rank, at most `MAX_OPEN_BURSTS` of them (past it, one window
 * per kind without group or rank takes the rest), and the codes a window tallies are bounded (`MAX_BURST_CODES`):
 * nothing here grows without bound. Pure state over an injected wall clock; never throws once built.
 */
import { randomBytes } from 'node:crypto';
import type { BackendGroup } from './backend.js';

/** What happened (see the module comment). */
export type GatewayEventKind =
  | 'rank_joined'
  | 'rank_rejoined'
  | 'rank_stalled'
  | 'rank_died'
  | 'group_failed'
  | 'refused'
  | 'engine_errors';

/** One event as `/v1/gateway/ranks` serves it. */
export interface GatewayEvent {
  /** 1, 2, 3, … in the order the events were recorded (per process: see `GatewayEvents.source`). */
  id: number;
  /** Wall-clock time, Unix seconds (ms precision): when it happened, or when its burst window closed. */
  timestamp: number;
  kind: GatewayEventKind;
  /** The engine group's name (`--group-name`), or null for what concerns the whole gateway (429 refusals). */
  group: string | null;
  /** The DP rank (engine index), or null when the event is not about one rank. */
  dp_rank: number | null;
  /** Why: the death cause (`rank_died`), the failure cause (`group_failed`), else null. */
  cause: string | null;
  /** How many it stands for: the refusals or failed requests of a burst; 1 for the other kinds. */
  count: number;
  /** One short line for a person. */
  message: string;
}

/** Options of `GatewayEvents`. */
export interface GatewayEventsOptions {
  /** Events kept, newest; an integer ≥ 1 (default `DEFAULT_EVENT_CAPACITY`). */
  capacity?: number;
  /** Length of a burst window, ms > 0 (default `DEFAULT_BURST_WINDOW_MS`). */
  burstWindowMs?: number;
  /** Wall clock, Unix ms (default `Date.now`). */
  now?: () => number;
}

/** Events kept by default: about what a person scrolls through on the dashboard. */
export const DEFAULT_EVENT_CAPACITY = 200;
/** Burst window by default, ms: "429 ×N in 1 s". */
export const DEFAULT_BURST_WINDOW_MS = 1000;
/**
 * Burst windows open at once, at most, besides the one per kind without group or rank (kinds × groups × DP ranks is
 * far below it in practice).
 */
export const MAX_OPEN_BURSTS = 64;
/** Distinct codes one burst tallies by name, at most; the rest count as `other`. */
export const MAX_BURST_CODES = 8;

/**
 * The error codes (server/errors.ts `toApiError`, generation.ts) of a request that an engine failed: the engine
 * finished or aborted it with an error, sent output no engine may send or that does not decode, or the rank holding it
 * died or stalled. Other failures (refusals, the gateway's own faults, a client that left) are not the engine's.
 */
export const ENGINE_FAILURE_CODES: ReadonlySet<string> = new Set([
  'engine_error',
  'engine_abort',
  'engine_fault',
  'decode',
  'engine_dead',
  'rank_stalled',
]);

/** An open burst window: its key fields, when it opened (Unix ms), how many it counted and by which code. */
interface Burst {
  kind: 'refused' | 'engine_errors';
  group: string | null;
  dpRank: number | null;
  openedAt: number;
  count: number;
  codes: Map<string, number>;
}

/** The last events of one process (see the module comment). */
export class GatewayEvents {
  /** Random per instance: a reader that sees it change knows the ids start over (another process, a restart). */
  readonly source = randomBytes(6).toString('hex');
  private readonly ring: (GatewayEvent | undefined)[];
  /** Index in `ring` of the next write; `size` events are kept, the oldest at `(next - size) mod capacity`. */
  private next = 0;
  private size = 0;
  private lastId = 0;
  private readonly bursts = new Map<string, Burst>();
  private readonly windowMs: number;
  private readonly now: () => number;

  /** Throws RangeError for a capacity that is not an integer ≥ 1 or a window that is not > 0. */
  constructor(opts: GatewayEventsOptions = {}) {
    const capacity = opts.capacity ?? DEFAULT_EVENT_CAPACITY;
    if (!Number.isSafeInteger(capacity) || capacity < 1) throw new RangeError('capacity must be an integer ≥ 1');
    this.windowMs = opts.burstWindowMs ?? DEFAULT_BURST_WINDOW_MS;
    if (!(this.windowMs > 0)) throw new RangeError('burstWindowMs must be > 0');
    this.ring = new Array<GatewayEvent | undefined>(capacity);
    this.now = opts.now ?? Date.now;
  }

  /** DP rank `dpRank` of group `group` completed a handshake (`rejoin`: not its slot's first process). */
  rankJoined(group: string, dpRank: number, rejoin: boolean): void {
    this.record(
      rejoin ? 'rank_rejoined' : 'rank_joined',
      group,
      dpRank,
      null,
      rejoin ? `DP rank ${dpRank} rejoined (a new engine process)` : `DP rank ${dpRank} joined`,
    );
  }

  /** The rank holds requests and sent nothing for the stall timeout: out of rotation until it speaks. */
  rankStalled(group: string, dpRank: number): void {
    this.record('rank_stalled', group, dpRank, null, `DP rank ${dpRank} stalled (holds requests, sends nothing)`);
  }

  /** The rank was found dead; `cause`: how (rank-liveness.ts `DeathCause`). */
  rankDied(group: string, dpRank: number, cause: string): void {
    this.record('rank_died', group, dpRank, cause, `DP rank ${dpRank} died (${cause})`);
  }

  /** The group failed as a unit (every live request failed); `cause`: the engine client's failure cause. */
  groupFailed(group: string, cause: string): void {
    this.record('group_failed', group, null, cause, `engine group failed as a unit (${cause})`);
  }

  /** One request refused with 429 (`code`: its error code, e.g. `rate_limit_exceeded`); counted in a burst. */
  refused(code: string | null): void {
    this.count('refused', null, null, code);
  }

  /**
   * One request failed by an engine (`code` in `ENGINE_FAILURE_CODES`; other codes are ignored), on DP rank `dpRank`
   * of group `group` when known; counted in a burst per group and rank.
   */
  engineFailed(group: string, dpRank: number | null, code: string): void {
    if (ENGINE_FAILURE_CODES.has(code)) this.count('engine_errors', group, dpRank, code);
  }

  /** The events kept, oldest first (newest last); closes the burst windows that are over first. A copy. */
  list(): GatewayEvent[] {
    this.closeBursts(this.now());
    const out: GatewayEvent[] = [];
    const capacity = this.ring.length;
    for (let i = 0; i < this.size; i++) out.push(this.ring[(this.next - this.size + i + capacity) % capacity]!);
    return out;
  }

  private record(
    kind: GatewayEventKind,
    group: string | null,
    dpRank: number | null,
    cause: string | null,
    message: string,
  ): void {
    const t = this.now();
    this.closeBursts(t);
    this.push({ id: 0, timestamp: t / 1000, kind, group, dp_rank: dpRank, cause, count: 1, message });
  }

  private push(event: GatewayEvent): void {
    event.id = ++this.lastId;
    this.ring[this.next] = event;
    this.next = (this.next + 1) % this.ring.length;
    if (this.size < this.ring.length) this.size++;
  }

  /** Count one refusal or failure into its open window (opening one, when there is room). */
  private count(kind: Burst['kind'], group: string | null, dpRank: number | null, code: string | null): void {
    const t = this.now();
    this.closeBursts(t);
    let key = `${kind}\u0000${group ?? ''}\u0000${dpRank ?? ''}`;
    if (!this.bursts.has(key) && this.bursts.size >= MAX_OPEN_BURSTS) {
      // No room for another window: this one joins a window without group or rank.
      group = null;
      dpRank = null;
      key = `${kind}\u0000\u0000`;
    }
    let burst = this.bursts.get(key);
    if (burst === undefined) {
      burst = { kind, group, dpRank, openedAt: t, count: 0, codes: new Map() };
      this.bursts.set(key, burst);
    }
    burst.count++;
    const name = code ?? 'other';
    const tallied = burst.codes.has(name) || burst.codes.size < MAX_BURST_CODES - 1 ? name : 'other';
    burst.codes.set(tallied, (burst.codes.get(tallied) ?? 0) + 1);
  }

  /** Turn every window whose end is at or before `t` into its event, in the order the windows end. */
  private closeBursts(t: number): void {
    if (this.bursts.size === 0) return;
    const due: Burst[] = [];
    for (const [key, b] of this.bursts) {
      if (b.openedAt + this.windowMs > t) continue;
      due.push(b);
      this.bursts.delete(key);
    }
    due.sort((a, b) => a.openedAt - b.openedAt);
    for (const b of due) {
      const end = b.openedAt + this.windowMs;
      this.push({
        id: 0,
        timestamp: end / 1000,
        kind: b.kind,
        group: b.group,
        dp_rank: b.dpRank,
        cause: null,
        count: b.count,
        message: this.burstMessage(b),
      });
    }
  }

  private burstMessage(b: Burst): string {
    const codes = [...b.codes].map(([code, n]) => `${code} ×${n}`).join(', ');
    const window = `${this.windowMs / 1000} s`;
    if (b.kind === 'refused') return `429 ×${b.count} in ${window} (${codes})`;
    const where = b.dpRank === null ? '' : ` on DP rank ${b.dpRank}`;
    return `${b.count} request${b.count === 1 ? '' : 's'} failed by the engine${where} in ${window} (${codes})`;
  }
}

/**
 * Record in `events` what the backend of `group` tells its listeners (`GenerationBackend.on`): a rank joining or
 * rejoining, stalling or dying (with its cause), the group failing as a unit. A backend without events adds nothing.
 */
export function recordGroupEvents(events: GatewayEvents, group: BackendGroup): void {
  const backend = group.backend;
  backend.on?.('joined', (engine, rejoin) => {
    if (engine.engineIndex !== null) events.rankJoined(group.name, engine.engineIndex, rejoin);
  });
  backend.on?.('rank', (dpRank, state, cause) => {
    if (state === 'dead') events.rankDied(group.name, dpRank, cause ?? 'unknown');
    else if (state === 'stalled') events.rankStalled(group.name, dpRank);
  });
  backend.on?.('failed', (_error, cause) => events.groupFailed(group.name, cause));
}
