/**
 * The front ↔ router data plane codec (src/fronts/channel/: records.ts, messages.ts, decode.ts, wire-error.ts) and the per-tick outbox (src/fronts/channel/outbox.ts):
 * every record type round-trips, absent optionals stay absent, non-finite logprobs survive, errors keep the kind the
 * HTTP layer maps to a status, and malformed messages are a `ChannelDecodeError` (never a crash or a wrong record).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decode, encode } from '@msgpack/msgpack';
import { ENGINE_CLIENT_ERROR_KINDS, EngineClientError } from '../../src/engine-client/errors.js';
import { decodeDown, decodeUp } from '../../src/fronts/channel/decode.js';
import { ChannelRecordTooLarge, DownMessage, encodeDown, encodeUp } from '../../src/fronts/channel/messages.js';
import {
  ChannelDecodeError,
  Tag,
  finishCode,
  type DownRecord,
  type UpRecord,
  type WireError,
} from '../../src/fronts/channel/records.js';
import { fromWireError, toWireError } from '../../src/fronts/channel/wire-error.js';
import { FrontOutboxes, UpOutbox } from '../../src/fronts/channel/outbox.js';
import { DEFAULT_SAMPLING, type GenerateRequest } from '../../src/protocols/types.js';
import { ENGINE_ERROR_STATUS, statusForEngineError } from '../../src/server/errors.js';
import { waitFor } from '../helpers/async.js';

const request: GenerateRequest = {
  requestId: 'chatcmpl-1',
  promptTokenIds: [1, 2, 3, 151_643],
  sampling: { ...DEFAULT_SAMPLING, maxNewTokens: 16, stopTokenIds: [7], logitBias: { '5': -1.5 } },
  stream: true,
  returnLogprob: false,
};

test('front records round-trip in one message, in order', () => {
  const records: UpRecord[] = [
    { tag: Tag.SUBMIT, handle: 1, group: 0, request, dpRank: null, flow: null },
    {
      tag: Tag.SUBMIT,
      handle: 2,
      group: 1,
      request: {
        ...request,
        requestId: 'chatcmpl-2',
        topLogprobs: 2,
        priority: 1,
        trace: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
      },
      dpRank: 1,
      flow: { tenant: 'key:0123456789ab', band: 2 },
    },
    {
      tag: Tag.SUBMIT,
      handle: 3,
      group: 0,
      request,
      dpRank: null,
      flow: { tenant: 'batch', band: 1, budget: { requestsPerMinute: 60, tokensPerMinute: null } },
    },
    { tag: Tag.SUBMIT, handle: 4, group: 0, request, dpRank: null, flow: { tenant: 'batch', band: 1, lead: false } },
    { tag: Tag.SUBMIT, handle: 5, group: 0, request, dpRank: null, flow: { tenant: 'batch', band: 0, timeoutMs: 250 } },
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
    { tag: Tag.SUBMITTED, handle: 1, engineIndex: 0, budget: null },
    { tag: Tag.SUBMITTED, handle: 2, engineIndex: null, budget: null },
    { tag: Tag.SUBMITTED, handle: 3, engineIndex: 1, budget: [60, 59, 1000, -1, -1, -1] },
    { tag: Tag.OUT, handle: 1, output: { ...base, newTokenIds: [10, 11], finishReason: null, logprobs: [] } },
    {
      tag: Tag.OUT,
      handle: 1,
      output: { ...base, newTokenIds: [12], finishReason: 'stop', logprobs: [-0.5], stopReason: 12 },
    },
    {
      tag: Tag.OUT,
      handle: 2,
      output: { ...base, newTokenIds: [], finishReason: 'abort', logprobs: [], stopReason: null },
    },
    {
      tag: Tag.OUT,
      handle: 3,
      output: {
        ...base,
        newTokenIds: [1],
        finishReason: 'length',
        logprobs: [-1],
        stopReason: '###',
        topLogprobs: [
          [
            { id: 1, logprob: -1 },
            { id: 2, logprob: -2 },
          ],
        ],
      },
    },
    {
      tag: Tag.OUT,
      handle: 4,
      output: {
        ...base,
        newTokenIds: [1],
        finishReason: 'error',
        logprobs: [-1],
        topLogprobs: [[{ id: 1, logprob: -1 }]],
      },
    },
    {
      tag: Tag.REJECTED,
      handle: 5,
      error: {
        name: 'EngineClientError',
        message: 'no rank 7',
        kind: 'invalid-dp-rank',
        dpRank: 7,
        engineCount: 2,
        validRanks: [0, 1],
      },
    },
    { tag: Tag.FAILED, handle: 6, error: { name: 'EngineClientError', message: 'rank 0 died', kind: 'engine-dead' } },
    { tag: Tag.GRANT, ticket: 9, granted: false, max: 3 },
    { tag: Tag.REPLY, callId: 4, ok: true, value: { responses: [['resp_1', null]] } },
    { tag: Tag.SNAPSHOT, groups: [] },
    { tag: Tag.JOINED, group: 0, engineIndex: 1, rejoin: true },
  ];
  const back = decodeDown(encodeDown(records));
  // A decoded OUT row is the row a front's stream takes, named by the receiver (requestId '' until then).
  assert.deepEqual(
    back,
    records.map((r) => (r.tag === Tag.OUT ? { ...r, output: { requestId: '', ...r.output } } : r)),
  );
  const first = back[3] as DownRecord & { tag: typeof Tag.OUT };
  assert.equal('stopReason' in first.output, false, 'no stop reason key when the engine reported none');
  assert.equal('topLogprobs' in first.output, false);
});

test('non-finite logprobs cross as they are', () => {
  const out = decodeDown(
    encodeDown([
      {
        tag: Tag.OUT,
        handle: 1,
        output: {
          newTokenIds: [1, 2, 3],
          finishReason: null,
          promptTokens: 1,
          completionTokens: 3,
          cachedTokens: 0,
          logprobs: [-Infinity, Number.NaN, -0.25],
        },
      },
    ]),
  );
  const lp = (out[0] as DownRecord & { tag: typeof Tag.OUT }).output.logprobs;
  assert.equal(lp[0], -Infinity);
  assert.ok(Number.isNaN(lp[1]));
  assert.equal(lp[2], -0.25);
});

test('finish codes: 0 running, 1 stop, 2 length, 3 abort, 4 error', () => {
  assert.deepEqual(
    [null, 'stop', 'length', 'abort', 'error'].map((r) => finishCode(r as never)),
    [0, 1, 2, 3, 4],
  );
});

test('errors keep what the HTTP layer reads: the kind (→ status) and the structured fields', () => {
  const err = new EngineClientError('invalid-dp-rank', 'DP rank 5 is not a connected rank', {
    dpRank: 5,
    engineCount: 2,
    validRanks: [0, 1],
  });
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
  // Every kind, with every structured field, crosses and keeps its status.
  const fields = { requestId: 'r-1', dpRank: 3, engineCount: 4, validRanks: [0, 2] };
  for (const kind of ENGINE_CLIENT_ERROR_KINDS) {
    const records = [
      { tag: Tag.FAILED, handle: 1, error: toWireError(new EngineClientError(kind, `m ${kind}`, fields)) },
    ];
    const e = fromWireError((decodeDown(encodeDown(records as never))[0] as { error: WireError }).error);
    assert.ok(e instanceof EngineClientError, kind);
    assert.deepEqual(
      {
        kind: e.kind,
        message: e.message,
        requestId: e.requestId,
        dpRank: e.dpRank,
        engineCount: e.engineCount,
        validRanks: e.validRanks,
      },
      { kind, message: `m ${kind}`, ...fields },
    );
    assert.equal(statusForEngineError(e.kind), ENGINE_ERROR_STATUS[kind]);
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
    ['truncated', encodeUp([{ tag: Tag.PERMIT, ticket: 1 }]).subarray(0, 1), 'up'],
    ['not a list', encode({ a: 1 }), 'up'],
    ['untagged record', encode([['x', 1]]), 'up'],
    ['unknown tag', encode([[77, 1]]), 'up'],
    ['router tag from a front', encode([[Tag.SUBMITTED, 1, 0]]), 'up'],
    ['fractional handle', encode([[Tag.ABORT, 1.5]]), 'up'],
    ['submit without a request', encode([[Tag.SUBMIT, 1, 0, null, null]]), 'up'],
    ['submit with a request id that is not a string', encode([[Tag.SUBMIT, 1, 0, { requestId: 4 }, null]]), 'up'],
    // Refused at the boundary (a malformed front message), before the engine client sees it.
    ['submit without prompt token ids', encode([[Tag.SUBMIT, 1, 0, { requestId: 'x', sampling: {} }, null]]), 'up'],
    [
      'submit with prompt token ids that are not a list',
      encode([[Tag.SUBMIT, 1, 0, { requestId: 'x', promptTokenIds: 'abc', sampling: {} }, null]]),
      'up',
    ],
    [
      'submit with trace headers that are not strings',
      encode([
        [Tag.SUBMIT, 1, 0, { requestId: 'x', promptTokenIds: [1], sampling: {}, trace: { traceparent: 7 } }, null],
      ]),
      'up',
    ],
    [
      'submit without sampling parameters',
      encode([[Tag.SUBMIT, 1, 0, { requestId: 'x', promptTokenIds: [1] }, null]]),
      'up',
    ],
    [
      'submit with a flow tenant that is not a string',
      encode([[Tag.SUBMIT, 1, 0, { requestId: 'x', promptTokenIds: [1], sampling: {} }, null, 7, 1]]),
      'up',
    ],
    [
      'submit with a flow band that is not an integer',
      encode([[Tag.SUBMIT, 1, 0, { requestId: 'x', promptTokenIds: [1], sampling: {} }, null, 't', 'high']]),
      'up',
    ],
    [
      'submit with a budget limit of 0',
      encode([[Tag.SUBMIT, 1, 0, { requestId: 'x', promptTokenIds: [1], sampling: {} }, null, 't', 1, 0, null, true]]),
      'up',
    ],
    [
      'submit with a lead flag that is not a boolean',
      encode([[Tag.SUBMIT, 1, 0, { requestId: 'x', promptTokenIds: [1], sampling: {} }, null, 't', 1, 5, null, 1]]),
      'up',
    ],
    [
      'submit with a queue deadline of 0',
      encode([
        [Tag.SUBMIT, 1, 0, { requestId: 'x', promptTokenIds: [1], sampling: {} }, null, 't', 1, null, null, true, 0],
      ]),
      'up',
    ],
    ['submitted with a budget of five numbers', encode([[Tag.SUBMITTED, 1, 0, [1, 2, 3, 4, 5]]]), 'down'],
    ['call without a method', encode([[Tag.CALL, 1, 2, null]]), 'up'],
    ['front tag from the router', encode([[Tag.PERMIT, 1]]), 'down'],
    ['the old HELLO record from a front', encode([[1, 3]]), 'up'],
    ['token ids not a list', encode([[Tag.OUT, 1, 'abc', 0, 1, 1, 0, []]]), 'down'],
    ['token ids not numbers', encode([[Tag.OUT, 1, ['a'], 0, 1, 1, 0, []]]), 'down'],
    ['unknown finish code', encode([[Tag.OUT, 1, [1], 9, 1, 1, 0, []]]), 'down'],
    ['stop reason of a bad type', encode([[Tag.OUT, 1, [1], 1, 1, 1, 0, [], { x: 1 }, true]]), 'down'],
    ['error without a message', encode([[Tag.FAILED, 1, { name: 'E' }]]), 'down'],
    [
      'error of no engine-client kind',
      encode([[Tag.FAILED, 1, { name: 'E', message: 'm', kind: 'handshake' }]]),
      'down',
    ],
    [
      'error field of the wrong type',
      encode([[Tag.FAILED, 1, { name: 'E', message: 'm', kind: 'invalid-dp-rank', validRanks: ['0'] }]]),
      'down',
    ],
    ['error rank not a number', encode([[Tag.FAILED, 1, { name: 'E', message: 'm', dpRank: '1' }]]), 'down'],
    ['snapshot not a list', encode([[Tag.SNAPSHOT, 3]]), 'down'],
    ['fractional token id', encode([[Tag.OUT, 1, [1.5], 0, 1, 1, 0, []]]), 'down'],
    ['token id beyond 2^53', encode([[Tag.OUT, 1, [2n ** 60n], 0, 1, 1, 0, []]], { useBigInt64: true }), 'down'],
    ['handle beyond 2^53', encode([[Tag.OUT, 2n ** 60n, [1], 0, 1, 1, 0, []]], { useBigInt64: true }), 'down'],
    ['logprob not a number', encode([[Tag.OUT, 1, [1], 0, 1, 1, 0, ['x']]]), 'down'],
    ['count not an integer', encode([[Tag.OUT, 1, [1], 0, 1.5, 1, 0, []]]), 'down'],
    ['out record too short', encode([[Tag.OUT, 1, [1], 0, 1, 1, 0]]), 'down'],
    ['top logprobs not a list', encode([[Tag.OUT, 1, [1], 0, 1, 1, 0, [], null, false, 3]]), 'down'],
    [
      'trailing bytes',
      Uint8Array.from([...encodeDown([{ tag: Tag.JOINED, group: 0, engineIndex: 1, rejoin: false }]), 0x01]),
      'down',
    ],
    ['empty', new Uint8Array(0), 'down'],
    ['fewer records than the header says', encode([[Tag.SUBMITTED, 1, 0]]).map((b, i) => (i === 0 ? 0x92 : b)), 'down'],
  ];
  for (const [what, bytes, side] of bad) {
    assert.throws(() => (side === 'up' ? decodeUp(bytes) : decodeDown(bytes)), ChannelDecodeError, what);
  }
});

test('DownMessage: OUT rows written in place are the msgpack list of records any decoder reads (the wire is unchanged)', () => {
  const o = {
    newTokenIds: [5, 300, 70_000, 151_643],
    finishReason: 'length' as const,
    promptTokens: 70_000,
    completionTokens: 256,
    cachedTokens: 64,
    logprobs: [-0.5, -1, 0, -0, Number.NaN, -Infinity],
  };
  const m = new DownMessage(8); // grows
  m.push({ tag: Tag.SUBMITTED, handle: 1, engineIndex: 3, budget: null });
  for (let h = 0; h < 40; h++) m.out(h, o);
  m.out(41, { ...o, stopReason: '###' });
  m.push({ tag: Tag.GRANT, ticket: 2, granted: true, max: 0 });
  assert.equal(m.count, 43);
  const bytes = m.finish();
  const generic = decode(bytes) as unknown[][];
  assert.equal(generic.length, 43);
  assert.deepEqual(generic[0], [Tag.SUBMITTED, 1, 3]);
  assert.deepEqual(generic[1], [Tag.OUT, 0, o.newTokenIds, 2, 70_000, 256, 64, o.logprobs]);
  assert.deepEqual(generic[41], [Tag.OUT, 41, o.newTokenIds, 2, 70_000, 256, 64, o.logprobs, '###', true]);
  const back = decodeDown(bytes);
  assert.equal(back.length, 43);
  const out = back[1] as DownRecord & { tag: typeof Tag.OUT };
  assert.ok(Object.is(out.output.logprobs[3], -0), '-0 crosses as -0');
  assert.deepEqual(back[42], { tag: Tag.GRANT, ticket: 2, granted: true, max: 0 });
});

/** An output row of one token, no logprobs. */
const ONE_TOKEN_ROW = {
  newTokenIds: [1],
  finishReason: null,
  promptTokens: 1,
  completionTokens: 1,
  cachedTokens: 0,
  logprobs: [],
};

