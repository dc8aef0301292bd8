/**
 * The per-rank liveness state machine (src/engine-client/rank-liveness.ts; issue #8), driven directly: every
 * (state, event) pair of its table, epochs, causes, and what never happens (a dead rank is never revived by output).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  INITIAL_LIVENESS,
  isConnected,
  nextLiveness,
  type LivenessEvent,
  type RankLiveness,
} from '../../src/engine-client/rank-liveness.js';

const hello: LivenessEvent = { kind: 'hello' };
const joined: LivenessEvent = { kind: 'joined' };
const heard: LivenessEvent = { kind: 'heard' };
const stall: LivenessEvent = { kind: 'stall' };
const death: LivenessEvent = { kind: 'death', cause: 'peer-unreachable' };
const failed: LivenessEvent = { kind: 'handshake-failed' };

/** Apply events in order from `from`; returns every state visited. */
function run(from: RankLiveness, events: LivenessEvent[]): RankLiveness[] {
  const out: RankLiveness[] = [];
  let l = from;
  for (const e of events) {
    l = nextLiveness(l, e).next;
    out.push(l);
  }
  return out;
}

test('a slot starts joining with epoch 0; a completed handshake makes it ready with epoch 1', () => {
  assert.deepEqual(INITIAL_LIVENESS, { state: 'joining', epoch: 0, cause: null });
  const r = nextLiveness(INITIAL_LIVENESS, joined);
  assert.equal(r.changed, true);
  assert.deepEqual(r.next, { state: 'ready', epoch: 1, cause: null });
});

test('the full table: each state against each event', () => {
  const joining = INITIAL_LIVENESS;
  const ready: RankLiveness = { state: 'ready', epoch: 1, cause: null };
  const stalled: RankLiveness = { state: 'stalled', epoch: 1, cause: 'stall' };
  const dead: RankLiveness = { state: 'dead', epoch: 1, cause: 'peer-unreachable' };
  const expect = (from: RankLiveness, e: LivenessEvent, state: string, epoch: number, changed: boolean) => {
    const r = nextLiveness(from, e);
    assert.equal(r.next.state, state, `${from.state} + ${e.kind}`);
    assert.equal(r.next.epoch, epoch, `${from.state} + ${e.kind}: epoch`);
    assert.equal(r.changed, changed, `${from.state} + ${e.kind}: changed`);
  };
  expect(joining, hello, 'joining', 0, false);
  expect(joining, heard, 'joining', 0, false);
  expect(joining, stall, 'joining', 0, false);
  expect(joining, death, 'joining', 0, false);
  expect(joining, failed, 'joining', 0, false);
  expect(ready, hello, 'ready', 1, false);
  expect(ready, joined, 'ready', 2, true);
  expect(ready, heard, 'ready', 1, false);
  expect(ready, stall, 'stalled', 1, true);
  expect(ready, death, 'dead', 1, true);
  expect(ready, failed, 'ready', 1, false);
  expect(stalled, heard, 'ready', 1, true);
  expect(stalled, stall, 'stalled', 1, false);
  expect(stalled, death, 'dead', 1, true);
  expect(stalled, joined, 'ready', 2, true);
  expect(dead, heard, 'dead', 1, false);
  expect(dead, stall, 'dead', 1, false);
  expect(dead, death, 'dead', 1, false);
  expect(dead, hello, 'joining', 1, true);
  expect(dead, joined, 'ready', 2, true);
});

test('causes: a death keeps its cause; a stall says stall; joining and ready have none', () => {
  const [ready, stalled, back, deadAgain] = run(INITIAL_LIVENESS, [
    joined,
    stall,
    heard,
    { kind: 'death', cause: 'send-timeout' },
  ]);
  assert.equal(ready!.cause, null);
  assert.equal(stalled!.cause, 'stall');
  assert.equal(back!.cause, null);
  assert.deepEqual(deadAgain, { state: 'dead', epoch: 1, cause: 'send-timeout' });
});

test('a rank that died and then fails its new handshake is dead again (handshake-timeout); a never-joined one stays joining', () => {
  const [, , rejoining, afterTimeout] = run(INITIAL_LIVENESS, [joined, death, hello, failed]);
  assert.equal(rejoining!.state, 'joining');
  assert.deepEqual(afterTimeout, { state: 'dead', epoch: 1, cause: 'handshake-timeout' });
  assert.equal(nextLiveness(INITIAL_LIVENESS, failed).next.state, 'joining');
});

test('three kill/rejoin cycles count three new epochs', () => {
  const seq = run(INITIAL_LIVENESS, [joined, death, hello, joined, death, hello, joined, death, hello, joined]);
  assert.deepEqual(
    seq.filter((l) => l.state === 'ready').map((l) => l.epoch),
    [1, 2, 3, 4],
  );
});

test('isConnected: ready and stalled only', () => {
  assert.deepEqual((['joining', 'ready', 'stalled', 'dead'] as const).map(isConnected), [false, true, true, false]);
});
