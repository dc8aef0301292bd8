/**
 * TokenSpeed `TokenizedGenerateReqInput`, the ADD payload (engine-wire.md 4.2-4.3; TokenSpeed `io_struct.py`):
 * a tagged positional array, element 0 = `"TokenizedGenerateReqInput"`, 23 fields at TokenSpeed PR #1200 (24
 * elements, `dc 0018`) plus the newer 25th element `data_parallel_rank`. Only `sampling_params` (element 5) is
 * required, so the minimum is 6 elements; extra trailing elements are drained (3.2).
 *
 * Two encodings: `prefix` (11 elements, what SMG and this gateway send, 4.3 / 6.2) and `full` (24 elements, what
 * TokenSpeed's Python encoder writes, byte-identical to pinned vector V4 in 6.1; 25 when `data_parallel_rank` is set).
 */
import {
  anyValue,
  bool,
  decodeMessage,
  float,
  int,
  list,
  nestedFloats,
  nullable,
  positional,
  str,
  strMap,
  strOrStrList,
} from '../../wire/codec.js';
import type { NestedFloats } from '../../wire/codec.js';
import { WireEncodeError } from '../../wire/errors.js';
import type { WireInt } from '../../wire/reader.js';
import { MsgpackWriter } from '../../wire/writer.js';
import { samplingParamsCodec } from './sampling.js';
import type { TokenSpeedSamplingParams } from './sampling.js';

/** The tag string, element 0 (25 bytes, header `b9`). */
export const TOKENIZED_GENERATE_REQ_INPUT_TAG = 'TokenizedGenerateReqInput';

/** TokenSpeed `SessionParams`: untagged `[id, rid, offset, replace]`, all nil by default (4.2 element 12). */
export interface SessionParams {
  /** A non-nil id makes the engine abort the request (no such session; 4.6). */
  id: string | null;
  rid: string | null;
  offset: WireInt | null;
  replace: boolean | null;
}

/** `SessionParams` codec (untagged, every field optional). */
export const sessionParamsCodec = positional<SessionParams>({
  name: 'SessionParams',
  fields: [
    { name: 'id', codec: nullable(str), dflt: () => null },
    { name: 'rid', codec: nullable(str), dflt: () => null },
    { name: 'offset', codec: nullable(int), dflt: () => null },
    { name: 'replace', codec: nullable(bool), dflt: () => null },
  ],
});

/** All fields of `TokenizedGenerateReqInput` in wire order (element i+1 = field i), upstream names (4.2). */
export interface TokenizedGenerateReqInput {
  /** The gateway always sends a single string. */
  rid: string | string[] | null;
  http_worker_ipc: string | null;
  input_text: string | null;
  /** Prompt token ids. */
  input_ids: WireInt[] | null;
  /** Required (the only required field). */
  sampling_params: TokenSpeedSamplingParams;
  return_logprob: boolean;
  logprob_start_len: WireInt;
  top_logprobs_num: WireInt;
  token_ids_logprob: WireInt[] | null;
  /** Output cadence: a row every token (true) or every 50 tokens (false) (4.8). */
  stream: boolean;
  input_embeds: NestedFloats | null;
  session_params: SessionParams | null;
  custom_logit_processor: string | null;
  return_hidden_states: boolean;
  /** Seconds (float). */
  created_time: number;
  bootstrap_host: string | null;
  bootstrap_port: WireInt | null;
  /** May exceed 2^53 (then a bigint). */
  bootstrap_room: WireInt | null;
  input_multi_ids: WireInt[][] | null;
  input_extra_infos: Record<string, unknown>[] | null;
  input_ids_unpadded: WireInt[] | null;
  /** `MultimodalInputs` (untagged array); kept as a generic value, unused by the text path. */
  multimodal_inputs: unknown;
  /** A non-nil value makes the engine answer with one terminal `abort` row (4.6). */
  validation_error: string | null;
  /** Newer TokenSpeed only (element 24); older engines drop it. The gateway never sends it. */
  data_parallel_rank: WireInt | null;
}

