/**
 * Every command-line entry answers `--help` with its usage on stdout and exit code 0, and a bad option with a message
 * and the usage, exit code 2, never a stack trace (issue 27 part 5): `model-gateway` (and `serve`, `sim`) and every
 * `bench:*` script of package.json, plus the benchmark diagnostics under bench/ that have no script.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { repoRoot } from '../helpers/vectors.js';
import { nodeEntry } from '../helpers/entry.js';

/** `node <file> ...args` in the repository (transpiled or through tsx: ../helpers/entry.ts): exit code, stdout and stderr. */
function run(file: string, args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...nodeEntry(pathToFileURL(join(repoRoot, file))), ...args], {
      cwd: repoRoot,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, out, err }));
  });
}

const STACK = /^\s+at .+\(.+:\d+:\d+\)$/m;
const scripts = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')).scripts as Record<string, string>;
const benchFiles = Object.entries(scripts)
  .filter(([name]) => name.startsWith('bench:'))
  .map(([name, command]) => [name, /tsx (\S+\.ts)/.exec(command)?.[1]] as const);

const entries: Array<[string, string, string[]]> = [
  ['model-gateway', 'src/cli.ts', []],
  ['model-gateway serve', 'src/cli.ts', ['serve']],
  ['model-gateway sim', 'src/cli.ts', ['sim']],
  ...benchFiles.map(([name, file]): [string, string, string[]] => [`npm run ${name}`, file ?? '(no file)', []]),
  ['bench/sim-step.ts', 'bench/sim-step.ts', []],
];

describe('--help and bad options on every entry', { concurrency: 4 }, () => {
  test('package.json has bench:* scripts, each running one bench/*.ts file', () => {
    assert.ok(benchFiles.length >= 5);
    for (const [name, file] of benchFiles) assert.match(file ?? '', /^bench\/[\w-]+\.ts$/, name);
  });

  for (const [name, file, before] of entries) {
    test(`${name} --help: usage on stdout, exit 0`, { timeout: 60_000 }, async () => {
      const r = await run(file, [...before, '--help']);
      assert.equal(r.code, 0, r.err);
      assert.match(r.out, /usage|options/i);
      assert.doesNotMatch(r.out + r.err, STACK);
    });
    test(`${name} --no-such-option: a message, exit 2, no stack trace`, { timeout: 60_000 }, async () => {
      const r = await run(file, [...before, '--no-such-option']);
      assert.equal(r.code, 2, `exit code; stderr: ${r.err}`);
      assert.match(r.err, /no-such-option/);
      assert.doesNotMatch(r.out + r.err, STACK);
    });
  }
});

test('model-gateway --help fits 100 columns and lists what a first user needs first (issue 27 part 4)', async () => {
  const { USAGE } = await import('../../src/cli.js');
  const wide = USAGE.split('\n').filter((l) => [...l].length > 100);
  assert.deepEqual(wide, [], 'lines over 100 columns');
  const at = (s: string) => {
    const i = USAGE.indexOf(s);
    assert.ok(i >= 0, s);
    return i;
  };
  // Examples, then the engine group options, then port, key and model; tuning after.
  assert.ok(at('examples:') < at('  --engine-url URL'));
  for (const first of [
    '  --engine-url URL',
    '  --dp-size N',
    '  --engine ENGINE',
    '  --port N',
    '  --api-key KEY',
    '  --tokenizer DIR',
  ]) {
    for (const later of [
      '  --silence-timeout-ms N',
      '  --dp-policy NAME',
      '  --max-concurrent-requests N',
      '  --allowed-origins',
    ]) {
      assert.ok(at(first) < at(later), `${first.trim()} before ${later.trim()}`);
    }
  }
});
