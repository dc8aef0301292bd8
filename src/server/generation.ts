/**
 * One choice's generation: consume the engine stream, detokenize incrementally, and turn the terminal output into a
 * finish or an error (gateway.md sections 5, 6, 11 and 13; dp-routing.md sections 4-6).
 *
 * Guarantees:
 * - every accepted request ends with exactly one terminal outcome: a `finish` event, an `ApiError`, or a
 *   `ClientDisconnectedError` — never a hang (a stream that ends without a terminal output is an error);
 * - the caller (generation-run.ts) cancels the stream of a choice that did not finish (a client disconnect, another
 *   choice's error, a matched stop string), which sends ABORT to the owning rank (dp-routing.md 5);
 * - a terminal `abort` is never a finish: the gateway only aborts requests whose client is gone, so an `abort` that
 *   reaches a reader was the engine's own (engine-wire.md 4.6: a validation abort) and becomes an error; `error` too;
 * - a stop token (a requested stop id or an EOS id) that ends the choice with `stop` is counted but its text is not
 *   emitted (gateway.md 6, as vLLM's detokenizer drops it);
 * - every text delta passes through the stop-string matcher (gateway.md 6): text that could still become a stop
 *   string is held back; a match ends the choice with `stop` at once and cancels the engine stream (ABORT, dp-routing.md
 *   5); the held-back text is released by the terminal event, through the same path as every other delta;
 * - stop strings do not apply before `minTokens` tokens were generated (vLLM's frontend rule, PR #22014; issue #14):
 *   the text of the first `minTokens` tokens cannot end a match, so a stop string wholly inside it is emitted as
 *   ordinary text, while one that ends in a later token's text still stops the choice (stop-matcher.ts). The split is
 *   per token, also inside one engine output, so it does not depend on how the engine chunked its tokens (TokenSpeed's
 *   stream interval, vLLM's per-step outputs, streamed or not). Stop token ids need nothing here: both engines mask
 *   them below `min_tokens` themselves (engine-wire.md 4.4 `min_new_tokens`, 5.3 `min_tokens`).
 */
import type { EngineOutput, TokenCandidate } from '../protocols/types.js';
import { StopStringMatcher, type StopMatchResult } from '../tokenizer/stop-matcher.js';
import { ApiError } from './errors.js';
import type { GatewayMetrics } from './metrics.js';
import type { RankStatsBook } from './rank-stats.js';

/** Thrown by `generate` when the client disconnected; the route just ends the response. */
export class ClientDisconnectedError extends Error {
  constructor() {
    super('client disconnected');
    this.name = 'ClientDisconnectedError';
  }
}

/**
 * Token accounting of a choice (OpenAI `usage`), in tokens. `prompt_tokens_details.cached_tokens`: prompt tokens the
 * engine served from its prefix cache (TokenSpeed `cached_tokens`, vLLM `prefill_stats.num_cached_tokens`;
 * engine-wire.md 4.8, 5.9), as OpenAI reports it.
 */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

/** Build a `usage` object (`cachedTokens` default 0). */
export function makeUsage(promptTokens: number, completionTokens: number, cachedTokens = 0): Usage {
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
    prompt_tokens_details: { cached_tokens: cachedTokens },
  };
}

/**
 * One generated token's id and log-probability (natural log, as the engine sent it: may be −∞ or NaN), and its
 * position's ranked candidates when the engine returned them (`EngineOutput.topLogprobs`; vLLM with k > 0).
 */
export interface TokenLogprob {
  id: number;
  logprob: number;
  top?: TokenCandidate[];
}

/**
 * What `generate` yields: newly stable text, then exactly one terminal `finish` (with any remaining text). With
 * logprobs requested, `logprobs` holds the tokens received since the previous event (in order; every received token
 * exactly once over the events, including tokens whose text is held back or dropped: a stop token, text after a
 * matched stop string); otherwise it is empty. `cachedTokens` of a finish: the prompt tokens the engine served from
 * its prefix cache (its last report; 0 when it never said).
 */
export type GenerationEvent =
  | { type: 'delta'; text: string; logprobs: TokenLogprob[]; tokenIds?: number[] }
  | {
      type: 'finish';
      /** With `tokenIds`: the ids received since the previous event (held-back text's ids come with the next one). */
      tokenIds?: number[];
      text: string;
      finishReason: 'stop' | 'length';
      /** The stop string or stop token id that ended a `stop` finish; null otherwise (vLLM `stop_reason`). */
      stopReason: number | string | null;
      usage: Usage;
      logprobs: TokenLogprob[];
      cachedTokens: number;
    };

