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
  const snaps = [1, 2, 3].map(() => l.admit('a', limits, 10, 50)!.snapshot);
  assert.deepEqual(
    snaps.map((s) => s.requests!.remaining),
    [2, 1, 0],
  );
  assert.equal(snaps[0]!.tokens, null);
  assert.equal(snaps[2]!.requests!.resetMs, 60_000, 'three requests take a whole minute to come back');
  const err = refusal(() => l.admit('a', limits, 10, 50));
  assert.equal(err.retryAfterMs, 20_000, 'one request comes back every 20 s');
  assert.deepEqual(err.rateLimits, [3, 0, 60_000, -1, -1, -1]);
  assert.equal(l.refusals.requests, 1);
  // Another tenant has its own budget.
  assert.ok(l.admit('b', limits, 10, 50) !== null);
  clock.t += 20_000;
  assert.equal(l.admit('a', limits, 10, 50)!.snapshot.requests!.remaining, 0);
});

test('tokens per minute: prompt and max_tokens reserved at admission, the unused part back at the end', () => {
  const { l, clock } = ledger();
  const limits = { requestsPerMinute: null, tokensPerMinute: 600 };
  const c = l.admit('a', limits, 100, 300)!;
  assert.deepEqual(c.snapshot.tokens, { limit: 600, remaining: 200, resetMs: 40_000 });
  // Concurrent requests cannot overdraw: the next one's reservation does not fit what is left.
  const err = refusal(() => l.admit('a', limits, 100, 300));
  assert.equal(err.retryAfterMs, 20_000, '200 more tokens at 10 per second');
  assert.deepEqual(snapshotFromNumbers(err.rateLimits!)!.tokens, { limit: 600, remaining: 200, resetMs: 40_000 });
  c.settle(120); // it generated 120 of its 300: 180 come back
  c.settle(0); // once
  const d = l.admit('a', limits, 100, 200)!;
  assert.equal(d.snapshot.tokens!.remaining, 80);
  clock.t += 60_000;
  // A request larger than the whole budget is refused without a retry time: waiting cannot help.
  const never = refusal(() => l.admit('a', limits, 100, 501));
  assert.equal(never.retryAfterMs, undefined);
  assert.match(never.message, /can never pass; ask for fewer max_tokens/);
  assert.equal(l.refusals.tokens, 2);
});

test('a refund gives back everything once; siblings reserve their max_tokens but take no request or prompt', () => {
  const { l } = ledger();
  const limits = { requestsPerMinute: 2, tokensPerMinute: 1000 };
  const c = l.admit('a', limits, 300, 100)!;
  c.settle(40); // 60 of the reservation back
  c.refund(); // then the request and the prompt: the 40 generated tokens stay spent
  c.refund();
  const d = l.admit('a', limits, 300, 100)!;
  assert.equal(d.snapshot.requests!.remaining, 1);
  assert.equal(d.snapshot.tokens!.remaining, 560);
  const sibling = l.admit('a', limits, 300, 100, false)!;
  assert.equal(sibling.snapshot.requests!.remaining, 1, 'a sibling takes no request');
  assert.equal(sibling.snapshot.tokens!.remaining, 460, 'nor the prompt again: its reservation only');
  sibling.settle(100);
  sibling.refund(); // a sibling took no request: only what is left of its reservation (nothing) comes back
  assert.equal(l.admit('a', limits, 0, 0)!.snapshot.tokens!.remaining, 460);
});

test('a lowered limit clamps what is left; a removed one is dropped; no limits, no account', () => {
  const { l } = ledger();
  l.admit('a', { requestsPerMinute: 100, tokensPerMinute: null }, 0, 0);
  const s = l.admit('a', { requestsPerMinute: 10, tokensPerMinute: null }, 0, 0)!.snapshot;
  assert.deepEqual(s.requests, { limit: 10, remaining: 9, resetMs: 6_000 });
  assert.equal(l.admit('a', { requestsPerMinute: null, tokensPerMinute: 50 }, 0, 0)!.snapshot.requests, null);
  assert.equal(l.admit('z', { requestsPerMinute: null, tokensPerMinute: null }, 5, 5), null);
  assert.equal(l.size, 1);
});

