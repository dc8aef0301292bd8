/**
 * A `--workers` front's rank and group events, read from two snapshots of a group (src/fronts/front/snapshot-events.ts):
 * counters catch what happened in between even when the state is back where it was.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { GroupSnapshot } from '../../src/fronts/channel/records.js';
import { MAX_EVENTS_PER_COUNTER, snapshotEvents } from '../../src/fronts/front/snapshot-events.js';
import type { BackendRankState } from '../../src/server/backend.js';
import { FakeBackend, rankState } from '../server/fake-backend.js';

/** A snapshot of one group with `ranks` and the group failures `failures`. */
function snap(ranks: BackendRankState[], failures: Record<string, number> = {}): GroupSnapshot {
  const stats = new FakeBackend().stats;
  return {
    worker: 'ipc:///tmp/g',
    name: 'vllm-0',
    engine: 'vllm',
    tasks: ['generate'],
    dpSize: ranks.length,
    maxModelLen: 4096,
    contextTokenLimit: 4096,
    alive: true,
    canServe: true,
    status: 'ok',
    ranks,
    stats: { ...stats, failures, handshakeRejected: {} },
    hasRoom: true,
    adapters: null,
  };
}

const ready = (i: number, fields: Partial<BackendRankState> = {}) => rankState(i, fields);

test('the first snapshot is where counting starts: no events', () => {
  assert.deepEqual(snapshotEvents(undefined, snap([ready(0, { deaths: { 'engine-core-dead': 3 } })])), []);
});

test('a death with its cause, a stall, a return to ready, a group failure', () => {
  const before = snap([ready(0), ready(1), ready(2, { state: 'stalled', cause: 'stall', stalls: 1 })]);
  const after = snap(
    [
      ready(0, { state: 'dead', cause: 'peer-unreachable', deaths: { 'peer-unreachable': 1 } }),
      ready(1, { state: 'stalled', cause: 'stall', stalls: 1 }),
      ready(2, { stalls: 1 }),
    ],
    { watchdog: 1 },
  );
  assert.deepEqual(snapshotEvents(before, after), [
    { event: 'rank', dpRank: 0, state: 'dead', cause: 'peer-unreachable' },
    { event: 'rank', dpRank: 1, state: 'stalled', cause: 'stall' },
    { event: 'rank', dpRank: 2, state: 'ready', cause: null },
    { event: 'failed', cause: 'watchdog' },
  ]);
  assert.deepEqual(snapshotEvents(after, after), [], 'nothing changed: nothing to tell');
});

test('died and rejoined between two snapshots: the death is still told, by its counter', () => {
  const before = snap([ready(0, { deaths: { 'engine-core-dead': 1 }, rejoins: 1 })]);
  const after = snap([ready(0, { deaths: { 'engine-core-dead': 2 }, rejoins: 2 })]);
  assert.deepEqual(snapshotEvents(before, after), [
    { event: 'rank', dpRank: 0, state: 'dead', cause: 'engine-core-dead' },
  ]);
  // Died and dialing in again: the death, then the state it is in now.
  const joining = snap([ready(0, { state: 'joining', deaths: { 'engine-core-dead': 2 } })]);
  assert.deepEqual(snapshotEvents(before, joining), [
    { event: 'rank', dpRank: 0, state: 'dead', cause: 'engine-core-dead' },
    { event: 'rank', dpRank: 0, state: 'joining', cause: null },
  ]);
});

test('a death no counter explains (handshake-timeout) is told by the state; a counter jump is capped', () => {
  const before = snap([ready(0, { state: 'joining' })]);
  const after = snap([ready(0, { state: 'dead', cause: 'handshake-timeout' })]);
  assert.deepEqual(snapshotEvents(before, after), [
    { event: 'rank', dpRank: 0, state: 'dead', cause: 'handshake-timeout' },
  ]);
  const jumped = snap([ready(0, { state: 'joining', stalls: 10_000 })]);
  assert.equal(snapshotEvents(before, jumped).length, MAX_EVENTS_PER_COUNTER);
  // A rank only the new snapshot has starts there.
  assert.deepEqual(snapshotEvents(snap([]), snap([ready(0, { deaths: { replaced: 1 } })])), []);
});
