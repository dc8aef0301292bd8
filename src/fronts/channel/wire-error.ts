/**
 * Errors as they cross the channel (records.ts `WireError`): what the HTTP layer reads of an error (its kind → HTTP
 * status) and the structured fields of an `EngineClientError` (engine-client/errors.ts `ENGINE_CLIENT_ERROR_FIELDS`),
 * copied and checked from that table.
 */
import {
  ENGINE_CLIENT_ERROR_FIELD_NAMES,
  EngineClientError,
  isEngineClientErrorField,
  isEngineClientErrorKind,
  type EngineClientErrorFields,
} from '../../engine-client/errors.js';
import { ChannelDecodeError, type WireError } from './records.js';

/**
 * `v`, a decoded record's error map, as a `WireError` once checked: a name and a message, an engine-client kind if
 * any, and each structured field of the type the table declares. `where` names the record in the message. Throws
 * `ChannelDecodeError` otherwise.
 */
export function checkedWireError(v: unknown, where: string): WireError {
  if (typeof v !== 'object' || v === null) throw new ChannelDecodeError(`${where}: error must be a map`);
  const e = v as Record<string, unknown>;
  if (typeof e.message !== 'string' || typeof e.name !== 'string')
    throw new ChannelDecodeError(`${where}: error needs a name and a message`);
  if (e.kind !== undefined && !isEngineClientErrorKind(e.kind))
    throw new ChannelDecodeError(`${where}: error kind ${JSON.stringify(e.kind)} is not an engine-client kind`);
  for (const f of ENGINE_CLIENT_ERROR_FIELD_NAMES) {
    if (e[f] !== undefined && !isEngineClientErrorField(f, e[f]))
      throw new ChannelDecodeError(`${where}: error field ${f} has the wrong type`);
  }
  return e as WireError;
}

/** An error as `WireError` (the fields the HTTP layer and logs read; `EngineClientError`'s structured ones kept). */
export function toWireError(err: unknown): WireError {
  if (!(err instanceof Error)) return { name: 'Error', message: String(err) };
  const w: WireError = { name: err.name, message: err.message };
  if (!(err instanceof EngineClientError)) return w;
  w.kind = err.kind;
  for (const f of ENGINE_CLIENT_ERROR_FIELD_NAMES) {
    const v = err[f];
    if (v !== undefined) (w as Record<string, unknown>)[f] = Array.isArray(v) ? [...(v as number[])] : v;
  }
  return w;
}

/**
 * The error a `WireError` stands for: an `EngineClientError` when it has an engine-client kind (decoded records are
 * checked by `wireError`), else an `Error` of that name.
 */
export function fromWireError(w: WireError): Error {
  if (isEngineClientErrorKind(w.kind)) {
    const fields: EngineClientErrorFields = {};
    for (const f of ENGINE_CLIENT_ERROR_FIELD_NAMES)
      if (w[f] !== undefined) (fields as Record<string, unknown>)[f] = w[f];
    return new EngineClientError(w.kind, w.message, fields);
  }
  const err = new Error(w.message);
  err.name = w.name;
  return err;
}
