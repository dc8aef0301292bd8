/**
 * The promises of callers waiting for an engine group's every rank slot to have joined once (`whenAllJoined`), kept
 * apart from the group state so the state's steps hold no promise (group-state.ts).
 */

/** Pending waits, settled all at once. */
export class JoinWaiters {
  private readonly waiting: Array<{ resolve: () => void; reject: (e: Error) => void }> = [];

  /** A promise settled by the next `resolveAll` or `rejectAll`. */
  wait(): Promise<void> {
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  /** Resolve every pending wait. */
  resolveAll(): void {
    for (const w of this.waiting.splice(0)) w.resolve();
  }

  /** Reject every pending wait with `error`. */
  rejectAll(error: Error): void {
    for (const w of this.waiting.splice(0)) w.reject(error);
  }
}
