/**
 * The output contract an engine must keep, enforced by the engine client on every row before a request's stream
 * takes it (issue 26 part 4). Engines are trusted to route and schedule, not to be right: a rank that breaks the
 * contract is named, counted and kept away from the client, and the request ends cleanly.
 *
 * - **max_tokens**: a client never gets more than its request's `maxNewTokens` tokens (`RegistryEntry.tokenLimit`).
 *   The row that would pass it is cut at the limit and ends the request with finish reason `length` (its logprob
 *   columns cut alike); the request is retired like any other (in-flight slot released with the clamp) and, unless
 *   the engine itself ended it in that row, ABORTed on its rank, once (the client's cancel path, `abandon`).
 *   Counted per rank (`max-tokens-overrun`), one warn line per request.
 * - **token ids**: every token id must name a token of the gateway's tokenizer (`validTokenIds`, a byte mask from
 *   tokenizer/token-id-mask.ts). A row with one that does not fails its request with an `engine-fault` error naming
 *   the rank (HTTP 502: the engine is at fault, not the gateway), the request is ABORTed on the rank unless the row was
 *   terminal, and the rank's `invalid-token-id` count moves. Ranked candidates (`topLogprobs`) are not checked here: a
 *   model's logits may be wider than the tokenizer's vocabulary.
 * - **unknown ids**: a row whose request id this client never issued, or let go so long ago that it forgot it
 *   (registry.ts `knows`: live, or among the last ≥ 65 536 ids let go), is dropped and counted (`unknownOutputs`); one
 *   warn line per `UNKNOWN_ROWS_LOG_INTERVAL_MS` at most, with the count since the last line and a sample id. Late
 *   rows after a client cancel, and rows for requests the gateway disowned (failure-scope.ts `orphanRow`), are ids it
 *   issued: they stay silent here.
 *
 * Cost per row in the normal case (dp-routing.md 12.3 step, the per-token path): one typed-array read and compare per
 * token, one add and compare per row; nothing allocated. Only a broken row allocates (the cut copy, the error).
 */
import type { EngineOutputRow } from '../protocols/types.js';
import { EngineClientError } from './errors.js';
import type { FailureScope } from './failure-scope.js';
import type { GroupState } from './group-state.js';
import type { RegistryEntry } from './registry.js';

/** The per-rank `engineErrors` keys (`RankState.engineErrors`). */
export type EngineErrorKind = 'max-tokens-overrun' | 'invalid-token-id';

/** At most one warn line about unknown-id rows per this many ms (the counter counts every row). */
export const UNKNOWN_ROWS_LOG_INTERVAL_MS = 10_000;
/** A sample id longer than this (a rogue sender's) is logged cut to it, in UTF-16 units. */
const MAX_LOGGED_ID_CHARS = 128;

/** The checks of one engine client (see the module docs). */
export class OutputContract {
  private unknownSinceLog = 0;
  private unknownLoggedAt = -Infinity;
  private unknownSample = '';

  /**
   * @param g the group's state; @param scope its failure scope (`abandon`: a retire plus an ABORT on the rank).
   * @param validTokenIds `mask[id] === 1` for each token id (tokenizer/token-id-mask.ts); null: ids are not checked.
   */
  constructor(
    private readonly g: GroupState,
    private readonly scope: FailureScope,
    private readonly validTokenIds: Uint8Array | null,
  ) {}

  /**
   * Check one row for the live request `entry`, from the batch of `rank`, before its stream takes it. Returns the row
   * to deliver: `row` itself (the normal case), a cut copy ending with finish `length` (an overrun: the request is
   * already retired, and ABORTed unless `row` was terminal), or null: deliver nothing (a bad token id failed the
   * request; or the request was already retired by an earlier row of this batch). Never throws.
   */
  check(entry: RegistryEntry, row: EngineOutputRow, rank: number): EngineOutputRow | null {
    const ids = row.newTokenIds;
    const valid = this.validTokenIds;
    if (valid !== null) {
      for (let i = 0; i < ids.length; i++) {
        if (valid[ids[i]!] !== 1) return this.invalidTokenId(entry, row, i, rank);
      }
    }
    entry.tokens += ids.length;
    return entry.tokens <= entry.tokenLimit ? row : this.overrun(entry, row, rank);
  }

