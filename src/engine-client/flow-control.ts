/**
 * Flow control of one engine group (issue 30 part 3): while the group is **saturated**, a new unpinned request waits
 * in the gateway's queue (flow-queue.ts: bands, fairness between tenants, FCFS) instead of piling into the engines'
 * own queues, where it could not be reordered and where its prompt's cached blocks can be evicted before it runs.
 * Work-conserving: while the group has room, nothing waits.
 *
 * **Room** is judged from what the gateway already knows per ready rank (`rankRoom`): its in-flight set against a
 * per-rank target (default the rank's `max_num_seqs`, the batch it can run at once: past it a request would only wait
 * in the engine's queue), and none at all while the rank's last report shows requests waiting (the engine already
 * queues: KV space or its batch is full). Gateway-side, this is the saturation check of llm-d / the Gateway API
 * Inference Extension's flow control (a pod is saturated past a queue depth or a KV usage; the pool when every pod
 * is), with the in-flight sets this gateway has per rank.
 *
 * A queued request is granted when room appears (`noteFreed`: a release, a rank joining or reviving; the pump runs
 * once per microtask turn), in the queue's order. A grant counts against the room until the request is reserved on a
 * rank (`placed`), so a new arrival between the grant and the placement cannot take its place. A queued request
 * ends early when its client leaves (its signal aborts: it leaves the queue at once), when its deadline passes, when
 * the queue is full, or when a more urgent request sheds it; those end with the `overloaded` error (HTTP 429 with
 * `Retry-After`).
 */
import type { EngineLoad } from '../protocols/types.js';
import type { CancelSignal, FlowControlOptions, FlowTicket } from './client-options.js';
import { positiveMs } from '../option-checks.js';
import { EngineClientError } from './errors.js';
import { FlowQueue, type FlowRefusal } from './flow-queue.js';

export type { FlowControlOptions, FlowTicket } from './client-options.js';

/** Defaults of `FlowControlOptions`. */
export const FLOW_CONTROL_DEFAULTS = {
  maxQueued: 4096,
  maxQueuedPerTenant: 1024,
  queueTimeoutMs: 30_000,
} as const;

/** Tenants named in `FlowControlStats.queuedByTenant` (the ones with the most queued). */
export const QUEUED_TENANTS_SHOWN = 20;

/**
 * What flow control did, live: requests queued now per band (index = band) and per tenant (the
 * `QUEUED_TENANTS_SHOWN` with the most; read when asked), and how requests that met a saturated
 * group ended: granted (waited, then let through to placement), refused (not queued: the queue or the tenant's share was full),
 * timed_out (deadline), shed (dropped for a more urgent one), left (the client left while it waited), unavailable (no
 * rank could serve any more, or the client closed).
 */
export interface FlowControlStats {
  readonly queuedByBand: readonly number[];
  readonly queuedByTenant: Readonly<Record<string, number>>;
  readonly outcomes: Record<'granted' | 'refused' | 'timed_out' | 'shed' | 'left' | 'unavailable', number>;
}

/**
 * The priority bands, most urgent first (the Gateway API Inference Extension's criticality; declared here because
 * flow control orders by them; server/priority-band.ts reads them from the header).
 */
export const PRIORITY_BANDS = ['critical', 'standard', 'sheddable'] as const;
export type PriorityBand = (typeof PRIORITY_BANDS)[number];

/** The band of a request that names none, and the ceiling of a tenant the keys file does not raise. */
export const DEFAULT_PRIORITY_BAND: PriorityBand = 'standard';

/** A band's urgency, what a `FlowTicket` carries: 0 for the most urgent band, one more per band after it. */
export function bandOrder(band: PriorityBand): number {
  return PRIORITY_BANDS.indexOf(band);
}

/** `bandOrder(DEFAULT_PRIORITY_BAND)`. */
const DEFAULT_BAND_ORDER = bandOrder(DEFAULT_PRIORITY_BAND);

/** The tenant of a request that names none. */
export const DEFAULT_TENANT = 'default';

