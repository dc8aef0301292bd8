/**
 * The TokenSpeed ABORT payload (engine-wire.md 4.7; TokenSpeed `zmq_wire.py`): a **plain msgpack `list[str]`** of
 * rids, not a tagged `AbortReq` struct. `["r1"]` is `91 a2 7231` (`abort_single`); `[]` is `90` and aborts nothing
 * (`abort_empty`). The engine aborts silently: no terminal row comes back for a client abort.
 */
import { decodeMessage, encodeMessage, list, str } from '../../wire/codec.js';

const abortCodec = list(str);

/** Encodes the rids as a msgpack array of str. Throws WireEncodeError (`AbortPayload[i]`) on a non-string rid. */
export function encodeAbortPayload(rids: readonly string[]): Uint8Array {
  return encodeMessage(abortCodec, [...rids], 'AbortPayload');
}

/**
 * Decodes an ABORT payload as the engine does. Throws WireDecodeError for a bare string or a map
 * (`AbortPayload: expected array, got str`), a non-str element (`AbortPayload[0]: expected str, got int`, which
 * also rejects a tagged `["AbortReq", ...]` array carrying non-str fields), truncation or trailing bytes.
 */
export function decodeAbortPayload(bytes: Uint8Array): string[] {
  return decodeMessage(abortCodec, bytes, 'AbortPayload');
}
