/**
 * Requests a rank runs for a gateway that died (issue 26 part 6). A rank adopted after a gateway restart
 * (src/transport/adoption.ts) keeps running what the dead gateway sent it, and its output rows for those request ids
 * reach the new gateway, which never issued them: no client waits for them, so they are dropped (dp-routing.md
 * section 2), and the engine must not keep working for them until `max_tokens`. Each such id seen in a non-terminal
 * row from an adopted rank is ABORTed on that rank once (engine-wire.md 4.7, 5.4; an ABORT of an id the engine no
 * longer runs is a no-op, so a late row of this gateway's own cancelled request costs at most one extra ABORT).
 *
 * Bounded memory: at most `MAX_FOREIGN_IDS` ids are remembered over every rank (the oldest forgotten first; a
 * forgotten id that shows up again is ABORTed again, which is harmless). Only a rank's adopted process is watched: a
 * rank that joins through a handshake (a new process) or dies is forgotten. Pure data, no I/O: the engine client
 * sends the ABORTs.
 */

/** Ids remembered as already ABORTed, over every adopted rank. */
export const MAX_FOREIGN_IDS = 16_384;

/** The adopted ranks of one group and the foreign ids already ABORTed on each (see the module docs). */
export class ForeignRequests {
  /** Adopted ranks → whether a foreign id was seen on it yet (for one log line per rank). */
  private readonly adopted = new Map<number, boolean>();
  /** `<rank>:<id>` keys already ABORTed, insertion order = age. */
  private readonly aborted = new Set<string>();

  /** `rank`'s current process was adopted from the previous gateway. */
  adopt(rank: number): void {
    this.adopted.set(rank, false);
  }

  /** `rank`'s current process is gone or replaced by a handshaken one: stop watching it (its ids age out). */
  forget(rank: number): void {
    this.adopted.delete(rank);
  }

  /** Whether `rank` runs an adopted process. */
  isAdopted(rank: number): boolean {
    return this.adopted.has(rank);
  }

  /**
   * The ids of `unknownRows` (rows of `rank` for requests this gateway does not know) to ABORT on `rank` now: those
   * not terminal (`finished` holds the batch's finished ids) and not ABORTed before; empty for a rank that is not
   * adopted. `first` is true the first time a rank yields any (for a log line).
   */
  toAbort(
    rank: number,
    unknownRows: readonly string[],
    finished: ReadonlySet<string>,
  ): { ids: string[]; first: boolean } {
    const seen = this.adopted.get(rank);
    if (seen === undefined) return { ids: [], first: false };
    const ids: string[] = [];
    for (const id of unknownRows) {
      if (finished.has(id)) continue;
      const key = `${rank}:${id}`;
      if (this.aborted.has(key)) continue;
      if (this.aborted.size >= MAX_FOREIGN_IDS) this.aborted.delete(this.aborted.values().next().value!);
      this.aborted.add(key);
      ids.push(id);
    }
    if (ids.length > 0 && !seen) this.adopted.set(rank, true);
    return { ids, first: ids.length > 0 && !seen };
  }
}
