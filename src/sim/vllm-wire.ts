/**
 * The vLLM EngineCore flavour of the simulator's wire (engine-wire.md section 5):
 *
 * - ADD = `EngineCoreRequest` (5.2, 5.3), mapped by `vllm-request.ts`. A request EngineCore cannot serve is answered
 *   at once (also on a parked rank) with one terminal output, `finish_reason` 3 (error), like vLLM's input thread
 *   answers a request whose preprocessing failed; an undecodable ADD is dropped by the engine with a log line.
 * - ABORT = `list[str]` (5.4). No per-request output answers it (the gateway releases the request itself when it
 *   sends the abort), but, as vLLM's scheduler does (`finish_requests` → `finished_req_ids`), the dropped ids are
 *   listed in `finished_requests` of the rank's next step, which runs even with nothing left to schedule.
 * - Every step sends one `EngineCoreOutputs` (5.8) with `engine_index`, the step's outputs (5.9: `new_token_ids`,
 *   `finish_reason` 0 stop / 1 length / 3 error, `stop_reason` = the matched stop token id, `prefill_stats` on the
 *   first output after a prefill, `new_logprobs` column 0 when asked), `finished_requests` (terminal outputs plus
 *   aborted ids; omitted when empty) and `scheduler_stats` (5.10) — also for steps without outputs (5.8: vLLM sends
 *   per-step stats even then). The stats are made after the step, as vLLM's `make_stats` runs at the end of
 *   `update_from_output`: running / waiting = the scheduler's queues, `kv_cache_usage` = active pages / total pages,
 *   `step_counter` and `current_wave` from the engine, `prefix_cache_stats` = the prefix-cache lookups since the
 *   rank's previous stats (requests, tokens queried, tokens hit).
 * - `prefill_stats` (5.9): `num_cached_tokens` (= `num_local_cached_tokens`) is the request's prefix-cache hit at first
 *   admission, `num_computed_tokens` the tokens that prefill computed (so the two add up to `num_prompt_tokens` for a
 *   first prefill; a recompute after preemption computes prompt + generated tokens minus its own hits).
 * - Waves (5.7, 5.8, 5.12): START_DP_WAVE `[wave, exclude]` decoding, and the two notice envelopes carrying only
 *   `wave_complete` or only `start_wave`.
 * - Engine-initiated ends other than stop/length (a request that outgrew the whole KV cache) are reported as 3
 *   (error): the sim never reports 2 (abort), which vLLM uses for client aborts, and those are silent.
 *
 * Sim choice: `finished_requests` is sent by every rank. Upstream vLLM fills it only when its
 * `data_parallel_size > 1` (the scheduler's `include_finished_set`), so a dense vLLM rank never sends it; a gateway
 * must not depend on it (the terminal outputs suffice), and sending it here exercises the gateway's handling of it.
 *
 * Outputs are in the `EngineCoreOutput` layout `SimWireContext.outputLayout` names (docs/wire/vllm-output.md): 13
 * fields by default, as vLLM 9aaf83ef / 52a31cce send them (`prefill_stats` at 10, five keys), or 16 (SMG's decoder:
 * `prefill_stats` at 11, six keys). Envelopes and outputs are encoded in the short form (trailing default fields left
 * out); vLLM's real encoder writes every element (msgspec ignores `omit_defaults` for `array_like` structs, see the
 * vectors in test/vectors/vllm), and the gateway reads both.
 */
import {
  decodeAbortPayload,
  decodeEngineCoreRequest,
  decodeStartDpWave,
  defaultEngineCoreOutput,
  defaultEngineCoreOutputs,
  encodeEngineCoreOutputsFrames,
  schedulerStatsFor,
} from '../protocols/vllm/index.js';
import type {
  EngineCoreOutput,
  EngineCoreOutputLayout,
  EngineCoreOutputs,
  SchedulerStats,
} from '../protocols/vllm/index.js';
import type { WireInt } from '../wire/reader.js';
import { anyValue, decodeMessage } from '../wire/codec.js';
import { RequestType } from '../protocols/types.js';
import type { SimRow } from './scheduler.js';
import { toVllmSimRequest } from './vllm-request.js';
import { float32NdArray } from '../protocols/vllm/pooling.js';
import { directlyEncodable, encodeVllmStepDirect, vllmFinishReasonOf } from './vllm-output.js';
import { WireEncodeError } from '../wire/errors.js';
import type { SimStep, SimUtilityWire, SimWaveWire, SimWire, SimWireContext } from './wire.js';
import { toUtilityCall, utilityOutputValue } from '../protocols/vllm/utility.js';

