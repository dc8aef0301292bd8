/**
 * The rank records file of one engine group (issue 26 part 6): what a gateway keeps of each rank's handshake beside
 * the group's sockets, so that a gateway started later on the same endpoints can adopt ranks that are still running
 * (transport/adoption.ts). Engines say HELLO only once, at their own start-up (engine-wire.md 2.1); a gateway that
 * dies takes their ready responses with it, and a running engine never sends another one.
 *
 * File: `<P>-ranks.json` beside `<P>-in.sock` / `<P>-out.sock`, in the socket directory that `prepareSocketPaths`
 * checked (owned by this user, not writable by group or others), mode 0600, replaced atomically (a temporary file
 * in the same directory, then rename) so a reader never sees half a file. JSON, one object:
 *
 * ```
 * { "format": "model-gateway rank records", "version": 1, "workerUrl": "ipc:///…", "engine": "tokenspeed",
 *   "gatewayPid": 1234, "writtenAt": "2026-…Z",
 *   "ranks": [ { "engineIndex": 0, "identity": "0000", "joinedAt": "2026-…Z", "ready": { "maxModelLen": 32768, … } } ] }
 * ```
 *
 * `ready` is the decoded ready response (protocols/types.ts `ReadyResponse`, engine-wire.md 2.5) as the gateway used
 * it; `identity` is the rank's routing identity in hex (engine-wire.md 1.5), which must be the 2-byte encoding of
 * `engineIndex`. `gatewayPid` names the gateway that wrote the file last (the stale-file sweep, socket-paths.ts, only
 * touches the sockets of a file whose writer is gone).
 *
 * What makes a record stale, and how it is treated: a rank that completes a new handshake overwrites its record (a new
 * process); a record whose identity never connects to the new gateway's input socket within the adoption window is
 * ignored and dropped from the file (the engine is gone, or is restarting and will say HELLO); a record naming an
 * index outside the group's slots, an identity that is not its index's, a ready response that does not validate, or a
 * file written for another worker URL or another engine family is ignored with a warning. A file that does not parse
 * is tolerated: a warning, no rank adopted, and the next join writes a fresh one; the corrupt file is kept beside it as
 * `<file>.corrupt` (the running ranks' handshake facts may still be read off it by hand, and the next join would
 * otherwise overwrite them). Reading and writing never throw.
 */
import { readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
import { encodeEngineIdentity } from '../protocols/identity.js';
import type { ReadyResponse, ReadyResponseForm } from '../protocols/types.js';
import { errorMessage, hex } from './describe.js';
import type { EngineEndpoints } from './endpoints.js';
import { silentLogger, type MinimalLogger } from '../logging.js';

/** The `format` marker of a rank records file. */
export const RANK_RECORDS_FORMAT = 'model-gateway rank records';
/** The file layout version this code writes and reads. */
export const RANK_RECORDS_VERSION = 1;
/** The suffix of the file after the worker's ipc path `<P>`. */
export const RANK_RECORDS_SUFFIX = '-ranks.json';

/** One rank's record: its engine index, routing identity and ready response, and when it joined (Unix ms). */
export interface RankRecord {
  engineIndex: number;
  identity: Uint8Array;
  ready: ReadyResponse;
  joinedAtMs: number;
}

/** A parsed file: who wrote it, for which group, and the valid records (by engine index). */
export interface RankRecordsFile {
  workerUrl: string;
  /** The engine family the writing gateway spoke to the group (`tokenspeed`, `vllm`). */
  engine: string;
  gatewayPid: number;
  records: Map<number, RankRecord>;
}

/** What a reader expects of the file (anything else is ignored with a warning). */
export interface RankRecordsExpectation {
  workerUrl: string;
  engine: string;
  /** Rank slots of the group: valid indexes are 0..dpSize−1. */
  dpSize: number;
}

/** The records file of a worker: `<P>-ranks.json`. */
export function rankRecordsPath(endpoints: Pick<EngineEndpoints, 'ipcPath'>): string {
  return `${endpoints.ipcPath}${RANK_RECORDS_SUFFIX}`;
}

const FORMS: readonly ReadyResponseForm[] = ['short', 'partial', 'long'];

/** Integer fields of `ReadyResponse` that must be present, and those that may be null. */
const INT_FIELDS = [
  'maxModelLen',
  'tensorParallelSize',
  'pipelineParallelSize',
  'decodeContextParallelSize',
  'dataParallelRank',
  'maxNumSeqs',
  'maxNumBatchedTokens',
] as const;
const NULLABLE_INT_FIELDS = [
  'numGpuBlocks',
  'prefixGranularity',
  'worldSize',
  'dataParallelSize',
  'kvCacheSizeTokens',
] as const;
const NULLABLE_STRING_FIELDS = ['dtype', 'vllmVersion'] as const;

/**
 * A `ReadyResponse` from its JSON form: every field of the type checked (integers, nullable integers and strings, a
 * finite or null `kvCacheMaxConcurrency`, a known `form`, string `notes`); unknown keys are dropped. Throws Error naming
 * the first bad field.
 */
export function readyFromJson(value: unknown): ReadyResponse {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new Error('ready: not an object');
  const o = value as Record<string, unknown>;
  const int = (k: string, v: unknown): number => {
    if (typeof v !== 'number' || !Number.isSafeInteger(v))
      throw new Error(`ready.${k}: expected an integer, got ${JSON.stringify(v)}`);
    return v;
  };
  const out: Record<string, unknown> = {};
  for (const k of INT_FIELDS) out[k] = int(k, o[k]);
  for (const k of NULLABLE_INT_FIELDS) out[k] = o[k] === null || o[k] === undefined ? null : int(k, o[k]);
  for (const k of NULLABLE_STRING_FIELDS) {
    const v = o[k];
    if (v !== null && v !== undefined && typeof v !== 'string')
      throw new Error(`ready.${k}: expected a string or null`);
    out[k] = v ?? null;
  }
  if (typeof o['instanceId'] !== 'string') throw new Error('ready.instanceId: expected a string');
  out['instanceId'] = o['instanceId'];
  const c = o['kvCacheMaxConcurrency'];
  if (c !== null && c !== undefined && !(typeof c === 'number' && Number.isFinite(c)))
    throw new Error('ready.kvCacheMaxConcurrency: expected a number or null');
  out['kvCacheMaxConcurrency'] = c ?? null;
  if (o['form'] !== undefined) {
    if (!FORMS.includes(o['form'] as ReadyResponseForm))
      throw new Error(`ready.form: expected one of ${FORMS.join(', ')}`);
    out['form'] = o['form'];
  }
  if (o['notes'] !== undefined) {
    if (!Array.isArray(o['notes']) || !o['notes'].every((n) => typeof n === 'string'))
      throw new Error('ready.notes: expected a list of strings');
    out['notes'] = [...(o['notes'] as string[])];
  }
  return out as unknown as ReadyResponse;
}

/** The file's text for `file` (pretty-printed JSON, a trailing newline). Pure. */
export function encodeRankRecords(file: RankRecordsFile, nowMs: number = Date.now()): string {
  const ranks = [...file.records.values()]
    .sort((a, b) => a.engineIndex - b.engineIndex)
    .map((r) => ({
      engineIndex: r.engineIndex,
      identity: hex(r.identity),
      joinedAt: new Date(r.joinedAtMs).toISOString(),
      ready: r.ready,
    }));
  const body = {
    format: RANK_RECORDS_FORMAT,
    version: RANK_RECORDS_VERSION,
    workerUrl: file.workerUrl,
    engine: file.engine,
    gatewayPid: file.gatewayPid,
    writtenAt: new Date(nowMs).toISOString(),
    ranks,
  };
  return `${JSON.stringify(body, null, 1)}\n`;
}

/**
 * Parses a file's text. Throws Error (the file is corrupt: not JSON, not this format or version, no `ranks` list)
 * with the reason. Records that are individually invalid are left out and described in `rejected` (one line each).
 */
export function parseRankRecords(text: string): { file: RankRecordsFile; rejected: string[] } {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw new Error(`not JSON (${errorMessage(error)})`);
  }
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new Error('not a JSON object');
  const o = body as Record<string, unknown>;
  if (o['format'] !== RANK_RECORDS_FORMAT)
    throw new Error(`format is ${JSON.stringify(o['format'])}, not ${JSON.stringify(RANK_RECORDS_FORMAT)}`);
  if (o['version'] !== RANK_RECORDS_VERSION)
    throw new Error(`version ${JSON.stringify(o['version'])} is not ${RANK_RECORDS_VERSION}`);
  if (typeof o['workerUrl'] !== 'string' || typeof o['engine'] !== 'string')
    throw new Error('workerUrl and engine must be strings');
  if (typeof o['gatewayPid'] !== 'number' || !Number.isSafeInteger(o['gatewayPid']))
    throw new Error('gatewayPid must be an integer');
  if (!Array.isArray(o['ranks'])) throw new Error('ranks must be a list');
  const records = new Map<number, RankRecord>();
  const rejected: string[] = [];
  for (const [i, raw] of (o['ranks'] as unknown[]).entries()) {
    try {
      const record = recordFromJson(raw);
      if (records.has(record.engineIndex)) throw new Error(`a second record for engine index ${record.engineIndex}`);
      records.set(record.engineIndex, record);
    } catch (error) {
      rejected.push(`ranks[${i}]: ${errorMessage(error)}`);
    }
  }
  return { file: { workerUrl: o['workerUrl'], engine: o['engine'], gatewayPid: o['gatewayPid'], records }, rejected };
}

