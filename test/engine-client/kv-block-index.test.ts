/**
 * The exact per-rank block index (src/engine-client/kv-block-index.ts) fed the engines' own event streams (the golden
 * vectors of test/vectors/kv-events, played in seq order as each engine published them), then hand-made events for
 * what the streams do not show: duplicates across ranks, the cap, unlinked vLLM blocks, clears.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { KvBlockIndex, vllmPromptKeys } from '../../src/engine-client/kv-block-index.js';
import { decodeKvEventMessage, type KvEvent } from '../../src/protocols/kv-events/codec.js';
import { intBlockKey, tokenSpeedPageKeys } from '../../src/protocols/kv-events/block-keys.js';
import { loadRepoVectors } from '../helpers/vectors.js';

const hex = (h: string): Uint8Array => Uint8Array.from(Buffer.from(h, 'hex'));

/** One engine's PUB messages of rank `rank`, the default-topic ones aside, in seq order: the stream as published. */
function stream(prefix: 'vllm_' | 'ts_', rank = 0) {
  return loadRepoVectors('kv-events')
    .filter((v) => v.kind === 'KVEventFrames' && v.name.startsWith(prefix) && !v.name.includes('default_topic'))
    .map((v) => ({ name: v.name, ...decodeKvEventMessage(v.frames_hex!.map(hex)) }))
    .filter((m) => (m.batch.rank ?? 0) === rank)
    .sort((a, b) => Number(a.seq - b.seq));
}

const stored = (over: Partial<Extract<KvEvent, { kind: 'stored' }>>): KvEvent => ({
  kind: 'stored',
  blockHashes: [],
  parent: null,
  tokenIds: [],
  blockSize: 2,
  loraName: null,
  medium: 'GPU',
  groupIdx: 0,
  specKind: 'full_attention',
  extraKeys: null,
  ...over,
});
const removed = (keys: string[]): KvEvent => ({ kind: 'removed', blockHashes: keys, medium: 'GPU', groupIdx: 0 });
const k = (n: number) => intBlockKey(n)!;