export { vllmFinishReasonOf } from './vllm-output.js';

/**
 * The logprob row of one sampled token with `k` ranked candidates (engine-wire.md 5.6: column 0 the sampled token
 * and its rank, columns 1..k the best candidates in rank order). Sim choice: candidates come from `pool` (picked by a
 * hash of the token, so repeatable); the sampled token is the best candidate, except for about one token in four
 * whose logprob leaves room for a better one, where it ranks second; the other candidates are less likely.
 */
export function candidateRow(
  tokenId: number,
  logprob: number,
  k: number,
  pool: readonly number[],
): { ids: number[]; logprobs: number[]; rank: number } {
  if (k <= 0) return { ids: [tokenId], logprobs: [logprob], rank: 1 };
  const others: number[] = [];
  let h = (Math.imul(tokenId + 1, 0x9e3779b1) >>> 0) % Math.max(1, pool.length);
  for (let tries = 0; others.length < k && tries < 2 * pool.length + k; tries++) {
    const id = pool[h % pool.length]!;
    if (id !== tokenId && !others.includes(id)) others.push(id);
    h += 7;
  }
  const base = Number.isFinite(logprob) ? logprob : -20;
  const second = base < -0.4 && tokenId % 4 === 0;
  const ranked: Array<{ id: number; lp: number }> = second
    ? [
        { id: others[0]!, lp: base + 0.3 },
        { id: tokenId, lp: logprob },
        ...others.slice(1).map((id, j) => ({ id, lp: base - 0.5 * (j + 1) })),
      ]
    : [{ id: tokenId, lp: logprob }, ...others.map((id, j) => ({ id, lp: base - 0.5 * (j + 1) }))];
  const top = ranked.filter((c) => c.id !== undefined).slice(0, k);
  return {
    ids: [tokenId, ...top.map((c) => c.id)],
    logprobs: [logprob, ...top.map((c) => c.lp)],
    rank: second ? 2 : 1,
  };
}

/**
 * One scheduler row as an `EngineCoreOutput` (engine-wire.md 5.9) with the fields of `layout` (default 13;
 * docs/wire/vllm-output.md); `topK` ranked candidates per token (5.6).
 */
export function toEngineCoreOutput(
  row: SimRow,
  topK = 0,
  pool: readonly number[] = [],
  layout: EngineCoreOutputLayout = 13,
): EngineCoreOutput {
  const out = defaultEngineCoreOutput(row.rid, [...row.outputIds], layout);
  out.finish_reason = vllmFinishReasonOf(row.finishedReason);
  if (row.finishedReason === 'stop') out.stop_reason = row.stopReason;
  if (row.logprobVals.length > 0) {
    const rows = row.logprobIdx.map((id, i) => candidateRow(id, row.logprobVals[i]!, pool.length > 0 ? topK : 0, pool));
    out.new_logprobs = {
      token_ids: rows.map((r) => r.ids),
      logprobs: rows.map((r) => r.logprobs),
      ranks: rows.map((r) => r.rank),
      cu_num_generated_tokens: null,
    };
  }
  if (row.pooled !== undefined) out.pooling_output = float32NdArray(row.pooled);
  if (row.prefillTokens !== null) {
    out.prefill_stats = {
      num_prompt_tokens: row.promptTokens,
      num_computed_tokens: row.prefillTokens,
      num_cached_tokens: row.cachedTokens,
      num_local_cached_tokens: row.cachedTokens,
      num_external_cached_tokens: 0,
    };
    // The 16-field layout's PrefillStats has one more key (vLLM 9aaf83ef / 52a31cce send the five above).
    if (layout === 16) out.prefill_stats.num_cache_creation_tokens = 0;
  }
  return out;
}

