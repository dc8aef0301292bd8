/**
 * The pluggable DP rank-selection policies of issue #5 part 1, all behind the `DpPolicy` seam of `policy.ts`
 * (dp-routing.md section 9.2; SMG `connector.rs`, "the DP scorer"). Each policy is a small closure over its own
 * rotating scan-start counter; scoring is pure and never modifies the stored load (section 9.2). The counter
 * advances once per `select` call, and the client calls `select` once per unpinned selection and never for a pinned
 * one (section 9.1 step 3), so the rotation is exactly the scan start of section 9.2 step 3.
 *
 * | name            | what it scores                                         | release clamp (10.2 step 4) |
 * |-----------------|--------------------------------------------------------|-----------------------------|
 * | `round_robin`   | nothing: position `counter mod count`                  | on (has no effect on it)    |
 * | `inflight`      | own in-flight count only (before load reports existed) | on (has no effect on it)    |
 * | `load`          | `loadScore` (section 9.2 step 4), the default          | on                          |
 * | `load_no_clamp` | `loadScore`                                            | **off** (section 10.3 ablation) |
 * | `cache_aware`   | `load`'s choice, or a prefix holder when cheaper       | on                          |
 * | `lora_aware`    | `load`'s choice, or a rank warm for the request's LoRA adapter within a slack (lora-aware.ts) | on |
 * | `oracle`        | true outstanding tokens from an `OracleSource`         | on (has no effect on it)    |
 *
 * `load`, `load_no_clamp` and `cache_aware` age stored reports out at `loadHorizonMs` and fall back to
 * join-shortest-queue in a dark fleet (policy.ts; dp-routing.md 14.1, 14.5); `cache_aware` is in cache-aware.ts.
 *
 * `oracle` is for the routing benchmark only (issue #5 part 4): only the benchmark, which owns the simulated ranks,
 * can give it an `OracleSource`; the CLI refuses it.
 */
import type { GenerateRequest } from '../protocols/types.js';
import { createCacheAwarePolicy, type CacheAwareOptions } from './cache-aware.js';
import { createLoraAwarePolicy, type LoraAwareOptions } from './lora-aware.js';
import {
  createLoadPolicy,
  lowestScorePosition,
  type DpPolicy,
  type LoadPolicyOptions,
  type RankView,
} from './policy.js';

/** The names accepted by `createDpPolicy` (and by `model-gateway serve --dp-policy`, except `oracle`). */
export const DP_POLICY_NAMES = [
  'round_robin',
  'inflight',
  'load',
  'load_no_clamp',
  'cache_aware',
  'lora_aware',
  'oracle',
] as const;
/** One of `DP_POLICY_NAMES`. */
export type DpPolicyName = (typeof DP_POLICY_NAMES)[number];
/** The default policy name (dp-routing.md section 9.2). */
export const DEFAULT_DP_POLICY: DpPolicyName = 'load';

/**
 * The simulator's true state as the `oracle` policy reads it (issue #5 part 1; benchmark only).
 * `outstandingTokens(engineIndex)` returns the rank's true outstanding work in tokens (e.g. prompt tokens not yet
 * prefilled plus output tokens not yet generated, over every request the rank holds, including work sent by other
 * clients), read at selection time. It must be synchronous and cheap: it runs inside the selection's synchronous
 * section (dp-routing.md section 12.3). A non-finite or negative value is treated as +Infinity (never preferred).
 * Only the benchmark provides one; production code never does.
 */
export interface OracleSource {
  outstandingTokens(engineIndex: number): number;
}

/**
 * Options of `createDpPolicy`. `oracle`: required for (and only used by) the `oracle` policy. `loadHorizonMs`: the
 * report ageing horizon of `load`, `load_no_clamp` and `cache_aware`; the other `CacheAwareOptions` only tune
 * `cache_aware`.
 */
export interface DpPolicyOptions extends CacheAwareOptions, Pick<LoraAwareOptions, 'maxLoras' | 'loraSlack'> {
  oracle?: OracleSource;
}

/** The tuning knobs a deployment sets (`model-gateway serve` flags): ageing horizon and cache-aware balance bound. */
export type DpPolicyTuning = Pick<CacheAwareOptions, 'loadHorizonMs' | 'balanceAbsThreshold' | 'balanceRelThreshold'>;

/** A wrapping counter giving `counter mod count` and advancing by one per call (exact integers forever). */
function rotation(): (count: number) => number {
  let counter = 0;
  return (count: number): number => {
    const start = counter % count;
    counter = counter >= Number.MAX_SAFE_INTEGER ? 0 : counter + 1;
    return start;
  };
}

