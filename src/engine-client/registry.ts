/**
 * The request registry (dp-routing.md section 2): `closed` flag plus request id → live entry. Plain data; every
 * method is synchronous, so it is never held across an `await` (section 1).
 */
import { IdTable } from '../collections/id-table.js';
import { RecentIds } from '../collections/recent-ids.js';
import { EngineClientError } from './errors.js';
import type { RequestStreamImpl } from './request-stream.js';
import type { ServiceSample } from './service-rates.js';

/**
 * One live request.
 * - `stream`: its sink/stream.
 * - `engineIndex`: the DP rank its ADD is sent to (the "recorded rank" of section 14.6); null between registration
 *   and selection (section 3 steps 2-3) and while a submit re-routes after a refused ADD.
 * - `service`: its service-rate sample (service-rates.ts), set when its rank is reserved, so the dispatcher feeds a
 *   batch's rows to it through this entry without looking the id up again (issue 9).
 * - `tokenLimit`: the most new tokens its client may get (tokens: the request's `maxNewTokens`, Infinity when it has
 *   none); `tokens`: how many its rows carried so far. The engine client cuts a row that would pass the limit
 *   (output-contract.ts, issue 26 part 4).
 */
export interface RegistryEntry {
  readonly requestId: string;
  readonly stream: RequestStreamImpl;
  engineIndex: number | null;
  service?: ServiceSample;
  readonly tokenLimit: number;
  tokens: number;
}

/** Section 2's registry. Sizes are request counts. */
export class RequestRegistry {
  /** An `IdTable`, not a `Map`: one entry per request comes and goes (collections/id-table.ts says why). */
  private readonly entries = new IdTable<RegistryEntry>();
  /** Ids removed lately (and ids sent outside the registry, `remember`): bounded fingerprints, recent-ids.ts. */
  private readonly recent = new RecentIds();
  private closedFlag = false;

  /** `not closed` (section 2 `is_alive`): a local flag, checking it sends nothing. */
  get closed(): boolean {
    return this.closedFlag;
  }

  /** Number of live (registered) requests. */
  get size(): number {
    return this.entries.size;
  }

  /**
   * register(id) (section 2): throws EngineClientError `client-closed` ("shutting down") after close/fail_all, or
   * `duplicate-request-id` when `entry.requestId` is live. Runs before any reservation (section 3 step 2).
   */
  register(entry: RegistryEntry): void {
    if (this.closedFlag) throw new EngineClientError('client-closed', 'engine client is shutting down');
    if (this.entries.has(entry.requestId)) {
      throw new EngineClientError(
        'duplicate-request-id',
        `request id ${JSON.stringify(entry.requestId)} is already in flight on this engine client`,
        { requestId: entry.requestId },
      );
    }
    this.entries.set(entry.requestId, entry);
  }

  /** The live entry for `id`, if any. */
  get(id: string): RegistryEntry | undefined {
    return this.entries.get(id);
  }

  /** Remove `entry` if it is still the live entry for its id; returns whether it was. */
  removeEntry(entry: RegistryEntry): boolean {
    if (this.entries.get(entry.requestId) !== entry) return false;
    this.entries.delete(entry.requestId);
    this.recent.add(entry.requestId);
    return true;
  }

  /** Remove and return the entry for `id` (undefined when absent). */
  remove(id: string): RegistryEntry | undefined {
    const entry = this.entries.get(id);
    if (entry) {
      this.entries.delete(id);
      this.recent.add(id);
    }
    return entry;
  }

  /**
   * Whether `id` is live or was let go lately: removed within the last 65 536 removals at least (recent-ids.ts; a
   * 32-bit fingerprint, so a never-seen id answers true with probability ~3 × 10⁻⁵), or passed to `remember`.
   * False means this client never issued it, or forgot it long ago (issue 26 part 4: an unknown id).
   */
  knows(id: string): boolean {
    return this.entries.has(id) || this.recent.has(id);
  }

  /** Count `id` as issued and let go without a registry entry (the revival request of a stalled rank, rank-sender.ts). */
  remember(id: string): void {
    this.recent.add(id);
  }

  /** Set `closed` and remove every entry, returning them (the caller delivers the error or close; section 2). */
  closeAndDrain(): RegistryEntry[] {
    this.closedFlag = true;
    return this.removeAll();
  }

  /** Remove every entry without closing, returning them (a group-scope failure the group recovers from). */
  removeAll(): RegistryEntry[] {
    const all = this.entries.values();
    this.entries.clear();
    for (const e of all) this.recent.add(e.requestId);
    return all;
  }

  /** The live entries recorded on DP rank `rank`, in registration order. */
  onRank(rank: number): RegistryEntry[] {
    return this.entries.values().filter((e) => e.engineIndex === rank);
  }
}