test('DownMessage: a row that cannot be encoded throws and leaves the message as it was', () => {
  const m = new DownMessage();
  const ok = ONE_TOKEN_ROW;
  m.out(1, ok);
  for (const bad of [
    { ...ok, newTokenIds: [1, 2.5] },
    { ...ok, promptTokens: -1 },
    { ...ok, cachedTokens: 2 ** 40 },
  ]) {
    assert.throws(() => m.out(2, bad), /expected an integer in 0\.\.2\^32−1/);
  }
  m.out(3, ok);
  assert.deepEqual(
    decodeDown(m.finish()).map((r) => (r as { handle: number }).handle),
    [1, 3],
  );
});

test('OUT records encoded by a generic msgpack encoder (any tag encoding, tuple layout) decode the same', () => {
  const base = [1, [7, 8], 0, 3, 2, 0, [-0.5, -1]];
  const viaGeneric = decodeDown(
    encode([
      [Tag.OUT, ...base],
      [Tag.OUT, ...base, 12, true],
    ]),
  );
  // A non-minimal tag (uint8 103) goes through the tuple decoder.
  const nonMinimal = Uint8Array.from(encode([[Tag.OUT, ...base]]));
  const longTag = Uint8Array.from([nonMinimal[0]!, 0x98, 0xcc, Tag.OUT, ...nonMinimal.subarray(3)]);
  const viaTuple = decodeDown(longTag);
  const expected = {
    tag: Tag.OUT,
    handle: 1,
    output: {
      requestId: '',
      newTokenIds: [7, 8],
      finishReason: null,
      promptTokens: 3,
      completionTokens: 2,
      cachedTokens: 0,
      logprobs: [-0.5, -1],
    },
  };
  assert.deepEqual(viaGeneric, [expected, { ...expected, output: { ...expected.output, stopReason: 12 } }]);
  assert.deepEqual(viaTuple, [expected]);
});

