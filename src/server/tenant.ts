/**
 * Which tenant a request belongs to (issue 30 part 1), for flow control's fairness (engine-client/flow-control.ts).
 * - With API keys (`--api-key`), each key is a tenant, named `key:` + the first 12 hex digits of its SHA-256 (stable
 *   across restarts and key order, and never the key itself: the name appears in logs and metrics). The fairness
 *   header is ignored then: a client cannot pick another tenant.
 * - Without keys, the `x-gateway-fairness-id` header names it (the Gateway API Inference Extension's header):
 *   printable ASCII, at most `MAX_FAIRNESS_ID_CHARS` characters; absent: the `default` tenant.
 */
import { createHash } from 'node:crypto';
import { badRequest, quoteValue } from './errors.js';

/** The header naming a request's tenant when the gateway has no API keys (Node lower-cases header names). */
export const FAIRNESS_ID_HEADER = 'x-gateway-fairness-id';
/** The tenant of a request that names none. */
export const DEFAULT_TENANT = 'default';
/** The longest fairness id accepted (characters). */
export const MAX_FAIRNESS_ID_CHARS = 64;

/** The tenant name of an API key (see the module comment). */
export function keyTenant(key: string): string {
  return `key:${createHash('sha256').update(key, 'utf8').digest('hex').slice(0, 12)}`;
}

/** The bearer token of an `Authorization` header value, or null. */
function bearerToken(value: string | undefined): string | null {
  if (value === undefined) return null;
  // Everything after the scheme, as the key check reads it (a key may hold spaces).
  const m = /^\s*bearer\s+(.+?)\s*$/i.exec(value);
  return m === null ? null : m[1]!;
}

/**
 * The tenant of a request from its headers: `keyed` = the gateway checks API keys (then the request's key, already
 * verified by auth.ts, names it); else the fairness header, else `DEFAULT_TENANT`.
 * @throws ApiError 400 (`invalid_fairness_id`) for a fairness id that is too long or not printable ASCII.
 */
export function tenantOf(headers: Record<string, string | string[] | undefined>, keyed: boolean): string {
  if (keyed) {
    const auth = headers.authorization;
    const token = bearerToken(Array.isArray(auth) ? auth[0] : auth);
    return token === null ? DEFAULT_TENANT : keyTenant(token);
  }
  const raw = headers[FAIRNESS_ID_HEADER];
  const id = (Array.isArray(raw) ? raw.join(',') : (raw ?? '')).trim();
  if (id === '') return DEFAULT_TENANT;
  if (id.length > MAX_FAIRNESS_ID_CHARS || !/^[\x21-\x7e]+$/.test(id)) {
    throw badRequest(
      `${FAIRNESS_ID_HEADER} must be 1-${MAX_FAIRNESS_ID_CHARS} printable ASCII characters without spaces; got ${quoteValue(id)}`,
      FAIRNESS_ID_HEADER,
      'invalid_fairness_id',
    );
  }
  return id;
}
