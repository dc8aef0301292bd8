/**
 * The gateway side of the startup handshake (engine-wire.md sections 2.1-2.2; SMG `transport.rs`):
 * phase A collects one HELLO per rank on the handshake ROUTER and answers each with INIT at once; phase B
 * collects the READYs (READY may overlap phase A, so the phase is tracked per identity); phase C collects one
 * registration (the ready response) per rank on the input ROUTER.
 */
import type { Router } from 'zeromq';
import type { ConnectedEngine } from '../engine-client/link.js';
import { decodeReadyMessage, decodeReadyResponse, encodeHandshakeInit } from '../protocols/handshake.js';
import { compareIdentities, decodeEngineIdentity } from '../protocols/identity.js';
import type { ReadyResponse } from '../protocols/types.js';
import { describeIdentity, errorCode, errorMessage, hex } from './describe.js';
import type { EngineEndpoints } from './endpoints.js';
import { HandshakeError } from './errors.js';
import type { HandshakeStage } from './errors.js';
import type { MinimalLogger } from '../logging.js';

/** Inputs of one gateway handshake run. */
export interface GatewayHandshakeOptions {
  /** The bound handshake ROUTER (HELLO, INIT, READY). */
  handshakeSocket: Router;
  /** The bound input ROUTER (registration). */
  inputSocket: Router;
  endpoints: EngineEndpoints;
  /** Number of ranks to wait for (the worker's engine count, >= 1). */
  dpSize: number;
  /** Bound on each single receive, in ms (engine-wire.md 1.9: 600 000 per receive, not a total). */
  receiveTimeoutMs: number;
  logger: MinimalLogger;
  /** True once the owner closed the sockets (a receive rejected by `close()` is not a timeout). */
  isClosed: () => boolean;
}

/** Per-identity handshake progress. */
interface RankProgress {
  identity: Uint8Array;
  ready: boolean;
}

/** `engine 0 (identity 0000), engine 2 (identity 0200)` or `none`. */
function listIdentities(identities: Iterable<Uint8Array>): string {
  const names = [...identities].sort(compareIdentities).map(describeIdentity);
  return names.length === 0 ? 'none' : names.join(', ');
}

/**
 * Runs phases A, B and C and returns the connected ranks sorted by identity bytes (engine-wire.md 1.5, 2.1 step 7).
 * Does not close any socket.
 *
 * Throws HandshakeError (stage `HELLO`, `READY` or `registration`) on: a receive timeout (naming the stage, the
 * address and the ranks still missing), a message that is not exactly `[identity, payload]`, an undecodable
 * HELLO/READY or an unknown status, a duplicate HELLO or any HELLO after all `dpSize` ranks said HELLO, a READY from
 * an identity that did not say HELLO or that was already ready, an INIT that cannot be sent, a registration from
 * an identity that is not pending, an empty or undecodable ready response, or the sockets closing underneath it.
 */
