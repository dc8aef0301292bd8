/**
 * vLLM EngineCore utility calls (request type `03`, docs/wire/vllm-utility.md; vLLM `vllm/v1/engine/core.py`
 * `_handle_client_request`, `vllm/v1/engine/core_client.py` `_call_utility_async`, `vllm/v1/serial_utils.py`):
 * - the call is one msgpack frame after the type byte: the 4-element array `[client_index, call_id, method_name,
 *   args]`, `args` a list the engine spreads into `getattr(EngineCore, method_name)(*args)` after converting each to
 *   the parameter's msgspec type (`_convert_msgspec_args`: a `LoRARequest` travels as its positional array);
 * - the answer is an `EngineCoreOutputs` whose only set field is `utility_output`, the positional `UtilityOutput`
 *   `[call_id, failure_message, result]`: a non-nil `failure_message` is the engine's error text; `result` is
 *   vLLM's `UtilityResult`, encoded as the pair `[type_info, value]` (`type_info` nil unless the engine runs with
 *   `VLLM_ALLOW_INSECURE_SERIALIZATION`), or nil.
 * The methods the gateway calls: `add_lora(lora_request) -> bool`, `remove_lora(lora_id: int) -> bool`,
 * `list_loras() -> set[int]`.
 */
import type { LoraTarget, UtilityReply } from '../types.js';
import { WireDecodeError, WireEncodeError } from '../../wire/errors.js';
import { MsgpackWriter } from '../../wire/writer.js';
import { loraRequestCodec, toLoraRequest } from './request.js';

/** The gateway's client index in a utility call (vLLM's frontends number theirs from 0; replies are routed by id). */
export const UTILITY_CLIENT_INDEX = 0;

/** One argument of a utility call: a LoRA request (written as its positional struct) or a plain msgpack value. */
export type UtilityArg = { lora: LoraTarget } | number | string | boolean | null;

/**
 * The UTILITY payload `[0, callId, method, args]`. Throws WireEncodeError for a call id that is not an integer ≥ 0,
 * an empty method name, or an argument the wire cannot carry.
 */
export function encodeUtilityCall(callId: number, method: string, args: readonly UtilityArg[]): Uint8Array {
  const root = 'UtilityCall';
  if (!Number.isSafeInteger(callId) || callId < 0)
    throw new WireEncodeError(`${root}.call_id`, `must be an integer ≥ 0, got ${String(callId)}`);
  if (typeof method !== 'string' || method === '') throw new WireEncodeError(`${root}.method`, 'must be a name');
  const w = new MsgpackWriter(128);
  w.writeArrayHeader(4);
  w.writeInt(UTILITY_CLIENT_INDEX, `${root}.client_index`);
  w.writeInt(callId, `${root}.call_id`);
  w.writeStr(method, `${root}.method`);
  w.writeArrayHeader(args.length);
  args.forEach((a, i) => {
    const path = `${root}.args[${i}]`;
    if (a !== null && typeof a === 'object') loraRequestCodec.encode(w, toLoraRequest(a.lora), path);
    else w.writeAny(a, path);
  });
  return w.finish();
}

/** A decoded utility call (the simulated rank's side): its call id, method and raw arguments. */
export interface UtilityCall {
  clientIndex: number;
  callId: number;
  method: string;
  args: unknown[];
}

/**
 * Checks a generically decoded UTILITY payload (the simulated rank's side). Throws WireDecodeError unless it is
 * `[int, int, str, list]`.
 */
export function toUtilityCall(value: unknown): UtilityCall {
  const root = 'UtilityCall';
  if (!Array.isArray(value) || value.length !== 4)
    throw new WireDecodeError(root, 'expected [client_index, call_id, method, args]');
  const [clientIndex, callId, method, args] = value as unknown[];
  if (!Number.isSafeInteger(clientIndex)) throw new WireDecodeError(`${root}.client_index`, 'expected an integer');
  if (!Number.isSafeInteger(callId)) throw new WireDecodeError(`${root}.call_id`, 'expected an integer');
  if (typeof method !== 'string') throw new WireDecodeError(`${root}.method`, 'expected a string');
  if (!Array.isArray(args)) throw new WireDecodeError(`${root}.args`, 'expected a list');
  return { clientIndex: clientIndex as number, callId: callId as number, method, args };
}

/**
 * The seam's reply of a decoded `utility_output` value: `[call_id, failure_message, result]` with `result` the pair
 * `[type_info, value]` (its value taken) or nil. Throws WireDecodeError naming `path` for another shape.
 */
export function utilityReplyOf(value: unknown, path = 'EngineCoreOutputs.utility_output'): UtilityReply {
  if (!Array.isArray(value) || value.length < 1 || value.length > 3)
    throw new WireDecodeError(path, 'expected [call_id, failure_message, result]');
  const [callId, failure = null, result = null] = value as unknown[];
  if (typeof callId !== 'number' || !Number.isSafeInteger(callId) || callId < 0)
    throw new WireDecodeError(`${path}.call_id`, `expected an integer ≥ 0 within 2^53, got ${String(callId)}`);
  if (failure !== null && typeof failure !== 'string')
    throw new WireDecodeError(`${path}.failure_message`, 'expected a string or nil');
  let out: unknown = null;
  if (result !== null) {
    if (!Array.isArray(result) || result.length !== 2)
      throw new WireDecodeError(`${path}.result`, 'expected the UtilityResult pair [type_info, value] or nil');
    out = result[1];
  }
  return { callId, failure: failure as string | null, result: out };
}

/** The `utility_output` value answering `callId` (the simulated rank's side): a result, or a failure message. */
export function utilityOutputValue(callId: number, outcome: { result: unknown } | { failure: string }): unknown[] {
  return 'failure' in outcome ? [callId, outcome.failure, null] : [callId, null, [null, outcome.result]];
}
