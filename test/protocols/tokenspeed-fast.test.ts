/**
 * The one-pass `BatchTokenIDOutSlim` decoder (src/protocols/tokenspeed/output-fast.ts) against the schema-driven
 * one: over every golden output vector and over mutated frames, whenever the fast path returns a batch, the
 * schema-driven decoder accepts the frame and returns the same batch; whenever the schema-driven decoder refuses a
 * frame, the fast path returns null (so the protocol reports the schema-driven error).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadTokenSpeedVectors } from '../helpers/vectors.js';
import { prng } from '../helpers/prng.js';
import type { EngineBatch } from '../../src/protocols/types.js';
import {
  batchToEngineBatch,
  decodeBatchTokenIDOutSlim,
  encodeBatchTokenIDOutSlim,
  tokenspeedProtocol,
} from '../../src/protocols/tokenspeed/index.js';
import type { BatchTokenIDOutSlim } from '../../src/protocols/tokenspeed/index.js';
import { RidCache, decodeBatchFast } from '../../src/protocols/tokenspeed/output-fast.js';
import { WireDecodeError } from '../../src/wire/errors.js';

const slimVectors = loadTokenSpeedVectors().filter((v) => /slim/.test(v.name) && typeof v.hex === 'string');

function schemaDriven(bytes: Uint8Array): EngineBatch | Error {
  try {
    return batchToEngineBatch(decodeBatchTokenIDOutSlim(bytes));
  } catch (err) {
    return err as Error;
  }
}

/** The fast path is sound for `bytes`: it declines, or agrees with the schema-driven decoder. Returns what it did. */
function checkAgainstSchemaDriven(bytes: Uint8Array, what: string): 'fast' | 'declined' {
  const fast = decodeBatchFast(bytes);
  const slow = schemaDriven(bytes);
  if (fast === null) return 'declined';
  assert.ok(
    !(slow instanceof Error),
    `${what}: the fast path accepted a frame the schema-driven decoder refuses (${String(slow)})`,
  );
  assert.deepStrictEqual(fast, slow, what);
  return 'fast';
}

test('every golden BatchTokenIDOutSlim vector: the fast path agrees with the schema-driven decoder, and takes the valid ones', () => {
  assert.ok(slimVectors.length >= 15, `found ${slimVectors.length} slim vectors`);
  for (const v of slimVectors) {
    const bytes = Uint8Array.from(Buffer.from(v.hex!, 'hex'));
    const how = checkAgainstSchemaDriven(bytes, v.name);
    if (v.name.startsWith('inv_')) assert.equal(how, 'declined', v.name);
    // The valid vectors the fast path does not take carry 64-bit integer formats or a non-fixstr tag.
    else if (v.name !== 'out_slim14_large_ints') assert.equal(how, 'fast', v.name);
  }
});

test('the protocol reports the schema-driven error for every invalid vector', () => {
  for (const v of slimVectors.filter((x) => x.name.startsWith('inv_'))) {
    const bytes = Uint8Array.from(Buffer.from(v.hex!, 'hex'));
    const slow = schemaDriven(bytes);
    assert.ok(slow instanceof WireDecodeError, v.name);
    assert.throws(
      () => tokenspeedProtocol.decodeOutput([bytes]),
      (e: unknown) => e instanceof WireDecodeError && e.message === slow.message,
      v.name,
    );
  }
});

function sampleBatch(rand: () => number, rows: number): BatchTokenIDOutSlim {
  const b: BatchTokenIDOutSlim = {
    rids: [],
    output_ids: [],
    finished_reasons: [],
    prompt_tokens: [],
    completion_tokens: [],
    cached_tokens: [],
    output_token_logprobs_val: [],
    output_token_logprobs_idx: [],
    engine_index: Math.floor(rand() * 4),
    num_running: Math.floor(rand() * 300),
    num_waiting: Math.floor(rand() * 10),
    kv_active_pages: Math.floor(rand() * 70000),
    kv_total_pages: rand() < 0.2 ? 0 : 70000,
  };
  const reasons = ['', '', '', 'stop', 'length', 'abort', 'error', 'weird'];
  for (let i = 0; i < rows; i++) {
    b.rids.push(rand() < 0.1 ? `chatcmpl-é-${i}` : `chatcmpl-${Math.floor(rand() * 1e9).toString(16)}-${i}`);
    const n = Math.floor(rand() * 4);
    const ids = Array.from({ length: n }, () => Math.floor(rand() * 200_000));
    b.output_ids.push(ids);
    b.finished_reasons.push(reasons[Math.floor(rand() * reasons.length)]!);
    b.prompt_tokens.push(Math.floor(rand() * 70000));
    b.completion_tokens.push(Math.floor(rand() * 300));
    b.cached_tokens.push(Math.floor(rand() * 1000));
    const lp = rand() < 0.5;
    b.output_token_logprobs_val.push(lp ? ids.map(() => (rand() < 0.1 ? -Infinity : -rand() * 10)) : []);
    b.output_token_logprobs_idx.push(lp ? ids.map((t) => t) : []);
  }
  return b;
}