/** The tagged positional codec (25 fields; minimum 6 elements). */
export const tokenizedGenerateReqInputCodec = positional<TokenizedGenerateReqInput>({
  name: 'TokenizedGenerateReqInput',
  tag: TOKENIZED_GENERATE_REQ_INPUT_TAG,
  fields: [
    { name: 'rid', codec: nullable(strOrStrList), dflt: () => null },
    { name: 'http_worker_ipc', codec: nullable(str), dflt: () => null },
    { name: 'input_text', codec: nullable(str), dflt: () => null },
    { name: 'input_ids', codec: nullable(list(int)), dflt: () => null },
    { name: 'sampling_params', codec: samplingParamsCodec },
    { name: 'return_logprob', codec: bool, dflt: () => false },
    { name: 'logprob_start_len', codec: int, dflt: () => -1 },
    { name: 'top_logprobs_num', codec: int, dflt: () => 0 },
    { name: 'token_ids_logprob', codec: nullable(list(int)), dflt: () => null },
    { name: 'stream', codec: bool, dflt: () => false },
    { name: 'input_embeds', codec: nullable(nestedFloats), dflt: () => null },
    { name: 'session_params', codec: nullable(sessionParamsCodec), dflt: () => null },
    { name: 'custom_logit_processor', codec: nullable(str), dflt: () => null },
    { name: 'return_hidden_states', codec: bool, dflt: () => false },
    { name: 'created_time', codec: float, dflt: () => 0.0 },
    { name: 'bootstrap_host', codec: nullable(str), dflt: () => null },
    { name: 'bootstrap_port', codec: nullable(int), dflt: () => null },
    { name: 'bootstrap_room', codec: nullable(int), dflt: () => null },
    { name: 'input_multi_ids', codec: nullable(list(list(int))), dflt: () => null },
    { name: 'input_extra_infos', codec: nullable(list(strMap(anyValue))), dflt: () => null },
    { name: 'input_ids_unpadded', codec: nullable(list(int)), dflt: () => null },
    { name: 'multimodal_inputs', codec: anyValue, dflt: () => null },
    { name: 'validation_error', codec: nullable(str), dflt: () => null },
    { name: 'data_parallel_rank', codec: nullable(int), dflt: () => null },
  ],
});

/** Element count of the gateway's prefix form (tag + `rid` .. `stream`; 4.3). */
export const PREFIX_FORM_LENGTH = 11;
/** Element count of TokenSpeed's full form at PR #1200 (tag + 23 fields; 4.2). */
export const FULL_FORM_LENGTH = 24;

/** Options of `encodeTokenizedGenerateReqInput`. */
export interface EncodeRequestOptions {
  /**
   * `'prefix'` (default): 11 elements (fields 11.. must hold their defaults). `'full'`: 24 elements, 25 when
   * `data_parallel_rank` is non-nil. A number: exactly that many elements, tag included (6..25).
   */
  form?: 'prefix' | 'full' | number;
  /** Element count of the nested `SamplingParams` (0..29; default 29, the full form the gateway always sends). */
  samplingParamsLength?: number;
}

/**
 * Encodes an ADD payload with msgspec's choices (smallest ints, float64 floats, smallest headers). Throws
 * WireEncodeError naming the field for a value the wire cannot carry, or for a non-default field the chosen form
 * would drop. Does not validate sampling ranges (see `validateSamplingParams`).
 */
export function encodeTokenizedGenerateReqInput(
  req: TokenizedGenerateReqInput,
  opts: EncodeRequestOptions = {},
): Uint8Array {
  const form = opts.form ?? 'prefix';
  let length: number;
  if (form === 'prefix') length = PREFIX_FORM_LENGTH;
  else if (form === 'full')
    length =
      req.data_parallel_rank === null || req.data_parallel_rank === undefined ? FULL_FORM_LENGTH : FULL_FORM_LENGTH + 1;
  else length = form;
  const root = 'TokenizedGenerateReqInput';
  if (req === null || typeof req !== 'object') throw new WireEncodeError(root, 'expected an object');
  const w = scratch;
  w.reset();
  const samplingLength = opts.samplingParamsLength;
  if (length === PREFIX_FORM_LENGTH && samplingLength === undefined && writePrefixFast(w, req)) return w.take();
  w.reset();
  tokenizedGenerateReqInputCodec.encodeWith(w, req, root, {
    length,
    fieldEncoders:
      samplingLength === undefined
        ? undefined
        : {
            sampling_params: (wr, value, path) =>
              samplingParamsCodec.encodeWith(wr, value, path, { length: samplingLength }),
          },
  });
  return w.take();
}