test('mutated router messages: a ChannelDecodeError or records, never another exception', () => {
  let seed = 7;
  const rand = () => (seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32;
  const m = new DownMessage();
  m.push({ tag: Tag.SUBMITTED, handle: 1, engineIndex: 0, budget: null });
  for (let h = 0; h < 6; h++)
    m.out(h, {
      newTokenIds: [h, 1000 + h],
      finishReason: h === 5 ? 'stop' : null,
      promptTokens: 9,
      completionTokens: h,
      cachedTokens: 0,
      logprobs: h % 2 ? [-1.5, -2] : [],
    });
  m.push({ tag: Tag.FAILED, handle: 9, error: { name: 'EngineClientError', message: 'x', kind: 'engine-dead' } });
  const bytes = m.finish();
  let errors = 0;
  for (let k = 0; k < 3000; k++) {
    const b = Uint8Array.from(k % 3 === 0 ? bytes.subarray(0, Math.floor(rand() * bytes.length)) : bytes);
    if (k % 3 !== 0) for (let j = 0; j < 1 + (k % 3); j++) b[Math.floor(rand() * b.length)] = Math.floor(rand() * 256);
    try {
      decodeDown(b);
    } catch (err) {
      assert.ok(err instanceof ChannelDecodeError, `mutation ${k}: ${String(err)}`);
      errors++;
    }
  }
  assert.ok(errors > 1000, `${errors} refused`);
});

test("UpOutbox: the records of one turn are one message in one write; the next turn's are the next", async () => {
  const writes: UpRecord[][][] = [];
  const box = new UpOutbox((messages) => writes.push(messages.map((m) => decodeUp(m))));
  box.push({ tag: Tag.PERMIT, ticket: 1 });
  box.push({ tag: Tag.SUBMIT, handle: 1, group: 0, request, dpRank: null, flow: null });
  box.push({ tag: Tag.ABORT, handle: 1 });
  assert.equal(writes.length, 0, 'nothing is written before the end of the turn');
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(writes, [
    [
      [
        { tag: Tag.PERMIT, ticket: 1 },
        { tag: Tag.SUBMIT, handle: 1, group: 0, request, dpRank: null, flow: null },
        { tag: Tag.ABORT, handle: 1 },
      ],
    ],
  ]);
  box.push({ tag: Tag.RELEASE, ticket: 1 });
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(writes[1], [[{ tag: Tag.RELEASE, ticket: 1 }]]);
  assert.equal(box.messages, 2);
  box.push({ tag: Tag.RELEASE, ticket: 2 });
  box.close();
  await new Promise((r) => setTimeout(r, 5));
  assert.equal(writes.length, 2, 'nothing leaves after close');
});

test('UpOutbox: records that would pass the message bound leave as several messages of one write; a record that alone passes it is refused', async () => {
  const writes: Uint8Array[][] = [];
  const max = 600;
  const box = new UpOutbox((messages) => writes.push(messages), max);
  const big = (handle: number): UpRecord => ({
    tag: Tag.SUBMIT,
    handle,
    group: 0,
    request: { ...request, promptTokenIds: new Array<number>(60).fill(1000) },
    dpRank: null,
    flow: null,
  });
  for (let h = 1; h <= 5; h++) box.push(big(h));
  assert.throws(
    () =>
      box.push({
        tag: Tag.SUBMIT,
        handle: 9,
        group: 0,
        request: { ...request, promptTokenIds: new Array<number>(400).fill(1000) },
        dpRank: null,
        flow: null,
      }),
    (err: unknown) => err instanceof ChannelRecordTooLarge && err.maxBytes === max,
  );
  await new Promise((r) => setImmediate(r));
  assert.equal(writes.length, 1, 'one write');
  const messages = writes[0]!;
  assert.ok(messages.length > 1, `${messages.length} messages`);
  for (const m of messages) assert.ok(m.length <= max, `a message of ${m.length} bytes`);
  assert.deepEqual(
    messages.flatMap((m) => decodeUp(m).map((r) => (r as { handle: number }).handle)),
    [1, 2, 3, 4, 5],
    'every record once, in order; the refused one not at all',
  );
});

test('FrontOutboxes: one message per front per turn; a front that refuses (EAGAIN) keeps its messages in order and holds up no other', async () => {
  const sent: Array<[number, number[]]> = [];
  let refuse = true;
  const stuck: number[] = [];
  const eagain = Object.assign(new Error('Socket temporarily unavailable'), { code: 'EAGAIN' });
  const boxes = new FrontOutboxes(
    async (key, message) => {
      if (key === 1 && refuse) throw eagain;
      sent.push([key, (decodeDown(message) as Array<{ handle: number }>).map((r) => r.handle)]);
    },
    (key) => stuck.push(key),
  );
  // Closed also when an assertion fails: a refusing lane retries on a timer and would keep the file alive.
  try {
    const a = boxes.open(1);
    const b = boxes.open(2);
    const row = ONE_TOKEN_ROW;
    boxes.message(a).out(1, row);
    boxes.message(a).out(2, row);
    boxes.message(b).out(3, row);
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(sent, [[2, [3]]], 'front 2 served while front 1 refuses');
    assert.ok(boxes.queuedBytes(1) > 0);
    boxes.message(a).out(4, row);
    boxes.push(2, { tag: Tag.SUBMITTED, handle: 5, engineIndex: 0, budget: null });
    await new Promise((r) => setImmediate(r));
    refuse = false;
    await waitFor(
      () => sent.length >= 4,
      'front 1 reads again',
      30_000,
      () => sent,
    );
    assert.deepEqual(
      sent,
      [
        [2, [3]],
        [2, [5]],
        [1, [1, 2]],
        [1, [4]],
      ],
      'front 1 gets its messages in order once it reads',
    );
    assert.equal(boxes.queuedBytes(1), 0);
    assert.deepEqual(stuck, []);
  } finally {
    boxes.close();
  }
});

test('FrontOutboxes: a front refusing for stuckAfterMs, over its byte limit, or unreachable is reported stuck once and sends nothing more', async () => {
  let now = 0;
  const stuck: string[] = [];
  const attempts = new Map<number, number>();
  const boxes = new FrontOutboxes(
    async (key) => {
      attempts.set(key, (attempts.get(key) ?? 0) + 1);
      if (key === 3) throw Object.assign(new Error('Host unreachable'), { code: 'EHOSTUNREACH' });
      throw Object.assign(new Error('Socket temporarily unavailable'), { code: 'EAGAIN' });
    },
    (key, err) => stuck.push(`${key}: ${(err as Error).message}`),
    { stuckAfterMs: 1000, maxQueuedBytes: 200, now: () => now },
  );
  const row = {
    newTokenIds: [1, 2, 3],
    finishReason: null,
    promptTokens: 1,
    completionTokens: 1,
    cachedTokens: 0,
    logprobs: [-1, -2, -3],
  };
  const state = () => ({ stuck, attempts: [...attempts] });
  // Closed also when an assertion fails: a refusing lane retries on a timer and would keep the file alive.
  try {
    const slow = boxes.open(1);
    const big = boxes.open(2);
    const gone = boxes.open(3);
    boxes.message(slow).out(1, row);
    for (let i = 0; i < 10; i++) boxes.message(big).out(i, row);
    boxes.message(gone).out(1, row);
    // The clock stands at 0, so front 1 cannot be stuck yet, however long this takes.
    await waitFor(() => stuck.length >= 2 && (attempts.get(1) ?? 0) >= 2, 'fronts 2 and 3 stuck', 30_000, state);
    assert.deepEqual(
      stuck.map((s) => s.split(':')[0]),
      ['2', '3'],
      'over the byte limit and unreachable: stuck at once',
    );
    assert.ok((attempts.get(1) ?? 0) >= 2, 'the refused front is retried');
    now = 1500;
    await waitFor(() => stuck.length >= 3, 'front 1 stuck once its refusals last stuckAfterMs', 30_000, state);
    assert.equal(stuck.length, 3);
    assert.match(stuck[2]!, /^1: front 1 took no message for 1500 ms/);
    const tries = attempts.get(1);
    boxes.message(slow).out(2, row);
    // Nothing to wait for here: a retry would come within RETRY_MAX_MS (16 ms) of the last one.
    await new Promise((r) => setTimeout(r, 60));
    assert.equal(attempts.get(1), tries, 'a stuck lane sends nothing more');
    assert.equal(boxes.queuedBytes(1), 0, 'and holds nothing');
  } finally {
    boxes.close();
  }
});
