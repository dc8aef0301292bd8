/**
 * Two in-process simulated vLLM ranks in lockstep mode (data_parallel_size 2) against a real gateway-side
 * ZmqEngineLink, outputs decoded with the vLLM codec directly (engine-wire.md 5.7, 5.8, 5.12; dp-routing.md 13). The
 * test plays the gateway's wave clock by hand. It shows: a parked rank holds a request and makes no progress without
 * a wake; START_DP_WAVE [w, nil] with w ≥ the current wave starts it; a drained rank reports `wave_complete = w` and
 * moves to w + 1 (a rank woken with no work at once); a stale lower wave is ignored; a request reaching a parked rank
 * for an already-drained wave makes it send `start_wave`; a start received while stepping is a no-op.
 *
 * "No progress" is shown without timing: after the held ADD, a request the engine cannot serve is sent as a barrier
 * (its error output goes out at once, even on a parked rank), so when its envelope arrives first the rank has
 * processed the held ADD and produced nothing; a parked rank starts no round until a message arrives.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { ZmqEngineLink } from '../../src/transport/zmq-link.js';
import { deriveEndpoints } from '../../src/transport/endpoints.js';
import {
  encodeAbortPayload,
  encodeEngineCoreRequest,
  encodeStartDpWave,
  resolveEosConfig,
  toEngineCoreRequest,
} from '../../src/protocols/vllm/index.js';
import type { EngineCoreOutputs, VllmEosConfig } from '../../src/protocols/vllm/index.js';
import { DEFAULT_SAMPLING, RequestType, type GenerateRequest } from '../../src/protocols/types.js';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import { runSimEngine, type SimEngineHandle } from '../../src/sim/engine.js';
import { TextModel } from '../../src/sim/text.js';
import { freePort } from '../helpers/net.js';
import { VllmOutputReader, freshDir, hangGuard, outputsOf } from './helpers.js';

let cleanup: (() => Promise<void>) | null = null;
let link: ZmqEngineLink | null = null;
const ranks: SimEngineHandle[] = [];
let reader: VllmOutputReader;
let eos: VllmEosConfig;
let barriers = 0;

const isWaveComplete = (e: EngineCoreOutputs, rank: number, wave?: number): boolean =>
  e.engine_index === rank && e.wave_complete !== null && (wave === undefined || Number(e.wave_complete) === wave);

function request(id: string, over: Partial<GenerateRequest['sampling']> = {}): GenerateRequest {
  return {
    requestId: id,
    promptTokenIds: [9707, 11, 1879],
    sampling: { ...DEFAULT_SAMPLING, maxNewTokens: 40, ...over },
    stream: true,
    returnLogprob: false,
  };
}

function identity(rank: number): Uint8Array {
  const e = (link as ZmqEngineLink).engines.find((x) => x.engineIndex === rank);
  if (e === undefined) throw new Error(`no rank ${rank}`);
  return e.identity;
}

async function add(rank: number, req: GenerateRequest): Promise<void> {
  const payload = encodeEngineCoreRequest(toEngineCoreRequest(req, { arrivalTime: 1_700_000_000, eos }));
  await (link as ZmqEngineLink).send(identity(rank), RequestType.ADD, payload);
}

async function startWave(rankList: readonly number[], wave: number): Promise<void> {
  for (const r of rankList)
    await (link as ZmqEngineLink).send(identity(r), RequestType.START_DP_WAVE, encodeStartDpWave(wave));
}

/**
 * Send a request rank `rank` cannot serve and read up to its error output: returns the envelopes read before it (the
 * barrier's own envelope last).
 */
async function barrier(rank: number): Promise<EngineCoreOutputs[]> {
  const id = `barrier-${++barriers}`;
  await add(rank, { ...request(id), promptTokenIds: [] });
  return reader.until((e) => e.outputs.some((o) => o.request_id === id && o.finish_reason === 3));
}

before(async () => {
  const d = await freshDir();
  cleanup = d.cleanup;
  const endpoints = deriveEndpoints(`ipc://${d.dir}/gw`, `tcp://127.0.0.1:${await freePort()}`);
  const l = await ZmqEngineLink.bind({ endpoints, dpSize: 2, handshakeReceiveTimeoutMs: 20_000 });
  const tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  const textModel = new TextModel(tokenizer);
  eos = resolveEosConfig({ tokenizerEosIds: tokenizer.eosTokenIds });
  const start = (engineIndex: number) =>
    runSimEngine({
      engine: 'vllm',
      lockstep: true,
      dataParallelSize: 2,
      engineIndex,
      handshakeAddress: endpoints.handshake,
      timeScale: 0,
      maxRunning: 4,
      kvTotalPages: 400,
      maxModelLen: 8192,
      textModel,
      vocabSize: tokenizer.vocabSize,
      eosTokenIds: tokenizer.eosTokenIds,
      initTimeoutMs: 20_000,
    });
  const [, r0, r1] = await hangGuard(Promise.all([l.whenJoined(), start(0), start(1)]), 30_000, 'handshake');
  link = l;
  ranks.push(r0, r1);
  reader = new VllmOutputReader(l);
});

after(async () => {
  for (const r of ranks) await r.close();
  await link?.close();
  await cleanup?.();
});

