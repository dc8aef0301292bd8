/**
 * The rank slots of one engine group (issue #8): one slot per engine index 0..dpSize−1, each with the routing
 * identity it is reached at, the engine that last joined it (kept after a death, for its ready response), its
 * liveness (rank-liveness.ts) and its cumulative counters. Plain synchronous data; the engine client changes it.
 */
import type { ConnectedEngine } from './link.js';
import {
  INITIAL_LIVENESS,
  isConnected,
  nextLiveness,
  type LivenessEvent,
  type RankLiveness,
  type RankStateName,
} from './rank-liveness.js';
import { compareIdentities, encodeEngineIdentity } from '../protocols/identity.js';

/** Cumulative per-rank counts (requests, events). */
export interface RankCounters {
  pinned: number;
  unpinned: number;
  clamps: number;
  /** ABORT messages (request aborts, not probes) the link accepted for this rank. */
  abortsSent: number;
  /** Handshakes completed after the first one. */
  rejoins: number;
  stalls: number;
  /** Times it was found dead and then answered again as the same process (issue 26). */
  revivals: number;
  /** Output messages decoded that name this engine index (its batches; vLLM: also stats-only and wave envelopes). */
  batches: number;
  /** Deaths by cause (rank-liveness.ts `DeathCause`). */
  deaths: Record<string, number>;
  /** Outputs that broke the output contract, by kind (output-contract.ts `EngineErrorKind`). */
  engineErrors: Record<string, number>;
}

/** One engine index's slot. */
export interface RankSlot {
  readonly index: number;
  /** The 2-byte routing identity of this index (engine-wire.md 1.5). */
  readonly identity: Uint8Array;
  /** The engine that joined last (null before the first join). */
  engine: ConnectedEngine | null;
  liveness: RankLiveness;
  readonly counters: RankCounters;
}

/** The slots of one group, in identity order (engine-wire.md 1.5 "Engine order"). */
export class RankTable {
  /** Every slot, in identity-byte order (for indexes below 256 that is numeric order). */
  readonly slots: readonly RankSlot[];
  private readonly byIndex: ReadonlyMap<number, RankSlot>;

  /** @param dpSize number of slots (≥ 1). */
  constructor(dpSize: number) {
    const slots: RankSlot[] = Array.from({ length: dpSize }, (_, index) => ({
      index,
      identity: encodeEngineIdentity(index),
      engine: null,
      liveness: INITIAL_LIVENESS,
      counters: {
        pinned: 0,
        unpinned: 0,
        clamps: 0,
        abortsSent: 0,
        rejoins: 0,
        stalls: 0,
        revivals: 0,
        batches: 0,
        deaths: {},
        engineErrors: {},
      },
    }));
    slots.sort((a, b) => compareIdentities(a.identity, b.identity));
    this.slots = slots;
    this.byIndex = new Map(slots.map((s) => [s.index, s]));
  }

  get size(): number {
    return this.slots.length;
  }

  /** The slot of `index`, or undefined outside 0..dpSize−1. */
  slot(index: number): RankSlot | undefined {
    return this.byIndex.get(index);
  }

  /** Apply `event` to `index`'s liveness; returns the previous state, or null when nothing changed. */
  apply(index: number, event: LivenessEvent): RankStateName | null {
    const slot = this.byIndex.get(index);
    if (!slot) return null;
    const { next, changed } = nextLiveness(slot.liveness, event);
    if (!changed) return null;
    const previous = slot.liveness.state;
    slot.liveness = next;
    return previous;
  }

  /** Slots in `state`, identity order. */
  inState(state: RankStateName): RankSlot[] {
    return this.slots.filter((s) => s.liveness.state === state);
  }

  /** Slots that are joined and not found dead (ready or stalled), identity order. */
  connected(): RankSlot[] {
    return this.slots.filter((s) => isConnected(s.liveness.state));
  }

  /** Whether every slot is `ready`. */
  allReady(): boolean {
    return this.slots.every((s) => s.liveness.state === 'ready');
  }

  /** Whether some slot is `ready`. */
  anyReady(): boolean {
    return this.slots.some((s) => s.liveness.state === 'ready');
  }

  /** Whether every slot completed at least one handshake. */
  allJoinedOnce(): boolean {
    return this.slots.every((s) => s.liveness.epoch > 0);
  }

  /** `rank 0 ready, rank 1 dead (peer-unreachable), …` for messages. */
  describe(): string {
    return this.slots
      .map(
        (s) =>
          `rank ${s.index} ${s.liveness.state}${s.liveness.state === 'dead' && s.liveness.cause ? ` (${s.liveness.cause})` : ''}`,
      )
      .join(', ');
  }
}
