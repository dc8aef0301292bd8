/**
 * Socket files of dead gateways are removed by the next gateway, a live gateway's never, and a refused start prints
 * one line (issue 26 part 6; src/transport/stale-sweep.ts, src/gateway/). Real gateway processes (the CLI) share one
 * runtime directory (`TMPDIR` of this file's folder) and one operator socket directory:
 * - L (`--sim 1` and an `--engine-url` group) runs; D (`--sim 1 --workers 2`) and E (two `--engine-url` groups) start
 *   beside it and are SIGKILLed: their `sim-<pid>-{in,out}.sock`, `fronts-<pid>.sock` and the sockets of both groups
 *   stay behind;
 * - F starts with only one of E's groups: afterwards every file of D and E is gone (also E's other group, which F
 *   does not serve), and every file of L is still there;
 * - a start on L's worker URL and a start on L's HTTP port (one process and `--workers 2`) each end with exit code 1,
 *   one line on stderr, no "listening" line, no stack trace, nothing bound, and L still serving.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { freshDir } from '../helpers/async.js';
import { freePort } from '../helpers/net.js';
import { simRanksOf } from '../helpers/processes.js';
import { frontsOf } from './workers-helpers.js';
import { CLI, NodeProcess, childEnv, childTmpdir, get, killAll } from './restart-helpers.js';

const SIM_ARGS = ['--sim-arg=--time-scale', '--sim-arg=0', '--sim-arg=--log-level', '--sim-arg=warn'];

/** `serve` flags every gateway of this file gets. */
const common = (port: number): string[] => [
  '--port',
  String(port),
  '--log-format',
  'json',
  '--log-level',
  'info',
  '--exit-with-parent',
];

test(
  "a dead gateway's socket files are removed by the next one, a live one's are not; a refused start prints one line",
  { timeout: 300_000 },
  async () => {
    const { dir, cleanup } = await freshDir('mgw-sockfiles-');
    const env = childEnv({ TMPDIR: childTmpdir(dir) });
    const uid = process.getuid?.() ?? 0;
    const runtime = join(dir, 'tmp', `model-gateway-${uid}`);
    const ops = join(dir, 'ops');
    const url = (name: string): string => `ipc://${join(ops, name)}`;
    const sockets = (name: string): string[] => [join(ops, `${name}-in.sock`), join(ops, `${name}-out.sock`)];
    const procs: NodeProcess[] = [];
    const extra: number[] = [];
    const start = (args: string[]): NodeProcess => {
      const p = NodeProcess.spawn(CLI, ['serve', ...args], env);
      procs.push(p);
      return p;
    };
    try {
      // Every gateway sweeps at its start, so L, D and E all run before D and E die (each leaves the others alone).
      // L: live, a simulated group and a group of running engines.
      const portL = await freePort();
      const l = start([...common(portL), '--workers', '1', '--sim', '1', ...SIM_ARGS, '--engine-url', url('c')]);
      await l.waitLogged('serving model');
      // D: simulated group and --workers 2. E: two groups of running engines (none dial in).
      const d = start([...common(await freePort()), '--workers', '2', '--sim', '1', ...SIM_ARGS]);
      const e = start([
        ...common(await freePort()),
        '--workers',
        '1',
        '--engine-url',
        url('a'),
        '--engine-url',
        url('b'),
      ]);
      await d.waitLogged('model-gateway listening on');
      await e.waitLogged('serving model');
      const lFiles = [join(runtime, `sim-${l.pid}-in.sock`), join(runtime, `sim-${l.pid}-out.sock`), ...sockets('c')];
      assert.deepEqual(lFiles.map(existsSync), [true, true, true, true]);
      assert.deepEqual(
        [...d.logged('removed a socket file'), ...e.logged('removed a socket file')],
        [],
        'nothing of a live gateway is removed',
      );

      // SIGKILL D's router (its fronts and ranks follow it) and E: their socket files stay behind.
      extra.push(...frontsOf(d.pid), ...simRanksOf(d.pid));
      const dFiles = [`sim-${d.pid}-in.sock`, `sim-${d.pid}-out.sock`, `fronts-${d.pid}.sock`].map((f) =>
        join(runtime, f),
      );
      await d.kill();
      await e.kill();
      await killAll(extra);
      const eFiles = [...sockets('a'), ...sockets('b')];
      assert.deepEqual(
        [...dFiles, ...eFiles].map(existsSync),
        Array(7).fill(true),
        'a SIGKILLed gateway leaves its socket files',
      );

      // F serves only E's group `a`: it removes every file of D and E, and none of L's.
      const f = start([...common(await freePort()), '--workers', '1', '--engine-url', url('a')]);
      await f.waitLogged('serving model');
      const removed = f
        .logged('removed a socket file left by a dead gateway')
        .map((r) => r['path'])
        .sort();
      assert.deepEqual(removed, [...dFiles, ...eFiles].sort(), JSON.stringify(removed));
      assert.deepEqual(dFiles.map(existsSync), [false, false, false]);
      assert.deepEqual(sockets('b').map(existsSync), [false, false], "the dead gateway's other group is cleaned too");
      assert.deepEqual(sockets('a').map(existsSync), [true, true], "F's own sockets");
      assert.deepEqual(lFiles.map(existsSync), [true, true, true, true], "the live gateway's files stay");
      await f.kill('SIGTERM');

      // Refused starts: L's worker URL, L's HTTP port; one process and --workers 2.
      const cases: Array<{ args: string[]; line: RegExp; never: string }> = [];
      for (const workers of ['1', '2']) {
        cases.push({
          args: [...common(await freePort()), '--workers', workers, '--engine-url', url('c')],
          line: /is in use: a live process accepts connections on it/,
          never: `r${workers}`,
        });
        cases.push({
          args: [...common(portL), '--workers', workers, '--engine-url', url(`p${workers}`)],
          line: /cannot listen on 127\.0\.0\.1:\d+: the port is already in use/,
          never: `p${workers}`,
        });
      }
      for (const c of cases) {
        const r = start(c.args);
        const [code] = await r.exited;
        assert.equal(code, 1, r.stderr);
        const lines = r.stderr.split('\n').filter((x) => x.trim() !== '');
        assert.equal(lines.length, 1, `one line on stderr, got:\n${r.stderr}`);
        assert.match(lines[0]!, /^model-gateway: /);
        assert.match(lines[0]!, c.line);
        assert.ok(!/\n\s+at /.test(r.stderr), 'no stack trace');
        assert.equal(r.logged('model-gateway listening on').length + r.logged('front ').length, 0, 'no listening line');
        assert.equal(
          r.logs.filter((x) => typeof x['level'] === 'number' && (x['level'] as number) >= 50).length,
          0,
          'no error log record',
        );
        assert.ok(!sockets(c.never).some(existsSync), 'nothing was bound');
      }
      assert.deepEqual(
        lFiles.map(existsSync),
        [true, true, true, true],
        "the live gateway's files survive the refused starts",
      );
      assert.equal((await get(`http://127.0.0.1:${portL}/ready`)).status, 200, 'the live gateway still serves');
      assert.deepEqual(
        readdirSync(runtime)
          .filter((n) => n.endsWith('.sock'))
          .sort(),
        [`sim-${l.pid}-in.sock`, `sim-${l.pid}-out.sock`],
      );
    } finally {
      const ranks = procs.flatMap((p) => (p.running ? simRanksOf(p.pid) : []));
      for (const p of procs) await p.kill();
      await killAll([...extra, ...ranks]);
      await cleanup();
    }
  },
);
