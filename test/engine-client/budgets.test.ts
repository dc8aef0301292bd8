import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  BudgetLedger,
  MAX_ACCOUNTS,
  formatResetMs,
  snapshotFromNumbers,
  snapshotNumbers,
} from '../../src/engine-client/budgets.js';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { batch, req, row, setup, tick } from './fakes.js';

function ledger(): { l: BudgetLedger; clock: { t: number } } {
  const clock = { t: 1000 };
  return { l: new BudgetLedger(() => clock.t), clock };
}

function refusal(fn: () => unknown): EngineClientError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof EngineClientError);
    assert.equal(err.kind, 'rate-limited');
    return err;
  }
  assert.fail('expected a rate-limited refusal');
}

test('requests per minute: the limit passes, the next waits for a refill of one request', { timeout: 5000 }, () => {
  const { l, clock } = ledger();
  const limits = { requestsPerMinute: 3, tokensPerMinute: null };
  const snaps = [1, 2, 3].map(() => l.admit('a', limits, 10)!.snapshot);
  assert.deepEqual(
    snaps.map((s) => s.requests!.remaining),
    [2, 1, 0],
  );
  assert.equal(snaps[0]!.tokens, null);
  assert.equal(snaps[2]!.requests!.resetMs, 60_000, 'three requests take a whole minute to come back');
  const err = refusal(() => l.admit('a', limits, 10));
  assert.equal(err.retryAfterMs, 20_000, 'one request comes back every 20 s');
  assert.deepEqual(err.rateLimits, [3, 0, 60_000, -1, -1, -1]);
  assert.equal(l.refusals.requests, 1);
  // Another tenant has its own budget.
  assert.ok(l.admit('b', limits, 10) !== null);
  clock.t += 20_000;
  assert.equal(l.admit('a', limits, 10)!.snapshot.requests!.remaining, 0);
});

test('tokens per minute: the prompt at admission, completion tokens as they come, debt blocks the next', () => {
  const { l, clock } = ledger();
  const limits = { requestsPerMinute: null, tokensPerMinute: 600 };
  const c = l.admit('a', limits, 100)!;
  assert.deepEqual(c.snapshot.tokens, { limit: 600, remaining: 500, resetMs: 10_000 });
  c.spend(450);
  c.spend(100);
  // 50 below zero: even a 1-token prompt waits until 51 tokens came back (10 tokens per second).
  const err = refusal(() => l.admit('a', limits, 1));
  assert.equal(err.retryAfterMs, 5_100);
  assert.deepEqual(snapshotFromNumbers(err.rateLimits!)!.tokens, { limit: 600, remaining: 0, resetMs: 65_000 });
  clock.t += 5_100;
  assert.ok(l.admit('a', limits, 1) !== null);
  // A prompt the whole budget cannot hold is refused without a retry time: waiting cannot help.
  const never = refusal(() => l.admit('a', limits, 601));
  assert.equal(never.retryAfterMs, undefined);
  assert.match(never.message, /can never pass/);
  assert.equal(l.refusals.tokens, 2);
});

test('a refund gives back the request and the prompt once; siblings are charged completion tokens only', () => {
  const { l } = ledger();
  const limits = { requestsPerMinute: 2, tokensPerMinute: 1000 };
  const c = l.admit('a', limits, 300)!;
  c.refund();
  c.refund();
  const d = l.admit('a', limits, 300)!;
  assert.equal(d.snapshot.requests!.remaining, 1);
  assert.equal(d.snapshot.tokens!.remaining, 700);
  const sibling = l.admit('a', limits, 300, false)!;
  assert.equal(sibling.snapshot.requests!.remaining, 1, 'a sibling takes no request');
  assert.equal(sibling.snapshot.tokens!.remaining, 700, 'nor the prompt again');
  sibling.spend(200);
  sibling.refund(); // nothing to give back
  assert.equal(l.admit('a', limits, 0)!.snapshot.tokens!.remaining, 500);
});

