/**
 * End to end, serve at once and socket hygiene (issue #8 parts 4-5): a gateway over a worker URL with 2 dense rank
 * slots and no engine yet listens at once: /health and /ready are 503 `starting` with 0 of 2 ranks joined and every
 * request gets 503 with Retry-After; once 1 of 2 real simulated ranks has joined requests are served (a request pinned
 * to the missing rank still gets 503 with Retry-After); the second rank enters rotation when it arrives. A second
 * gateway on the same live ipc path refuses to start and the first keeps serving; a shutdown whose grace is shorter
 * than a live stream ends it with an error naming the grace, and removes the gateway's socket files. One serving
 * gateway for the file.
 *
 * In-process only (not in `npm run test:e2e:workers`): it drives `startGateway` options the harness does not map
 * (a real `engineUrl` with `waitForRanks: false`, a second gateway on the same path, `shutdown({ graceMs })` on the
 * object). The CLI's own drain, with one process or `--workers N`, is drain.test.ts.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { startGateway, type RunningGateway, type RunningGroup } from '../../src/gateway/index.js';
import { spawnSimRanks, type SimRankProcesses } from '../../src/sim/spawn.js';
import { ConfigError } from '../../src/transport/errors.js';
import { freshDir } from '../helpers/async.js';
import { freePort } from '../helpers/net.js';
import { MODEL, captureLogs, sendCompletion } from './failure-helpers.js';
import { getJson, waitRank } from './lifecycle-helpers.js';
import { waitUntil } from './spread-helpers.js';

const SHORT = { model: MODEL, prompt: 'Hi.', max_tokens: 4, ignore_eos: true };
const SIM_ARGS = ['--time-scale', '1', '--log-level', 'warn']; // real-time steps: a 20 000-token stream outlives a short grace

let gateway: RunningGateway;
let group: RunningGroup;
let workerUrl: string;
let cleanupDir: () => Promise<void>;
const ranks: SimRankProcesses[] = [];

before(async () => {
  const d = await freshDir('mgw-soa-');
  cleanupDir = d.cleanup;
  workerUrl = `ipc://${join(d.dir, 'engine')}`;
  gateway = await startGateway({
    port: 0,
    logger: captureLogs('error').logger,
    modelId: MODEL,
    engineUrl: workerUrl,
    dpSize: 2,
    handshake: `tcp://127.0.0.1:${await freePort()}`,
    waitForRanks: false,
  });
  group = gateway.groups[0]!;
});

after(async () => {
  await gateway?.close();
  await Promise.all(ranks.map((r) => r.stop()));
  await cleanupDir?.();
});

const post = (headers: Record<string, string> = {}) =>
  fetch(`${gateway.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(SHORT),
  });

function spawnRank(index: number): void {
  ranks.push(
    spawnSimRanks({
      handshakeAddress: group.endpoints.handshake,
      count: 1,
      firstEngineIndex: index,
      extraArgs: SIM_ARGS,
    }),
  );
}

test('before any rank joined: /health and /ready 503 starting (0 of 2); a request gets 503 + Retry-After with an OpenAI body', async () => {
  const health = await getJson(gateway.url, '/health');
  assert.equal(health.status, 503);
  assert.equal(health.body.status, 'starting');
  assert.deepEqual(
    health.body.groups.map((g) => [g.status, g.joined, g.expected, g.ranks.map((r) => r.state)]),
    [['starting', 0, 2, ['joining', 'joining']]],
  );
  const ready = await getJson(gateway.url, '/ready');
  assert.equal(ready.status, 503);
  assert.equal(ready.body.status, 'starting');
  const res = await post();
  assert.equal(res.status, 503);
  assert.equal(res.headers.get('retry-after'), '5');
  const body = (await res.json()) as { error: { message: string; type: string; param: unknown; code: string } };
  assert.equal(body.error.code, 'engine_starting');
  assert.equal(body.error.type, 'service_unavailable_error');
  assert.match(body.error.message, /0 of 2 rank\(s\) joined/);
});

test(
  'with 1 of 2 dense ranks joined requests are served; the missing rank is 503 when pinned; the second enters rotation',
  { timeout: 60_000 },
  async () => {
    spawnRank(0);
    await waitRank(group.client, 0, 'ready');
    for (const stream of [true, false]) {
      const o = await sendCompletion(gateway.url, SHORT, { stream }).done;
      assert.equal(o.status, 200, JSON.stringify(o));
    }
    const health = await getJson(gateway.url, '/health');
    assert.equal(health.status, 200);
    assert.equal(health.body.status, 'degraded');
    assert.equal((await getJson(gateway.url, '/ready')).status, 200);
    const pinned = await post({ 'x-data-parallel-rank': '1' });
    assert.equal(pinned.status, 503);
    assert.equal(pinned.headers.get('retry-after'), '1');
    assert.equal(((await pinned.json()) as { error: { code: string } }).error.code, 'rank_unavailable');
    spawnRank(1);
    await waitRank(group.client, 1, 'ready');
    const o = await sendCompletion(gateway.url, SHORT, { stream: true, dpRank: 1 }).done;
    assert.ok(o.sse?.done && o.sse.finishReason === 'length', JSON.stringify(o));
    assert.equal((await getJson(gateway.url, '/health')).body.status, 'ok');
  },
);

test(
  'a second gateway on the same live ipc path refuses to start; the first keeps serving and its socket files stay',
  { timeout: 60_000 },
  async () => {
    const files = [group.endpoints.input, group.endpoints.output].map((a) => a.slice('ipc://'.length));
    await assert.rejects(
      startGateway({
        port: 0,
        logger: captureLogs('error').logger,
        modelId: MODEL,
        engineUrl: workerUrl,
        dpSize: 2,
        handshake: `tcp://127.0.0.1:${await freePort()}`,
        waitForRanks: false,
      }),
      (e: unknown) =>
        e instanceof ConfigError &&
        /is in use: a live process accepts connections on it \(another gateway is serving this worker URL\)/.test(
          e.message,
        ),
    );
    assert.ok(
      files.every((f) => existsSync(f)),
      "the live gateway's socket files were not touched",
    );
    for (const rank of [0, 1]) {
      const o = await sendCompletion(gateway.url, SHORT, { stream: true, dpRank: rank }).done;
      assert.ok(o.sse?.done && o.sse.finishReason === 'length', JSON.stringify(o));
    }
    const ready = await getJson(gateway.url, '/ready');
    assert.equal(ready.status, 200);
  },
);

test(
  'shutdown with a grace shorter than a live stream: the stream ends with an error naming the grace; socket files removed',
  { timeout: 60_000 },
  async () => {
    const files = [group.endpoints.input, group.endpoints.output].map((a) => a.slice('ipc://'.length));
    const long = sendCompletion(
      gateway.url,
      { ...SHORT, max_tokens: 20_000 },
      { stream: true, label: 'endless stream' },
    );
    await waitUntil(() => (long.progress()?.text.length ?? 0) > 0, 'streaming');
    await gateway.shutdown({ graceMs: 200 });
    const o = await long.done;
    assert.ok(o.sse?.error && o.sse.done && o.sse.finishReason === null, JSON.stringify(o));
    assert.match(
      o.sse.error.message,
      /the shutdown grace of 200 ms \(--shutdown-grace-ms\) ran out before this request finished/,
    );
    assert.deepEqual(
      files.filter((f) => existsSync(f)),
      [],
      'the socket files it bound are removed',
    );
  },
);
