/**
 * Per-rank liveness as data (architecture.md "Where the shape is going": joining → ready ⇄ stalled → dead →
 * (rejoin) joining; dp-routing.md 14.8; issue #8). Pure: the engine client feeds it events and acts on the
 * transitions; nothing here touches sockets, timers or requests.
 *
 * States:
 * - `joining`: the rank has not completed a handshake yet: it never dialed, or it said HELLO and its handshake is
 *   running (after a death it is `dead` until it says HELLO again).
 * - `ready`: joined and answering; the only state the DP policy sees (interface B).
 * - `stalled`: it holds in-flight requests and sent nothing for the stall timeout; out of rotation. A rank that speaks
 *   again goes back to `ready` (same process, same epoch).
 * - `dead`: its process is gone or unusable (`cause` says how we know); it comes back only through a new handshake.
 *
 * `epoch` counts completed handshakes of this slot (0 = never joined): every join is a new engine process with an
 * empty engine state, so requests, loads and cache knowledge of an earlier epoch never carry over.
 */

/** A rank's liveness state (`RankState.state`, interface C). */
export type RankStateName = 'joining' | 'ready' | 'stalled' | 'dead';

/**
 * How a rank was found dead:
 * - `engine-core-dead`: it pushed ENGINE_CORE_DEAD and its identity then vanished (engine-wire.md 1.7);
 * - `peer-unreachable`: a send to its identity was refused with EHOSTUNREACH (the input ROUTER has `mandatory` on);
 * - `send-timeout`: a send to it stayed blocked for the send timeout (engine-wire.md 1.9);
 * - `rank-silent`: it held in-flight requests and sent nothing for the silence timeout (dp-routing.md 14.8);
 * - `replaced`: a new process joined with its engine index (its old process cannot be serving any more);
 * - `group-failure`: its group failed as a unit with no rank to blame (ENGINE_CORE_DEAD nobody could be tied to,
 *   3 undecodable output messages in a row, the group silence watchdog, a failed output socket);
 * - `handshake-timeout`: it died once and then did not finish its new handshake.
 */
export type DeathCause =
  | 'engine-core-dead'
  | 'peer-unreachable'
  | 'send-timeout'
  | 'rank-silent'
  | 'replaced'
  | 'group-failure'
  | 'handshake-timeout';

/** Everything that can happen to a rank. */
export type LivenessEvent =
  /** The engine client let a HELLO for this index in (its handshake starts). */
  | { kind: 'hello' }
  /** The handshake completed: a new engine process (new epoch). */
  | { kind: 'joined' }
  /** An output batch came from it (or from one of its requests). */
  | { kind: 'heard' }
  /** Its stall timer fired while it held in-flight requests. */
  | { kind: 'stall' }
  /** It was found dead. */
  | { kind: 'death'; cause: DeathCause }
  /**
   * A rank found dead answers again as the same process (its identity is back on the input socket; issue 26): a
   * fault nobody could pin on it (a rogue frame, a group failure) or a transient loss of its connection.
   */
  | { kind: 'revived' }
  /** Its handshake did not finish. */
  | { kind: 'handshake-failed' };

/** One rank's liveness. `cause`: why it is `dead` (or, for `stalled`, `stall`); null otherwise. */
export interface RankLiveness {
  readonly state: RankStateName;
  readonly epoch: number;
  readonly cause: DeathCause | 'stall' | null;
}

/** A slot that never joined. */
export const INITIAL_LIVENESS: RankLiveness = Object.freeze({ state: 'joining', epoch: 0, cause: null });

/**
 * The next liveness after `event`, and whether the state changed (`changed`; a new epoch counts as a change). Pure;
 * never throws. Events that do not apply in a state leave it unchanged:
 *
 * | from \ event | hello   | joined          | heard  | stall   | death | revived | handshake-failed            |
 * |--------------|---------|-----------------|--------|---------|-------|---------|-----------------------------|
 * | joining      | joining | ready (epoch+1) | –      | –       | –     | –       | joining (dead if it had an epoch: `handshake-timeout`) |
 * | ready        | –       | ready (epoch+1) | –      | stalled | dead  | –       | –                           |
 * | stalled      | –       | ready (epoch+1) | ready  | –       | dead  | –       | –                           |
 * | dead         | joining | ready (epoch+1) | –      | –       | –     | ready   | –                           |
 *
 * A `joined` event from `ready`/`stalled` is a replacement process; the client retires the old one first.
 * `heard` never revives a dead rank: a rank declared dead has had its requests failed, and a batch may be one it sent
 * before it died. `revived` (same process, same epoch) is the client's decision that the rank answers again
 * (`isRevivable` causes only; the client probes its identity); a new process comes back through a new handshake.
 */
export function nextLiveness(current: RankLiveness, event: LivenessEvent): { next: RankLiveness; changed: boolean } {
  const same = { next: current, changed: false };
  const to = (state: RankStateName, cause: RankLiveness['cause'], epoch = current.epoch) => ({
    next: { state, epoch, cause },
    changed: state !== current.state || epoch !== current.epoch,
  });
  switch (event.kind) {
    case 'hello':
      return current.state === 'dead' ? to('joining', null) : same;
    case 'joined':
      return to('ready', null, current.epoch + 1);
    case 'heard':
      return current.state === 'stalled' ? to('ready', null) : same;
    case 'stall':
      return current.state === 'ready' ? to('stalled', 'stall') : same;
    case 'death':
      return current.state === 'ready' || current.state === 'stalled' ? to('dead', event.cause) : same;
    case 'revived':
      return current.state === 'dead' && current.epoch > 0 ? to('ready', null) : same;
    case 'handshake-failed':
      if (current.state !== 'joining') return same;
      return current.epoch > 0 ? to('dead', 'handshake-timeout') : same;
  }
}

/**
 * Whether a rank dead of `cause` may be the same, still working process (issue 26): its connection was lost or a fault
 * nobody could pin on it ended it (`peer-unreachable`, `send-timeout`, `engine-core-dead`, `rank-silent`,
 * `group-failure`), so a probe that reaches its identity again brings it back. Not after `replaced` (a new process
 * holds the index) or `handshake-timeout` (its new process never finished joining).
 */
export function isRevivable(cause: RankLiveness['cause']): boolean {
  return (
    cause === 'peer-unreachable' ||
    cause === 'send-timeout' ||
    cause === 'engine-core-dead' ||
    cause === 'rank-silent' ||
    cause === 'group-failure'
  );
}

/** Whether a rank in `state` is connected (joined and not found dead): it can be sent ABORTs and probes. */
export function isConnected(state: RankStateName): boolean {
  return state === 'ready' || state === 'stalled';
}
