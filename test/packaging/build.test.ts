/**
 * `npm run build` output runs on plain node (issue #13 part 6): the build tsconfig compiles src/ to a folder beside
 * src/ (here a temporary one at the package root, so the compiled code finds package.json and dashboard/ the same
 * way dist/ does), `node <out>/cli.js serve` starts a gateway whose simulated ranks run the compiled simulator
 * without tsx, and it answers a completion and the dashboard.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../', import.meta.url));
let out: string;

before(
  async () => {
    out = await mkdtemp(`${root}.build-test-`);
    await new Promise<void>((resolve, reject) => {
      execFile(
        process.execPath,
        // --noCheck: emit only (npm test type-checks everything first), so the build fits the file's time budget.
        // --noResolve: the packages' type declarations are not read either (~25 % less CPU); with isolatedModules and
        // verbatimModuleSyntax each file's output depends on that file alone, so it is the same output.
        [
          fileURLToPath(new URL('../../node_modules/typescript/bin/tsc', import.meta.url)),
          '-p',
          'tsconfig.build.json',
          '--noCheck',
          '--noResolve',
          '--outDir',
          out,
        ],
        { cwd: root, timeout: 50_000 },
        (err, stdout, stderr) => (err ? reject(new Error(`tsc failed: ${stdout}${stderr}`)) : resolve()),
      );
    });
  },
  { timeout: 55_000 },
);
after(() => rm(out, { recursive: true, force: true }));

test('the compiled CLI prints its version', { timeout: 30_000 }, async () => {
  const version = (JSON.parse(readFileSync(`${root}package.json`, 'utf8')) as { version: string }).version;
  const stdout = await new Promise<string>((resolve, reject) =>
    execFile(process.execPath, [`${out}/cli.js`, '--version'], (err, s) => (err ? reject(err) : resolve(s))),
  );
  assert.equal(stdout, `model-gateway ${version}\n`);
});

test(
  'node <build>/cli.js serve: compiled gateway and compiled simulated ranks serve a request',
  { timeout: 55_000 },
  async () => {
    const gw = spawn(
      process.execPath,
      [
        `${out}/cli.js`,
        'serve',
        '--workers',
        '1',
        '--port',
        '0',
        '--sim',
        '2',
        '--log-format',
        'json',
        '--sim-arg=--time-scale=0',
      ],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
        env: Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MODEL_GATEWAY_'))),
      },
    );
    let stderr = '';
    gw.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    try {
      const lines = createInterface({ input: gw.stdout, crlfDelay: Infinity });
      let url: string | null = null;
      for await (const line of lines) {
        const m = /"msg":"model-gateway listening on (http:\/\/[^"]+)"/.exec(line);
        if (m) {
          url = m[1]!;
          break;
        }
      }
      assert.ok(url, `the gateway listened; stderr: ${stderr}`);
      // It listens before its ranks have joined (serve at once, issue #8): wait until a group can serve.
      for (
        let i = 0;
        i < 600 &&
        (await fetch(`${url}/ready`).then(
          (r) => r.status,
          () => 0,
        )) !== 200;
        i++
      )
        await new Promise((r) => setTimeout(r, 50));
      // The ranks run the compiled simulator on plain node.
      const ps = await new Promise<string>((resolve) =>
        execFile('pgrep', ['-a', '-P', String(gw.pid)], (_e, s) => resolve(s)),
      );
      const ranks = ps.split('\n').filter((l) => l.includes('/sim/main.js'));
      assert.equal(ranks.length, 2, ps);
      assert.ok(
        ranks.every((l) => l.includes(out) && !l.includes('tsx')),
        ps,
      );

      const res = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: 'hello', max_tokens: 4 }),
      });
      assert.equal(res.status, 200);
      assert.equal(((await res.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens, 4);
      const dash = await fetch(`${url}/dashboard`);
      assert.equal(dash.status, 200);
      assert.match(await dash.text(), /model-gateway dashboard/);
    } finally {
      const exited = once(gw, 'exit');
      gw.kill('SIGTERM');
      const [code] = (await exited) as [number | null];
      assert.equal(code, 0, `clean shutdown; stderr: ${stderr}`);
    }
  },
);
