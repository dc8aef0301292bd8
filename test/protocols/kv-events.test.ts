/**
 * The KV-event stream codec (src/protocols/kv-events/) against every golden vector of test/vectors/kv-events, made by
 * the engines' real publishers and hash functions: PUB messages of both engines (int and bytes hashes in one stream,
 * CPU-medium connector events, duplicates, removals, clears, an unset rank), replay requests and replies (end marker,
 * overrun, beyond the last seq), per-rank endpoints, and TokenSpeed's FNV-1a 64 page hash chain; then malformed input.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  decodeKvEventBatch,
  decodeKvEventMessage,
  decodeReplayMessage,
  encodeReplayRequest,
  type KvEvent,
  type KvEventBatch,
} from '../../src/protocols/kv-events/codec.js';
import {
  blockKeyHex,
  bytesBlockKey,
  intBlockKey,
  tokenSpeedPageKeys,
  u64Key,
} from '../../src/protocols/kv-events/block-keys.js';
import {
  KvEventsEndpointError,
  dialAddress,
  kvEventAddresses,
  offsetEndpointForRank,
} from '../../src/protocols/kv-events/endpoints.js';
import { WireDecodeError } from '../../src/wire/errors.js';
import { loadRepoVectors, type Vector } from '../helpers/vectors.js';

const vectors = loadRepoVectors('kv-events');
const hex = (h: string): Uint8Array => Uint8Array.from(Buffer.from(h, 'hex'));
const frames = (list: readonly string[]): Uint8Array[] => list.map(hex);

/** A hash as the vectors write it ($bigint, $bytes or a plain number) → the gateway's key. */
function keyOf(v: unknown): string {
  if (typeof v === 'number') return intBlockKey(v)!;
  const o = v as { $bigint?: string; $bytes?: string };
  if (o.$bigint !== undefined) return intBlockKey(BigInt(o.$bigint))!;
  if (o.$bytes !== undefined) return bytesBlockKey(hex(o.$bytes));
  throw new Error(`not a hash: ${JSON.stringify(v)}`);
}

/** The vector's `decoded` batch in the codec's shape. */
function expectedBatch(decoded: Record<string, unknown>): KvEventBatch {
  const rank = (decoded.data_parallel_rank ?? decoded.attn_dp_rank ?? null) as number | null;
  const events = (decoded.events as Array<Record<string, unknown>>).map((e): KvEvent => {
    const str = (k: string) => (e[k] ?? null) as string | null;
    switch (e._tag) {
      case 'BlockStored':
        return {
          kind: 'stored',
          blockHashes: (e.block_hashes as unknown[]).map(keyOf),
          parent: e.parent_block_hash === null ? null : keyOf(e.parent_block_hash),
          tokenIds: e.token_ids as number[],
          blockSize: e.block_size as number,
          loraName: str('lora_name'),
          medium: str('medium'),
          groupIdx: (e.group_idx ?? null) as number | null,
          specKind: str('kv_cache_spec_kind'),
          extraKeys: e.extra_keys ?? null,
        };
      case 'BlockRemoved':
        return {
          kind: 'removed',
          blockHashes: (e.block_hashes as unknown[]).map(keyOf),
          medium: str('medium'),
          groupIdx: (e.group_idx ?? null) as number | null,
        };
      case 'AllBlocksCleared':
        return { kind: 'cleared' };
      default:
        throw new Error(`unknown tag in a vector: ${String(e._tag)}`);
    }
  });
  return { ts: decoded.ts as number, events, rank, unknownEvents: 0 };
}

/** JSON-ish values of extra keys compare as the vectors write them: bytes as $bytes. */
function normalizeExtraKeys(batch: KvEventBatch): KvEventBatch {
  const norm = (v: unknown): unknown =>
    v instanceof Uint8Array
      ? { $bytes: Buffer.from(v).toString('hex') }
      : Array.isArray(v)
        ? v.map(norm)
        : typeof v === 'bigint'
          ? { $bigint: String(v) }
          : v;
  return {
    ...batch,
    events: batch.events.map((e) => (e.kind === 'stored' ? { ...e, extraKeys: norm(e.extraKeys) } : e)),
  };
}

const byKind = (kind: string): Vector[] => vectors.filter((v) => v.kind === kind);