export async function runGatewayHandshake(opts: GatewayHandshakeOptions): Promise<ConnectedEngine[]> {
  const { handshakeSocket, inputSocket, endpoints, dpSize, receiveTimeoutMs, logger, isClosed } = opts;
  const init = encodeHandshakeInit({ inputs: [endpoints.input], outputs: [endpoints.output] });
  const ranks = new Map<string, RankProgress>();
  const notReady = (): Uint8Array[] => [...ranks.values()].filter((r) => !r.ready).map((r) => r.identity);

  const receive = async (socket: Router, stage: HandshakeStage, address: string, waitingFor: () => string) => {
    socket.receiveTimeout = receiveTimeoutMs;
    try {
      return await socket.receive();
    } catch (error) {
      if (isClosed()) {
        throw new HandshakeError(stage, `link closed while waiting on ${address} (${waitingFor()})`, {
          code: 'ELINKCLOSED',
        });
      }
      if (errorCode(error) === 'EAGAIN') {
        throw new HandshakeError(
          stage,
          `timed out after ${receiveTimeoutMs} ms waiting on ${address} (${waitingFor()}); ` +
            `check that every engine was started with the right handshake address / engine index`,
          { code: 'ETIMEDOUT' },
        );
      }
      throw new HandshakeError(stage, `receive on ${address} failed: ${errorMessage(error)}`, {
        code: errorCode(error),
        cause: error,
      });
    }
  };

  // Phases A and B on the handshake ROUTER.
  for (;;) {
    const pendingReady = notReady();
    if (ranks.size === dpSize && pendingReady.length === 0) break;
    const stage: HandshakeStage = ranks.size < dpSize ? 'HELLO' : 'READY';
    const frames = await receive(handshakeSocket, stage, endpoints.handshake, () =>
      stage === 'HELLO'
        ? `${ranks.size} of ${dpSize} ranks said HELLO: ${listIdentities([...ranks.values()].map((r) => r.identity))}`
        : `READY still missing from ${listIdentities(pendingReady)}`,
    );
    if (frames.length !== 2) {
      throw new HandshakeError(
        stage,
        `expected 2 frames [identity, payload] on ${endpoints.handshake}, got ${frames.length}` +
          (frames.length > 0 ? ` from ${describeIdentity(frames[0])}` : ''),
      );
    }
    const [identity, payload] = frames;
    const who = describeIdentity(identity);
    let status: 'HELLO' | 'READY';
    try {
      status = decodeReadyMessage(payload).status;
    } catch (error) {
      throw new HandshakeError(stage, `unexpected message from ${who} on ${endpoints.handshake}: ${errorMessage(error)}`, {
        cause: error,
      });
    }
    const key = hex(identity);
    const known = ranks.get(key);
    if (status === 'HELLO') {
      if (known !== undefined) {
        throw new HandshakeError(stage, `duplicate HELLO from ${who}: two engines use the same engine index, or one restarted mid-handshake`);
      }
      if (ranks.size >= dpSize) {
        throw new HandshakeError(
          stage,
          `HELLO from ${who} after all ${dpSize} expected ranks said HELLO (${listIdentities(
            [...ranks.values()].map((r) => r.identity),
          )}); is dpSize too small?`,
        );
      }
      ranks.set(key, { identity: Uint8Array.from(identity), ready: false });
      try {
        await handshakeSocket.send([identity, init]);
      } catch (error) {
        throw new HandshakeError(stage, `sending INIT to ${who} on ${endpoints.handshake} failed: ${errorMessage(error)}`, {
          code: errorCode(error),
          cause: error,
        });
      }
      logger.debug({ identity: key, engineIndex: decodeEngineIdentity(identity), hellos: ranks.size, dpSize }, 'handshake: HELLO received, INIT sent');
    } else {
      if (known === undefined) {
        throw new HandshakeError(stage, `READY from ${who}, which never said HELLO`);
      }
      if (known.ready) {
        throw new HandshakeError(stage, `duplicate READY from ${who}`);
      }
      known.ready = true;
      logger.debug({ identity: key, engineIndex: decodeEngineIdentity(identity) }, 'handshake: READY received');
    }
  }

  // Phase C on the input ROUTER.
  const pending = new Map<string, Uint8Array>([...ranks].map(([key, r]) => [key, r.identity]));
  const registered: ConnectedEngine[] = [];
  while (pending.size > 0) {
    const frames = await receive(inputSocket, 'registration', endpoints.input, () =>
      `registration still missing from ${listIdentities(pending.values())}`,
    );
    if (frames.length !== 2) {
      throw new HandshakeError(
        'registration',
        `expected 2 frames [identity, ready response] on ${endpoints.input}, got ${frames.length}` +
          (frames.length > 0 ? ` from ${describeIdentity(frames[0])}` : ''),
      );
    }
    const [identity, payload] = frames;
    const key = hex(identity);
    const who = describeIdentity(identity);
    const expected = pending.get(key);
    if (expected === undefined) {
      throw new HandshakeError(
        'registration',
        `registration from unexpected ${who} on ${endpoints.input}` +
          (ranks.has(key) ? ' (already registered)' : ' (it did not take part in the handshake)') +
          `; pending: ${listIdentities(pending.values())}`,
      );
    }
    if (payload.length === 0) {
      throw new HandshakeError('registration', `empty ready response from ${who} on ${endpoints.input}`);
    }
    let ready: ReadyResponse;
    try {
      ready = decodeReadyResponse(payload);
    } catch (error) {
      throw new HandshakeError('registration', `ready response from ${who} does not decode: ${errorMessage(error)}`, {
        cause: error,
      });
    }
    pending.delete(key);
    registered.push({ identity: expected, engineIndex: decodeEngineIdentity(expected), ready });
    // Debug: the gateway logs one info line per joined rank ("DP rank N joined"), with these fields.
    logger.debug(
      { identity: key, engineIndex: decodeEngineIdentity(expected), version: ready.vllmVersion, maxModelLen: ready.maxModelLen, readyForm: ready.form },
      'handshake: engine registered on the input socket',
    );
  }
  return registered.sort((a, b) => compareIdentities(a.identity, b.identity));
}
