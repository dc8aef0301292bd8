/**
 * The `lora_aware` DP policy (issue 31 part 2): `load`'s choice, except that a request for a LoRA adapter goes to a
 * rank that is warm for it when that rank's load score is within `slack` requests of the best one. A rank is warm
 * for an adapter it was recently sent requests for: the last `maxLoras` distinct adapters dispatched to it (vLLM
 * holds `--max-loras` adapters in GPU slots and reuses the least recently used one first; a cold adapter costs a
 * load before the request can run, and while another adapter's requests run it may have to wait). Bounded by load
 * like the cache affinity (cache-aware.ts): a warm rank that is much busier loses to the least-loaded one.
 * Requests without an adapter are scored exactly as `load` scores them.
 */
import type { GenerateRequest } from '../protocols/types.js';
import {
  fleetScorer,
  loadHorizonOf,
  lowestPosition,
  type DpPolicy,
  type LoadPolicyOptions,
  type RankView,
} from './policy.js';

/** How many requests busier than the least-loaded rank a warm rank may be and still win (requests). */
export const DEFAULT_LORA_SLACK = 8;

/** Options of `createLoraAwarePolicy`: the load policy's, plus the slots per rank and the slack (requests). */
export interface LoraAwareOptions extends LoadPolicyOptions {
  /** The ranks' `--max-loras` (adapters a rank holds at once), default 1. */
  maxLoras?: number;
  /** See `DEFAULT_LORA_SLACK`. */
  loraSlack?: number;
}

/** The `lora_aware` policy (see the module comment). Throws RangeError on a bad option. */
export function createLoraAwarePolicy(opts: LoraAwareOptions = {}): DpPolicy & { readonly stats: LoraAwareStats } {
  const horizonMs = loadHorizonOf(opts);
  const maxLoras = opts.maxLoras ?? 1;
  const slack = opts.loraSlack ?? DEFAULT_LORA_SLACK;
  if (!Number.isSafeInteger(maxLoras) || maxLoras < 1)
    throw new RangeError(`maxLoras must be an integer ≥ 1, got ${maxLoras}`);
  if (!Number.isFinite(slack) || slack < 0) throw new RangeError(`loraSlack must be a number ≥ 0, got ${slack}`);
  /** Per engine index: adapter ids recently dispatched there, least recent first (at most `maxLoras`). */
  const warm = new Map<number, number[]>();
  const stats: LoraAwareStats = { warm: 0, cold: 0, base: 0 };
  let scanStart = 0;
  return {
    name: 'lora_aware',
    releaseClamp: true,
    stats,
    select(ranks: readonly RankView[], request: GenerateRequest): number {
      if (ranks.length === 0) throw new RangeError('cannot select a DP rank: no engines connected');
      const start = scanStart % ranks.length;
      scanStart = scanStart >= Number.MAX_SAFE_INTEGER ? 0 : scanStart + 1;
      const scores = ranks.map(fleetScorer(ranks, horizonMs));
      const best = lowestPosition(scores, start);
      const id = request.lora?.id;
      if (id === undefined) {
        stats.base += 1;
        return best;
      }
      // The least-loaded warm rank within the slack, else load's choice.
      const bound = scores[best]! + slack;
      const warmScores = ranks.map((v, i) =>
        v.engineIndex !== null && scores[i]! <= bound && warm.get(v.engineIndex)?.includes(id) === true
          ? scores[i]!
          : Number.POSITIVE_INFINITY,
      );
      const pick = lowestPosition(warmScores, start);
      if (warmScores[pick] === Number.POSITIVE_INFINITY) {
        stats.cold += 1;
        return best;
      }
      stats.warm += 1;
      return pick;
    },
    onDispatch(engineIndex: number, request: GenerateRequest): void {
      const id = request.lora?.id;
      if (id === undefined) return;
      const list = warm.get(engineIndex) ?? [];
      const at = list.indexOf(id);
      if (at >= 0) list.splice(at, 1);
      list.push(id);
      if (list.length > maxLoras) list.shift();
      warm.set(engineIndex, list);
    },
    forgetRank(engineIndex: number): void {
      warm.delete(engineIndex);
    },
  };
}

/** What `lora_aware` decided: adapter requests sent to a warm rank, to load's choice (none warm within the slack), and requests without an adapter. */
export interface LoraAwareStats {
  warm: number;
  cold: number;
  base: number;
}