/** Cumulative prefix-cache lookups of a rank (`SchedulerState` counters): admissions, tokens looked up, tokens hit. */
export interface PrefixLookupTotals {
  requests: number;
  queries: number;
  hits: number;
}

/**
 * The step's `SchedulerStats` (engine-wire.md 5.10), made after the step. `prefix_cache_stats` counts the prefix-cache
 * lookups since `previous` (the totals at the rank's previous stats; all zeros for the first): requests admitted,
 * tokens looked up (`queries`, tokens as vLLM counts them) and tokens hit.
 */
export function schedulerStatsOf(
  step: SimStep,
  previous: PrefixLookupTotals = { requests: 0, queries: 0, hits: 0 },
): SchedulerStats {
  const stats = schedulerStatsFor({
    numRunning: step.state.running,
    numWaiting: step.state.waiting,
    kvCacheUsage: step.kvTotalPages > 0 ? step.state.activePages / step.kvTotalPages : 0,
  });
  stats.step_counter = step.stepCounter;
  stats.current_wave = step.currentWave;
  const totals = lookupTotalsOf(step);
  stats.prefix_cache_stats.requests = totals.requests - previous.requests;
  stats.prefix_cache_stats.queries = totals.queries - previous.queries;
  stats.prefix_cache_stats.hits = totals.hits - previous.hits;
  stats.running_lora_adapters = step.state.loraRunning;
  stats.waiting_lora_adapters = step.state.loraWaiting;
  return stats;
}

/** The cumulative lookup totals a step's scheduler state carries. */
export function lookupTotalsOf(step: SimStep): PrefixLookupTotals {
  return { requests: step.state.cacheRequests, queries: step.state.cacheQueryTokens, hits: step.state.cacheHitTokens };
}

/** Seconds (float) for `timestamp`. */
const nowSeconds = (): number => Date.now() / 1000;

function envelope(engineIndex: number): EngineCoreOutputs {
  const o = defaultEngineCoreOutputs();
  o.engine_index = engineIndex;
  o.timestamp = nowSeconds();
  return o;
}

/** A wave number from the wire as a safe integer; RangeError beyond 2^53 − 1. */
function safeWave(v: WireInt, what: string): number {
  if (typeof v === 'bigint') {
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new RangeError(`StartDpWave.${what}: ${v} is beyond 2^53 − 1`);
    return Number(v);
  }
  return v;
}

const vllmWaves: SimWaveWire = {
  decodeStartWave(payload) {
    const d = decodeStartDpWave(payload);
    return {
      wave: safeWave(d.wave, 'wave'),
      excludeEngineIndex: d.excludeEngineIndex === null ? null : safeWave(d.excludeEngineIndex, 'exclude_engine_index'),
    };
  },
  encodeWaveComplete(engineIndex, wave) {
    const o = envelope(engineIndex);
    o.wave_complete = wave;
    return encodeEngineCoreOutputsFrames(o);
  },
  encodeStartWave(engineIndex, wave) {
    const o = envelope(engineIndex);
    o.start_wave = wave;
    return encodeEngineCoreOutputsFrames(o);
  },
};

/** vLLM's utility calls: `[client_index, call_id, method, args]` in, an envelope with `utility_output` out. */
const vllmUtilityWire: SimUtilityWire = {
  decodeCall: (payload) => toUtilityCall(decodeMessage(anyValue, payload, 'UtilityCall')),
  encodeReply(engineIndex, callId, outcome) {
    const o = envelope(engineIndex);
    o.utility_output = utilityOutputValue(callId, outcome);
    return encodeEngineCoreOutputsFrames(o);
  },
};

/** Whether a step carries a pooled vector (its tensors then go to aux frames as vLLM's encoder sends them). */
function pooledRows(step: SimStep): boolean {
  for (const r of step.rows) if (r.pooled !== undefined) return true;
  return false;
}

