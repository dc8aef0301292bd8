/**
 * One in-process simulated rank against a real gateway-side ZmqEngineLink: handshake, tokens, validation abort row,
 * silent client abort, ENGINE_CORE_DEAD on close. Time scale 0: rounds run back to back, nothing depends on speed.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ZmqEngineLink } from '../../src/transport/zmq-link.js';
import {
  encodeTokenizedGenerateReqInput,
  toTokenizedGenerateReqInput,
  tokenspeedProtocol,
} from '../../src/protocols/tokenspeed/index.js';
import { DEFAULT_SAMPLING, RequestType, type EngineBatch, type GenerateRequest } from '../../src/protocols/types.js';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import type { SimEngineHandle } from '../../src/sim/engine.js';
import { type LinkedRank, OutputReader, hangGuard, startLinkedRank } from './helpers.js';

let rank: LinkedRank | null = null;
let link: ZmqEngineLink | null = null;
let engine: SimEngineHandle | null = null;
let reader: OutputReader;
let tokenizer: GatewayTokenizer;

function request(id: string, over: Partial<GenerateRequest['sampling']> = {}, stream = true): GenerateRequest {
  return {
    requestId: id,
    promptTokenIds: [9707, 11, 1879],
    sampling: { ...DEFAULT_SAMPLING, ...over },
    stream,
    returnLogprob: false,
  };
}

async function send(req: GenerateRequest): Promise<void> {
  const l = link as ZmqEngineLink;
  await l.send(l.engines[0].identity, RequestType.ADD, tokenspeedProtocol.encodeAdd(req));
}

const rowsFor = (batches: EngineBatch[], id: string) =>
  batches.flatMap((b) => b.outputs.filter((o) => o.requestId === id));

before(async () => {
  tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  rank = await startLinkedRank(tokenizer, { engineIndex: 7, maxRunning: 4, kvTotalPages: 64, maxModelLen: 2048 });
  ({ link, engine } = rank);
  reader = new OutputReader(rank.link);
});

after(() => rank?.close());

test('the rank registers with its engine index and its ready response', () => {
  const l = link as ZmqEngineLink;
  assert.equal(l.engines.length, 1);
  assert.equal(l.engines[0].engineIndex, 7);
  assert.equal(l.engines[0].ready.vllmVersion, 'tokenspeed-sim');
  assert.equal(l.engines[0].ready.numGpuBlocks, 64);
  assert.equal(l.engines[0].ready.prefixGranularity, 16);
  assert.equal(l.engines[0].ready.maxModelLen, 2048);
  assert.equal(l.engines[0].ready.maxNumSeqs, 4);
  assert.equal(l.engines[0].ready.dataParallelSize, 1);
});

test('an ADD is answered with readable tokens and a finish reason; the seed makes it reproducible', async () => {
  await send(request('e-1', { seed: 77 }));
  const a = await reader.untilFinished(['e-1']);
  await send(request('e-2', { seed: 77 }));
  const b = await reader.untilFinished(['e-2']);
  const rowsA = rowsFor(a, 'e-1');
  const idsA = rowsA.flatMap((o) => o.newTokenIds);
  assert.equal(rowsA.at(-1)?.finishReason, 'stop');
  assert.equal(rowsA.at(-1)?.completionTokens, idsA.length);
  assert.equal(rowsA.at(-1)?.promptTokens, 3);
  assert.ok(a.every((x) => x.engineIndex === 7 && x.load !== undefined));
  assert.deepEqual(
    rowsFor(b, 'e-2').flatMap((o) => o.newTokenIds),
    idsA,
    'same seed, same prompt → same tokens',
  );
  const text = tokenizer.decode(idsA, { skipSpecialTokens: true });
  assert.match(text, /^[A-Z][\x20-\x7e\n]+\.$/);
});

test('max_tokens with ignore_eos finishes with length; the terminal batch still counts the request (4.9)', async () => {
  await send(request('e-len', { maxNewTokens: 12, ignoreEos: true }));
  const batches = await reader.untilFinished(['e-len']);
  const rows = rowsFor(batches, 'e-len');
  assert.equal(rows.at(-1)?.finishReason, 'length');
  assert.equal(rows.flatMap((o) => o.newTokenIds).length, 12);
  assert.equal(batches.at(-1)?.load?.numRunning, 1);
});

test('a validation error answers with one terminal abort row and no tokens', async () => {
  const wire = { ...toTokenizedGenerateReqInput(request('e-bad')), validation_error: 'gateway says no' };
  const l = link as ZmqEngineLink;
  await l.send(l.engines[0].identity, RequestType.ADD, encodeTokenizedGenerateReqInput(wire, { form: 'full' }));
  const [b] = await reader.untilFinished(['e-bad']);
  assert.deepEqual(
    b.outputs.map((o) => [o.requestId, o.finishReason, o.newTokenIds.length, o.completionTokens]),
    [['e-bad', 'abort', 0, 0]],
  );
});

test('a client ABORT is silent: no terminal row, and later batches no longer count it', async () => {
  const l = link as ZmqEngineLink;
  await send(request('e-long', { maxNewTokens: 1500, ignoreEos: true }));
  let first: EngineBatch;
  do first = await reader.batch();
  while (!first.outputs.some((o) => o.requestId === 'e-long'));
  await l.send(l.engines[0].identity, RequestType.ABORT, tokenspeedProtocol.encodeAbort(['e-long']));
  await send(request('e-after', { maxNewTokens: 5, ignoreEos: true }));
  const batches = await reader.untilFinished(['e-after']);
  assert.ok(
    batches.every((b) => !b.finishedRequestIds.includes('e-long')),
    'no terminal row for the aborted request',
  );
  const withAfter = batches.filter((b) => b.outputs.some((o) => o.requestId === 'e-after'));
  assert.ok(withAfter.length > 0);
  for (const b of withAfter) {
    assert.ok(
      !b.outputs.some((o) => o.requestId === 'e-long'),
      'no rows for the aborted request once the abort was applied',
    );
    assert.equal(b.load?.numRunning, 1, 'the aborted request is no longer counted');
  }
  assert.equal((engine as SimEngineHandle).stats().aborted, 1);
});

test('a malformed ADD is dropped without a reply; the rank keeps serving', async () => {
  const l = link as ZmqEngineLink;
  const before = (engine as SimEngineHandle).stats().dropped;
  await l.send(l.engines[0].identity, RequestType.ADD, Uint8Array.of(0x93, 0x01, 0x02, 0x03));
  await send(request('e-ok', { maxNewTokens: 2 }));
  const batches = await reader.untilFinished(['e-ok']);
  assert.ok(batches.every((b) => b.outputs.every((o) => o.requestId === 'e-ok')));
  assert.equal((engine as SimEngineHandle).stats().dropped, before + 1);
});

test('KV pages run out: the rank preempts (recompute) and counts it, and every request still completes (issue #5 part 2)', async () => {
  // 64 pages; each request grows to ceil((3 + 400) / 16) = 26 pages, so three or four at once cannot all fit.
  const ids = ['kv-0', 'kv-1', 'kv-2', 'kv-3'];
  await Promise.all(ids.map((id) => send(request(id, { maxNewTokens: 400, ignoreEos: true }))));
  const batches = await reader.untilFinished(ids);
  for (const id of ids) {
    const rows = rowsFor(batches, id);
    assert.equal(rows.at(-1)?.finishReason, 'length');
    assert.equal(rows.flatMap((o) => o.newTokenIds).length, 400, `${id}: no token lost or repeated across preemption`);
  }
  assert.ok((engine as SimEngineHandle).stats().preemptions > 0, 'at least one preemption');
  assert.ok(batches.every((b) => b.load === undefined || b.load.kvCacheUsage <= 1));
});

test('close() pushes ENGINE_CORE_DEAD', async () => {
  await (engine as SimEngineHandle).close();
  let m = await reader.message();
  while (m.kind === 'disconnect') m = await reader.message(); // a socket-level hint may arrive first
  assert.equal(m.kind, 'dead');
  await hangGuard((engine as SimEngineHandle).closed, 5000, 'engine loop end');
});
