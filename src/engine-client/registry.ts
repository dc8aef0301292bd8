/**
 * The request registry (dp-routing.md section 2): `closed` flag plus request id → live entry. Plain data; every
 * method is synchronous, so it is never held across an `await` (section 1).
 */
import { IdTable } from '../collections/id-table.js';
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
 */
export interface RegistryEntry {
  readonly requestId: string;
  readonly stream: RequestStreamImpl;
  engineIndex: number | null;
  service?: ServiceSample;
}

/** Section 2's registry. Sizes are request counts. */
export class RequestRegistry {
  /** An `IdTable`, not a `Map`: one entry per request comes and goes (collections/id-table.ts says why). */
  private readonly entries = new IdTable<RegistryEntry>();
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
    return true;
  }

  /** Remove and return the entry for `id` (undefined when absent). */
  remove(id: string): RegistryEntry | undefined {
    const entry = this.entries.get(id);
    if (entry) this.entries.delete(id);
    return entry;
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
    return all;
  }

  /** The live entries recorded on DP rank `rank`, in registration order. */
  onRank(rank: number): RegistryEntry[] {
    return this.entries.values().filter((e) => e.engineIndex === rank);
  }
}
