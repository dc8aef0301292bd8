/**
 * The wave clock of a lockstep (MoE) DP group (dp-routing.md section 13; SMG PR #2078 and follow-ups; vLLM
 * `core.py`, `coordinator.py`, PR #51481). Pure state: the engine client does the sending.
 *
 * - Detection (13.1; engine-wire.md 5.12): a worker is lockstep iff **any** rank's ready response reports
 *   `data_parallel_size > 1`. Only then does a clock exist; it starts at 0.
 * - `bump()` is `wake_group()`'s clock step (13.2): clock ← clock + 1, returning the wave to broadcast. Every wake
 *   bumps (13.4): ranks increment their own wave when they park and ignore a START_DP_WAVE naming a lower wave, and
 *   every rank is at most one wave above the last broadcast, so "last + 1" is never stale.
 * - `observe(event)` is `observe_wave` (13.3): complete(w) → clock ← max(clock, w + 1), no wake; start(w) →
 *   clock ← max(clock, w), then the caller wakes (which bumps again). Events of a non-lockstep group are ignored.
 * - The spec's clock is an unsigned 64-bit counter that saturates; this one is a `number` that saturates at
 *   `Number.MAX_SAFE_INTEGER` (2^53 − 1 waves is ample, dp-routing.md section 1 table, inferred). Wave numbers from
 *   the engine arrive as safe integers (the protocol refuses larger ones).
 */
import type { ConnectedEngine } from './link.js';
import type { WaveEvent } from '../protocols/types.js';

/** What `observe` decided: `ignored` (not lockstep), `updated` (clock moved or stayed, no wake), `wake`. */
export type WaveObservation = 'ignored' | 'updated' | 'wake';

const MAX = Number.MAX_SAFE_INTEGER;

/** One engine group's wave clock. */
export class WaveClock {
  /** True iff any connected rank reported `dataParallelSize > 1` (dp-routing.md 13.1). */
  readonly lockstep: boolean;
  private clock = 0;

  /** @param engines the group's connected ranks (their ready responses decide lockstep). */
  constructor(engines: readonly ConnectedEngine[]) {
    this.lockstep = engines.some((e) => (e.ready.dataParallelSize ?? 0) > 1);
  }

  /** The current clock (a wave number ≥ 0), or null for a non-lockstep group (no clock exists). */
  get value(): number | null {
    return this.lockstep ? this.clock : null;
  }

  /** `wake_group()`'s step (13.2): clock + 1 (saturating) and return it; null (nothing to do) when not lockstep. */
  bump(): number | null {
    if (!this.lockstep) return null;
    this.clock = Math.min(this.clock + 1, MAX);
    return this.clock;
  }

  /** `observe_wave(event)` (13.3). Returns `wake` when the caller must now run `wake_group()`. */
  observe(event: WaveEvent): WaveObservation {
    if (!this.lockstep) return 'ignored';
    if (event.kind === 'complete') {
      this.clock = Math.max(this.clock, Math.min(event.wave + 1, MAX));
      return 'updated';
    }
    this.clock = Math.max(this.clock, Math.min(event.wave, MAX));
    return 'wake';
  }
}
