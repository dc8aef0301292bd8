/**
 * A fixed list of strings kept as one string (the items joined by NUL), with an open-addressing hash index from each
 * item to its position (the last one, for an item listed twice: what `Map.set` in list order keeps). It stands in for the two Maps a BPE tokenizer builds at load (token → id, merge
 * pair → rank), which the library only ever reads with `get` and `has` (`@huggingface/tokenizers` 0.2.0, dist BPE
 * class and `Tokenizer.token_to_id`).
 *
 * Why: building those Maps from 151k strings each took ~130 ms of CPU per Map on the 2-core dev box, plus the garbage
 * of 300k separate strings, and every gateway, `--workers` front, off-loop tokenizer thread and simulated rank loads
 * a tokenizer (issue 27). Here a load is one scan over the joined text (a 32-bit FNV-1a hash per item) and one pass
 * filling an `Int32Array`; no item becomes a string of its own until `at` asks for it. A lookup hashes the key and
 * compares it where the hash matches; measured as fast as `Map.get` on the fresh strings BPE makes.
 *
 * A list can also be rebuilt from its own arrays (`indexArrays` → `fromIndex`): the tokenizer load cache keeps them,
 * so a load from it neither hashes the items nor fills the index (~90 of a load's ~200 CPU-ms, issue 27).
 *
 * Pure: no I/O. Sizes: the index holds a power of two ≥ 2 × `length` slots (load ≤ 0.5).
 */

/** This module's URL: the tokenizer load cache keys its entries on this module's source (./load-cache.ts). */
export const STRING_LIST_MODULE_URL = import.meta.url;

const FNV_OFFSET = 0x811c9dc5 | 0;
const FNV_PRIME = 0x01000193;
const SEPARATOR = 0;

/** FNV-1a (32 bit) over the UTF-16 code units of `s`: what `StringList.hashAt` gives for an item equal to `s`. */
export function hashString(s: string): number {
  let h = FNV_OFFSET;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), FNV_PRIME);
  return h;
}

/** The index size of a list of `length` items: the smallest power of two ≥ 2 × `length`, and at least 2. */
export function slotCount(length: number): number {
  let size = 2;
  while (size < length * 2) size *= 2;
  return size;
}

/** What a list is made of besides its text: `StringList.indexArrays` gives them, `StringList.fromIndex` takes them. */
export interface StringListIndex {
  /** starts[i]: where item i begins in the text; starts[length]: the text's length + 1. */
  starts: Uint32Array;
  /** FNV-1a (32 bit) of each item's UTF-16 code units. */
  hashes: Int32Array;
  /** The open-addressing index: position + 1 of the item in each slot, 0 for an empty slot. */
  slots: Int32Array;
  /** How many items are distinct. */
  size: number;
}

export class StringList {
  /** How many items: valid positions are 0..length-1. */
  readonly length: number;
  /** How many distinct items (what a Map of them reports as its size). */
  readonly size: number;
  private readonly text: string;
  /** starts[i]: where item i begins in `text`; starts[length] is one past the end of the last item + its separator. */
  private readonly starts: Uint32Array;
  private readonly hashes: Int32Array;
  /** Position + 1 of the item in each slot; 0 = empty. */
  private readonly slots: Int32Array;
  private readonly mask: number;

  /** With `built`, the list takes those slots as they are; without, it fills its own (`index`). */
  private constructor(
    text: string,
    starts: Uint32Array,
    hashes: Int32Array,
    built?: { slots: Int32Array; size: number },
  ) {
    this.text = text;
    this.starts = starts;
    this.hashes = hashes;
    this.length = hashes.length;
    this.slots = built?.slots ?? new Int32Array(slotCount(this.length));
    this.mask = this.slots.length - 1;
    this.size = built?.size ?? this.index();
  }

  /**
   * The list `text` (its `joined()`) and `index` describe, as `indexArrays` gave them (the arrays are taken, not
   * copied), or null when they do not fit together: array lengths, item bounds and separators, slot values and the
   * distinct count are checked (linear in the slots, no item hashed). The hashes and which slot holds which item are
   * trusted: a wrong one only makes lookups of that item miss, and the load cache's content hash is what catches a
   * damaged file.
   */
  static fromIndex(text: string, index: StringListIndex): StringList | null {
    const { starts, hashes, slots, size } = index;
    const length = hashes.length;
    if (starts.length !== length + 1 || slots.length !== slotCount(length)) return null;
    if (!Number.isSafeInteger(size) || size < 0 || size > length) return null;
    if (length === 0 ? text !== '' || starts[0] !== 0 : starts[0] !== 0 || starts[length] !== text.length + 1)
      return null;
    for (let i = 1; i < length; i++) {
      // Item i-1 ends where item i begins, with a separator.
      if (starts[i]! <= starts[i - 1]! || starts[i]! > text.length || text.charCodeAt(starts[i]! - 1) !== SEPARATOR)
        return null;
    }
    let filled = 0;
    for (let slot = 0; slot < slots.length; slot++) {
      const e = slots[slot]!;
      if (e < 0 || e > length) return null;
      if (e !== 0) filled++;
    }
    // A slot per distinct item, and at least half the slots empty: every probe ends.
    if (filled !== size) return null;
    return new StringList(text, starts, hashes, { slots, size });
  }

