/**
 * The Dockerfile's structure (issue #13 part 6; `docker build` is not available here), read with dockerfile-ast:
 * a build stage and a node:24-slim (current LTS) runtime stage, a non-root user, a healthcheck on /ready, and every file it copies
 * from the build context exists (and is not excluded by .dockerignore).
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { DockerfileParser, type Copy, type Instruction } from 'dockerfile-ast';

const root = new URL('../../', import.meta.url);
const dockerfile = DockerfileParser.parse(readFileSync(new URL('Dockerfile', root), 'utf8'));
const instructions = dockerfile.getInstructions();
const ignore = readFileSync(new URL('.dockerignore', root), 'utf8')
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l && !l.startsWith('#'));

/** Instructions from the `index`-th FROM up to the next one. */
function stage(index: number): Instruction[] {
  const froms = instructions.map((ins, i) => (ins.getKeyword() === 'FROM' ? i : -1)).filter((i) => i >= 0);
  return instructions.slice(froms[index]!, froms[index + 1] ?? instructions.length);
}

const args = (ins: Instruction) => ins.getArguments().map((a) => a.getValue());
/** The stage a COPY takes its files from (`--from=build`), or null for the build context. */
const copyFrom = (ins: Instruction) => (ins as Copy).getFromFlag?.()?.getValue() ?? null;

test('two stages on node:24-slim (the current LTS): build (npm ci + npm run build) and the runtime stage', () => {
  const froms = dockerfile.getFROMs();
  assert.equal(froms.length, 2);
  for (const f of froms) assert.equal(f.getImage(), 'node:24-slim');
  assert.equal(froms[0]!.getBuildStage(), 'build');
  const runs = stage(0)
    .filter((i) => i.getKeyword() === 'RUN')
    .map((i) => i.getArgumentsContent());
  assert.ok(
    runs.some((r) => r?.includes('npm ci')),
    'the build stage installs with npm ci',
  );
  assert.ok(
    runs.some((r) => r?.includes('npm run build')),
    'the build stage compiles',
  );
  const runtime = stage(1);
  assert.ok(
    runtime.some((i) => i.getKeyword() === 'RUN' && /npm ci --omit=dev/.test(i.getArgumentsContent() ?? '')),
    'the runtime stage installs production dependencies only',
  );
  const fromBuild = runtime.filter((i) => i.getKeyword() === 'COPY' && copyFrom(i) === 'build');
  assert.deepEqual(fromBuild.map(args), [['/app/dist', './dist']], 'the compiled code comes from the build stage');
  const entry = runtime.find((i) => i.getKeyword() === 'ENTRYPOINT');
  assert.match(entry?.getArgumentsContent() ?? '', /"node", "dist\/cli.js"/);
});

test('the runtime stage runs as a non-root user', () => {
  const users = stage(1).filter((i) => i.getKeyword() === 'USER');
  assert.equal(users.length, 1);
  const user = args(users[0]!)[0]!;
  assert.notEqual(user, 'root');
  assert.notEqual(user.split(':')[0], '0');
  // The USER comes before the entry point, after everything that needs root.
  const order = stage(1).map((i) => i.getKeyword());
  assert.ok(order.indexOf('USER') > order.lastIndexOf('RUN'), 'no RUN after USER');
  assert.ok(order.indexOf('USER') < order.indexOf('ENTRYPOINT'), 'USER before ENTRYPOINT');
});

test('a healthcheck on /ready, on the port the gateway listens on', () => {
  const checks = dockerfile.getHEALTHCHECKs();
  assert.equal(checks.length, 1);
  const text = checks[0]!.getArgumentsContent() ?? '';
  assert.match(text, /\/ready/);
  assert.match(text, /MODEL_GATEWAY_PORT/);
  const env = stage(1)
    .filter((i) => i.getKeyword() === 'ENV')
    .map((i) => i.getArgumentsContent() ?? '')
    .join(' ');
  assert.match(env, /MODEL_GATEWAY_PORT=30000/);
  assert.match(env, /MODEL_GATEWAY_HOST=0\.0\.0\.0/);
  assert.ok(
    stage(1).some((i) => i.getKeyword() === 'EXPOSE' && args(i).includes('30000')),
    'EXPOSE 30000',
  );
});

test('every file copied from the build context exists and is not excluded by .dockerignore', () => {
  const copies = instructions.filter((i) => i.getKeyword() === 'COPY' && copyFrom(i) === null);
  assert.ok(copies.length >= 5, `${copies.length} COPY instructions`);
  for (const c of copies) {
    const sources = args(c)
      .filter((a) => !a.startsWith('--'))
      .slice(0, -1);
    for (const src of sources) {
      assert.ok(existsSync(new URL(src, root)), `${src} exists`);
      assert.ok(!ignore.some((p) => p.replace(/\/$/, '') === src.replace(/\/$/, '')), `${src} is not in .dockerignore`);
    }
  }
  // What the runtime needs at run time is copied: the executable, the dashboard, the package manifest.
  const copied = copies.flatMap((c) => args(c));
  for (const needed of ['bin', 'dashboard', 'package.json', 'package-lock.json', 'src'])
    assert.ok(copied.includes(needed), `${needed} is copied`);
});
