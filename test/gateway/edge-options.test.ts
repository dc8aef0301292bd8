import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FLOW_CONTROL_DEFAULTS } from '../../src/engine-client/flow-control.js';
import { edgeOptionsOf } from '../../src/gateway/http-app.js';
import { DEFAULT_MAX_CONCURRENT_REQUESTS } from '../../src/server/concurrency.js';

test('with flow control and no explicit cap, the concurrency cap leaves room for the queue of every group', () => {
  assert.equal(edgeOptionsOf({}), undefined, 'no flow control: the edge options as given');
  assert.deepEqual(edgeOptionsOf({ edge: { maxConcurrentRequests: 7 } }), { maxConcurrentRequests: 7 });
  const one = edgeOptionsOf({ flowControl: { enabled: true } });
  assert.equal(one?.maxConcurrentRequests, DEFAULT_MAX_CONCURRENT_REQUESTS + FLOW_CONTROL_DEFAULTS.maxQueued);
  const two = edgeOptionsOf({
    flowControl: { enabled: true, maxQueued: 10 },
    groups: [{}, {}],
    edge: { apiKeys: ['k'] },
  });
  assert.deepEqual(two, { apiKeys: ['k'], maxConcurrentRequests: DEFAULT_MAX_CONCURRENT_REQUESTS + 20 });
  const explicit = edgeOptionsOf({ flowControl: { enabled: true }, edge: { maxConcurrentRequests: 0 } });
  assert.equal(explicit?.maxConcurrentRequests, 0, 'an explicit cap (0: none) is kept');
});
