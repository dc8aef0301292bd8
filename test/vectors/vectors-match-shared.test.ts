/**
 * The golden vectors copied into the repository (test/vectors/<set>) still equal the sets they were copied from, file
 * for file and byte for byte, when those are present (`../shared/vectors/<set>` beside the repository, or the folder
 * `GATEWAY_SHARED_DIR` names); skipped otherwise, so a clone of the repository alone needs nothing else. Each copy's
 * README.md is the repository's own and is not compared.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { repoRoot, repoVectorsDir, sharedDirIfPresent } from '../helpers/vectors.js';

const sets = readdirSync(join(repoRoot, 'test', 'vectors')).filter((f) => statSync(join(repoRoot, 'test', 'vectors', f)).isDirectory());

test('the repository holds the vector sets the tests read', () => {
  assert.deepEqual(sets.sort(), ['kv-events', 'tokenspeed', 'tokenspeed-newer', 'vllm']);
});

for (const set of sets) {
  test(`test/vectors/${set} equals ../shared/vectors/${set} (skipped when that folder is absent)`, (t) => {
    const shared = sharedDirIfPresent();
    if (shared === null) {
      t.skip('../shared is not present (set GATEWAY_SHARED_DIR to check from a git worktree)');
      return;
    }
    const theirs = join(shared, 'vectors', set);
    const files = (dir: string) => readdirSync(dir).filter((f) => f !== 'README.md').sort();
    assert.deepEqual(files(repoVectorsDir(set)), files(theirs), `the files of ${set}`);
    for (const f of files(theirs)) {
      assert.ok(readFileSync(join(repoVectorsDir(set), f)).equals(readFileSync(join(theirs, f))), `${set}/${f} differs from ${theirs}`);
    }
  });
}
