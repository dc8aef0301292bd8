/**
 * The pure scorer and the load policy (dp-routing.md sections 9.2-9.4).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createLoadPolicy, loadScore, lowestScorePosition, type RankView } from '../../src/engine-client/policy.js';
import { load, req } from './fakes.js';

const view = (engineIndex: number | null, inFlight: number, l: RankView['load'] = null): RankView => ({
  engineIndex,
  inFlight,
  load: l,
});

test('9.4 KV pressure: r0 (3 running, 5 waiting, kv 0.8, own 1) scores 17, an unreported idle r1 scores 0', () => {
  const r0 = view(0, 1, load(3, 5, 0.8));
  assert.ok(Math.abs(loadScore(r0) - 17) < 1e-9, `score ${loadScore(r0)}`);
  assert.equal(loadScore(view(1, 0)), 0);
  assert.equal(lowestScorePosition([r0, view(1, 0)], 0), 1);
  // With KV <= 0.5 the penalty vanishes: score 8.
  assert.equal(loadScore(view(0, 1, load(3, 5, 0.5))), 8);
  assert.equal(loadScore(view(0, 1, load(3, 5, 0.2))), 8);
});

test('9.4 floor beats a stale report: r0 reports (0,0) with own 4 → 4; r1 (2,1,kv 0.9) → 5.4; r0 wins', () => {
  const r0 = view(0, 4, load(0, 0, 0));
  const r1 = view(1, 0, load(2, 1, 0.9));
  assert.equal(loadScore(r0), 4);
  assert.ok(Math.abs(loadScore(r1) - 5.4) < 1e-9);
  assert.equal(lowestScorePosition([r0, r1], 0), 0);
  assert.equal(lowestScorePosition([r0, r1], 1), 0);
});

test('the KV penalty applies only with waiting > 0', () => {
  assert.equal(loadScore(view(0, 0, load(4, 0, 1.0))), 4);
  assert.ok(Math.abs(loadScore(view(0, 0, load(4, 1, 1.0))) - 8) < 1e-9); // 5 + 1*6*0.5
});

test('an engine without an index counts as idle and unreported', () => {
  assert.equal(loadScore(view(null, 9, load(9, 9, 1))), 0);
});

test('non-finite report fields count as 0 instead of poisoning the comparison', () => {
  assert.equal(loadScore(view(0, 2, load(Number.NaN, 0, Number.NaN))), 2);
});

test('ties go to the earliest rank in the scan; only a strictly lower score replaces the best', () => {
  const ranks = [view(0, 1), view(1, 1), view(2, 1)];
  assert.equal(lowestScorePosition(ranks, 0), 0);
  assert.equal(lowestScorePosition(ranks, 1), 1);
  assert.equal(lowestScorePosition(ranks, 2), 2);
  assert.equal(lowestScorePosition(ranks, 5), 2);
  assert.equal(lowestScorePosition(ranks, -1), 2);
  const skew = [view(0, 2), view(1, 1), view(2, 1)];
  assert.equal(lowestScorePosition(skew, 0), 1);
  assert.equal(lowestScorePosition(skew, 2), 2);
  assert.throws(() => lowestScorePosition([], 0), RangeError);
});

test('the load policy rotates its scan start by one on every selection (vLLM #47420)', () => {
  const policy = createLoadPolicy();
  assert.equal(policy.name, 'load');
  assert.notEqual(policy.releaseClamp, false);
  const tied = [view(0, 0), view(1, 0), view(2, 0)];
  const picks = Array.from({ length: 7 }, () => policy.select(tied, req('x')));
  assert.deepEqual(picks, [0, 1, 2, 0, 1, 2, 0]);
  // A fresh policy starts at 0 again; policies do not share the counter.
  assert.equal(createLoadPolicy().select(tied, req('y')), 0);
  assert.throws(() => policy.select([], req('z')), RangeError);
});

test('the policy never modifies the views (stored load is never modified by selection)', () => {
  const policy = createLoadPolicy();
  const l = Object.freeze(load(3, 5, 0.9));
  const ranks = [Object.freeze(view(0, 1, l)), Object.freeze(view(1, 0))];
  assert.equal(policy.select(ranks, req('a')), 1);
  assert.deepEqual(l, load(3, 5, 0.9));
});
