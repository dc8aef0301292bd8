/**
 * The `lora_aware` policy (src/engine-client/lora-aware.ts): a request for an adapter goes to a rank warm for it
 * (one of its last `maxLoras` dispatched adapters) within the slack of the least-loaded rank, else where `load` would
 * send it; requests without an adapter are scored as `load` scores them; a forgotten rank is cold again.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createLoraAwarePolicy } from '../../src/engine-client/lora-aware.js';
import { createLoadPolicy, type RankView } from '../../src/engine-client/policy.js';
import { DEFAULT_SAMPLING, type GenerateRequest } from '../../src/protocols/types.js';

const req = (adapter: number | null): GenerateRequest => ({
  requestId: 'r',
  promptTokenIds: [1],
  sampling: DEFAULT_SAMPLING,
  stream: true,
  returnLogprob: false,
  ...(adapter === null ? {} : { lora: { name: `a${adapter}`, id: adapter, path: '/p', baseModelName: null } }),
});
const ranks = (inFlight: number[]): RankView[] => inFlight.map((n, i) => ({ engineIndex: i, inFlight: n, load: null }));

test('warm within the slack wins; a warm rank past the slack loses to the least-loaded one', () => {
  const p = createLoraAwarePolicy({ maxLoras: 2, loraSlack: 3 });
  p.onDispatch!(2, req(5));
  assert.equal(p.select(ranks([0, 1, 3, 1]), req(5)), 2, 'rank 2 holds adapter 5 and is within 3 of the best');
  assert.equal(p.select(ranks([0, 1, 4, 1]), req(5)), 0, 'past the slack: the least-loaded rank');
  assert.equal(p.select(ranks([0, 1, 3, 1]), req(6)), 0, "a cold adapter: load's choice");
  assert.deepEqual(p.stats, { warm: 1, cold: 2, base: 0 });
});

test('a rank stays warm for its last maxLoras adapters only, and forgetting it makes it cold', () => {
  const p = createLoraAwarePolicy({ maxLoras: 2, loraSlack: 10 });
  for (const a of [1, 2, 3]) p.onDispatch!(1, req(a));
  assert.equal(p.select(ranks([0, 2]), req(1)), 0, 'adapter 1 was evicted by 2 and 3');
  assert.equal(p.select(ranks([0, 2]), req(3)), 1);
  p.forgetRank!(1);
  assert.equal(p.select(ranks([0, 2]), req(3)), 0);
});

test('requests without an adapter go where load sends them, with the same rotation', () => {
  const aware = createLoraAwarePolicy();
  const load = createLoadPolicy();
  const views = ranks([1, 1, 1, 1]);
  for (let i = 0; i < 8; i++) assert.equal(aware.select(views, req(null)), load.select(views, req(null)));
  assert.equal(aware.stats.base, 8);
  assert.throws(() => createLoraAwarePolicy({ maxLoras: 0 }), RangeError);
});

test('a rank whose report shows the adapter is warm; a cold adapter goes to a rank with a free slot', () => {
  const p = createLoraAwarePolicy({ maxLoras: 1, loraSlack: 5 });
  const views: RankView[] = [
    { engineIndex: 0, inFlight: 0, load: null, adapters: { running: { a9: 2 }, waiting: {} } },
    { engineIndex: 1, inFlight: 1, load: null, adapters: null },
    { engineIndex: 2, inFlight: 2, load: null, adapters: { running: {}, waiting: { a5: 1 } } },
  ];
  assert.equal(p.select(views, req(5)), 2, 'rank 2 holds a waiting request for a5');
  assert.equal(p.select(views, req(7)), 1, 'rank 0 runs another adapter in its only slot: rank 1 is free');
});
