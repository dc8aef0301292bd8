/**
 * The KV-cache event stream of a DP rank, both engines (docs/reference/kv-events.md 3, 5): the 3-frame PUB message, the msgpack
 * `KVEventBatch` payload with its tagged events, and the replay protocol's request and reply messages.
 *
 * Sources: vLLM 9aaf83ef / 52a31cce `vllm/distributed/kv_events.py` (`EventBatch`, `BlockStored`, `BlockRemoved`,
 * `AllBlocksCleared`, `ZmqEventPublisher`) and TokenSpeed f4d8ec6e `tokenspeed/runtime/pd/kv_events.py` (a copy of
 * vLLM's publisher; its events are shorter). The golden vectors in test/vectors/kv-events are the contract.
 *
 * Decoding follows msgspec's array-like structs, which both engines use: a struct is an array in field order, element
 * 0 of an event is its class name, every field is present (trailing nil included), and a decoder ignores elements
 * beyond the ones it knows (how newer engines add fields) but refuses fewer than the required ones. An event with an
 * unknown tag is skipped and counted, not an error: the stream is advisory.
 *
 * Pure; no I/O. Errors are `WireDecodeError`s naming the path of the bad value.
 */
import { MsgpackReader } from '../../wire/reader.js';
import { WireDecodeError } from '../../wire/errors.js';
import { bytesBlockKey, intBlockKey, u64Key, type BlockKey } from './block-keys.js';

/** `BlockStored`: full blocks a rank's cache now holds (vLLM: 12 elements; TokenSpeed: the first 5). */
export interface KvBlockStored {
  readonly kind: 'stored';
  /** The new blocks, in order (TokenSpeed: always one). */
  readonly blockHashes: BlockKey[];
  /** The block before the first one (a block already cached), or null for a sequence's first block. */
  readonly parent: BlockKey | null;
  /** The stored blocks' token ids (vLLM: may cover masked blocks too, so more than hashes × block size). */
  readonly tokenIds: number[];
  /** Tokens per block (0 on connector events). */
  readonly blockSize: number;
  /** vLLM only (null from TokenSpeed): the LoRA adapter's name, where the blocks live (`GPU`, `CPU`, …), the KV-cache
   * group and its spec kind (`full_attention`, `sliding_window`, …). */
  readonly loraName: string | null;
  readonly medium: string | null;
  readonly groupIdx: number | null;
  readonly specKind: string | null;
  /** vLLM only: each block's hash extra keys (LoRA, multimodal items, cache salt) as decoded, or null. */
  readonly extraKeys: unknown;
}

/** `BlockRemoved`: one evicted copy of each block (vLLM can hold two copies of one hash; TokenSpeed: one hash). */
export interface KvBlockRemoved {
  readonly kind: 'removed';
  readonly blockHashes: BlockKey[];
  readonly medium: string | null;
  readonly groupIdx: number | null;
}

/** `AllBlocksCleared`: the rank's prefix cache was reset (vLLM; TokenSpeed never sends it). */
export interface KvAllBlocksCleared {
  readonly kind: 'cleared';
}

export type KvEvent = KvBlockStored | KvBlockRemoved | KvAllBlocksCleared;

/** One published batch: `[ts, events, rank]`. */
export interface KvEventBatch {
  /** The engine's wall clock when it built the batch (s since the epoch). */
  readonly ts: number;
  readonly events: KvEvent[];
  /** The publishing DP rank (vLLM `data_parallel_rank`, TokenSpeed `attn_dp_rank`), or null when left unset. */
  readonly rank: number | null;
  /** Events skipped for an unknown tag. */
  readonly unknownEvents: number;
}

/** One message of the PUB socket. */
export interface KvEventMessage {
  readonly topic: string;
  /** The publisher's batch number: from 0 at each engine start, +1 per batch. */
  readonly seq: bigint;
  readonly batch: KvEventBatch;
}

/** One message of a replay reply, as a DEALER receives it: a batch, or the end marker. */
export type KvReplayMessage =
  | { readonly kind: 'batch'; readonly seq: bigint; readonly batch: KvEventBatch }
  | { readonly kind: 'end' };

const END_SEQ = 0xffff_ffff_ffff_ffffn;
const EMPTY = new Uint8Array(0);
const utf8 = new TextDecoder('utf-8', { fatal: true });

