/**
 * This tree's CPU per request against another commit's, in one process (a change on the per-request path states its
 * before/after figure; issue 32 asked tracing off to stay within 2 % of before). bench:throughput's request-stream
 * figure cannot settle a few %: at saturation a gateway a few µs slower per request reads smaller output batches from
 * ranks that step as fast as they can, so a small cost shows several times over, and paired runs on this machine
 * still spread by ±15 %.
 *
 * Shape: `--base` is checked out in a temporary git worktree (node_modules linked to this tree's); this tree's app
 * and the base's, each built by its own tree's test helper (test/server/helpers.ts `makeApp` over
 * test/server/fake-backend.ts, tracing off, a pino logger at `info`, the gateway's default, writing nowhere), answer
 * a one-token completion through `inject` in alternating blocks (bench/inject-ab.ts): what differs is the gateway's
 * code on the request path, without the socket and the engine wire. `--control` runs two apps of each tree: the
 * spread of identical arms (one extra app of one tree alone would skew the figures, its code running more often than
 * the other tree's). Prints µs per request, the paired difference and the paired ratio to the base with the range of
 * its chunk medians. The worktree is removed at the end. A diagnostic: nothing is written.
 *
 * Usage: `npm run bench:request-ab -- --base COMMIT [--rounds N (3000)] [--block N (30)] [--control]`. The base
 * needs the test helpers' shape (`makeApp({ backend, logger })`, `FakeBackend.onSubmit`), as every commit since
 * 54154f1 has (older ones build their app with a silent logger, so the two arms log differently). The worktree is
 * named after the run's pid; a run removes the ones a killed run left.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { alternate, answerOneToken, benchCli, pairedTable, type InjectArm } from './inject-ab.js';

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

/**
 * One app of the tree at `root` (its own helpers, so each tree builds its app as its tests do). Exits 2 naming the
 * commit when its tree has no such helpers.
 */
async function armOf(name: string, root: string): Promise<InjectArm> {
  let modules: [typeof import('../test/server/fake-backend.js'), typeof import('../test/server/helpers.js')];
  try {
    modules = await Promise.all([
      import(join(root, 'test/server/fake-backend.ts')),
      import(join(root, 'test/server/helpers.ts')),
    ]);
  } catch (error) {
    process.stderr.write(
      `bench:request-ab: ${name} has no test/server/fake-backend.ts and helpers.ts to build its app with (${(error as Error).message.split('\n')[0]})\n`,
    );
    process.exit(2);
  }
  const [{ FakeBackend }, { makeApp }] = modules;
  const backend = new FakeBackend({ ranks: [0, 1] });
  answerOneToken(backend);
  const { app } = await makeApp({ backend, logger: pino({ level: 'info' }, { write() {} }) });
  return { name, app, samples: [] };
}

const WORKTREE_PREFIX = 'mgw-request-ab-';

/**
 * Remove the worktrees an earlier run could not (a SIGKILL, a closed terminal before SIGHUP was handled): each is
 * named after its run's pid, and one whose process is gone is removed.
 */
function removeStaleWorktrees(): void {
  const listed = git('worktree', 'list', '--porcelain')
    .split('\n')
    .filter((l) => l.startsWith('worktree '))
    .map((l) => l.slice('worktree '.length));
  for (const path of listed) {
    const pid = new RegExp(`/${WORKTREE_PREFIX}(\\d+)-[^/]*$`).exec(path)?.[1];
    if (pid === undefined || isAlive(Number(pid))) continue;
    process.stderr.write(`removing ${path}, left by an earlier run (pid ${pid})\n`);
    removeWorktree(path);
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function removeWorktree(path: string): void {
  try {
    git('worktree', 'remove', '--force', path);
  } catch {
    rmSync(path, { recursive: true, force: true });
    git('worktree', 'prune');
  }
}

removeStaleWorktrees();
const worktree = mkdtempSync(join(tmpdir(), `${WORKTREE_PREFIX}${process.pid}-`));
process.once('exit', () => removeWorktree(worktree)); // an interrupted run leaves no worktree behind
// The first signal exits (running the removal); later ones are ignored, so a second Ctrl-C cannot cut the removal short.
let exiting = false;
for (const [signal, code] of [
  ['SIGINT', 130],
  ['SIGTERM', 143],
  ['SIGHUP', 129],
] as const)
  process.on(signal, () => {
    if (exiting) return;
    exiting = true;
    process.exit(code);
  });

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