/** The detokenizer operations a choice uses (both of ../tokenizer/detokenizer.ts `createDetokenizer` results satisfy it). */
export interface TextDetokenizer {
  push(ids: readonly number[]): string;
  finish(): string;
}

/** Where a choice's per-rank latency samples go (the app's `RankStatsBook`, for `/v1/gateway/ranks`). */
export interface RankLatencySink {
  book: RankStatsBook;
  worker: string;
  engineIndex: number;
}

/**
 * Records the latency of one choice: TTFT, ITL and end-to-end latency on the app's metrics (`metrics`, null for the
 * choices that do not feed the histograms: `n > 1` records choice 0 only), and TTFT / ITL / token counts of the rank
 * that serves it (`rank`, optional). Called once per token-bearing engine output, never per token. Times in ms from
 * `now()`.
 */
export class LatencyTracker {
  private lastTokenAt: number | null = null;
  /** Time to first token in ms, once the first token arrived (null before). */
  ttftMs: number | null = null;
  /** Tokens received so far. */
  tokensSeen = 0;
  constructor(
    private readonly metrics: GatewayMetrics | null,
    private readonly endpoint: string,
    private readonly startedAt: number,
    private readonly now: () => number,
    private readonly rank?: RankLatencySink,
  ) {}

  /** `count` tokens arrived now (ignored when 0). */
  tokens(count: number): void {
    if (count <= 0) return;
    const t = this.now();
    this.tokensSeen += count;
    if (this.lastTokenAt === null) {
      this.ttftMs = t - this.startedAt;
      this.metrics?.observeTtft(this.endpoint, this.ttftMs / 1000);
      this.rank?.book.recordSample(this.rank.worker, this.rank.engineIndex, t, count, this.ttftMs, true);
    } else {
      const perToken = (t - this.lastTokenAt) / count;
      this.metrics?.observeItl(this.endpoint, perToken / 1000, count);
      this.rank?.book.recordSample(this.rank.worker, this.rank.engineIndex, t, count, perToken, false);
    }
    this.lastTokenAt = t;
  }

  /** The request reached its terminal outcome now. */
  done(): void {
    this.metrics?.observeE2e(this.endpoint, (this.now() - this.startedAt) / 1000);
  }
}

/** Inputs of one choice's generation. */
export interface GenerationOptions {
  /** The engine request id (error messages). */
  requestId: string;
  detokenizer: TextDetokenizer;
  /** Token ids whose text is dropped when they end the choice with `stop` (stop_token_ids ∪ EOS ids). */
  stopTokenIds: ReadonlySet<number>;
  /** Prompt length in tokens (the gateway's own count). */
  promptTokens: number;
  latency?: LatencyTracker;
  /**
   * Stop strings matched on the detokenized text (gateway.md 6); a match finishes the choice with `stop` and the
   * caller cancels the engine stream (ABORT to the rank). Absent: no stop strings.
   */
  stopMatcher?: StopStringMatcher;
  /** Collect each token's logprob from the engine outputs (`EngineOutput.logprobs`; a missing value becomes NaN). */
  logprobs?: boolean;
  /** The request's `min_tokens` (tokens, default 0): stop strings cannot end inside the text of the first this many. */
  minTokens?: number;
  /** End-of-sequence ids: a finish on one of them has no `stopReason` (as vLLM reports it). Absent: none. */
  eosTokenIds?: ReadonlySet<number>;
  /** Stop strings sent to the engine as single token ids (gateway.md 6), by id: the `stopReason` of a finish on one. */
  convertedStops?: ReadonlyMap<number, string>;
  /** Put the token ids behind each event on it (vLLM `return_token_ids`). Absent: no ids. */
  tokenIds?: boolean;
}

/** The (shared, frozen) empty logprob list of events when logprobs were not requested. */
const NO_LOGPROBS = Object.freeze([]) as unknown as TokenLogprob[];

/**
 * One choice's generation as a synchronous state machine (issue 9: no promise per token): `take` each engine output
 * of the choice's stream in order; it returns the event the output produces (a `delta` with non-empty text, the
 * terminal `finish`, or null) and throws `ApiError` 500 for a terminal `error` or an unrequested `abort` (see the
 * module comment). After a `finish`, `finished` is true; when it came from a matched stop string on a non-terminal
 * output (`stoppedEarly`), the caller must cancel the engine stream (ABORT). `ended()` is the error of a stream that
 * ended without a terminal output (503). Pure apart from the latency tracker it feeds.
 */
