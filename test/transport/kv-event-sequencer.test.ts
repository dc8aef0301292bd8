/**
 * The per-rank KV-event sequencer (src/transport/kv-event-sequencer.ts): in-order batches apply; a gap asks for a
 * replay and applies what it brings in order, then the batches held meanwhile; a replay that starts later than asked
 * (the engine's ring overran: the real publisher's reply in test/vectors/kv-events), a gap with no replay socket, a
 * failed replay or too many held batches mark the index unsure; a publisher that restarted resets the index, and
 * watching it start from seq 0 makes the index sure again.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { decodeReplayMessage, type KvEventBatch } from '../../src/protocols/kv-events/codec.js';
import { KvEventSequencer, type KvSequencerEffect } from '../../src/transport/kv-event-sequencer.js';
import { loadRepoVectors } from '../helpers/vectors.js';

const batch = (tag: number): KvEventBatch => ({ ts: tag, events: [], rank: 0, unknownEvents: 0 });
/** Effects as short strings: `apply 3`, `replay 2`, `reset`, `unsure`, `sure`. */
const brief = (effects: KvSequencerEffect[]): string[] =>
  effects.map((e) => (e.kind === 'apply' ? `apply ${e.seq}` : e.kind === 'replay' ? `replay ${e.from}` : e.kind));

describe('KvEventSequencer', () => {
  test('batches in order apply; a first batch of seq 0 needs nothing else', () => {
    const s = new KvEventSequencer({ replay: true });
    assert.deepEqual(brief(s.live(0n, batch(0))), ['apply 0']);
    assert.deepEqual(brief(s.live(1n, batch(1))), ['apply 1']);
    assert.equal(s.indexSure, true);
  });

  test('a (re)connected SUB asks for what was published before its subscription took effect (slow joiner)', () => {
    const s = new KvEventSequencer({ replay: true });
    assert.deepEqual(brief(s.connected()), ['replay 0'], 'before any batch: from seq 0');
    assert.deepEqual(brief(s.connected()), [], 'one replay at a time');
    assert.deepEqual(brief(s.live(2n, batch(2))), [], 'held');
    assert.deepEqual(brief(s.replayBatch(0n, batch(0))), ['apply 0']);
    assert.deepEqual(brief(s.replayBatch(1n, batch(1))), ['apply 1']);
    assert.deepEqual(brief(s.replayEnd()), ['apply 2']);
    assert.deepEqual(brief(s.connected()), ['replay 3'], 'a reconnect: from the next seq needed');
    assert.deepEqual(brief(s.replayEnd()), [], 'nothing new');
    assert.deepEqual(brief(s.live(3n, batch(3))), ['apply 3']);
    assert.equal(s.indexSure, true);
    assert.deepEqual(brief(new KvEventSequencer({ replay: false }).connected()), [], 'no replay socket: nothing');
  });

  test('a gap: replay from the first missing seq, apply in order, then the held batches without duplicates', () => {
    const s = new KvEventSequencer({ replay: true });
    s.live(0n, batch(0));
    assert.deepEqual(brief(s.live(3n, batch(3))), ['replay 1']);
    assert.equal(s.replayRunning, true);
    assert.deepEqual(brief(s.live(4n, batch(4))), [], 'held while the replay runs');
    assert.deepEqual(brief(s.replayBatch(1n, batch(1))), ['apply 1']);
    assert.deepEqual(brief(s.replayBatch(2n, batch(2))), ['apply 2']);
    assert.deepEqual(brief(s.replayBatch(3n, batch(3))), ['apply 3']);
    assert.deepEqual(brief(s.replayEnd()), ['apply 4'], 'seq 3 came twice; applied once');
    assert.equal(s.indexSure, true);
    assert.deepEqual(brief(s.live(5n, batch(5))), ['apply 5']);
  });

  test("a replay that starts later than asked (the engine's ring overran) leaves the index unsure", () => {
    // The real publisher's answer to a request from 0 with buffer_steps 2 after 4 batches: seqs 2, 3, then the end.
    const v = loadRepoVectors('kv-events').find((x) => x.name === 'ts_replay_buffer_overrun')!;
    const reply = (v.messages_frames_hex as string[][]).map((m) =>
      decodeReplayMessage(m.map((h) => Uint8Array.from(Buffer.from(h, 'hex')))),
    );
    const s = new KvEventSequencer({ replay: true });
    assert.deepEqual(brief(s.live(3n, batch(3))), ['replay 0'], 'joined late: bootstrap from 0');
    const effects: KvSequencerEffect[] = [];
    for (const m of reply) effects.push(...(m.kind === 'batch' ? s.replayBatch(m.seq, m.batch) : s.replayEnd()));
    assert.deepEqual(brief(effects), ['unsure', 'apply 2', 'apply 3']);
    assert.equal(s.indexSure, false);
  });

  test('no replay socket: a gap, or a first batch after seq 0, is lost for good', () => {
    const late = new KvEventSequencer({ replay: false });
    assert.deepEqual(brief(late.live(7n, batch(7))), ['unsure', 'apply 7']);
    const gap = new KvEventSequencer({ replay: false });
    gap.live(0n, batch(0));
    assert.deepEqual(brief(gap.live(2n, batch(2))), ['unsure', 'apply 2']);
    assert.deepEqual(brief(gap.live(4n, batch(4))), ['apply 4'], 'unsure is said once');
  });

  test('a publisher that restarted resets the index; seeing its seq 0 makes the index sure again', () => {
    const s = new KvEventSequencer({ replay: false });
    s.live(5n, batch(5));
    assert.equal(s.indexSure, false);
    assert.deepEqual(brief(s.live(0n, batch(0))), ['reset', 'sure', 'apply 0']);
    assert.equal(s.indexSure, true);
    assert.deepEqual(brief(s.live(1n, batch(1))), ['apply 1']);
    // A restart seen at seq 2 (its first batches lost): reset, and unsure until a replay or another start.
    assert.deepEqual(brief(s.live(2n, batch(2))), ['apply 2']);
    assert.deepEqual(brief(s.live(1n, batch(1))), ['reset', 'unsure', 'apply 1']);
  });

  test('a failed replay, or too many batches held during it: unsure, the held batches applied, late replies ignored', () => {
    const failed = new KvEventSequencer({ replay: true });
    failed.live(0n, batch(0));
    failed.live(2n, batch(2));
    assert.deepEqual(brief(failed.replayFailed('timed out')), ['unsure', 'apply 2']);
    assert.deepEqual(brief(failed.replayBatch(1n, batch(1))), [], 'a reply after giving up is ignored');
    assert.deepEqual(brief(failed.live(3n, batch(3))), ['apply 3']);

    const flooded = new KvEventSequencer({ replay: true, maxHeld: 2 });
    flooded.live(0n, batch(0));
    flooded.live(2n, batch(2));
    assert.deepEqual(brief(flooded.live(3n, batch(3))), []);
    assert.deepEqual(brief(flooded.live(4n, batch(4))), ['unsure', 'apply 2', 'apply 3', 'apply 4']);
    assert.equal(flooded.replayRunning, false);
    assert.deepEqual(brief(flooded.replayEnd()), []);
    assert.throws(() => new KvEventSequencer({ replay: true, maxHeld: 0 }), RangeError);
  });
});
