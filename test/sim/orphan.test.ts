/**
 * Simulated ranks never outlive the process that spawned them: `spawnSimRanks` gives each rank a stdin pipe and
 * `--exit-with-parent`, so a gateway killed with SIGKILL (no chance to stop its children) still takes its ranks down,
 * whether they are serving or still waiting for INIT.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { freePort } from '../helpers/net.js';
import { hangGuard } from '../helpers/async.js';

const parentScript = fileURLToPath(new URL('./fixtures/orphan-parent.ts', import.meta.url));

function childrenOf(pid: number): number[] {
  try {
    return execFileSync('pgrep', ['-P', String(pid)], { encoding: 'utf8' }).split('\n').filter(Boolean).map(Number);
  } catch {
    return []; // pgrep exits 1 when nothing matches
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function waitAllGone(pids: number[]): Promise<void> {
  while (pids.some(alive)) await new Promise((r) => setTimeout(r, 50));
}

for (const mode of ['serving', 'dialing'] as const) {
  test(`ranks exit when their parent is SIGKILLed (${mode})`, async () => {
    const args = ['--import', 'tsx', parentScript, mode, String(await freePort())];
    const parent = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      const [line] = (await hangGuard(once(parent.stdout, 'data'), 60_000, 'parent ready')) as [Buffer];
      assert.match(line.toString(), /ready/);
      const ranks = childrenOf(parent.pid!);
      assert.equal(ranks.length, 2, `expected 2 sim rank processes, found ${ranks.join(',')}`);
      parent.kill('SIGKILL');
      await once(parent, 'exit');
      await hangGuard(waitAllGone(ranks), 30_000, `sim ranks ${ranks.join(',')} exiting after their parent died`);
    } finally {
      if (parent.exitCode === null && parent.signalCode === null) parent.kill('SIGKILL');
    }
  });
}
