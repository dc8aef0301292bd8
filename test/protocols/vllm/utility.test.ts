/**
 * vLLM utility calls and LoRA requests on the wire (docs/wire/vllm-utility.md): the UTILITY payload's bytes, a
 * reply's decoding (result pair, failure, nil), the refusals of malformed ones, and the `LoRARequest` an ADD carries
 * for a request that names an adapter.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_SAMPLING } from '../../../src/protocols/types.js';
import {
  decodeEngineCoreRequest,
  encodeEngineCoreRequest,
  toEngineCoreRequest,
} from '../../../src/protocols/vllm/index.js';
import {
  encodeUtilityCall,
  toUtilityCall,
  utilityOutputValue,
  utilityReplyOf,
} from '../../../src/protocols/vllm/utility.js';
import { anyValue, decodeMessage } from '../../../src/wire/codec.js';
import { WireDecodeError, WireEncodeError } from '../../../src/wire/errors.js';
import { fixstr, hexOf } from './hex.js';

const SQL = { name: 'sql', id: 7, path: '/a/sql', baseModelName: null };

test('a UTILITY call is [client_index 0, call_id, method, args], a LoRARequest argument as its positional struct', () => {
  assert.equal(
    hexOf(encodeUtilityCall(5, 'add_lora', [{ lora: SQL }])),
    '94' + '00' + '05' + fixstr('add_lora') + '91' + '97' + fixstr('sql') + '07' + fixstr('/a/sql') + 'c0c0c2c2',
  );
  assert.equal(hexOf(encodeUtilityCall(6, 'remove_lora', [7])), '94' + '00' + '06' + fixstr('remove_lora') + '9107');
  assert.equal(hexOf(encodeUtilityCall(1, 'list_loras', [])), '94' + '00' + '01' + fixstr('list_loras') + '90');
  const back = toUtilityCall(decodeMessage(anyValue, encodeUtilityCall(5, 'add_lora', [{ lora: SQL }])));
  assert.deepEqual(back, {
    clientIndex: 0,
    callId: 5,
    method: 'add_lora',
    args: [['sql', 7, '/a/sql', null, null, false, false]],
  });
  assert.throws(() => encodeUtilityCall(-1, 'x', []), WireEncodeError);
  assert.throws(() => encodeUtilityCall(1, '', []), WireEncodeError);
  assert.throws(() => toUtilityCall([0, 1, 'm']), WireDecodeError);
});

test('a reply: the UtilityResult pair gives its value; a failure message; nil result; malformed ones refused', () => {
  assert.deepEqual(utilityReplyOf(utilityOutputValue(3, { result: true })), { callId: 3, failure: null, result: true });
  assert.deepEqual(utilityReplyOf(utilityOutputValue(4, { failure: 'no such adapter' })), {
    callId: 4,
    failure: 'no such adapter',
    result: null,
  });
  assert.deepEqual(utilityReplyOf([9]), { callId: 9, failure: null, result: null });
  assert.throws(() => utilityReplyOf('x'), WireDecodeError);
  assert.throws(() => utilityReplyOf([-1, null, null]), WireDecodeError);
  assert.throws(() => utilityReplyOf([1, 5, null]), /failure_message/);
  assert.throws(() => utilityReplyOf([1, null, [true]]), /UtilityResult/);
});

test('a request naming an adapter carries its LoRARequest at ADD index 6; the base model nil', () => {
  const base = {
    requestId: 'r',
    promptTokenIds: [1, 2],
    sampling: { ...DEFAULT_SAMPLING, maxNewTokens: 4 },
    stream: true,
    returnLogprob: false,
  };
  const wire = toEngineCoreRequest({ ...base, lora: SQL }, { arrivalTime: 1 });
  assert.deepEqual(decodeEngineCoreRequest(encodeEngineCoreRequest(wire)).lora_request, {
    lora_name: 'sql',
    lora_int_id: 7,
    lora_path: '/a/sql',
    base_model_name: null,
    tensorizer_config_dict: null,
    load_inplace: false,
    is_3d_lora_weight: false,
  });
  assert.equal(toEngineCoreRequest(base, { arrivalTime: 1 }).lora_request, null);
});
