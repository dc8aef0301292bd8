/**
 * The benchmark's event-loop probes (bench/throughput/loop-probe.ts in each process, loop-probes.ts in the bench):
 * every process that preloads the probe connects, and `read` reports the worst of the processes asked.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { LoopProbes } from '../../bench/throughput/loop-probes.js';

const PROBE = fileURLToPath(new URL('../../bench/throughput/loop-probe.ts', import.meta.url));

/** A node process with the probe preloaded that blocks its loop for `blockMs` when sent any line on stdin. */
function probed(socketPath: string, blockMs: number): ChildProcess {
  const script = `process.stdin.on('data', () => { const end = Date.now() + ${blockMs}; while (Date.now() < end); process.stdout.write('done\\n'); }); setInterval(() => {}, 1000);`;
  return spawn(process.execPath, ['--import', 'tsx', '--import', PROBE, '-e', script], {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, BENCH_LOOP_PROBE_SOCK: socketPath },
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('every probed process answers; read gives the worst of the processes asked', { timeout: 60_000 }, async () => {
  const probes = new LoopProbes();
  await probes.listen();
  const quiet = probed(probes.socketPath, 0);
  const busy = probed(probes.socketPath, 300);
  try {
    const pids = [quiet.pid!, busy.pid!];
    // Wait until both probes connected (read throws for a pid without one).
    const connected = (pid: number) =>
      probes.read([pid]).then(
        () => true,
        () => false,
      );
    for (let i = 0; i < 200 && !((await connected(quiet.pid!)) && (await connected(busy.pid!))); i++) await sleep(50);
    await probes.reset(pids);
    busy.stdin!.write('block\n');
    await once(busy.stdout!, 'data');
    await sleep(50);
    const alone = await probes.read([quiet.pid!]);
    const worst = await probes.read(pids);
    assert.ok(alone.samples > 0 && alone.maxMs < 250, `the quiet process did not stall (max ${alone.maxMs} ms)`);
    assert.ok(worst.maxMs >= 250, `the busy process's 300 ms stall is reported (max ${worst.maxMs} ms)`);
    assert.ok(worst.samples > alone.samples, 'samples are summed over the processes');
    await assert.rejects(probes.read([1]), /no loop probe connected/);
  } finally {
    quiet.kill();
    busy.kill();
    probes.close();
  }
});