test('encoded batches of every form decode the same on both paths; unknown finish strings are reported once per row', () => {
  const rand = prng(9);
  for (let k = 0; k < 200; k++) {
    const b = sampleBatch(rand, Math.floor(rand() * 40));
    const form = ([9, 10, 14] as const)[k % 3]!;
    if (form < 14) Object.assign(b, { num_running: 0, num_waiting: 0, kv_active_pages: 0, kv_total_pages: 0 });
    if (form === 9) b.engine_index = 0;
    const bytes = encodeBatchTokenIDOutSlim(b, { form });
    assert.equal(checkAgainstSchemaDriven(bytes, `batch ${k}`), 'fast', `batch ${k} (form ${form})`);
    const unknownFast: string[] = [];
    const unknownSlow: string[] = [];
    decodeBatchFast(bytes, (raw) => unknownFast.push(raw));
    batchToEngineBatch(decodeBatchTokenIDOutSlim(bytes), (raw) => unknownSlow.push(raw));
    assert.deepEqual(unknownFast, unknownSlow);
  }
});

test('mutated frames (bytes flipped, truncated, extended): the fast path never accepts what the schema-driven decoder refuses', () => {
  const rand = prng(21);
  let fast = 0;
  let declined = 0;
  for (let k = 0; k < 3000; k++) {
    const bytes = encodeBatchTokenIDOutSlim(sampleBatch(rand, 1 + Math.floor(rand() * 6)));
    let m: Uint8Array;
    const op = k % 4;
    if (op === 0) {
      m = Uint8Array.from(bytes);
      for (let j = 0; j < 1 + Math.floor(rand() * 3); j++) m[Math.floor(rand() * m.length)] = Math.floor(rand() * 256);
    } else if (op === 1) {
      m = bytes.subarray(0, Math.floor(rand() * bytes.length));
    } else if (op === 2) {
      m = new Uint8Array(bytes.length + 1);
      m.set(bytes);
      m[bytes.length] = Math.floor(rand() * 256);
    } else {
      m = Uint8Array.from(bytes);
      m[Math.floor(rand() * m.length)] ^= 1 << Math.floor(rand() * 8);
    }
    if (checkAgainstSchemaDriven(m, `mutation ${k}`) === 'fast') fast++;
    else declined++;
  }
  assert.ok(fast > 100 && declined > 1000, `fast ${fast}, declined ${declined}`);
});

test('a frame inside a larger buffer (a Buffer view, as zeromq hands them) decodes the same', () => {
  const b = sampleBatch(prng(3), 5);
  const bytes = encodeBatchTokenIDOutSlim(b);
  const big = Buffer.alloc(bytes.length + 16, 0xc1);
  big.set(bytes, 7);
  const view = big.subarray(7, 7 + bytes.length);
  assert.deepStrictEqual(decodeBatchFast(view), schemaDriven(bytes));
  assert.deepStrictEqual(decodeBatchFast(Uint8Array.from(bytes)), schemaDriven(bytes));
});

test('rids the UTF-8 decoders could read differently: a leading BOM (stripped by the fatal TextDecoder), U+FFFD, invalid bytes', () => {
  const b = sampleBatch(prng(5), 3);
  for (const rid of ['\ufeffchatcmpl-bom', 'chatcmpl-\ufffd-replacement', 'chatcmpl-ü-ok', '\ufeff']) {
    b.rids[1] = rid;
    const bytes = encodeBatchTokenIDOutSlim(b);
    checkAgainstSchemaDriven(bytes, JSON.stringify(rid));
    assert.deepStrictEqual(tokenspeedProtocol.decodeOutput([bytes]), schemaDriven(bytes), JSON.stringify(rid));
  }
  b.rids[1] = 'chatcmpl-xx';
  const bytes = Uint8Array.from(encodeBatchTokenIDOutSlim(b));
  const at = Buffer.from(bytes).indexOf('chatcmpl-xx') + 9;
  for (const bad of [
    [0xc3, 0x28],
    [0xed, 0xa0],
    [0xc0, 0xaf],
    [0xff, 0xfe],
  ]) {
    bytes[at] = bad[0]!;
    bytes[at + 1] = bad[1]!;
    assert.equal(decodeBatchFast(bytes), null, `invalid UTF-8 ${bad.map((x) => x.toString(16)).join(' ')}`);
    assert.throws(() => tokenspeedProtocol.decodeOutput([bytes]), /str is not valid UTF-8/);
  }
});