test('a lowered limit clamps what is left; a removed one is dropped; no limits, no account', () => {
  const { l } = ledger();
  l.admit('a', { requestsPerMinute: 100, tokensPerMinute: null }, 0);
  const s = l.admit('a', { requestsPerMinute: 10, tokensPerMinute: null }, 0)!.snapshot;
  assert.deepEqual(s.requests, { limit: 10, remaining: 9, resetMs: 6_000 });
  assert.equal(l.admit('a', { requestsPerMinute: null, tokensPerMinute: 50 }, 0)!.snapshot.requests, null);
  assert.equal(l.admit('z', { requestsPerMinute: null, tokensPerMinute: null }, 5), null);
  assert.equal(l.size, 1);
});

test('accounts back at full are pruned past MAX_ACCOUNTS; busy ones stay', () => {
  const { l, clock } = ledger();
  const limits = { requestsPerMinute: 1, tokensPerMinute: null };
  l.admit('busy', { requestsPerMinute: 1000, tokensPerMinute: null }, 0);
  for (let i = 0; i < MAX_ACCOUNTS - 1; i++) l.admit(`t${i}`, limits, 0);
  assert.equal(l.size, MAX_ACCOUNTS);
  clock.t += 60_000; // every 1-per-minute account is full again
  l.admit('busy', { requestsPerMinute: 1000, tokensPerMinute: null }, 0); // busy is one short of full now
  l.admit('new', limits, 0);
  assert.equal(l.size, 2, 'busy (not full) and the new account are left');
});

test('snapshots cross as six numbers; reset times as OpenAI writes them', () => {
  const s = { requests: null, tokens: { limit: 5, remaining: 4, resetMs: 12 } };
  assert.deepEqual(snapshotFromNumbers(snapshotNumbers(s)), s);
  assert.equal(snapshotFromNumbers([1, 2, 3]), null);
  assert.equal(snapshotFromNumbers([1, 2, 3, 4, 5, Number.NaN]), null);
  assert.deepEqual([0, 17, 999.2, 1000, 1500, 59_999, 60_000, 90_500, 360_000].map(formatResetMs), [
    '0ms',
    '17ms',
    '1s',
    '1s',
    '1.5s',
    '59.999s',
    '1m0s',
    '1m30.5s',
    '6m0s',
  ]);
});

test(
  'the engine client charges a ticket with a budget: admission, each row, refusal, refund',
  { timeout: 5000 },
  async () => {
    const { l } = ledger();
    const { client, link } = setup(1, { budgets: l, flowControl: { maxInFlightPerRank: 1, queueTimeoutMs: 60_000 } });
    const budget = { requestsPerMinute: 2, tokensPerMinute: 100 };
    const ticket = { tenant: 'a', band: 1, budget };
    try {
      const s = await client.submit(req('r1'), { flow: ticket }); // 3 prompt tokens
      assert.deepEqual(s.budget?.tokens, { limit: 100, remaining: 97, resetMs: 1_800 });
      assert.equal(s.budget?.requests?.remaining, 1);
      // Queued behind r1 (one request per rank): its client leaves, so its admission is given back.
      const leave = new AbortController();
      const queued = client.submit(req('r2'), { flow: ticket, signal: leave.signal });
      await tick();
      leave.abort(new Error('client left'));
      await assert.rejects(queued, /client left/);
      await link.deliverBatch(batch(0, [row('r1', null, [5, 6, 7, 8])]));
      await link.deliverBatch(batch(0, [row('r1', 'stop', [9])]));
      await tick();
      // r2's request and prompt came back; r1's 3 prompt + 5 completion tokens are spent.
      const third = await client.submit(req('r3'), { flow: ticket });
      assert.deepEqual(third.budget?.tokens, { limit: 100, remaining: 89, resetMs: 6_600 });
      assert.equal(third.budget?.requests?.remaining, 0);
      await assert.rejects(client.submit(req('r4'), { flow: ticket }), (err: unknown) => {
        assert.ok(err instanceof EngineClientError && err.kind === 'rate-limited');
        assert.equal(err.retryAfterMs, 30_000);
        return true;
      });
      // A ticket without a budget, and a sibling, pass.
      await link.deliverBatch(batch(0, [row('r3', 'stop')]));
      await tick();
      assert.equal((await client.submit(req('r5'), { flow: { tenant: 'a', band: 1 } })).budget, null);
      await link.deliverBatch(batch(0, [row('r5', 'stop')]));
      await tick();
      const sib = await client.submit(req('r6'), { flow: { ...ticket, lead: false } });
      assert.equal(sib.budget?.requests?.remaining, 0);
    } finally {
      await client.close();
    }
  },
);