export class ChoiceGeneration {
  private readonly matcher: StopStringMatcher;
  private readonly minTokens: number;
  // The options read per output, as own fields (one object fewer to load per token).
  private readonly detokenizer: TextDetokenizer;
  private readonly latency: LatencyTracker | undefined;
  private readonly withLogprobs: boolean;
  private received = 0;
  private pendingLogprobs: TokenLogprob[] = [];
  /** The choice produced its `finish` event (or failed): later outputs are ignored. */
  finished = false;
  /** The finish came from a stop string while the engine was still generating: its stream must be cancelled. */
  stoppedEarly = false;

  constructor(private readonly opts: GenerationOptions) {
    this.matcher = opts.stopMatcher ?? new StopStringMatcher([]);
    this.minTokens = opts.minTokens ?? 0;
    this.detokenizer = opts.detokenizer;
    this.latency = opts.latency;
    this.withLogprobs = opts.logprobs === true;
    this.pendingIds = opts.tokenIds === true ? [] : null;
    if (this.pendingIds !== null) this.take = this.takeWithIds;
  }

  /** With `tokenIds`: ids received since the last event (see `GenerationEvent`); null without. */
  private pendingIds: number[] | null;

  /**
   * Detokenize `ids`, the tokens after the first `before`, and feed their text to the matcher: tokens up to number
   * `minTokens` as unmatchable text, the rest as matchable. `final` adds the detokenizer's end flush, which belongs
   * to the last token decoded. `tokens`: how many of `ids` count, all of them unless a stop string matched, then up
   * to the one that completed it. A row may hold many tokens (TokenSpeed sends a non-streaming request's in rows of
   * up to 50), so with stop strings the matchable ones are fed one by one: the usage and logprobs then end where the
   * streamed response's do.
   */
  private feed(ids: readonly number[], before: number, final: boolean): StopMatchResult & { tokens: number } {
    const detokenizer = this.detokenizer;
    const matcher = this.matcher;
    const minTokens = this.minTokens;
    if (this.wholeRow(ids, before)) {
      // The common case (no stop strings, past min_tokens): the whole row at once, as the loop below would.
      return { emit: detokenizer.push(ids) + (final ? detokenizer.finish() : ''), matched: null, tokens: ids.length };
    }
    const locked = Math.max(0, Math.min(ids.length, minTokens - before));
    const lastMatchable = before + ids.length > minTokens;
    const lockedText = locked > 0 ? detokenizer.push(ids.slice(0, locked)) : '';
    const step = matcher.empty ? ids.length : 1;
    let emit = '';
    for (let at = locked; at < ids.length || at === locked; at += step) {
      const freeText = at < ids.length ? detokenizer.push(ids.slice(at, at + step)) : '';
      const last = at + step >= ids.length;
      const flush = final && last ? detokenizer.finish() : '';
      if (at === locked) {
        const unmatchable = lockedText + (lastMatchable ? '' : flush);
        if (unmatchable !== '') emit += matcher.push(unmatchable, { matchable: false }).emit;
        if (!lastMatchable) return { emit, matched: null, tokens: ids.length };
      }
      const r = matcher.push(freeText + flush);
      emit += r.emit;
      if (r.matched !== null) return { emit, matched: r.matched, tokens: Math.min(ids.length, at + step) };
      if (last) break;
    }
    return { emit, matched: null, tokens: ids.length };
  }

  /** No stop strings and past `minTokens`: `ids` (the tokens after the first `before`) are detokenized in one push. */
  private wholeRow(ids: readonly number[], before: number): boolean {
    return this.matcher.empty && before >= this.minTokens && ids.length > 0;
  }

  /** The pending logprobs, without those of the last `uncounted` tokens received (after a stop string's match). */
  private takeLogprobs(uncounted = 0): TokenLogprob[] {
    if (!this.withLogprobs) return NO_LOGPROBS;
    const pending = this.pendingLogprobs;
    this.pendingLogprobs = [];
    return uncounted > 0 ? pending.slice(0, Math.max(0, pending.length - uncounted)) : pending;
  }

  /**
   * `take` of a choice that returns token ids (`GenerationOptions.tokenIds`; installed in place of `take` by the
   * constructor, so the common path keeps its single call): the output's ids join the pending ones, and an event takes
   * them all.
   */
  private takeWithIds(out: EngineOutput): GenerationEvent | null {
    const pending = this.pendingIds!;
    if (!this.finished) for (const id of out.newTokenIds) pending.push(id);
    const ev = ChoiceGeneration.prototype.take.call(this, out);
    if (ev !== null) {
      ev.tokenIds = pending;
      this.pendingIds = [];
    }
    return ev;
  }

