/**
 * Adoption of running ranks after a gateway restart (issue 26 part 6). An engine says HELLO once, at its own start-up
 * (engine-wire.md 2.1); when the gateway dies, the engine's input DEALER and output PUSH reconnect by themselves once a
 * new gateway binds the same addresses (libzmq reconnects a connecting socket every ZMQ_RECONNECT_IVL, 100 ms by
 * default, with the same routing identity), but it never says HELLO again. The new gateway therefore finds such a rank
 * on its input ROUTER, not on its handshake socket.
 *
 * How presence is told: the input ROUTER has ZMQ_ROUTER_MANDATORY (zmq-link.ts), so a send to an identity with no
 * connected peer fails with EHOSTUNREACH and succeeds once a peer with that identity is connected. The probe is the
 * empty ABORT `[]` (engine-wire.md 4.7: valid, aborts nothing), the same one the engine client uses for liveness
 * (engine-client/probes.ts). For each rank record (rank-records.ts) a probe goes out every `intervalMs` until it is
 * accepted (the rank is adopted: `host.adopted`) or `windowMs` after `start()` (the record is ignored: the engine is
 * gone, or restarting and will say HELLO). Only the input DEALER of a rank that finished a handshake is ever connected
 * there (an engine connects it after INIT, engine-wire.md 2.1 step 5), so a connected identity with a record and no
 * HELLO is the process that registered with the previous gateway. A HELLO for a recorded index (a restarted engine)
 * cancels that index's adoption (`cancel`): it goes through the normal handshake.
 */
import type { RankRecord } from './rank-records.js';

/** How long after binding a recorded rank may take to show up on the input socket, in ms (see the module docs). */
export const DEFAULT_ADOPTION_WINDOW_MS = 5000;
/** Pause between two probe rounds, in ms (half the default DEALER reconnect interval of 100 ms). */
export const ADOPTION_PROBE_INTERVAL_MS = 50;

/** What adoption needs from the link. */
export interface AdoptionHost {
  /**
   * Send the empty ABORT to `identity` on the input ROUTER: resolves true when it was accepted (a peer with this
   * identity is connected), false when it was refused (EHOSTUNREACH, or any other failure, which the host logs).
   * Never rejects.
   */
  probe(identity: Uint8Array): Promise<boolean>;
  /** The rank of `record` is connected: take it into rotation with the recorded ready response. */
  adopted(record: RankRecord): void;
  /** The window ended; `records` never showed up (possibly empty). Called once, unless stopped first. */
  settled(ignored: readonly RankRecord[]): void;
}

/** Options of `RankAdoption`. */
export interface RankAdoptionOptions {
  windowMs?: number;
  intervalMs?: number;
}

/** The adoption of one group's recorded ranks (see the module docs). Create, then `start()`. */
export class RankAdoption {
  private readonly pending: Map<number, RankRecord>;
  private readonly windowMs: number;
  private readonly intervalMs: number;
  private stopped = false;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private deadline = 0;
  private readonly done: Promise<void>;
  private resolveDone: () => void = () => {};

  constructor(
    records: ReadonlyMap<number, RankRecord>,
    private readonly host: AdoptionHost,
    opts: RankAdoptionOptions = {},
  ) {
    this.pending = new Map(records);
    this.windowMs = opts.windowMs ?? DEFAULT_ADOPTION_WINDOW_MS;
    this.intervalMs = opts.intervalMs ?? ADOPTION_PROBE_INTERVAL_MS;
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
  }

  /** Resolves once every record was adopted, cancelled or ignored, or adoption was stopped. Never rejects. */
  get finished(): Promise<void> {
    return this.done;
  }

  /** Engine indexes still waited for, ascending. */
  waitingFor(): number[] {
    return [...this.pending.keys()].sort((a, b) => a - b);
  }

  /** The records still waited for (kept in the file while the window runs: a crash then loses none of them). */
  pendingRecords(): RankRecord[] {
    return [...this.pending.values()];
  }

  /** Start probing (the first round at once). Idempotent. */
  start(): void {
    if (this.deadline !== 0 || this.stopped) return;
    this.deadline = performance.now() + this.windowMs;
    void this.round();
  }

  /** A HELLO arrived for `engineIndex`: stop waiting for its record (the rank joins through the handshake). */
  cancel(engineIndex: number): void {
    this.pending.delete(engineIndex);
  }

  /** Stop at once: no further probe or callback. Idempotent. */
  stop(): void {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.pending.clear();
    this.resolveDone();
  }

  private async round(): Promise<void> {
    this.timer = null;
    if (this.stopped) return;
    const batch = [...this.pending.values()];
    const present = await Promise.all(batch.map((r) => this.host.probe(r.identity)));
    if (this.stopped) return;
    batch.forEach((record, i) => {
      // Cancelled while the probe was out (a HELLO): the handshake has it now.
      if (!present[i] || this.pending.get(record.engineIndex) !== record) return;
      this.pending.delete(record.engineIndex);
      this.host.adopted(record);
    });
    if (this.stopped) return;
    if (this.pending.size > 0 && performance.now() < this.deadline) {
      this.timer = setTimeout(() => void this.round(), this.intervalMs);
      if (typeof this.timer === 'object' && typeof this.timer.unref === 'function') this.timer.unref();
      return;
    }
    const ignored = [...this.pending.values()];
    this.pending.clear();
    this.stopped = true;
    this.host.settled(ignored);
    this.resolveDone();
  }
}
