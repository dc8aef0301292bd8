/**
 * A SIGKILLed gateway's running ranks serve the next gateway started on the same endpoints, without a restart (issue
 * 26 part 6; src/transport/adoption.ts, rank-records.ts, src/sim/main.ts `--keep-running`). Gateway A (a fixture
 * process) serves a configured worker URL with two simulated ranks started `--keep-running`; a long stream is running
 * on rank 0 when A is SIGKILLed. Both rank processes stay up. Gateway B (`model-gateway serve --engine-url … --dp-size
 * 2`, one process and `--workers 2`) adopts both from the records A left beside the sockets: it logs each adoption,
 * serves pinned and unpinned requests on the same two processes (same pids, no rejoin), and ABORTs the dead gateway's
 * stream on rank 0 (the rank reports the abort in its counters). Real ZeroMQ, real processes; each case owns its
 * folder, ports and processes and kills them by pid, also on failure.
 *
 * Measured for the closing note (a diagnostic, never asserted): B's spawn → its first served request, and B's
 * "listening" line → that request.
 */
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { freshDir, waitFor } from '../helpers/async.js';
import { freePort } from '../helpers/net.js';
import { alive } from '../helpers/processes.js';
import { CLI, NodeProcess, childEnv, childTmpdir, get, killAll, post } from './restart-helpers.js';

const FIXTURE = new URL('./fixtures/keep-running-gateway.ts', import.meta.url);
const MODEL = 'sim';
const SHORT = { model: MODEL, prompt: 'Hi.', max_tokens: 5, ignore_eos: true };
/** Runs until aborted: at time scale 0 a step takes about a millisecond, so 20 000 tokens take far longer than the test. */
const LONG = { model: MODEL, prompt: 'Tell me a very long story.', max_tokens: 20_000, ignore_eos: true, stream: true };

const fmt = (ms: number): string => `${(ms / 1000).toFixed(2)} s`;

/** The rank's counters from `--stats-dir` (SIGUSR2 writes them), or null before the file exists. */
function simStats(statsDir: string, index: number): { pid: number; aborted: number; added: number } | null {
  try {
    return JSON.parse(readFileSync(join(statsDir, `rank-${index}.json`), 'utf8')) as {
      pid: number;
      aborted: number;
      added: number;
    };
  } catch {
    return null;
  }
}

