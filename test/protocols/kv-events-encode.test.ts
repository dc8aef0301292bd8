/**
 * The publishing side of the KV-event streams (src/protocols/kv-events/encode.ts), which the simulated ranks use:
 * every golden vector whose events a simulated rank can produce (GPU blocks of KV-cache group 0, full attention, no
 * LoRA or extra keys) is encoded again from its decoded content and must equal the engine's bytes, frames included;
 * then the replay request parser against the vectors' requests.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  encodeKvEventBatch,
  kvEventMessageFrames,
  replayRequestStart,
  type KvEventFlavor,
  type KvPublishedEvent,
} from '../../src/protocols/kv-events/encode.js';
import { loadRepoVectors } from '../helpers/vectors.js';

const vectors = loadRepoVectors('kv-events');
const hex = (h: string): Uint8Array => Uint8Array.from(Buffer.from(h, 'hex'));
const toHex = (b: Uint8Array): string => Buffer.from(b).toString('hex');

function hashOf(v: unknown): bigint | Uint8Array {
  if (typeof v === 'number') return BigInt(v);
  const o = v as { $bigint?: string; $bytes?: string };
  if (o.$bigint !== undefined) return BigInt(o.$bigint);
  if (o.$bytes !== undefined) return hex(o.$bytes);
  throw new Error(`not a hash: ${JSON.stringify(v)}`);
}

/** The vector's events as a publisher holds them, or null when one carries what a simulated rank never sends. */
function published(events: Array<Record<string, unknown>>, flavor: KvEventFlavor): KvPublishedEvent[] | null {
  const out: KvPublishedEvent[] = [];
  for (const e of events) {
    const plain =
      flavor === 'tokenspeed' ||
      (e.medium === 'GPU' &&
        e.group_idx === 0 &&
        (e._tag !== 'BlockStored' ||
          (e.kv_cache_spec_kind === 'full_attention' &&
            e.lora_id === null &&
            e.lora_name === null &&
            e.kv_cache_spec_sliding_window === null &&
            (e.extra_keys as unknown[]).every((k) => k === null))));
    if (!plain) return null;
    if (e._tag === 'BlockStored') {
      out.push({
        kind: 'stored',
        hashes: (e.block_hashes as unknown[]).map(hashOf),
        parent: e.parent_block_hash === null ? null : hashOf(e.parent_block_hash),
        tokenIds: e.token_ids as number[],
        blockSize: e.block_size as number,
      });
    } else if (e._tag === 'BlockRemoved') {
      out.push({ kind: 'removed', hashes: (e.block_hashes as unknown[]).map(hashOf) });
    } else if (e._tag === 'AllBlocksCleared') {
      if (flavor === 'tokenspeed') return null; // its struct exists, but its scheduler never sends one
      out.push({ kind: 'cleared' });
    } else return null;
  }
  return out;
}

describe('KV-event encoder: the simulated ranks publish the engines’ exact bytes', () => {
  const frameVectors = vectors.filter((v) => v.kind === 'KVEventFrames');
  let checked = 0;
  for (const v of frameVectors) {
    const flavor: KvEventFlavor = v.name.startsWith('ts_') ? 'tokenspeed' : 'vllm';
    const decoded = v.decoded as Record<string, unknown>;
    const events = published(decoded.events as Array<Record<string, unknown>>, flavor);
    const rank = (decoded.data_parallel_rank ?? decoded.attn_dp_rank) as number | null;
    if (events === null || rank === null) continue;
    checked++;
    test(`${v.name}`, { timeout: 10_000 }, () => {
      const payload = encodeKvEventBatch({ ts: decoded.ts as number, events, rank }, flavor);
      const want = v.frames_hex as string[];
      assert.equal(toHex(payload), want[2]);
      const frames = kvEventMessageFrames(v.topic as string, BigInt(v.seq as number), payload);
      assert.deepEqual(frames.map(toHex), want);
    });
  }
  test('covers both engines’ stored, removed and cleared events', { timeout: 10_000 }, () => {
    assert.ok(checked >= 12, `only ${checked} vectors re-encoded`);
  });
});

describe('replayRequestStart: the requests a ROUTER answers', () => {
  test('the vectors’ DEALER requests give their start seq; a request without the delimiter is ignored', () => {
    for (const [name, start] of [
      ['ts_replay_request_from_2', 2n],
      ['vllm_replay_request_from_7', 7n],
    ] as const) {
      const v = vectors.find((x) => x.name === name)!;
      const frames = (v.frames_hex as string[]).map(hex);
      assert.equal(replayRequestStart([new Uint8Array([1, 2]), ...frames]), start, name);
    }
    const bad = vectors.find((x) => x.name === 'vllm_replay_request_without_delimiter')!;
    const badFrames = (bad.frames_hex as string[]).map(hex);
    assert.equal(replayRequestStart([new Uint8Array([1]), ...badFrames]), null);
  });
});
