/**
 * Per-rank service rates as this engine client observes them (issue 12 follow-up; dp-routing.md 14.11): the only
 * speed signal the ZMQ path offers is the gateway's own accounting of the streams it routes. The `cache_aware`
 * policy needs it to weigh a re-prefill against the time a request would spend on a slower or busier rank
 * (cache-aware.ts `expectedCostMs`); `load` never reads it.
 *
 * Three estimates, each a ratio of exponentially decayed sums (so a burst of rows handled in one event-loop turn, or
 * a stream cadence of several tokens per row, averages out instead of skewing a per-sample mean):
 * - **ITL per rank** (`itlMs`, ms per output token): the gap between a request's consecutive rows over the tokens
 *   the later row carries, over every non-first row from the rank. It includes what slows a rank down: a noisy
 *   neighbour, a big batch, other requests' prefills.
 * - **Prefill cost** (`prefillMsPerToken`, ms per uncached prompt token, per rank): pooled over the group as
 *   `ρ` = prefill time per uncached token in units of the rank's own ITL, from each request's first row: its TTFT
 *   (dispatch to first row, on this client's clock) minus 1.5 ITL (half a step of waiting for the running step on
 *   average, then the step that carries its prefill) over its uncached tokens (`promptTokens − cachedTokens` the
 *   engine reported). Pooling lets a rank that serves mostly cache hits still get a prefill estimate; scaling by the
 *   rank's ITL assumes a slowed rank prefills slower by the same factor (a noisy neighbour, a smaller GPU).
 * - **Output length per rank** (`outputTokens`): tokens a request produced until its terminal row.
 * An estimate without samples is null; the scorer then falls back (cache-aware.ts). Engine-reported times never
 * enter: the wire carries none (engine-wire.md 4.8, 5.9).
 *
 * Memory: one entry per in-flight request (dropped at its terminal row or when the client releases it) and three
 * numbers per rank. Pure data structure: no I/O; the caller passes its monotonic clock (ms).
 *
 * Per-row cost (issue 9): `dispatched` returns the request's `ServiceSample`, which the engine client keeps on the
 * request's registry entry, so a batch's rows reach their sample through the entry the batch router already looked
 * up (`observeRow`) instead of one more map lookup of the request id per row.
 */
import { IdTable } from '../collections/id-table.js';
import type { EngineOutputRow } from '../protocols/types.js';

/** Decay of the ITL sums per row sample: about the last 128 rows of the rank count. */
const ITL_DECAY = 1 - 1 / 128;
/** Decay of the pooled prefill sums per first row: about the last 64 prefills of the group count. */
const PREFILL_DECAY = 1 - 1 / 64;
/** Decay of the output-length sums per finished request: about the last 32 requests of the rank count. */
const OUTPUT_DECAY = 1 - 1 / 32;
/** First rows with fewer uncached tokens than this carry mostly timing noise and are not prefill samples. */
export const MIN_PREFILL_SAMPLE_TOKENS = 64;

/** What the client has measured about one rank (`RankView.service`). Null fields: no sample yet. */
export interface RankService {
  /** ms per output token on the rank, recently. */
  itlMs: number | null;
  /** ms per uncached prompt token on the rank (pooled `ρ` × its ITL). */
  prefillMsPerToken: number | null;
  /** Output tokens of a request finished on the rank, recently (mean). */
  outputTokens: number | null;
}

/**
 * One dispatched request's accounting (`ServiceRates.dispatched`): its rank, dispatch time (ms), prompt length
 * (tokens), the time of its last row with tokens (ms, null before the first) and the tokens it produced so far.
 * `live` turns false once the tracker has forgotten it (terminal row, `end`, `forget`, `clearPending`, a new
 * dispatch of the same id): rows reaching a sample that is not live are ignored. Opaque to callers: they keep it and
 * hand it back to `observeRow`.
 */
