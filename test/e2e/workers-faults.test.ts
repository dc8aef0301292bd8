/**
 * End to end, a front of `model-gateway serve --workers 2` SIGKILLed mid-stream (issue 9 part 2; src/fronts/router/cluster.ts):
 * its engine requests are aborted by the router, the other front serves on, a new front is forked and counted. One
 * gateway for the file (one simulated rank: a front restart loads a whole process, keep the rest small); the API
 * behaviour and the drain are in workers.test.ts. Nothing asserts a duration.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { hangGuard } from '../helpers/async.js';
import { waitUntil } from './spread-helpers.js';
import { LONG, MODEL, WorkersGateway, waitFor } from './workers-helpers.js';

let g: WorkersGateway;

before(async () => {
  g = await WorkersGateway.start([], 1);
});

after(() => g?.cleanup());

test(
  'a front SIGKILLed mid-stream: its requests are aborted at the engines, the other front serves on, a new front is forked',
  { timeout: 90_000 },
  async () => {
    const abortsBefore = await g.metricSum('model_gateway_aborts_sent_total');
    const streams = Array.from({ length: 2 }, () => g.openStream(LONG));
    try {
      await waitUntil(() => streams.every((s) => s.text().includes('data: {')), 'both streams streaming');
      const fronts = g.fronts();
      assert.equal(fronts.length, 2);
      // Kill the front serving the first stream (connections need not alternate between fronts under load).
      const victim = g.frontServing(streams[0]!);
      assert.ok(
        victim !== null && fronts.includes(victim),
        `the front serving stream 0 among ${fronts.join(',')}: ${victim}`,
      );
      fronts.sort((a, b) => (a === victim ? -1 : b === victim ? 1 : 0));
      process.kill(fronts[0]!, 'SIGKILL');
      // The killed front's streams break; the router aborts their engine requests.
      const broken = await hangGuard(
        Promise.race(streams.map((s) => s.done)),
        20_000,
        'a stream of the killed front breaking',
      );
      assert.notEqual(broken.error, null, `the killed front's stream broke: ${JSON.stringify(broken)}`);
      const survivors = async () =>
        (
          await Promise.all(
            streams.map((s) =>
              Promise.race([s.done.then(() => 0), new Promise<number>((r) => setTimeout(() => r(1), 10))]),
            ),
          )
        ).reduce((a, b) => a + b, 0);
      await waitFor(
        async () => (await g.inFlight()) === (await survivors()),
        'in-flight equals the streams still open',
      );
      await waitFor(
        async () => (await g.metricSum('model_gateway_aborts_sent_total')) >= abortsBefore + 2 - (await survivors()),
        'ABORTs sent for the orphaned requests',
      );
      await waitFor(async () => g.fronts().length === 2 && !g.fronts().includes(fronts[0]!), 'a new front forked');
      await waitFor(async () => (await g.metricSum('model_gateway_front_exits_total')) === 1, 'front exit counted');
      // Both fronts serve again (one request after the other: fresh connections alternate between the fronts).
      for (let i = 0; i < 4; i++) {
        const r = await g.post('/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 2 });
        assert.equal(r.status, 200, `request ${i} after the restart: ${JSON.stringify(r.json)}`);
      }
    } finally {
      for (const s of streams) s.destroy();
    }
    await waitFor(async () => (await g.inFlight()) === 0, 'in-flight back to 0');
  },
);