describe('KV-event stream codec', () => {
  test('the repository holds the 47 KV-event vectors, and each kind is exercised below', () => {
    assert.equal(vectors.length, 47);
    const kinds = new Set(vectors.map((v) => v.kind));
    assert.deepEqual([...kinds].sort(), [
      'BlockHashChain',
      'EndpointDerivation',
      'KVEventBatch',
      'KVEventFrames',
      'ReplayReply',
      'ReplayRequest',
    ]);
  });

  test('every PUB message of both engines decodes to what the engine encoded (topic, seq, batch)', () => {
    const messages = byKind('KVEventFrames');
    assert.equal(messages.length, 19);
    for (const v of messages) {
      const got = decodeKvEventMessage(frames(v.frames_hex!));
      assert.equal(got.topic, v.topic, v.name);
      assert.equal(got.seq, BigInt(v.seq as number), v.name);
      assert.deepEqual(normalizeExtraKeys(got.batch), expectedBatch(v.decoded as Record<string, unknown>), v.name);
    }
  });

  test('a batch whose rank was left unset decodes with rank null', () => {
    const unset = byKind('KVEventBatch');
    assert.equal(unset.length, 2);
    for (const v of unset) {
      const got = decodeKvEventBatch(hex(v.hex!));
      assert.equal(got.rank, null, v.name);
      assert.deepEqual(got, expectedBatch(v.decoded as Record<string, unknown>), v.name);
    }
  });

  test('connector events: digest-bytes hashes, medium CPU; one batch can mix them with u64 GPU hashes', () => {
    const v = vectors.find((x) => x.name === 'vllm_connector_cpu_offload_events')!;
    const { events } = decodeKvEventMessage(frames(v.frames_hex!)).batch;
    assert.equal(events.length, 2);
    for (const e of events) {
      assert.ok(e.kind !== 'cleared');
      assert.equal(e.medium, 'CPU');
      assert.equal(e.groupIdx, null);
      assert.ok(e.blockHashes.every((k) => blockKeyHex(k).startsWith('b:') && blockKeyHex(k).length === 2 + 64));
    }
    // [ts, [["BlockRemoved", [5], "GPU", 0], ["BlockRemoved", [bin 32], "CPU", nil]], 0]
    const mixed = decodeKvEventBatch(
      hex(
        '93cb41da556e4000000092' +
          '94ac426c6f636b52656d6f7665649105a347505500' +
          '94ac426c6f636b52656d6f76656491c420' +
          'ab'.repeat(32) +
          'a3435055c0' +
          '00',
      ),
    );
    assert.deepEqual(
      mixed.events.map((e) => (e.kind === 'removed' ? [blockKeyHex(e.blockHashes[0]!), e.medium] : null)),
      [
        [blockKeyHex(intBlockKey(5)!), 'GPU'],
        [`b:${'ab'.repeat(32)}`, 'CPU'],
      ],
    );
  });

  test('replay requests: a DEALER sends [empty, seq as 8 bytes big-endian], never the bare seq', () => {
    for (const v of byKind('ReplayRequest')) {
      const seq = BigInt(String(v.start_seq ?? '7'));
      const ours = encodeReplayRequest(seq).map((f) => Buffer.from(f).toString('hex'));
      if (v.name.endsWith('_without_delimiter')) assert.notDeepEqual(ours, v.frames_hex, v.name);
      else assert.deepEqual(ours, v.frames_hex, v.name);
    }
    assert.throws(() => encodeReplayRequest(-1n), RangeError);
    assert.throws(() => encodeReplayRequest(0xffff_ffff_ffff_ffffn), RangeError, 'the end marker is no request');
  });

  test('replay replies: each buffered batch in order, then the end marker; what the engine recorded it sent', () => {
    let dealerReplies = 0;
    for (const v of byKind('ReplayReply')) {
      const messages = v.messages_frames_hex as string[][] | undefined;
      if (messages === undefined) {
        // The REQ-socket vector: a REQ gets the reply without its delimiter (and only the first message), which is
        // why the gateway uses a DEALER; those frames are not a reply a DEALER gets.
        assert.match(v.name, /_with_req_socket$/);
        assert.throws(() => decodeReplayMessage(frames(v.first_reply_frames_hex as string[])), WireDecodeError);
        continue;
      }
      dealerReplies++;
      const decoded = messages.map((m) => decodeReplayMessage(frames(m)));
      assert.deepEqual(decoded.at(-1), { kind: 'end' }, `${v.name}: ends with the marker`);
      assert.ok(
        decoded.slice(0, -1).every((m) => m.kind === 'batch'),
        `${v.name}: one marker, last`,
      );
      const seqs = decoded.map((m) => (m.kind === 'batch' ? Number(m.seq) : -1));
      const recorded =
        (v.messages as Array<{ seq: number }> | undefined)?.map((m) => m.seq) ??
        (v.replayed_seqs as number[] | undefined);
      if (recorded !== undefined) assert.deepEqual(seqs, recorded, v.name);
      else assert.deepEqual(seqs, [-1], `${v.name}: only the marker`);
    }
    assert.equal(dealerReplies, 6);
  });

  test('per-rank endpoints: the engines own derivation, refusals included; a wildcard host is dialled by name', () => {
    for (const v of byKind('EndpointDerivation')) {
      for (const c of v.cases as Array<{
        endpoint: string | null;
        rank: number;
        result?: string | null;
        error?: string;
      }>) {
        const what = `${v.name}: ${c.endpoint} rank ${c.rank}`;
        if (c.endpoint === null) continue; // no endpoint: no events, nothing to derive
        if (c.error !== undefined)
          assert.throws(() => offsetEndpointForRank(c.endpoint!, c.rank), KvEventsEndpointError, what);
        else assert.equal(offsetEndpointForRank(c.endpoint, c.rank), c.result, what);
      }
    }
    assert.equal(dialAddress('tcp://*:5560', '127.0.0.1'), 'tcp://127.0.0.1:5560');
    assert.equal(dialAddress('tcp://10.0.0.5:5559', '127.0.0.1'), 'tcp://10.0.0.5:5559');
    assert.throws(() => offsetEndpointForRank('tcp://*:5557', -1), RangeError);
  });

  test("a group's addresses: each rank offset and dialled on the host; overlapping ranges refused", () => {
    assert.deepEqual(
      kvEventAddresses({ endpoint: 'tcp://*:5557', replayEndpoint: 'tcp://*:5567', host: '10.0.0.5' }, 3),
      [
        { events: 'tcp://10.0.0.5:5557', replay: 'tcp://10.0.0.5:5567' },
        { events: 'tcp://10.0.0.5:5558', replay: 'tcp://10.0.0.5:5568' },
        { events: 'tcp://10.0.0.5:5559', replay: 'tcp://10.0.0.5:5569' },
      ],
    );
    assert.deepEqual(kvEventAddresses({ endpoint: 'ipc:///tmp/kv', replayEndpoint: null, host: 'x' }, 1), [
      { events: 'ipc:///tmp/kv', replay: null },
    ]);
    assert.throws(
      () => kvEventAddresses({ endpoint: 'tcp://*:5557', replayEndpoint: 'tcp://*:5558', host: 'h' }, 2),
      /rank 1's events and rank 0's replay are both tcp:\/\/h:5558/,
    );
    assert.throws(
      () => kvEventAddresses({ endpoint: 'ipc:///tmp/kv', replayEndpoint: null, host: 'h' }, 2),
      KvEventsEndpointError,
    );
    assert.throws(() => kvEventAddresses({ endpoint: 'tcp://*:1', replayEndpoint: null, host: 'h' }, 0), RangeError);
  });

  test("TokenSpeed's page hashes: FNV-1a 64 chained over full pages, as the engine computes them", () => {
    const chains = byKind('BlockHashChain').filter((v) => v.name.startsWith('ts_'));
    assert.equal(chains.length, 5);
    for (const v of chains) {
      const want = (v.block_hashes_hex_u64 as string[]).map((h) => `u:${h}`);
      assert.deepEqual(
        tokenSpeedPageKeys(v.token_ids as number[], v.page_size as number).map(blockKeyHex),
        want,
        v.name,
      );
    }
    // Negative and extreme int32 token ids are fed as two's complement, as the engine's int32 tokens are.
    const keys = tokenSpeedPageKeys([-1, 2147483647, -2147483648, 0], 2);
    assert.equal(keys.length, 2);
    assert.notEqual(keys[0], keys[1]);
    assert.throws(() => tokenSpeedPageKeys([1], 0), RangeError);
  });

  test('block keys: one key per u64 whatever the integer width; bytes of any length; shown as hex', () => {
    const hex = (k: string | null) => (k === null ? null : blockKeyHex(k));
    assert.equal(hex(intBlockKey(0)), 'u:0000000000000000');
    assert.equal(intBlockKey(2 ** 53 - 1), u64Key(0x1fffff, 0xffffffff));
    assert.equal(intBlockKey(2 ** 53 - 1), intBlockKey(2n ** 53n - 1n));
    assert.equal(hex(intBlockKey(0xffff_ffff_ffff_ffffn)), 'u:ffffffffffffffff');
    assert.equal(hex(intBlockKey(0x0123_4567_89ab_cdefn)), 'u:0123456789abcdef');
    assert.equal(intBlockKey(-1), null);
    assert.equal(intBlockKey(2n ** 64n), null);
    assert.equal(hex(bytesBlockKey(Uint8Array.of(0, 255, 16))), 'b:00ff10');
    assert.equal(hex(bytesBlockKey(Uint8Array.of(0, 255, 16, 1))), 'b:00ff1001');
    // An odd byte count never equals an even one: [ff 10] and [10] differ.
    assert.notEqual(bytesBlockKey(Uint8Array.of(0xff, 0x10)), bytesBlockKey(Uint8Array.of(0x10)));
    assert.notEqual(bytesBlockKey(Uint8Array.of(1, 0xff, 0x10)), bytesBlockKey(Uint8Array.of(1, 0x10)));
  });

  test('malformed input is a WireDecodeError naming where, never another exception', () => {
    const good = vectors.find((x) => x.name === 'vllm_stored_first_blocks')!;
    const [topic, seq, payload] = frames(good.frames_hex!);
    const bad: Array<[string, Uint8Array[]]> = [
      ['two frames', [topic!, seq!]],
      ['a 4-byte seq', [topic!, seq!.subarray(0, 4), payload!]],
      ['a topic that is not UTF-8', [Uint8Array.of(0xff), seq!, payload!]],
      ['an empty payload', [topic!, seq!, new Uint8Array(0)]],
      ['a payload cut short', [topic!, seq!, payload!.subarray(0, payload!.length - 3)]],
      ['a payload with a trailing byte', [topic!, seq!, Uint8Array.of(...payload!, 0)]],
      ['a payload that is a map', [topic!, seq!, hex('80')]],
      ['a batch of one element', [topic!, seq!, hex('91cb41da556e40000000')]],
      ['an event with no tag', [topic!, seq!, hex('93cb41da556e40000000919000')]],
      ['a BlockStored of 3 elements', [topic!, seq!, hex('93cb41da556e400000009193ab426c6f636b53746f72656490c000')]],
      ['a negative block hash', [topic!, seq!, hex('93cb41da556e400000009192ac426c6f636b52656d6f76656491ff00')]],
      ['a string hash', [topic!, seq!, hex('93cb41da556e400000009192ac426c6f636b52656d6f76656491a17800')]],
    ];
    for (const [what, f] of bad) assert.throws(() => decodeKvEventMessage(f), WireDecodeError, what);
    for (const f of [
      [hex('00'), seq!, payload!],
      [new Uint8Array(0), seq!],
      [new Uint8Array(0), hex('ffffffffffffffff'), hex('90')],
    ])
      assert.throws(() => decodeReplayMessage(f), WireDecodeError);
  });

  test('unknown event tags are skipped and counted; extra trailing elements are ignored', () => {
    // [ts, [["Future", 1], ["BlockRemoved", [5], "GPU", 0, "extra"]], 3, "extra batch field"]
    const batch = decodeKvEventBatch(
      hex(
        '94cb41da556e4000000092' +
          '92a6467574757265' +
          '01' +
          '95ac426c6f636b52656d6f766564910' +
          '5a3475055' +
          '00' +
          'a56578747261' +
          '03' +
          'a56578747261',
      ),
    );
    assert.equal(batch.unknownEvents, 1);
    assert.equal(batch.rank, 3);
    assert.deepEqual(batch.events, [{ kind: 'removed', blockHashes: [intBlockKey(5)], medium: 'GPU', groupIdx: 0 }]);
  });
});