/** A hash: u64 or digest bytes. */
function readBlockKey(r: MsgpackReader, path: string): BlockKey {
  const head = r.peekHead(path);
  if (head === 0xc4 || head === 0xc5 || head === 0xc6) {
    const bytes = r.readAny(path);
    if (!(bytes instanceof Uint8Array) || bytes.length === 0)
      throw new WireDecodeError(path, 'expected a non-empty block hash');
    return bytesBlockKey(bytes);
  }
  if (head === 0xcf && r.remaining >= 9) {
    // u64, the common case: read the two halves straight from the frame (no BigInt).
    const b = r.bytes;
    const at = r.pos + 1;
    r.pos += 9;
    const hi = ((b[at]! << 24) | (b[at + 1]! << 16) | (b[at + 2]! << 8) | b[at + 3]!) >>> 0;
    const lo = ((b[at + 4]! << 24) | (b[at + 5]! << 16) | (b[at + 6]! << 8) | b[at + 7]!) >>> 0;
    return u64Key(hi, lo);
  }
  const key = intBlockKey(r.readInt(path, 'block hash (u64 or bin)'));
  if (key === null) throw new WireDecodeError(path, 'a block hash must be an unsigned 64-bit integer');
  return key;
}

/** An array of `item`s. */
function readArray<T>(r: MsgpackReader, path: string, item: (path: string) => T): T[] {
  const n = r.readArrayHeader(path);
  const out = new Array<T>(n);
  for (let i = 0; i < n; i++) out[i] = item(`${path}[${i}]`);
  return out;
}

const readBlockKeys = (r: MsgpackReader, path: string): BlockKey[] => readArray(r, path, (p) => readBlockKey(r, p));

function readSafeInt(r: MsgpackReader, path: string): number {
  const v = r.readInt(path);
  if (typeof v !== 'number') throw new WireDecodeError(path, `integer ${v} is out of range`);
  return v;
}

const readTokenIds = (r: MsgpackReader, path: string): number[] => readArray(r, path, (p) => readSafeInt(r, p));

const orNull = <T>(r: MsgpackReader, path: string, read: () => T): T | null =>
  r.peekIsNil(path) ? r.readNil(path) : read();

/** The fields of an event after its tag; `n` is the array's length including the tag. Skips what it does not know. */
function readEventBody(r: MsgpackReader, tag: string, n: number, path: string): KvEvent | null {
  const need = (min: number): void => {
    if (n < min) throw new WireDecodeError(path, `${tag} needs at least ${min} elements, got ${n}`);
  };
  let read = 1;
  const field = <T>(name: string, get: (p: string) => T, fallback: T): T => {
    if (read >= n) return fallback;
    read++;
    return get(`${path}.${name}`);
  };
  let event: KvEvent | null;
  switch (tag) {
    case 'BlockStored': {
      need(5);
      const blockHashes = field('block_hashes', (p) => readBlockKeys(r, p), []);
      const parent = field('parent_block_hash', (p) => orNull(r, p, () => readBlockKey(r, p)), null);
      const tokenIds = field('token_ids', (p) => readTokenIds(r, p), []);
      const blockSize = field('block_size', (p) => readSafeInt(r, p), 0);
      // vLLM's fields after TokenSpeed's five; lora_id (deprecated) and the sliding window are read and dropped.
      field('lora_id', (p) => orNull(r, p, () => r.readInt(p)), null);
      const medium = field('medium', (p) => orNull(r, p, () => r.readStr(p)), null);
      const loraName = field('lora_name', (p) => orNull(r, p, () => r.readStr(p)), null);
      const extraKeys = field('extra_keys', (p) => r.readAny(p), null);
      const groupIdx = field('group_idx', (p) => orNull(r, p, () => readSafeInt(r, p)), null);
      const specKind = field('kv_cache_spec_kind', (p) => orNull(r, p, () => r.readStr(p)), null);
      field('kv_cache_spec_sliding_window', (p) => orNull(r, p, () => r.readInt(p)), null);
      event = {
        kind: 'stored',
        blockHashes,
        parent,
        tokenIds,
        blockSize,
        loraName,
        medium,
        groupIdx,
        specKind,
        extraKeys,
      };
      break;
    }
    case 'BlockRemoved':
      need(2);
      event = {
        kind: 'removed',
        blockHashes: field('block_hashes', (p) => readBlockKeys(r, p), []),
        medium: field('medium', (p) => orNull(r, p, () => r.readStr(p)), null),
        groupIdx: field('group_idx', (p) => orNull(r, p, () => readSafeInt(r, p)), null),
      };
      break;
    case 'AllBlocksCleared':
      event = { kind: 'cleared' };
      break;
    default:
      event = null;
  }
  // Elements a newer engine appended (msgspec ignores them too).
  for (; read < n; read++) r.skip(`${path}[${read}]`);
  return event;
}