  /**
   * Rows of a batch from `rank` that no live request took (batch-plan.ts `unknownRows`): count those whose id the
   * registry does not know, and log at the bounded rate (see the module docs).
   */
  unknownRows(ids: readonly string[], rank: number): void {
    const registry = this.g.registry;
    let found = 0;
    for (const id of ids) {
      if (registry.knows(id)) continue;
      found++;
      this.unknownSample = id;
    }
    if (found === 0) return;
    this.g.stats.unknownOutputs += found;
    this.unknownSinceLog += found;
    const now = this.g.now();
    if (now - this.unknownLoggedAt < UNKNOWN_ROWS_LOG_INTERVAL_MS) return;
    const first = this.unknownLoggedAt === -Infinity;
    const sample = this.unknownSample;
    this.g.logger.warn(
      {
        engineIndex: rank,
        unknownRows: this.unknownSinceLog,
        sampleRequestId: sample.length > MAX_LOGGED_ID_CHARS ? `${sample.slice(0, MAX_LOGGED_ID_CHARS)}…` : sample,
        ...(first ? {} : { sinceMs: Math.round(now - this.unknownLoggedAt) }),
      },
      `dropped ${this.unknownSinceLog} engine output row(s) for request ids this gateway never issued (or forgot long ago)` +
        `${first ? '' : ' since the last such line'}; at most one such line per ${UNKNOWN_ROWS_LOG_INTERVAL_MS / 1000} s ` +
        '(model_gateway_unknown_outputs_total counts them all)',
    );
    this.unknownLoggedAt = now;
    this.unknownSinceLog = 0;
  }

  /** `row` passes `entry.tokenLimit`: cut it there (see `check`). */
  private overrun(entry: RegistryEntry, row: EngineOutputRow, rank: number): EngineOutputRow | null {
    if (this.g.registry.get(entry.requestId) !== entry) return null;
    const limit = entry.tokenLimit;
    const sent = row.newTokenIds.length;
    const keep = Math.max(0, limit - (entry.tokens - sent));
    // Every other field as the engine gave it (a rare copy, off the normal path: the spread keeps a field added to
    // OUTPUT_ROW_FIELDS); the stop reason goes with the engine's finish, which `length` replaces.
    const { stopReason: _engineStop, ...rest } = row;
    const cut: EngineOutputRow = {
      ...rest,
      newTokenIds: row.newTokenIds.slice(0, keep),
      finishReason: 'length',
      logprobs: row.logprobs.length > keep ? row.logprobs.slice(0, keep) : row.logprobs,
      // What the client got, not what the engine says it generated.
      completionTokens: limit,
    };
    if (row.topLogprobs !== undefined) cut.topLogprobs = row.topLogprobs.slice(0, keep);
    entry.tokens = limit;
    const owner = entry.engineIndex ?? rank;
    this.count(owner, 'max-tokens-overrun');
    const terminal = row.finishReason !== null;
    if (terminal) this.g.retire(entry);
    else this.scope.abandon(entry);
    this.g.logger.warn(
      {
        engineIndex: owner,
        engineRequestId: entry.requestId,
        maxTokens: limit,
        rowTokens: sent,
        kept: keep,
        engineFinish: row.finishReason,
      },
      `DP rank ${owner} sent tokens past max_tokens ${limit} for request ${entry.requestId}: cut at the limit (finish length)` +
        `${terminal ? '' : ', the rest ABORTed on the rank'}`,
    );
    return cut;
  }

  /** Token `row.newTokenIds[at]` is not a token id: the request fails with `engine-fault` (see `check`). */
  private invalidTokenId(entry: RegistryEntry, row: EngineOutputRow, at: number, rank: number): null {
    if (this.g.registry.get(entry.requestId) !== entry) return null;
    const owner = entry.engineIndex ?? rank;
    const tokenId = row.newTokenIds[at];
    const terminal = row.finishReason !== null;
    const error = new EngineClientError(
      'engine-fault',
      `DP rank ${owner} sent token id ${String(tokenId)} for request ${entry.requestId}, which is not a token id of the ` +
        `gateway's tokenizer (vocabulary of ${this.validTokenIds!.length} ids): the engine's output is invalid` +
        `${terminal ? '' : '; the request was aborted on the rank'}`,
      { requestId: entry.requestId, dpRank: owner },
    );
    this.count(owner, 'invalid-token-id');
    if (terminal) this.g.retire(entry);
    else this.scope.abandon(entry);
    this.g.logger.warn(
      { engineIndex: owner, engineRequestId: entry.requestId, tokenId, position: entry.tokens + at },
      error.message,
    );
    entry.stream.fail(error);
    return null;
  }

  private count(rank: number, kind: EngineErrorKind): void {
    const slot = this.g.ranks.slot(rank);
    if (slot !== undefined) slot.counters.engineErrors[kind] = (slot.counters.engineErrors[kind] ?? 0) + 1;
  }
}
