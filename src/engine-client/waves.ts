/**
 * The wave clock of a lockstep (MoE) DP group and the group's kind (dp-routing.md section 13; engine-wire.md 5.7,
 * 5.12; SMG PR #2078 and follow-ups; vLLM `v1/engine/core.py` `DPEngineCoreProc`, PR #51481; issue #14). Pure state:
 * the engine client does the sending.
 *
 * Group kind (`GroupKind`), decided once and then only ever promoted to `lockstep`:
 * - `lockstep: true` / `false` (a per-group option, CLI `--lockstep` / `--no-lockstep`): forced, nothing overrides it.
 * - `auto` (default): lockstep iff **any** rank's ready response reports `data_parallel_size > 1` (13.1); dense when
 *   every rank reported it and none above 1 (authoritative: vLLM reconfigures an independent DP rank to
 *   `data_parallel_size` 1 before answering, `reconfigure_for_independent_dp_rank`, and such a rank runs the plain
 *   `EngineCoreProc`, which has no waves; wave notifications from a dense group are ignored, as 13.1 says); otherwise
 *   (a rank sent the short ready response of vLLM releases up to at least 9aaf83ef, which has no
 *   `data_parallel_size`) `unknown`. A wave notification (`wave_complete` or `start_wave`) from any rank of an
 *   unknown group makes it lockstep for good: a dense engine never sends one, so one arriving proves the ranks park.
 *
 * No hang before detection (`submitWake`): a lockstep group parks at wave 0 before its first request, and a parked
 * vLLM rank without a DP coordinator does not wake itself on an ADD (5.12); its forward pass waits in the expert
 * all-to-all for ranks that never join. So the **first** successful submit to a group of unknown kind wakes the group
 * once, START_DP_WAVE `[clock + 1, nil]` to every rank, exactly like a lockstep wake. That is safe for both kinds:
 * - lockstep: the ranks accept it (wave 1 ≥ their wave 0), run the wave with the request, drain and park; every rank
 *   then reports `wave_complete` (without a coordinator each rank reports to its client, `core.py` `run_busy_loop`),
 *   which detects the kind. A request that reached the group after it parked but before the gateway read that
 *   `wave_complete` is covered too: `observe` asks for a wake when the detection finds requests in flight (`busy`).
 * - dense: vLLM's `EngineCoreProc._handle_client_request` has no branch for START_DP_WAVE; it logs "Unrecognized input
 *   request type encountered" once and otherwise ignores it (the payload `[1, nil]` decodes with the generic
 *   decoder). No state changes, nothing is sent back. Sending it once per group (not per request) keeps that to one
 *   log line per rank.
 * Groups of a known kind never get this probe: a dense group is never woken (SMG
 * `independent_ranks_are_never_woken`).
 *
 * Clock (13.2-13.4), kept from construction on (it only matters once lockstep): `bump()` is `wake_group()`'s step,
 * clock ← clock + 1, returning the wave to broadcast; every wake bumps, so "last + 1" is never stale (13.4).
 * `observe`: complete(w) → clock ← max(clock, w + 1), no wake; start(w) → clock ← max(clock, w), then the caller wakes
 * (which bumps again). The spec's clock is an unsigned 64-bit counter that saturates; this one saturates at
 * `Number.MAX_SAFE_INTEGER` (2^53 − 1 waves is ample, inferred). Wave numbers from the engine arrive as safe integers.
 */
import type { ConnectedEngine } from './link.js';
import type { ReadyResponse, WaveEvent } from '../protocols/types.js';

/** What `observe` decided: `ignored` (the group is dense), `updated` (clock moved or stayed, no wake), `wake`. */
export type WaveObservation = 'ignored' | 'updated' | 'wake';

/** The per-group lockstep option: `auto` (detect), `true` (force lockstep), `false` (force dense). */
export type LockstepSetting = 'auto' | boolean;

/** A group's kind as far as waves go; `unknown` only in `auto` mode before any evidence. */
export type GroupKind = 'lockstep' | 'dense' | 'unknown';

/** What decided the kind: the option, the ready responses, or a rank's wave notification. */
export type KindSource = 'option' | 'ready-response' | 'wave-notification';

const MAX = Number.MAX_SAFE_INTEGER;

/** The kind the ready responses give in `auto` mode (see the module comment); unknown before any rank joined. */
function kindFromReadyResponses(engines: readonly ConnectedEngine[]): GroupKind {
  if (engines.length === 0) return 'unknown';
  if (engines.some((e) => (e.ready.dataParallelSize ?? 0) > 1)) return 'lockstep';
  return engines.every((e) => e.ready.dataParallelSize !== null) ? 'dense' : 'unknown';
}

/** One engine group's kind and wave clock. */
export class WaveClock {
  /** The option this clock was built with. */
  readonly setting: LockstepSetting;
  private currentKind: GroupKind;
  private source: KindSource | null;
  private clock = 0;
  private probed = false;
  /** Some joined rank sent no `data_parallel_size` (the short ready response): its reports cannot decide `dense`. */
  private shortReady: boolean;

