/**
 * `abortLagRounds` (issue 26): a rank that applies a client ABORT some rounds after it arrives keeps running,
 * streaming and counting the request until then, as a real engine inside its steps does; after that the ABORT is
 * silent as usual (engine-wire.md 4.7). One in-process rank against a real gateway-side ZmqEngineLink, time scale 0.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { tokenspeedProtocol } from '../../src/protocols/tokenspeed/index.js';
import { DEFAULT_SAMPLING, RequestType, type GenerateRequest } from '../../src/protocols/types.js';
import { runSimEngine } from '../../src/sim/engine.js';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import { type LinkedRank, OutputReader, startLinkedRank } from './helpers.js';

const LAG = 6;
let rank: LinkedRank;
let reader: OutputReader;

function request(id: string, maxNewTokens: number): GenerateRequest {
  return {
    requestId: id,
    promptTokenIds: [9707, 11, 1879],
    sampling: { ...DEFAULT_SAMPLING, maxNewTokens, ignoreEos: true },
    stream: true,
    returnLogprob: false,
  };
}

const send = (type: typeof RequestType.ADD | typeof RequestType.ABORT, payload: Uint8Array) =>
  rank.link.send(rank.link.engines[0]!.identity, type, payload);

before(async () => {
  const tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  rank = await startLinkedRank(tokenizer, { engineIndex: 0, maxRunning: 4, abortLagRounds: LAG });
  reader = new OutputReader(rank.link);
});

after(() => rank?.close());

test(
  `an ABORT is applied ${LAG} rounds after it arrives: rows and the load tail count the request until then`,
  { timeout: 60_000 },
  async () => {
    await send(RequestType.ADD, tokenspeedProtocol.encodeAdd(request('long', 5000)));
    while (!(await reader.batch()).outputs.some((o) => o.requestId === 'long'));
    await send(RequestType.ABORT, tokenspeedProtocol.encodeAbort(['long']));
    // Sent behind the ABORT on the same identity: every round that carries its rows saw the ABORT already.
    await send(RequestType.ADD, tokenspeedProtocol.encodeAdd(request('after', 3 * LAG)));
    const batches = await reader.untilFinished(['after']);
    const withAfter = batches.filter((b) => b.outputs.some((o) => o.requestId === 'after'));
    const lagging = withAfter.filter((b) => b.outputs.some((o) => o.requestId === 'long'));
    assert.ok(
      lagging.length >= 1 && lagging.length <= LAG,
      `the aborted request ran beside the new one for 1..${LAG} rounds, got ${lagging.length}`,
    );
    for (const b of lagging)
      assert.equal(b.load?.numRunning, 2, 'until applied, the tail still counts the aborted request');
    const last = withAfter.at(-1)!;
    assert.ok(!last.outputs.some((o) => o.requestId === 'long'), 'applied: no more rows for it');
    assert.ok(
      batches.every((b) => !b.finishedRequestIds.includes('long')),
      'still silent: no terminal row',
    );
    assert.equal(rank.engine.stats().aborted, 1);
  },
);

test('abortLagRounds must be an integer ≥ 0', async () => {
  await assert.rejects(
    runSimEngine({ engineIndex: 0, handshakeAddress: 'tcp://127.0.0.1:1', abortLagRounds: -1 }),
    /abortLagRounds/,
  );
});
