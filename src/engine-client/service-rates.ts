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
 */
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

interface Pending {
  rank: number;
  dispatchedMs: number;
  promptTokens: number;
  lastRowMs: number | null;
  tokens: number;
}

interface RankSums {
  gapMs: number;
  gapTokens: number;
  outputs: number;
  outputTokens: number;
}

/** The tracker of one engine client (see the module comment). */
export class ServiceRates {
  private readonly pending = new Map<string, Pending>();
  private readonly ranks = new Map<number, RankSums>();
  /** Pooled prefill sums: Σ (TTFT − 1.5 ITL) ms and Σ uncached × ITL (ms·tokens / token). */
  private prefillMs = 0;
  private prefillItlTokens = 0;

  /** A request was sent to `rank` at `nowMs` (ms) with a prompt of `promptTokens` tokens. */
  dispatched(rank: number, requestId: string, promptTokens: number, nowMs: number): void {
    this.pending.set(requestId, { rank, dispatchedMs: nowMs, promptTokens, lastRowMs: null, tokens: 0 });
  }

  /**
   * One batch's rows from `rank`, received at `nowMs`: the first row of a request is a prefill sample, later rows
   * ITL samples, a terminal row an output-length sample (and the end of the request's entry). Rows of requests
   * this tracker did not see dispatched to `rank` are ignored.
   */
  observe(rank: number, outputs: readonly EngineOutputRow[], nowMs: number): void {
    if (this.pending.size === 0) return;
    let sums: RankSums | null = null; // one lookup per batch, not per row (issue 9)
    for (const out of outputs) {
      const p = this.pending.get(out.requestId);
      if (p === undefined || p.rank !== rank) continue;
      const tokens = out.newTokenIds.length;
      sums ??= this.sumsOf(rank);
      if (p.lastRowMs === null) {
        if (tokens > 0) {
          this.prefillSample(rank, p, out, nowMs);
          p.lastRowMs = nowMs;
        }
      } else if (tokens > 0) {
        sums.gapMs = sums.gapMs * ITL_DECAY + Math.max(0, nowMs - p.lastRowMs);
        sums.gapTokens = sums.gapTokens * ITL_DECAY + tokens;
        p.lastRowMs = nowMs;
      }
      p.tokens += tokens;
      if (out.finishReason !== null) {
        this.pending.delete(out.requestId);
        sums.outputs = sums.outputs * OUTPUT_DECAY + 1;
        sums.outputTokens = sums.outputTokens * OUTPUT_DECAY + p.tokens;
      }
    }
  }

  /** A request left this client's in-flight sets (any retirement path): forget it. */
  end(requestId: string): void {
    this.pending.delete(requestId);
  }

  /** Every in-flight request is gone (fail_all, close). Rates are kept. */
  clearPending(): void {
    this.pending.clear();
  }

  /**
   * The rank's engine state is gone (it died, or rejoined as a fresh process): drop its rates and requests. The pooled
   * prefill ratio outlives one rank (the others' processes measured it too) but not the last measured one: once no
   * rank has rates left (a whole group restarted), it is dropped as well.
   */
  forget(rank: number): void {
    this.ranks.delete(rank);
    for (const [id, p] of this.pending) if (p.rank === rank) this.pending.delete(id);
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

  private prefillSample(rank: number, p: Pending, out: EngineOutputRow, nowMs: number): void {
    const s = this.ranks.get(rank);
    if (s === undefined || s.gapTokens <= 0) return; // no ITL yet: nothing to measure the prefill against
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