/** The ticket of a request that names none: the default tenant, the default band. */
export const DEFAULT_FLOW_TICKET: FlowTicket = Object.freeze({
  tenant: DEFAULT_TENANT,
  band: DEFAULT_BAND_ORDER,
});

/**
 * Requests a ready rank can still take before it is saturated (see the module comment): 0 while its report shows
 * waiting requests, else `target − inFlight` (at least 0); `Infinity` without a target. Pure.
 */
export function rankRoom(inFlight: number, load: EngineLoad | null, target: number | null): number {
  if (load !== null && load.numWaiting > 0 && inFlight > 0) return 0;
  return target === null ? Number.POSITIVE_INFINITY : Math.max(0, target - inFlight);
}

/**
 * Checks flow control's settings before anything starts.
 * @throws RangeError on a queue bound or per-rank target that is not an integer ≥ 1 (null target: allowed), or a
 *   timeout that is not a positive number of ms at most `MAX_TIMER_MS` (Node's longest timer: a longer one fires
 *   at once).
 */
export function checkFlowControlOptions(opts: FlowControlOptions): void {
  const ints: [string, number | null | undefined][] = [
    ['maxQueued', opts.maxQueued],
    ['maxQueuedPerTenant', opts.maxQueuedPerTenant],
    ['maxInFlightPerRank', opts.maxInFlightPerRank],
  ];
  for (const [name, v] of ints) {
    if (v !== undefined && v !== null && (!Number.isSafeInteger(v) || v < 1)) {
      throw new RangeError(`${name} must be an integer ≥ 1, got ${v}`);
    }
  }
  if (opts.queueTimeoutMs !== undefined) positiveMs('queueTimeoutMs', opts.queueTimeoutMs);
}

interface Waiter {
  grant(): void;
  refuse(err: EngineClientError): void;
}

const REFUSALS: Record<Exclude<FlowRefusal, 'duplicate'> | 'shed' | 'timeout', (c: number) => string> = {
  'queue-full': (c) => `the engine group is saturated and its queue is full (${c} requests wait)`,
  'tenant-full': (c) => `the engine group is saturated and this tenant already has ${c} requests waiting`,
  shed: () => 'the engine group is saturated: this request was dropped to make room for a more urgent one',
  timeout: (ms) => `the engine group stayed saturated for ${ms} ms while this request waited`,
};

/**
 * One group's gate (see the module comment). `room(band)` is the group's room now for a request of `band`, read in the
 * same synchronous step.
 */
export class FlowGate {
  private readonly queue: FlowQueue<Waiter>;
  private readonly timeoutMs: number;
  /** Requests granted and not yet reserved on a rank. */
  private granted = 0;
  private pumpScheduled = false;
  /** What flow control did (`FlowControlStats`; live: read it, never write it). */
  readonly stats: FlowControlStats;

  /** @throws RangeError as `checkFlowControlOptions`. */
  constructor(
    opts: FlowControlOptions,
    private readonly room: (band: number) => number,
  ) {
    checkFlowControlOptions(opts);
    this.queue = new FlowQueue(PRIORITY_BANDS.length, {
      maxTotal: opts.maxQueued ?? FLOW_CONTROL_DEFAULTS.maxQueued,
      maxPerTenant: opts.maxQueuedPerTenant ?? FLOW_CONTROL_DEFAULTS.maxQueuedPerTenant,
    });
    this.timeoutMs = opts.queueTimeoutMs ?? FLOW_CONTROL_DEFAULTS.queueTimeoutMs;
    const queue = this.queue;
    this.stats = {
      queuedByBand: queue.bandSizes,
      // A getter: computed when a scrape, a snapshot or the dashboard reads it, never on the request path.
      get queuedByTenant() {
        return queue.topTenants(QUEUED_TENANTS_SHOWN);
      },
      outcomes: { granted: 0, refused: 0, timed_out: 0, shed: 0, left: 0, unavailable: 0 },
    };
  }

