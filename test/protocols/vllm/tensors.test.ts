/**
 * Logprob tensors in vLLM outputs (engine-wire.md 3.8, 5.6, 1.6): ndarrays inline (ext 3) or in aux frames
 * (1-based), dtype strings, shapes, and every malformed form the spec names.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  createVllmProtocol,
  decodeEngineCoreOutputs,
  defaultEngineCoreOutput,
  defaultEngineCoreOutputs,
  encodeEngineCoreOutputsFrames,
  parseDtype,
  sampledLogprobs,
} from '../../../src/protocols/vllm/index.js';
import type { EngineCoreOutputs, VllmLogprobs } from '../../../src/protocols/vllm/index.js';
import { WireDecodeError } from '../../../src/wire/errors.js';
import { bytesOf, fixarray, fixstr, hexOf } from './hex.js';

const decodeRejects = (fn: () => unknown, re: RegExp) =>
  assert.throws(
    fn,
    (e: unknown) => e instanceof WireDecodeError && re.test(e.message),
    `expected WireDecodeError ${re}`,
  );

/** An ndarray `[dtype, shape, data]`. */
const nd = (dtype: string, shape: number[], data: string) =>
  fixarray([fixstr(dtype), fixarray(shape.map((d) => d.toString(16).padStart(2, '0'))), data]);
/** A one-output envelope whose output carries `logprobsHex` as new_logprobs; `frames` = aux frames. */
const message = (logprobsHex: string, ...aux: string[]): Uint8Array[] => [
  bytesOf('92' + '00' + '91' + fixarray(['a161', '9101', logprobsHex])),
  ...aux.map(bytesOf),
];
const decodeLogprobs = (frames: Uint8Array[]): VllmLogprobs => decodeEngineCoreOutputs(frames).outputs[0].new_logprobs!;

const I64 = (...v: number[]) =>
  v.map((x) => Buffer.from(new BigInt64Array([BigInt(x)]).buffer).toString('hex')).join('');
const I32 = (...v: number[]) => v.map((x) => Buffer.from(new Int32Array([x]).buffer).toString('hex')).join('');
const F32 = (...v: number[]) => v.map((x) => Buffer.from(new Float32Array([x]).buffer).toString('hex')).join('');
/** ext 3 with the smallest header. */
const ext3 = (dataHex: string) => {
  const n = dataHex.length / 2;
  const fixed = [1, 2, 4, 8, 16].indexOf(n);
  const head =
    fixed >= 0
      ? (0xd4 + fixed).toString(16)
      : n <= 255
        ? 'c7' + n.toString(16).padStart(2, '0')
        : 'c8' + n.toString(16).padStart(4, '0');
  return head + '03' + dataHex;
};

/** P = 1, K = 2: sampled token 10 (rank 3), candidates 3 and 10. */
const TOPK = {
  tokens: nd('int64', [1, 3], ext3(I64(10, 3, 10))),
  logprobs: nd('float32', [1, 3], ext3(F32(-2, -0.5, -2))),
  ranks: nd('int64', [1], ext3(I64(3))),
};

test('inline ext 3 in every header size (fixext, ext8) and top-k columns; column 0 is the sampled logprob', () => {
  const lp = decodeLogprobs(message(fixarray([TOPK.tokens, TOPK.logprobs, TOPK.ranks, 'c0'])));
  assert.deepEqual(lp, {
    token_ids: [[10, 3, 10]],
    logprobs: [[-2, -0.5, -2]],
    ranks: [3],
    cu_num_generated_tokens: null,
  });
  assert.deepEqual(sampledLogprobs(lp), [-2]);
  assert.ok(TOPK.tokens.includes('c71803'), 'the 24-byte buffer uses ext8');
});

