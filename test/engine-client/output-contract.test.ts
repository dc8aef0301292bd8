/**
 * The engine client holds engines to the output contract (issue 26 part 4; src/engine-client/output-contract.ts):
 * - a rank that sends tokens past a request's max_tokens: the client gets exactly max_tokens, finish `length` (logprob
 *   columns cut alike), the rank gets one ABORT, the in-flight slot is released, the rank's `max-tokens-overrun`
 *   count moves, one warn line per request; later rows for the id are silent;
 * - a token id outside the tokenizer's vocabulary: the request fails with `engine-fault` naming the rank, ABORT, the
 *   rank's `invalid-token-id` count moves;
 * - rows for ids the client never issued: `unknownOutputs` counts them, one warn line per 10 s at most; late rows for
 *   ids it issued (after a cancel, a finish, an explicit abort, a stall's revival request) stay silent.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  DEFAULT_SAMPLING,
  RequestType,
  type EngineOutputRow,
  type GenerateRequest,
} from '../../src/protocols/types.js';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { UNKNOWN_ROWS_LOG_INTERVAL_MS } from '../../src/engine-client/output-contract.js';
import { captureLogs } from '../helpers/logs.js';
import { batch, drain, inFlight, req, row, setup, tick } from './fakes.js';

/** A request limited to `maxNewTokens` tokens. */
function limited(requestId: string, maxNewTokens: number): GenerateRequest {
  return { ...req(requestId), sampling: { ...DEFAULT_SAMPLING, maxNewTokens }, returnLogprob: true };
}

/** A row with `ids`, a logprob per token and one ranked candidate per token (as vLLM with top logprobs). */
function richRow(requestId: string, ids: number[], finish: EngineOutputRow['finishReason'] = null): EngineOutputRow {
  return {
    ...row(requestId, finish, ids),
    logprobs: ids.map((id) => -id / 100),
    topLogprobs: ids.map((id) => [{ id, logprob: -id / 100 }]),
  };
}

/** ABORT frames that named request ids (not the empty liveness probes), as id lists. */
function abortedIds(link: { aborts(): Array<{ decoded: unknown }> }): string[][] {
  return link
    .aborts()
    .map((f) => f.decoded as string[])
    .filter((ids) => ids.length > 0);
}

/** Token ids 0..9 are the vocabulary, except 5 (a hole). */
function mask(): Uint8Array {
  const m = new Uint8Array(10).fill(1);
  m[5] = 0;
  return m;
}

test('max_tokens overrun: the client gets exactly max_tokens (finish length, logprobs cut), one ABORT, slot released, counted, one warn', async () => {
  const { logger, records } = captureLogs('warn');
  const { client, link } = setup(2, { logger });
  const a = await client.submit(limited('a', 5), { dpRank: 1 });
  await client.submit(req('other'), { dpRank: 1 });
  await link.deliverBatch(batch(1, [richRow('a', [1, 2, 3])]));
  // The engine overruns: 4 more tokens where 2 are left, in a row that does not end the request.
  await link.deliverBatch(batch(1, [richRow('a', [4, 5, 6, 7])]));
  const { outputs, error } = await drain(a);
  assert.equal(error, undefined);
  assert.deepEqual(
    outputs.map((o) => o.newTokenIds),
    [
      [1, 2, 3],
      [4, 5],
    ],
  );
  const last = outputs.at(-1)!;
  assert.equal(last.finishReason, 'length');
  assert.equal(last.completionTokens, 5, 'what the client got, not what the engine generated');
  assert.deepEqual(last.logprobs, [-0.04, -0.05], 'logprobs cut alike');
  assert.deepEqual(last.topLogprobs, [[{ id: 4, logprob: -0.04 }], [{ id: 5, logprob: -0.05 }]]);
  assert.deepEqual(abortedIds(link), [['a']], 'one ABORT for the request');
  assert.equal(link.aborts().at(-1)!.engineIndex, 1, 'sent to the rank that holds it');
  assert.deepEqual(inFlight(client), [0, 1], 'the overrun request released, the other one still held');
  assert.deepEqual(client.rankStates()[1]!.engineErrors, { 'max-tokens-overrun': 1 });
  assert.deepEqual(client.rankStates()[0]!.engineErrors, {});
  // The engine keeps sending until the ABORT lands: late rows, silent.
  await link.deliverBatch(batch(1, [richRow('a', [8, 9]), richRow('a', [1], 'length')]));
  assert.deepEqual(abortedIds(link), [['a']], 'no second ABORT');
  assert.equal(client.rankStates()[1]!.engineErrors!['max-tokens-overrun'], 1, 'counted once');
  assert.equal(client.stats.unknownOutputs, 0, 'late rows of an issued id are not unknown');
  const warns = records.filter((r) => /past max_tokens/.test(r.msg));
  assert.equal(warns.length, 1, 'one warn line per request');
  assert.equal(warns[0]!['engineRequestId'], 'a');
  assert.equal(warns[0]!['engineIndex'], 1);
  await client.close();
});