export interface ServiceSample {
  readonly requestId: string;
  readonly rank: number;
  readonly dispatchedMs: number;
  readonly promptTokens: number;
  lastRowMs: number | null;
  tokens: number;
  live: boolean;
  /** The policy's predicted prefix-cache hit on the rank (tokens), until the engine reports its own; else null. */
  predictedCachedTokens: number | null;
  /** The rank's sums, looked up on the sample's first row. */
  sums: RankSums | null;
}

interface RankSums {
  gapMs: number;
  gapTokens: number;
  outputs: number;
  outputTokens: number;
}

/**
 * How well a policy's cache predictions held (issue 29 part 3), over the requests it placed whose engine reported
 * `cached_tokens`: Σ predicted tokens, Σ min(predicted, reported) (`confirmedTokens`), Σ reported tokens. Routing
 * precision is confirmed / predicted (1 when nothing was predicted); confirmed / reported is the share of the real
 * hits the policy foresaw. Counters, never reset.
 */
export interface RoutingPrecision {
  requests: number;
  predictedTokens: number;
  confirmedTokens: number;
  reportedTokens: number;
}

/** Adds one request's prediction and the engine's report (tokens) to `p`. */
export function observePrecision(p: RoutingPrecision, predicted: number, reported: number): void {
  p.requests++;
  p.predictedTokens += predicted;
  p.reportedTokens += reported;
  p.confirmedTokens += Math.min(predicted, reported);
}

/** The tracker of one engine client (see the module comment). */
export class ServiceRates {
  /** Predicted against reported prefix-cache hits of the requests a policy placed (`RoutingPrecision`). */
  readonly precision: RoutingPrecision = { requests: 0, predictedTokens: 0, confirmedTokens: 0, reportedTokens: 0 };
  /** An `IdTable`, not a `Map`: one sample per request comes and goes (collections/id-table.ts says why). */
  private readonly pending = new IdTable<ServiceSample>();
  private readonly ranks = new Map<number, RankSums>();
  /** Pooled prefill sums: Σ (TTFT − 1.5 ITL) ms and Σ uncached × ITL (ms·tokens / token). */
  private prefillMs = 0;
  private prefillItlTokens = 0;

  /**
   * A request was sent to `rank` at `nowMs` (ms) with a prompt of `promptTokens` tokens. Returns its sample, for
   * `observeRow`; a sample of the same id still tracked (an ADD placed again after it reached no engine) is dropped.
   */
  dispatched(rank: number, requestId: string, promptTokens: number, nowMs: number): ServiceSample {
    const old = this.pending.get(requestId);
    if (old !== undefined) old.live = false;
    const sample: ServiceSample = {
      requestId,
      rank,
      dispatchedMs: nowMs,
      promptTokens,
      lastRowMs: null,
      tokens: 0,
      live: true,
      predictedCachedTokens: null,
      sums: null,
    };
    this.pending.set(requestId, sample);
    return sample;
  }

  /**
   * One row of the request `sample` stands for, in a batch from `rank` received at `nowMs` (ms): the first row
   * with tokens is a prefill sample, later rows ITL samples, a terminal row an output-length sample (and the end of
   * the sample). Ignored when the sample is no longer tracked or was dispatched to another rank.
   */
  observeRow(rank: number, sample: ServiceSample, out: EngineOutputRow, nowMs: number): void {
    if (!sample.live || sample.rank !== rank) return;
    if (sample.predictedCachedTokens !== null && out.cachedTokens !== null) {
      observePrecision(this.precision, sample.predictedCachedTokens, out.cachedTokens);
      sample.predictedCachedTokens = null;
    }
    const tokens = out.newTokenIds.length;
    const sums = (sample.sums ??= this.sumsOf(rank));
    if (sample.lastRowMs === null) {
      if (tokens > 0) {
        this.prefillSample(sums, sample, out, nowMs);
        sample.lastRowMs = nowMs;
      }
    } else if (tokens > 0) {
      sums.gapMs = sums.gapMs * ITL_DECAY + Math.max(0, nowMs - sample.lastRowMs);
      sums.gapTokens = sums.gapTokens * ITL_DECAY + tokens;
      sample.lastRowMs = nowMs;
    }
    sample.tokens += tokens;
    if (out.finishReason !== null) {
      this.drop(sample);
      sums.outputs = sums.outputs * OUTPUT_DECAY + 1;
      sums.outputTokens = sums.outputTokens * OUTPUT_DECAY + sample.tokens;
    }
  }