/** Fields 10.. of the prefix form's omitted tail (4.3): each must hold its default for the form to drop it. */
function tailIsDefault(r: TokenizedGenerateReqInput): boolean {
  return (
    r.input_embeds === null &&
    r.session_params === null &&
    r.custom_logit_processor === null &&
    r.return_hidden_states === false &&
    Object.is(r.created_time, 0) &&
    r.bootstrap_host === null &&
    r.bootstrap_port === null &&
    r.bootstrap_room === null &&
    r.input_multi_ids === null &&
    r.input_extra_infos === null &&
    r.input_ids_unpadded === null &&
    r.multimodal_inputs === null &&
    r.validation_error === null &&
    r.data_parallel_rank === null
  );
}

/** Writes `ids` (an array) as `list[int]` when every element is a safe integer; false (partly written) otherwise. */
function writeSafeInts(w: MsgpackWriter, ids: readonly unknown[], path: string): boolean {
  w.writeArrayHeader(ids.length);
  for (let i = 0; i < ids.length; i++) {
    const x = ids[i];
    if (typeof x !== 'number' || !Number.isSafeInteger(x)) return false;
    w.writeInt(x, path);
  }
  return true;
}

/** A nullable `str | list[str]` field; false (partly written) for anything the fast path leaves to the codec. */
function writeStrOrStrList(w: MsgpackWriter, v: unknown, path: string): boolean {
  if (v === null) w.writeNil();
  else if (typeof v === 'string') w.writeStr(v, path);
  else if (Array.isArray(v)) {
    w.writeArrayHeader(v.length);
    for (const x of v) {
      if (typeof x !== 'string') return false;
      w.writeStr(x, path);
    }
  } else return false;
  return true;
}

const SP = 'TokenizedGenerateReqInput.sampling_params';

/**
 * The prefix form (11 elements, 4.3) of the common ADD written field by field: the same writer calls, in the same
 * order, as `tokenizedGenerateReqInputCodec.encodeWith` with `length` 11, so the same bytes (issue 9, CPU per
 * request: the schema walk took ~2 µs of a ~3 µs encode). Returns false, with `w` partly written, for any value it
 * does not handle (a non-default tail field, `logit_bias` or `custom_params` set, a value of an unexpected type,
 * an absent field); the caller then resets `w` and runs the codec, which encodes it or throws its own error. Throws
 * nothing itself: a writer error (a lone surrogate, an unsafe integer) also returns false.
 */
function writePrefixFast(w: MsgpackWriter, r: TokenizedGenerateReqInput): boolean {
  const sp = r.sampling_params;
  if (
    typeof r.rid !== 'string' ||
    r.http_worker_ipc !== null ||
    r.input_text !== null ||
    !Array.isArray(r.input_ids) ||
    sp === null ||
    typeof sp !== 'object' ||
    typeof r.return_logprob !== 'boolean' ||
    typeof r.logprob_start_len !== 'number' ||
    typeof r.top_logprobs_num !== 'number' ||
    r.token_ids_logprob !== null ||
    typeof r.stream !== 'boolean' ||
    !tailIsDefault(r) ||
    sp.custom_params !== null ||
    sp.logit_bias !== null
  ) {
    return false;
  }
  try {
    w.writeArrayHeader(PREFIX_FORM_LENGTH);
    w.writeStr(TOKENIZED_GENERATE_REQ_INPUT_TAG, 'TokenizedGenerateReqInput._tag');
    w.writeStr(r.rid, 'TokenizedGenerateReqInput.rid');
    w.writeNil();
    w.writeNil();
    if (!writeSafeInts(w, r.input_ids, 'TokenizedGenerateReqInput.input_ids')) return false;
    if (!writeSamplingFast(w, sp)) return false;
    w.writeBool(r.return_logprob, 'TokenizedGenerateReqInput.return_logprob');
    w.writeInt(r.logprob_start_len, 'TokenizedGenerateReqInput.logprob_start_len');
    w.writeInt(r.top_logprobs_num, 'TokenizedGenerateReqInput.top_logprobs_num');
    w.writeNil();
    w.writeBool(r.stream, 'TokenizedGenerateReqInput.stream');
    return true;
  } catch {
    return false;
  }
}

/** An int field that may be nil (`nullable(int)`); a non-number that is not null returns false. */
function writeNullableInt(w: MsgpackWriter, v: WireInt | null, path: string): boolean {
  if (v === null) w.writeNil();
  else if (typeof v === 'number') w.writeInt(v, path);
  else return false;
  return true;
}