  /**
   * @param engines the group's connected ranks (in `auto` mode their ready responses decide the initial kind).
   * @param setting `auto` (default), or `true` / `false` to force the kind.
   */
  constructor(engines: readonly ConnectedEngine[] = [], setting: LockstepSetting = 'auto') {
    this.setting = setting;
    this.shortReady = engines.some((e) => e.ready.dataParallelSize === null);
    if (setting === true || setting === false) {
      this.currentKind = setting ? 'lockstep' : 'dense';
      this.source = 'option';
    } else {
      this.currentKind = kindFromReadyResponses(engines);
      this.source = this.currentKind === 'unknown' ? null : 'ready-response';
    }
  }

  /**
   * A fresh clock (at 0, not probed) for the same group after a rank rejoined as a new process (which starts at wave
   * 0; COORDINATION.md interface D). The setting carries over, and so does a lockstep kind learnt from a wave
   * notification (a rejoined rank's ready response does not change what the group is).
   */
  rebuild(engines: readonly ConnectedEngine[]): WaveClock {
    const next = new WaveClock(engines, this.setting);
    if (this.source === 'wave-notification' && next.currentKind !== 'lockstep') {
      next.currentKind = 'lockstep';
      next.source = 'wave-notification';
    }
    return next;
  }

  /**
   * A rank joined with this ready response (issue #8: ranks join one at a time, also after construction). In `auto`
   * mode a `data_parallel_size` above 1 makes the group lockstep for good; one of 1 or less decides an undecided group
   * dense, unless some rank so far sent none (the short ready response), which keeps it unknown. A forced kind, or
   * one learnt from a wave notification, never changes here.
   */
  noteRank(ready: ReadyResponse): void {
    if (this.source === 'option' || this.source === 'wave-notification') return;
    const dp = ready.dataParallelSize;
    if (dp === null) {
      this.shortReady = true;
      return;
    }
    if (dp > 1) {
      this.currentKind = 'lockstep';
      this.source = 'ready-response';
    } else if (this.currentKind === 'unknown' && !this.shortReady) {
      this.currentKind = 'dense';
      this.source = 'ready-response';
    }
  }

  /**
   * Back to wave 0, not probed (a failed lockstep group rebuilt from fresh processes only, which all start at wave 0;
   * the engine client keeps the clock while any rank survives, dp-routing.md 13.4). The kind is kept.
   */
  reset(): void {
    this.clock = 0;
    this.probed = false;
  }

  /** The group's kind now. */
  get kind(): GroupKind {
    return this.currentKind;
  }

  /** What decided `kind`, or null while it is `unknown`. */
  get decidedBy(): KindSource | null {
    return this.source;
  }

  /** True iff the group is (now known to be) lockstep. */
  get lockstep(): boolean {
    return this.currentKind === 'lockstep';
  }

  /** The current clock (a wave number ≥ 0) of a lockstep group, or null otherwise (13.1: no clock exists). */
  get value(): number | null {
    return this.lockstep ? this.clock : null;
  }

  /**
   * The wake owed after a successful ADD (13.2 step 6): lockstep → `bump()`; unknown → `bump()` the first time only
   * (the probe wake, see the module comment), null afterwards; dense → null. Returns the wave to broadcast, or null.
   */
  submitWake(): number | null {
    if (this.currentKind === 'lockstep') return this.bump();
    if (this.currentKind === 'unknown' && !this.probed) {
      this.probed = true;
      return this.step();
    }
    return null;
  }

  /** `wake_group()`'s step (13.2): clock + 1 (saturating) and return it; null (nothing to do) when not lockstep. */
  bump(): number | null {
    return this.lockstep ? this.step() : null;
  }

  /**
   * `observe_wave(event)` (13.3), plus detection. Dense (forced or from the ready responses) → `ignored`. Otherwise the
   * group is (or, when unknown, now becomes) lockstep, the clock is updated, and the result is `wake` for a start(w),
   * and for a complete(w) only when this event was the detection and `busy` (requests are in flight: one may be held by
   * a parked rank, see the module comment); else `updated`.
   */
  observe(event: WaveEvent, busy = false): WaveObservation {
    if (this.currentKind === 'dense') return 'ignored';
    const detected = this.currentKind === 'unknown';
    if (detected) {
      this.currentKind = 'lockstep';
      this.source = 'wave-notification';
    }
    if (event.kind === 'complete') {
      this.clock = Math.max(this.clock, Math.min(event.wave + 1, MAX));
      return detected && busy ? 'wake' : 'updated';
    }
    this.clock = Math.max(this.clock, Math.min(event.wave, MAX));
    return 'wake';
  }

  private step(): number {
    this.clock = Math.min(this.clock + 1, MAX);
    return this.clock;
  }
}