test('both ranks register as one lockstep group: data_parallel_size 2, block size 16; they start parked at wave 0', () => {
  const l = link as ZmqEngineLink;
  assert.deepEqual(
    l.engines.map((e) => [e.engineIndex, e.ready.dataParallelSize, e.ready.prefixGranularity]),
    [
      [0, 2, 16],
      [1, 2, 16],
    ],
  );
  assert.deepEqual(
    ranks.map((r) => r.wave()),
    [
      { currentWave: 0, running: false },
      { currentWave: 0, running: false },
    ],
  );
});

test('a parked rank holds an ADD and makes no progress without a wake', async () => {
  await add(0, request('h-1', { seed: 11 }));
  const envs = await barrier(0);
  assert.equal(
    envs.length,
    1,
    'the barrier error is the first thing the rank sent: no tokens, no start_wave for wave 0',
  );
  assert.equal(envs[0].scheduler_stats?.num_waiting_reqs, 1, 'the held request waits');
  assert.equal(envs[0].scheduler_stats?.num_running_reqs, 0);
  assert.equal(ranks[0].stats().rounds, 0);
  assert.equal(ranks[0].stats().tokensGenerated, 0);
  assert.deepEqual(ranks[0].wave(), { currentWave: 0, running: false });
});

test('START_DP_WAVE [1, nil] to the group wakes it: the holder streams and reports wave_complete 1; the idle rank parks at once', async () => {
  // The gateway's clock went 0 → 1 on the submit's wake (dp-routing.md 13.2).
  await startWave([0, 1], 1);
  const got: EngineCoreOutputs[] = [];
  let done0 = false;
  let done1 = false;
  got.push(
    ...(await reader.until((e) => {
      done0 ||= isWaveComplete(e, 0, 1);
      done1 ||= isWaveComplete(e, 1, 1);
      return done0 && done1;
    })),
  );
  const outs = outputsOf(got, 'h-1');
  assert.ok(outs.length > 0 && outs.at(-1)?.finish_reason !== null, 'the held request ran to its finish');
  const r0 = got.filter((e) => e.engine_index === 0);
  assert.ok(isWaveComplete(r0.at(-1)!, 0, 1), "rank 0's wave_complete comes after its last step");
  for (const e of r0.slice(0, -1)) {
    assert.equal(e.wave_complete, null);
    assert.equal(Number(e.scheduler_stats?.current_wave), 1, 'steps of wave 1 report current_wave 1');
  }
  const complete = r0.at(-1)!;
  assert.deepEqual(
    [complete.outputs.length, complete.scheduler_stats, complete.finished_requests, complete.start_wave],
    [0, null, null, null],
    'wave_complete only',
  );
  assert.deepEqual(
    got.filter((e) => e.engine_index === 1).map((e) => Number(e.wave_complete)),
    [1],
    'rank 1 had no work: only its wave_complete',
  );
  assert.deepEqual(
    ranks.map((r) => r.wave()),
    [
      { currentWave: 2, running: false },
      { currentWave: 2, running: false },
    ],
  );
});

test('an ADD for a drained wave makes the parked rank send start_wave; a stale lower START is ignored; w ≥ current starts it', async () => {
  await add(0, request('h-2', { seed: 12 }));
  const [notice] = await reader.until(() => true);
  assert.equal(notice.engine_index, 0);
  assert.equal(Number(notice.start_wave), 2, "start_wave names the rank's current wave");
  assert.deepEqual([notice.outputs.length, notice.scheduler_stats, notice.wave_complete], [0, null, null]);

  const rounds = ranks[0].stats().rounds;
  await startWave([0], 1); // below the current wave 2: stale
  const envs = await barrier(0);
  assert.equal(envs.length, 1, 'nothing but the barrier: the stale wake started nothing');
  assert.equal(ranks[0].stats().rounds, rounds);
  assert.deepEqual(ranks[0].wave(), { currentWave: 2, running: false });

  await startWave([0], 2); // equal to the current wave: accepted
  const got = await reader.until((e) => isWaveComplete(e, 0));
  assert.notEqual(outputsOf(got, 'h-2').at(-1)?.finish_reason ?? null, null, 'the held request ran to its finish');
  assert.equal(Number(got.at(-1)!.wave_complete), 2);
  assert.deepEqual(ranks[0].wave(), { currentWave: 3, running: false });
  assert.ok(ranks[0].stats().wakesIgnored >= 1);
});

test('a START received while stepping is a no-op: the wave completes under its own number', async () => {
  const l = link as ZmqEngineLink;
  await add(0, request('h-long', { maxNewTokens: 3000, ignoreEos: true }));
  const [notice] = await reader.until(() => true);
  assert.equal(Number(notice.start_wave), 3);
  await startWave([0], 3);
  await reader.until((e) => e.outputs.some((o) => o.request_id === 'h-long'));
  const ignored = ranks[0].stats().wakesIgnored;
  await startWave([0], 7);
  await l.send(identity(0), RequestType.ABORT, encodeAbortPayload(['h-long']));
  const got = await reader.until((e) => isWaveComplete(e, 0));
  assert.equal(
    ranks[0].stats().wakesIgnored,
    ignored + 1,
    'the START [7] arrived while the rank was stepping and was ignored',
  );
  assert.equal(Number(got.at(-1)!.wave_complete), 3);
  assert.ok(
    got.some((e) => (e.finished_requests ?? []).includes('h-long')),
    'the aborted id is reported before parking',
  );
  assert.ok(
    outputsOf(got, 'h-long').every((o) => o.finish_reason === null),
    'the abort stays silent',
  );
  assert.deepEqual(ranks[0].wave(), { currentWave: 4, running: false });
});