/**
 * Decodes a `KVEventBatch` payload (frame 2 of a PUB message, or of a replay reply).
 * @throws WireDecodeError when it is not one batch array of `[ts, events, rank]` with well-formed known events.
 */
export function decodeKvEventBatch(payload: Uint8Array): KvEventBatch {
  const r = new MsgpackReader(payload);
  const n = r.readArrayHeader('batch');
  if (n < 2) throw new WireDecodeError('batch', `expected at least [ts, events], got ${n} element(s)`);
  const ts = r.readFloat('batch.ts');
  const count = r.readArrayHeader('batch.events');
  const events: KvEvent[] = [];
  let unknownEvents = 0;
  for (let i = 0; i < count; i++) {
    const path = `batch.events[${i}]`;
    const len = r.readArrayHeader(path);
    if (len < 1) throw new WireDecodeError(path, 'an event needs its tag');
    const tag = r.readStr(`${path}[0]`);
    const event = readEventBody(r, tag, len, `${path}<${tag}>`);
    if (event === null) unknownEvents++;
    else events.push(event);
  }
  const rank = n >= 3 ? orNull(r, 'batch.rank', () => readSafeInt(r, 'batch.rank')) : null;
  for (let i = 3; i < n; i++) r.skip(`batch[${i}]`);
  r.expectEnd('batch');
  return { ts, events, rank, unknownEvents };
}

/** The seq frame: 8 bytes, big-endian unsigned. */
function readSeq(frame: Uint8Array, path: string): bigint {
  if (frame.length !== 8)
    throw new WireDecodeError(path, `expected an 8-byte sequence number, got ${frame.length} byte(s)`);
  return new DataView(frame.buffer, frame.byteOffset, 8).getBigUint64(0);
}

/**
 * Decodes one PUB message `[topic, seq (8 bytes big-endian), payload]`.
 * @throws WireDecodeError when there are not 3 frames, the topic is not UTF-8, the seq is not 8 bytes, or the payload
 *   does not decode (`decodeKvEventBatch`).
 */
export function decodeKvEventMessage(frames: readonly Uint8Array[]): KvEventMessage {
  if (frames.length !== 3)
    throw new WireDecodeError('message', `expected 3 frames [topic, seq, payload], got ${frames.length}`);
  let topic: string;
  try {
    topic = utf8.decode(frames[0]);
  } catch {
    throw new WireDecodeError('message.topic', 'the topic is not UTF-8');
  }
  return { topic, seq: readSeq(frames[1]!, 'message.seq'), batch: decodeKvEventBatch(frames[2]!) };
}

/**
 * The frames a DEALER sends to ask a rank's replay ROUTER for every buffered batch from `startSeq` on:
 * `[empty delimiter, startSeq as 8 bytes big-endian]`. Without the delimiter the engine ignores the request.
 * @throws RangeError when `startSeq` is not in 0..2^64−2.
 */
export function encodeReplayRequest(startSeq: bigint): Uint8Array[] {
  if (startSeq < 0n || startSeq >= END_SEQ) throw new RangeError(`replay start seq ${startSeq} is out of range`);
  const seq = new Uint8Array(8);
  new DataView(seq.buffer).setBigUint64(0, startSeq);
  return [EMPTY, seq];
}

/**
 * Decodes one replay reply message as a DEALER receives it: `[empty, seq, payload]` for a buffered batch, or the end
 * marker `[empty, ff×8, empty]` after the last one.
 * @throws WireDecodeError for any other shape, or a payload that does not decode.
 */
export function decodeReplayMessage(frames: readonly Uint8Array[]): KvReplayMessage {
  if (frames.length !== 3 || frames[0]!.length !== 0) {
    throw new WireDecodeError('replay', `expected [empty, seq, payload], got ${frames.length} frame(s)`);
  }
  const seq = readSeq(frames[1]!, 'replay.seq');
  if (seq === END_SEQ) {
    if (frames[2]!.length !== 0) throw new WireDecodeError('replay', 'the end marker carries a payload');
    return { kind: 'end' };
  }
  return { kind: 'batch', seq, batch: decodeKvEventBatch(frames[2]!) };
}
