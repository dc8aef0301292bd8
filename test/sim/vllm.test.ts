/**
 * One in-process simulated vLLM EngineCore rank (`engine: 'vllm'`, dense) against a real gateway-side ZmqEngineLink,
 * its outputs decoded with the vLLM codec directly (engine-wire.md section 5): registration, per-step outputs with
 * finish reasons, stop reasons, prefill stats and logprobs, `finished_requests` and `scheduler_stats` on every
 * envelope, errors for requests it cannot serve, silent aborts, no wave fields ever. A separate fake gateway checks
 * the raw registration frame spells `block_size` (2.5). Time scale 0: nothing depends on speed.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { decode } from '@msgpack/msgpack';
import { Pull, Router } from 'zeromq';
import { ZmqEngineLink } from '../../src/transport/zmq-link.js';
import { encodeHandshakeInit } from '../../src/protocols/handshake.js';
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
import { type LinkedRank, VllmOutputReader, freshDir, hangGuard, outputsOf, startLinkedRank } from './helpers.js';

const ENGINE_INDEX = 2;
let rank: LinkedRank | null = null;
let link: ZmqEngineLink | null = null;
let engine: SimEngineHandle | null = null;
let reader: VllmOutputReader;
let tokenizer: GatewayTokenizer;
let textModel: TextModel;
/** The gateway's connect-time EOS ids (gateway.md 7): here the tokenizer's. */
let eos: VllmEosConfig;
/** Every envelope any test read: checked for stats and wave fields at the end. */
const seen: EngineCoreOutputs[] = [];

function request(
  id: string,
  over: Partial<GenerateRequest['sampling']> = {},
  extra: Partial<GenerateRequest> = {},
): GenerateRequest {
  return {
    requestId: id,
    promptTokenIds: [9707, 11, 1879],
    sampling: { ...DEFAULT_SAMPLING, maxNewTokens: 200, ...over },
    stream: true,
    returnLogprob: false,
    ...extra,
  };
}

/** An ADD as the gateway sends it: EOS folded into the sampling map (gateway.md 7), `current_wave` 0. */
async function add(req: GenerateRequest): Promise<void> {
  const l = link as ZmqEngineLink;
  await l.send(
    l.engines[0].identity,
    RequestType.ADD,
    encodeEngineCoreRequest(toEngineCoreRequest(req, { arrivalTime: 1_700_000_000, eos })),
  );
}

async function read(fn: (r: VllmOutputReader) => Promise<EngineCoreOutputs[]>): Promise<EngineCoreOutputs[]> {
  const got = await fn(reader);
  seen.push(...got);
  return got;
}

before(async () => {
  tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  textModel = new TextModel(tokenizer);
  eos = resolveEosConfig({ tokenizerEosIds: tokenizer.eosTokenIds });
  rank = await startLinkedRank(tokenizer, {
    engine: 'vllm',
    engineIndex: ENGINE_INDEX,
    maxRunning: 4,
    kvTotalPages: 200,
    maxModelLen: 4096,
    textModel,
  });
  ({ link, engine } = rank);
  reader = new VllmOutputReader(rank.link);
});

after(() => rank?.close());

test('the rank registers as a dense vLLM rank: block size 16, data_parallel_size 1, no kv_cache_size_tokens', () => {
  const l = link as ZmqEngineLink;
  assert.equal(l.engines.length, 1);
  assert.equal(l.engines[0].engineIndex, ENGINE_INDEX);
  const ready = l.engines[0].ready;
  assert.equal(ready.prefixGranularity, 16);
  assert.equal(ready.vllmVersion, 'vllm-sim');
  assert.equal(ready.instanceId, 'vllm-sim');
  assert.equal(ready.dataParallelSize, 1);
  assert.equal(ready.numGpuBlocks, 200);
  assert.equal(ready.maxModelLen, 4096);
  assert.equal(ready.kvCacheSizeTokens, null);
  assert.equal((engine as SimEngineHandle).engine, 'vllm');
  assert.equal((engine as SimEngineHandle).wave(), null, 'a dense rank has no wave state');
});

