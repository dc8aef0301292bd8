/**
 * The gateway side of the handshake (engine-wire.md sections 2.1-2.2; SMG `transport.rs`), run as a service for the
 * gateway's whole life instead of once at startup (issue #8 parts 2 and 5): a rank may dial in at any time (first
 * start, restart after a crash, a replacement engine) and goes through HELLO → INIT → READY → registration on its own.
 *
 * Per rank (keyed by engine index): HELLO (admitted by the engine client, which may first probe a live holder of the
 * index) → INIT sent → READY on the handshake ROUTER and the ready response on the input ROUTER, in either order
 * (they travel on different sockets) → joined. Each stage gets `timeoutMs` (engine-wire.md 1.9: 600 s per receive,
 * because model loading happens between INIT and READY); a rank that does not finish goes back to not joined.
 *
 * Identities on the input ROUTER (issue 26): the link binds it without ZMQ_ROUTER_HANDOVER, so a peer that presents a
 * live rank's identity is ignored by libzmq and cannot take the rank's requests. The one moment a new connection must
 * be able to take an identity over is a new process's registration: between its READY and its registration (the same
 * engine step, milliseconds apart; model loading happens before READY, engine-wire.md 1.9) the service turns handover
 * on, so the process that just completed the handshake displaces a stale connection still holding its identity (an
 * old process of the index, or a squatter), and off again once no registration is pending. While handover is on, any
 * connection can take any identity, so the window is kept short: a rank that said READY must register within
 * `REGISTRATION_AFTER_READY_MS` (not the 600 s stage bound), and one that does not (a peer that says HELLO and READY
 * for a free index and never registers, to hold handover on and steal a live rank's identity; found by the issue 26
 * break pass) turns handover off for `HANDOVER_COOLDOWN_MS`: registrations still work then, only a stale connection
 * holding the same identity is not displaced (that rank's registration times out and it says HELLO again).
 *
 * Hardening: every message that is not exactly `[identity, payload]`, carries an identity that is not 2 bytes, names
 * an engine index outside 0..dpSize−1, does not decode, arrives out of order (READY before HELLO, a second READY, a
 * registration nobody expects) or names an index a live rank holds is logged (which socket, which peer, what was
 * wrong), counted by reason and ignored: it never throws out of the service and never takes a slot. Oversized
 * messages never get here: ZMQ_MAXMSGSIZE on the sockets makes libzmq drop the sending peer's connection first
 * (zeromq's monitor then reports only a disconnect, which names no peer).
 */
import type { Router } from 'zeromq';
import type { ConnectedEngine } from '../engine-client/link.js';
import { decodeReadyMessage, decodeReadyResponse, encodeHandshakeInit } from '../protocols/handshake.js';
import { decodeEngineIdentity } from '../protocols/identity.js';
import type { ReadyResponse } from '../protocols/types.js';
import { describeIdentity, errorMessage, hex } from './describe.js';
import type { EngineEndpoints } from './endpoints.js';
import type { MinimalLogger } from '../logging.js';

/** Why a handshake-side message was refused (the `reason` label of `model_gateway_handshake_rejected_total`). */
export type HandshakeRejectReason =
  | 'frame-count'
  | 'bad-identity'
  | 'index-out-of-range'
  | 'undecodable'
  | 'duplicate-hello'
  | 'duplicate-live-index'
  | 'unexpected-ready'
  | 'unexpected-registration'
  | 'empty-ready-response'
  | 'undecodable-ready-response'
  | 'init-send-failed'
  | 'handshake-timeout';

/** What the service reports to its owner (the link, which forwards to the engine client's `LinkListener`). */
export interface HandshakeHost {
  admitHello(engineIndex: number): Promise<boolean>;
  joined(engine: ConnectedEngine): void;
  joinFailed(engineIndex: number, reason: string): void;
}

/** Inputs of the handshake service. */
export interface HandshakeServiceOptions {
  /** The bound handshake ROUTER (HELLO, INIT, READY). */
  handshakeSocket: Router;
  /** The bound input ROUTER (registration). The service owns its receive side for the link's life. */
  inputSocket: Router;
  endpoints: EngineEndpoints;
  /** Rank slots: engine indexes 0..dpSize−1. */
  dpSize: number;
  /** Bound on each stage of one rank's handshake (INIT sent → READY, → registration), in ms. */
  timeoutMs: number;
  /** Bound between READY and the registration, ms (default `REGISTRATION_AFTER_READY_MS`; capped by `timeoutMs`). */
  registrationWindowMs?: number;
  /** Handover off after a missed registration window, ms (default `HANDOVER_COOLDOWN_MS`). */
  handoverCooldownMs?: number;
  host: HandshakeHost;
  logger: MinimalLogger;
}

