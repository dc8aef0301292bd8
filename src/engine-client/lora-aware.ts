/**
 * The `lora_aware` DP policy (issue 31 part 2): `load`'s choice, except that a request for a LoRA adapter goes to a
 * rank that is warm for it when that rank's load score is within `slack` requests of the best one. A rank is warm
 * for an adapter it was recently sent requests for (the last `maxLoras` distinct adapters dispatched to it: vLLM
 * holds `--max-loras` adapters in GPU slots and reuses the least recently used one first) or whose last report
 * counts requests for it. A cold adapter costs a load before the request can run, and while `maxLoras` other
 * adapters' requests run it waits: with no warm rank, the request goes to a rank whose report shows a free adapter
 * slot. Both bounded by load like the cache affinity (cache-aware.ts): a rank much busier than the least-loaded one
 * loses to it.
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
      const name = request.lora!.name;
      const bound = scores[best]! + slack;
      const within = (i: number) => ranks[i]!.engineIndex !== null && scores[i]! <= bound;
      // The least-loaded warm rank within the slack: one the adapter was sent to lately, or whose report shows it.
      const warmScores = ranks.map((v, i) =>
        within(i) && (warm.get(v.engineIndex!)?.includes(id) === true || holds(v, name)) ? scores[i]! : Infinity,
      );
      const pick = lowestPosition(warmScores, start);
      if (warmScores[pick] !== Infinity) {
        stats.warm += 1;
        return pick;
      }
      // Cold: a rank with a free adapter slot (its report shows fewer running adapters) starts it at once.
      const freeScores = ranks.map((v, i) => (within(i) && runningAdapters(v) < maxLoras ? scores[i]! : Infinity));
      const free = lowestPosition(freeScores, start);
      stats.cold += 1;
      return freeScores[free] !== Infinity ? free : best;
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

/** Whether the rank's last report counts requests for adapter `name` (running or waiting). */
function holds(v: RankView, name: string): boolean {
  const a = v.adapters;
  return a !== null && a !== undefined && ((a.running[name] ?? 0) > 0 || (a.waiting[name] ?? 0) > 0);
}

/** How many distinct adapters the rank's last report shows running. */
function runningAdapters(v: RankView): number {
  const running = v.adapters?.running;
  if (running === undefined) return 0;
  let n = 0;
  for (const k in running) if (running[k]! > 0) n += 1;
  return n;
}

/** What `lora_aware` decided: adapter requests sent to a warm rank, to load's choice (none warm within the slack), and requests without an adapter. */
export interface LoraAwareStats {
  warm: number;
  cold: number;
  base: number;
}
