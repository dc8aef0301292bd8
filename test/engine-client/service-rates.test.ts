/**
 * The engine client's own per-rank service rates (src/engine-client/service-rates.ts): ITL from row gaps, the pooled
 * prefill cost from first rows, output lengths, and the bookkeeping that keeps it bounded.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MIN_PREFILL_SAMPLE_TOKENS, ServiceRates } from '../../src/engine-client/service-rates.js';
import type { EngineOutputRow } from '../../src/protocols/types.js';

function out(
  requestId: string,
  tokens = 1,
  opts: { finish?: boolean; prompt?: number | null; cached?: number | null } = {},
): EngineOutputRow {
  return {
    requestId,
    newTokenIds: Array.from({ length: tokens }, () => 7),
    finishReason: opts.finish === true ? 'length' : null,
    promptTokens: opts.prompt === undefined ? 100 : opts.prompt,
    completionTokens: null,
    cachedTokens: opts.cached === undefined ? 0 : opts.cached,
    logprobs: [],
  };
}

const near = (a: number | null, b: number): boolean => a !== null && Math.abs(a - b) < 1e-9;

test('ITL: row gaps over the tokens they carry, per rank; bursts and multi-token rows average out', () => {
  const r = new ServiceRates();
  assert.deepEqual(r.view(0), { itlMs: null, prefillMsPerToken: null, outputTokens: null }, 'nothing measured');
  r.dispatched(0, 'a', 100, 0);
  r.dispatched(1, 'b', 100, 0);
  r.observe(0, [out('a')], 5); // first row: no gap yet
  r.observe(0, [out('a')], 15);
  r.observe(0, [out('a', 3)], 45); // a row of 3 tokens after 30 ms: 10 ms each
  assert.ok(near(r.view(0).itlMs, 10));
  r.observe(1, [out('b')], 5);
  r.observe(1, [out('b')], 45); // rows handled late in one loop turn: 40 then 0
  r.observe(1, [out('b')], 45);
  const itl1 = r.view(1).itlMs!;
  assert.ok(itl1 > 19.8 && itl1 <= 20, `the decayed sums keep about the mean of 40 and 0 ms: ${itl1}`);
  r.observe(1, [out('a')], 60);
  assert.ok(near(r.view(0).itlMs, 10), "a row from another rank than the request's is ignored");
});

test('prefill: TTFT − 1.5 ITL over the uncached tokens, pooled as a ratio to ITL; short or unmeasured prefills skipped', () => {
  const r = new ServiceRates();
  r.dispatched(0, 'warm', 10, 0);
  r.observe(0, [out('warm', 1, { prompt: 10 })], 1);
  r.observe(0, [out('warm')], 11); // rank 0: ITL 10 ms
  r.dispatched(1, 'early', 1000, 0);
  r.observe(1, [out('early', 1, { prompt: 1000 })], 50);
  assert.equal(r.view(0).prefillMsPerToken, null, 'rank 1 had no ITL: no prefill sample from it');
  r.dispatched(0, 'p', 1200, 100);
  r.observe(0, [out('p', 1, { prompt: 1200, cached: 200 })], 135); // TTFT 35 = 15 + 1000 × 0.02
  assert.ok(near(r.view(0).prefillMsPerToken, 0.02));
  r.dispatched(0, 'hit', 1200, 200);
  r.observe(0, [out('hit', 1, { prompt: 1200, cached: 1200 - MIN_PREFILL_SAMPLE_TOKENS + 1 })], 400);
  assert.ok(near(r.view(0).prefillMsPerToken, 0.02), 'a near-complete hit is timing noise, not a prefill sample');
  // Rank 1 gets an ITL of 20 ms: its prefill cost is the pooled ratio (0.002 ITL per token) times its ITL.
  r.dispatched(1, 'late', 10, 0);
  r.observe(1, [out('late')], 10);
  r.observe(1, [out('late')], 30);
  assert.ok(near(r.view(1).prefillMsPerToken, 0.04));
  // The pooled ratio survives one rank's death; once every measured rank is forgotten (the group restarted), it goes.
  r.forget(1);
  assert.ok(near(r.view(0).prefillMsPerToken, 0.02), 'rank 0 still measures with the pooled ratio');
  r.forget(0);
  r.dispatched(0, 'new', 10, 500);
  r.observe(0, [out('new')], 501);
  r.observe(0, [out('new')], 511);
  assert.ok(near(r.view(0).itlMs, 10));
  assert.equal(r.view(0).prefillMsPerToken, null, "a new process's rank has no prefill cost from the old processes");
});

test('output length per rank from terminal rows; every retirement path forgets the request; forget drops a rank', () => {
  const r = new ServiceRates();
  r.dispatched(0, 'a', 10, 0);
  r.observe(0, [out('a', 4)], 1);
  r.observe(0, [out('a', 6, { finish: true })], 2);
  assert.equal(r.view(0).outputTokens, 10);
  assert.equal(r.trackedRequests, 0, 'a terminal row ends the entry');
  r.dispatched(0, 'b', 10, 0);
  r.dispatched(0, 'c', 10, 0);
  r.dispatched(1, 'd', 10, 0);
  r.end('b');
  r.end('unknown');
  assert.equal(r.trackedRequests, 2);
  r.observe(0, [out('b', 1, { finish: true })], 3);
  assert.equal(r.view(0).outputTokens, 10, 'a released request leaves no sample');
  r.observe(1, [out('d')], 1);
  r.observe(1, [out('d')], 11);
  r.forget(1);
  assert.deepEqual(r.view(1), { itlMs: null, prefillMsPerToken: null, outputTokens: null });
  assert.equal(r.trackedRequests, 1, "the forgotten rank's requests are gone, the other rank's kept");
  r.clearPending();
  assert.equal(r.trackedRequests, 0);
  assert.equal(r.view(0).outputTokens, 10, 'rates outlive the requests');
});

test('observeRow: rows reach the sample dispatched returned (no id lookup); a forgotten, ended or re-dispatched sample takes nothing', () => {
  const r = new ServiceRates();
  const a = r.dispatched(0, 'a', 10, 0);
  r.observeRow(0, a, out('a'), 5);
  r.observeRow(0, a, out('a', 2), 25); // 20 ms for 2 tokens
  assert.ok(near(r.view(0).itlMs, 10));
  r.observeRow(1, a, out('a'), 30);
  assert.equal(r.view(1).itlMs, null, "a row from another rank than the sample's is ignored");
  r.observeRow(0, a, out('a', 1, { finish: true }), 35);
  assert.equal(r.view(0).outputTokens, 4);
  assert.equal(r.trackedRequests, 0, 'the terminal row ends the sample');
  r.observeRow(0, a, out('a', 5, { finish: true }), 40);
  assert.equal(r.view(0).outputTokens, 4, 'an ended sample takes no more rows');

  const first = r.dispatched(0, 'b', 10, 0);
  const again = r.dispatched(0, 'b', 10, 50); // placed again after its ADD reached no engine
  assert.equal(r.trackedRequests, 1);
  r.observeRow(0, first, out('b', 1, { finish: true }), 60);
  assert.equal(r.view(0).outputTokens, 4, 'the replaced sample is not tracked any more');
  assert.equal(r.trackedRequests, 1, 'and does not end the new one');
  r.end('b');
  r.observeRow(0, again, out('b', 1, { finish: true }), 70);
  assert.equal(r.view(0).outputTokens, 4, 'end() drops the sample');

  const c = r.dispatched(1, 'c', 10, 0);
  r.forget(1);
  r.observeRow(1, c, out('c'), 1);
  r.observeRow(1, c, out('c'), 11);
  assert.equal(r.view(1).itlMs, null, "a forgotten rank's samples take no rows");
  const d = r.dispatched(0, 'd', 10, 0);
  r.clearPending();
  r.observeRow(0, d, out('d', 1, { finish: true }), 1);
  assert.equal(r.view(0).outputTokens, 4, 'clearPending drops every sample');
});
