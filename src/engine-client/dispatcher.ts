/**
 * The output dispatcher of one engine group (dp-routing.md section 8; reference: SMG `engine_zmq_client`'s free
 * `run_dispatcher` over the shared registry): reads the link's output messages in order and applies each one. A
 * batch is decoded and applied in one synchronous step (apply-batch.ts); the only `await` is the wait while the
 * delivery backlog is at its bound, between two batches, never inside one. ENGINE_CORE_DEAD and `disconnect` hints
 * start the probe rounds; a failed output socket is a group-scope failure that closes the client for good.
 */
import { applyBatch, type BatchSteps } from './apply-batch.js';
import { EngineClientError, describeError } from './errors.js';
import type { GroupState } from './group-state.js';
import type { EngineLink, OutputMessage } from './link.js';

/**
 * Run the dispatcher until the link's output ends or fails or the client closes. Resolves then (never rejects): an
 * output failure is applied to the group (`outputFailed`) first.
 */
export async function runDispatcher(g: GroupState, steps: BatchSteps, link: EngineLink): Promise<void> {
  try {
    for await (const msg of link.outputs()) {
      if (g.registry.closed) return;
      if (msg.kind === 'frames') {
        handleFrames(g, steps, msg.frames);
        g.touchGroupTimer(true); // re-armed on every batch or decode error (section 8)
        // Bounded backlog of sliced deliveries: stop reading (ZeroMQ queues meanwhile) until it shrinks.
        const backlog = g.delivery.whenBelowLimit();
        if (backlog !== null) await backlog;
      } else if (!handleSignal(g, steps, link, msg)) {
        return;
      }
      if (g.registry.closed) return;
    }
    outputFailed(g, steps, link, new EngineClientError('client-closed', 'engine output stream ended'), 'output-ended');
  } catch (err) {
    outputFailed(
      g,
      steps,
      link,
      new EngineClientError('transport', `engine output receive failed: ${describeError(err)}`, { cause: err }),
      'output-error',
    );
  }
}

/** Decode one message and apply it; an undecodable one goes to the output faults (counted, maybe attributed). */
function handleFrames(g: GroupState, steps: BatchSteps, frames: Uint8Array[]): void {
  let batch;
  try {
    batch = g.protocol.decodeOutput(frames);
  } catch (err) {
    steps.faults.undecodable(err);
    return;
  }
  applyBatch(g, steps, batch);
}

/** A message that is not output frames; returns false when the dispatcher must stop (the output socket failed). */
function handleSignal(
  g: GroupState,
  steps: BatchSteps,
  link: EngineLink,
  msg: Exclude<OutputMessage, { kind: 'frames' }>,
): boolean {
  switch (msg.kind) {
    case 'dead': {
      // Names no rank (engine-wire.md 1.7): the probe rounds find the one whose identity vanished, unless a rank was
      // just found gone (its clean exit seen before its sentinel was read: failure-scope.ts).
      const sentinel = steps.scope.noteSentinel();
      if ('tiedTo' in sentinel) {
        g.logger.warn(
          { engineIndex: sentinel.tiedTo },
          `ENGINE_CORE_DEAD received from DP rank ${sentinel.tiedTo}, already found gone`,
        );
        return true;
      }
      g.logger.warn(
        { pendingSentinels: sentinel.pending },
        'ENGINE_CORE_DEAD received; probing every rank to find the dying one',
      );
      g.timers.startProbes();
      return true;
    }
    case 'closed':
      outputFailed(
        g,
        steps,
        link,
        new EngineClientError('transport', `engine output socket failed: ${describeError(msg.error)}`, {
          cause: msg.error,
        }),
        'output-closed',
      );
      return false;
    case 'disconnect':
      // A hint, not proof of death (link.ts); it does not re-arm the watchdog. `address` is the gateway's own bound
      // endpoint of the socket concerned; which rank went away is unknown: probe them all.
      g.logger.warn(
        { address: msg.address },
        `engine peer disconnected from the gateway socket bound at ${msg.address}`,
      );
      g.timers.startProbes();
      return true;
  }
}

/** The output socket is gone: nothing can be received any more. Group-scope failure, then the client closes for good. */
function outputFailed(
  g: GroupState,
  steps: BatchSteps,
  link: EngineLink,
  error: EngineClientError,
  cause: string,
): void {
  if (g.registry.closed) return;
  steps.scope.failGroup(error, cause, true);
  g.closeForGood(error);
  link.close().catch((err: unknown) => g.logger.warn({ err }, 'engine link close failed'));
}