/** One rank's handshake in progress. `admitting`: HELLO received, the host has not answered yet. */
interface Progress {
  readonly engineIndex: number;
  identity: Uint8Array;
  stage: 'admitting' | 'init-sent';
  ready: boolean;
  registration: ReadyResponse | null;
  timer: ReturnType<typeof setTimeout> | null;
}

/** The peer named in a log line: `engine 3 (identity 0300)`, or the raw identity, or `unknown peer`. */
function peerOf(frames: readonly Uint8Array[]): string {
  return frames.length > 0 ? describeIdentity(frames[0]!) : 'unknown peer';
}

/**
 * Bound between a rank's READY and its registration on the input socket, ms. A real engine sends both in the same
 * step after model loading (engine-wire.md 1.9), milliseconds apart; the bound is generous for a loaded machine.
 */
export const REGISTRATION_AFTER_READY_MS = 5_000;
/** How long handover stays off after a READY that was not followed by a registration in time, ms (module docs). */
export const HANDOVER_COOLDOWN_MS = 60_000;

/** The handshake service of one engine group. Create once the sockets are bound; `start()` runs it. */
export class HandshakeService {
  /** Refused messages by reason (a live record). */
  readonly rejected: Record<string, number> = {};

  private readonly opts: HandshakeServiceOptions;
  private readonly init: Uint8Array;
  private readonly ranks = new Map<number, Progress>();
  private stopped = false;
  /** Whether the input ROUTER hands identities over now (`syncHandover`). */
  private handover = false;
  /** `performance.now()` before which handover stays off (a READY without a registration in time), ms. */
  private handoverOffUntil = 0;
  /** Handover refusals (cooldowns started); a live count for tests and the ranks view. */
  handoverCooldowns = 0;
  /** zeromq.js allows one send in flight per socket: INITs go out one after another. */
  private initChain: Promise<void> = Promise.resolve();

  constructor(opts: HandshakeServiceOptions) {
    this.opts = opts;
    this.init = encodeHandshakeInit({ inputs: [opts.endpoints.input], outputs: [opts.endpoints.output] });
  }

  /** Start both receive loops (handshake ROUTER and input ROUTER). They end when the sockets close. */
  start(): Promise<void>[] {
    return [
      this.loop(this.opts.handshakeSocket, (f) => this.onHandshakeMessage(f)),
      this.loop(this.opts.inputSocket, (f) => this.onRegistration(f)),
    ];
  }

  /** Stop: no further callbacks, pending stage timers cleared. The owner closes the sockets. Idempotent. */
  stop(): void {
    this.stopped = true;
    for (const p of this.ranks.values()) if (p.timer !== null) clearTimeout(p.timer);
    this.ranks.clear();
  }

  /**
   * Handover on the input ROUTER exactly while some rank said READY and has not registered yet (see the module docs).
   * A failure to set the option (a closed socket) is ignored: nothing is waiting for it then.
   */
  private syncHandover(): void {
    let pending = false;
    for (const p of this.ranks.values())
      if (p.stage === 'init-sent' && p.ready && p.registration === null) pending = true;
    if (performance.now() < this.handoverOffUntil) pending = false;
    if (this.handover === pending) return;
    this.handover = pending;
    try {
      if (!this.opts.inputSocket.closed) this.opts.inputSocket.handover = pending;
    } catch (error) {
      this.opts.logger.debug(
        { err: errorMessage(error) },
        "handshake service: could not set the input socket's handover",
      );
    }
  }

  /** Engine indexes whose handshake is in progress (HELLO seen, not joined yet), ascending. */
  inProgress(): number[] {
    return [...this.ranks.keys()].sort((a, b) => a - b);
  }

  private async loop(socket: Router, handle: (frames: Uint8Array[]) => void): Promise<void> {
    while (!this.stopped) {
      let frames: Uint8Array[];
      try {
        frames = await socket.receive();
      } catch (error) {
        if (this.stopped || socket.closed) return;
        this.opts.logger.warn({ err: errorMessage(error) }, 'handshake service: receive failed; continuing');
        continue;
      }
      try {
        handle(frames);
      } catch (error) {
        // Every branch above is meant not to throw; this keeps a bug from ending the service.
        this.opts.logger.error({ err: error }, 'handshake service: message handling failed; message ignored');
      }
    }
  }