  /** One engine output of this choice (see the class docs). Returns null after the finish. */
  take(out: EngineOutput): GenerationEvent | null {
    if (this.finished) return null;
    const ids = out.newTokenIds;
    const before = this.received;
    this.received += ids.length;
    this.latency?.tokens(ids.length);
    if (this.withLogprobs) {
      for (let i = 0; i < ids.length; i++) {
        const top = out.topLogprobs?.[i];
        const logprob = out.logprobs[i] ?? NaN;
        this.pendingLogprobs.push(top === undefined ? { id: ids[i]!, logprob } : { id: ids[i]!, logprob, top });
      }
    }
    if (out.finishReason === null) {
      if (this.wholeRow(ids, before)) {
        // The common case: no per-token split, no result object (the per-token path).
        const text = this.detokenizer.push(ids);
        return text === '' ? null : { type: 'delta', text, logprobs: this.takeLogprobs() };
      }
      const r = this.feed(ids, before, false);
      if (r.matched !== null) {
        // A stop string matched: the engine does not know, so the caller abandons its stream (ABORT).
        // Tokens after the one that completed it are not counted (the engine's own count includes them).
        this.finished = true;
        this.stoppedEarly = true;
        const usage = makeUsage(this.opts.promptTokens, before + r.tokens, out.cachedTokens);
        const logprobs = this.takeLogprobs(this.received - before - r.tokens);
        return {
          type: 'finish',
          text: r.emit,
          finishReason: 'stop',
          stopReason: r.matched,
          usage,
          logprobs,
          cachedTokens: out.cachedTokens,
        };
      }
      return r.emit === '' ? null : { type: 'delta', text: r.emit, logprobs: this.takeLogprobs() };
    }
    this.finished = true; // the engine retired the request: nothing to abort any more
    const requestId = this.opts.requestId;
    if (out.finishReason === 'error') {
      throw new ApiError(500, `the engine finished request ${requestId} with an error`, { code: 'engine_error' });
    }
    if (out.finishReason === 'abort') {
      throw new ApiError(
        500,
        `the engine aborted request ${requestId} on its own (it rejected the request's parameters or was ` +
          'shutting down); no complete output was produced',
        { code: 'engine_abort' },
      );
    }
    let kept = ids;
    const last = ids[ids.length - 1];
    if (out.finishReason === 'stop' && last !== undefined && this.opts.stopTokenIds.has(last)) kept = ids.slice(0, -1);
    const r = this.feed(kept, before, true);
    const text = r.matched !== null ? r.emit : r.emit + this.matcher.flush();
    const finishReason = r.matched !== null ? 'stop' : out.finishReason;
    const completionTokens = r.matched !== null ? before + r.tokens : Math.max(this.received, out.completionTokens);
    const usage = makeUsage(this.opts.promptTokens, completionTokens, out.cachedTokens);
    const uncounted = r.matched !== null ? this.received - before - r.tokens : 0;
    return {
      type: 'finish',
      text,
      finishReason,
      stopReason: r.matched ?? (out.finishReason === 'stop' ? this.engineStopReason(out.stopReason, last) : null),
      usage,
      logprobs: this.takeLogprobs(uncounted),
      cachedTokens: out.cachedTokens,
    };
  }

  /**
   * The `stopReason` of an engine `stop` finish: what the engine said (vLLM: a stop token id or a stop string it
   * matched), else the last token when it is a stop token; a stop string the gateway sent as a token id reads as the
   * string, an end-of-sequence id as null.
   */
  private engineStopReason(
    reported: number | string | null | undefined,
    last: number | undefined,
  ): number | string | null {
    const id = typeof reported === 'number' ? reported : reported == null ? last : undefined;
    if (id === undefined) return (reported as string | undefined) ?? null;
    const converted = this.opts.convertedStops?.get(id);
    if (converted !== undefined) return converted;
    if (this.opts.eosTokenIds?.has(id) === true) return null;
    return typeof reported === 'number' || this.opts.stopTokenIds.has(id) ? id : null;
  }

  /** The error of a stream that ended without a terminal output (503 `stream-closed`). */
  ended(): ApiError {
    this.finished = true;
    return new ApiError(503, `engine stream for request ${this.opts.requestId} ended without a finish reason`, {
      code: 'stream-closed',
    });
  }
}