describe('KvBlockIndex', () => {
  test("TokenSpeed's stream: the gateway's page hashes of a prompt find the pages the engine announced", () => {
    const index = new KvBlockIndex('tokenspeed');
    const messages = stream('ts_');
    assert.deepEqual(
      messages.map((m) => Number(m.seq)),
      [0, 1, 2, 3, 4],
    );
    const first = messages[0]!.batch.events.filter((e) => e.kind === 'stored');
    const prompt = first.flatMap((e) => e.tokenIds);
    index.applyEvents(0, messages[0]!.batch.events);
    // The prompt's two pages, hashed by the gateway, are the two the engine stored; a longer prompt adds nothing.
    assert.equal(index.cachedPrefixBlocks(0, tokenSpeedPageKeys(prompt, 4)), 2);
    assert.equal(index.cachedPrefixBlocks(0, tokenSpeedPageKeys([...prompt, 1, 2, 3, 4], 4)), 2);
    assert.equal(index.cachedPrefixBlocks(1, tokenSpeedPageKeys(prompt, 4)), 0, 'another rank holds nothing');
    // A prompt that differs in its first page has no cached prefix, whatever follows.
    assert.equal(index.cachedPrefixBlocks(0, tokenSpeedPageKeys([9, ...prompt.slice(1)], 4)), 0);
    for (const m of messages.slice(1)) index.applyEvents(0, m.batch.events);
    assert.equal(index.blockCount(0), 0, 'the stream ends with a clear');
    assert.equal(index.counters.unknownRemovals, 0);
  });

  test("vLLM's stream: blocks keyed by the gateway's chain over their token ids, through a prefix hit, evictions and a duplicate", () => {
    const index = new KvBlockIndex('vllm');
    const messages = stream('vllm_');
    const at = (seq: number) => messages.find((m) => Number(m.seq) === seq)!.batch.events;
    const tokensOf = (events: KvEvent[]) => events.flatMap((e) => (e.kind === 'stored' ? e.tokenIds : []));
    const firstTokens = tokensOf(at(0));
    index.applyEvents(0, at(0));
    assert.equal(index.cachedPrefixBlocks(0, vllmPromptKeys(firstTokens, 4)), 2);
    // seq 1 stores one block after a prefix hit on block 0: the prompt is block 0's tokens, then the new ones.
    index.applyEvents(0, at(1));
    const hitPrompt = [...firstTokens.slice(0, 4), ...tokensOf(at(1))];
    assert.equal(index.cachedPrefixBlocks(0, vllmPromptKeys(hitPrompt, 4)), 2);
    // seq 2 evicts block 1 of the first prompt; seq 3 evicts block 0 and the prefix-hit block.
    index.applyEvents(0, at(2));
    assert.equal(index.cachedPrefixBlocks(0, vllmPromptKeys(firstTokens, 4)), 1);
    index.applyEvents(0, at(3));
    assert.equal(index.cachedPrefixBlocks(0, vllmPromptKeys(firstTokens, 4)), 0);
    assert.equal(index.cachedPrefixBlocks(0, vllmPromptKeys(hitPrompt, 4)), 0);
    assert.equal(index.cachedPrefixBlocks(0, vllmPromptKeys(tokensOf(at(2)), 4)), 5, "seq 2's five new blocks");
    // seq 4 clears everything; LoRA/salt (5), multimodal (6) and sliding-window (7) blocks are left out.
    for (const seq of [4, 5, 6, 7]) index.applyEvents(0, at(seq));
    assert.equal(index.blockCount(0), 0);
    assert.ok(index.counters.skippedBlocks >= 3, String(index.counters.skippedBlocks));
    // Two copies of one block (seq 10), one removed (seq 11): still held.
    for (const seq of [8, 9, 10]) index.applyEvents(0, at(seq));
    const dupTokens = (at(10).find((e) => e.kind === 'stored') as Extract<KvEvent, { kind: 'stored' }>).tokenIds;
    assert.equal(index.cachedPrefixBlocks(0, vllmPromptKeys(dupTokens, 4)), 1);
    index.applyEvents(0, at(11));
    assert.equal(index.cachedPrefixBlocks(0, vllmPromptKeys(dupTokens, 4)), 1, 'one copy is left');
    index.applyEvents(0, [removed((at(11)[0] as Extract<KvEvent, { kind: 'removed' }>).blockHashes)]);
    assert.equal(index.cachedPrefixBlocks(0, vllmPromptKeys(dupTokens, 4)), 0, 'the second removal forgets it');
  });

  test('a vLLM block whose parent the index does not hold is counted as unlinked, not guessed', () => {
    const index = new KvBlockIndex('vllm');
    index.applyEvents(0, [stored({ blockHashes: [k(2)], parent: k(1), tokenIds: [5, 6] })]);
    assert.equal(index.blockCount(0), 0);
    assert.equal(index.counters.unlinkedBlocks, 1);
  });

  test('removals of unknown blocks are ignored; CPU-medium events touch nothing; a clear and a dead rank forget', () => {
    const index = new KvBlockIndex('vllm');
    index.applyEvents(0, [stored({ blockHashes: [k(1), k(2)], tokenIds: [1, 2, 3, 4] })]);
    index.applyEvents(0, [removed([k(99)])]);
    assert.equal(index.counters.unknownRemovals, 1);
    index.applyEvents(0, [{ kind: 'removed', blockHashes: [k(1)], medium: 'CPU', groupIdx: null }]);
    index.applyEvents(0, [stored({ blockHashes: [k(7)], tokenIds: [9, 9], medium: 'CPU' })]);
    assert.equal(index.cachedPrefixBlocks(0, vllmPromptKeys([1, 2, 3, 4], 2)), 2);
    // The same hash in another group is another block.
    index.applyEvents(0, [{ kind: 'removed', blockHashes: [k(1)], medium: 'GPU', groupIdx: 1 }]);
    assert.equal(index.cachedPrefixBlocks(0, vllmPromptKeys([1, 2, 3, 4], 2)), 2);
    index.applyEvents(1, [stored({ blockHashes: [k(1)], tokenIds: [1, 2] })]);
    index.applyEvents(0, [{ kind: 'cleared' }]);
    assert.equal(index.blockCount(0), 0);
    assert.equal(index.blockCount(1), 1, 'a clear is per rank');
    index.clearRank(1);
    assert.equal(index.blockCount(1), 0);
  });

  test('predict-on-route: a routed prompt counts as held until its TTL, the larger of the two views; announced, it is exact', () => {
    const index = new KvBlockIndex('tokenspeed', 4, 1000);
    const prompt = tokenSpeedPageKeys([1, 2, 3, 4, 5, 6], 2);
    index.noteRouted(0, prompt, 10_000);
    assert.equal(index.cachedPrefixBlocks(0, prompt, 10_500), 3, 'routed 500 ms ago');
    assert.equal(index.cachedPrefixBlocks(1, prompt, 10_500), 0, 'only the rank it was routed to');
    assert.equal(index.cachedPrefixBlocks(0, prompt), 0, 'without a clock: the exact view alone');
    assert.equal(index.cachedPrefixBlocks(0, prompt, 11_000), 0, 'expired');
    // The rank announces the first page; the prediction of the others runs out, the announced page stays.
    index.noteRouted(0, prompt, 20_000);
    index.applyEvents(0, [
      stored({ blockHashes: [prompt[0]!], tokenIds: [1, 2], medium: null, groupIdx: null, specKind: null }),
    ]);
    assert.equal(index.cachedPrefixBlocks(0, prompt, 20_100), 3);
    assert.equal(index.cachedPrefixBlocks(0, prompt, 21_000), 1);
    // At most the cap's worth of predictions per rank, the oldest dropped first; a clear drops them too.
    const long = tokenSpeedPageKeys(
      Array.from({ length: 20 }, (_, i) => i),
      2,
    );
    index.noteRouted(0, long, 30_000);
    assert.equal(index.cachedPrefixBlocks(0, long.slice(-4), 30_001), 4);
    assert.equal(index.cachedPrefixBlocks(0, long, 30_001), 0, 'the first ones went');
    index.clearRank(0);
    assert.equal(index.cachedPrefixBlocks(0, long.slice(-4), 30_001), 0);
    assert.throws(() => new KvBlockIndex('vllm', 1, -1), RangeError);
  });

  test('the cap: stores beyond it are dropped and counted, so a count errs low', () => {
    const index = new KvBlockIndex('tokenspeed', 3);
    const pages = tokenSpeedPageKeys([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 2);
    let parent: string | null = null;
    for (const [i, key] of pages.entries()) {
      index.applyEvents(0, [
        stored({
          blockHashes: [key],
          parent,
          tokenIds: [2 * i + 1, 2 * i + 2],
          medium: null,
          groupIdx: null,
          specKind: null,
        }),
      ]);
      parent = key;
    }
    assert.equal(index.blockCount(0), 3);
    assert.equal(index.counters.droppedStores, 2);
    assert.equal(index.cachedPrefixBlocks(0, pages), 3);
    assert.throws(() => new KvBlockIndex('vllm', 0), RangeError);
  });
});