/** The vLLM wire for one rank. Holds the ids aborted since the last step (reported in `finished_requests`). */
export function createVllmSimWire(ctx: SimWireContext): SimWire {
  const aborted = new Set<string>();
  /** Requested top-logprob count (`logprobs` = k > 0) of each request that asked for candidates. */
  const topK = new Map<string, number>();
  const pool = ctx.candidatePool ?? [];
  const layout = ctx.outputLayout ?? 13;
  let reported: PrefixLookupTotals = { requests: 0, queries: 0, hits: 0 };

  /** The step through the schema codec: outputs as `EngineCoreOutput` objects (logprob tensors included). */
  const encodeObjects = (
    step: SimStep,
    rowTopK: readonly number[],
    finished: string[] | null,
    stats: SchedulerStats,
    timestamp: number,
  ): Uint8Array[] => {
    const o = envelope(step.engineIndex);
    o.timestamp = timestamp;
    o.outputs = step.rows.map((r, i) => toEngineCoreOutput(r, rowTopK[i]!, pool, layout));
    o.finished_requests = finished;
    o.scheduler_stats = stats;
    // As vLLM's encoder: a tensor buffer of 256 bytes or more travels in an aux frame (a pooled vector does).
    return encodeEngineCoreOutputsFrames(o, { layout, ...(pooledRows(step) ? { auxThresholdBytes: 256 } : {}) });
  };

  const encode = (step: SimStep, includeAborted: boolean): Uint8Array[] => {
    const direct = directlyEncodable(step.rows);
    // Read before the finished rows' entries go: a step with logprobs writes each row's candidates.
    const rowTopK = direct ? [] : step.rows.map((r) => topK.get(r.rid) ?? 0);
    let finished: Set<string> | null = null;
    for (const r of step.rows) {
      if (r.finishedReason === '') continue;
      topK.delete(r.rid);
      (finished ??= new Set<string>()).add(r.rid);
    }
    if (includeAborted) {
      for (const id of aborted) (finished ??= new Set<string>()).add(id);
      aborted.clear();
    }
    const finishedList = finished !== null ? [...finished] : null;
    const stats = schedulerStatsOf(step, reported);
    reported = lookupTotalsOf(step);
    const timestamp = nowSeconds();
    if (direct) {
      try {
        return [
          encodeVllmStepDirect({
            engineIndex: step.engineIndex,
            rows: step.rows,
            finished: finishedList,
            stats,
            timestamp,
            layout,
          }),
        ];
      } catch (error) {
        // The schema codec names the field the wire cannot carry.
        if (!(error instanceof WireEncodeError)) throw error;
      }
    }
    return encodeObjects(step, direct ? step.rows.map(() => 0) : rowTopK, finishedList, stats, timestamp);
  };

  return {
    family: 'vllm',
    granularityKey: 'block_size',
    version: 'vllm-sim',
    defaultInstanceId: 'vllm-sim',
    reportsKvCacheSizeTokens: false,
    rejectAt: 'arrival',
    finishRules: 'vllm',
    waves: vllmWaves,
    extraRequestTypes: [RequestType.START_DP_WAVE, RequestType.UTILITY],
    utility: vllmUtilityWire,
    decodeAdd(payload) {
      const req = decodeEngineCoreRequest(payload);
      const k = req.sampling_params?.logprobs;
      if (typeof k === 'number' && k > 0) topK.set(req.request_id, k);
      return toVllmSimRequest(req, { vocabSize: ctx.vocabSize, tokens: ctx.tokens });
    },
    decodeAbort: decodeAbortPayload,
    noteAborted(requestIds) {
      for (const id of requestIds) {
        aborted.add(id);
        topK.delete(id);
      }
    },
    hasPendingReport: () => aborted.size > 0,
    encodeRejections: (step) => (step.rows.length === 0 ? null : encode(step, false)),
    encodeStep: (step) => encode(step, true),
  };
}
