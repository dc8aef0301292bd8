/**
 * The `--kv-events-config` JSON (src/protocols/kv-events/config.ts) and what a gateway group accepts of it
 * (src/gateway/options.ts `resolveGroups`): the engines' defaults, the keys vLLM refuses, counts ZeroMQ can take,
 * endpoints every rank can bind (offset ports within 65535) and the gateway can dial (a wildcard host).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { resolveGroups } from '../../src/gateway/options.js';
import { KV_EVENTS_DEFAULTS, kvEventsConfigObject, parseKvEventsConfig } from '../../src/protocols/kv-events/config.js';
import { KvEventsEndpointError, offsetEndpointForRank } from '../../src/protocols/kv-events/endpoints.js';

describe('parseKvEventsConfig', () => {
  test('the engines’ defaults; enabled only with the switch and a zmq publisher', () => {
    assert.deepEqual(parseKvEventsConfig('{}'), KV_EVENTS_DEFAULTS);
    const on = parseKvEventsConfig({ enable_kv_cache_events: true, replay_endpoint: 'tcp://*:5567', topic: 'kv' });
    assert.deepEqual(on, { ...KV_EVENTS_DEFAULTS, enabled: true, replayEndpoint: 'tcp://*:5567', topic: 'kv' });
    assert.equal(parseKvEventsConfig({ enable_kv_cache_events: true, publisher: 'null' }).enabled, false);
    assert.deepEqual(parseKvEventsConfig(kvEventsConfigObject(on)), on, 'the engines’ keys round-trip');
  });

  test('refused with the field named: not JSON, unknown keys, wrong types, counts ZeroMQ cannot take', () => {
    const bad: Array<[string | Record<string, unknown>, RegExp]> = [
      ['{', /not JSON/],
      ['[]', /JSON object/],
      [{ enable_kv_cache_event: true }, /unknown key "enable_kv_cache_event"/],
      [{ enable_kv_cache_events: 'yes' }, /enable_kv_cache_events must be a boolean/],
      [{ publisher: 'kafka' }, /publisher/],
      [{ endpoint: 5557 }, /endpoint must be a string/],
      [{ endpoint: '' }, /endpoint must not be empty/],
      [{ buffer_steps: 0 }, /buffer_steps must be an integer from 1/],
      [{ buffer_steps: 2 ** 31 - 1 }, /buffer_steps must be an integer from 1 to 2147483646/],
      [{ hwm: 3_000_000_000 }, /hwm/],
      [{ max_queue_size: 1.5 }, /max_queue_size/],
    ];
    for (const [value, message] of bad) assert.throws(() => parseKvEventsConfig(value), message, JSON.stringify(value));
  });
});

describe('a group’s kvEventsConfig', () => {
  const on = (extra: Record<string, unknown>) => ({ enable_kv_cache_events: true, ...extra });
  test('accepted: wildcard endpoints whose offset ports fit; off when disabled', () => {
    const [g] = resolveGroups({ sim: 2, kvEventsConfig: on({ replay_endpoint: 'tcp://*:5567' }) });
    assert.equal(g!.kvEvents?.endpoint, 'tcp://*:5557');
    assert.equal(resolveGroups({ sim: 2, kvEventsConfig: '{"enable_kv_cache_events": false}' })[0]!.kvEvents, null);
  });

  test('refused before anything starts: ports past 65535 or 0, a host, ipc with two ranks, overlapping ranges', () => {
    const bad: Array<[Record<string, unknown>, RegExp]> = [
      [on({ endpoint: 'tcp://*:65535' }), /past 65535/],
      [on({ endpoint: 'tcp://*:0' }), /port from 1 to 65535/],
      [on({ endpoint: 'tcp://127.0.0.1:5557' }), /tcp:\/\/\*:PORT/],
      [on({ endpoint: 'tcp://[::]:5557' }), /IPv6 wildcard/],
      [on({ endpoint: 'ipc:///tmp/kv' }), /cannot be offset/],
      [on({ endpoint: 'tcp://*:5557', replay_endpoint: 'tcp://*:5558' }), /both tcp:\/\/127.0.0.1:5558/],
    ];
    for (const [config, message] of bad) {
      assert.throws(() => resolveGroups({ sim: 2, kvEventsConfig: config }), message, JSON.stringify(config));
    }
    assert.throws(() => offsetEndpointForRank('tcp://*:65535', 1), KvEventsEndpointError);
    assert.equal(offsetEndpointForRank('tcp://*:65534', 1), 'tcp://*:65535');
  });
});