  /** The arrays `fromIndex` rebuilds this list from (this list's own, not copies: do not write to them). */
  indexArrays(): StringListIndex {
    return { starts: this.starts, hashes: this.hashes, slots: this.slots, size: this.size };
  }

  /**
   * The list of `items`, in order.
   * @throws Error when an item contains NUL (the separator).
   */
  static fromStrings(items: readonly string[]): StringList {
    for (let i = 0; i < items.length; i++) {
      if (items[i]!.includes('\0')) throw new Error(`StringList: item ${i} contains NUL`);
    }
    return StringList.parse(items.join('\0'), 0, items.length)!.list;
  }

  /**
   * Reads `count` NUL-separated items from `text` starting at `from`: the list, and `next`, the position after the
   * NUL that ends the last item (`text.length` when the text ends there instead). For `count` 0: an empty list and
   * `next` = `from`. Null when the text ends before `count` items. Linear in the items' length.
   */
  static parse(text: string, from: number, count: number): { list: StringList; next: number } | null {
    if (count === 0) return { list: new StringList('', new Uint32Array(1), new Int32Array(0)), next: from };
    const starts = new Uint32Array(count + 1);
    const hashes = new Int32Array(count);
    let item = 0;
    let h = FNV_OFFSET;
    let i = from;
    for (; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c !== SEPARATOR) {
        h = Math.imul(h ^ c, FNV_PRIME);
        continue;
      }
      hashes[item++] = h;
      h = FNV_OFFSET;
      starts[item] = i + 1 - from;
      if (item === count) break;
    }
    if (item < count) {
      if (item !== count - 1) return null;
      // The last item ends with the text.
      hashes[item++] = h;
      starts[item] = i + 1 - from;
    }
    const end = Math.min(i, text.length);
    return { list: new StringList(text.slice(from, end), starts, hashes), next: Math.min(end + 1, text.length) };
  }

  /** Fills the slots (a later equal item takes the earlier one's slot); returns how many items are distinct. */
  private index(): number {
    const { slots, mask, hashes } = this;
    let distinct = 0;
    for (let item = 0; item < this.length; item++) {
      const h = hashes[item]!;
      let slot = h & mask;
      for (let e = slots[slot]!; e !== 0; e = slots[slot]!) {
        if (hashes[e - 1] === h && this.itemEquals(e - 1, this.at(item)!)) break;
        slot = (slot + 1) & mask;
      }
      if (slots[slot] === 0) distinct++;
      slots[slot] = item + 1;
    }
    return distinct;
  }

  private itemEquals(item: number, key: string): boolean {
    const start = this.starts[item]!;
    return this.starts[item + 1]! - 1 - start === key.length && this.text.startsWith(key, start);
  }

  /**
   * Where item `position` lies in `joined()`: its first code unit, and one past its last. For 0..length-1 only (not
   * checked: a caller walking the items, such as ./token-text-table.ts, reads them without a string per item).
   */
  itemStart(position: number): number {
    return this.starts[position]!;
  }

  /** One past item `position`'s last code unit in `joined()` (see `itemStart`). */
  itemEnd(position: number): number {
    return this.starts[position + 1]! - 1;
  }

  /** `hashString` of item `position` (0..length-1, not checked), kept from the build. */
  hashAt(position: number): number {
    return this.hashes[position]!;
  }

  /** Item `position` as a string of its own, or undefined outside 0..length-1. */
  at(position: number): string | undefined {
    if (!Number.isInteger(position) || position < 0 || position >= this.length) return undefined;
    return this.text.slice(this.starts[position]!, this.starts[position + 1]! - 1);
  }

  /** The position of `key`, or -1 when it is not an item (or not a string). */
  indexOf(key: unknown): number {
    if (typeof key !== 'string') return -1;
    const h = hashString(key);
    const { slots, mask, hashes } = this;
    let slot = h & mask;
    for (let e = slots[slot]!; e !== 0; e = slots[slot]!) {
      if (hashes[e - 1] === h && this.itemEquals(e - 1, key)) return e - 1;
      slot = (slot + 1) & mask;
    }
    return -1;
  }

  /** Map-style: the position of `key`, or undefined. */
  get(key: unknown): number | undefined {
    const i = this.indexOf(key);
    return i < 0 ? undefined : i;
  }

  /** Map-style: whether `key` is an item. */
  has(key: unknown): boolean {
    return this.indexOf(key) >= 0;
  }

  /** Every item, in order, each a string of its own. */
  toArray(): string[] {
    const out = new Array<string>(this.length);
    for (let i = 0; i < this.length; i++) out[i] = this.at(i)!;
    return out;
  }

  /** The items joined by NUL (what `parse` reads back). */
  joined(): string {
    // Every way a list is made keeps exactly its items and separators as `text` (`fromIndex` checks the end).
    return this.text;
  }
}