function requireRanks(ranks: readonly RankView[]): void {
  if (ranks.length === 0) throw new RangeError('cannot select a DP rank: no engines connected');
}

/**
 * `round_robin`: ignores load and in-flight counts; returns position `counter mod count`, the counter advancing on
 * every call (starts at 0). Throws RangeError on an empty list.
 */
export function createRoundRobinPolicy(): DpPolicy {
  const next = rotation();
  return {
    name: 'round_robin',
    releaseClamp: true,
    select(ranks: readonly RankView[]): number {
      requireRanks(ranks);
      return next(ranks.length);
    },
  };
}

/**
 * The `inflight` score of one rank: its own in-flight count (requests), 0 for an engine without an index. Reported
 * load is ignored: this is the balancer before load snapshots (issue #5 part 1). Pure.
 */
export function inFlightScore(view: RankView): number {
  return view.engineIndex === null ? 0 : view.inFlight;
}

/**
 * `inflight`: lowest own in-flight count, ties to the earliest rank of a scan from a rotating start (the same
 * rotation as section 9.2 step 3). Throws RangeError on an empty list.
 */
export function createInFlightPolicy(): DpPolicy {
  const next = rotation();
  return {
    name: 'inflight',
    releaseClamp: true,
    select(ranks: readonly RankView[]): number {
      requireRanks(ranks);
      return lowestScorePosition(ranks, next(ranks.length), inFlightScore);
    },
  };
}

/**
 * `load_no_clamp`: exactly the `load` policy (section 9.2) with `releaseClamp: false`, so a rank's stale terminal
 * report stays stored after its in-flight set empties (the failure of dp-routing.md section 10.3).
 */
export function createLoadNoClampPolicy(opts: LoadPolicyOptions = {}): DpPolicy {
  const inner = createLoadPolicy(opts);
  return {
    name: 'load_no_clamp',
    releaseClamp: false,
    select: (ranks: readonly RankView[], request: GenerateRequest): number => inner.select(ranks, request),
  };
}

/**
 * `oracle` (benchmark only): the rank with the least true outstanding work in tokens, read from `source` at
 * selection time; ties to the earliest rank of a scan from a rotating start. An engine without an index, or whose
 * value is non-finite or negative, scores +Infinity. Throws RangeError on an empty list.
 */
export function createOraclePolicy(source: OracleSource): DpPolicy {
  const next = rotation();
  const score = (view: RankView): number => {
    if (view.engineIndex === null) return Number.POSITIVE_INFINITY;
    const v = source.outstandingTokens(view.engineIndex);
    return Number.isFinite(v) && v >= 0 ? v : Number.POSITIVE_INFINITY;
  };
  return {
    name: 'oracle',
    releaseClamp: true,
    select(ranks: readonly RankView[]): number {
      requireRanks(ranks);
      return lowestScorePosition(ranks, next(ranks.length), score);
    },
  };
}

/** True when `name` is one of `DP_POLICY_NAMES`. */
export function isDpPolicyName(name: string): name is DpPolicyName {
  return (DP_POLICY_NAMES as readonly string[]).includes(name);
}

/**
 * Build a fresh policy by name (each call returns an independent policy with its own counter and, for
 * `cache_aware`, its own index, so give every EngineClient its own). Throws RangeError for an unknown name (listing
 * the valid ones), for `oracle` without `opts.oracle`, and for a bad option value.
 */
export function createDpPolicy(name: string, opts: DpPolicyOptions = {}): DpPolicy {
  if (!isDpPolicyName(name)) {
    throw new RangeError(`unknown DP policy ${JSON.stringify(name)}; valid policies: ${DP_POLICY_NAMES.join(', ')}`);
  }
  switch (name) {
    case 'round_robin':
      return createRoundRobinPolicy();
    case 'inflight':
      return createInFlightPolicy();
    case 'load':
      return createLoadPolicy(opts);
    case 'load_no_clamp':
      return createLoadNoClampPolicy(opts);
    case 'cache_aware':
      return createCacheAwarePolicy(opts);
    case 'lora_aware':
      return createLoraAwarePolicy(opts);
    case 'oracle':
      if (!opts.oracle) {
        throw new RangeError("the oracle DP policy needs an OracleSource (benchmark only: the simulator's true state)");
      }
      return createOraclePolicy(opts.oracle);
  }
}
