/**
 * The wave state of one simulated lockstep (MoE data-parallel) rank (engine-wire.md 5.12; dp-routing.md 13; vLLM
 * `v1/engine/core.py` `DPEngineCoreProc`). Pure: no sockets, no timers; the engine loop asks it whether it may step
 * and tells it what arrived.
 *
 * - The rank starts parked at wave 0.
 * - START_DP_WAVE `[w, exclude]` (5.7): ignored when `w` is below the current wave ("stale"), ignored while the rank
 *   is stepping (5.12: "a start received while stepping is a no-op"), ignored when `exclude` names this rank;
 *   otherwise the current wave becomes `w` and the rank starts stepping.
 * - An ADD carrying `current_wave` r (5.2 index 12; the gateway always sends 0): r above the current wave moves the
 *   rank to wave r (without starting it, as vLLM's `add_request` does); r below it while parked means the request
 *   arrived for an already-drained wave, so the rank asks the group to start: `start_wave` = its current wave.
 *   Either way the request is only **held**: a parked rank never steps on its own (5.12: the holder cannot step
 *   alone), only a START_DP_WAVE starts it.
 * - When a stepping rank has nothing left it parks: it reports `wave_complete` = its current wave, then increments
 *   the wave (5.12: "ranks increment their current wave when they park").
 *
 * Sim choices: real lockstep ranks all-reduce every step and park together, rank 0 reporting for the group when a
 * DP coordinator exists (every rank reports without one). Simulated ranks are separate processes with no
 * collective, so each rank decides by itself and reports its own `wave_complete`; a rank woken with no work parks
 * at once (vLLM: one dummy step, then the all-reduce finds nothing unfinished). vLLM sends `start_wave` only when a
 * DP coordinator exists; the sim always sends it, since the gateway relies on it (dp-routing.md 13.3). Upstream vLLM
 * also adopts the wave of a START received while stepping; the sim follows the spec's "no-op".
 */

/** What a START_DP_WAVE did. */
export type WaveStartOutcome =
  /** The rank moved to the named wave and started stepping. */
  | 'started'
  /** The named wave is below the current one: ignored. */
  | 'stale'
  /** The rank is already stepping: ignored. */
  | 'running'
  /** The message excludes this rank: ignored. */
  | 'excluded';

/** A rank's wave clock and parked/stepping state. Waves are integers ≥ 0. */
export class LockstepWaves {
  private wave = 0;
  private stepping = false;
  private steps = 0;

  constructor(private readonly engineIndex: number) {}

  /** The rank's current wave. */
  get currentWave(): number {
    return this.wave;
  }

  /** True while the rank steps (between an accepted START_DP_WAVE and the next park). */
  get running(): boolean {
    return this.stepping;
  }

  /** Steps taken in the current wave (vLLM `step_counter`, reset when the rank parks). */
  get stepCounter(): number {
    return this.steps;
  }

  /** Apply a START_DP_WAVE `[wave, exclude]` (see the module comment). */
  start(wave: number, excludeEngineIndex: number | null = null): WaveStartOutcome {
    if (excludeEngineIndex === this.engineIndex) return 'excluded';
    if (this.stepping) return 'running';
    if (wave < this.wave) return 'stale';
    this.wave = wave;
    this.stepping = true;
    this.steps = 0;
    return 'started';
  }

  /**
   * A request carrying `requestWave` was queued. Returns the wave to put in a `start_wave` notice (the current one),
   * or null when no notice is due.
   */
  arrived(requestWave: number): number | null {
    if (requestWave > this.wave) {
      this.wave = requestWave;
      return null;
    }
    if (requestWave < this.wave && !this.stepping) return this.wave;
    return null;
  }

  /** One step ran. */
  stepped(): void {
    this.steps += 1;
  }

  /**
   * The stepping rank drained: park. Returns the completed wave (for `wave_complete`); the current wave becomes one
   * more. Throws `Error` when the rank is already parked (a caller bug).
   */
  park(): number {
    if (!this.stepping) throw new Error('LockstepWaves.park(): the rank is already parked');
    const done = this.wave;
    this.wave += 1;
    this.stepping = false;
    this.steps = 0;
    return done;
  }
}
