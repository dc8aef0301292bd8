/**
 * The tokenizer load cache (src/tokenizer/load-cache.ts, issue 27): a load from the cache gives the same tokenizer as
 * a load from tokenizer.json (ids, text, EOS, byte bound, detokenizer table, the library's BPE tables); an entry is
 * read only for its own tokenizer.json bytes; a corrupt entry or an unsafe directory falls back to the slow path;
 * what cannot be rebuilt exactly is not cached; the directory keeps at most MAX_CACHE_FILES entries.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import { Tokenizer } from '@huggingface/tokenizers';
import {
  MAX_CACHE_FILES,
  MAX_KEY_NOTES,
  NOTE_SETTLE_MS,
  cacheableParts,
  fileIdentity,
  readKeyNote,
  readTokenizerCache,
  tokenizerCacheKey,
  writeKeyNote,
  writeTokenizerCache,
  type CachedTokenizerParts,
} from '../../src/tokenizer/load-cache.js';
import { StringList } from '../../src/tokenizer/string-list.js';
import { TOKEN_VALID, freshText, type TokenTextTable } from '../../src/tokenizer/token-text-table.js';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import { mixedCorpus } from './fixtures.js';

const QWEN3 = GatewayTokenizer.defaultDir();
/** What the library reads a token → id or pair → rank table with: a Map, or the cache's StringList. */
type Lookup = { size: number; get(key: string): number | undefined };
type Bpe = {
  tokens_to_ids: Lookup;
  vocab: string[];
  bpe_ranks: Lookup;
  merges: unknown[];
  unk_token_id: number | undefined;
};
const bpeOf = (t: GatewayTokenizer): Bpe => (t as unknown as { inner: { model: Bpe } }).inner.model;

let root: string;
let fresh: GatewayTokenizer;
before(async () => {
  root = await mkdtemp(join(tmpdir(), 'mgw-load-cache-'));
  fresh = await GatewayTokenizer.load(QWEN3, { cacheDir: null });
});
after(() => rm(root, { recursive: true, force: true }));

/** A new private cache directory under the file's temp folder. */
let dirs = 0;
async function cacheDir(): Promise<string> {
  const dir = join(root, `cache-${++dirs}`);
  await mkdir(dir, { mode: 0o700 });
  return dir;
}

/**
 * Resolves once `file`'s last change is `NOTE_SETTLE_MS` old, the age a key note needs: time is the subject here, so
 * this waits exactly the remaining age, read from the file's own change time.
 */
async function settled(file: string): Promise<void> {
  const changedMs = Number((await stat(file, { bigint: true })).ctimeNs / 1_000_000n);
  const remaining = NOTE_SETTLE_MS + 1 - (Date.now() - changedMs);
  if (remaining > 0) await delay(remaining);
}

function assertSameMap(got: Lookup, want: Lookup): void {
  assert.equal(got.size, want.size);
  assert.ok(want instanceof Map);
  for (const [k, v] of want) if (got.get(k) !== v) assert.fail(`${JSON.stringify(k)}: ${got.get(k)} ≠ ${v}`);
}

/** The same table: the arrays as they are, and every token's text (computed on first use: compared through it). */
function assertSameTextTable(got: TokenTextTable | null, want: TokenTextTable | null): void {
  assert.ok(got !== null && want !== null);
  const { fresh: _g, ...gotArrays } = got;
  const { fresh: _w, ...wantArrays } = want;
  assert.deepEqual(gotArrays, wantArrays);
  for (let id = 0; id < want.vocabSize; id++) {
    if ((want.flags[id]! & TOKEN_VALID) === 0) continue;
    const g: string | null = freshText(got, id);
    const w: string | null = freshText(want, id);
    if (g !== w) assert.fail(`token ${id}: ${JSON.stringify(g)} ≠ ${JSON.stringify(w)}`);
  }
}

/** `parts` with the tokens of ids 0 and 1 swapped. */
function swapFirstTwo(parts: CachedTokenizerParts): CachedTokenizerParts {
  const tokens = parts.vocab.toArray();
  [tokens[0], tokens[1]] = [tokens[1]!, tokens[0]!];
  return { ...parts, vocab: StringList.fromStrings(tokens) };
}

