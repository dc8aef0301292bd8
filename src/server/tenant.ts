/**
 * Which tenant a request belongs to (issue 30 part 1), for flow control's fairness (engine-client/flow-control.ts),
 * its priority bands (priority-band.ts) and the per-tenant accounting.
 * - A key of the keys file (`--api-keys-file`, keys-file.ts) belongs to its named tenant, with that tenant's bands.
 * - Each `--api-key` is a tenant of its own, named `key:` + the first 12 hex digits of its SHA-256 (stable across
 *   restarts and key order, and never the key itself: the name appears in logs and metrics), with the default bands.
 * - With keys (either kind), the fairness header is ignored: a client cannot pick another tenant.
 * - Without keys, the `x-gateway-fairness-id` header names it (the Gateway API Inference Extension's header):
 *   printable ASCII, at most `MAX_FAIRNESS_ID_CHARS` characters; absent: the `default` tenant.
 */
import { createHash } from 'node:crypto';
import { keyMatcher } from './auth-keys.js';
import { badRequest, quoteValue } from './errors.js';
import { parseKeysFile, readKeysFile, type KeysFile, type TenantPolicy } from './keys-file.js';
import { DEFAULT_PRIORITY_BAND, DEFAULT_TENANT } from '../engine-client/flow-control.js';

export { DEFAULT_TENANT };

/** The header naming a request's tenant when the gateway has no API keys (Node lower-cases header names). */
export const FAIRNESS_ID_HEADER = 'x-gateway-fairness-id';
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
 * The tenant a request names when the gateway has no keys: its fairness header, else `DEFAULT_TENANT`.
 * @throws ApiError 400 (`invalid_fairness_id`) for a fairness id that is too long or not printable ASCII.
 */
export function fairnessTenant(headers: Record<string, string | string[] | undefined>): string {
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

/** The policy of a tenant the keys file does not name: the default band, no higher. */
function defaultPolicy(name: string): TenantPolicy {
  return { name, priority: DEFAULT_PRIORITY_BAND, maxPriority: DEFAULT_PRIORITY_BAND, budget: null };
}

/**
 * The gateway's keys and tenants: the `--api-key` keys and those of the keys file (re-read by `reload`, on SIGHUP).
 * `matches` is the API-key check (by digest, auth-keys.ts); `policyOf` a request's tenant.
 */
export class TenantDirectory {
  /** Every key's tenant now: the `--api-key` keys' own, then the keys file's (which wins for a key in both). */
  private byKey: ReadonlyMap<string, TenantPolicy> = new Map();
  private match: (presented: string) => boolean = () => false;
  /** The `--api-key` keys' tenants, computed once (a digest each). */
  private readonly ownTenants: ReadonlyMap<string, TenantPolicy>;

  /**
   * `keysText`: the keys file's content as read elsewhere (a `--workers` front gets it from the primary, which alone
   * reads the file); null: read `keysFile` here.
   * @throws KeysFileError when the keys file cannot be read or parsed; RangeError for an empty `apiKeys` entry.
   */
  constructor(
    apiKeys: readonly string[],
    readonly keysFile: string | null,
    keysText: string | null = null,
  ) {
    if (apiKeys.some((k) => k.length === 0)) throw new RangeError('an API key must not be empty');
    this.ownTenants = new Map(apiKeys.map((k) => [k, defaultPolicy(keyTenant(k))]));
    this.use(keysFile === null ? null : this.parse(keysFile, keysText));
  }

  /** Whether requests need a key: some `--api-key`, or a keys file (even one with no keys yet: then nobody gets in). */
  get keyed(): boolean {
    return this.ownTenants.size > 0 || this.keysFile !== null;
  }

  /** Whether `presented` is one of the keys now (auth-keys.ts `keyMatcher`). */
  matches(presented: string): boolean {
    return this.match(presented);
  }

  /**
   * The tenant of a request from its headers (see the module comment; the key was verified by auth.ts first).
   * @throws ApiError 400 (`invalid_fairness_id`) for a bad fairness id when the gateway has no keys.
   */
  policyOf(headers: Record<string, string | string[] | undefined>): TenantPolicy {
    if (!this.keyed) return defaultPolicy(fairnessTenant(headers));
    const auth = headers.authorization;
    const token = bearerToken(Array.isArray(auth) ? auth[0] : auth);
    if (token === null) return defaultPolicy(DEFAULT_TENANT);
    return this.byKey.get(token) ?? defaultPolicy(keyTenant(token));
  }

  /**
   * Read the keys file again (or take `keysText`, its content read elsewhere) and use it from now on (requests already
   * admitted keep their tenant). Returns the counts read.
   * @throws KeysFileError (the file as it was stays in use) or RangeError without a keys file.
   */
  reload(keysText: string | null = null): { tenants: number; keys: number } {
    if (this.keysFile === null) throw new RangeError('no --api-keys-file to reload');
    const file = this.parse(this.keysFile, keysText);
    this.use(file);
    return { tenants: file.tenants, keys: file.byKey.size };
  }

  private parse(path: string, text: string | null): KeysFile {
    // Content read elsewhere was checked there (the `--workers` primary): no second duplicate scan here.
    return text === null ? readKeysFile(path) : parseKeysFile(text, path, false);
  }

  /** Take `file`'s keys beside the `--api-key` ones (the key check and the tenants change together). */
  private use(file: KeysFile | null): void {
    this.byKey = new Map([...this.ownTenants, ...(file?.byKey ?? [])]);
    this.match = keyMatcher([...this.byKey.keys()]);
  }
}
