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
    if (r.matched !== null) {
      matched = r.matched;
      break;
    }
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

/**
 * vLLM's min_tokens rule (v1 detokenizer.py, PR #22014) as a reference: a stop string counts only when it ends after
 * `boundary` (the text length of the first min_tokens tokens); the earliest such occurrence cuts the text (ties as this
 * matcher breaks them: the longest stop string).
 */
function vllmMinTokensCut(
  text: string,
  stops: readonly string[],
  boundary: number,
): { text: string; matched: string | null } {
  let cut = -1;
  let matched: string | null = null;
  for (const s of stops) {
    const at = text.indexOf(s, Math.max(0, boundary - s.length + 1));
    if (at >= 0 && (cut < 0 || at < cut || (at === cut && s.length > matched!.length))) {
      cut = at;
      matched = s;
    }
  }
  return cut < 0 ? { text, matched: null } : { text: text.slice(0, cut), matched };
}

test('unmatchable text (min_tokens): a stop string wholly inside it is emitted as ordinary text', () => {
  const m = new StopStringMatcher(['END']);
  assert.deepEqual(m.push('a END b', { matchable: false }), { emit: 'a END b', matched: null });
  assert.deepEqual(m.push(' c END d'), { emit: ' c ', matched: 'END' }, 'a later occurrence still stops');
});

test('unmatchable text: a stop string that starts in it and ends after it matches; holdback spans the boundary', () => {
  const m = new StopStringMatcher(['world']);
  assert.deepEqual(
    m.push('hello wor', { matchable: false }),
    { emit: 'hello ', matched: null },
    '"wor" may still begin a match',
  );
  assert.deepEqual(m.push('ld!'), { emit: '', matched: 'world' });
  // A complete occurrence inside the unmatchable text that is also a prefix candidate is held, then released.
  const n = new StopStringMatcher(['ab', 'abc']);
  assert.deepEqual(n.push('xab', { matchable: false }), { emit: 'x', matched: null });
  assert.deepEqual(n.push('d'), { emit: 'abd', matched: null }, '"ab" ended inside the unmatchable text: not a match');
  const o = new StopStringMatcher(['ab', 'abc']);
  assert.deepEqual(o.push('xab', { matchable: false }), { emit: 'x', matched: null });
  assert.deepEqual(o.push('c'), { emit: '', matched: 'abc' }, '"abc" ends after it: a match');
});

test('unmatchable text: matches the vLLM reference for every boundary and split (include_stop_str too)', () => {
  const text = 'ab ## cd ## ef #';
  const stops = ['##', '# c', 'd #'];
  for (let boundary = 0; boundary <= text.length; boundary++) {
    const ref = vllmMinTokensCut(text, stops, boundary);
    for (let split = boundary; split <= text.length; split++) {
      for (const include of [false, true]) {
        const m = new StopStringMatcher(stops, { includeStopStr: include });
        let out = m.push(text.slice(0, boundary), { matchable: false }).emit;
        let matched: string | null = null;
        for (const part of [text.slice(boundary, split), text.slice(split)]) {
          const r = m.push(part);
          out += r.emit;
          matched = r.matched;
          if (matched !== null) break;
        }
        if (matched === null) out += m.flush();
        const what = `boundary ${boundary}, split ${split}, include ${include}`;
        assert.equal(matched, ref.matched, what);
        assert.equal(out, ref.matched !== null && include ? ref.text + ref.matched : ref.text, what);
      }
    }
  }
});
