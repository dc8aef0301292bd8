/**
 * The engines' `--kv-events-config` JSON (docs/reference/kv-events.md 1): one declaration of its fields and defaults,
 * read by the simulated ranks (which publish as the engines do), by the gateway's group option of the same name (the
 * same JSON the group's engines were started with) and from a ready response that carries it (newer vLLM).
 *
 * Fields (vLLM `vllm/config/kv_events.py` `KVEventsConfig`; TokenSpeed has the same ones): `enable_kv_cache_events`
 * (false: no events), `publisher` (`zmq`, or `null` for none; absent = `zmq` when enabled), `endpoint`
 * (`tcp://*:5557`), `replay_endpoint` (none), `buffer_steps` (10 000 batches kept for replay), `hwm` (100 000),
 * `max_queue_size` (100 000), `topic` (''). vLLM refuses unknown keys, and so does this parser: a typo would otherwise
 * leave events off without a word.
 *
 * Pure; no I/O.
 */

/** A `--kv-events-config` after defaults. */
export interface KvEventsConfig {
  /** Whether the ranks publish (`enable_kv_cache_events` and a `zmq` publisher). */
  readonly enabled: boolean;
  /** The events endpoint as configured, before the per-rank offset. */
  readonly endpoint: string;
  /** The replay endpoint as configured, or null. */
  readonly replayEndpoint: string | null;
  /** Batches a publisher keeps for replay. */
  readonly bufferSteps: number;
  /** The PUB socket's high-water mark (messages). */
  readonly hwm: number;
  readonly topic: string;
}

/** The engines' defaults. */
export const KV_EVENTS_DEFAULTS: KvEventsConfig = Object.freeze({
  enabled: false,
  endpoint: 'tcp://*:5557',
  replayEndpoint: null,
  bufferSteps: 10_000,
  hwm: 100_000,
  topic: '',
});

/** The largest count a config may give: ZeroMQ's high-water marks are C ints; the replay queue needs one more. */
const MAX_COUNT = 2 ** 31 - 2;

const KEYS = new Set([
  'enable_kv_cache_events',
  'publisher',
  'endpoint',
  'replay_endpoint',
  'buffer_steps',
  'hwm',
  'max_queue_size',
  'topic',
]);

/**
 * The configuration a `--kv-events-config` value (a JSON object, or the object itself, as a ready response carries
 * it) describes, with the engines' defaults.
 * @throws RangeError naming the field: not a JSON object, an unknown key, a field of the wrong type, a publisher other
 *   than `zmq`/`null`, a count that is not an integer from 1 to 2^31 − 2.
 */
export function parseKvEventsConfig(value: string | Record<string, unknown>): KvEventsConfig {
  let obj: unknown = value;
  if (typeof value === 'string') {
    try {
      obj = JSON.parse(value);
    } catch (err) {
      throw new RangeError(`KV-events config is not JSON: ${(err as Error).message}`);
    }
  }
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) {
    throw new RangeError('KV-events config must be a JSON object, e.g. {"enable_kv_cache_events": true}');
  }
  const o = obj as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (!KEYS.has(k)) throw new RangeError(`KV-events config: unknown key ${JSON.stringify(k)} (known: ${[...KEYS]})`);
  }
  const str = (k: string, dflt: string | null): string | null => {
    const v = o[k];
    if (v === undefined || v === null) return dflt;
    if (typeof v !== 'string') throw new RangeError(`KV-events config: ${k} must be a string`);
    return v;
  };
  const count = (k: string, dflt: number): number => {
    const v = o[k];
    if (v === undefined || v === null) return dflt;
    // ZeroMQ takes its queue limits as 32-bit ints (the subscriber's receive queue holds buffer_steps + 1).
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1 || v > MAX_COUNT) {
      throw new RangeError(
        `KV-events config: ${k} must be an integer from 1 to ${MAX_COUNT}, got ${JSON.stringify(v)}`,
      );
    }
    return v;
  };
  const enable = o.enable_kv_cache_events ?? false;
  if (typeof enable !== 'boolean') throw new RangeError('KV-events config: enable_kv_cache_events must be a boolean');
  const publisher = str('publisher', null);
  if (publisher !== null && publisher !== 'zmq' && publisher !== 'null') {
    throw new RangeError(`KV-events config: publisher must be "zmq" or "null", got ${JSON.stringify(publisher)}`);
  }
  count('max_queue_size', 100_000);
  const endpoint = str('endpoint', KV_EVENTS_DEFAULTS.endpoint)!;
  if (endpoint === '') throw new RangeError('KV-events config: endpoint must not be empty');
  const replay = str('replay_endpoint', null);
  return {
    enabled: enable && publisher !== 'null',
    endpoint,
    replayEndpoint: replay === '' ? null : replay,
    bufferSteps: count('buffer_steps', KV_EVENTS_DEFAULTS.bufferSteps),
    hwm: count('hwm', KV_EVENTS_DEFAULTS.hwm),
    topic: str('topic', '')!,
  };
}

/**
 * `config` in the engines' own keys (what `--kv-events-config` takes and a newer vLLM ready response carries), so
 * `parseKvEventsConfig(kvEventsConfigObject(c))` equals `c`. Pure.
 */
export function kvEventsConfigObject(config: KvEventsConfig): Record<string, unknown> {
  return {
    enable_kv_cache_events: config.enabled,
    publisher: config.enabled ? 'zmq' : 'null',
    endpoint: config.endpoint,
    replay_endpoint: config.replayEndpoint,
    buffer_steps: config.bufferSteps,
    hwm: config.hwm,
    topic: config.topic,
  };
}