function recordFromJson(raw: unknown): RankRecord {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new Error('not an object');
  const r = raw as Record<string, unknown>;
  const index = r['engineIndex'];
  if (typeof index !== 'number' || !Number.isInteger(index) || index < 0 || index > 0xffff)
    throw new Error(`engineIndex ${JSON.stringify(index)} is not in 0..65535`);
  const identity = encodeEngineIdentity(index);
  if (r['identity'] !== hex(identity)) {
    throw new Error(
      `identity ${JSON.stringify(r['identity'])} is not engine index ${index}'s (${hex(identity)}, engine-wire.md 1.5)`,
    );
  }
  const joinedAtMs = typeof r['joinedAt'] === 'string' ? Date.parse(r['joinedAt']) : Number.NaN;
  if (!Number.isFinite(joinedAtMs)) throw new Error('joinedAt is not a date');
  return { engineIndex: index, identity, ready: readyFromJson(r['ready']), joinedAtMs };
}

/**
 * Reads the records at `path` that apply to the group `expect` describes, by engine index. Never throws: a missing
 * file gives an empty map; an unreadable or corrupt file, a file of another worker URL or engine family, and invalid
 * or out-of-range records are logged at warn and ignored. Also returns the file's writer pid (null without a file).
 */
export function readRankRecords(
  path: string,
  expect: RankRecordsExpectation,
  log: MinimalLogger = silentLogger,
): { records: Map<number, RankRecord>; gatewayPid: number | null } {
  const none = { records: new Map<number, RankRecord>(), gatewayPid: null };
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') {
      log.warn(
        { path, err: errorMessage(error) },
        'cannot read the rank records file; no rank of the previous gateway is adopted',
      );
    }
    return none;
  }
  let parsed: ReturnType<typeof parseRankRecords>;
  try {
    parsed = parseRankRecords(text);
  } catch (error) {
    let keptAs: string | null = `${path}.corrupt`;
    try {
      renameSync(path, keptAs);
    } catch {
      keptAs = null;
    }
    log.warn(
      { path, err: errorMessage(error), keptAs },
      'the rank records file is corrupt and is ignored: no rank of the previous gateway is adopted (ranks join through the handshake; the next join rewrites the file)',
    );
    return none;
  }
  const { file, rejected } = parsed;
  for (const why of rejected) log.warn({ path, why }, 'rank record ignored');
  if (file.workerUrl !== expect.workerUrl || file.engine !== expect.engine) {
    log.warn(
      {
        path,
        recorded: { workerUrl: file.workerUrl, engine: file.engine },
        expected: { workerUrl: expect.workerUrl, engine: expect.engine },
      },
      'the rank records file was written for another worker URL or engine family; ignored (no rank adopted)',
    );
    return { records: new Map(), gatewayPid: file.gatewayPid };
  }
  for (const index of [...file.records.keys()]) {
    if (index < expect.dpSize) continue;
    file.records.delete(index);
    log.warn(
      { path, engineIndex: index, dpSize: expect.dpSize },
      `rank record of engine index ${index} ignored: this group has ${expect.dpSize} rank slot(s)`,
    );
  }
  return { records: file.records, gatewayPid: file.gatewayPid };
}

/**
 * Replaces the file at `path` with `file` atomically (write `<path>.<pid>.tmp` with mode 0600, then rename). Never
 * throws: a failure is logged at warn (adoption after a restart then finds an older file, or none) and returns false.
 */
export function writeRankRecords(path: string, file: RankRecordsFile, log: MinimalLogger = silentLogger): boolean {
  const tmp = `${path}.${process.pid}.tmp`;
  try {
    writeFileSync(tmp, encodeRankRecords(file), { mode: 0o600 });
    renameSync(tmp, path);
    return true;
  } catch (error) {
    log.warn(
      { path, err: errorMessage(error) },
      'cannot write the rank records file; a gateway restarted later may not adopt these ranks',
    );
    try {
      unlinkSync(tmp);
    } catch {
      // nothing was written, or it is gone already
    }
    return false;
  }
}
