/**
 * TokenSpeed wire code newer than f4d8ec6e (test/vectors/tokenspeed-newer, made by the newer classes themselves): what
 * the gateway sees of it. Its outputs decode as before; the request with `data_parallel_rank` appended (25 elements)
 * is read by an engine-side decoder that tolerates trailing elements (the simulated rank's); greedy requests the gateway
 * sends are normalized, so the newer engine's seed pin for un-normalized greedy sampling does not reach them; and the
 * `LoadSnapshot` message newer TokenSpeed keeps on a private socket fails to decode as an output batch with a clear
 * error instead of being taken for one.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  decodeTokenizedGenerateReqInput,
  encodeTokenizedGenerateReqInput,
  toTokenizedGenerateReqInput,
  tokenspeedProtocol,
} from '../../src/protocols/tokenspeed/index.js';
import { DEFAULT_SAMPLING } from '../../src/protocols/types.js';
import { WireDecodeError } from '../../src/wire/errors.js';
import { loadRepoVectors, type Vector } from '../helpers/vectors.js';

const vectors = new Map(loadRepoVectors('tokenspeed-newer').map((v) => [v.name, v]));
const bytes = (v: Vector) => Uint8Array.from(Buffer.from(v.hex!, 'hex'));
const get = (name: string) => {
  const v = vectors.get(name);
  assert.ok(v, name);
  return v;
};

test('every tokenspeed-newer vector is covered below', () => {
  assert.deepEqual([...vectors.keys()].sort(), [
    'ts_load_snapshot_private_transport',
    'ts_out_slim14_real_newer_class',
    'ts_req_py_25_data_parallel_rank',
    'ts_req_unnormalized_greedy_seed_pin',
  ]);
});

test("the newer class's 14-element BatchTokenIDOutSlim decodes to its rows and load tail", () => {
  const v = get('ts_out_slim14_real_newer_class');
  const d = v.decoded as {
    rids: string[];
    output_ids: number[][];
    finished_reasons: string[];
    engine_index: number;
    num_running: number;
    num_waiting: number;
    kv_active_pages: number;
    kv_total_pages: number;
  };
  const b = tokenspeedProtocol.decodeOutput([bytes(v)]);
  assert.equal(b.engineIndex, d.engine_index);
  assert.deepEqual(
    b.outputs.map((o) => [o.requestId, o.newTokenIds, o.finishReason ?? '']),
    d.rids.map((r, i) => [r, d.output_ids[i], d.finished_reasons[i]]),
  );
  assert.deepEqual(b.load, {
    numRunning: d.num_running,
    numWaiting: d.num_waiting,
    kvCacheUsage: d.kv_active_pages / d.kv_total_pages,
    runningIncludesWaiting: true,
  });
});

test('a 25-element request (data_parallel_rank appended) is read by the engine-side decoder', () => {
  const v = get('ts_req_py_25_data_parallel_rank');
  const d = v.decoded as { rid: string; input_ids: number[] };
  const r = decodeTokenizedGenerateReqInput(bytes(v));
  assert.equal(r.rid, d.rid);
  assert.deepEqual(r.input_ids, d.input_ids);
});

test('greedy requests the gateway sends are normalized: the newer seed pin for un-normalized greedy sampling does not apply', () => {
  const v = get('ts_req_unnormalized_greedy_seed_pin');
  assert.equal(
    decodeTokenizedGenerateReqInput(bytes(v)).sampling_params.is_normalized,
    false,
    'the vector is the un-normalized case',
  );
  const ours = decodeTokenizedGenerateReqInput(
    encodeTokenizedGenerateReqInput(
      toTokenizedGenerateReqInput({
        requestId: 'g',
        promptTokenIds: [1, 2],
        sampling: { ...DEFAULT_SAMPLING, temperature: 0, seed: 5 },
        stream: true,
        returnLogprob: false,
      }),
      { form: 'prefix' },
    ),
  );
  assert.equal(ours.sampling_params.is_normalized, true);
  assert.equal(ours.sampling_params.top_k, 1, 'greedy');
  assert.equal(Number(ours.sampling_params.seed), 5, 'the seed the client gave is kept');
});

test('the private LoadSnapshot message is not an output batch: a clear decode error, never a batch', () => {
  const v = get('ts_load_snapshot_private_transport');
  assert.throws(
    () => tokenspeedProtocol.decodeOutput([bytes(v)]),
    (e: unknown) => e instanceof WireDecodeError && /BatchTokenIDOutSlim/.test(e.message),
  );
});
