/**
 * `spawnSimRanks({ slowdowns })`: one rank of a group gets `--slowdown X` (a noisy neighbour; issue #5 part 2).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSimRanks } from '../../src/sim/spawn.js';
import { freePort } from '../helpers/net.js';

test('spawnSimRanks refuses a slowdown for a rank it does not spawn, or a factor that is not > 0', () => {
  const base = { handshakeAddress: 'tcp://127.0.0.1:1', count: 2, firstEngineIndex: 4 };
  assert.throws(() => spawnSimRanks({ ...base, slowdowns: { 6: 2 } }), /engine index 6, not one of 4\.\.5/);
  assert.throws(
    () => spawnSimRanks({ ...base, slowdowns: { 5: 0 } }),
    /slowdown of engine index 5 must be a finite number > 0/,
  );
  assert.throws(() => spawnSimRanks({ ...base, slowdowns: { 4: Number.NaN } }), RangeError);
});

test('spawnSimRanks passes --slowdown to the named rank only', async () => {
  // Nobody listens on the handshake port: the ranks just wait for INIT until stopped.
  const sims = spawnSimRanks({
    handshakeAddress: `tcp://127.0.0.1:${await freePort()}`,
    count: 2,
    slowdowns: { 1: 2.5 },
  });
  try {
    const [r0, r1] = sims.ranks;
    assert.equal(r0!.child.spawnargs.includes('--slowdown'), false);
    const args = r1!.child.spawnargs;
    assert.equal(args[args.indexOf('--slowdown') + 1], '2.5');
  } finally {
    await sims.stop();
  }
  for (const r of sims.ranks) assert.notEqual((await r.exited).code, 2, 'the rank accepted its arguments');
});
