/**
 * End to end, graceful drain of `model-gateway serve` on SIGTERM (issue #8 part 6; src/lifecycle.ts, src/cli.ts): the
 * CLI runs 2 simulated ranks; with streams live, SIGTERM turns /ready to 503 `draining` at once, new requests get 503
 * with Retry-After, the live streams shorter than `--shutdown-grace-ms` finish with their normal finish reason, and
 * the process exits 0 with its socket files removed (a grace shorter than the streams: serve-at-once.test.ts). With
 * GATEWAY_TEST_WORKERS=N every gateway here is `serve --workers N` (test/helpers/test-gateway.ts). Also
 * `--exit-with-parent`: the gateway stops, ranks and socket files gone, when its stdin (the pipe from its parent) closes.
 * Nothing asserts a duration.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { hangGuard } from '../helpers/async.js';
import { nodeEntry } from '../helpers/entry.js';
import { freePort } from '../helpers/net.js';
import { alive, simRanksOf, waitAllGone } from '../helpers/processes.js';
import { testWorkers } from '../helpers/test-gateway.js';
import { sendCompletion } from './failure-helpers.js';
import { waitUntil } from './spread-helpers.js';

const CLI = new URL('../../src/cli.ts', import.meta.url);
const MODEL = 'sim';
const WORKERS = testWorkers();
const WORKER_ARGS = ['--workers', String(WORKERS)];

/**
 * `model-gateway serve --sim 2` (or `groupArgs`) on a free port with `extra` flags; resolves once `/ready` answers
 * `readyStatus` (200: a group serves; 503: listening, ranks still joining). Always `--exit-with-parent` over a stdin
 * pipe, so a test file the runner cancels (a timeout) takes its gateway with it.
 */
async function startCli(
  extra: string[],
  groupArgs = ['--sim', '2', '--sim-arg=--time-scale', '--sim-arg=1', '--sim-arg=--log-level', '--sim-arg=silent'],
  readyStatus = 200,
): Promise<{
  gw: ChildProcess;
  url: string;
  exited: Promise<unknown[]>;
  socketFiles: string[];
  ranks: number[];
  cleanup(): void;
}> {
  const port = await freePort();
  const gw = spawn(
    process.execPath,
    [
      ...nodeEntry(CLI),
      'serve',
      ...WORKER_ARGS,
      '--port',
      String(port),
      '--model',
      MODEL,
      '--log-level',
      'info',
      '--log-format',
      'json',
      ...groupArgs,
      ...extra,
      ...(extra.includes('--exit-with-parent') ? [] : ['--exit-with-parent']),
    ],
    { stdio: ['pipe', 'pipe', 'pipe'] },
  );
  const exited = once(gw, 'exit');
  const socketFiles: string[] = [];
  createInterface({ input: gw.stdout!, crlfDelay: Infinity }).on('line', (line) => {
    try {
      const m = JSON.parse(line) as { msg?: string; input?: string; output?: string };
      if (m.msg?.startsWith('engine sockets bound; ') && m.input && m.output) {
        for (const f of [m.input.slice(6), m.output.slice(6)]) if (!socketFiles.includes(f)) socketFiles.push(f);
      }
    } catch {
      // not a log line
    }
  });
  let stderr = '';
  gw.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const url = `http://127.0.0.1:${port}`;
  await hangGuard(
    (async () => {
      for (;;) {
        if (gw.exitCode !== null) throw new Error(`gateway exited: ${stderr}`);
        const ok = await fetch(`${url}/ready`).then(
          (r) => r.status === readyStatus,
          () => false,
        );
        if (ok) return;
        await new Promise((r) => setTimeout(r, 50));
      }
    })(),
    60_000,
    'gateway ready',
  );
  const ranks = simRanksOf(gw.pid!);
  const cleanup = (): void => {
    if (gw.exitCode === null && gw.signalCode === null) gw.kill('SIGKILL');
    for (const pid of ranks.filter(alive)) process.kill(pid, 'SIGKILL');
    for (const p of socketFiles) rmSync(p, { force: true });
  };
  return { gw, url, exited, socketFiles, ranks, cleanup };
}

