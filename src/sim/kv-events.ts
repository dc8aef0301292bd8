/**
 * A simulated rank's KV-event publisher (docs/reference/kv-events.md; issue 29 part 4): the prefix cache's changes
 * (scheduler.ts `takeKvEvents`) published as the rank's engine publishes them, one batch per scheduler step that has
 * events, on a PUB socket bound at the configured endpoint offset for the rank, with a replay ROUTER keeping the last
 * `buffer_steps` batches. The seq starts at 0 with the process, so a restarted rank looks like a restarted engine.
 *
 * Block hashes, per engine:
 * - TokenSpeed: its FNV-1a 64 page chain over the token ids (../protocols/kv-events/block-keys.ts), so a gateway can
 *   compute them from a prompt, as it can for a real TokenSpeed rank;
 * - vLLM: a 64-bit value derived from the scheduler's chain hash and a seed drawn per process (a real vLLM hash is a
 *   salted sha256 seeded per process), so the gateway must key blocks by their token ids, as it must for real vLLM.
 *
 * The socket work runs on the event loop beside the rank's step timer; a publish never waits (a full PUB queue drops,
 * as libzmq does for a slow subscriber).
 */
import { randomBytes } from 'node:crypto';
import { Publisher, Router } from 'zeromq';
import { Fnv1a64 } from '../protocols/kv-events/block-keys.js';
import type { KvEventsConfig } from '../protocols/kv-events/config.js';
import {
  REPLAY_END_SEQ,
  encodeKvEventBatch,
  kvEventMessageFrames,
  replayRequestStart,
  seqFrame,
  type KvEventFlavor,
  type KvPublishedEvent,
} from '../protocols/kv-events/encode.js';
import { offsetEndpointForRank } from '../protocols/kv-events/endpoints.js';
import type { MinimalLogger } from '../logging.js';
import type { SimKvEvent } from './scheduler.js';

/** Counters of one publisher. */
export interface SimKvPublisherStats {
  batches: number;
  events: number;
  replays: number;
  sendFailures: number;
}

/** Names the scheduler's blocks as `flavor`'s engine does (see the module comment). Pure apart from the seed. */
export class SimBlockNamer {
  private readonly flavor: KvEventFlavor;
  private readonly seed: bigint;
  /** Resident blocks: scheduler hash → engine hash (TokenSpeed's chains over the parent's engine hash). */
  private readonly names = new Map<number, bigint>();

  constructor(flavor: KvEventFlavor, seed: bigint = randomBytes(8).readBigUInt64BE()) {
    this.flavor = flavor;
    this.seed = seed;
  }

  /** The engine events of scheduler events, in order; blocks named on store and forgotten on removal. */
  translate(events: readonly SimKvEvent[], blockSize: number): KvPublishedEvent[] {
    const out: KvPublishedEvent[] = [];
    for (const e of events) {
      if (e.kind === 'cleared') {
        // vLLM announces the reset as one AllBlocksCleared; TokenSpeed's flush removes each page (the encoder writes
        // what each engine writes: `cleared` is dropped there, so the removals carry it).
        const names = e.hashes.map((h) => this.names.get(h)).filter((n): n is bigint => n !== undefined);
        this.names.clear();
        out.push(this.flavor === 'vllm' ? { kind: 'cleared' } : { kind: 'removed', hashes: names });
        continue;
      }
      if (e.kind === 'removed') {
        const name = this.names.get(e.hash);
        if (name === undefined) continue;
        this.names.delete(e.hash);
        out.push({ kind: 'removed', hashes: [name] });
        continue;
      }
      const parent = e.parent === null ? null : (this.names.get(e.parent) ?? null);
      const name = this.name(e.hash, parent, e.tokens);
      this.names.set(e.hash, name);
      out.push({ kind: 'stored', hashes: [name], parent, tokenIds: e.tokens, blockSize });
    }
    return out;
  }

  private name(hash: number, parent: bigint | null, tokens: readonly number[]): bigint {
    if (this.flavor === 'vllm') return ((BigInt(hash) * 0x9e3779b97f4a7c15n) ^ this.seed) & 0xffff_ffff_ffff_ffffn;
    const h = new Fnv1a64();
    h.byte(parent === null ? 0 : 1);
    if (parent !== null) {
      h.u32le(Number(parent & 0xffff_ffffn));
      h.u32le(Number(parent >> 32n));
    }
    h.u32le(tokens.length);
    h.u32le(0);
    for (const t of tokens) h.u32le(t | 0);
    return h.value();
  }
}

/** How long a bind keeps retrying a port that is still in use: `BIND_RETRY_MS` apart, `BIND_RETRIES` times. */
const BIND_RETRY_MS = 50;
const BIND_RETRIES = 40;

/**
 * Binds `socket` to `endpoint`, retrying for up to 2 s while the port is still in use. A rank restarted in this
 * process binds the ports its previous publisher just unbound, and ZeroMQ closes a listener on its I/O thread after
 * `unbind` resolved, so the first bind can still find the port taken. Throws what the last bind threw.
 */
