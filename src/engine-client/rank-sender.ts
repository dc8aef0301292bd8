/**
 * The engine client's control sends to a rank (ABORT, the empty-ABORT liveness probe, START_DP_WAVE, the one-token
 * revival request to a stalled rank), each with the
 * failure classes of probes.ts applied the same way (dp-routing.md 5, 6, 13.2, 14.8; issue #8 part 1): a send that
 * times out or is refused with EHOSTUNREACH names that rank, and the client's `rankUnusable` marks it dead; any other
 * failure is a transport error, logged. Request ADDs are not sent here: submit owns their rollback and re-routing.
 */
import type { Logger } from 'pino';
import { DEFAULT_SAMPLING, RequestType, type EngineProtocol } from '../protocols/types.js';
import { EngineClientError, describeError } from './errors.js';
import type { EngineLink } from './link.js';
import { classifySendError } from './probes.js';
import { isConnected } from './rank-liveness.js';
import type { RankSlot } from './rank-table.js';

/** What the sender reports back to the engine client. */
export interface SendFailureSink {
  /** A send to `slot` timed out or was refused with EHOSTUNREACH (`what` names it): mark the rank dead, return the error. */
  rankUnusable(slot: RankSlot, what: string, err: unknown): EngineClientError;
  /** The client's `client-closed` error once it is closed (a failed send then reports that), else null. */
  closedError(): EngineClientError | null;
  /** A request id sent outside the client's registry (the revival request): its rows are the gateway's own. */
  untracked?(requestId: string): void;
}

/** Control sends of one engine group (see the module docs). */
export class RankSender {
  constructor(
    private readonly link: EngineLink,
    private readonly protocol: EngineProtocol,
    /** Counts request ABORTs the link accepted (probes are not counted). */
    private readonly stats: { abortsSent: number },
    private readonly logger: Logger,
    private readonly sink: SendFailureSink,
  ) {}

  /**
   * Send `[identity, 01, ids]` (engine-wire.md 4.7) to `slot`. Resolves with null once the link accepted it (counted
   * in the client's and the rank's `abortsSent`), else with the error: engine-dead when it named the rank dead,
   * `client-closed` after close, otherwise `encode` / `transport` (logged). Never rejects.
   */
  async abort(slot: RankSlot, ids: readonly string[]): Promise<EngineClientError | null> {
    let payload: Uint8Array;
    try {
      payload = this.protocol.encodeAbort(ids);
    } catch (err) {
      const e = new EngineClientError(
        'encode',
        `cannot encode ABORT for ${JSON.stringify(ids)}: ${describeError(err)}`,
        { cause: err },
      );
      this.logger.error({ err: e }, 'ABORT not sent');
      return e;
    }
    try {
      await this.link.send(slot.identity, RequestType.ABORT, payload);
      this.stats.abortsSent++;
      slot.counters.abortsSent++;
      return null;
    } catch (err) {
      const failure = this.failed(slot, `ABORT of ${ids.length} request(s) to DP rank ${slot.index}`, err);
      if (failure.kind === 'transport') this.logger.warn({ err: failure, engineIndex: slot.index }, 'ABORT not sent');
      return failure;
    }
  }

  /**
   * Probe `slot` with an empty ABORT (probes.ts). A refused or stuck probe marks it dead (through the sink); any other
   * failure is logged; nothing happens for a rank that is no longer connected. Never rejects.
   */
  async probe(slot: RankSlot, what: string): Promise<void> {
    let payload: Uint8Array;
    try {
      payload = this.protocol.encodeAbort([]);
    } catch (err) {
      this.logger.error({ err }, 'cannot encode the empty ABORT liveness probe');
      return;
    }
    try {
      await this.link.send(slot.identity, RequestType.ABORT, payload);
    } catch (err) {
      if (this.sink.closedError() !== null || !isConnected(slot.liveness.state)) return;
      const failure = this.failed(slot, what, err);
      if (failure.kind === 'transport') this.logger.warn({ err: failure, engineIndex: slot.index }, `${what} failed`);
    }
  }