  /** Count and log one refused message. */
  private reject(reason: HandshakeRejectReason, socket: 'handshake' | 'input', peer: string, detail: string): void {
    this.rejected[reason] = (this.rejected[reason] ?? 0) + 1;
    const address = socket === 'handshake' ? this.opts.endpoints.handshake : this.opts.endpoints.input;
    this.opts.logger.warn(
      { reason, socket: address, peer },
      `handshake message from ${peer} on ${address} ignored (${reason}): ${detail}`,
    );
  }

  /** Checks the `[identity, payload]` shape and a 2-byte identity naming a slot; returns the index or null (refused). */
  private slotOf(frames: Uint8Array[], socket: 'handshake' | 'input'): number | null {
    const peer = peerOf(frames);
    if (frames.length !== 2) {
      this.reject('frame-count', socket, peer, `expected 2 frames [identity, payload], got ${frames.length}`);
      return null;
    }
    const index = decodeEngineIdentity(frames[0]!);
    if (index === null) {
      this.reject(
        'bad-identity',
        socket,
        peer,
        `the routing identity is ${frames[0]!.length} bytes; an engine index takes exactly 2 (engine-wire.md 1.5)`,
      );
      return null;
    }
    if (index >= this.opts.dpSize) {
      this.reject(
        'index-out-of-range',
        socket,
        peer,
        `engine index ${index} is outside 0..${this.opts.dpSize - 1} (this group has ${this.opts.dpSize} rank slot(s); check --zmq-engine-index / --dp-size)`,
      );
      return null;
    }
    return index;
  }

  private onHandshakeMessage(frames: Uint8Array[]): void {
    const index = this.slotOf(frames, 'handshake');
    if (index === null) return;
    const [identity, payload] = frames as [Uint8Array, Uint8Array];
    const peer = describeIdentity(identity);
    let status: 'HELLO' | 'READY';
    try {
      status = decodeReadyMessage(payload).status;
    } catch (error) {
      this.reject(
        'undecodable',
        'handshake',
        peer,
        `not a HELLO/READY message (${payload.length} bytes): ${errorMessage(error)}`,
      );
      return;
    }
    const known = this.ranks.get(index);
    if (status === 'READY') {
      if (known === undefined || known.stage !== 'init-sent' || known.ready) {
        const why =
          known === undefined
            ? 'it did not say HELLO'
            : known.stage === 'admitting'
              ? 'its HELLO is not answered yet'
              : 'it already said READY';
        this.reject('unexpected-ready', 'handshake', peer, `READY out of order: ${why}`);
        return;
      }
      known.ready = true;
      this.opts.logger.debug({ engineIndex: index }, 'handshake: READY received');
      this.progressed(known);
      this.syncHandover();
      return;
    }
    if (known?.stage === 'admitting') {
      this.reject('duplicate-hello', 'handshake', peer, 'a second HELLO while the first is still being admitted');
      return;
    }
    if (known !== undefined) {
      // The rank restarted mid-handshake (or repeated its HELLO): start its handshake over.
      this.opts.logger.warn(
        { engineIndex: index },
        `handshake: HELLO again from ${peer} before it finished; restarting its handshake`,
      );
      this.clearTimer(known);
      this.ranks.delete(index);
      this.syncHandover();
    }
    const p: Progress = {
      engineIndex: index,
      identity: Uint8Array.from(identity),
      stage: 'admitting',
      ready: false,
      registration: null,
      timer: null,
    };
    this.ranks.set(index, p);
    this.opts.host.admitHello(index).then(
      (ok) => this.admitted(p, ok),
      (error: unknown) => {
        this.opts.logger.error({ err: error, engineIndex: index }, 'handshake: admission check failed; HELLO ignored');
        this.admitted(p, false);
      },
    );
  }

