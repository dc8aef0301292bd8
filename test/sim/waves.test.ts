import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LockstepWaves } from '../../src/sim/waves.js';

test('a rank starts parked at wave 0; START w ≥ current starts it at w; parking reports w and moves to w + 1 (5.12)', () => {
  const w = new LockstepWaves(0);
  assert.deepEqual([w.currentWave, w.running, w.stepCounter], [0, false, 0]);
  assert.equal(w.start(0), 'started', 'equal to the current wave is accepted');
  w.stepped();
  w.stepped();
  assert.equal(w.stepCounter, 2);
  assert.equal(w.park(), 0);
  assert.deepEqual([w.currentWave, w.running, w.stepCounter], [1, false, 0]);
  assert.equal(w.start(5), 'started', 'a higher wave is adopted');
  assert.equal(w.currentWave, 5);
  assert.equal(w.park(), 5);
  assert.equal(w.currentWave, 6);
});

test('START below the current wave is stale; START while stepping is a no-op; START excluding this rank is ignored', () => {
  const w = new LockstepWaves(3);
  w.start(2);
  w.park(); // now at 3, parked
  assert.equal(w.start(2), 'stale');
  assert.equal(w.running, false);
  assert.equal(w.start(9, 3), 'excluded');
  assert.equal(w.running, false);
  assert.equal(w.start(4, 1), 'started', 'excluding another rank does not matter');
  assert.equal(w.start(7), 'running');
  assert.equal(w.currentWave, 4, 'the running wave keeps its number');
  assert.throws(() => {
    w.park();
    w.park();
  }, /already parked/);
});

test('an ADD for a drained wave on a parked rank asks for start_wave = current; otherwise no notice', () => {
  const w = new LockstepWaves(0);
  assert.equal(w.arrived(0), null, 'wave 0 is the current wave: no notice');
  w.start(0);
  w.park(); // at 1
  assert.equal(w.arrived(0), 1, 'the gateway sends current_wave 0: a drained wave');
  w.start(1);
  assert.equal(w.arrived(0), null, 'a stepping rank takes the request into its wave');
  w.park(); // at 2
  assert.equal(w.arrived(5), null, 'a later wave is adopted without a notice');
  assert.equal(w.currentWave, 5);
  assert.equal(w.running, false);
});
