/**
 * The API keys file (`--api-keys-file`, issue 30 part 1): tenants by name, each with its keys and its priority bands.
 * JSON, read at start and again on SIGHUP (tenant.ts `TenantDirectory.reload`):
 *
 * ```json
 * { "tenants": {
 *     "search":  { "keys": ["sk-search-1"], "priority": "standard", "max_priority": "critical" },
 *     "batch":   { "keys": ["sk-batch-1", "sk-batch-2"], "priority": "sheddable",
 *                  "requests_per_minute": 600, "tokens_per_minute": 2000000 } } }
 * ```
 *
 * - `keys`: the tenant's bearer keys (non-empty strings; a key belongs to one tenant only).
 * - `priority`: the band of its requests that name none (default `standard`).
 * - `max_priority`: the most urgent band its requests may ask for (default: its `priority`); never less urgent than
 *   `priority`.
 * - `requests_per_minute`, `tokens_per_minute`: the tenant's budgets (integers ≥ 1; engine-client/budgets.ts), shared
 *   by all its keys; absent: no limit.
 * Anything else (an unknown field, a band that does not exist, a tenant name that is not 1-64 printable ASCII
 * characters) is refused with the file and the field named: a typo must not silently change who may do what.
 */
import { readFileSync } from 'node:fs';
import { parseDocument } from 'yaml';
import { isBudgetLimit, type BudgetLimits } from '../engine-client/budgets.js';
import {
  bandOrder,
  DEFAULT_PRIORITY_BAND,
  isPriorityBand,
  PRIORITY_BANDS,
  type PriorityBand,
} from './priority-band.js';

/** What a tenant may do: its name (in metrics and logs), its default band, its ceiling and its budget (or null). */
export interface TenantPolicy {
  readonly name: string;
  readonly priority: PriorityBand;
  readonly maxPriority: PriorityBand;
  readonly budget: BudgetLimits | null;
}

/** A parsed keys file: each key's tenant, and how many tenants there are. */
export interface KeysFile {
  readonly byKey: ReadonlyMap<string, TenantPolicy>;
  readonly tenants: number;
}

/** A keys file that cannot be read or does not follow the format; the message names the file and the field. */
export class KeysFileError extends RangeError {
  constructor(message: string) {
    super(message);
    this.name = 'KeysFileError';
  }
}

const TENANT_FIELDS = new Set(['keys', 'priority', 'max_priority', 'requests_per_minute', 'tokens_per_minute']);
const NAME = /^[\x21-\x7e]{1,64}$/;
/** What an `Authorization: Bearer` header can carry unchanged: printable ASCII without spaces. */
const KEY = /^[\x21-\x7e]+$/;
/** Names the gateway gives tenants itself (metrics.ts `OTHER_TENANT`, tenant.ts `keyTenant`): one name, one tenant. */
const RESERVED = /^(other$|key:)/;

/**
 * Parse the text of a keys file (`source` names it in errors). `checkDuplicates`: refuse a name listed twice in one
 * object (about 1 s for a 100,000-key file); false for content another process already checked (a `--workers`
 * front gets the primary's).
 * @throws KeysFileError for anything the module comment refuses.
 */