  /**
   * `observeRow` for every row of one batch from `rank`, each request's sample looked up by its id (for a caller
   * that does not keep the samples). Rows of requests this tracker did not see dispatched to `rank` are ignored.
   */
  observe(rank: number, outputs: readonly EngineOutputRow[], nowMs: number): void {
    if (this.pending.size === 0) return;
    for (const out of outputs) {
      const sample = this.pending.get(out.requestId);
      if (sample !== undefined) this.observeRow(rank, sample, out, nowMs);
    }
  }

  /** A request left this client's in-flight sets (any retirement path): forget it. */
  end(requestId: string): void {
    const sample = this.pending.get(requestId);
    if (sample !== undefined) this.drop(sample);
  }

  /** Every in-flight request is gone (fail_all, close). Rates are kept. */
  clearPending(): void {
    for (const sample of this.pending.values()) sample.live = false;
    this.pending.clear();
  }

  /**
   * The rank's engine state is gone (it died, or rejoined as a fresh process): drop its rates and requests. The pooled
   * prefill ratio outlives one rank (the others' processes measured it too) but not the last measured one: once no
   * rank has rates left (a whole group restarted), it is dropped as well.
   */
  forget(rank: number): void {
    this.ranks.delete(rank);
    for (const sample of this.pending.values()) if (sample.rank === rank) this.drop(sample);
    if (this.ranks.size === 0) {
      this.prefillMs = 0;
      this.prefillItlTokens = 0;
    }
  }

  /** What is known about `rank` now. */
  view(rank: number): RankService {
    const s = this.ranks.get(rank);
    const itlMs = s !== undefined && s.gapTokens > 0 ? s.gapMs / s.gapTokens : null;
    const rho = this.prefillItlTokens > 0 ? this.prefillMs / this.prefillItlTokens : null;
    return {
      itlMs,
      prefillMsPerToken: itlMs !== null && rho !== null ? rho * itlMs : null,
      outputTokens: s !== undefined && s.outputs > 0 ? s.outputTokens / s.outputs : null,
    };
  }

  /** Requests tracked (in flight and not yet finished). */
  get trackedRequests(): number {
    return this.pending.size;
  }

  private drop(sample: ServiceSample): void {
    sample.live = false;
    if (this.pending.get(sample.requestId) === sample) this.pending.delete(sample.requestId);
  }

  private prefillSample(s: RankSums, p: ServiceSample, out: EngineOutputRow, nowMs: number): void {
    if (s.gapTokens <= 0) return; // no ITL yet: nothing to measure the prefill against
    const itl = s.gapMs / s.gapTokens;
    const prompt = out.promptTokens ?? p.promptTokens;
    const uncached = Math.max(0, prompt - (out.cachedTokens ?? 0));
    if (uncached < MIN_PREFILL_SAMPLE_TOKENS || !(itl > 0)) return;
    this.prefillMs = this.prefillMs * PREFILL_DECAY + Math.max(0, nowMs - p.dispatchedMs - 1.5 * itl);
    this.prefillItlTokens = this.prefillItlTokens * PREFILL_DECAY + uncached * itl;
  }

  private sumsOf(rank: number): RankSums {
    let s = this.ranks.get(rank);
    if (s === undefined) {
      s = { gapMs: 0, gapTokens: 0, outputs: 0, outputTokens: 0 };
      this.ranks.set(rank, s);
    }
    return s;
  }
}