test('request ids decoded again come from the rid cache: the same strings, and a rid that differs in one byte is its own string', () => {
  const b = sampleBatch(prng(11), 4);
  b.rids = [
    'chatcmpl-0123456789abcdef0123456789abcdef',
    'r',
    'chatcmpl-ü-é',
    'chatcmpl-0123456789abcdef0123456789abcdeg',
  ];
  const bytes = encodeBatchTokenIDOutSlim(b);
  const first = decodeBatchFast(bytes)!;
  const again = decodeBatchFast(Uint8Array.from(bytes))!;
  assert.deepStrictEqual(again, first);
  assert.deepStrictEqual(
    again.outputs.map((o) => o.requestId),
    b.rids,
  );
  b.rids[0] = 'chatcmpl-0123456789abcdef0123456789abcdeF';
  const changed = decodeBatchFast(encodeBatchTokenIDOutSlim(b))!;
  assert.deepStrictEqual(
    changed.outputs.map((o) => o.requestId),
    b.rids,
  );
});

test('rids the cache cannot hold or keys alike decode the same: over 64 bytes, empty, short, and many sharing their last 8 bytes', () => {
  const b = sampleBatch(prng(12), 6);
  const long = `chatcmpl-${'x'.repeat(80)}`;
  b.rids = [long, '', 'ab', 'p-0000-same-tail', 'q-0000-same-tail', 'r-1111-same-tail'];
  for (let round = 0; round < 3; round++) {
    const got = decodeBatchFast(Uint8Array.from(encodeBatchTokenIDOutSlim(b)))!;
    assert.deepStrictEqual(
      got.outputs.map((o) => o.requestId),
      b.rids,
    );
  }
  // Many in-flight ids alike in the bytes the key reads (one set): each still decodes to its own string.
  b.rids = Array.from({ length: 6 }, (_, i) => `id-${i}-the-same-tail`);
  for (let round = 0; round < 2; round++) {
    const got = decodeBatchFast(Uint8Array.from(encodeBatchTokenIDOutSlim(b)))!;
    assert.deepStrictEqual(
      got.outputs.map((o) => o.requestId),
      b.rids,
    );
  }
});

test('RidCache: an entry answers only for its exact bytes; a set keeps its two most recently used ids', () => {
  const view = (s: string) => {
    const u = Buffer.from(s);
    return { u, v: new DataView(u.buffer, u.byteOffset, u.byteLength) };
  };
  const c = new RidCache(4);
  const [a, b, d] = [view('req-a'), view('req-b'), view('req-d')];
  c.set(7, Uint8Array.from(a.u), 'req-a');
  assert.equal(c.get(7, a.v, 0, a.u.length), 'req-a');
  // Same key (a hash collision), other bytes or another length: no answer.
  assert.equal(c.get(7, b.v, 0, b.u.length), undefined);
  const longer = view('req-aa');
  assert.equal(c.get(7, longer.v, 0, longer.u.length), undefined);
  // Bytes inside a larger frame, at an offset.
  const framed = view('xx-req-a-yy');
  assert.equal(c.get(7, framed.v, 3, 5), 'req-a');
  // Keys 7, 3 and 11 share a set (4 sets): a and b both stay; a used again, then d evicts b, not a.
  c.set(3, Uint8Array.from(b.u), 'req-b');
  assert.equal(c.get(7, a.v, 0, a.u.length), 'req-a');
  assert.equal(c.get(3, b.v, 0, b.u.length), 'req-b');
  assert.equal(c.get(7, a.v, 0, a.u.length), 'req-a');
  c.set(11, Uint8Array.from(d.u), 'req-d');
  assert.equal(c.get(11, d.v, 0, d.u.length), 'req-d');
  assert.equal(c.get(7, a.v, 0, a.u.length), 'req-a');
  assert.equal(c.get(3, b.v, 0, b.u.length), undefined);
  // Another set is untouched by all of it.
  assert.equal(c.get(4, a.v, 0, a.u.length), undefined);
  // An id over one 64-byte slot is not remembered (it is decoded every time); one of exactly 64 bytes is.
  const over = view('x'.repeat(65));
  c.set(5, Uint8Array.from(over.u), 'x'.repeat(65));
  assert.equal(c.get(5, over.v, 0, over.u.length), undefined);
  const full = view('y'.repeat(64));
  c.set(6, Uint8Array.from(full.u), 'y'.repeat(64));
  assert.equal(c.get(6, full.v, 0, full.u.length), 'y'.repeat(64));
});
