/** chunk-json.ts: a slot-filled chunk is byte for byte `JSON.stringify` of the whole chunk, for any text. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { jsonWithSlot } from '../../src/server/chunk-json.js';

const build = (text: string) => ({
  id: 'chatcmpl-1"\\',
  object: 'chat.completion.chunk',
  created: 1,
  model: 'm\u2028',
  choices: [{ index: 0, delta: { content: text }, logprobs: null, finish_reason: null }],
  usage: null,
});

test('fill(text) equals JSON.stringify(build(text)) for quotes, escapes, controls, lone surrogates and emoji', () => {
  const fill = jsonWithSlot(build);
  const texts = [
    '',
    'hello',
    '"',
    '\\',
    '\n\r\t\b\f',
    '\u0000\u001f\u007f',
    '\ud800',
    'a\udc00b',
    '🐉 龍',
    '</script>',
    '\u2028\u2029',
    'x'.repeat(5000),
  ];
  for (const t of texts) assert.equal(fill(t), JSON.stringify(build(t)), JSON.stringify(t));
  // Random strings over the whole UTF-16 range.
  let seed = 7;
  const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
  for (let i = 0; i < 500; i++) {
    const t = String.fromCharCode(
      ...Array.from({ length: Math.floor(rand() * 12) }, () => Math.floor(rand() * 0x10000)),
    );
    assert.equal(fill(t), JSON.stringify(build(t)));
  }
});

test('lead and trail wrap the filled JSON (a whole SSE record in one step)', () => {
  const fill = jsonWithSlot(build, 'data: ', '\n\n');
  for (const t of ['', 'hi "there"', '\ud800', '🐉']) assert.equal(fill(t), `data: ${JSON.stringify(build(t))}\n\n`);
});

test('a builder that drops, copies or transforms its text is refused', () => {
  assert.throws(() => jsonWithSlot(() => ({ a: 1 })), /exactly once/);
  assert.throws(() => jsonWithSlot((t) => ({ a: t, b: t })), /exactly once/);
  assert.throws(() => jsonWithSlot((t) => ({ a: t.toUpperCase() })), /exactly once/);
});
