/**
 * StringList (src/tokenizer/string-list.ts): the lookup a cached tokenizer reads its token → id and pair → rank
 * tables with. It must answer `get` / `has` exactly as a Map built from the same items would, for every item and for
 * strings that are not items, and read back what it wrote.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { StringList, slotCount, type StringListIndex } from '../../src/tokenizer/string-list.js';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import { prng } from '../helpers/prng.js';

/** Asserts `list` answers like `new Map(items.map((s, i) => [s, i]))` for every item and for `others`. */
function assertLikeMap(list: StringList, items: readonly string[], others: readonly unknown[]): void {
  const map = new Map(items.map((s, i) => [s, i]));
  assert.equal(list.size, map.size);
  assert.equal(list.length, items.length);
  for (let i = 0; i < items.length; i++) {
    const s = items[i]!;
    if (list.get(s) !== map.get(s) || !list.has(s) || list.at(i) !== s) assert.fail(`item ${i} ${JSON.stringify(s)}`);
  }
  for (const o of others) {
    const want = map.get(o as string);
    assert.equal(list.get(o), want, `not an item: ${JSON.stringify(o)}`);
    assert.equal(list.has(o), want !== undefined);
  }
}

describe('StringList', () => {
  test('answers like a Map: items, non-items, non-strings, the empty string, surrogates', () => {
    const items = ['a', '', 'ab', 'ba', 'Ġthe', '中文', '😀', '\ud800', 'a'.repeat(300), '["a","b"]'];
    const list = StringList.fromStrings(items);
    assertLikeMap(list, items, ['b', 'aa', 'A', ' a', 'a ', '\udc00', '😀x', 'a'.repeat(299), undefined, null, 1, {}]);
    assert.equal(list.at(-1), undefined);
    assert.equal(list.at(items.length), undefined);
    assert.equal(list.at(1.5), undefined);
    assert.deepEqual(list.toArray(), items);
  });

  test('joined() parses back to the same list; two lists read from one text in turn', () => {
    const first = ['x', 'yy', ''];
    const second = ['p', 'q'];
    const text = StringList.fromStrings(first).joined() + '\0' + StringList.fromStrings(second).joined();
    const a = StringList.parse(text, 0, first.length);
    assert.ok(a !== null);
    assert.deepEqual(a.list.toArray(), first);
    const b = StringList.parse(text, a.next, second.length);
    assert.ok(b !== null);
    assert.deepEqual(b.list.toArray(), second);
    assert.equal(b.next, text.length, 'the second list ends the text');
    assertLikeMap(b.list, second, ['x', 'yy', '']);
    const none = StringList.parse(text, b.next, 0);
    assert.ok(none !== null);
    assert.equal(none.list.size, 0);
    assert.equal(none.next, text.length);
    assert.equal(none.list.get(''), undefined);
    assert.equal(StringList.fromStrings(['only']).joined(), 'only');
    assert.equal(StringList.fromStrings([]).joined(), '');
  });

  test('an item listed twice: its last position, as Map.set in list order keeps', () => {
    const items = ['a', 'b', 'a', 'c', 'b', 'a'];
    const list = StringList.fromStrings(items);
    assertLikeMap(list, items, ['d', '']);
    assert.equal(list.get('a'), 5);
    assert.equal(list.size, 3, 'distinct items');
    assert.equal(list.length, 6);
    assert.deepEqual(list.toArray(), items);
  });

  test('refuses what it cannot read: too few items, NUL inside an item', () => {
    assert.equal(StringList.parse('a\0b', 0, 3), null, 'two items where three were counted');
    assert.throws(() => StringList.fromStrings(['a', 'b\0c']), /item 1 contains NUL/);
    const more = StringList.parse('a\0b\0c', 0, 2);
    assert.ok(more !== null);
    assert.deepEqual(more.list.toArray(), ['a', 'b']);
    assert.equal(more.next, 4, 'the rest of the text is left to the caller');
  });

  test('seeded random lists of colliding, prefix-sharing strings', () => {
    const random = prng(27);
    for (let round = 0; round < 20; round++) {
      const seen = new Set<string>();
      const alphabet = ['a', 'b', 'Ġ', '中', '\ud83d\ude00'];
      while (seen.size < 500) {
        let s = '';
        const n = Math.floor(random() * 6);
        for (let i = 0; i < n; i++) s += alphabet[Math.floor(random() * alphabet.length)];
        seen.add(s);
      }
      const items = [...seen];
      const others = Array.from({ length: 300 }, () => items[Math.floor(random() * items.length)]! + 'a');
      assertLikeMap(StringList.fromStrings(items), items, others);
    }
  });

  test('fromIndex rebuilds a list from its text and index arrays: the same answers, every item', () => {
    const random = prng(29);
    const lists: string[][] = [
      [],
      ['only'],
      [''],
      ['a', ''],
      ['', 'a', ''],
      ['a', 'b', 'a', 'c', 'b', 'a'],
      ['\ud800', '😀', '中文', 'Ġthe'],
    ];
    for (let round = 0; round < 10; round++) {
      const alphabet = ['a', 'b', 'Ġ', '中', '\ud83d\ude00', '\udc00'];
      lists.push(
        Array.from({ length: 1 + Math.floor(random() * 400) }, () => {
          let s = '';
          for (let i = Math.floor(random() * 5); i > 0; i--) s += alphabet[Math.floor(random() * alphabet.length)];
          return s;
        }),
      );
    }
    for (const items of lists) {
      const built = StringList.fromStrings(items);
      const copy = (i: StringListIndex): StringListIndex => ({
        starts: i.starts.slice(),
        hashes: i.hashes.slice(),
        slots: i.slots.slice(),
        size: i.size,
      });
      const rebuilt = StringList.fromIndex(built.joined(), copy(built.indexArrays()));
      assert.ok(rebuilt !== null, JSON.stringify(items.slice(0, 5)));
      assertLikeMap(rebuilt, items, ['zz', 'a\0b', undefined]);
      assert.deepEqual(rebuilt.toArray(), items);
      assert.equal(rebuilt.joined(), built.joined());
    }
  });

  test('fromIndex refuses arrays that do not fit the text or each other', () => {
    const items = ['a', 'bb', 'a', 'ccc'];
    const list = StringList.fromStrings(items);
    const text = list.joined();
    const good = list.indexArrays();
    const variant = (change: (i: StringListIndex) => void): StringListIndex => {
      const i = {
        starts: good.starts.slice(),
        hashes: good.hashes.slice(),
        slots: good.slots.slice(),
        size: good.size,
      };
      change(i);
      return i;
    };
    const firstFilled = good.slots.findIndex((e) => e !== 0);
    const firstEmpty = good.slots.findIndex((e) => e === 0);
    const bad: Array<[string, string, StringListIndex]> = [
      ['one start fewer', text, variant((i) => (i.starts = i.starts.subarray(1)))],
      ['one hash more', text, variant((i) => (i.hashes = Int32Array.from([...i.hashes, 0])))],
      ['half the slots', text, variant((i) => (i.slots = i.slots.subarray(0, i.slots.length / 2)))],
      ['twice the slots', text, variant((i) => (i.slots = new Int32Array(i.slots.length * 2)))],
      ['a distinct count one less', text, variant((i) => i.size--)],
      ['a distinct count above the items', text, variant((i) => (i.size = items.length + 1))],
      ['a fractional distinct count', text, variant((i) => (i.size = 2.5))],
      ['a slot past the last item', text, variant((i) => (i.slots[firstFilled] = items.length + 1))],
      ['a negative slot', text, variant((i) => (i.slots[firstFilled] = -1))],
      ['one slot more filled', text, variant((i) => (i.slots[firstEmpty] = 1))],
      ['starts not from 0', text, variant((i) => (i.starts[0] = 1))],
      ['starts out of order', text, variant((i) => ([i.starts[1], i.starts[2]] = [i.starts[2]!, i.starts[1]!]))],
      ['a start off its separator', text, variant((i) => i.starts[2]!++)],
      ['the end past the text', text, variant((i) => i.starts[items.length]!++)],
      ['a longer text', `${text}x`, good],
      ['a shorter text', text.slice(0, -1), good],
      ['text with no items', 'a', StringList.fromStrings([]).indexArrays()],
    ];
    for (const [what, t, index] of bad) assert.equal(StringList.fromIndex(t, index), null, what);
    assert.equal(slotCount(0), 2);
    assert.equal(slotCount(4), 8);
    assert.equal(slotCount(5), 16);
  });

  test("Qwen3's vocabulary and merge ranks: the same answers as the library's Maps", async () => {
    const tok = await GatewayTokenizer.load(GatewayTokenizer.defaultDir(), { cacheDir: null });
    const model = (tok as unknown as { inner: { model: Record<string, unknown> } }).inner.model;
    const tokensToIds = model.tokens_to_ids as Map<string, number>;
    const ranks = model.bpe_ranks as Map<string, number>;
    const vocab = (model.vocab as string[]).slice();
    const rankKeys = [...ranks.keys()];
    const v = StringList.fromStrings(vocab);
    const r = StringList.fromStrings(rankKeys);
    assert.equal(v.size, tokensToIds.size);
    for (const [token, id] of tokensToIds) if (v.get(token) !== id) assert.fail(`token ${JSON.stringify(token)}`);
    for (const [key, rank] of ranks) if (r.get(key) !== rank) assert.fail(`merge ${key}`);
    // Rebuilt from its own arrays (what a load from the cache does): the same answers.
    const rv = StringList.fromIndex(v.joined(), v.indexArrays());
    assert.ok(rv !== null);
    for (const [token, id] of tokensToIds)
      if (rv.get(token) !== id) assert.fail(`rebuilt: token ${JSON.stringify(token)}`);
    // Misses BPE asks about: pairs that are not merges.
    for (let i = 0; i < 2000; i++) {
      const pair = JSON.stringify([vocab[i * 71]!, vocab[i * 37 + 5]!]);
      assert.equal(r.get(pair), ranks.get(pair), pair);
    }
  });
});
