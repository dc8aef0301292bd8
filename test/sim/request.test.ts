import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeTokenizedGenerateReqInput } from '../../src/protocols/tokenspeed/request.js';
import { TOP_K_DISABLED } from '../../src/protocols/tokenspeed/sampling.js';
import { SimRequestError, crc32Seed, finalizeRequest, toSimRequest, validationErrorOf } from '../../src/sim/request.js';
import type { TokenSource } from '../../src/sim/scheduler.js';
import { loadTokenSpeedVectors, type Vector } from '../helpers/vectors.js';

const fromHex = (hex: string): Uint8Array => Uint8Array.from(Buffer.from(hex, 'hex'));
const requestVectors = loadTokenSpeedVectors().filter(
  (v) => v.kind === 'TokenizedGenerateReqInput' && v.error === undefined && typeof v.hex === 'string',
);

interface Verified {
  after_decode_request_frames: { sampling_params: Record<string, unknown>; validation_error: string | null };
  recv_socket_config: { vocab_size: number; enable_output_logprobs: boolean };
  engine_outcome: 'admitted' | 'terminal_abort';
}

const noTokens: TokenSource = { next: () => ({ tokenId: 0, logprob: 0 }) };

test('crc32Seed matches the vectors (engine-wire.md 4.5)', () => {
  assert.equal(crc32Seed('gw-unnorm'), 492922868);
  assert.equal(crc32Seed('gw-min'), 3819114943);
  assert.equal(crc32Seed('請求-𝔘-✓-ü'), 1238504773);
});

test('the request vectors exist', () => {
  assert.ok(requestVectors.length >= 20, `only ${requestVectors.length} request vectors found`);
});

for (const v of requestVectors) {
  test(`finalization and validation reproduce the engine on ${v.name}`, () => {
    const verified = v.verified as Verified;
    const decoded = decodeTokenizedGenerateReqInput(fromHex(v.hex as string));
    const fin = finalizeRequest(decoded);
    const want = verified.after_decode_request_frames.sampling_params;
    const got = fin.sampling_params;
    assert.equal(Number(got.seed), want.seed, 'seed');
    assert.deepEqual(got.stop_strs, want.stop_strs, 'stop_strs');
    assert.equal(Number(got.stop_str_max_len), want.stop_str_max_len, 'stop_str_max_len');
    assert.equal(got.is_normalized, true);
    assert.equal(Number(got.top_k), want.top_k, 'top_k');
    assert.equal(got.temperature, want.temperature, 'temperature');
    const sortIds = (ids: unknown): number[] | null =>
      ids === null ? null : (ids as unknown[]).map(Number).sort((a, b) => a - b);
    assert.deepEqual(sortIds(got.stop_token_ids), sortIds(want.stop_token_ids), 'stop_token_ids');
    assert.equal(
      fin.validation_error === null,
      verified.after_decode_request_frames.validation_error === null,
      'finalization validation_error',
    );

    const opts = {
      vocabSize: verified.recv_socket_config.vocab_size,
      enableOutputLogprobs: verified.recv_socket_config.enable_output_logprobs,
    };
    const reason = validationErrorOf(fin, opts);
    const expectAbort = verified.engine_outcome === 'terminal_abort' || v.handler_outcome === 'terminal_abort';
    assert.equal(reason !== null, expectAbort, `reason=${reason}`);
  });
}

test('toSimRequest maps the wire fields and derives the seed for the token source', () => {
  const v = requestVectors.find((x) => x.name === 'gw_req_unnormalized_sampling') as Vector;
  const decoded = decodeTokenizedGenerateReqInput(fromHex(v.hex as string));
  let seenSeed: unknown = null;
  let seenPrompt: readonly number[] = [];
  const spec = toSimRequest(decoded, {
    enableOutputLogprobs: true,
    vocabSize: 32000,
    tokens: (seed, prompt) => {
      seenSeed = seed;
      seenPrompt = prompt;
      return noTokens;
    },
  });
  assert.equal(spec.rid, 'gw-unnorm');
  assert.deepEqual(spec.promptTokenIds, [1, 2]);
  assert.equal(spec.maxNewTokens, 64);
  assert.deepEqual(spec.stopTokenIds, [2]);
  assert.equal(spec.stream, true);
  assert.equal(spec.validationError, null);
  assert.equal(seenSeed, 492922868);
  assert.deepEqual(seenPrompt, [1, 2]);
});

test('toSimRequest refuses a nil or list rid with SimRequestError (the engine drops it)', () => {
  const v = requestVectors.find((x) => x.name === 'req_py_defaults') as Vector;
  const decoded = decodeTokenizedGenerateReqInput(fromHex(v.hex as string));
  const tokens = (): TokenSource => noTokens;
  assert.throws(() => toSimRequest({ ...decoded, rid: null }, { enableOutputLogprobs: true, tokens }), SimRequestError);
  assert.throws(
    () => toSimRequest({ ...decoded, rid: ['a', 'b'] }, { enableOutputLogprobs: true, tokens }),
    /single string/,
  );
});

test('validation details: logprob gate, logprob start, session id, nil input_ids', () => {
  const v = requestVectors.find((x) => x.name === 'req_py_defaults') as Vector;
  const base = finalizeRequest(decodeTokenizedGenerateReqInput(fromHex(v.hex as string)));
  const on = { enableOutputLogprobs: true, vocabSize: 32000 };
  assert.equal(validationErrorOf(base, on), null);
  const prompt = base.input_ids?.length ?? 0;
  assert.match(
    validationErrorOf({ ...base, return_logprob: true }, { enableOutputLogprobs: false }) ?? '',
    /enable-output-logprobs/,
  );
  assert.equal(validationErrorOf({ ...base, return_logprob: true, logprob_start_len: -1 }, on), null);
  assert.equal(validationErrorOf({ ...base, return_logprob: true, logprob_start_len: prompt - 1 }, on), null);
  assert.match(
    validationErrorOf({ ...base, return_logprob: true, logprob_start_len: prompt }, on) ?? '',
    /past the prompt/,
  );
  assert.match(validationErrorOf({ ...base, return_logprob: true, logprob_start_len: -2 }, on) ?? '', /below -1/);
  assert.match(validationErrorOf({ ...base, return_logprob: true, top_logprobs_num: 3 }, on) ?? '', /top_logprobs_num/);
  assert.match(
    validationErrorOf({ ...base, session_params: { id: 's', rid: null, offset: null, replace: null } }, on) ?? '',
    /session/,
  );
  assert.match(validationErrorOf({ ...base, input_ids: null }, on) ?? '', /input_ids/);
  // an un-normalized greedy request is rewritten, not refused
  const greedy = finalizeRequest({
    ...base,
    sampling_params: { ...base.sampling_params, is_normalized: false, temperature: -1, top_k: -1 },
  });
  assert.equal(greedy.sampling_params.temperature, 1);
  assert.equal(greedy.sampling_params.top_k, 1);
  const disabled = finalizeRequest({
    ...base,
    sampling_params: { ...base.sampling_params, is_normalized: false, top_k: -1 },
  });
  assert.equal(disabled.sampling_params.top_k, TOP_K_DISABLED);
});
