/** Small helpers that make transport log lines and error messages name the engine involved. */
import { decodeEngineIdentity } from '../protocols/identity.js';

/** Lowercase hex of some bytes (`00 01` → `"0001"`). */
export function hex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('hex');
}

/**
 * Names an engine by its routing identity: `engine 3 (identity 0300)` for a 2-byte identity, otherwise
 * `identity <hex> (no engine index)` (engine-wire.md 1.5).
 */
export function describeIdentity(identity: Uint8Array): string {
  const index = decodeEngineIdentity(identity);
  return index === null
    ? `identity ${hex(identity) || '<empty>'} (no engine index)`
    : `engine ${index} (identity ${hex(identity)})`;
}

/** The errno-style `code` of an unknown error, if it has one. */
export function errorCode(error: unknown): string | undefined {
  if (typeof error === 'object' && error !== null && 'code' in error) {
    const code = (error as { code: unknown }).code;
    if (typeof code === 'string') return code;
  }
  return undefined;
}

/** The message of an unknown error. */
export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
