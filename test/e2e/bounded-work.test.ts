/**
 * Bounded client work end to end (issue 26 part 5), in both process modes (`GATEWAY_TEST_WORKERS=2`: every front has
 * its own off-loop tokenizer queue, and /metrics sums them): over two simulated ranks, with each queue bounded to
 * 6.5 M characters (`--tokenizer-queue-chars`), a 6 M-character `/tokenize` running on every front's worker makes a
 * large prompt that does not fit behind it a 429 on every front; prompts that fit wait, and when their clients leave
 * they are dropped (never run, nothing dispatched to a rank); when the blockers' clients leave, their workers are
 * ended (a job that large is not finished for nobody); a normal prompt is then served.
 *
 * A blocker runs for a second or a few: no step assumes it outlasts anything. Each check is a round that first sees
 * every front's blocker running and is repeated when a blocker turned out to have finished before the round was over
 * (helpers/async.ts `conclusive`); a genuine failure fails the round.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { OFF_LOOP_ENCODE_MIN_CHARS } from '../../src/tokenizer/off-loop.js';
import { conclusive, hangGuard, waitFor } from '../helpers/async.js';
import { openRequest, type OpenRequest } from '../helpers/net.js';
import { startTestGateway, type TestGateway } from '../helpers/test-gateway.js';

const SENTENCE = 'The river runs past the old mill, and the weather turns as the evening comes. ';
const text = (chars: number): string => SENTENCE.repeat(Math.ceil(chars / SENTENCE.length)).slice(0, chars);
const BLOCKER = text(6_000_000);
const QUEUE_CHARS = 6_500_000;

describe('bounded client work end to end', () => {
  let gw: TestGateway;
  before(async () => {
    gw = await startTestGateway({
      sim: 2,
      edge: { tokenizerQueueChars: QUEUE_CHARS, tokenizeBodyLimitBytes: 8 * 1024 * 1024 },
    });
  });
  after(() => gw.close());

  const jobs = (outcome: string) => gw.metricSum('model_gateway_tokenizer_jobs_total', `outcome="${outcome}"`);
  const queued = () => gw.metricSum('model_gateway_tokenizer_queue_jobs');
  const restarts = () => gw.metricSum('model_gateway_tokenizer_worker_restarts_total');
  const dispatched = async () =>
    (await gw.rankStates()).reduce((n, r) => n + r.dispatched_unpinned + r.dispatched_pinned, 0);

  /**
   * A blocker running on every front, or null when one finished before all were seen running. Twice as many as there
   * are fronts are sent at once: a front admits one (a second does not fit its queue) and answers the rest 429.
   */
  async function blockEveryFront(): Promise<OpenRequest[] | null> {
    await waitFor(async () => (await queued()) === 0, 'the queues are empty');
    const sent = Array.from({ length: 2 * gw.workers }, () => openRequest(gw.url, '/tokenize', { prompt: BLOCKER }));
    const answered = () => sent.filter((b) => b.answered()).length;
    const started = await jobs('started');
    await waitFor(
      async () =>
        answered() + (await queued()) === sent.length && (await jobs('started')) - started >= sent.length - answered(),
      'the blockers are placed and started',
      60_000,
    );
    const running = sent.filter((b) => !b.answered());
    const statuses = await Promise.all(sent.filter((b) => b.answered()).map((b) => b.done));
    if (running.length === gw.workers && statuses.every((s) => s === 429) && (await queued()) === gw.workers)
      return running;
    for (const b of sent) b.leave();
    return null; // a front got none, or a blocker already finished
  }

  /** Every blocker is still running (none answered): the round's observations were made while all fronts were busy. */
  const stillBlocked = (blockers: OpenRequest[]) => blockers.every((b) => !b.answered());

  test('full queues answer 429 on every front; small requests are still served', { timeout: 180_000 }, async () => {
    await conclusive('429 on every front', async () => {
      const blockers = await blockEveryFront();
      if (blockers === null) return false;
      const probes: Array<{
        status: number;
        retryAfter: string | null;
        body: { error: { type: string; code: string; message: string } };
      }> = [];
      for (let i = 0; i < 2 * gw.workers; i++) {
        const res = await fetch(`${gw.url}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ prompt: text(600_000), max_tokens: 1 }),
        });
        probes.push({
          status: res.status,
          retryAfter: res.headers.get('retry-after'),
          body: (await res.json()) as (typeof probes)[number]['body'],
        });
      }
      const small = await fetch(`${gw.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: 'Hello', max_tokens: 2 }),
      });
      const held = stillBlocked(blockers);
      for (const b of blockers) b.leave();
      if (!held) return false;
      for (const p of probes) {
        assert.equal(p.status, 429, JSON.stringify(p.body));
        assert.equal(p.retryAfter, '1');
        assert.equal(p.body.error.type, 'requests');
        assert.equal(p.body.error.code, 'tokenizer_queue_full');
        assert.match(p.body.error.message, new RegExp(`at most \\d+ jobs and ${QUEUE_CHARS} characters`));
      }
      assert.equal(small.status, 200, await small.text());
      return true;
    });
  });

  test(
    'prompts waiting behind the blockers whose clients leave are dropped: never run, nothing reaches a rank',
    { timeout: 180_000 },
    async () => {
      await conclusive('waiting jobs dropped', async () => {
        const blockers = await blockEveryFront();
        if (blockers === null) return false;
        const [run, dropped, before] = await Promise.all([jobs('run'), jobs('dropped'), dispatched()]);
        const waiting = Array.from({ length: 2 * gw.workers }, () =>
          openRequest(gw.url, '/v1/chat/completions', {
            messages: [{ role: 'user', content: text(OFF_LOOP_ENCODE_MIN_CHARS + 100) }],
            max_tokens: 1,
          }),
        );
        await waitFor(
          async () => !stillBlocked(blockers) || (await queued()) === gw.workers + waiting.length,
          'the prompts wait in the queues',
          60_000,
        );
        for (const w of waiting) w.leave();
        await waitFor(
          async () => (await jobs('dropped')) - dropped === waiting.length || (await jobs('run')) > run,
          'the waiting jobs are dropped, or one ran',
          60_000,
        );
        const held = stillBlocked(blockers) && (await jobs('run')) === run;
        for (const b of blockers) b.leave();
        if (!held) return false;
        assert.equal(await jobs('dropped'), dropped + waiting.length);
        assert.equal(await dispatched(), before, 'nothing was sent to a rank');
        for (const w of waiting) assert.equal(await w.done, null, 'a client that left gets no answer');
        return true;
      });
    },
  );

  test(
    "blockers whose clients leave end their fronts' workers; a normal prompt is served afterwards",
    { timeout: 180_000 },
    async () => {
      await conclusive('abandoned large jobs end their workers', async () => {
        const blockers = await blockEveryFront();
        if (blockers === null) return false;
        const before = await restarts();
        for (const b of blockers) b.leave();
        const statuses = await Promise.all(blockers.map((b) => b.done));
        await waitFor(async () => (await queued()) === 0, 'the queues are empty again', 60_000);
        if (statuses.some((s) => s !== null)) return false; // one finished as its client left
        assert.equal(await restarts(), before + gw.workers);
        return true;
      });
      const normal = await hangGuard(
        fetch(`${gw.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ messages: [{ role: 'user', content: text(40_000) }], max_tokens: 2 }),
        }),
        60_000,
        'the normal prompt',
      );
      assert.equal(normal.status, 200, await normal.text());
    },
  );
});