/** A `str | None` field; false for anything else. */
function writeNullableStr(w: MsgpackWriter, v: string | null, path: string): boolean {
  if (v === null) w.writeNil();
  else if (typeof v === 'string') w.writeStr(v, path);
  else return false;
  return true;
}

/** The 29 `SamplingParams` fields (4.4) in wire order, as `samplingParamsCodec` writes them; see `writePrefixFast`. */
function writeSamplingFast(w: MsgpackWriter, p: TokenSpeedSamplingParams): boolean {
  w.writeArrayHeader(29);
  if (!writeNullableInt(w, p.max_new_tokens, `${SP}.max_new_tokens`)) return false;
  if (!writeStrOrStrList(w, p.stop, `${SP}.stop`)) return false;
  if (p.stop_token_ids === null) w.writeNil();
  else if (!Array.isArray(p.stop_token_ids) || !writeSafeInts(w, p.stop_token_ids, `${SP}.stop_token_ids`))
    return false;
  w.writeFloat64(p.temperature, `${SP}.temperature`);
  w.writeFloat64(p.top_p, `${SP}.top_p`);
  if (typeof p.top_k !== 'number') return false;
  w.writeInt(p.top_k, `${SP}.top_k`);
  w.writeFloat64(p.min_p, `${SP}.min_p`);
  w.writeFloat64(p.frequency_penalty, `${SP}.frequency_penalty`);
  w.writeFloat64(p.presence_penalty, `${SP}.presence_penalty`);
  w.writeFloat64(p.repetition_penalty, `${SP}.repetition_penalty`);
  if (typeof p.min_new_tokens !== 'number') return false;
  w.writeInt(p.min_new_tokens, `${SP}.min_new_tokens`);
  if (
    !writeNullableStr(w, p.json_schema, `${SP}.json_schema`) ||
    !writeNullableStr(w, p.regex, `${SP}.regex`) ||
    !writeNullableStr(w, p.ebnf, `${SP}.ebnf`) ||
    !writeNullableStr(w, p.structural_tag, `${SP}.structural_tag`)
  ) {
    return false;
  }
  w.writeBool(p.ignore_eos, `${SP}.ignore_eos`);
  w.writeBool(p.skip_special_tokens, `${SP}.skip_special_tokens`);
  w.writeBool(p.spaces_between_special_tokens, `${SP}.spaces_between_special_tokens`);
  w.writeBool(p.no_stop_trim, `${SP}.no_stop_trim`);
  if (!writeNullableInt(w, p.thinking_budget, `${SP}.thinking_budget`)) return false;
  w.writeNil(); // custom_params (null: checked by the caller)
  if (!writeNullableInt(w, p.stream_interval, `${SP}.stream_interval`)) return false;
  w.writeNil(); // logit_bias (null: checked by the caller)
  if (!writeNullableInt(w, p.seed, `${SP}.seed`) || !writeNullableInt(w, p.logprobs, `${SP}.logprobs`)) return false;
  if (typeof p.n !== 'number') return false;
  w.writeInt(p.n, `${SP}.n`);
  if (!writeStrOrStrList(w, p.stop_strs, `${SP}.stop_strs`)) return false;
  if (typeof p.stop_str_max_len !== 'number') return false;
  w.writeInt(p.stop_str_max_len, `${SP}.stop_str_max_len`);
  w.writeBool(p.is_normalized, `${SP}.is_normalized`);
  return true;
}

/**
 * The writer every ADD is encoded in (synchronously, one at a time), so an encode allocates only its result (a copy
 * of exactly its size: the transport may keep a reference to it until the send completed).
 */
const scratch = new MsgpackWriter(512);

/**
 * Decodes an ADD payload as the engine's msgspec decoder does (engine-wire.md 3.2, 3.4): tag checked, at least 6
 * elements, absent trailing fields defaulted (nested `SamplingParams` too), extra trailing elements drained,
 * strict scalar typing, trailing bytes refused. Does **not** run the engine's post-decode normalization or
 * validation. Throws WireDecodeError naming the field (e.g. `TokenizedGenerateReqInput.sampling_params.max_new_tokens:
 * expected int | null, got float64`).
 */
export function decodeTokenizedGenerateReqInput(bytes: Uint8Array): TokenizedGenerateReqInput {
  return decodeMessage(tokenizedGenerateReqInputCodec, bytes, 'TokenizedGenerateReqInput');
}
