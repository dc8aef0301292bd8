/**
 * The load-signal guard block of /metrics (issue 12; dp-routing.md 14.1, 14.3): report age, the sole-client guard and
 * its transitions per rank, and nothing for a rank state that does not carry them.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FakeBackend, rankState } from './fake-backend.js';
import { MODEL_ID, makeApp } from './helpers.js';

test('/metrics: load age, sole-client guard state and transitions per rank', async () => {
  const backend = new FakeBackend({ ranks: [0, 1] });
  const base = { dispatchedPinned: 0, dispatchedUnpinned: 0, clampEvents: 0 };
  backend.rankStatesValue = [
    rankState(0, {
      inFlight: 1,
      load: { numRunning: 25, numWaiting: 0, kvCacheUsage: 0.5 },
      ...base,
      loadAgeMs: 1500,
      soleClientGuard: true,
      guardEngagements: 2,
      guardDisengagements: 1,
    }),
    rankState(1, {
      inFlight: 0,
      load: null,
      ...base,
      loadAgeMs: null,
      soleClientGuard: false,
      guardEngagements: 0,
      guardDisengagements: 0,
    }),
  ];
  const { app } = await makeApp({ backend });
  try {
    const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    const has = (line: string) => assert.ok(text.split('\n').includes(line), `missing line: ${line}\n${text}`);
    const w = `model="${MODEL_ID}",group="tokenspeed-0"`;
    has(`model_gateway_rank_load_age_seconds{${w},dp_rank="0"} 1.5`);
    assert.ok(!text.includes(`model_gateway_rank_load_age_seconds{${w},dp_rank="1"}`), 'no report, no age');
    has(`model_gateway_rank_sole_client_guard{${w},dp_rank="0"} 1`);
    has(`model_gateway_rank_sole_client_guard{${w},dp_rank="1"} 0`);
    has(`model_gateway_rank_sole_client_guard_transitions_total{${w},dp_rank="0",transition="engaged"} 2`);
    has(`model_gateway_rank_sole_client_guard_transitions_total{${w},dp_rank="0",transition="disengaged"} 1`);
    // A rank state without the guard fields (another RankState source) exports none of them.
    backend.rankStatesValue = [rankState(0, { inFlight: 0, load: null, ...base })];
    const bare = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    assert.ok(!bare.includes('model_gateway_rank_sole_client_guard{'));
    assert.ok(!bare.includes('model_gateway_rank_sole_client_guard_transitions_total{'));
  } finally {
    await app.close();
  }
});
