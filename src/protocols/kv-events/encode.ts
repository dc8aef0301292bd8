/**
 * The publishing side of the KV-event streams (docs/reference/kv-events.md 3 and 5), for the simulated ranks: a batch
 * in each engine's exact msgpack layout, the PUB message around it and the replay reply frames. The golden vectors
 * (test/vectors/kv-events, made by the engines' own publishers) are the contract: a batch decoded from a vector and
 * encoded again gives the vector's bytes.
 *
 * Layouts, every struct an array in field order with all fields present (msgspec `array_like`):
 * - batch: `[ts (float64 s), events, rank]`;
 * - vLLM `BlockStored` (12): tag, hashes, parent or nil, token ids, block size, lora id (nil), medium, lora name
 *   (nil), extra keys (one nil per block), group index, KV-cache spec kind, sliding window (nil);
 *   `BlockRemoved` (4): tag, hashes, medium, group index; `AllBlocksCleared` (1): tag;
 * - TokenSpeed `BlockStored` (5): tag, [one hash], parent or nil, one page of token ids, page size;
 *   `BlockRemoved` (2): tag, [one hash]; no `AllBlocksCleared`.
 *
 * Pure; no I/O.
 */
import { MsgpackWriter } from '../../wire/writer.js';

/** The engine whose layout to write. */
export type KvEventFlavor = 'tokenspeed' | 'vllm';

/** An event as a publisher holds it: hashes as u64 (bigint) or digest bytes. */
export type KvPublishedEvent =
  | {
      readonly kind: 'stored';
      readonly hashes: readonly (bigint | Uint8Array)[];
      readonly parent: bigint | Uint8Array | null;
      /** The stored blocks' token ids (`hashes.length × blockSize` of them). */
      readonly tokenIds: readonly number[];
      readonly blockSize: number;
    }
  | { readonly kind: 'removed'; readonly hashes: readonly (bigint | Uint8Array)[] }
  | { readonly kind: 'cleared' };

/** One batch to publish. */
export interface KvPublishedBatch {
  /** The publisher's wall clock (s since the epoch). */
  readonly ts: number;
  readonly events: readonly KvPublishedEvent[];
  /** The publishing DP rank. */
  readonly rank: number;
}

/** The end marker's seq: all ones (the engines send -1 as a signed int64). */
export const REPLAY_END_SEQ = 0xffff_ffff_ffff_ffffn;

const writeHash = (w: MsgpackWriter, h: bigint | Uint8Array, path: string): void =>
  h instanceof Uint8Array ? w.writeBin(h) : w.writeInt(h, path);

function writeHashes(w: MsgpackWriter, hashes: readonly (bigint | Uint8Array)[], path: string): void {
  w.writeArrayHeader(hashes.length);
  for (const h of hashes) writeHash(w, h, path);
}

function writeStoredVllm(w: MsgpackWriter, e: Extract<KvPublishedEvent, { kind: 'stored' }>): void {
  w.writeArrayHeader(12);
  w.writeStr('BlockStored', 'tag');
  writeHashes(w, e.hashes, 'block_hashes');
  if (e.parent === null) w.writeNil();
  else writeHash(w, e.parent, 'parent_block_hash');
  w.writeArrayHeader(e.tokenIds.length);
  for (const t of e.tokenIds) w.writeInt(t, 'token_ids');
  w.writeInt(e.blockSize, 'block_size');
  w.writeNil(); // lora_id
  w.writeStr('GPU', 'medium');
  w.writeNil(); // lora_name
  w.writeArrayHeader(e.hashes.length); // extra_keys: none per block
  for (let i = 0; i < e.hashes.length; i++) w.writeNil();
  w.writeInt(0, 'group_idx');
  w.writeStr('full_attention', 'kv_cache_spec_kind');
  w.writeNil(); // kv_cache_spec_sliding_window
}

