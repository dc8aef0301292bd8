/**
 * End to end, faults of `model-gateway serve --workers 2` (issue 9 part 2; src/fronts/cluster.ts): a front SIGKILLed
 * mid-stream (its engine requests aborted by the router, the other front serving on, a new front forked and
 * counted), then SIGTERM with streams live (every front drains, the streams finish, exit 0). One gateway for the
 * file; the API behaviour is in workers.test.ts. Nothing asserts a duration.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { hangGuard } from '../helpers/async.js';
import { waitUntil } from './spread-helpers.js';
import { LONG, MODEL, WorkersGateway, waitFor } from './workers-helpers.js';

let g: WorkersGateway;

before(async () => {
  g = await WorkersGateway.start(['--shutdown-grace-ms', '30000']);
});

after(() => g?.cleanup());

test('a front SIGKILLed mid-stream: its requests are aborted at the engines, the other front serves on, a new front is forked', { timeout: 90_000 }, async () => {
  const abortsBefore = await g.metricSum('model_gateway_aborts_sent_total');
  const streams = Array.from({ length: 2 }, () => g.openStream(LONG));
  try {
    await waitUntil(() => streams.every((s) => s.text().includes('data: {')), 'both streams streaming');
    const fronts = g.fronts();
    assert.equal(fronts.length, 2);
    process.kill(fronts[0]!, 'SIGKILL');
    // The killed front's streams break; the router aborts their engine requests.
    const broken = await hangGuard(Promise.race(streams.map((s) => s.done)), 20_000, 'a stream of the killed front breaking');
    assert.notEqual(broken.error, null, `the killed front's stream broke: ${JSON.stringify(broken)}`);
    const survivors = async () => (await Promise.all(streams.map((s) => Promise.race([s.done.then(() => 0), new Promise<number>((r) => setTimeout(() => r(1), 10))])))).reduce((a, b) => a + b, 0);
    await waitFor(async () => (await g.inFlight()) === (await survivors()), 'in-flight equals the streams still open');
    await waitFor(async () => (await g.metricSum('model_gateway_aborts_sent_total')) >= abortsBefore + 2 - (await survivors()), 'ABORTs sent for the orphaned requests');
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
});

test('SIGTERM with streams live: /ready 503 on every front, new requests 503, the streams finish, exit 0', { timeout: 90_000 }, async () => {
  const body = { model: MODEL, prompt: 'Tell me something.', max_tokens: 120, ignore_eos: true };
  const streams = [0, 1].map(() => g.openStream(body));
  await waitUntil(() => streams.every((s) => s.text().includes('data: {')), 'every stream streaming');
  g.gw.kill('SIGTERM');
  // Both fronts (fresh connections alternate) answer 503 draining.
  await waitFor(async () => {
    const rs = await Promise.all([g.get('/ready'), g.get('/ready')]);
    return rs.every((r) => r.status === 503);
  }, '/ready 503 on both fronts');
  const late = await g.post('/v1/completions', body);
  assert.equal(late.status, 503);
  assert.ok(late.headers['retry-after']);
  assert.equal(late.json.error.code, 'draining');
  const outcomes = await hangGuard(Promise.all(streams.map((s) => s.done)), 60_000, 'streams finishing');
  for (const o of outcomes) {
    assert.equal(o.error, null, JSON.stringify(o));
    assert.ok(o.finished, 'stream ended with [DONE]');
  }
  for (const s of streams) assert.ok(s.text().includes('"finish_reason":"length"'), 'finished normally');
  const [code, signal] = await hangGuard(g.exited, 30_000, 'gateway exit');
  assert.deepEqual({ code, signal }, { code: 0, signal: null }, g.errors);
});