  /**
   * Whether a request of `band` arriving now would go to a rank without waiting: nothing as urgent waits, and the group
   * has room for its band.
   */
  wouldAdmit(band: number = DEFAULT_BAND_ORDER): boolean {
    return !this.queue.waitsAtOrAbove(band) && this.room(band) - this.granted > 0;
  }

  /**
   * Null when request `id` may be placed now (nothing waits and the group has room: place it in this same synchronous
   * step); else a promise that resolves once it is granted (then place it and call `placed()`), or rejects with
   * `overloaded` (queue full, shed, deadline) or with `signal`'s reason (its client left; it left the queue at once).
   */
  admit(id: string, ticket: FlowTicket, signal?: CancelSignal): Promise<void> | null {
    if (this.wouldAdmit(ticket.band)) return null;
    // A client already gone never queues (an abort listener added now would never fire).
    if (signal?.aborted === true) return Promise.reject(signal.reason);
    return new Promise<void>((resolve, reject) => {
      const waitMs = Math.min(this.timeoutMs, ticket.timeoutMs ?? this.timeoutMs);
      let timer: NodeJS.Timeout | null = null;
      const done = () => {
        if (timer !== null) clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      };
      const onAbort = () => {
        if (this.queue.remove(id) === undefined) return;
        this.stats.outcomes.left++;
        done();
        reject(signal!.reason);
      };
      const waiter: Waiter = {
        grant: () => {
          done();
          resolve();
        },
        refuse: (err) => {
          done();
          reject(err);
        },
      };
      const r = this.queue.enqueue({ id, tenant: ticket.tenant, band: ticket.band, value: waiter });
      if (!r.queued) {
        if (r.reason === 'duplicate') {
          const msg = `request id ${JSON.stringify(id)} is already waiting`;
          reject(new EngineClientError('duplicate-request-id', msg, { requestId: id }));
          return;
        }
        this.stats.outcomes.refused++;
        const count = r.reason === 'tenant-full' ? this.queue.queuedOf(ticket.tenant) : this.queue.size;
        reject(overloaded(REFUSALS[r.reason](count)));
        return;
      }
      if (r.shed !== null) {
        this.stats.outcomes.shed++;
        r.shed.value.refuse(overloaded(REFUSALS.shed(0)));
      }
      signal?.addEventListener('abort', onAbort, { once: true });
      timer = setTimeout(() => {
        if (this.queue.remove(id) === undefined) return;
        this.stats.outcomes.timed_out++;
        waiter.refuse(overloaded(REFUSALS.timeout(waitMs)));
      }, waitMs);
      // Room may exist already (the queue was not empty, but its head was just granted): try at once.
      this.noteFreed();
    });
  }

  /** A granted request was reserved on a rank, or failed before it could be: its grant no longer holds room. */
  placed(): void {
    if (this.granted > 0) this.granted--;
    this.noteFreed();
  }

  /** Room may have appeared (a release, a join, a revival): grant what it allows, once per microtask turn. */
  noteFreed(): void {
    if (this.pumpScheduled || this.queue.size === 0) return;
    this.pumpScheduled = true;
    queueMicrotask(() => {
      this.pumpScheduled = false;
      this.pump();
    });
  }

  /** Refuse every waiting request with `err` (the group closed, or no rank can serve). */
  closeAll(err: EngineClientError): void {
    for (let e = this.queue.take(); e !== undefined; e = this.queue.take()) {
      this.stats.outcomes.unavailable++;
      e.value.refuse(err);
    }
  }

  private pump(): void {
    // The most urgent waiting request goes first; one that finds no room for its band stops the pump (a less urgent
    // one behind it would find less: the most urgent band may use the rank's whole batch, the others the target).
    while (this.queue.size > 0 && this.room(this.queue.nextBand()) - this.granted > 0) {
      const e = this.queue.take()!;
      this.granted++;
      this.stats.outcomes.granted++;
      e.value.grant();
    }
  }
}

function overloaded(message: string): EngineClientError {
  return new EngineClientError('overloaded', message);
}
