/**
 * The front ↔ router data plane codec (src/fronts/channel-codec.ts) and the per-tick outbox (src/fronts/outbox.ts):
 * every record type round-trips, absent optionals stay absent, non-finite logprobs survive, errors keep the kind the
 * HTTP layer maps to a status, and malformed messages are a `ChannelDecodeError` (never a crash or a wrong record).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { encode } from '@msgpack/msgpack';
import { EngineClientError } from '../../src/engine-client/errors.js';
import {
  ChannelDecodeError,
  Tag,
  decodeDown,
  decodeUp,
  encodeDown,
  encodeUp,
  finishCode,
  fromWireError,
  toWireError,
  type DownRecord,
  type UpRecord,
} from '../../src/fronts/channel-codec.js';
import { Outbox } from '../../src/fronts/outbox.js';
import { DEFAULT_SAMPLING, type GenerateRequest } from '../../src/protocols/types.js';
import { statusForEngineError } from '../../src/server/errors.js';

const request: GenerateRequest = {
  requestId: 'chatcmpl-1',
  promptTokenIds: [1, 2, 3, 151_643],
  sampling: { ...DEFAULT_SAMPLING, maxNewTokens: 16, stopTokenIds: [7], logitBias: { '5': -1.5 } },
  stream: true,
  returnLogprob: false,
};

test('front records round-trip in one message, in order', () => {
  const records: UpRecord[] = [
    { tag: Tag.HELLO, frontId: 3 },
    { tag: Tag.SUBMIT, handle: 1, group: 0, request, dpRank: null },
    { tag: Tag.SUBMIT, handle: 2, group: 1, request: { ...request, requestId: 'chatcmpl-2', topLogprobs: 2 }, dpRank: 1 },
    { tag: Tag.ABORT, handle: 1 },
    { tag: Tag.PERMIT, ticket: 9 },
    { tag: Tag.RELEASE, ticket: 9 },
    { tag: Tag.CALL, callId: 4, method: 'store.get', args: 'resp_1' },
  ];
  assert.deepEqual(decodeUp(encodeUp(records)), records);
});

test('router records round-trip; absent optionals stay absent, stop reasons and top logprobs survive', () => {
  const base = { promptTokens: 4, completionTokens: 2, cachedTokens: 1 };
  const records: DownRecord[] = [
    { tag: Tag.SUBMITTED, handle: 1, engineIndex: 0 },
    { tag: Tag.SUBMITTED, handle: 2, engineIndex: null },
    { tag: Tag.OUT, handle: 1, output: { ...base, newTokenIds: [10, 11], finishReason: null, logprobs: [] } },
    { tag: Tag.OUT, handle: 1, output: { ...base, newTokenIds: [12], finishReason: 'stop', logprobs: [-0.5], stopReason: 12 } },
    { tag: Tag.OUT, handle: 2, output: { ...base, newTokenIds: [], finishReason: 'abort', logprobs: [], stopReason: null } },
    { tag: Tag.OUT, handle: 3, output: { ...base, newTokenIds: [1], finishReason: 'length', logprobs: [-1], stopReason: '###', topLogprobs: [[{ id: 1, logprob: -1 }, { id: 2, logprob: -2 }]] } },
    { tag: Tag.OUT, handle: 4, output: { ...base, newTokenIds: [1], finishReason: 'error', logprobs: [-1], topLogprobs: [[{ id: 1, logprob: -1 }]] } },
    { tag: Tag.REJECTED, handle: 5, error: { name: 'EngineClientError', message: 'no rank 7', kind: 'invalid-dp-rank', dpRank: 7, engineCount: 2, validRanks: [0, 1] } },
    { tag: Tag.FAILED, handle: 6, error: { name: 'EngineClientError', message: 'rank 0 died', kind: 'engine-dead' } },
    { tag: Tag.GRANT, ticket: 9, granted: false, max: 3 },
    { tag: Tag.REPLY, callId: 4, ok: true, value: { responses: [['resp_1', null]] } },
    { tag: Tag.SNAPSHOT, groups: [] },
    { tag: Tag.JOINED, group: 0, engineIndex: 1, rejoin: true },
  ];
  const back = decodeDown(encodeDown(records));
  assert.deepEqual(back, records);
  const first = back[2] as DownRecord & { tag: typeof Tag.OUT };
  assert.equal('stopReason' in first.output, false, 'no stop reason key when the engine reported none');
  assert.equal('topLogprobs' in first.output, false);
});

test('non-finite logprobs cross as they are', () => {
  const out = decodeDown(encodeDown([{ tag: Tag.OUT, handle: 1, output: { newTokenIds: [1, 2, 3], finishReason: null, promptTokens: 1, completionTokens: 3, cachedTokens: 0, logprobs: [-Infinity, Number.NaN, -0.25] } }]));
  const lp = (out[0] as DownRecord & { tag: typeof Tag.OUT }).output.logprobs;
  assert.equal(lp[0], -Infinity);
  assert.ok(Number.isNaN(lp[1]));
  assert.equal(lp[2], -0.25);
});

test('finish codes: 0 running, 1 stop, 2 length, 3 abort, 4 error', () => {
  assert.deepEqual([null, 'stop', 'length', 'abort', 'error'].map((r) => finishCode(r as never)), [0, 1, 2, 3, 4]);
});

test('errors keep what the HTTP layer reads: the kind (→ status) and the structured fields', () => {
  const err = new EngineClientError('invalid-dp-rank', 'DP rank 5 is not a connected rank', { dpRank: 5, engineCount: 2, validRanks: [0, 1] });
  const back = fromWireError(toWireError(err));
  assert.ok(back instanceof EngineClientError);
  assert.equal(back.kind, 'invalid-dp-rank');
  assert.equal(back.message, err.message);
  assert.deepEqual(back.validRanks, [0, 1]);
  assert.equal(statusForEngineError(back.kind), 400);
  for (const kind of ['engine-dead', 'rank-stalled', 'unavailable', 'client-closed'] as const) {
    const e = fromWireError(toWireError(new EngineClientError(kind, kind)));
    assert.equal(statusForEngineError((e as EngineClientError).kind), 503, kind);
  }
  const plain = fromWireError(toWireError(new RangeError('bad')));
  assert.equal(plain.name, 'RangeError');
  assert.equal(plain.message, 'bad');
  assert.equal('kind' in plain, false);
  assert.equal(fromWireError(toWireError('a string')).message, 'a string');
});

test('malformed messages are ChannelDecodeErrors', () => {
  const bad: Array<[string, Uint8Array, 'up' | 'down']> = [
    ['not msgpack', Uint8Array.of(0xc1), 'up'],
    ['truncated', encodeUp([{ tag: Tag.HELLO, frontId: 1 }]).subarray(0, 1), 'up'],
    ['not a list', encode({ a: 1 }), 'up'],
    ['untagged record', encode([['x', 1]]), 'up'],
    ['unknown tag', encode([[77, 1]]), 'up'],
    ['router tag from a front', encode([[Tag.SUBMITTED, 1, 0]]), 'up'],
    ['fractional handle', encode([[Tag.ABORT, 1.5]]), 'up'],
    ['submit without a request', encode([[Tag.SUBMIT, 1, 0, null, null]]), 'up'],
    ['submit with a request id that is not a string', encode([[Tag.SUBMIT, 1, 0, { requestId: 4 }, null]]), 'up'],
    ['call without a method', encode([[Tag.CALL, 1, 2, null]]), 'up'],
    ['front tag from the router', encode([[Tag.HELLO, 1]]), 'down'],
    ['token ids not a list', encode([[Tag.OUT, 1, 'abc', 0, 1, 1, 0, []]]), 'down'],
    ['token ids not numbers', encode([[Tag.OUT, 1, ['a'], 0, 1, 1, 0, []]]), 'down'],
    ['unknown finish code', encode([[Tag.OUT, 1, [1], 9, 1, 1, 0, []]]), 'down'],
    ['stop reason of a bad type', encode([[Tag.OUT, 1, [1], 1, 1, 1, 0, [], { x: 1 }, true]]), 'down'],
    ['error without a message', encode([[Tag.FAILED, 1, { name: 'E' }]]), 'down'],
    ['snapshot not a list', encode([[Tag.SNAPSHOT, 3]]), 'down'],
  ];
  for (const [what, bytes, side] of bad) {
    assert.throws(() => (side === 'up' ? decodeUp(bytes) : decodeDown(bytes)), ChannelDecodeError, what);
  }
});

test('Outbox: records pushed in one tick leave as one message per peer; records pushed during a send leave together after it', async () => {
  const sent: Array<[string, number[]]> = [];
  let release: () => void = () => {};
  let blockFirst = true;
  const box = new Outbox<string, number>(
    async (key, records) => {
      sent.push([key, records]);
      if (blockFirst) {
        blockFirst = false;
        await new Promise<void>((r) => (release = r));
      }
    },
    () => assert.fail('no send error expected'),
  );
  box.push('a', 1);
  box.push('a', 2);
  box.push('b', 3);
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(sent, [['a', [1, 2]]], 'the first message is in flight');
  box.push('a', 4);
  box.push('a', 5);
  release();
  await new Promise((r) => setTimeout(r, 10));
  assert.deepEqual(sent, [['a', [1, 2]], ['b', [3]], ['a', [4, 5]]]);
  box.forget('a');
  box.push('c', 6);
  box.close();
  await new Promise((r) => setTimeout(r, 10));
  assert.equal(sent.length, 3, 'nothing leaves after close');
});

test('Outbox: a failed send is reported and the next records still leave', async () => {
  const errors: string[] = [];
  const sent: number[][] = [];
  let fail = true;
  const box = new Outbox<string, number>(
    async (_key, records) => {
      if (fail) {
        fail = false;
        throw new Error('EHOSTUNREACH');
      }
      sent.push(records);
    },
    (key, err) => errors.push(`${key}: ${(err as Error).message}`),
  );
  box.push('a', 1);
  await new Promise((r) => setTimeout(r, 5));
  box.push('a', 2);
  await new Promise((r) => setTimeout(r, 5));
  assert.deepEqual(errors, ['a: EHOSTUNREACH']);
  assert.deepEqual(sent, [[2]]);
});