test('aux frames: data as a 1-based frame index, resolved against the frames after the payload', () => {
  const lpHex = fixarray([nd('int64', [1, 3], '01'), nd('float32', [1, 3], '03'), nd('int64', [1], '02'), 'c0']);
  const frames = message(lpHex, I64(10, 3, 10), I64(3), F32(-2, -0.5, -2));
  assert.deepEqual(decodeLogprobs(frames), {
    token_ids: [[10, 3, 10]],
    logprobs: [[-2, -0.5, -2]],
    ranks: [3],
    cu_num_generated_tokens: null,
  });
  // An aux frame that is a view into a larger, unaligned buffer still reads correctly.
  const backing = new Uint8Array(1 + 24);
  backing.set(bytesOf(I64(10, 3, 10)), 1);
  const unaligned = [frames[0], backing.subarray(1), frames[2], frames[3]];
  assert.deepEqual(decodeLogprobs(unaligned).token_ids, [[10, 3, 10]]);
  decodeRejects(
    () => decodeEngineCoreOutputs(message(lpHex, I64(10, 3, 10), I64(3))),
    /new_logprobs\.logprobs\.data: aux frame index 3 is out of range \(the message has 2 aux frame\(s\)\)/,
  );
  decodeRejects(
    () => decodeEngineCoreOutputs(message(fixarray([nd('int64', [1, 3], '00'), TOPK.logprobs, TOPK.ranks, 'c0']))),
    /token_ids\.data: aux frame index 0 names the payload itself/,
  );
  decodeRejects(
    () => decodeEngineCoreOutputs(message(fixarray([nd('int64', [1, 3], 'ff'), TOPK.logprobs, TOPK.ranks, 'c0']))),
    /token_ids\.data: expected a non-negative integer, got -1/,
  );
});

test('encoder: buffers at or above auxThresholdBytes go to aux frames, smaller ones stay inline; both decode back', () => {
  const o: EngineCoreOutputs = {
    ...defaultEngineCoreOutputs(),
    outputs: [
      {
        ...defaultEngineCoreOutput('a', [10, 11]),
        new_logprobs: {
          token_ids: [
            [10, 4],
            [11, 5],
          ],
          logprobs: [
            [-0.5, -1],
            [-0.25, -3],
          ],
          ranks: [1, 2],
          cu_num_generated_tokens: null,
        },
      },
    ],
  };
  const inline = encodeEngineCoreOutputsFrames(o);
  assert.equal(inline.length, 1);
  const split = encodeEngineCoreOutputsFrames(o, { auxThresholdBytes: 32 });
  assert.equal(split.length, 2, 'only the 32-byte token_ids buffer moves');
  assert.equal(hexOf(split[1]), I64(10, 4, 11, 5));
  assert.ok(hexOf(split[0]).includes(fixstr('int64') + '92020201'), 'token_ids data is aux frame index 1');
  const all = encodeEngineCoreOutputsFrames(o, { auxThresholdBytes: 0 });
  assert.equal(all.length, 4);
  for (const frames of [inline, split, all]) assert.deepStrictEqual(decodeEngineCoreOutputs(frames), o);
  const protocol = createVllmProtocol();
  assert.deepEqual(protocol.decodeOutput(all).outputs[0].logprobs, [-0.5, -0.25]);
});

test('ext codes: 1 and 2 (pickle) and any code other than 3 are refused', () => {
  const withExt = (code: string) =>
    message(fixarray([nd('int64', [1, 1], 'd7' + code + I64(1)), TOPK.logprobs, TOPK.ranks, 'c0']));
  decodeRejects(() => decodeEngineCoreOutputs(withExt('01')), /token_ids\.data: ext type 1 \(pickle\) is refused/);
  decodeRejects(() => decodeEngineCoreOutputs(withExt('02')), /ext type 2 \(pickle\) is refused/);
  decodeRejects(() => decodeEngineCoreOutputs(withExt('05')), /unknown ext type 5 \(expected 3, raw view\)/);
  decodeRejects(() => decodeEngineCoreOutputs(withExt('ff')), /unknown ext type -1/);
  decodeRejects(
    () =>
      decodeEngineCoreOutputs(
        message(fixarray([nd('int64', [1, 1], 'c408' + I64(1)), TOPK.logprobs, TOPK.ranks, 'c0'])),
      ),
    /token_ids\.data: expected ext \(raw view\) or an aux frame index, got bin/,
  );
  const whole = message(fixarray([TOPK.tokens, TOPK.logprobs, TOPK.ranks, 'c0']))[0];
  decodeRejects(
    () => decodeEngineCoreOutputs(whole.subarray(0, whole.length - 5)),
    /new_logprobs\.ranks\.data: input data was truncated/,
  );
});