async function bindRetrying(socket: Publisher | Router, endpoint: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await socket.bind(endpoint);
      return;
    } catch (err) {
      if ((err as { code?: unknown }).code !== 'EADDRINUSE' || attempt >= BIND_RETRIES) throw err;
      await new Promise((r) => setTimeout(r, BIND_RETRY_MS));
    }
  }
}

/** One rank's publisher: PUB + replay ROUTER (see the module comment). */
export class SimKvPublisher {
  readonly stats: SimKvPublisherStats = { batches: 0, events: 0, replays: 0, sendFailures: 0 };
  /** The addresses bound (after the rank offset). */
  readonly endpoint: string;
  readonly replayEndpoint: string | null;
  private readonly pub: Publisher;
  private readonly router: Router | null;
  private readonly ring: Array<{ seq: bigint; payload: Uint8Array }> = [];
  private readonly namer: SimBlockNamer;
  private seq = 0n;
  private closed = false;
  private replayLoop: Promise<void> | null = null;

  private constructor(
    private readonly config: KvEventsConfig,
    private readonly rank: number,
    private readonly flavor: KvEventFlavor,
    private readonly blockSize: number,
    private readonly log: MinimalLogger,
  ) {
    this.endpoint = offsetEndpointForRank(config.endpoint, rank);
    this.replayEndpoint = config.replayEndpoint === null ? null : offsetEndpointForRank(config.replayEndpoint, rank);
    this.pub = new Publisher({ sendHighWaterMark: config.hwm, linger: 0 });
    this.router = this.replayEndpoint === null ? null : new Router({ linger: 0 });
    this.namer = new SimBlockNamer(flavor);
  }

  /**
   * Binds the rank's sockets (the endpoint offset by `rank`, as the engines do) and starts answering replays.
   * @throws KvEventsEndpointError for an endpoint the engines refuse for this rank; what zeromq's bind throws
   *   (the port is taken, ...).
   */
  static async bind(
    config: KvEventsConfig,
    rank: number,
    flavor: KvEventFlavor,
    blockSize: number,
    log: MinimalLogger,
  ): Promise<SimKvPublisher> {
    const p = new SimKvPublisher(config, rank, flavor, blockSize, log);
    try {
      await bindRetrying(p.pub, p.endpoint);
      if (p.router !== null) await bindRetrying(p.router, p.replayEndpoint!);
    } catch (err) {
      p.pub.close();
      p.router?.close();
      throw err;
    }
    if (p.router !== null) p.replayLoop = p.serveReplays(p.router);
    return p;
  }

  /** Publishes one batch of the scheduler's events (nothing when there are none). Never waits, never throws. */
  publish(events: readonly SimKvEvent[]): void {
    if (this.closed || events.length === 0) return;
    const translated = this.namer.translate(events, this.blockSize);
    if (translated.length === 0) return;
    const payload = encodeKvEventBatch({ ts: Date.now() / 1000, events: translated, rank: this.rank }, this.flavor);
    const seq = this.seq++;
    this.pub.send(kvEventMessageFrames(this.config.topic, seq, payload)).catch((err: unknown) => {
      this.stats.sendFailures++;
      if (!this.closed) this.log.warn({ engineIndex: this.rank, err: String(err) }, 'KV-event publish failed');
    });
    this.ring.push({ seq, payload });
    if (this.ring.length > this.config.bufferSteps) this.ring.shift();
    this.stats.batches++;
    this.stats.events += translated.length;
  }

  /** Unbinds and closes both sockets (a rank restarted at once can bind the same ports again). Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // close() alone frees the port later, on ZeroMQ's I/O thread; unbind resolves once it is free.
    // A wildcard endpoint is bound as `tcp://0.0.0.0:PORT`: unbind what the socket reports.
    await Promise.allSettled([
      this.pub.unbind(this.pub.lastEndpoint ?? this.endpoint),
      ...(this.router !== null ? [this.router.unbind(this.router.lastEndpoint ?? this.replayEndpoint!)] : []),
    ]);
    this.pub.close();
    this.router?.close();
    await this.replayLoop;
  }

  /** Answers each replay request with the buffered batches from its start seq, then the end marker. */
  private async serveReplays(router: Router): Promise<void> {
    try {
      for await (const frames of router) {
        const start = replayRequestStart(frames);
        if (start === null) continue; // the engines ignore a request without the empty delimiter
        this.stats.replays++;
        const id = frames[0]!;
        const empty = new Uint8Array(0);
        // A snapshot: batches published while the reply is sent are not part of it (the engines' replay runs on
        // the publisher's thread, so nothing is published meanwhile there).
        for (const b of this.ring.filter((x) => x.seq >= start)) {
          await router.send([id, empty, seqFrame(b.seq), b.payload]);
        }
        await router.send([id, empty, seqFrame(REPLAY_END_SEQ), empty]);
      }
    } catch (err) {
      if (!this.closed) this.log.warn({ engineIndex: this.rank, err: String(err) }, 'KV-event replay socket failed');
    }
  }
}