test('max_tokens overrun: inside one batch, on a terminal row (no ABORT), exactly at the limit, and in row mode', async () => {
  const { client, link } = setup(1);
  // Several rows of one request in one batch: cut on the first that passes, the rest dropped, one ABORT.
  const a = await client.submit(limited('a', 4));
  await link.deliverBatch(batch(0, [row('a', null, [1, 2]), row('a', null, [3, 4, 5]), row('a', null, [6])]));
  assert.deepEqual(
    (await drain(a)).outputs.map((o) => [o.newTokenIds, o.finishReason]),
    [
      [[1, 2], null],
      [[3, 4], 'length'],
    ],
  );
  assert.deepEqual(abortedIds(link), [['a']]);
  // The engine ends the request itself, past the limit (a non-streamed request's one row): cut, no ABORT needed.
  const b = await client.submit(limited('b', 3));
  await link.deliverBatch(batch(0, [row('b', 'length', [1, 2, 3, 4, 5, 6])]));
  assert.deepEqual(
    (await drain(b)).outputs.map((o) => [o.newTokenIds, o.finishReason, o.completionTokens]),
    [[[1, 2, 3], 'length', 3]],
  );
  assert.deepEqual(abortedIds(link), [['a']], 'nothing to ABORT: the engine retired it');
  // Exactly max_tokens without a finish, then one more token: the client's last row carries no token.
  const c = await client.submit(limited('c', 2));
  await link.deliverBatch(batch(0, [row('c', null, [1, 2])]));
  await link.deliverBatch(batch(0, [row('c', null, [3])]));
  assert.deepEqual(
    (await drain(c)).outputs.map((o) => [o.newTokenIds, o.finishReason]),
    [
      [[1, 2], null],
      [[], 'length'],
    ],
  );
  assert.deepEqual(abortedIds(link), [['a'], ['c']]);
  // Row mode (the router of --workers N): the sink gets the cut row.
  const d = await client.submit(limited('d', 2));
  const got: string[] = [];
  d.listenRows!({
    row: (r, _p, completion) => got.push(`${r.newTokenIds.join(',')}/${r.finishReason} ${completion}`),
    error: (e) => got.push(`error ${e.message}`),
  });
  await link.deliverBatch(batch(0, [row('d', null, [7, 8, 9])]));
  assert.deepEqual(got, ['7,8/length 2']);
  assert.deepEqual(abortedIds(link), [['a'], ['c'], ['d']]);
  assert.deepEqual(client.rankStates()[0]!.engineErrors, { 'max-tokens-overrun': 4 });
  // Within the limit, and without one: delivered as sent.
  const e = await client.submit(limited('e', 3));
  const f = await client.submit(req('f'));
  await link.deliverBatch(
    batch(0, [
      row('e', null, [1, 2]),
      row('e', 'stop', [3]),
      row(
        'f',
        'length',
        Array.from({ length: 500 }, () => 1),
      ),
    ]),
  );
  assert.deepEqual(
    (await drain(e)).outputs.map((o) => o.newTokenIds.length),
    [2, 1],
  );
  assert.equal((await drain(f)).outputs[0]!.newTokenIds.length, 500);
  assert.equal(client.rankStates()[0]!.engineErrors!['max-tokens-overrun'], 4);
  assert.deepEqual(inFlight(client), [0]);
  await client.close();
});

