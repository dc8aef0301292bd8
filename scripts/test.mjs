#!/usr/bin/env node
/**
 * `npm test`: every check of the repository, as phases run side by side (issue 27: the suite in minutes on a 2-core
 * machine), each to its end whatever the others do, so one phase's failure never hides another's result:
 * - static: `tsc --noEmit` and `eslint .` (scripts/typecheck-lint.mjs, one program for both), then
 *   `oxfmt --check .`, one after another (one core);
 * - tests: every `test/**\/*.test.ts` file, files run concurrently (`--test-concurrency`; each e2e file owns its ports,
 *   ipc paths and temp folders), the one-process gateway where a file starts one;
 *   both test phases run the transpiled copy of the repository (./test-build.mjs, built first: plain node in every
 *   test and every process a test starts, no tsx);
 * - e2e --workers 2: the e2e files that start their gateway through test/helpers/test-gateway.ts, again with
 *   `GATEWAY_TEST_WORKERS=2` (HTTP fronts beside the router process).
 * Each phase's report is printed whole when it ends (test/reporters/files.mjs: the failures, the counts, the slowest
 * files); progress goes to stderr. Exit code 0 only when every phase passed and nothing was left behind.
 *
 * Teardown (issue 27: no test leaves a process, socket file or temp folder behind, also when it times out): the test
 * phases run with TMPDIR set to a folder of this run, removed at the end; a process still running from the
 * transpiled copy once the phases ended (a file the runner cancelled took no care of its children) is SIGKILLed. Both
 * are reported, and leftovers fail the run: a test that leaks is a bug to fix, and the teardown only keeps the
 * machine clean meanwhile.
 *
 * Options: `--only NAME[,NAME]` runs the named phases (static, tests, workers); `--concurrency N` sets the tests
 * phase's file concurrency (default below); any other argument is a test file or folder, run by the tests phase alone.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { buildTestTree } from './test-build.mjs';
import { longestFirst } from '../test/reporters/files.mjs';

const root = new URL('..', import.meta.url).pathname;
const args = process.argv.slice(2);
const USAGE = `node scripts/test.mjs [options] [file or folder ...]   (npm test: no arguments)
  --only static,tests,workers   run only these phases
  --concurrency N               test files at once in the tests phase (3)
  --workers-concurrency N       test files at once in the --workers 2 phase (1)
  FILE|FOLDER                   run these test files (or every *.test.ts under a folder) in the tests phase alone
`;
if (args.includes('--help') || args.includes('-h')) {
  process.stdout.write(USAGE);
  process.exit(0);
}
const opt = (name) => {
  const at = args.indexOf(name);
  if (at < 0) return undefined;
  const v = args[at + 1];
  args.splice(at, 2);
  return v;
};
const only = opt('--only')?.split(',');
const concurrency = Number(opt('--concurrency') ?? 3);
const workersConcurrency = Number(opt('--workers-concurrency') ?? 1);

/** Every `*.test.ts` under `dir`, sorted. */
function testFiles(dir) {
  const out = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...testFiles(p));
    else if (name.endsWith('.test.ts')) out.push(relative(root, p));
  }
  return out.sort();
}

const missing = args.filter((a) => a.startsWith('-') || !existsSync(join(root, a)));
if (missing.length > 0) {
  process.stderr.write(`scripts/test.mjs: no such option, file or folder: ${missing.join(', ')}\n${USAGE}`);
  process.exit(2);
}
const targets =
  args.length > 0
    ? args.flatMap((a) => (statSync(join(root, a)).isDirectory() ? testFiles(join(root, a)) : [a]))
    : testFiles(join(root, 'test'));
const workerFiles = testFiles(join(root, 'test', 'e2e')).filter((f) =>
  readFileSync(join(root, f), 'utf8').includes('helpers/test-gateway.js'),
);
const js = (f) => f.replace(/\.ts$/, '.js');

/**
 * Where each test phase's file times (ms) of the last run are kept (test/reporters/files.mjs writes them): beside
 * node_modules' other caches, so a clean clone starts without them.
 */
