/**
 * `--tokenizer ORG/NAME` resolved offline from a Hugging Face hub cache that the test builds the way
 * huggingface_hub lays it out (blobs/, snapshots/<commit>/ with symlinks into blobs/, refs/<branch>).
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, symlink, writeFile, copyFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { pino } from 'pino';
import { startGateway } from '../../src/gateway/index.js';
import { TokenizerLoadError } from '../../src/tokenizer/errors.js';
import { hubCacheDir, looksLikeHfId, resolveTokenizerSpec } from '../../src/tokenizer/hf-cache.js';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';

const MAIN = 'a'.repeat(40);
const DEV = 'b'.repeat(40);
let root: string;
let hub: string;

/** One cached model `models--Org--Tiny` with revision main → MAIN and a branch dev → DEV. */
before(async () => {
  root = await mkdtemp(join(tmpdir(), 'mg-hf-'));
  hub = join(root, 'hub');
  const repo = join(hub, 'models--Org--Tiny');
  await mkdir(join(repo, 'blobs'), { recursive: true });
  await mkdir(join(repo, 'refs'), { recursive: true });
  const source = GatewayTokenizer.defaultDir();
  for (const [rev, blobs] of [
    [MAIN, ['tokenizer.json', 'tokenizer_config.json']],
    [DEV, ['tokenizer.json', 'tokenizer_config.json']],
  ] as const) {
    const snap = join(repo, 'snapshots', rev);
    await mkdir(snap, { recursive: true });
    for (const name of blobs) {
      const blob = join(repo, 'blobs', `${rev.slice(0, 4)}-${name}`);
      await copyFile(join(source, name), blob);
      await symlink(join('..', '..', 'blobs', `${rev.slice(0, 4)}-${name}`), join(snap, name));
    }
  }
  await writeFile(join(repo, 'refs', 'main'), `${MAIN}\n`);
  await writeFile(join(repo, 'refs', 'dev'), DEV);
});
after(() => rm(root, { recursive: true, force: true }));

const env = (vars: Record<string, string>) => ({ env: vars, cwd: root, home: join(root, 'home') });

test('the hub folder: HF_HUB_CACHE, then HUGGINGFACE_HUB_CACHE, HF_HOME/hub, XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub', () => {
  assert.equal(hubCacheDir(env({ HF_HUB_CACHE: '/a', HF_HOME: '/b' })), '/a');
  assert.equal(hubCacheDir(env({ HUGGINGFACE_HUB_CACHE: '/c', HF_HOME: '/b' })), '/c');
  assert.equal(hubCacheDir(env({ HF_HOME: '/b', XDG_CACHE_HOME: '/x' })), '/b/hub');
  assert.equal(hubCacheDir(env({ XDG_CACHE_HOME: '/x' })), '/x/huggingface/hub');
  assert.equal(hubCacheDir(env({})), join(root, 'home', '.cache', 'huggingface', 'hub'));
});

test('ORG/NAME resolves through refs/main to its snapshot; @branch and @commit pick another', () => {
  const snapshot = (rev: string) => join(hub, 'models--Org--Tiny', 'snapshots', rev);
  assert.deepEqual(resolveTokenizerSpec('Org/Tiny', env({ HF_HUB_CACHE: hub })), {
    dir: snapshot(MAIN),
    hfId: 'Org/Tiny',
    revision: 'main',
  });
  assert.equal(resolveTokenizerSpec('Org/Tiny', env({ HF_HOME: root })).dir, snapshot(MAIN));
  assert.equal(resolveTokenizerSpec('Org/Tiny@dev', env({ HF_HUB_CACHE: hub })).dir, snapshot(DEV));
  assert.equal(resolveTokenizerSpec(`Org/Tiny@${DEV}`, env({ HF_HUB_CACHE: hub })).dir, snapshot(DEV));
  // A folder that exists is a folder, even when it could be an id.
  assert.deepEqual(resolveTokenizerSpec('hub', env({ HF_HUB_CACHE: hub })), { dir: hub, hfId: null, revision: null });
  assert.equal(
    resolveTokenizerSpec('./no/such', env({ HF_HUB_CACHE: hub })).dir,
    join(root, 'no', 'such'),
    'paths stay paths',
  );
  assert.equal(looksLikeHfId('/models/x'), false);
  assert.equal(looksLikeHfId('Qwen/Qwen3-8B'), true);
});

test('a model that is not cached is a TokenizerLoadError naming every path tried', () => {
  assert.throws(
    () => resolveTokenizerSpec('Org/Missing', env({ HF_HUB_CACHE: hub })),
    (e: unknown) =>
      e instanceof TokenizerLoadError &&
      e.message.includes(join(root, 'Org', 'Missing')) &&
      e.message.includes(join(hub, 'models--Org--Missing', 'refs', 'main')) &&
      /huggingface-cli download Org\/Missing/.test(e.message),
  );
  assert.throws(
    () => resolveTokenizerSpec(`Org/Tiny@${'c'.repeat(40)}`, env({ HF_HUB_CACHE: hub })),
    (e: unknown) =>
      e instanceof TokenizerLoadError &&
      e.message.includes(join(hub, 'models--Org--Tiny', 'snapshots', 'c'.repeat(40))),
  );
});

test(
  'startGateway --tokenizer Org/Tiny: loads the snapshot (symlinks into blobs) and serves it as model Org/Tiny',
  { timeout: 60_000 },
  async () => {
    const saved = process.env.HF_HUB_CACHE;
    process.env.HF_HUB_CACHE = hub;
    try {
      const gateway = await startGateway({
        tokenizerDir: 'Org/Tiny',
        port: 0,
        sim: 1,
        simArgs: ['--time-scale', '0', '--log-level', 'warn'],
        logger: pino({ level: 'silent' }),
      });
      try {
        const models = (await (await fetch(`${gateway.url}/v1/models`)).json()) as { data: Array<{ id: string }> };
        assert.deepEqual(
          models.data.map((m) => m.id),
          ['Org/Tiny'],
        );
        const res = await fetch(`${gateway.url}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'Org/Tiny', prompt: 'hello', max_tokens: 4 }),
        });
        assert.equal(res.status, 200);
      } finally {
        await gateway.close();
      }
    } finally {
      if (saved === undefined) delete process.env.HF_HUB_CACHE;
      else process.env.HF_HUB_CACHE = saved;
    }
  },
);
