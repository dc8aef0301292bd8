/** The initial capacity of a lane's next message (src/fronts/channel/outbox.ts `nextSizeHint`, issue 9). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { nextSizeHint } from '../../src/fronts/channel/outbox.js';

test('nextSizeHint: half again the last message, at least 1 KiB, at most the bound', { timeout: 5000 }, () => {
  assert.equal(nextSizeHint(4000, 1024, 1 << 20), 6000);
  assert.equal(nextSizeHint(10, 1024, 1 << 20), 1024);
  assert.equal(nextSizeHint(900_000, 1024, 1 << 20), 1 << 20);
});

test(
  'nextSizeHint: a small message between large ones keeps the hint near the large size; it decays a tenth per message',
  { timeout: 5000 },
  () => {
    let hint = nextSizeHint(8000, 1024, 1 << 20);
    assert.equal(hint, 12_000);
    hint = nextSizeHint(20, hint, 1 << 20); // a turn with one small record
    assert.equal(hint, 10_800);
    assert.ok(hint >= 8000, 'the next batch-sized message fits without growing');
    for (let i = 0; i < 100; i++) hint = nextSizeHint(20, hint, 1 << 20);
    assert.equal(hint, 1024, 'a lane that stays quiet falls back to 1 KiB');
  },
);
