/**
 * What the dispatcher does with engine output that cannot be applied as it stands (issue 26; dp-routing.md 14.6):
 * undecodable messages, rows naming another rank's requests, and an adopted rank's rows for the previous gateway's
 * requests. Each is counted and logged at a bounded rate; a rank is blamed only on evidence that points at it (it
 * went quiet while the undecodable messages arrived), so a rogue sender on the socket cannot take healthy ranks out.
 */
import { EngineClientError, describeError } from './errors.js';
import type { FailureScope } from './failure-scope.js';
import type { GroupState } from './group-state.js';
import { LogThrottle } from '../collections/log-throttle.js';
import { isConnected } from './rank-liveness.js';
import type { RankSlot } from './rank-table.js';

/**
 * Undecodable messages a rank must have been quiet through before it is taken for their sender (SMG PR #2175 fails
 * the whole group after 3 in a row; issue 26: any process that reaches the socket can push such frames, so only a
 * rank that also went quiet is blamed, `DECODE_ATTRIBUTION_QUIET_MS`).
 */
export const DECODE_ATTRIBUTION_MIN_ERRORS = 3;
/**
 * How long a rank holding requests must have sent nothing decodable, while undecodable messages arrive, to be taken
 * for their sender (issue 26): far above the gap between two batches of a working rank, so a rank that keeps
 * streaming is never blamed for someone else's frames.
 */
export const DECODE_ATTRIBUTION_QUIET_MS = 3000;
/** At most one log line per this many ms about undecodable output, and about rows naming another rank's requests. */
const WIRE_FAULT_LOG_INTERVAL_MS = 10_000;

/** The output faults of one group (see the module docs). */
export class OutputFaults {
  private readonly decodeLog = new LogThrottle(WIRE_FAULT_LOG_INTERVAL_MS);
  private readonly mismatchLog = new LogThrottle(WIRE_FAULT_LOG_INTERVAL_MS);

  constructor(
    private readonly g: GroupState,
    private readonly scope: FailureScope,
  ) {}

  /**
   * An undecodable message is counted, logged (the first one, then a summary line per interval) and skipped. Every
   * ready rank that holds requests, sent nothing decodable for `DECODE_ATTRIBUTION_QUIET_MS` and was quiet through at
   * least `DECODE_ATTRIBUTION_MIN_ERRORS` undecodable messages is taken for their sender: it is stalled with a
   * `decode` error naming it (its requests end; it is back in rotation when it sends a decodable batch). Ranks that
   * keep streaming are never blamed, and the group never fails on frames no rank can be tied to.
   */
  undecodable(err: unknown): void {
    const { g } = this;
    g.stats.decodeErrors++;
    const now = g.now();
    const verdict = this.decodeLog.note(now);
    if (verdict.log) {
      g.logger.warn(
        { err, skipped: verdict.count, ...(verdict.sinceMs === null ? {} : { sinceMs: verdict.sinceMs }) },
        `skipping ${verdict.count === 1 ? 'an undecodable engine output message' : `${verdict.count} undecodable engine output messages`}` +
          `${verdict.sinceMs === null ? '' : ' since the last such line'} (model_gateway_decode_errors_total counts them all)`,
      );
    }
    for (const slot of g.ranks.inState('ready')) {
      const held = g.routing.inFlightCount(slot.index);
      if (held === 0) continue;
      const quiet = g.quietMs(slot.index, now);
      const through = g.decodeErrorsWhileQuiet(slot.index);
      if (quiet < DECODE_ATTRIBUTION_QUIET_MS || through < DECODE_ATTRIBUTION_MIN_ERRORS) continue;
      g.stats.decodeSuspects++;
      const error = new EngineClientError(
        'decode',
        `DP rank ${slot.index} sent no decodable output for ${Math.round(quiet)} ms while holding ${held} request(s), and ` +
          `${through} undecodable messages arrived on its group's output socket meanwhile (last: ${describeError(err)}); ` +
          'taken out of rotation until it sends decodable output (engine/gateway version skew?)',
        { cause: err, dpRank: slot.index },
      );
      g.logger.error({ engineIndex: slot.index, err: error }, `DP rank ${slot.index}: its output does not decode`);
      this.scope.stalled(slot, error);
    }
  }

  /**
   * A batch naming `rank` carried `count` rows or finished ids of requests sent to another rank (rank fidelity, 14.6;
   * issue 26): none was applied (the owners keep their streams). The rows' ids are ABORTed at `rank`, the sender the
   * batch claims to be, so a misbehaving engine stops producing them; counted, and logged at a bounded rate.
   */
  mismatches(rank: number, count: number, foreign: readonly string[], now: number): void {
    const { g } = this;
    g.stats.rankMismatches += count;
    const slot = g.ranks.slot(rank);
    if (foreign.length > 0 && slot !== undefined && isConnected(slot.liveness.state)) {
      void this.scope.sender.abort(slot, foreign);
    }
    const verdict = this.mismatchLog.note(now, count);
    if (!verdict.log) return;
    g.logger.warn(
      {
        engineIndex: rank,
        mismatches: verdict.count,
        sampleRequestId: foreign[0],
        ...(verdict.sinceMs === null ? {} : { sinceMs: verdict.sinceMs }),
      },
      `dropped ${verdict.count} output row(s) or finished id(s) naming DP rank ${rank} for requests sent to another rank` +
        `${verdict.sinceMs === null ? '' : ' since the last such line'}; their ids were ABORTed at rank ${rank} (rank fidelity, ` +
        'dp-routing.md 14.6; a TokenSpeed sender without engine_index under DP > 1 looks like this too)',
    );
  }

  /** ABORT, once each, the ids an adopted rank still runs for the previous gateway (foreign-requests.ts). */
  foreignRows(slot: RankSlot, unknownRows: readonly string[], finished: ReadonlySet<string>): void {
    const { ids, first } = this.g.foreign.toAbort(slot.index, unknownRows, finished);
    if (ids.length === 0) return;
    if (first) {
      this.g.logger.info(
        { engineIndex: slot.index, requestIds: ids.length },
        `DP rank ${slot.index} still runs requests of the previous gateway; ABORTing each once`,
      );
    }
    void this.scope.sender.abort(slot, ids);
  }
}