test('an ADD is answered step by step: one token per output, prefill_stats first, EOS finish (0) with finished_requests', async () => {
  await add(request('v-1', { seed: 77 }));
  const envs = await read((r) => r.untilFinished(['v-1']));
  const outs = outputsOf(envs, 'v-1');
  assert.ok(outs.length > 1);
  assert.ok(
    outs.every((o) => o.new_token_ids.length === 1),
    'EngineCore reports every step',
  );
  assert.deepEqual(
    outs[0].prefill_stats && {
      p: outs[0].prefill_stats.num_prompt_tokens,
      c: outs[0].prefill_stats.num_computed_tokens,
    },
    { p: 3, c: 3 },
  );
  assert.ok(
    outs.slice(1).every((o) => o.prefill_stats === null),
    'prefill_stats only on the first output after the prefill',
  );
  assert.ok(outs.slice(0, -1).every((o) => o.finish_reason === null));
  const last = outs.at(-1)!;
  assert.equal(last.finish_reason, 0, 'stop');
  assert.equal(last.stop_reason, null, 'an EOS finish names no stop token');
  assert.deepEqual(last.new_token_ids, [tokenizer.eosTokenIds[0]]);
  const terminal = envs.at(-1)!;
  assert.deepEqual(terminal.finished_requests, ['v-1']);
  assert.equal(
    terminal.scheduler_stats?.num_running_reqs,
    0,
    'stats are made after the step: the finished request is gone',
  );
  assert.equal(envs[0].scheduler_stats?.num_running_reqs, 1);
  assert.ok(envs.every((e) => e.engine_index === ENGINE_INDEX));
  const ids = outs.flatMap((o) => o.new_token_ids.map(Number));
  assert.match(tokenizer.decode(ids, { skipSpecialTokens: true }), /^[A-Z][\x20-\x7e\n]+\.$/);

  await add(request('v-2', { seed: 77 }));
  const again = outputsOf(await read((r) => r.untilFinished(['v-2'])), 'v-2').flatMap((o) =>
    o.new_token_ids.map(Number),
  );
  assert.deepEqual(again, ids, 'same seed, same prompt → same tokens');
});

test('a stop token id finishes with stop_reason = that id; without EOS in the map the request runs to max_tokens (1)', async () => {
  await add(request('v-ref', { seed: 5, ignoreEos: true, maxNewTokens: 30 }));
  const ref = outputsOf(await read((r) => r.untilFinished(['v-ref'])), 'v-ref');
  const refIds = ref.flatMap((o) => o.new_token_ids.map(Number));
  assert.equal(refIds.length, 30);
  assert.equal(ref.at(-1)?.finish_reason, 1, 'length');
  assert.ok(
    !refIds.includes(tokenizer.eosTokenIds[0]),
    'ignore_eos (EOS left out of the map): the model never emits EOS',
  );

  const stopId = refIds[6];
  const cut = refIds.indexOf(stopId);
  await add(request('v-stop', { seed: 5, ignoreEos: true, maxNewTokens: 30, stopTokenIds: [stopId] }));
  const outs = outputsOf(await read((r) => r.untilFinished(['v-stop'])), 'v-stop');
  assert.deepEqual(
    outs.flatMap((o) => o.new_token_ids.map(Number)),
    refIds.slice(0, cut + 1),
    'the stop token is included',
  );
  assert.equal(outs.at(-1)?.finish_reason, 0);
  assert.equal(outs.at(-1)?.stop_reason, stopId);
});

test('logprobs asked: one sampled-token logprob per new token (column 0, rank 1)', async () => {
  await add(request('v-lp', { seed: 3, maxNewTokens: 4, ignoreEos: true }, { returnLogprob: true }));
  const outs = outputsOf(await read((r) => r.untilFinished(['v-lp'])), 'v-lp');
  assert.equal(outs.length, 4);
  for (const o of outs) {
    assert.ok(o.new_logprobs !== null);
    assert.deepEqual(o.new_logprobs.token_ids, [[Number(o.new_token_ids[0])]]);
    assert.deepEqual(o.new_logprobs.ranks, [1]);
    assert.ok(o.new_logprobs.logprobs[0][0] <= 0);
  }
});