for (const workers of [1, 2]) {
  test(
    `a SIGKILLed gateway's running ranks are adopted by the next gateway on the same endpoints (--workers ${workers})`,
    { timeout: 240_000 },
    async (t) => {
      const { dir, cleanup } = await freshDir('mgw-restart-');
      const statsDir = join(dir, 'stats');
      mkdirSync(statsDir);
      const env = childEnv({ TMPDIR: childTmpdir(dir) });
      const engineUrl = `ipc://${join(dir, 'sockets', 'w')}`;
      const handshake = `tcp://127.0.0.1:${await freePort()}`;
      const [portA, portB] = [await freePort(), await freePort()];
      let a: NodeProcess | null = null;
      let b: NodeProcess | null = null;
      let ranks: number[] = [];
      try {
        a = NodeProcess.spawn(
          FIXTURE,
          [
            JSON.stringify({
              engineUrl,
              handshake,
              sim: 2,
              port: portA,
              modelId: MODEL,
              logLevel: 'info',
              simArgs: ['--keep-running', '--time-scale', '0', '--log-level', 'warn', '--stats-dir', statsDir],
            }),
          ],
          env,
        );
        const ready = a.waitLog((l) => l['ready'] === true, 'gateway A ready');
        ranks = (await ready)['pids'] as number[];
        assert.equal(ranks.length, 2);

        // A stream of the old gateway runs on rank 0 when it dies.
        const old = await fetch(`http://127.0.0.1:${portA}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-data-parallel-rank': '0' },
          body: JSON.stringify(LONG),
        });
        assert.equal(old.status, 200);
        const reader = old.body!.getReader();
        await reader.read(); // the stream is running on the rank
        await a.kill('SIGKILL');
        reader.cancel().catch(() => {});
        assert.deepEqual(ranks.map(alive), [true, true], 'the --keep-running ranks outlive their gateway');

        const spawnedAt = performance.now();
        b = NodeProcess.spawn(
          CLI,
          [
            'serve',
            '--engine-url',
            engineUrl,
            '--dp-size',
            '2',
            '--handshake',
            handshake,
            '--port',
            String(portB),
            '--model',
            MODEL,
            '--workers',
            String(workers),
            '--log-format',
            'json',
            '--log-level',
            'info',
            '--exit-with-parent',
          ],
          env,
        );
        const base = `http://127.0.0.1:${portB}`;
        let firstServedAt = 0;
        let firstServedWall = 0;
        await waitFor(
          async () => {
            const r = await post(`${base}/v1/completions`, SHORT);
            if (r.status !== 200) return false;
            firstServedAt = performance.now();
            firstServedWall = Date.now();
            return true;
          },
          'gateway B serves a request',
          120_000,
          () => ({ stderr: b?.stderr.slice(-2000), ranks: b?.logged('DP rank').map((l) => l.msg) }),
        );

        for (const index of [0, 1])
          await b.waitLogged(`DP rank ${index} adopted from the previous gateway's handshake`);
        assert.equal(
          b.logged('DP rank 0 joined').length + b.logged('DP rank 1 joined').length,
          0,
          'no rank joined through a handshake',
        );
        assert.deepEqual(ranks.map(alive), [true, true], 'the same rank processes serve (no restart)');

        // Every rank serves, pinned and unpinned.
        for (const index of [0, 1]) {
          const r = await post(`${base}/v1/completions`, SHORT, { 'x-data-parallel-rank': String(index) });
          assert.equal(r.status, 200, r.text);
          assert.equal(
            (JSON.parse(r.text) as { choices: Array<{ finish_reason: string }> }).choices[0]!.finish_reason,
            'length',
          );
        }
        const unpinned = await Promise.all(Array.from({ length: 6 }, () => post(`${base}/v1/completions`, SHORT)));
        assert.deepEqual(
          unpinned.map((r) => r.status),
          Array(6).fill(200),
        );
        const view = JSON.parse((await get(`${base}/v1/gateway/ranks`)).text) as {
          groups: Array<{ ranks: Array<{ state: string; rejoins: number; dispatched_pinned: number }> }>;
        };
        assert.deepEqual(
          view.groups[0]!.ranks.map((r) => r.state),
          ['ready', 'ready'],
        );
        assert.deepEqual(
          view.groups[0]!.ranks.map((r) => r.rejoins),
          [0, 0],
        );
        assert.deepEqual(
          view.groups[0]!.ranks.map((r) => r.dispatched_pinned),
          [1, 1],
        );

        // The dead gateway's stream is ABORTed on rank 0 (the rank counts it), by the same process.
        await waitFor(
          () => {
            process.kill(ranks[0]!, 'SIGUSR2');
            const s = simStats(statsDir, 0);
            return s !== null && s.aborted >= 1;
          },
          "rank 0 aborted the dead gateway's stream",
          60_000,
          () => simStats(statsDir, 0),
        );
        assert.equal(simStats(statsDir, 0)!.pid, ranks[0]);
        await b.waitLogged('DP rank 0 still runs requests of the previous gateway');
        assert.deepEqual(ranks.map(alive), [true, true]);

        // B's own log times (ms since the epoch) split its start-up from the adoption.
        const at = (prefix: string): number => b!.logged(prefix)[0]!['time'] as number;
        const bound = at('engine sockets bound');
        const adopted = Math.max(at('DP rank 0 adopted'), at('DP rank 1 adopted'));
        t.diagnostic(
          `--workers ${workers}: B spawn → first request served on the adopted ranks ${fmt(firstServedAt - spawnedAt)} ` +
            `(spawn → first log line ${fmt((b.logs[0]!['time'] as number) - (Date.now() - (performance.now() - spawnedAt)))}; ` +
            `sockets bound → both ranks adopted ${fmt(adopted - bound)}; sockets bound → first request served ${fmt(firstServedWall - bound)})`,
        );
      } finally {
        await a?.kill();
        await b?.kill();
        await killAll(ranks);
        await cleanup();
      }
    },
  );
}

test(
  'a gateway restarted with the same simulated group adopts the ranks still running and spawns only the missing one',
  { timeout: 240_000 },
  async () => {
    const { dir, cleanup } = await freshDir('mgw-restart-same-');
    const env = childEnv({ TMPDIR: childTmpdir(dir) });
    const options = async () => ({
      engineUrl: `ipc://${join(dir, 'sockets', 'w')}`,
      handshake,
      sim: 2,
      port: await freePort(),
      modelId: MODEL,
      logLevel: 'info',
      adoptionWindowMs: 3000,
      simArgs: ['--keep-running', '--time-scale', '0', '--log-level', 'warn'],
    });
    const handshake = `tcp://127.0.0.1:${await freePort()}`;
    let a: NodeProcess | null = null;
    let b: NodeProcess | null = null;
    const ranks: number[] = [];
    try {
      a = NodeProcess.spawn(FIXTURE, [JSON.stringify(await options())], env);
      ranks.push(...((await a.waitLog((l) => l['ready'] === true, 'gateway A ready'))['pids'] as number[]));
      assert.equal(ranks.length, 2);
      await a.kill('SIGKILL');
      await killAll([ranks[1]!]); // rank 1's engine is gone too; rank 0's keeps running

      const optsB = await options();
      b = NodeProcess.spawn(FIXTURE, [JSON.stringify(optsB)], env);
      const spawned = (await b.waitLog((l) => l['ready'] === true, 'gateway B ready'))['pids'] as number[];
      ranks.push(...spawned);
      assert.equal(spawned.length, 1, 'one simulated rank spawned, for the index nobody adopted');
      assert.ok(!ranks.slice(0, 2).includes(spawned[0]!));
      await b.waitLogged("DP rank 0 adopted from the previous gateway's handshake");
      await b.waitLogged('DP rank 1 joined');
      await b.waitLogged('rank record of DP rank 1 ignored');
      assert.deepEqual(
        b.logged('simulated ranks spawned').map((l) => l['adopted']),
        [[0]],
      );
      assert.ok(alive(ranks[0]!), 'the adopted process serves on');
      for (const index of [0, 1]) {
        const r = await post(`http://127.0.0.1:${optsB.port}/v1/completions`, SHORT, {
          'x-data-parallel-rank': String(index),
        });
        assert.equal(r.status, 200, r.text);
      }
    } finally {
      await a?.kill();
      await b?.kill();
      await killAll(ranks);
      await cleanup();
    }
  },
);