function assertSameTokenizer(got: GatewayTokenizer, want: GatewayTokenizer): void {
  assert.equal(got.vocabSize, want.vocabSize);
  assert.deepEqual(got.eosTokenIds, want.eosTokenIds);
  assert.equal(got.maxTokenBytes, want.maxTokenBytes);
  assertSameTextTable(got.tokenTextTable, want.tokenTextTable);
  for (const text of mixedCorpus()) {
    const ids = want.encode(text);
    assert.deepEqual(got.encode(text), ids, JSON.stringify(text));
    assert.equal(got.decode(ids, { skipSpecialTokens: false }), want.decode(ids, { skipSpecialTokens: false }));
    assert.equal(got.minTokenCount(text), want.minTokenCount(text));
  }
  const [g, w] = [bpeOf(got), bpeOf(want)];
  assert.deepEqual(g.vocab, w.vocab);
  // Lookups are what the library does with these Maps (their iteration order differs: Object.entries lists
  // integer-like keys such as '0' first), so they are compared entry by entry.
  assertSameMap(g.tokens_to_ids, w.tokens_to_ids);
  assertSameMap(g.bpe_ranks, w.bpe_ranks);
  assert.equal(g.unk_token_id, w.unk_token_id);
  assert.deepEqual(g.merges, w.merges);
}

