/**
 * End to end (issue 26 part 1): a burst of client disconnects on one DP rank must not take that rank out of rotation.
 *
 * Two simulated TokenSpeed ranks over real ZeroMQ that apply each ABORT 20 rounds after it arrives
 * (`--abort-lag-rounds`), as a real engine inside its steps does (issue 26 measured ~0.1 s on the TokenSpeed wire):
 * until then it keeps streaming rows for the aborted requests and its load tail keeps counting them. Sixteen clients
 * of rank 0 disconnect at once; the gateway releases them, sends the ABORTs, and then reads ~20 late batches whose
 * tail still says ~16 running. Before the fix the sole-client guard (dp-routing.md 14.3) read those as another
 * client's work, suspended the release clamp, and the idle rank kept its stale "16 running" until the report aged out:
 * it got no unpinned request for seconds while rank 1 took them all.
 *
 * Determinism: the lag is counted in the rank's rounds, not in ms. The test waits for two events: rank 0 says (its
 * `--stats-dir` counters, written on SIGUSR2) that it applied the 16 ABORTs and pushed its last batch, and the gateway
 * says (`batches` in /v1/gateway/ranks) that it read that many batches from rank 0. Nothing else is sent to rank 0
 * in between, as in the issue: an idle rank's last word is its late batch. Then 24 unpinned requests are placed;
 * with rank 1 holding 2 streams, an idle rank 0 takes most of them. Timing appears only in hang guards.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import { statsFilePath } from '../../src/sim/main.js';
import { freshDir, waitFor } from '../helpers/async.js';
import { startTestGateway, type TestGateway } from '../helpers/test-gateway.js';
import { openStream, type CompletionBody, type HeldStream } from './spread-helpers.js';

const MODEL = 'sim-qwen3';
const LONG: CompletionBody = {
  model: MODEL,
  prompt: 'Tell me a very long story.',
  max_tokens: 20_000,
  ignore_eos: true,
};
const TIMEOUT = { timeout: 120_000 };

describe('a burst of client disconnects on a rank that applies ABORTs late', () => {
  let gateway: TestGateway;
  let stats: Awaited<ReturnType<typeof freshDir>>;
  const opened: HeldStream[] = [];
  const open = async (body: CompletionBody, dpRank?: number): Promise<HeldStream> => {
    const s = await openStream(gateway.url, body, dpRank === undefined ? {} : { dpRank });
    opened.push(s);
    assert.equal(s.status, 200);
    return s;
  };
  const rank = async (i: number) => (await gateway.rankStates()).find((r) => r.dp_rank === i)!;
  /** Rank 0's own counters, fresh: SIGUSR2 makes it rewrite its stats file (src/sim/main.ts `writeStatsFile`). */
  let statsSeq = 0;
  const simStats = async (): Promise<{ aborted: number; pendingSends: number; batchesSent: number }> => {
    const sim = gateway.simRanks().find((r) => r.engineIndex === 0)!;
    const file = statsFilePath(stats.dir, 0);
    const before = ++statsSeq;
    process.kill(sim.pid, 'SIGUSR2');
    let text = '';
    await waitFor(
      async () => {
        text = await readFile(file, 'utf8');
        return before <= statsSeq && JSON.parse(text).pid === sim.pid;
      },
      'rank 0 writes its stats file',
      10_000,
    );
    return JSON.parse(text) as { aborted: number; pendingSends: number; batchesSent: number };
  };

  before(async () => {
    stats = await freshDir('mgw-abort-burst-');
    // Time scale 2: ~20 ms rounds keep 18 streams' SSE small on a shared machine; nothing below depends on the rate.
    gateway = await startTestGateway({
      sim: 2,
      modelId: MODEL,
      simArgs: ['--time-scale', '2', '--abort-lag-rounds', '20', '--stats-dir', stats.dir, '--log-level', 'warn'],
    });
  });

  after(async () => {
    for (const s of opened) s.cancel();
    await Promise.all(opened.map((s) => s.done));
    await gateway?.close();
    await stats?.cleanup();
  });

  test('the rank keeps its share of unpinned requests right after the burst', TIMEOUT, async () => {
    const burst: HeldStream[] = [];
    for (let i = 0; i < 16; i++) burst.push(await open(LONG, 0));
    for (let i = 0; i < 2; i++) await open(LONG, 1);
    await waitFor(
      async () => (await rank(0)).num_running_reqs === 16,
      'rank 0 reports its 16 requests running',
      30_000,
      () => rank(0),
    );

    for (const s of burst) s.cancel();
    await Promise.all(burst.map((s) => s.done));
    await waitFor(
      async () => (await rank(0)).in_flight === 0,
      'the gateway released the 16 disconnected requests',
      30_000,
      () => rank(0),
    );

    // The rank applied the ABORTs after its lag and went idle; the gateway read every batch it pushed until then.
    let sent = 0;
    await waitFor(
      async () => {
        const c = await simStats();
        sent = c.batchesSent;
        return c.aborted >= 16 && c.pendingSends === 0;
      },
      'rank 0 applies the 16 ABORTs and pushes its last batch',
      30_000,
    );
    await waitFor(
      async () => (await rank(0)).batches === sent,
      `the gateway reads all ${sent} batches of rank 0`,
      30_000,
      () => rank(0),
    );

    const r0 = await rank(0);
    assert.equal(
      r0.sole_client_guard,
      false,
      `the late batches counted the gateway's own ABORTed requests: ${JSON.stringify(r0)}`,
    );
    assert.equal(r0.num_running_reqs, 0, `zero-on-empty: rank 0 is idle (${JSON.stringify(r0)})`);

    const before0 = (await rank(0)).dispatched_unpinned;
    const newcomers: HeldStream[] = [];
    for (let i = 0; i < 24; i++) newcomers.push(await open(LONG));
    const got = (await rank(0)).dispatched_unpinned - before0;
    assert.ok(got >= 12, `the idle rank takes at least half of 24 unpinned requests while rank 1 holds 2; got ${got}`);
  });
});
