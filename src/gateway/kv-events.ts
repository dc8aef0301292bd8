/**
 * One engine group's KV-cache event streams (issue 29; docs/reference/kv-events.md): the group's exact index
 * (engine-client/kv-cache-view.ts) and one subscriber per DP rank (transport/kv-event-subscriber.ts) feeding it, from
 * the group's `kvEventsConfig` (every rank at start) or, without one, from a joining rank's ready response when the
 * engine reports its config there (newer vLLM). Only `cache_aware` reads the index, so other policies subscribe to
 * nothing: the streams would cost CPU for no decision.
 */
import type { Logger } from 'pino';
import type { ConnectedEngine } from '../engine-client/link.js';
import { KvCacheView } from '../engine-client/kv-cache-view.js';
import { parseKvEventsConfig, type KvEventsConfig } from '../protocols/kv-events/config.js';
import { dialAddress, offsetEndpointForRank } from '../protocols/kv-events/endpoints.js';
import type { EngineFamily } from '../server/backend.js';
import { KvEventSubscriber } from '../transport/kv-event-subscriber.js';

/** The host a wildcard endpoint is dialled on: the engines run on the gateway's host. */
const ENGINE_HOST = '127.0.0.1';

/** A group's KV-event streams and exact index (see the module comment). */
export interface GroupKvEvents {
  readonly view: KvCacheView;
  /** A rank joined: subscribe to it from its ready response's config when the group has none configured. */
  onJoined(engine: ConnectedEngine): void;
  /** Closes every subscriber. Idempotent. */
  close(): Promise<void>;
}

/**
 * The KV-event streams of a group of `engine` ranks (`dpSize` of them) configured with `config` (null: only from
 * ready responses), subscribed when `subscribe` (the group's policy is `cache_aware`). Subscribers dial at once; the
 * engines' publishers may bind later (zeromq reconnects).
 */
export function startGroupKvEvents(
  engine: EngineFamily,
  dpSize: number,
  config: KvEventsConfig | null,
  subscribe: boolean,
  log: Logger,
): GroupKvEvents {
  const kvLog = log.child({ component: 'kv-events' });
  const view = new KvCacheView({
    keying: engine === 'tokenspeed' ? 'tokenspeed' : 'vllm',
    onLiveness: (rank, live, reason) =>
      live
        ? kvLog.info({ engineIndex: rank }, 'KV events: the exact index of the rank is live again')
        : kvLog.warn(
            { engineIndex: rank, reason },
            'KV events: the rank is scored by the approximate index until its stream is complete again',
          ),
  });
  const subscribers = new Map<number, KvEventSubscriber>();
  const add = (rank: number, c: KvEventsConfig, blockSize: number | null): void => {
    if (subscribers.has(rank)) return;
    const events = dialAddress(offsetEndpointForRank(c.endpoint, rank), ENGINE_HOST);
    const replay =
      c.replayEndpoint === null ? null : dialAddress(offsetEndpointForRank(c.replayEndpoint, rank), ENGINE_HOST);
    const sub = new KvEventSubscriber({
      rank,
      eventsAddress: events,
      replayAddress: replay,
      topic: c.topic,
      sink: view,
      counters: view.streams,
      logger: kvLog,
      // The replay socket must hold the publisher's whole ring (docs/reference/kv-events.md 2).
      receiveHighWaterMark: Math.max(100_000, c.bufferSteps + 1), // ≤ 2^31 − 1: parseKvEventsConfig bounds it
    });
    sub.start();
    subscribers.set(rank, sub);
    view.attach(rank, blockSize);
    kvLog.info({ engineIndex: rank, events, replay, topic: c.topic }, 'KV events: subscribed to the rank');
  };
  if (config !== null && !subscribe) {
    kvLog.info('KV events configured, but only the cache_aware policy routes on them: not subscribed');
  }
  if (config !== null && subscribe) for (let rank = 0; rank < dpSize; rank++) add(rank, config, null);
  let closed = false;
  return {
    view,
    onJoined(e: ConnectedEngine): void {
      if (closed || !subscribe) return;
      const granularity = e.ready.prefixGranularity;
      if (subscribers.has(e.engineIndex)) {
        view.attach(e.engineIndex, granularity);
        return;
      }
      const reported = e.ready.kvEventsConfig;
      if (config !== null || reported === null || reported === undefined) return;
      try {
        const c = parseKvEventsConfig(reported);
        if (c.enabled) add(e.engineIndex, c, granularity);
      } catch (err) {
        kvLog.warn(
          { engineIndex: e.engineIndex, err: (err as Error).message },
          'KV events: the kv_events_config of the ready response is unusable; the rank is scored by the approximate index',
        );
      }
    },
    async close(): Promise<void> {
      closed = true;
      await Promise.all([...subscribers.values()].map((s) => s.close()));
      subscribers.clear();
    },
  };
}
