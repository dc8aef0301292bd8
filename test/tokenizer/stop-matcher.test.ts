import { test } from 'node:test';
import assert from 'node:assert/strict';
import { StopStringMatcher } from '../../src/tokenizer/stop-matcher.js';

/** Feed `deltas`, returning the emitted pieces, the concatenation (with the flush) and the match. */
function run(stops: string[], deltas: string[], includeStopStr = false) {
  const m = new StopStringMatcher(stops, { includeStopStr });
  const pieces: string[] = [];
  let matched: string | null = null;
  for (const d of deltas) {
    const r = m.push(d);
    pieces.push(r.emit);
    if (r.matched !== null) { matched = r.matched; break; }
  }
  const flushed = m.flush();
  return { pieces, text: pieces.join('') + flushed, matched, flushed };
}

test('a stop string split across deltas is matched and never emitted', () => {
  const r = run(['END'], ['hello E', 'N', 'D tail', 'more']);
  assert.equal(r.matched, 'END');
  assert.equal(r.text, 'hello ');
  assert.deepEqual(r.pieces, ['hello ', '', '']);
  for (const p of r.pieces) assert.ok(!/[END]/.test(p), `piece ${JSON.stringify(p)} leaked stop text`);
});

test('holds back only the longest suffix that is a proper prefix of a stop string', () => {
  const m = new StopStringMatcher(['abc', 'xyz']);
  assert.deepEqual(m.push('12a'), { emit: '12', matched: null });
  assert.deepEqual(m.push('b'), { emit: '', matched: null });
  assert.deepEqual(m.push('x'), { emit: 'ab', matched: null }, '"abx" is no prefix: release up to the new prefix "x"');
  assert.deepEqual(m.push('q'), { emit: 'xq', matched: null });
  assert.equal(m.flush(), '');
});

test('held-back text that never completes a stop string is flushed at the end', () => {
  const r = run(['</s>'], ['text </', 's']);
  assert.equal(r.matched, null);
  assert.equal(r.flushed, '</s');
  assert.equal(r.text, 'text </s');
});

test('include_stop_str_in_output keeps the stop string and drops what follows', () => {
  const r = run(['STOP'], ['aST', 'OPb', 'c'], true);
  assert.equal(r.matched, 'STOP');
  assert.equal(r.text, 'aSTOP');
});

test('the earliest match wins; ties go to the longest stop string', () => {
  assert.equal(run(['bc', 'ab'], ['xabc']).text, 'x');
  assert.equal(run(['bc', 'ab'], ['xabc']).matched, 'ab');
  const tie = run(['a', 'ab'], ['zab'], true);
  assert.equal(tie.matched, 'ab');
  assert.equal(tie.text, 'zab');
});

test('a stop string inside one delta (inside a longer token) matches', () => {
  const r = run(['\n\n'], ['para one.\n\npara two']);
  assert.equal(r.text, 'para one.');
});

test('emoji and CJK stop strings match across deltas; after a match everything is ignored', () => {
  const m = new StopStringMatcher(['停止😀']);
  assert.deepEqual(m.push('好的停'), { emit: '好的', matched: null });
  assert.deepEqual(m.push('止'), { emit: '', matched: null });
  assert.deepEqual(m.push('😀!'), { emit: '', matched: '停止😀' });
  assert.deepEqual(m.push('more'), { emit: '', matched: '停止😀' });
  assert.equal(m.flush(), '');
});

test('no stop strings: text passes through unchanged; empty stop strings are refused', () => {
  const m = new StopStringMatcher([]);
  assert.ok(m.empty);
  assert.deepEqual(m.push('abc'), { emit: 'abc', matched: null });
  assert.throws(() => new StopStringMatcher(['ok', '']), RangeError);
});

test('any split of a text gives the same concatenated output', () => {
  const text = 'The answer: 42 ### done ## ok ###';
  const stops = ['###', '# d'];
  const whole = run(stops, [text]).text;
  assert.equal(whole, 'The answer: 42 ');
  for (let i = 0; i <= text.length; i++) {
    for (let j = i; j <= text.length; j += 3) {
      const r = run(stops, [text.slice(0, i), text.slice(i, j), text.slice(j)]);
      assert.equal(r.text, whole, `split at ${i},${j}`);
    }
  }
});
