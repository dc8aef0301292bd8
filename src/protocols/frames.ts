/**
 * Raw (non-msgpack) frame-level pieces of the wire: the `ENGINE_CORE_DEAD` sentinel (engine-wire.md 1.7) and the
 * engine-side check of a request message `[type, payload, aux...]` (engine-wire.md 1.6; TokenSpeed
 * `zmq_wire.decode_request_frames`).
 */
import { RequestType } from './types.js';
import type { RequestTypeByte } from './types.js';
import { WireDecodeError } from '../wire/errors.js';

/**
 * The 16 ASCII bytes `ENGINE_CORE_DEAD` (hex `454e47494e455f434f52455f44454144`) an engine pushes as one raw frame on
 * its output socket when it shuts down or fails (engine-wire.md 1.7; vector `engine_core_dead`). Shared, do not
 * mutate (it is frozen only by convention, typed arrays cannot be frozen).
 */
export const ENGINE_CORE_DEAD: Uint8Array = new TextEncoder().encode('ENGINE_CORE_DEAD');

/**
 * True when `frame` is exactly the `ENGINE_CORE_DEAD` sentinel. Must be checked on frame 0 of every output message
 * before msgpack decoding (its first byte `0x45` would otherwise decode as fixint 69; engine-wire.md 1.7).
 */
export function isEngineCoreDead(frame: Uint8Array): boolean {
  if (frame.length !== ENGINE_CORE_DEAD.length) return false;
  for (let i = 0; i < frame.length; i++) {
    if (frame[i] !== ENGINE_CORE_DEAD[i]) return false;
  }
  return true;
}

/** The request type bytes an engine accepts by default: add, abort, start DP wave, utility (engine-wire.md 1.6). */
const ALL_REQUEST_TYPES: readonly RequestTypeByte[] = Object.values(RequestType);

/** A request message as the engine's DEALER sees it, split into its parts. */
export interface ParsedRequestFrames {
  /** The single raw type byte (engine-wire.md 1.6). */
  type: RequestTypeByte;
  /** The msgpack payload (frame 1). */
  payload: Uint8Array;
  /** Aux frames 2.. (never used by the text path). */
  aux: Uint8Array[];
}

/**
 * Checks a request message `[type, payload, ...aux]` as the engine receives it (the identity frame is already
 * stripped by ZMQ) the way TokenSpeed's `decode_request_frames` does (engine-wire.md 1.6; vectors
 * `inv_frames_single_frame`, `inv_frames_two_byte_type`, `inv_frames_unknown_type_byte`).
 * `allowed` lists the type bytes this engine knows (default: all four of `RequestType`; a TokenSpeed engine
 * knows only ADD and ABORT).
 * Throws WireDecodeError (path `request frames`) on fewer than 2 frames, a type frame that is not exactly
 * one byte, or an unknown type byte. Does not decode the payload.
 */
export function parseRequestFrames(
  frames: readonly Uint8Array[],
  allowed: readonly RequestTypeByte[] = ALL_REQUEST_TYPES,
): ParsedRequestFrames {
  if (frames.length < 2) {
    throw new WireDecodeError('request frames', `need at least 2 frames (type, payload), got ${frames.length}`);
  }
  const typeFrame = frames[0];
  if (typeFrame.length !== 1) {
    throw new WireDecodeError(
      'request frames',
      `type frame must be exactly 1 byte, got ${typeFrame.length} bytes (${Buffer.from(typeFrame).toString('hex')})`,
    );
  }
  const byte = typeFrame[0];
  const type = allowed.find((t) => t === byte);
  if (type === undefined) {
    throw new WireDecodeError('request frames', `unknown request type byte 0x${byte.toString(16).padStart(2, '0')}`);
  }
  return { type, payload: frames[1], aux: frames.slice(2) };
}
