/**
 * `spawnSimRanks`: a rank's `exited` waits for its output to be read to the end ('close'), but not for a process that
 * outlives the rank and holds its pipes: a stop still ends soon after the rank's exit.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { MinimalLogger } from '../../src/logging.js';
import { spawnSimRanks } from '../../src/sim/spawn.js';
import { freePort } from '../helpers/net.js';

const HOLDER = fileURLToPath(new URL('./fixtures/hold-stdio.mjs', import.meta.url));

test(
  'a process that holds a stopped rank’s stdout and stderr open does not hold up its stop',
  { timeout: 60_000 },
  async (t) => {
    let sayHolder: (pid: number) => void = () => undefined;
    const holderPid = new Promise<number>((resolve) => (sayHolder = resolve));
    const record =
      (level: string) =>
      (obj: object, msg?: string): void => {
        const line = (obj as { line?: unknown }).line;
        const m = level === 'warn' && typeof line === 'string' ? /^stdio holder (\d+)$/.exec(line) : null;
        if (m !== null) sayHolder(Number(m[1]));
        void msg;
      };
    const logger: MinimalLogger = {
      debug: record('debug'),
      info: record('info'),
      warn: record('warn'),
      error: record('error'),
    };
    const saved = process.env.NODE_OPTIONS;
    process.env.NODE_OPTIONS = `${saved ?? ''} --import ${HOLDER}`;
    let sims: ReturnType<typeof spawnSimRanks>;
    try {
      // Nobody listens on the handshake port: the rank waits for INIT until stopped.
      sims = spawnSimRanks({ handshakeAddress: `tcp://127.0.0.1:${await freePort()}`, count: 1, logger });
    } finally {
      if (saved === undefined) delete process.env.NODE_OPTIONS;
      else process.env.NODE_OPTIONS = saved;
    }
    const pid = await holderPid;
    t.after(() => {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    });
    await sims.stop();
    const exit = await sims.ranks[0]!.exited;
    assert.equal(exit.engineIndex, 0);
    // The stop ended while the holder still had the pipes: it did not wait for them to close.
    assert.doesNotThrow(() => process.kill(pid, 0), 'the holder is still running');
  },
);