test('a request the engine cannot serve gets one terminal output with finish_reason 3 (error) and no tokens', async () => {
  await add({ ...request('v-empty'), promptTokenIds: [] });
  const [e] = await read((r) => r.untilFinished(['v-empty']));
  assert.deepEqual(
    e.outputs.map((o) => [o.request_id, o.new_token_ids.length, o.finish_reason]),
    [['v-empty', 0, 3]],
  );
  assert.deepEqual(e.finished_requests, ['v-empty']);
  assert.notEqual(e.scheduler_stats, null);
  assert.equal((engine as SimEngineHandle).stats().rejected, 1);
});

test('a client ABORT is silent: no terminal output; the id is listed in finished_requests of the next step', async () => {
  const l = link as ZmqEngineLink;
  await add(request('v-long', { maxNewTokens: 2000, ignoreEos: true }));
  await read((r) => r.until((e) => e.outputs.some((o) => o.request_id === 'v-long')));
  await l.send(l.engines[0].identity, RequestType.ABORT, encodeAbortPayload(['v-long']));
  const envs = await read((r) => r.until((e) => (e.finished_requests ?? []).includes('v-long')));
  assert.ok(
    outputsOf(envs, 'v-long').every((o) => o.finish_reason === null),
    'no terminal output for an aborted request',
  );
  const report = envs.at(-1)!;
  assert.ok(!report.outputs.some((o) => o.request_id === 'v-long'));
  assert.equal(report.scheduler_stats?.num_running_reqs, 0, 'the aborted request is no longer counted');
  await add(request('v-after', { maxNewTokens: 3, ignoreEos: true }));
  const after = await read((r) => r.untilFinished(['v-after']));
  assert.equal(outputsOf(after, 'v-long').length, 0);
  assert.equal((engine as SimEngineHandle).stats().aborted, 1);
});

test('a dense rank ignores START_DP_WAVE, and a malformed ADD is dropped without a reply', async () => {
  const l = link as ZmqEngineLink;
  const before = (engine as SimEngineHandle).stats();
  await l.send(l.engines[0].identity, RequestType.START_DP_WAVE, encodeStartDpWave(4));
  await l.send(l.engines[0].identity, RequestType.ADD, Uint8Array.of(0x93, 0x01, 0x02, 0x03));
  await add(request('v-ok', { maxNewTokens: 2, ignoreEos: true }));
  const envs = await read((r) => r.untilFinished(['v-ok']));
  assert.ok(
    envs.every((e) => e.outputs.every((o) => o.request_id === 'v-ok')),
    'nothing answered the wake or the bad ADD',
  );
  const now = (engine as SimEngineHandle).stats();
  assert.equal(now.wakesIgnored, before.wakesIgnored + 1);
  assert.equal(now.dropped, before.dropped + 1);
});

test('every envelope carried scheduler_stats and no wave field (a dense rank never parks)', () => {
  assert.ok(seen.length > 20);
  for (const e of seen) {
    assert.notEqual(e.scheduler_stats, null);
    assert.equal(e.scheduler_stats?.current_wave, 0);
    assert.equal(e.wave_complete, null);
    assert.equal(e.start_wave, null);
    assert.equal(e.utility_output, null);
  }
  assert.ok(
    seen.some((e) => e.outputs.length === 0),
    'a step without outputs still sent its stats',
  );
});

test('close() pushes ENGINE_CORE_DEAD', async () => {
  await (engine as SimEngineHandle).close();
  let m = await reader.message();
  while (m.kind === 'disconnect') m = await reader.message();
  assert.equal(m.kind, 'dead');
  await hangGuard((engine as SimEngineHandle).closed, 5000, 'engine loop end');
});