test('accounts back at full are pruned past MAX_ACCOUNTS; busy ones stay', () => {
  const { l, clock } = ledger();
  const limits = { requestsPerMinute: 1, tokensPerMinute: null };
  l.admit('busy', { requestsPerMinute: 1000, tokensPerMinute: null }, 0, 0);
  for (let i = 0; i < MAX_ACCOUNTS - 1; i++) l.admit(`t${i}`, limits, 0, 0);
  assert.equal(l.size, MAX_ACCOUNTS);
  clock.t += 60_000; // every 1-per-minute account is full again
  l.admit('busy', { requestsPerMinute: 1000, tokensPerMinute: null }, 0, 0); // busy is one short of full now
  l.admit('new', limits, 0, 0);
  assert.equal(l.size, 2, 'busy (not full) and the new account are left');
});

test('a flood of new tenants that stay busy: pruning runs once per doubling, not for every new tenant', () => {
  const { l } = ledger();
  const limits = { requestsPerMinute: 1, tokensPerMinute: null };
  for (let i = 0; i < 3 * MAX_ACCOUNTS; i++) l.admit(`t${i}`, limits, 0, 0);
  assert.equal(l.size, 3 * MAX_ACCOUNTS, 'none was full again (the clock did not move)');
  // At MAX_ACCOUNTS and at twice it; a scan per new tenant past MAX_ACCOUNTS would be 20,001.
  assert.equal(l.prunes, 2);
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
  'the engine client charges a ticket with a budget: admission with a reservation, settled at the end, refusal, refund',
  { timeout: 5000 },
  async () => {
    const { l } = ledger();
    const { client, link } = setup(1, { budgets: l, flowControl: { maxInFlightPerRank: 1, queueTimeoutMs: 60_000 } });
    const budget = { requestsPerMinute: 2, tokensPerMinute: 100 };
    const ticket = { tenant: 'a', band: 1, budget };
    // 3 prompt tokens, max_tokens 10.
    const r = (id: string) => ({ ...req(id), sampling: { ...req(id).sampling, maxNewTokens: 10 } });
    try {
      const s = await client.submit(r('r1'), { flow: ticket });
      assert.deepEqual(s.budget?.tokens, { limit: 100, remaining: 87, resetMs: 7_800 });
      assert.equal(s.budget?.requests?.remaining, 1);
      // Queued behind r1 (one request per rank): its client leaves, so everything it took is given back.
      const leave = new AbortController();
      const queued = client.submit(r('r2'), { flow: ticket, signal: leave.signal });
      await tick();
      leave.abort(new Error('client left'));
      await assert.rejects(queued, /client left/);
      await link.deliverBatch(batch(0, [row('r1', null, [5, 6, 7, 8])]));
      await link.deliverBatch(batch(0, [row('r1', 'stop', [9])]));
      await tick();
      // r1 generated 5 of its 10: 5 came back. r3 takes 13.
      const third = await client.submit(r('r3'), { flow: ticket });
      assert.deepEqual(third.budget?.tokens, { limit: 100, remaining: 79, resetMs: 12_600 });
      assert.equal(third.budget?.requests?.remaining, 0);
      await assert.rejects(client.submit(r('r4'), { flow: ticket }), (err: unknown) => {
        assert.ok(err instanceof EngineClientError && err.kind === 'rate-limited');
        assert.equal(err.retryAfterMs, 30_000);
        return true;
      });
      await link.deliverBatch(batch(0, [row('r3', 'stop')]));
      await tick();
      // A ticket without a budget passes; a sibling takes no request, only its reservation (r3 gave back 9).
      assert.equal((await client.submit(r('r5'), { flow: { tenant: 'a', band: 1 } })).budget, null);
      await link.deliverBatch(batch(0, [row('r5', 'stop')]));
      await tick();
      const sib = await client.submit(r('r6'), { flow: { ...ticket, lead: false } });
      assert.equal(sib.budget?.requests?.remaining, 0);
      assert.equal(sib.budget?.tokens?.remaining, 78);
    } finally {
      await client.close();
    }
  },
);
