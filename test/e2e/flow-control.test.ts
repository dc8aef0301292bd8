/**
 * End to end (issue 30 part 3): `--flow-control` with one simulated vLLM rank that takes one request at a time
 * (`--max-in-flight-per-rank 1`) and runs in real time, so a long request keeps the group saturated until the test
 * disconnects it, with others queued behind it. Checked through HTTP alone, so it holds with `--workers 2` too (the queue then lives in the
 * router): waiting requests go in band order; a client that disconnects while it waits leaves the queue and never
 * reaches the rank; a request still waiting at `--queue-timeout-ms` gets 429 with `Retry-After`.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { waitFor } from '../helpers/async.js';
import { startTestGateway, type TestGateway } from '../helpers/test-gateway.js';

const QUEUED = 'model_gateway_flow_control_queued_requests';
const OUTCOMES = 'model_gateway_flow_control_requests_total';

describe('flow control: a saturated group queues in the gateway', { timeout: 60_000 }, () => {
  let gw: TestGateway;

  before(async () => {
    gw = await startTestGateway({
      engine: 'vllm',
      sim: 1,
      // Real time (about 8 ms per token): a blocker of 5000 tokens holds the only slot until the test releases it.
      simArgs: ['--time-scale', '1', '--log-level', 'warn'],
      flowControl: { enabled: true, maxInFlightPerRank: 1, queueTimeoutMs: 3000 },
    });
  });
  after(() => gw?.close());

  const complete = (maxTokens: number, headers: Record<string, string> = {}, signal?: AbortSignal) =>
    fetch(`${gw.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      // min_tokens = max_tokens: the simulated model cannot end a request early with its EOS.
      body: JSON.stringify({ model: 'sim', prompt: 'Count slowly.', max_tokens: maxTokens, min_tokens: maxTokens }),
      ...(signal !== undefined ? { signal } : {}),
    });
  const inFlight = async () => (await gw.rankStates())[0]!.in_flight;
  const queued = () => gw.metricSum(QUEUED);
  const outcome = (name: string) => gw.metricSum(OUTCOMES, `outcome="${name}"`);

  /**
   * Start a request that holds the rank's only slot (long enough never to end by itself during a test); resolves once
   * it does. `release()` disconnects it, which frees the slot: nothing here depends on how fast the rank runs.
   */
  async function blocker(): Promise<{ release: () => Promise<void> }> {
    const ac = new AbortController();
    const response = complete(5000, {}, ac.signal).catch(() => null);
    await waitFor(async () => (await inFlight()) === 1, 'the blocker holds the slot');
    return {
      release: async () => {
        ac.abort();
        await response;
      },
    };
  }

  test('waiting requests go in band order: standard before the sheddable one that came first', async () => {
    const block = await blocker();
    const order: string[] = [];
    const shed = complete(4, { 'x-gateway-inference-objective': 'sheddable', 'x-gateway-fairness-id': 'team-a' }).then(
      (r) => {
        order.push('sheddable');
        return r;
      },
    );
    await waitFor(
      async () => (await queued()) === 1,
      'the sheddable request waits',
      30_000,
      async () => ({
        inFlight: await inFlight(),
        order,
        metrics: (await gw.metricsText()).split('\n').filter((l) => l.includes('flow_control') && !l.startsWith('#')),
      }),
    );
    const std = complete(4).then((r) => {
      order.push('standard');
      return r;
    });
    await waitFor(async () => (await queued()) === 2, 'both wait');
    assert.equal(await inFlight(), 1, 'nothing else reached the rank');
    // The ranks view (the dashboard's source) shows the queue per band and per tenant.
    await waitFor(async () => {
      const view = (await (await fetch(`${gw.url}/v1/gateway/ranks`)).json()) as {
        groups: Array<{ flow_control: { queued_by_band: object; queued_by_tenant: object } | null }>;
      };
      const fc = view.groups[0]!.flow_control;
      return (
        fc !== null &&
        JSON.stringify(fc.queued_by_band) === JSON.stringify({ critical: 0, standard: 1, sheddable: 1 }) &&
        JSON.stringify(fc.queued_by_tenant) === JSON.stringify({ 'team-a': 1, default: 1 })
      );
    }, 'the ranks view shows both waiting, by band and by tenant');
    await block.release();
    for (const r of await Promise.all([shed, std])) assert.equal(r.status, 200, await r.text());
    assert.deepEqual(order, ['standard', 'sheddable']);
    // With --workers the metrics come from the router's latest snapshot: wait for it rather than read it once.
    await waitFor(async () => (await outcome('granted')) === 2, 'both counted as granted');
  });

  test('a client that disconnects while it waits leaves the queue and never reaches the rank', async () => {
    const before = (await gw.rankStates())[0]!.dispatched_unpinned;
    const block = await blocker();
    const ac = new AbortController();
    const gone = complete(4, {}, ac.signal).catch((err: unknown) => err);
    await waitFor(async () => (await queued()) === 1, 'it waits');
    ac.abort();
    await gone;
    await waitFor(async () => (await queued()) === 0 && (await outcome('left')) === 1, 'it left the queue');
    await block.release();
    await waitFor(async () => (await inFlight()) === 0, 'the rank is idle');
    assert.equal((await gw.rankStates())[0]!.dispatched_unpinned, before + 1, 'only the blocker was dispatched');
  });

  test('a request still waiting at the queue timeout gets 429 with Retry-After', async () => {
    const block = await blocker();
    const late = await complete(4);
    assert.equal(late.status, 429);
    assert.equal(late.headers.get('retry-after'), '1');
    const body = (await late.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, 'overloaded');
    assert.match(body.error.message, /stayed saturated for 3000 ms/);
    await waitFor(async () => (await outcome('timed_out')) === 1, 'counted as timed out');
    // A request may ask to wait less (x-gateway-queue-timeout-ms), never more than the gateway's deadline.
    const short = await complete(4, { 'x-gateway-queue-timeout-ms': '200' });
    assert.equal(short.status, 429);
    assert.match(((await short.json()) as { error: { message: string } }).error.message, /for 200 ms/);
    const bad = await complete(4, { 'x-gateway-queue-timeout-ms': 'soon' });
    assert.equal(bad.status, 400);
    assert.equal(((await bad.json()) as { error: { code: string } }).error.code, 'invalid_queue_timeout');
    await block.release();
  });
});
