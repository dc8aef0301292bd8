/**
 * Operator mistakes at start-up end with one clear line on stderr, no stack trace, and a non-zero exit; `--version`
 * prints the version (issue #13 part 3). The CLI's `main` runs in-process for most cases; the port-in-use case and the
 * bin run as child processes.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { main } from '../../src/cli.js';
import { nodeEntry } from '../helpers/entry.js';

const CLI = new URL('../../src/cli.ts', import.meta.url);
const binPath = fileURLToPath(new URL('../../bin/model-gateway.mjs', import.meta.url));
const version = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

/** Run `model-gateway ARGS` as a child (no MODEL_GATEWAY_* from the outer environment); exit code and output. */
function cli(
  args: string[],
  entry: string[] = nodeEntry(CLI),
): Promise<{ code: number; stdout: string; stderr: string }> {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MODEL_GATEWAY_')));
  return new Promise((resolve) => {
    execFile(process.execPath, [...entry, ...args], { env: clean, timeout: 50_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : -1;
      resolve({ code, stdout, stderr });
    });
  });
}

/** Run the CLI's `main` in this process with `env` added to process.env for the call (one child per case is too slow). */
async function inProcess(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  Object.assign(process.env, env);
  const out = { stdout: '', stderr: '' };
  try {
    const code = await main(args, { stdout: (t) => void (out.stdout += t), stderr: (t) => void (out.stderr += t) });
    return { code, ...out };
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

/** Exactly one non-empty line on stderr, starting with `model-gateway: `, and no stack frame. */
function oneLine(stderr: string): string {
  const lines = stderr.split('\n').filter((l) => l.trim() !== '' && !l.startsWith('npm warn'));
  assert.equal(lines.length, 1, `one line on stderr, got:\n${stderr}`);
  assert.match(lines[0]!, /^model-gateway: /);
  assert.ok(!/\n\s+at /.test(stderr), 'no stack trace');
  return lines[0]!;
}

test('--version prints the package version and exits 0 (the bin too)', async () => {
  for (const args of [['--version'], ['-V'], ['serve', '--version']]) {
    const r = await inProcess(args);
    assert.equal(r.code, 0, args.join(' '));
    assert.equal(r.stdout, `model-gateway ${version}\n`);
  }
  const bin = await cli(['--version'], [binPath]);
  assert.equal(bin.code, 0, bin.stderr);
  assert.equal(bin.stdout, `model-gateway ${version}\n`);
});

test('a bad option: one line with a hint to --help, exit 2', async () => {
  const r = await inProcess(['serve', '--prot', '1']);
  assert.equal(r.code, 2);
  assert.equal(oneLine(r.stderr), "model-gateway: unknown option '--prot' (see 'model-gateway serve --help')");
  const v = await inProcess(['serve'], { MODEL_GATEWAY_PORT: 'none' });
  assert.equal(v.code, 2);
  assert.match(oneLine(v.stderr), /--port must be an integer ≥ 0, got 'none' \(from MODEL_GATEWAY_PORT\)/);
  const c = await inProcess(['frobnicate']);
  assert.equal(c.code, 2);
  assert.match(oneLine(c.stderr), /unknown command 'frobnicate' \(see 'model-gateway --help'\)/);
});

test('a keys file that cannot be read or parsed: one line naming the file, exit 1, nothing started', async () => {
  const r = await inProcess([
    'serve',
    '--api-keys-file',
    '/nonexistent/keys.json',
    '--port',
    '0',
    '--log-level',
    'silent',
  ]);
  assert.equal(r.code, 1);
  assert.match(oneLine(r.stderr), /^model-gateway: \/nonexistent\/keys\.json: cannot read it/);
});

test('a missing tokenizer folder or uncached Hugging Face model: one line naming what was tried, exit 1', async () => {
  const dir = await inProcess([
    'serve',
    '--tokenizer',
    '/nonexistent/model-folder',
    '--port',
    '0',
    '--log-level',
    'silent',
  ]);
  assert.equal(dir.code, 1);
  assert.equal(oneLine(dir.stderr), 'model-gateway: tokenizer directory /nonexistent/model-folder does not exist');
  const hf = await inProcess(['serve', '--tokenizer', 'Nobody/NoSuchModel', '--port', '0', '--log-level', 'silent'], {
    HF_HUB_CACHE: '/nonexistent/hub',
  });
  assert.equal(hf.code, 1);
  assert.match(
    oneLine(hf.stderr),
    /Nobody\/NoSuchModel is neither a folder nor a Hugging Face model.*\/nonexistent\/hub\/models--Nobody--NoSuchModel\/refs\/main/,
  );
});

for (const workers of ['1', '2']) {
  test(
    `an HTTP port already in use (--workers ${workers}): one line, exit 1, no simulated rank left behind`,
    { timeout: 55_000 },
    async () => {
      const blocker: Server = createServer();
      await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
      const port = (blocker.address() as { port: number }).port;
      try {
        // --workers 2: the fronts bind the port only after the ranks are spawned, so the router checks it first.
        const r = await cli([
          'serve',
          '--port',
          String(port),
          '--workers',
          workers,
          '--sim',
          '1',
          '--sim-arg=--time-scale=0',
          '--log-format',
          'json',
        ]);
        assert.equal(r.code, 1);
        assert.equal(
          oneLine(r.stderr),
          `model-gateway: cannot listen on 127.0.0.1:${port}: the port is already in use (another gateway?); choose one with --port`,
        );
        // HTTP binds before anything is spawned (serve at once), so a taken port fails the start with no rank started.
        assert.ok(!r.stdout.includes('"simulated ranks spawned"'), 'no simulated rank was spawned');
        assert.ok(!r.stdout.includes('forking a new one'), 'no front was forked');
      } finally {
        await new Promise<void>((resolve) => blocker.close(() => resolve()));
      }
    },
  );
}
