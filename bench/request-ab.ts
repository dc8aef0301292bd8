/**
 * This tree's CPU per request against another commit's, in one process (a change on the per-request path states its
 * before/after figure; issue 32 asked tracing off to stay within 2 % of before). bench:throughput's request-stream
 * figure cannot settle a few %: at saturation a gateway a few µs slower per request reads smaller output batches from
 * ranks that step as fast as they can, so a small cost shows several times over, and paired runs on this machine
 * still spread by ±15 %.
 *
 * Shape: `--base` is checked out in a temporary git worktree (node_modules linked to this tree's); this tree's app
 * and the base's, each built by its own tree's test helper (test/server/helpers.ts `makeApp` over
 * test/server/fake-backend.ts, tracing off, a pino logger at `warn` writing nowhere), answer a one-token completion
 * through `inject` in alternating blocks (bench/inject-ab.ts): what differs is the gateway's code on the request path,
 * without the socket and the engine wire. `--control` runs two apps of each tree: the spread of identical arms (one
 * extra app of one tree alone would skew the figures, its code running more often than the other tree's). Prints µs per request, the paired difference and the paired ratio to the base with the range of its chunk
 * medians. The worktree is removed at the end. A diagnostic: nothing is written.
 *
 * Usage: `npm run bench:request-ab -- --base COMMIT [--rounds N (3000)] [--block N (30)] [--control]`. The base
 * needs the test helpers' shape (`makeApp({ backend, logger })`, `FakeBackend.onSubmit`), as every commit since
 * issue 20 has.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { alternate, benchCli, ONE_TOKEN, pairedTable, type InjectArm } from './inject-ab.js';

const USAGE = `npm run bench:request-ab -- --base COMMIT [options]
  --base COMMIT  the commit to compare this tree with (any name git knows: a hash, a tag, HEAD~3)
  --rounds N     alternating rounds of every arm (3000)
  --block N      requests per arm and round (30)
  --control      two apps of each tree (the spread of identical arms)
  --help         this text`;

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const git = (...args: string[]): string =>
  execFileSync('git', args, { cwd: ROOT, encoding: 'utf8', stdio: 'pipe' }).trim();

let base = '';
const { values, rounds, block } = benchCli(
  'bench:request-ab',
  USAGE,
  { rounds: 3000, block: 30 },
  { base: { type: 'string' }, control: { type: 'boolean', default: false } },
  (v) => {
    const name = v['base'];
    if (typeof name !== 'string') throw new Error('--base COMMIT is required');
    try {
      base = git('rev-parse', '--verify', '--quiet', `${name}^{commit}`);
    } catch {
      throw new Error(`--base: git knows no commit ${JSON.stringify(name)}`);
    }
  },
);

/** One app of the tree at `root` (its own helpers, so each tree builds its app as its tests do). */
async function armOf(name: string, root: string): Promise<InjectArm> {
  const { FakeBackend } = (await import(
    join(root, 'test/server/fake-backend.ts')
  )) as typeof import('../test/server/fake-backend.js');
  const { makeApp } = (await import(
    join(root, 'test/server/helpers.ts')
  )) as typeof import('../test/server/helpers.js');
  const backend = new FakeBackend({ ranks: [0, 1] });
  backend.onSubmit = ONE_TOKEN;
  const { app } = await makeApp({ backend, logger: pino({ level: 'warn' }, { write() {} }) });
  return { name, app, samples: [] };
}

const worktree = mkdtempSync(join(tmpdir(), 'mgw-request-ab-'));
const removeWorktree = (): void => {
  try {
    git('worktree', 'remove', '--force', worktree);
  } catch {
    rmSync(worktree, { recursive: true, force: true });
    git('worktree', 'prune');
  }
};
process.once('exit', removeWorktree); // an interrupted run leaves no worktree behind
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => process.exit(130));

const short = base.slice(0, 7);
const arms: InjectArm[] = [];
try {
  process.stderr.write(`checking out ${short} in ${worktree}\n`);
  git('worktree', 'add', '--detach', worktree, base);
  symlinkSync(join(ROOT, 'node_modules'), join(worktree, 'node_modules'));
  arms.push(await armOf(`base ${short}`, worktree), await armOf('this tree', ROOT));
  if (values['control'] === true)
    arms.push(await armOf(`base ${short} again`, worktree), await armOf('this tree again', ROOT));
  await alternate(arms, rounds, block);
} finally {
  for (const arm of arms) await arm.app.close();
}

console.log(
  `CPU per request, this tree against ${short}: ${rounds} alternating rounds of ${block} requests per arm, POST /v1/completions (max_tokens 1) through inject, one process.\n`,
);
for (const row of pairedTable(arms)) console.log(row);
