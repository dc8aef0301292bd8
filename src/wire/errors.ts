/**
 * Errors of the msgpack wire layer (engine-wire.md section 3, "Codec rules").
 *
 * Every message names the struct and the field path that was wrong, for example
 * `BatchTokenIDOutSlim.output_ids[0][1]: expected int, got float64`, so a log line is enough to find the bad byte.
 * Decoding errors come from malformed external input (an engine's bytes) and must never crash the process:
 * callers catch them and count them (engine-wire.md 1.8). Encoding errors are programming or validation errors
 * on the gateway side (a value the wire cannot carry, or one TokenSpeed would answer with a terminal abort,
 * engine-wire.md 4.6).
 */

/** Joins a path and a problem: `"<path>: <problem>"`, or just the problem when the path is empty. */
function withPath(path: string, problem: string): string {
  return path === '' ? problem : `${path}: ${problem}`;
}

/**
 * Bytes that do not decode as the expected wire struct: wrong msgpack type for the field's declared type,
 * truncated input, trailing bytes, wrong tag, too-short positional array, ragged columns, bad frames.
 * `path` is the struct name plus the field path (`TokenizedGenerateReqInput.sampling_params.max_new_tokens`),
 * or a frame description (`request frames`); `problem` is what was wrong with it.
 */
export class WireDecodeError extends Error {
  /** Where the problem is: struct name and field path (may be empty for top-level framing problems). */
  readonly path: string;
  /** What was wrong, without the path. */
  readonly problem: string;

  constructor(path: string, problem: string) {
    super(withPath(path, problem));
    this.name = 'WireDecodeError';
    this.path = path;
    this.problem = problem;
  }
}

/**
 * A handshake payload (engine-wire.md sections 2.3-2.5) that does not decode or carries a value the gateway
 * refuses (an unknown `status`, an unknown `dtype`, a missing required key). Subclass of `WireDecodeError`.
 */
export class HandshakeDecodeError extends WireDecodeError {
  constructor(path: string, problem: string) {
    super(path, problem);
    this.name = 'HandshakeDecodeError';
  }
}

/**
 * A value the wire cannot carry (a non-integral number for an int field, an integer outside
 * [-2^63, 2^64-1], a non-string where a string is declared) or one the gateway refuses to send because the
 * engine would answer it with a silent terminal abort (engine-wire.md 4.6). `path` names the field.
 */
export class WireEncodeError extends Error {
  /** The struct name and field path of the offending value. */
  readonly path: string;
  /** What was wrong, without the path. */
  readonly problem: string;

  constructor(path: string, problem: string) {
    super(withPath(path, problem));
    this.name = 'WireEncodeError';
    this.path = path;
    this.problem = problem;
  }
}