test('dtype strings: byte-order prefixes, short and long names; unsupported ones are refused', () => {
  assert.deepEqual(parseDtype('<i4'), { kind: 'int', size: 4, littleEndian: true });
  assert.deepEqual(parseDtype('>i8'), { kind: 'int', size: 8, littleEndian: false });
  assert.deepEqual(parseDtype('=f4'), { kind: 'float', size: 4, littleEndian: true });
  assert.deepEqual(parseDtype('|int32'), { kind: 'int', size: 4, littleEndian: true });
  for (const d of ['float64', 'f8', 'bool', 'u4', 'int16', '', '<']) assert.equal(parseDtype(d), null, d);
  const lp = (tokDtype: string, tokData: string, lpDtype = '<f4') =>
    message(
      fixarray([
        nd(tokDtype, [1, 1], ext3(tokData)),
        nd(lpDtype, [1, 1], ext3(F32(-1))),
        nd('<i8', [1], ext3(I64(1))),
        'c0',
      ]),
    );
  assert.deepEqual(decodeLogprobs(lp('<i4', I32(7))).token_ids, [[7]]);
  assert.deepEqual(decodeLogprobs(lp('int32', I32(7))).token_ids, [[7]]);
  assert.deepEqual(decodeLogprobs(lp('>i4', '00000007')).token_ids, [[7]], 'big-endian');
  assert.deepEqual(decodeLogprobs(lp('=i8', I64(7))).token_ids, [[7]]);
  assert.deepEqual(decodeLogprobs(lp('int64', I64(7), 'float32')).logprobs, [[-1]]);
  decodeRejects(() => decodeEngineCoreOutputs(lp('float64', I64(7))), /token_ids\.dtype: unsupported dtype 'float64'/);
  decodeRejects(
    () => decodeEngineCoreOutputs(lp('f4', F32(7))),
    /token_ids\.dtype: expected an integer dtype, got 'f4'/,
  );
  decodeRejects(
    () => decodeEngineCoreOutputs(lp('i8', I64(7), 'i4')),
    /logprobs\.dtype: expected a float dtype, got 'i4'/,
  );
});

test('float32 specials survive: -Infinity and NaN logprobs are kept', () => {
  const frames = message(
    fixarray([
      nd('int64', [2, 1], ext3(I64(1, 2))),
      nd('float32', [2, 1], ext3(F32(-Infinity, NaN))),
      nd('int64', [2], ext3(I64(1, 1))),
      'c0',
    ]),
  );
  const [a, b] = sampledLogprobs(decodeLogprobs(frames));
  assert.equal(a, -Infinity);
  assert.ok(Number.isNaN(b));
});