// The timeout is a hang detector for the whole suite: its ~20 loads take ~20 CPU-s, and 130 s of wall time were seen
// on a 2-core machine with both cores busy elsewhere.
describe('tokenizer load cache', { timeout: 480_000 }, () => {
  test('the first load writes the entry; loads from it give the same tokenizer as tokenizer.json', async () => {
    const dir = await cacheDir();
    const cold = await GatewayTokenizer.load(QWEN3, { cacheDir: dir });
    const key = tokenizerCacheKey(await readFile(join(QWEN3, 'tokenizer.json')));
    const identity = await fileIdentity(join(QWEN3, 'tokenizer.json'));
    assert.ok(identity !== null);
    assert.deepEqual((await readdir(dir)).sort(), [`${identity}.key`, `${key}.tokenizer-cache`].sort());
    assert.equal(await readKeyNote(dir, identity), key);
    const warm = await GatewayTokenizer.load(QWEN3, { cacheDir: dir });
    assertSameTokenizer(cold, fresh);
    assertSameTokenizer(warm, fresh);
  });

  test('a load reads the entry of its own tokenizer.json: an entry changed on disk shows in what loads', async () => {
    const dir = await cacheDir();
    await GatewayTokenizer.load(QWEN3, { cacheDir: dir });
    const key = tokenizerCacheKey(await readFile(join(QWEN3, 'tokenizer.json')));
    const parts = await readTokenizerCache(dir, key);
    assert.ok(parts !== null);
    // Swap what ids 0 ('!') and 1 ('"') spell: only a load that used the entry decodes 0 as '"'.
    assert.equal(await writeTokenizerCache(dir, key, swapFirstTwo(parts)), true);
    const swapped = await GatewayTokenizer.load(QWEN3, { cacheDir: dir });
    assert.equal(swapped.decode([0]), '"');
    assert.equal(fresh.decode([0]), '!');

    // Another tokenizer.json (one byte added) has another key: the entry is not read for it.
    const copy = join(root, 'qwen3-copy');
    await mkdir(copy);
    for (const f of await readdir(QWEN3)) await writeFile(join(copy, f), await readFile(join(QWEN3, f)));
    await writeFile(join(copy, 'tokenizer.json'), (await readFile(join(QWEN3, 'tokenizer.json'), 'utf8')) + '\n');
    assert.notEqual(tokenizerCacheKey(await readFile(join(copy, 'tokenizer.json'))), key);
    assert.equal((await GatewayTokenizer.load(copy, { cacheDir: dir })).decode([0]), '!');
  });

  test('a key note spares reading tokenizer.json while the file is unchanged; any write to the file retires it', async () => {
    const dir = await cacheDir();
    const copy = join(root, 'qwen3-noted');
    await mkdir(copy);
    for (const f of await readdir(QWEN3)) await writeFile(join(copy, f), await readFile(join(QWEN3, f)));
    const file = join(copy, 'tokenizer.json');
    // Just written: too fresh to note (a second same-size write in the same clock tick could keep its identity).
    await GatewayTokenizer.load(copy, { cacheDir: dir });
    const identity = await fileIdentity(file);
    assert.ok(identity !== null);
    assert.equal(await readKeyNote(dir, identity), null, 'a file changed under NOTE_SETTLE_MS ago is not noted');
    await settled(file);
    await GatewayTokenizer.load(copy, { cacheDir: dir });
    const key = tokenizerCacheKey(await readFile(file));
    assert.equal(await fileIdentity(file), identity);
    assert.equal(await readKeyNote(dir, identity), key);

    // The note is followed: pointed at an entry whose ids 0 and 1 are swapped, the load decodes 0 as '"'.
    const parts = await readTokenizerCache(dir, key);
    assert.ok(parts !== null);
    const other = 'f'.repeat(64);
    assert.equal(await writeTokenizerCache(dir, other, swapFirstTwo(parts)), true);
    assert.equal(await writeKeyNote(dir, identity, other), true);
    assert.equal((await GatewayTokenizer.load(copy, { cacheDir: dir })).decode([0]), '"');

    // One byte changed in place, the size and the modification time kept: the change time still moves, so the old
    // note is not read and the file's own entry is.
    const st = await stat(file);
    const bytes = await readFile(file);
    const at = bytes.indexOf('"!"');
    assert.ok(at > 0);
    bytes[at + 1] = '!'.charCodeAt(0);
    await writeFile(file, bytes);
    await utimes(file, st.atime, st.mtime);
    const changed = await fileIdentity(file);
    assert.ok(changed !== null);
    assert.notEqual(changed, identity);
    assert.equal((await GatewayTokenizer.load(copy, { cacheDir: dir })).decode([0]), '!');
    await settled(file);
    assert.equal((await GatewayTokenizer.load(copy, { cacheDir: dir })).decode([0]), '!');
    assert.equal(await readKeyNote(dir, changed), tokenizerCacheKey(bytes));

    // A note that does not hold one key, or one too large to be a note (read with its size checked first), is no
    // note; a note whose entry is missing falls back to the file's bytes. Each load then notes the file again.
    for (const junk of ['not a key\n', 'a'.repeat(64) + ' '.repeat(200), 'e'.repeat(64) + '\n']) {
      await writeFile(join(dir, `${changed}.key`), junk);
      assert.equal(await readKeyNote(dir, changed), junk.startsWith('e') ? 'e'.repeat(64) : null, junk.slice(0, 9));
      assert.equal((await GatewayTokenizer.load(copy, { cacheDir: dir })).decode([0]), '!', junk.slice(0, 9));
      assert.equal(await readKeyNote(dir, changed), tokenizerCacheKey(bytes), `noted again after ${junk.slice(0, 9)}`);
    }
  });

  test(`the directory keeps at most ${MAX_KEY_NOTES} key notes, the one just written among them`, async () => {
    const dir = await cacheDir();
    const ids = Array.from({ length: MAX_KEY_NOTES + 3 }, (_, i) => i.toString(16).padStart(64, '0'));
    for (const [i, id] of ids.entries()) {
      assert.equal(await writeKeyNote(dir, id, 'a'.repeat(64)), true);
      // Distinct modification times, oldest first, whatever the file system's clock resolution.
      await utimes(join(dir, `${id}.key`), i + 1, i + 1);
    }
    const left = (await readdir(dir)).filter((n) => n.endsWith('.key'));
    assert.equal(left.length, MAX_KEY_NOTES);
    assert.ok(left.includes(`${ids.at(-1)!}.key`));
    assert.ok(!left.includes(`${ids[0]!}.key`));
    assert.equal(await writeKeyNote(dir, ids[0]!, 'not a key'), false, 'only a key is noted');
  });

  test('a corrupt entry is ignored and rewritten; an unsafe directory is neither read nor written', async () => {
    const dir = await cacheDir();
    const key = tokenizerCacheKey(await readFile(join(QWEN3, 'tokenizer.json')));
    const file = join(dir, `${key}.tokenizer-cache`);
    for (const junk of [
      '',
      'not json\n',
      '{"format":1}\n',
      `${JSON.stringify({ format: 1, key, vocab: 3, rankKeys: 0, stub: {} })}\na\0b`,
    ]) {
      await writeFile(file, junk);
      assert.equal(await readTokenizerCache(dir, key), null, JSON.stringify(junk));
    }
    assertSameTokenizer(await GatewayTokenizer.load(QWEN3, { cacheDir: dir }), fresh);
    assert.notEqual(await readTokenizerCache(dir, key), null, 'rewritten by the load');

    const open = await cacheDir();
    await chmod(open, 0o777);
    const parts = await readTokenizerCache(dir, key);
    assert.ok(parts !== null);
    assert.equal(await writeTokenizerCache(open, key, parts), false);
    assert.deepEqual(await readdir(open), []);
    await writeFile(join(open, `${key}.tokenizer-cache`), await readFile(file));
    assert.equal(await readTokenizerCache(open, key), null, 'a directory others can write is not trusted');
  });

  test('what cannot be rebuilt exactly is not cached: a merge listed twice, two ids spelling one token, not BPE', () => {
    const bound = { maxTokenBytes: 2, forms: [], reason: null };
    const json = (vocab: Record<string, number>, merges: string[]) => ({
      model: { type: 'BPE', vocab, merges, unk_token: null },
      decoder: null,
      normalizer: null,
      pre_tokenizer: null,
      post_processor: null,
      added_tokens: [],
    });
    const build = (j: object) => new (Tokenizer as unknown as new (j: object, c: object) => object)(j, {});
    const ok = json({ a: 0, b: 1, ab: 2 }, ['a b']);
    const parts = cacheableParts(build(ok), ok, bound);
    assert.deepEqual(parts?.vocab.toArray(), ['a', 'b', 'ab']);
    assert.deepEqual(parts?.rankKeys.toArray(), ['["a","b"]']);
    assert.deepEqual(parts?.stub.model, { type: 'BPE', vocab: {}, merges: [], unk_token: null });

    const twice = json({ a: 0, b: 1, ab: 2 }, ['a b', 'a b']);
    assert.equal(cacheableParts(build(twice), twice, bound), null);
    const sameId = json({ a: 0, b: 1, ab: 1 }, ['a b']);
    assert.equal(cacheableParts(build(sameId), sameId, bound), null);
    const nul = json({ a: 0, 'b\0': 1 }, []);
    assert.equal(cacheableParts(build(nul), nul, bound), null);
    const wordLevel = { ...ok, model: { type: 'WordLevel', vocab: { a: 0 }, unk_token: 'a' } };
    assert.equal(cacheableParts(build(wordLevel), wordLevel, bound), null);
  });

  test(`the directory keeps at most ${MAX_CACHE_FILES} entries, the one just written among them`, async () => {
    const dir = await cacheDir();
    const parts = {
      stub: { model: { type: 'BPE' }, added_tokens: [] },
      bound: { maxTokenBytes: Infinity, forms: [], reason: 'x' },
      vocab: StringList.fromStrings(['a']),
      rankKeys: StringList.fromStrings([]),
      unkTokenId: null,
    };
    const keys = Array.from({ length: MAX_CACHE_FILES + 3 }, (_, i) => `k${String(i).padStart(2, '0')}`);
    for (const k of keys) {
      assert.equal(await writeTokenizerCache(dir, k, parts), true);
      assert.ok((await readdir(dir)).includes(`${k}.tokenizer-cache`), 'the entry just written stays');
    }
    const left = (await readdir(dir)).sort();
    assert.equal(left.length, MAX_CACHE_FILES);
    assert.ok(left.includes(`${keys.at(-1)}.tokenizer-cache`));
    assert.deepEqual(await readTokenizerCache(dir, keys.at(-1)!), parts);
  });

  test('a truncated, extended or altered entry, or a FIFO in its place, is refused; so is a header that lies', async () => {
    const dir = await cacheDir();
    await GatewayTokenizer.load(QWEN3, { cacheDir: dir });
    const key = tokenizerCacheKey(await readFile(join(QWEN3, 'tokenizer.json')));
    const file = join(dir, `${key}.tokenizer-cache`);
    const good = await readFile(file);
    const nl = good.indexOf(0x0a);
    const header = JSON.parse(good.toString('utf8', 0, nl)) as Record<string, unknown> & {
      bound: Record<string, unknown>;
    };
    const body = good.subarray(nl + 1);
    const withHeader = (h: object, b: Uint8Array = body) => Buffer.concat([Buffer.from(`${JSON.stringify(h)}\n`), b]);
    // The texts are UTF-16LE: one character is two bytes.
    const utf16 = (text: string) => Buffer.from(text, 'utf16le');
    const altered = (at: number): Buffer => {
      const copy = Buffer.from(good);
      copy[at] = copy[at] === 0x61 ? 0x62 : 0x61;
      return copy;
    };
    // The body: the two lists' texts (UTF-16LE), then their index arrays.
    const textEnd = nl + 1 + 2 * ((header.vocabChars as number) + (header.rankKeysChars as number));
    const bad: Array<[string, Uint8Array]> = [
      ['cut by 1 byte', good.subarray(0, -1)],
      ['cut by 2 bytes', good.subarray(0, -2)],
      ['cut by 10 bytes', good.subarray(0, -10)],
      ['one byte appended', Buffer.concat([good, Buffer.of(0x78)])],
      ['two bytes appended', Buffer.concat([good, utf16('x')])],
      ['the last merge key altered', altered(textEnd - 2)],
      ["a byte of the vocabulary's index altered", altered(textEnd + 4 * 1000)],
      ["the last byte of the merge ranks' index altered", altered(good.length - 1)],
      ['vocab entry 1 altered', withHeader(header, utf16(body.toString('utf16le').replace('"', '#')))],
      ['the body read as UTF-8', withHeader(header, Buffer.from(body.toString('utf16le')))],
      ['forms not a list', withHeader({ ...header, bound: { ...header.bound, forms: null } })],
      ['an unknown normal form', withHeader({ ...header, bound: { ...header.bound, forms: ['NFX'] } })],
      ['maxTokenBytes 0', withHeader({ ...header, bound: { ...header.bound, maxTokenBytes: 0 } })],
      ['maxTokenBytes a string', withHeader({ ...header, bound: { ...header.bound, maxTokenBytes: 'abc' } })],
      ['stub a list', withHeader({ ...header, stub: [] })],
      ['stub without a model', withHeader({ ...header, stub: { added_tokens: [] } })],
      ['added tokens null', withHeader({ ...header, stub: { ...(header.stub as object), added_tokens: null } })],
      [
        'counts shifted',
        withHeader({ ...header, vocab: (header.vocab as number) + 5, rankKeys: (header.rankKeys as number) - 5 }),
      ],
      ['a negative count', withHeader({ ...header, rankKeys: -1 })],
      [
        'text lengths shifted',
        withHeader({
          ...header,
          vocabChars: (header.vocabChars as number) + 1,
          rankKeysChars: (header.rankKeysChars as number) - 1,
        }),
      ],
      ['a distinct count off by one', withHeader({ ...header, vocabDistinct: (header.vocabDistinct as number) - 1 })],
      ['an unknown-token id that is not an id', withHeader({ ...header, unkTokenId: 'x' })],
    ];
    for (const [i, [what, text]] of bad.entries()) {
      await writeFile(file, text);
      assert.equal(await readTokenizerCache(dir, key), null, what);
      // A refused entry means the slow path; every seventh also goes through a whole load (~1.4 CPU-s each).
      if (i % 7 !== 0) continue;
      assertSameTokenizer(await GatewayTokenizer.load(QWEN3, { cacheDir: dir }), fresh);
      assert.deepEqual(await readFile(file), good, `${what}: rewritten by the load`);
    }
    await rm(file);
    execFileSync('mkfifo', [file]);
    assert.equal(await readTokenizerCache(dir, key), null, 'a FIFO is not read (it would block)');
    await rm(file);
  });

  test('the unknown token keeps the id the library gave it, also when it is an added token', async () => {
    // fuse_unk: a run of unknown characters is one <unk>; which id it has decides the encoding.
    for (const [what, vocab, added] of [
      ['added only', { a: 0, b: 1, ab: 2 }, [{ id: 3, content: '<unk>', special: true }]],
      ['in the vocabulary and added', { '<unk>': 0, a: 1, b: 2, ab: 3 }, [{ id: 4, content: '<unk>', special: true }]],
    ] as const) {
      const dir = await cacheDir();
      const model = join(root, `unk-${dirs}`);
      await mkdir(model);
      const json = {
        version: '1.0',
        truncation: null,
        padding: null,
        added_tokens: added.map((t) => ({ ...t, single_word: false, lstrip: false, rstrip: false, normalized: false })),
        normalizer: null,
        pre_tokenizer: null,
        post_processor: null,
        decoder: null,
        model: { type: 'BPE', vocab, merges: ['a b'], unk_token: '<unk>', fuse_unk: true, byte_fallback: false },
      };
      await writeFile(join(model, 'tokenizer.json'), JSON.stringify(json));
      await writeFile(join(model, 'tokenizer_config.json'), JSON.stringify({ unk_token: '<unk>' }));
      const want = await GatewayTokenizer.load(model, { cacheDir: null });
      await GatewayTokenizer.load(model, { cacheDir: dir });
      const got = await GatewayTokenizer.load(model, { cacheDir: dir });
      assert.equal((await readdir(dir)).filter((n) => n.endsWith('.tokenizer-cache')).length, 1, `${what}: cached`);
      for (const text of ['zzz', 'xyab', 'abzab'])
        assert.deepEqual(got.encode(text), want.encode(text), `${what}: ${text}`);
    }
  });

  test('an entry whose model is not BPE is refused, even with a matching content hash', async () => {
    const dir = await cacheDir();
    const parts = (type: string): CachedTokenizerParts => ({
      stub: { model: { type }, added_tokens: [] },
      bound: { maxTokenBytes: 1, forms: [], reason: null },
      vocab: StringList.fromStrings(['a']),
      rankKeys: StringList.fromStrings([]),
      unkTokenId: null,
    });
    assert.equal(await writeTokenizerCache(dir, 'bpe', parts('BPE')), true);
    assert.notEqual(await readTokenizerCache(dir, 'bpe'), null);
    assert.equal(await writeTokenizerCache(dir, 'wordpiece', parts('WordPiece')), true);
    assert.equal(await readTokenizerCache(dir, 'wordpiece'), null);
  });

  test('an entry whose index arrays do not fit its lists is refused, even with a matching content hash', async () => {
    const dir = await cacheDir();
    const parts = (): CachedTokenizerParts => ({
      stub: { model: { type: 'BPE' }, added_tokens: [] },
      bound: { maxTokenBytes: 1, forms: [], reason: null },
      vocab: StringList.fromStrings(['a', 'b', 'ab']),
      rankKeys: StringList.fromStrings(['["a","b"]']),
      unkTokenId: null,
    });
    assert.equal(await writeTokenizerCache(dir, 'good', parts()), true);
    assert.notEqual(await readTokenizerCache(dir, 'good'), null);
    // The writer stores each list's own arrays (`indexArrays` hands out the list's arrays): altered in place, they are
    // written with a hash that matches them.
    const lies: Array<[string, (p: CachedTokenizerParts) => void]> = [
      ['every slot filled', (p) => p.vocab.indexArrays().slots.fill(1)],
      ['a slot past the last item', (p) => (p.rankKeys.indexArrays().slots[0] = 5)],
      ['a start off its separator', (p) => p.vocab.indexArrays().starts[1]!++],
    ];
    for (const [what, lie] of lies) {
      const bad = parts();
      lie(bad);
      assert.equal(await writeTokenizerCache(dir, 'lie', bad), true, what);
      assert.equal(await readTokenizerCache(dir, 'lie'), null, what);
    }
  });

  test('a token with a lone surrogate is cached and reads back as it was (the body is UTF-16)', async () => {
    const bound = { maxTokenBytes: 2, forms: [], reason: null };
    const json = {
      model: { type: 'BPE', vocab: { a: 0, '\ud800': 1, b: 2 }, merges: [], unk_token: null },
      decoder: null,
      normalizer: null,
      pre_tokenizer: null,
      post_processor: null,
      added_tokens: [],
    };
    const built = new (Tokenizer as unknown as new (j: object, c: object) => object)(json, {});
    const parts = cacheableParts(built, json, bound);
    assert.ok(parts !== null);
    const dir = await cacheDir();
    assert.equal(await writeTokenizerCache(dir, 'lone', parts), true);
    const read = await readTokenizerCache(dir, 'lone');
    assert.deepEqual(read?.vocab.toArray(), ['a', '\ud800', 'b']);
    assert.equal(read?.vocab.get('\ud800'), 1);
  });

  test('temporary files of writers that died are removed once stale; fresh ones stay', async () => {
    const dir = await cacheDir();
    const stale = join(dir, '.deadbeef.123.abcd.tmp');
    const live = join(dir, '.deadbeef.456.abcd.tmp');
    await writeFile(stale, 'x');
    await writeFile(live, 'x');
    const old = new Date(Date.now() - 3_600_000);
    await utimes(stale, old, old);
    const parts = {
      stub: { model: { type: 'BPE' }, added_tokens: [] },
      bound: { maxTokenBytes: 1, forms: [], reason: null },
      vocab: StringList.fromStrings(['a']),
      rankKeys: StringList.fromStrings([]),
      unkTokenId: null,
    };
    for (let i = 0; i < MAX_CACHE_FILES; i++) assert.equal(await writeTokenizerCache(dir, `k${i}`, parts), true);
    const left = await readdir(dir);
    assert.ok(!left.includes('.deadbeef.123.abcd.tmp'), 'the stale one is gone');
    assert.ok(left.includes('.deadbeef.456.abcd.tmp'), 'a writer may still be writing the fresh one');
  });
});