test("a token id outside the vocabulary fails the request as the rank's fault: engine-fault, ABORT, counted", async () => {
  const { logger, records } = captureLogs('warn');
  const { client, link } = setup(2, { logger, validTokenIds: mask() });
  const a = await client.submit(req('a'), { dpRank: 1 });
  const ok = await client.submit(req('ok'), { dpRank: 1 });
  await link.deliverBatch(batch(1, [row('a', null, [1, 2]), row('ok', null, [9])]));
  await link.deliverBatch(batch(1, [row('a', null, [3, 151_669]), row('ok', 'stop', [0])]));
  const { outputs, error } = await drain(a);
  assert.deepEqual(
    outputs.map((o) => o.newTokenIds),
    [[1, 2]],
    'nothing of the bad row reaches the client',
  );
  assert.ok(error instanceof EngineClientError);
  assert.equal(error.kind, 'engine-fault');
  assert.equal(error.dpRank, 1);
  assert.equal(error.requestId, 'a');
  assert.match(
    error.message,
    /DP rank 1 sent token id 151669 for request a, which is not a token id of the gateway's tokenizer/,
  );
  assert.deepEqual(
    (await drain(ok)).outputs.map((o) => o.finishReason),
    [null, 'stop'],
    'the other request on the rank is served',
  );
  assert.deepEqual(abortedIds(link), [['a']]);
  assert.deepEqual(inFlight(client), [0, 0]);
  assert.deepEqual(client.rankStates()[1]!.engineErrors, { 'invalid-token-id': 1 });
  assert.equal(records.filter((r) => /not a token id/.test(r.msg)).length, 1);
  assert.equal(client.rankStates()[1]!.state, 'ready', 'the rank stays in rotation');

  // A hole in the vocabulary, a negative id and a fractional one are refused too; a terminal row is not ABORTed.
  for (const [id, bad, finish] of [
    ['hole', 5, null],
    ['neg', -1, null],
    ['frac', 1.5, 'stop'],
  ] as const) {
    const s = await client.submit(req(id), { dpRank: 0 });
    await link.deliverBatch(batch(0, [row(id, finish, [bad])]));
    const r = await drain(s);
    assert.equal((r.error as EngineClientError | undefined)?.kind, 'engine-fault', id);
  }
  assert.deepEqual(abortedIds(link), [['a'], ['hole'], ['neg']]);
  assert.deepEqual(client.rankStates()[0]!.engineErrors, { 'invalid-token-id': 3 });
  assert.deepEqual(inFlight(client), [0, 0]);
  await client.close();
});

test('rows for ids never issued are counted and logged at most once per interval; late rows of issued ids are silent', async () => {
  const { logger, records } = captureLogs('warn');
  let now = 1000;
  const { client, link } = setup(1, { logger, now: () => now });
  const unknownLines = () => records.filter((r) => /never issued/.test(r.msg));

  // Ids this client issued: cancelled, finished, aborted explicitly. Their late rows are normal and silent.
  const cancelled = await client.submit(req('cancelled'));
  cancelled.cancel();
  const finished = await client.submit(req('finished'));
  await link.deliverBatch(batch(0, [row('finished', 'stop')]));
  await drain(finished);
  await client.submit(req('aborted'));
  await client.abort('aborted');
  await link.deliverBatch(batch(0, [row('cancelled'), row('finished'), row('aborted', 'abort')]));
  assert.equal(client.stats.unknownOutputs, 0);
  assert.equal(unknownLines().length, 0);

  // A rogue sender's ids: every row counted, one line.
  const rogue = Array.from({ length: 30 }, (_, i) => row(`rogue-${i}`));
  await link.deliverBatch(batch(0, rogue.slice(0, 10)));
  await link.deliverBatch(batch(0, rogue.slice(10)));
  assert.equal(client.stats.unknownOutputs, 30);
  assert.equal(unknownLines().length, 1, 'one line for the first rows');
  assert.equal(unknownLines()[0]!['unknownRows'], 10);
  assert.equal(unknownLines()[0]!['sampleRequestId'], 'rogue-9');
  now += UNKNOWN_ROWS_LOG_INTERVAL_MS - 1;
  await link.deliverBatch(batch(0, [row('rogue-x')]));
  assert.equal(unknownLines().length, 1, 'still within the interval');
  now += 1;
  await link.deliverBatch(batch(0, [row('x'.repeat(1000))]));
  assert.equal(client.stats.unknownOutputs, 32);
  assert.equal(unknownLines().length, 2, 'the next line after the interval');
  assert.equal(unknownLines()[1]!['unknownRows'], 22, 'with the count since the last line');
  assert.equal(String(unknownLines()[1]!['sampleRequestId']).length, 129, 'a long id is cut');
  assert.equal(client.stats.orphanOutputs, 0);
  await client.close();
});

test('the revival request of a stalled rank is an issued id: its answer is not unknown', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { client, link } = setup(1, { rankStallTimeoutMs: 2000 });
  await client.submit(req('held'));
  t.mock.timers.tick(2000);
  await tick();
  assert.equal(client.rankStates()[0]!.state, 'stalled');
  const revival = link
    .adds()
    .map((f) => (f.decoded as { rid: string }).rid)
    .find((rid) => rid !== 'held');
  assert.ok(revival !== undefined, 'a revival request was sent');
  await link.deliverBatch(batch(0, [row(revival, 'length'), row('held')]));
  assert.equal(client.rankStates()[0]!.state, 'ready');
  assert.equal(client.stats.unknownOutputs, 0);
  assert.equal(client.stats.orphanOutputs, 1, "the stalled request's row is an orphan, not unknown");
  assert.ok(link.sent.some((f) => f.type === RequestType.ABORT));
  await client.close();
});