const durationsDir = join(root, 'node_modules', '.cache', 'model-gateway');
const durationsFile = (phase) => join(durationsDir, `test-durations-${phase}.json`);
const bin = (pkg, file) => join(root, 'node_modules', pkg, file);
const nodeTest = (n) => [
  process.execPath,
  '--enable-source-maps',
  '--test',
  `--test-concurrency=${n}`,
  // Per file and per test without its own: a hang detector, generous because a loaded 2-core machine runs the
  // heaviest files (slow-readers moves ~0.9 GB of SSE) several times slower than an idle one.
  '--test-timeout=480000',
  '--test-reporter=./test/reporters/files.mjs',
  '--test-reporter-destination=stdout',
];

const phases = [
  {
    // One after another, so the static checks hold one core and the tests the other.
    name: 'static',
    title: 'typecheck, lint, format',
    steps: [
      // tsc --noEmit and eslint . on one TypeScript program (~30 CPU-s less than apart).
      [process.execPath, join(root, 'scripts', 'typecheck-lint.mjs')],
      [process.execPath, bin('oxfmt', 'bin/oxfmt'), '--check', '.'],
    ],
  },
  {
    name: 'tests',
    argv: [...nodeTest(concurrency), ...longestFirst(targets, durationsFile('tests')).map(js)],
    env: { GATEWAY_TEST_DURATIONS: durationsFile('tests') },
    transpiled: true,
  },
  {
    name: 'workers',
    title: 'e2e --workers 2',
    argv: [...nodeTest(workersConcurrency), ...longestFirst(workerFiles, durationsFile('workers')).map(js)],
    env: { GATEWAY_TEST_WORKERS: '2', GATEWAY_TEST_DURATIONS: durationsFile('workers') },
    transpiled: true,
  },
  // Files or folders given: the tests phase only (unless --only says otherwise).
].filter((p) => (only === undefined ? args.length === 0 || p.name === 'tests' : only.includes(p.name)));

const started = performance.now();

/**
 * `, N CPU-s`: the CPU time of every process the run started and reaped (the phases, the test files, the gateways and
 * ranks they spawned; /proc/self/stat cutime + cstime, Linux), the figure a change to the suite's cost is judged by;
 * '' where /proc is not there.
 */
