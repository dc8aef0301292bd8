/**
 * vLLM `SchedulerStats` (engine-wire.md 5.10; vLLM `v1/metrics/stats.py`, SMG `protocol/vllm/*.rs`): a named map in
 * `EngineCoreOutputs` element 2, sent per scheduler step (also in steps without request outputs). SMG requires seven
 * keys; a map missing one fails the decode of the whole message, and so does this decoder. Optional keys default;
 * unknown keys are skipped. The nested stats maps default their own missing keys (tolerant; not stated upstream).
 *
 * Load mapping (dp-routing.md 11): running = `num_running_reqs`, waiting = `num_waiting_reqs`, KV usage =
 * `kv_cache_usage` (ratio, 1.0 = 100 %); `num_skipped_waiting_reqs` is not used.
 */
import type { EngineLoad, LoraAdapterCounts } from '../types.js';
import { anyValue, bool, float, int, list, namedMap, strMap } from '../../wire/codec.js';
import type { Codec } from '../../wire/codec.js';
import { WireDecodeError } from '../../wire/errors.js';
import type { WireInt } from '../../wire/reader.js';

/** `prefix_cache_stats`: counters since the previous step. */
export interface PrefixCacheStats {
  reset: boolean;
  requests: WireInt;
  queries: WireInt;
  hits: WireInt;
  preempted_requests: WireInt;
  preempted_queries: WireInt;
  preempted_hits: WireInt;
}

/** `prefix_cache_stats` codec (every key defaults: false / 0). */
export const prefixCacheStatsCodec = namedMap<PrefixCacheStats>({
  name: 'PrefixCacheStats',
  fields: [
    { name: 'reset', codec: bool, dflt: () => false },
    { name: 'requests', codec: int, dflt: () => 0 },
    { name: 'queries', codec: int, dflt: () => 0 },
    { name: 'hits', codec: int, dflt: () => 0 },
    { name: 'preempted_requests', codec: int, dflt: () => 0 },
    { name: 'preempted_queries', codec: int, dflt: () => 0 },
    { name: 'preempted_hits', codec: int, dflt: () => 0 },
  ],
});

/** One `kv_cache_eviction_events` entry (seconds, float). */
export interface KvCacheEvictionEvent {
  lifetime_seconds: number;
  idle_seconds: number;
  reuse_gaps_seconds: number[];
}

/** Eviction-event codec (every key defaults: 0 / []). */
export const kvCacheEvictionEventCodec = namedMap<KvCacheEvictionEvent>({
  name: 'KVCacheEvictionEvent',
  fields: [
    { name: 'lifetime_seconds', codec: float, dflt: () => 0.0 },
    { name: 'idle_seconds', codec: float, dflt: () => 0.0 },
    { name: 'reuse_gaps_seconds', codec: list(float), dflt: () => [] },
  ],
});

/** `SchedulerStats`, wire key names (engine-wire.md 5.10). The first seven are required. */
export interface SchedulerStats {
  num_running_reqs: WireInt;
  num_waiting_reqs: WireInt;
  step_counter: WireInt;
  current_wave: WireInt;
  /** Ratio 0..1 (1.0 = 100 %). */
  kv_cache_usage: number;
  prefix_cache_stats: PrefixCacheStats;
  kv_cache_eviction_events: KvCacheEvictionEvent[];
  num_skipped_waiting_reqs: WireInt;
  connector_prefix_cache_stats: unknown;
  spec_decoding_stats: unknown;
  kv_connector_stats: unknown;
  cudagraph_stats: unknown;
  perf_stats: unknown;
  /** LoRA adapter name → requests waiting / running with it (vLLM `SchedulerStats`; {} without LoRA). */
  waiting_lora_adapters: Record<string, WireInt>;
  running_lora_adapters: Record<string, WireInt>;
}

/**
 * `SchedulerStats` codec. Decode throws WireDecodeError "missing required key 'x'" when one of the seven required
 * keys is absent, and names the field on a type mismatch. Encode writes every key (optional ones as nil when null).
 */