/**
 * One TokenSpeed `BlockStored` per page: the engine announces exactly one hash per event, each page's parent being the
 * page before it.
 */
function writeStoredTokenSpeed(w: MsgpackWriter, e: Extract<KvPublishedEvent, { kind: 'stored' }>): void {
  let parent = e.parent;
  e.hashes.forEach((h, i) => {
    w.writeArrayHeader(5);
    w.writeStr('BlockStored', 'tag');
    writeHashes(w, [h], 'block_hashes');
    if (parent === null) w.writeNil();
    else writeHash(w, parent, 'parent_block_hash');
    w.writeArrayHeader(e.blockSize);
    for (let t = i * e.blockSize; t < (i + 1) * e.blockSize; t++) w.writeInt(e.tokenIds[t]!, 'token_ids');
    w.writeInt(e.blockSize, 'block_size');
    parent = h;
  });
}

/** How many wire events `e` becomes in `flavor` (TokenSpeed: one per block; its cleared event is never sent). */
function wireEventCount(e: KvPublishedEvent, flavor: KvEventFlavor): number {
  if (flavor === 'vllm') return 1;
  return e.kind === 'cleared' ? 0 : e.hashes.length;
}

/**
 * The msgpack payload of `batch` in `flavor`'s layout (the module comment). TokenSpeed has no `AllBlocksCleared`
 * (its flush announces each page's removal instead): a `cleared` event is left out there.
 * @throws WireEncodeError for a hash beyond u64 or a token id that is not a safe integer.
 */
export function encodeKvEventBatch(batch: KvPublishedBatch, flavor: KvEventFlavor): Uint8Array {
  const w = new MsgpackWriter(64 + batch.events.length * 96);
  w.writeArrayHeader(3);
  w.writeFloat64(batch.ts, 'ts');
  w.writeArrayHeader(batch.events.reduce((n, e) => n + wireEventCount(e, flavor), 0));
  for (const e of batch.events) {
    if (e.kind === 'stored') {
      if (flavor === 'vllm') writeStoredVllm(w, e);
      else writeStoredTokenSpeed(w, e);
    } else if (e.kind === 'removed') {
      if (flavor === 'vllm') {
        w.writeArrayHeader(4);
        w.writeStr('BlockRemoved', 'tag');
        writeHashes(w, e.hashes, 'block_hashes');
        w.writeStr('GPU', 'medium');
        w.writeInt(0, 'group_idx');
      } else {
        for (const h of e.hashes) {
          w.writeArrayHeader(2);
          w.writeStr('BlockRemoved', 'tag');
          writeHashes(w, [h], 'block_hashes');
        }
      }
    } else if (flavor === 'vllm') {
      w.writeArrayHeader(1);
      w.writeStr('AllBlocksCleared', 'tag');
    }
  }
  w.writeInt(batch.rank, 'rank');
  return w.take();
}

/** `seq` as the 8-byte big-endian frame both sockets carry. */
export function seqFrame(seq: bigint): Uint8Array {
  const frame = new Uint8Array(8);
  new DataView(frame.buffer).setBigUint64(0, seq);
  return frame;
}

/** The three frames of a PUB message: `[topic, seq, payload]`. */
export function kvEventMessageFrames(topic: string, seq: bigint, payload: Uint8Array): Uint8Array[] {
  return [new TextEncoder().encode(topic), seqFrame(seq), payload];
}

/**
 * The start seq of a replay request as a ROUTER receives it (`[identity, empty, seq8]`), or null when the request is
 * not one the engines answer (no empty delimiter, a seq frame not 8 bytes long): they ignore those.
 */
export function replayRequestStart(frames: readonly Uint8Array[]): bigint | null {
  if (frames.length !== 3 || frames[1]!.length !== 0 || frames[2]!.length !== 8) return null;
  const f = frames[2]!;
  return new DataView(f.buffer, f.byteOffset, 8).getBigUint64(0);
}
