/**
 * Two real sim processes started by `spawnSimRanks({ engine: 'vllm', lockstep: true })` (main.ts through tsx) against
 * a real gateway-side ZmqEngineLink: the flags reach the ranks (vLLM registration, data_parallel_size 2), a held
 * request runs once the group is woken with START_DP_WAVE, both ranks report wave_complete, and stop() ends them with
 * ENGINE_CORE_DEAD. Every child is stopped in after().
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ZmqEngineLink } from '../../src/transport/zmq-link.js';
import { encodeEngineCoreRequest, encodeStartDpWave, toEngineCoreRequest } from '../../src/protocols/vllm/index.js';
import { DEFAULT_SAMPLING, RequestType } from '../../src/protocols/types.js';
import { spawnSimRanks, type SimRankProcesses } from '../../src/sim/spawn.js';
import type { MinimalLogger } from '../../src/logging.js';
import { type SpawnedRanks, VllmOutputReader, hangGuard, outputsOf, startSpawnedRanks } from './helpers.js';

let group: SpawnedRanks | null = null;
let link: ZmqEngineLink | null = null;
let ranks: SimRankProcesses | null = null;
let reader: VllmOutputReader;
const errors: string[] = [];
const logger: MinimalLogger = {
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: (obj, msg) => errors.push(`${msg} ${JSON.stringify(obj)}`),
};

before(async () => {
  group = await startSpawnedRanks(
    {
      count: 2,
      engine: 'vllm',
      lockstep: true,
      extraArgs: ['--time-scale', '0', '--kv-pages', '256', '--max-model-len', '4096', '--init-timeout-ms', '60000'],
      logger,
    },
    'handshake with two vLLM sim processes',
  );
  ({ link, ranks } = group);
  reader = new VllmOutputReader(group.link);
});

after(() => group?.close());

test('spawnSimRanks refuses lockstep without vLLM or with a single rank', () => {
  assert.throws(
    () => spawnSimRanks({ handshakeAddress: 'tcp://127.0.0.1:1', count: 2, lockstep: true }),
    /lockstep needs engine "vllm"/,
  );
  assert.throws(
    () => spawnSimRanks({ handshakeAddress: 'tcp://127.0.0.1:1', count: 1, engine: 'vllm', lockstep: true }),
    /count ≥ 2/,
  );
});

test('the processes register as one vLLM lockstep group', () => {
  const l = link as ZmqEngineLink;
  assert.deepEqual(
    l.engines.map((e) => [e.engineIndex, e.ready.vllmVersion, e.ready.dataParallelSize, e.ready.prefixGranularity]),
    [
      [0, 'vllm-sim', 2, 16],
      [1, 'vllm-sim', 2, 16],
    ],
  );
});

test('a request to the parked group runs once START_DP_WAVE [1, nil] wakes it; both ranks report wave_complete 1', async () => {
  const l = link as ZmqEngineLink;
  const req = {
    requestId: 'p-1',
    promptTokenIds: [9707, 11],
    sampling: { ...DEFAULT_SAMPLING, maxNewTokens: 6, ignoreEos: true },
    stream: true,
    returnLogprob: false,
  };
  await l.send(
    l.engines[1].identity,
    RequestType.ADD,
    encodeEngineCoreRequest(toEngineCoreRequest(req, { arrivalTime: 1 })),
  );
  for (const e of l.engines) await l.send(e.identity, RequestType.START_DP_WAVE, encodeStartDpWave(1));
  const complete = new Set<number>();
  const envs = await reader.until((e) => {
    if (e.wave_complete !== null) complete.add(Number(e.engine_index));
    return complete.size === 2;
  }, 30_000);
  const outs = outputsOf(envs, 'p-1');
  assert.equal(outs.flatMap((o) => o.new_token_ids).length, 6);
  assert.equal(outs.at(-1)?.finish_reason, 1);
  assert.ok(envs.filter((e) => e.wave_complete !== null).every((e) => Number(e.wave_complete) === 1));
  assert.ok(
    envs.filter((e) => e.outputs.length > 0).every((e) => e.engine_index === 1),
    'the holder answered',
  );
});

test('stop() SIGTERMs the ranks: ENGINE_CORE_DEAD, exit 0, no error logs', async () => {
  const r = ranks as SimRankProcesses;
  await hangGuard(r.stop(), 20_000, 'stopping the sim ranks');
  let m = await reader.message();
  while (m.kind === 'disconnect') m = await reader.message();
  assert.equal(m.kind, 'dead');
  assert.deepEqual(
    (await Promise.all(r.ranks.map((x) => x.exited))).map((e) => e.code),
    [0, 0],
  );
  assert.deepEqual(errors, []);
});