  /**
   * Probe a `slot` found dead (rank-liveness.ts `isRevivable`; issue 26): an empty ABORT to its identity. Resolves true
   * when the link accepted it (a peer holds the identity on the input ROUTER again), false on any failure (refused,
   * timed out, closed, unencodable); changes no rank state and never rejects.
   */
  async probeDead(slot: RankSlot): Promise<boolean> {
    try {
      await this.link.send(slot.identity, RequestType.ABORT, this.protocol.encodeAbort([]));
      return true;
    } catch {
      return false;
    }
  }

  /**
   * Send a stalled `slot` a one-token request (prompt `[0]`, greedy, `max_new_tokens` 1, EOS ignored) under the
   * request id `requestId`, which no client request has. An engine answers every request it runs, but nothing for the
   * ones the gateway ABORTed (engine-wire.md 4.7), so without it a stalled rank that recovers would never be heard
   * from again; its answer (any batch from the rank) brings it back into rotation and the row, for an id nobody
   * holds, is dropped (dp-routing.md section 2). Queued behind the rank's ABORTs (per-rank send order), so a wedged
   * rank runs it once it resumes. The id is reported to the sink's `untracked` (its row is not an unknown id's,
   * output-contract.ts). Failures as `abort`'s. Never rejects.
   */
  async revive(slot: RankSlot, requestId: string): Promise<void> {
    this.sink.untracked?.(requestId);
    let payload: Uint8Array;
    try {
      payload = this.protocol.encodeAdd(
        {
          requestId,
          promptTokenIds: [0],
          sampling: { ...DEFAULT_SAMPLING, maxNewTokens: 1, temperature: 0, ignoreEos: true },
          stream: false,
          returnLogprob: false,
        },
        { dpRank: slot.index },
      );
    } catch (err) {
      this.logger.error({ err, engineIndex: slot.index }, 'cannot encode the revival request for a stalled rank');
      return;
    }
    try {
      await this.link.send(slot.identity, RequestType.ADD, payload);
    } catch (err) {
      if (this.sink.closedError() !== null || !isConnected(slot.liveness.state)) return;
      const failure = this.failed(slot, `revival request to stalled DP rank ${slot.index}`, err);
      if (failure.kind === 'transport')
        this.logger.warn({ err: failure, engineIndex: slot.index }, 'revival request not sent');
    }
  }

  /**
   * `wake_group()`'s broadcast (dp-routing.md 13.2): START_DP_WAVE `[wave, nil]` (engine-wire.md 5.7) to every rank of
   * `slots` in order, all queued in one synchronous step (per-rank order keeps them behind each rank's earlier
   * sends). Nothing when the protocol has no wave message (TokenSpeed; 13.2 inferred). Resolves with null on success,
   * else with the first error, a rank found dead winning over a plain send failure. Never rejects.
   */
  async startWave(slots: readonly RankSlot[], wave: number): Promise<EngineClientError | null> {
    if (this.protocol.encodeStartWave === undefined) return null;
    let payload: Uint8Array;
    try {
      payload = this.protocol.encodeStartWave(wave);
    } catch (err) {
      return new EngineClientError('encode', `cannot encode START_DP_WAVE [${wave}, nil]: ${describeError(err)}`, {
        cause: err,
      });
    }
    const sends = slots.map((slot) =>
      this.link.send(slot.identity, RequestType.START_DP_WAVE, payload).then(
        () => null,
        (err: unknown) => ({ slot, err }),
      ),
    );
    const failed = (await Promise.all(sends)).filter((f) => f !== null);
    if (failed.length === 0) return null;
    failed.sort((a, b) => Number(classifySendError(a.err) === 'other') - Number(classifySendError(b.err) === 'other'));
    const errors = failed.map((f) =>
      this.failed(f.slot, `START_DP_WAVE [${wave}, nil] to DP rank ${f.slot.index}`, f.err),
    );
    return errors[0]!;
  }

  /** The error a failed send to `slot` stands for (see the module docs). */
  private failed(slot: RankSlot, what: string, err: unknown): EngineClientError {
    const closed = this.sink.closedError();
    if (closed !== null) return closed;
    if (classifySendError(err) !== 'other' && isConnected(slot.liveness.state))
      return this.sink.rankUnusable(slot, what, err);
    return new EngineClientError('transport', `${what} failed: ${describeError(err)}`, { cause: err });
  }
}