export function parseKeysFile(text: string, source: string, checkDuplicates = true): KeysFile {
  const fail = (what: string): never => {
    throw new KeysFileError(`${source}: ${what}`);
  };
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    // Not the parser's message: it quotes the text around the error, which can be part of a key.
    const at = /position (\d+)/.exec((err as Error).message)?.[1];
    return fail(`not valid JSON${at !== undefined ? ` (at character ${at})` : ''}`);
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) return fail('expected an object');
  // JSON.parse keeps the last of two equal names: a tenant listed twice would silently lose its first keys.
  const twice = checkDuplicates ? duplicateNameLine(text) : null;
  if (twice !== null) fail(`a name appears twice in one object (line ${twice}): list every tenant and field once`);
  const extra = Object.keys(doc).filter((k) => k !== 'tenants');
  if (extra.length > 0) fail(`unknown field ${JSON.stringify(extra[0])} (expected only "tenants")`);
  const tenants = (doc as { tenants?: unknown }).tenants;
  if (typeof tenants !== 'object' || tenants === null || Array.isArray(tenants)) {
    return fail('"tenants" must be an object of tenant name → { keys, priority, max_priority }');
  }
  const byKey = new Map<string, TenantPolicy>();
  const band = (name: string, field: string, v: unknown, dflt: PriorityBand): PriorityBand => {
    if (v === undefined) return dflt;
    if (!isPriorityBand(v))
      fail(`tenant ${JSON.stringify(name)}: "${field}" must be one of ${PRIORITY_BANDS.join(', ')}`);
    return v as PriorityBand;
  };
  for (const [name, spec] of Object.entries(tenants)) {
    if (!NAME.test(name)) fail(`tenant name ${JSON.stringify(name)} must be 1-64 printable ASCII characters`);
    if (RESERVED.test(name))
      fail(
        `tenant name ${JSON.stringify(name)} is reserved (\`other\` labels tenants past the metrics' bound, \`key:…\` an --api-key's tenant)`,
      );
    if (typeof spec !== 'object' || spec === null || Array.isArray(spec))
      fail(`tenant ${JSON.stringify(name)}: expected an object`);
    const s = spec as Record<string, unknown>;
    const unknown = Object.keys(s).find((k) => !TENANT_FIELDS.has(k));
    if (unknown !== undefined) fail(`tenant ${JSON.stringify(name)}: unknown field ${JSON.stringify(unknown)}`);
    const priority = band(name, 'priority', s.priority, DEFAULT_PRIORITY_BAND);
    const maxPriority = band(name, 'max_priority', s.max_priority, priority);
    if (bandOrder(priority) < bandOrder(maxPriority)) {
      fail(`tenant ${JSON.stringify(name)}: "priority" ${priority} is above its "max_priority" ${maxPriority}`);
    }
    if (!Array.isArray(s.keys) || s.keys.some((k) => typeof k !== 'string' || k.length === 0)) {
      fail(`tenant ${JSON.stringify(name)}: "keys" must be a list of non-empty strings`);
    }
    // A key a client cannot send as a bearer token (spaces, control or non-ASCII characters) would never match.
    const unusable = (s.keys as string[]).findIndex((k) => !KEY.test(k));
    if (unusable >= 0)
      fail(
        `tenant ${JSON.stringify(name)}: "keys"[${unusable}] has characters a bearer token cannot carry (printable ASCII, no spaces)`,
      );
    const limit = (field: string): number | null => {
      const v = s[field];
      if (v === undefined) return null;
      if (!isBudgetLimit(v)) fail(`tenant ${JSON.stringify(name)}: "${field}" must be an integer ≥ 1`);
      return v as number;
    };
    const requestsPerMinute = limit('requests_per_minute');
    const tokensPerMinute = limit('tokens_per_minute');
    const budget =
      requestsPerMinute === null && tokensPerMinute === null ? null : { requestsPerMinute, tokensPerMinute };
    const policy: TenantPolicy = { name, priority, maxPriority, budget };
    for (const key of s.keys as string[]) {
      // Name the tenants, never the key (the message reaches the log).
      const owner = byKey.get(key);
      if (owner !== undefined)
        fail(`a key of tenant ${JSON.stringify(name)} is also a key of ${JSON.stringify(owner.name)}`);
      byKey.set(key, policy);
    }
  }
  return { byKey, tenants: Object.keys(tenants).length };
}

/**
 * The line (1-based) of the first name that appears twice in one JSON object of `text` (valid JSON), or null. Read with
 * the YAML parser (a superset of JSON that refuses duplicate keys); its message is not used: it quotes the line,
 * which can hold a key.
 */
function duplicateNameLine(text: string): number | null {
  const dup = parseDocument(text, { uniqueKeys: true }).errors.find((e) => e.code === 'DUPLICATE_KEY');
  return dup === undefined ? null : (dup.linePos?.[0].line ?? 1);
}

/** The text of the keys file at `path`. @throws KeysFileError when it cannot be read. */
export function readKeysText(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    throw new KeysFileError(`${path}: cannot read it (${(err as Error).message})`);
  }
}

/** Read and parse the keys file at `path`. @throws KeysFileError when it cannot be read or parsed. */
export function readKeysFile(path: string): KeysFile {
  return parseKeysFile(readKeysText(path), path);
}