test('shape rules: ragged arrays, zero columns, wrong byte length, ranks < 1, negative ids, P = 0 is empty', () => {
  const lp = (...parts: string[]) => message(fixarray(parts));
  const tok21 = nd('int64', [2, 1], ext3(I64(1, 2)));
  const lp21 = nd('float32', [2, 1], ext3(F32(-1, -2)));
  const rk2 = nd('int64', [2], ext3(I64(1, 1)));
  assert.equal(decodeLogprobs(lp(tok21, lp21, rk2, 'c0')).token_ids.length, 2);
  decodeRejects(
    () => decodeEngineCoreOutputs(lp(tok21, nd('float32', [2, 2], ext3(F32(-1, -2, -3, -4))), rk2, 'c0')),
    /new_logprobs: logprobs shape \[2, 2\] differs from token_ids shape \[2, 1\]/,
  );
  decodeRejects(
    () => decodeEngineCoreOutputs(lp(tok21, lp21, nd('int64', [1], ext3(I64(1))), 'c0')),
    /ranks shape \[1\] must be \[2\]/,
  );
  decodeRejects(
    () => decodeEngineCoreOutputs(lp(nd('int64', [2], ext3(I64(1, 2))), lp21, rk2, 'c0')),
    /token_ids must be 2-D \[P, K\+1\], got shape \[2\]/,
  );
  decodeRejects(
    () => decodeEngineCoreOutputs(lp(nd('int64', [2, 0], 'c70003'), nd('float32', [2, 0], 'c70003'), rk2, 'c0')),
    /2 row\(s\) with zero columns/,
  );
  decodeRejects(
    () => decodeEngineCoreOutputs(lp(nd('int64', [2, 1], ext3(I64(1))), lp21, rk2, 'c0')),
    /token_ids\.data: buffer has 8 bytes but shape \[2, 1\] of int64 needs 16/,
  );
  decodeRejects(
    () => decodeEngineCoreOutputs(lp(tok21, lp21, nd('int64', [2], ext3(I64(1, 0))), 'c0')),
    /ranks\.data\[1\]: rank 0 must be ≥ 1/,
  );
  decodeRejects(
    () => decodeEngineCoreOutputs(lp(nd('int64', [2, 1], ext3(I64(1, -5))), lp21, rk2, 'c0')),
    /token_ids\.data\[1\]: token id -5 is negative/,
  );
  decodeRejects(
    () => decodeEngineCoreOutputs(lp(nd('int64', [2, 1], ext3(I64(1) + '0100000000002000')), lp21, rk2, 'c0')),
    /token_ids\.data\[1\]: integer 9007199254740993 is beyond/,
  );
  const empty = decodeLogprobs(
    lp(nd('int64', [0, 3], 'c70003'), nd('float32', [0, 3], 'c70003'), nd('int64', [0], 'c70003'), 'c0'),
  );
  assert.deepEqual(empty, { token_ids: [], logprobs: [], ranks: [], cu_num_generated_tokens: null });
});

test('strict lengths: WireLogprobs has 4 elements, an ndarray 3; cu_num_generated_tokens must be nil', () => {
  const ok = [TOPK.tokens, TOPK.logprobs, TOPK.ranks];
  decodeRejects(
    () => decodeEngineCoreOutputs(message(fixarray(ok))),
    /new_logprobs: WireLogprobs must be .* \(4 elements\), got 3/,
  );
  decodeRejects(() => decodeEngineCoreOutputs(message(fixarray([...ok, 'c0', 'c0']))), /\(4 elements\), got 5/);
  decodeRejects(
    () => decodeEngineCoreOutputs(message(fixarray([...ok, '9101']))),
    /cu_num_generated_tokens: must be nil, got array/,
  );
  const nd4 = fixarray([fixstr('int64'), '920103', ext3(I64(10, 3, 10)), 'c0']);
  decodeRejects(
    () => decodeEngineCoreOutputs(message(fixarray([nd4, TOPK.logprobs, TOPK.ranks, 'c0']))),
    /token_ids: ndarray must be \[dtype, shape, data\] \(3 elements\), got 4/,
  );
  decodeRejects(
    () =>
      decodeEngineCoreOutputs(
        message(
          fixarray([
            nd('int64', [1, 3], ext3(I64(10, 3, 10))).replace(/^93a5696e743634/, '93' + '01'),
            TOPK.logprobs,
            TOPK.ranks,
            'c0',
          ]),
        ),
      ),
    /token_ids\.dtype: expected str, got int/,
  );
});

test('new_prompt_logprobs_tensors uses the same codec (and the same aux frames)', () => {
  const lpHex = fixarray([nd('int64', [1, 3], '01'), TOPK.logprobs, TOPK.ranks, 'c0']);
  const frames = [bytesOf('92' + '00' + '91' + fixarray(['a161', '90', 'c0', lpHex])), bytesOf(I64(10, 3, 10))];
  const out = decodeEngineCoreOutputs(frames).outputs[0];
  assert.equal(out.new_logprobs, null);
  assert.deepEqual(out.new_prompt_logprobs_tensors!.token_ids, [[10, 3, 10]]);
});
