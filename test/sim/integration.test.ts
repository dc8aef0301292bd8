/**
 * Two real sim processes (spawnSimRanks → main.ts through tsx) against a real gateway-side ZmqEngineLink: they
 * register with the right engine indexes, answer an ADD with tokens and a finish reason naming their own rank, and
 * push ENGINE_CORE_DEAD when stopped. Every child is killed in after().
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ZmqEngineLink } from '../../src/transport/zmq-link.js';
import { tokenspeedProtocol } from '../../src/protocols/tokenspeed/index.js';
import { DEFAULT_SAMPLING, RequestType, type GenerateRequest } from '../../src/protocols/types.js';
import type { SimRankProcesses } from '../../src/sim/spawn.js';
import type { MinimalLogger } from '../../src/logging.js';
import { OutputReader, type SpawnedRanks, hangGuard, startSpawnedRanks } from './helpers.js';

let group: SpawnedRanks | null = null;
let link: ZmqEngineLink | null = null;
let ranks: SimRankProcesses | null = null;
let reader: OutputReader;
const logLines: { level: string; obj: Record<string, unknown>; msg: string }[] = [];
const logger: MinimalLogger = {
  debug: (obj, msg) => logLines.push({ level: 'debug', obj, msg }),
  info: (obj, msg) => logLines.push({ level: 'info', obj, msg }),
  warn: (obj, msg) => logLines.push({ level: 'warn', obj, msg }),
  error: (obj, msg) => logLines.push({ level: 'error', obj, msg }),
};

before(async () => {
  group = await startSpawnedRanks(
    {
      count: 2,
      firstEngineIndex: 4,
      extraArgs: [
        '--time-scale',
        '0',
        '--max-running',
        '8',
        '--kv-pages',
        '256',
        '--max-model-len',
        '4096',
        '--init-timeout-ms',
        '60000',
      ],
      logger,
      stopGraceMs: 5000,
    },
    'handshake with two sim processes',
    () => `sim logs: ${JSON.stringify(logLines.slice(-10))}`,
  );
  ({ link, ranks } = group);
  reader = new OutputReader(group.link);
});

after(() => group?.close());

test('both processes register with engine indexes 4 and 5', () => {
  const l = link as ZmqEngineLink;
  assert.deepEqual(
    l.engines.map((e) => e.engineIndex),
    [4, 5],
  );
  assert.deepEqual(
    l.engines.map((e) => e.ready.dataParallelRank),
    [4, 5],
  );
  assert.ok(l.engines.every((e) => e.ready.vllmVersion === 'tokenspeed-sim' && e.ready.numGpuBlocks === 256));
  assert.deepEqual(
    ranks?.ranks.map((r) => r.engineIndex),
    [4, 5],
  );
});

test('each rank answers an ADD with tokens and a finish reason, naming itself in engine_index', async () => {
  const l = link as ZmqEngineLink;
  const req = (id: string, maxNewTokens: number | null, ignoreEos: boolean): GenerateRequest => ({
    requestId: id,
    promptTokenIds: [9707, 11, 1879, 0],
    sampling: { ...DEFAULT_SAMPLING, maxNewTokens, ignoreEos },
    stream: false,
    returnLogprob: true,
  });
  await l.send(l.engines[0].identity, RequestType.ADD, tokenspeedProtocol.encodeAdd(req('i-4', 9, true)));
  await l.send(l.engines[1].identity, RequestType.ADD, tokenspeedProtocol.encodeAdd(req('i-5', null, false)));
  const batches = await reader.untilFinished(['i-4', 'i-5'], 30_000);
  for (const [id, rank, reason] of [
    ['i-4', 4, 'length'],
    ['i-5', 5, 'stop'],
  ] as const) {
    const mine = batches.filter((b) => b.outputs.some((o) => o.requestId === id));
    assert.ok(mine.length > 0);
    assert.ok(
      mine.every((b) => b.engineIndex === rank && b.load !== undefined),
      `${id} comes from rank ${rank}`,
    );
    const rows = mine.flatMap((b) => b.outputs.filter((o) => o.requestId === id));
    const tokens = rows.flatMap((o) => o.newTokenIds);
    assert.ok(tokens.length > 0);
    assert.equal(rows.at(-1)?.finishReason, reason, id);
    assert.equal(rows.at(-1)?.completionTokens, tokens.length);
    assert.deepEqual(rows.flatMap((o) => o.logprobs).length, tokens.length, 'one logprob per token');
  }
  const i4 = batches.flatMap((b) => b.outputs.filter((o) => o.requestId === 'i-4'));
  assert.equal(i4.flatMap((o) => o.newTokenIds).length, 9);
  assert.deepEqual(
    i4.map((o) => o.completionTokens),
    [1, 9],
    'non-streaming cadence: first token, then the finish',
  );
});

test('stop() SIGTERMs the ranks: they push ENGINE_CORE_DEAD and exit 0', async () => {
  const r = ranks as SimRankProcesses;
  await hangGuard(r.stop(), 20_000, 'stopping the sim ranks');
  let m = await reader.message();
  while (m.kind === 'disconnect') m = await reader.message();
  assert.equal(m.kind, 'dead');
  const exits = await Promise.all(r.ranks.map((x) => x.exited));
  assert.deepEqual(
    exits.map((e) => e.code),
    [0, 0],
  );
  assert.ok(!logLines.some((l) => l.level === 'error'), JSON.stringify(logLines.filter((l) => l.level === 'error')));
});