  private admitted(p: Progress, ok: boolean): void {
    if (this.stopped || this.ranks.get(p.engineIndex) !== p) return;
    const peer = describeIdentity(p.identity);
    if (!ok) {
      this.ranks.delete(p.engineIndex);
      this.reject(
        'duplicate-live-index',
        'handshake',
        peer,
        `engine index ${p.engineIndex} is held by a live rank that still answers; is a second engine using the same index?`,
      );
      return;
    }
    p.stage = 'init-sent';
    this.armTimer(p, 'READY and the registration');
    this.initChain = this.initChain
      .then(() => this.opts.handshakeSocket.send([p.identity, this.init]))
      .then(
        () => {
          this.opts.logger.debug(
            { engineIndex: p.engineIndex, identity: hex(p.identity) },
            'handshake: HELLO received, INIT sent',
          );
        },
        (error: unknown) => {
          if (this.stopped || this.ranks.get(p.engineIndex) !== p) return;
          this.ranks.delete(p.engineIndex);
          this.clearTimer(p);
          this.reject('init-send-failed', 'handshake', peer, `sending INIT failed: ${errorMessage(error)}`);
          this.opts.host.joinFailed(p.engineIndex, `INIT could not be sent: ${errorMessage(error)}`);
        },
      );
  }

  private onRegistration(frames: Uint8Array[]): void {
    const index = this.slotOf(frames, 'input');
    if (index === null) return;
    const [identity, payload] = frames as [Uint8Array, Uint8Array];
    const peer = describeIdentity(identity);
    const p = this.ranks.get(index);
    if (p === undefined || p.stage !== 'init-sent' || p.registration !== null) {
      const why =
        p === undefined
          ? 'no handshake of this engine is in progress (a registered engine sends nothing else on the input socket)'
          : p.registration !== null
            ? 'it already registered'
            : 'its HELLO is not answered yet';
      this.reject(
        'unexpected-registration',
        'input',
        peer,
        `${payload.length}-byte message on the input socket: ${why}`,
      );
      return;
    }
    if (payload.length === 0) {
      this.reject('empty-ready-response', 'input', peer, 'empty ready response');
      return;
    }
    try {
      p.registration = decodeReadyResponse(payload);
    } catch (error) {
      this.reject(
        'undecodable-ready-response',
        'input',
        peer,
        `ready response does not decode: ${errorMessage(error)}`,
      );
      return;
    }
    // Debug: the engine client logs one info line per joined rank ("DP rank N joined"), with these fields.
    this.opts.logger.debug(
      {
        engineIndex: index,
        version: p.registration.vllmVersion,
        maxModelLen: p.registration.maxModelLen,
        readyForm: p.registration.form,
      },
      'handshake: engine registered on the input socket',
    );
    this.progressed(p);
    this.syncHandover();
  }

  /** A stage completed: join when READY and the registration are both in, else restart the stage timer. */
  private progressed(p: Progress): void {
    if (!p.ready || p.registration === null) {
      if (p.ready)
        this.armTimer(
          p,
          'the registration on the input socket',
          Math.min(this.opts.timeoutMs, this.opts.registrationWindowMs ?? REGISTRATION_AFTER_READY_MS),
        );
      else this.armTimer(p, 'READY');
      return;
    }
    this.clearTimer(p);
    this.ranks.delete(p.engineIndex);
    this.opts.host.joined({ identity: p.identity, engineIndex: p.engineIndex, ready: p.registration });
  }

  private armTimer(p: Progress, waitingFor: string, ms = this.opts.timeoutMs): void {
    this.clearTimer(p);
    const timer = setTimeout(() => {
      p.timer = null;
      if (this.stopped || this.ranks.get(p.engineIndex) !== p) return;
      this.ranks.delete(p.engineIndex);
      if (p.ready && p.registration === null) {
        const cooldownMs = this.opts.handoverCooldownMs ?? HANDOVER_COOLDOWN_MS;
        this.handoverOffUntil = performance.now() + cooldownMs;
        this.handoverCooldowns++;
        this.opts.logger.warn(
          { engineIndex: p.engineIndex, peer: describeIdentity(p.identity), cooldownMs },
          `handshake: ${describeIdentity(p.identity)} said READY but did not register within ${ms} ms; identity handover on the input socket is off for ${cooldownMs} ms (a peer holding it open could take a live rank's identity)`,
        );
      }
      this.syncHandover();
      const detail = `no ${waitingFor} within ${ms} ms of its previous handshake message; back to not joined (it must say HELLO again)`;
      this.reject('handshake-timeout', 'handshake', describeIdentity(p.identity), detail);
      this.opts.host.joinFailed(p.engineIndex, `handshake timed out waiting for ${waitingFor}`);
    }, this.opts.timeoutMs);
    if (typeof timer === 'object' && typeof timer.unref === 'function') timer.unref();
    p.timer = timer;
  }

  private clearTimer(p: Progress): void {
    if (p.timer !== null) clearTimeout(p.timer);
    p.timer = null;
  }
}
