/** src/collections/id-table.ts: the `Map`/`Set` subset the per-request tables use, with their documented order. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { IdSet, IdTable } from '../../src/collections/id-table.js';

test('IdTable: set, get, has, delete and size, an undefined value included', () => {
  const t = new IdTable<number | undefined>();
  assert.equal(t.size, 0);
  assert.equal(t.get('a'), undefined);
  t.set('a', 1).set('b', undefined).set('a', 2);
  assert.equal(t.size, 2, 'replacing a value does not count twice');
  assert.equal(t.get('a'), 2);
  assert.equal(t.has('b'), true, 'an entry whose value is undefined exists');
  assert.equal(t.has('constructor'), false, 'no inherited names');
  assert.equal(t.has('__proto__'), false);
  t.set('__proto__', 3);
  assert.equal(t.get('__proto__'), 3, '__proto__ is an ordinary key');
  assert.equal(t.delete('b'), true);
  assert.equal(t.delete('b'), false);
  assert.equal(t.size, 2);
  t.clear();
  assert.equal(t.size, 0);
  assert.deepEqual(t.values(), []);
});

test('IdTable: request ids iterate in insertion order, integer handles ascending (and are the same key as their string)', () => {
  const t = new IdTable<string>();
  for (const id of ['chatcmpl-b', 'chatcmpl-a', 'cmpl-x-1', 'cmpl-x-0']) t.set(id, id.toUpperCase());
  t.delete('chatcmpl-a');
  t.set('chatcmpl-a', 'again');
  assert.deepEqual(t.keys(), ['chatcmpl-b', 'cmpl-x-1', 'cmpl-x-0', 'chatcmpl-a']);
  assert.deepEqual(t.values(), ['CHATCMPL-B', 'CMPL-X-1', 'CMPL-X-0', 'again']);
  const h = new IdTable<string>();
  for (const n of [3, 1, 2]) h.set(n, `h${n}`);
  assert.equal(h.get('2'), 'h2');
  assert.deepEqual(h.entries(), [
    ['1', 'h1'],
    ['2', 'h2'],
    ['3', 'h3'],
  ]);
});

test('IdSet: add is idempotent, delete reports presence, keys in order', () => {
  const s = new IdSet();
  s.add('r1').add('r2').add('r1');
  assert.equal(s.size, 2);
  assert.equal(s.has('r1'), true);
  assert.equal(s.delete('r1'), true);
  assert.equal(s.delete('r1'), false);
  assert.deepEqual(s.keys(), ['r2']);
  s.clear();
  assert.equal(s.size, 0);
});