/** The registration frame a vLLM sim rank with `extra` options sends, decoded generically, read by a hand-driven gateway. */
async function rawRegistration(
  extra: { readyResponse?: 'long' | 'short'; lockstep?: boolean; dataParallelSize?: number; vllmVersion?: string } = {},
): Promise<Record<string, unknown>> {
  const d = await freshDir();
  const handshakeAddress = `tcp://127.0.0.1:${await freePort()}`;
  const inputAddress = `ipc://${d.dir}/in`;
  const outputAddress = `ipc://${d.dir}/out`;
  const hs = new Router({ linger: 0 });
  const input = new Router({ linger: 0 });
  const output = new Pull({ linger: 0 });
  let rank: SimEngineHandle | null = null;
  try {
    await hs.bind(handshakeAddress);
    await input.bind(inputAddress);
    await output.bind(outputAddress);
    const started = runSimEngine({
      engine: 'vllm',
      engineIndex: 1,
      handshakeAddress,
      timeScale: 0,
      textModel,
      vocabSize: tokenizer.vocabSize,
      eosTokenIds: tokenizer.eosTokenIds,
      initTimeoutMs: 20_000,
      ...extra,
    });
    const [id] = await hangGuard(hs.receive(), 20_000, 'HELLO');
    await hs.send([id, encodeHandshakeInit({ inputs: [inputAddress], outputs: [outputAddress] })]);
    await hangGuard(hs.receive(), 20_000, 'READY');
    const [, registration] = await hangGuard(input.receive(), 20_000, 'registration');
    rank = await hangGuard(started, 20_000, 'rank start');
    return decode(registration) as Record<string, unknown>;
  } finally {
    await rank?.close({ sendDead: false });
    hs.close();
    input.close();
    output.close();
    await d.cleanup();
  }
}

test('the raw registration frame spells the granularity key block_size (engine-wire.md 2.5)', async () => {
  const map = await rawRegistration();
  assert.equal(map.block_size, 16);
  assert.ok(!('prefix_granularity' in map));
  assert.equal(map.data_parallel_size, 1);
});

test('readyResponse short: the registration is the 3-key map of vLLM up to at least 9aaf83ef, also for a lockstep rank', async () => {
  for (const extra of [
    { readyResponse: 'short' as const },
    { readyResponse: 'short' as const, lockstep: true, dataParallelSize: 2 },
  ]) {
    const map = await rawRegistration(extra);
    assert.deepEqual(
      map,
      { max_model_len: 32768, num_gpu_blocks: 4096, dp_stats_address: null },
      JSON.stringify(extra),
    );
  }
  await assert.rejects(
    runSimEngine({
      engine: 'tokenspeed',
      engineIndex: 0,
      handshakeAddress: 'tcp://127.0.0.1:1',
      readyResponse: 'short',
      textModel,
      vocabSize: 1,
      eosTokenIds: [0],
    }),
    /readyResponse "short" needs engine "vllm"/,
  );
});

test('vllmVersion is what the long ready response reports (vllm-sim by default); outputLayout and vllmVersion are refused for TokenSpeed', async () => {
  assert.equal((await rawRegistration()).vllm_version, 'vllm-sim');
  assert.equal(
    (await rawRegistration({ vllmVersion: '0.21.1.dev3+g52a31ccec' })).vllm_version,
    '0.21.1.dev3+g52a31ccec',
  );
  const ts = {
    engine: 'tokenspeed' as const,
    engineIndex: 0,
    handshakeAddress: 'tcp://127.0.0.1:1',
    textModel,
    vocabSize: 1,
    eosTokenIds: [0],
  };
  await assert.rejects(runSimEngine({ ...ts, outputLayout: 16 }), /outputLayout and vllmVersion need engine "vllm"/);
  await assert.rejects(runSimEngine({ ...ts, vllmVersion: 'x' }), /outputLayout and vllmVersion need engine "vllm"/);
  await assert.rejects(
    runSimEngine({ ...ts, engine: 'vllm', outputLayout: 14 as 13 }),
    /outputLayout must be 13 or 16/,
  );
});
