/**
 * Simulated ranks never outlive the process that spawned them: `spawnSimRanks` gives each rank a stdin pipe and
 * `--exit-with-parent`, so a gateway killed with SIGKILL (no chance to stop its children) still takes its ranks down,
 * whether they are serving or still waiting for INIT, and whatever their log level: at `info` they log on their way
 * out into a stdout pipe whose reader is dead (EPIPE), which must not keep them alive (src/log-sink.ts).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { freePort } from '../helpers/net.js';
import { hangGuard } from '../helpers/async.js';
import { alive, simRanksOf, waitAllGone } from '../helpers/processes.js';
import { nodeEntry } from '../helpers/entry.js';

const PARENT = new URL('./fixtures/orphan-parent.ts', import.meta.url);

for (const level of ['silent', 'info'] as const) {
  for (const mode of ['serving', 'dialing'] as const) {
    test(`ranks exit when their parent is SIGKILLed (${mode}, log level ${level})`, async () => {
      const args = [...nodeEntry(PARENT), mode, String(await freePort()), level];
      const parent = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
      // At `info` the gateway's own log lines share the pipe: wait for the line that is exactly `ready`, reading on.
      const lines = createInterface({ input: parent.stdout, crlfDelay: Infinity });
      const ready = new Promise<void>((resolve) => lines.on('line', (line) => line === 'ready' && resolve()));
      let ranks: number[] = [];
      try {
        const exitedEarly = once(parent, 'exit').then(() => {
          throw new Error('the parent exited before printing ready');
        });
        exitedEarly.catch(() => {});
        await hangGuard(Promise.race([ready, exitedEarly]), 60_000, 'parent ready');
        ranks = simRanksOf(parent.pid!);
        assert.equal(ranks.length, 2, `expected 2 sim rank processes, found ${ranks.join(',')}`);
        parent.kill('SIGKILL');
        await once(parent, 'exit');
        await hangGuard(waitAllGone(ranks), 30_000, `sim ranks ${ranks.join(',')} exiting after their parent died`);
      } finally {
        lines.close();
        if (parent.exitCode === null && parent.signalCode === null) parent.kill('SIGKILL');
        for (const pid of ranks.filter(alive)) process.kill(pid, 'SIGKILL');
        // A SIGKILLed gateway cannot remove its simulated worker's socket files (gateway/engine-groups.ts `simWorkerUrl`).
        for (const end of ['in', 'out'])
          rmSync(join(tmpdir(), `model-gateway-${process.getuid?.() ?? 0}`, `sim-${parent.pid}-${end}.sock`), {
            force: true,
          });
      }
    });
  }
}
