/**
 * Operator mistakes at start-up end with one clear line on stderr, no stack trace, and a non-zero exit; `--version`
 * prints the version (issue #13 part 3). Runs the real CLI as a child process.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const cliPath = fileURLToPath(new URL('../../src/cli.ts', import.meta.url));
const version = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

/** Run `model-gateway ARGS` (no MODEL_GATEWAY_* from the outer environment); resolves with exit code and output. */
function cli(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MODEL_GATEWAY_')));
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', cliPath, ...args], { env: { ...clean, ...env }, timeout: 60_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : -1;
      resolve({ code, stdout, stderr });
    });
  });
}

/** Exactly one non-empty line on stderr, starting with `model-gateway: `, and no stack frame. */
function oneLine(stderr: string): string {
  const lines = stderr.split('\n').filter((l) => l.trim() !== '' && !l.startsWith('npm warn'));
  assert.equal(lines.length, 1, `one line on stderr, got:\n${stderr}`);
  assert.match(lines[0]!, /^model-gateway: /);
  assert.ok(!/\n\s+at /.test(stderr), 'no stack trace');
  return lines[0]!;
}

test('--version prints the package version and exits 0', async () => {
  for (const args of [['--version'], ['-V'], ['serve', '--version']]) {
    const r = await cli(args);
    assert.equal(r.code, 0, args.join(' '));
    assert.equal(r.stdout, `model-gateway ${version}\n`);
  }
});

test('a bad option: one line with a hint to --help, exit 2', async () => {
  const r = await cli(['serve', '--prot', '1']);
  assert.equal(r.code, 2);
  assert.equal(oneLine(r.stderr), "model-gateway: unknown option '--prot' (see 'model-gateway serve --help')");
  const v = await cli(['serve'], { MODEL_GATEWAY_PORT: 'none' });
  assert.equal(v.code, 2);
  assert.match(oneLine(v.stderr), /--port must be an integer ≥ 0, got 'none' \(from MODEL_GATEWAY_PORT\)/);
  const c = await cli(['frobnicate']);
  assert.equal(c.code, 2);
  assert.match(oneLine(c.stderr), /unknown command 'frobnicate' \(see 'model-gateway --help'\)/);
});

test('a missing tokenizer folder or uncached Hugging Face model: one line naming what was tried, exit 1', async () => {
  const dir = await cli(['serve', '--tokenizer', '/nonexistent/model-folder', '--port', '0']);
  assert.equal(dir.code, 1);
  assert.equal(oneLine(dir.stderr), 'model-gateway: tokenizer directory /nonexistent/model-folder does not exist');
  const hf = await cli(['serve', '--tokenizer', 'Nobody/NoSuchModel', '--port', '0'], { HF_HUB_CACHE: '/nonexistent/hub' });
  assert.equal(hf.code, 1);
  assert.match(oneLine(hf.stderr), /Nobody\/NoSuchModel is neither a folder nor a Hugging Face model.*\/nonexistent\/hub\/models--Nobody--NoSuchModel\/refs\/main/);
});

test('an HTTP port already in use: one line, exit 1, no simulated rank left behind', { timeout: 90_000 }, async () => {
  const blocker: Server = createServer();
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
  const port = (blocker.address() as { port: number }).port;
  try {
    const r = await cli(['serve', '--port', String(port), '--sim', '1', '--sim-arg=--time-scale=0', '--log-format', 'json']);
    assert.equal(r.code, 1);
    assert.equal(
      oneLine(r.stderr),
      `model-gateway: cannot listen on 127.0.0.1:${port}: the port is already in use (another gateway?); choose one with --port`,
    );
    assert.ok(r.stdout.includes('"sim rank stopped"'), 'the simulated rank was stopped before the exit');
  } finally {
    await new Promise<void>((resolve) => blocker.close(() => resolve()));
  }
});
