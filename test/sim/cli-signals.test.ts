/**
 * `model-gateway serve` with simulated ranks: a second SIGINT exits at once, yet leaves no simulated rank running and
 * no ipc socket file behind (src/cli.ts second-signal path, `RunningGateway.emergencyStop()` in src/gateway/shutdown.ts).
 * The ranks are SIGSTOPped first so that the first signal's orderly shutdown cannot finish on its own: only the
 * emergency teardown can end them.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, rmSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { hangGuard } from './helpers.js';
import { alive, simRanksOf, waitAllGone } from '../helpers/processes.js';
import { nodeEntry } from '../helpers/entry.js';

const CLI = new URL('../../src/cli.ts', import.meta.url);

/** A `model-gateway serve --sim 2` child process with helpers to wait for its JSON log lines. */
async function startCliGateway() {
  const gw = spawn(
    process.execPath,
    [
      ...nodeEntry(CLI),
      'serve',
      '--workers',
      '1',
      '--port',
      '0',
      '--sim',
      '2',
      '--log-level',
      'info',
      '--sim-arg=--log-level',
      '--sim-arg=silent',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const messages: Array<Record<string, unknown>> = [];
  const waiters: Array<() => void> = [];
  const lines = createInterface({ input: gw.stdout, crlfDelay: Infinity });
  lines.on('line', (line) => {
    try {
      messages.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      return;
    }
    for (const w of waiters.splice(0)) w();
  });
  const out = { gw, stderr: '', messages, lines, ranks: [] as number[], socketFiles: [] as string[] };
  gw.stderr.on('data', (d: Buffer) => (out.stderr += d.toString()));
  const exited = once(gw, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
  const logged = async (re: RegExp): Promise<Record<string, unknown>> => {
    for (;;) {
      const m = messages.find((x) => typeof x.msg === 'string' && re.test(x.msg));
      if (m !== undefined) return m;
      if (gw.exitCode !== null || gw.signalCode !== null)
        throw new Error(`gateway exited before logging ${re}: ${out.stderr}`);
      await new Promise<void>((r) => waiters.push(r));
    }
  };
  const bound = await hangGuard(logged(/^engine sockets bound; /), 60_000, 'sockets bound');
  out.socketFiles = [bound.input, bound.output].map((a) => String(a).replace(/^ipc:\/\//, ''));
  await hangGuard(logged(/^model-gateway listening on/), 60_000, 'gateway listening');
  // The ranks are spawned right after the sockets are bound (the gateway listens first): poll briefly for them.
  for (let i = 0; i < 100 && simRanksOf(gw.pid!).length < 2; i++) await new Promise((r) => setTimeout(r, 50));
  out.ranks = simRanksOf(gw.pid!);
  assert.equal(out.ranks.length, 2, `expected 2 sim rank processes, found ${out.ranks.join(',')}`);
  assert.ok(
    out.socketFiles.every((p) => existsSync(p)),
    `socket files ${out.socketFiles.join(', ')} exist while serving`,
  );
  const cleanup = (): void => {
    lines.close();
    if (gw.exitCode === null && gw.signalCode === null) gw.kill('SIGKILL');
    for (const pid of out.ranks.filter(alive)) process.kill(pid, 'SIGKILL');
    for (const p of out.socketFiles) rmSync(p, { force: true });
  };
  return Object.assign(out, { exited, logged, cleanup });
}

test('a second SIGINT SIGKILLs the simulated ranks and removes their ipc socket files before exiting', async () => {
  const g = await startCliGateway();
  try {
    for (const pid of g.ranks) process.kill(pid, 'SIGSTOP');
    g.gw.kill('SIGINT');
    await hangGuard(g.logged(/^shutting down$/), 30_000, 'first SIGINT handled');
    // A repeat within 500 ms counts as the same Ctrl-C (the tsx wrapper forwards it too); wait past that window.
    await new Promise((r) => setTimeout(r, 700));
    g.gw.kill('SIGINT');
    const [code, signal] = await hangGuard(g.exited, 30_000, 'gateway exit after the second SIGINT');
    assert.deepEqual({ code, signal }, { code: 1, signal: null });
    assert.match(g.stderr, /second SIGINT/);
    // SIGKILL ends a stopped process too; the ranks were killed before the gateway exited.
    await hangGuard(waitAllGone(g.ranks), 10_000, 'simulated ranks gone');
    assert.deepEqual(
      g.socketFiles.filter((p) => existsSync(p)),
      [],
      'no ipc socket file left',
    );
  } finally {
    g.cleanup();
  }
});

test('one Ctrl-C delivered twice at once (terminal + tsx wrapper) is a single, clean shutdown', async () => {
  const g = await startCliGateway();
  try {
    g.gw.kill('SIGINT');
    // The repeat lands once the first is being handled (two pending SIGINTs would merge into one in the kernel).
    await hangGuard(g.logged(/^shutting down$/), 30_000, 'first SIGINT handled');
    g.gw.kill('SIGINT');
    const [code, signal] = await hangGuard(g.exited, 30_000, 'gateway exit');
    assert.deepEqual({ code, signal }, { code: 0, signal: null }, g.stderr);
    assert.doesNotMatch(g.stderr, /second SIGINT/);
    assert.ok(
      g.messages.some((m) => m.msg === 'shut down'),
      'the orderly shutdown ran to its end',
    );
    await hangGuard(waitAllGone(g.ranks), 10_000, 'simulated ranks gone');
    assert.deepEqual(
      g.socketFiles.filter((p) => existsSync(p)),
      [],
      'no ipc socket file left',
    );
  } finally {
    g.cleanup();
  }
});