export const schedulerStatsCodec: Codec<SchedulerStats> = namedMap<SchedulerStats>({
  name: 'SchedulerStats',
  fields: [
    { name: 'num_running_reqs', codec: int },
    { name: 'num_waiting_reqs', codec: int },
    { name: 'step_counter', codec: int },
    { name: 'current_wave', codec: int },
    { name: 'kv_cache_usage', codec: float },
    { name: 'prefix_cache_stats', codec: prefixCacheStatsCodec },
    { name: 'kv_cache_eviction_events', codec: list(kvCacheEvictionEventCodec) },
    { name: 'num_skipped_waiting_reqs', codec: int, dflt: () => 0 },
    { name: 'connector_prefix_cache_stats', codec: anyValue, dflt: () => null },
    { name: 'spec_decoding_stats', codec: anyValue, dflt: () => null },
    { name: 'kv_connector_stats', codec: anyValue, dflt: () => null },
    { name: 'cudagraph_stats', codec: anyValue, dflt: () => null },
    { name: 'perf_stats', codec: anyValue, dflt: () => null },
    { name: 'waiting_lora_adapters', codec: strMap(int), dflt: () => ({}) },
    { name: 'running_lora_adapters', codec: strMap(int), dflt: () => ({}) },
  ],
});

/** A `SchedulerStats` for the given load; every other counter 0, prefix stats zeroed, no events. */
export function schedulerStatsFor(load: {
  numRunning: WireInt;
  numWaiting: WireInt;
  kvCacheUsage: number;
}): SchedulerStats {
  return {
    num_running_reqs: load.numRunning,
    num_waiting_reqs: load.numWaiting,
    step_counter: 0,
    current_wave: 0,
    kv_cache_usage: load.kvCacheUsage,
    prefix_cache_stats: {
      reset: false,
      requests: 0,
      queries: 0,
      hits: 0,
      preempted_requests: 0,
      preempted_queries: 0,
      preempted_hits: 0,
    },
    kv_cache_eviction_events: [],
    num_skipped_waiting_reqs: 0,
    connector_prefix_cache_stats: null,
    spec_decoding_stats: null,
    kv_connector_stats: null,
    cudagraph_stats: null,
    perf_stats: null,
    waiting_lora_adapters: {},
    running_lora_adapters: {},
  };
}

/**
 * The adapter counts of a stats map (`running_lora_adapters`, `waiting_lora_adapters`), or null when both are empty.
 * Throws WireDecodeError (under `path`) for a negative or beyond-±(2^53−1) count.
 */
export function loraAdaptersOf(s: SchedulerStats, path = 'SchedulerStats'): LoraAdapterCounts | null {
  const counts = (key: 'running_lora_adapters' | 'waiting_lora_adapters'): Record<string, number> => {
    // No prototype: an adapter may be named `constructor` or `__proto__`.
    const out = Object.create(null) as Record<string, number>;
    for (const [name, v] of Object.entries(s[key] ?? {})) {
      if (typeof v === 'bigint' || v < 0) throw new WireDecodeError(`${path}.${key}.${name}`, `bad count ${v}`);
      out[name] = v;
    }
    return out;
  };
  const running = counts('running_lora_adapters');
  const waiting = counts('waiting_lora_adapters');
  if (Object.keys(running).length === 0 && Object.keys(waiting).length === 0) return null;
  return { running, waiting };
}

/**
 * The EngineLoad a stats map yields (engine-wire.md 5.10): `numRunning` = `num_running_reqs`, `numWaiting` =
 * `num_waiting_reqs`, `kvCacheUsage` = `kv_cache_usage` (as sent; not clamped). Throws WireDecodeError (path under
 * `path`) when a count is negative or beyond ±(2^53−1).
 */
export function loadFromSchedulerStats(s: SchedulerStats, path = 'SchedulerStats'): EngineLoad {
  const count = (key: 'num_running_reqs' | 'num_waiting_reqs'): number => {
    const v = s[key];
    if (typeof v === 'bigint') throw new WireDecodeError(`${path}.${key}`, `integer ${v} is beyond ±(2^53−1)`);
    if (v < 0) throw new WireDecodeError(`${path}.${key}`, `must be ≥ 0, got ${v}`);
    return v;
  };
  return {
    numRunning: count('num_running_reqs'),
    numWaiting: count('num_waiting_reqs'),
    kvCacheUsage: s.kv_cache_usage,
  };
}