function childCpu() {
  try {
    const stat = readFileSync('/proc/self/stat', 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // Fields 16 and 17 of proc(5) (cutime, cstime) are 13 and 14 after the command name; clock ticks of 1/100 s.
    return `, ${((Number(fields[13]) + Number(fields[14])) / 100).toFixed(0)} CPU-s`;
  } catch {
    return '';
  }
}
const secs = () => ((performance.now() - started) / 1000).toFixed(0);
process.stderr.write(
  `npm test: ${phases.map((p) => p.title ?? p.name).join(', ')} (${targets.length} test files${phases.some((p) => p.name === 'workers') ? `; ${workerFiles.length} again with --workers 2` : ''})\n`,
);

const buildDir = phases.some((p) => p.transpiled) ? await buildTestTree(root) : root;
try {
  mkdirSync(durationsDir, { recursive: true });
} catch {
  // A read-only node_modules: no file times are kept, and each run starts its files in name order.
}
process.stderr.write(`[${secs()} s] transpiled copy ready in ${buildDir}\n`);

// Short: ipc socket paths under it must stay within the 107 bytes of sun_path.
const tmp = mkdtempSync('/tmp/mgwt-');
// The tcp ports test files hand to processes they start, claimed for the run (test/helpers/net.ts `freePort`).
const portClaims = `${tmp}-ports`;
mkdirSync(portClaims);
// The golden vectors' originals sit beside the repository, not beside its transpiled copy: name them for the check
// that the repository's copies still equal them (test/vectors/vectors-match-shared.test.ts; skipped when absent).
const shared = process.env.GATEWAY_SHARED_DIR || join(root, '..', 'shared');
const sharedEnv = existsSync(shared) ? { GATEWAY_SHARED_DIR: shared } : {};

/** Runs one command of phase `p` to its end: its exit code (or signal name) and its output, stdout and stderr mixed. */
function run(p, argv) {
  return new Promise((resolve) => {
    const child = spawn(argv[0], argv.slice(1), {
      cwd: p.transpiled ? buildDir : root,
      env: {
        ...process.env,
        ...p.env,
        ...(p.transpiled ? { TMPDIR: tmp, GATEWAY_TEST_PORT_CLAIMS: portClaims, ...sharedEnv } : {}),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (out += c));
    child.on('close', (code, signal) => resolve({ code: code ?? signal, out }));
  });
}

const results = await Promise.all(
  phases.map(async (p) => {
    let code = 0;
    let out = '';
    // Every step runs, also after one failed: one check's failure never hides another's result.
    for (const argv of p.steps ?? [p.argv]) {
      const r = await run(p, argv);
      if (p.steps !== undefined)
        out += `$ ${argv.slice(1).join(' ').replaceAll(`${root}`, '')}: ${r.code === 0 ? 'ok' : 'FAILED'}\n`;
      out += r.out;
      if (r.code !== 0) code = r.code;
    }
    process.stderr.write(`[${secs()} s] ${p.title ?? p.name}: ${code === 0 ? 'passed' : `FAILED (${code})`}\n`);
    return { phase: p, code, out, seconds: secs() };
  }),
);

/** Pids of processes (other than this one) whose command line names a file of `dir`. */
function processesUnder(dir) {
  const pids = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${name}/cmdline`, 'utf8').includes(`${dir}/`)) pids.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

const leftovers = [];
if (buildDir !== root) {
  // A process that is exiting at this moment gets a moment to finish.
  for (let i = 0; i < 30 && processesUnder(buildDir).length > 0; i++) await new Promise((r) => setTimeout(r, 100));
  for (const pid of processesUnder(buildDir)) {
    let cmd = '';
    try {
      cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
      process.kill(pid, 'SIGKILL');
    } catch {
      continue;
    }
    leftovers.push(`process ${pid} (killed): ${cmd.replaceAll(`${buildDir}/`, '').slice(0, 160)}`);
  }
}
/** Every file under `dir` (recursively), relative to it. */
function filesUnder(dir) {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => !e.isDirectory())
    .map((e) => relative(dir, join(e.parentPath ?? e.path, e.name)));
}
for (const entry of readdirSync(tmp)) {
  // tsx's compile cache (the few tests that run a file from source) is not a test's leftover; nor is the gateways'
  // runtime folder (model-gateway-<uid>) once every gateway removed its socket files from it, nor the tokenizer load
  // cache kept there, entries and key notes (src/tokenizer/load-cache.ts).
  if (/^tsx-\d+$/.test(entry)) continue;
  const path = join(tmp, entry);
  let files = statSync(path).isDirectory() ? filesUnder(path) : [entry];
  if (/^model-gateway-\d+$/.test(entry))
    files = files.filter((f) => !/^tokenizers\/[0-9a-f]{64}\.(tokenizer-cache|key)$/.test(f));
  if (/^model-gateway-\d+$/.test(entry) && files.length === 0) continue;
  leftovers.push(
    `temp entry: ${entry}${files.length > 0 && files[0] !== entry ? ` (${files.slice(0, 5).join(', ')}${files.length > 5 ? ', ...' : ''})` : ''}`,
  );
}
rmSync(tmp, { recursive: true, force: true });
rmSync(portClaims, { recursive: true, force: true });

for (const r of results) {
  process.stdout.write(
    `\n===== ${r.phase.title ?? r.phase.name}: ${r.code === 0 ? 'passed' : 'FAILED'} (ended at ${r.seconds} s) =====\n`,
  );
  process.stdout.write(r.out.trimEnd() + '\n');
}
if (leftovers.length > 0)
  process.stdout.write(`\n===== left behind by the tests: FAILED =====\n${leftovers.join('\n')}\n`);
const failed = results.filter((r) => r.code !== 0).map((r) => r.phase.title ?? r.phase.name);
if (leftovers.length > 0) failed.push('teardown');
process.stdout.write(
  `\n${args.length > 0 || only !== undefined ? 'test run' : 'npm test'}: ${failed.length === 0 ? 'every phase passed' : `FAILED: ${failed.join(', ')}`} in ${secs()} s${childCpu()}\n`,
);
process.exitCode = failed.length === 0 ? 0 : 1;