test(
  'SIGTERM with streams live: /ready 503 draining, new requests 503 + Retry-After, the streams finish normally, exit 0',
  { timeout: 90_000 },
  async (t) => {
    const g = await startCli(['--shutdown-grace-ms', '30000']);
    try {
      const body = { model: MODEL, prompt: 'Tell me something.', max_tokens: 150, ignore_eos: true };
      const streams = [0, 1, 2, 3].map((i) => sendCompletion(g.url, body, { stream: true, label: `stream #${i}` }));
      await waitUntil(() => streams.every((s) => (s.progress()?.text.length ?? 0) > 0), 'every stream streaming');
      // The ranks pause while the drain is checked, so the streams are certainly live when the late request arrives
      // (on a loaded machine they could otherwise end first, and the late request would meet a closed server).
      for (const pid of g.ranks) process.kill(pid, 'SIGSTOP');
      const signalledAt = performance.now();
      g.gw.kill('SIGTERM');
      let ready = 0;
      await hangGuard(
        (async () => {
          while (
            (ready = await fetch(`${g.url}/ready`).then(
              (r) => r.status,
              () => 0,
            )) !== 503
          )
            await new Promise((r) => setTimeout(r, 10));
        })(),
        // A hang guard: with --workers the fronts hear of the drain over node IPC, slow on a loaded machine.
        60_000,
        '/ready turning 503',
      );
      assert.equal(ready, 503);
      const late = await fetch(`${g.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      assert.equal(late.status, 503);
      assert.ok(late.headers.get('retry-after'));
      assert.equal(((await late.json()) as { error: { code: string } }).error.code, 'draining');
      for (const pid of g.ranks) process.kill(pid, 'SIGCONT');
      const outcomes = await Promise.all(streams.map((s) => s.done));
      for (const o of outcomes)
        assert.ok(
          o.sse?.done && o.sse.finishReason === 'length' && o.sse.error === null,
          `finished normally: ${JSON.stringify(o)}`,
        );
      const [code, signal] = await hangGuard(g.exited, 30_000, 'gateway exit');
      assert.deepEqual({ code, signal }, { code: 0, signal: null });
      assert.equal(g.socketFiles.length, 2);
      assert.deepEqual(
        g.socketFiles.filter((f) => existsSync(f)),
        [],
        'socket files removed',
      );
      t.diagnostic(
        `drain: streams finished ${(Math.max(...outcomes.map((o) => o.endedAt)) - signalledAt) | 0} ms after SIGTERM; the gateway exited 0`,
      );
    } finally {
      g.cleanup();
    }
  },
);

test(
  'Ctrl-C while ranks are still joining: the gateway exits 0 and leaves no socket file behind',
  { timeout: 60_000 },
  async () => {
    const { freshDir } = await import('../helpers/async.js');
    const d = await freshDir('mgw-drain-');
    const g = await startCli(
      [],
      ['--engine-url', `ipc://${d.dir}/engine`, '--dp-size', '2', '--handshake', `tcp://127.0.0.1:${await freePort()}`],
      503,
    );
    try {
      const ready = await fetch(`${g.url}/ready`);
      assert.equal(((await ready.json()) as { status: string }).status, 'starting');
      await waitUntil(() => g.socketFiles.length === 2, 'sockets bound (HTTP listens first)');
      assert.ok(
        g.socketFiles.every((f) => existsSync(f)),
        'bound while waiting for ranks',
      );
      g.gw.kill('SIGINT');
      const [code] = await hangGuard(g.exited, 30_000, 'gateway exit');
      assert.equal(code, 0);
      assert.deepEqual(
        g.socketFiles.filter((f) => existsSync(f)),
        [],
        'no socket file left behind',
      );
    } finally {
      g.cleanup();
      await d.cleanup();
    }
  },
);

test(
  '--exit-with-parent: when the pipe from the parent closes (the parent died), the gateway stops with its ranks and socket files',
  { timeout: 60_000 },
  async () => {
    const g = await startCli(['--exit-with-parent']);
    try {
      assert.equal(g.ranks.length, 2);
      await waitUntil(() => g.socketFiles.length === 2, 'socket files logged');
      // Every child (the ranks; with --workers N the fronts too).
      const children = readFileSync(`/proc/${g.gw.pid}/task/${g.gw.pid}/children`, 'utf8')
        .trim()
        .split(/\s+/)
        .map(Number);
      assert.ok(children.length >= 2 + (WORKERS > 1 ? WORKERS : 0), `children: ${children.join(',')}`);
      g.gw.stdin!.end(); // what the kernel does to the pipe when the parent exits, even by SIGKILL
      await hangGuard(g.exited, 30_000, 'gateway exit');
      await hangGuard(waitAllGone(children), 15_000, 'every child gone');
      assert.deepEqual(
        g.socketFiles.filter((f) => existsSync(f)),
        [],
        'socket files removed',
      );
    } finally {
      g.cleanup();
    }
  },
);
