/**
 * The group's pending utility calls (vLLM request type `03`, docs/wire/vllm-utility.md): each call gets a fresh id,
 * the reply that names it settles it, and every call ends (a reply, its deadline, the rank failing, the client
 * closing), so the table never outgrows the calls in flight. Synchronous bookkeeping only; the sends are the
 * caller's (lora-adapters.ts).
 */
import type { UtilityReply } from '../protocols/types.js';
import { EngineClientError } from './errors.js';

/** How a call ended: the engine's result, or its failure message (the engine answered, but the call failed). */
export type UtilityOutcome = { ok: true; result: unknown } | { ok: false; failure: string };

interface Pending {
  engineIndex: number;
  method: string;
  resolve(outcome: UtilityOutcome): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

/** The pending calls of one group (see the module comment). */
export class UtilityCalls {
  private next = 1;
  private readonly pending = new Map<number, Pending>();
  /** Replies that named no pending call (late, after a deadline, or a foreign client's), counted. */
  stray = 0;

  /** Calls in flight. */
  get size(): number {
    return this.pending.size;
  }

  /**
   * Start a call to rank `engineIndex`: returns its id (send it in the payload) and a promise of its outcome, which
   * rejects with EngineClientError `unavailable` after `timeoutMs` without a reply, or with the error `failRank` /
   * `failAll` give.
   */
  begin(engineIndex: number, method: string, timeoutMs: number): { callId: number; outcome: Promise<UtilityOutcome> } {
    const callId = this.next;
    this.next = this.next >= Number.MAX_SAFE_INTEGER ? 1 : this.next + 1;
    const outcome = new Promise<UtilityOutcome>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(callId);
        reject(
          new EngineClientError(
            'unavailable',
            `DP rank ${engineIndex} did not answer the utility call ${method} within ${timeoutMs} ms`,
            { dpRank: engineIndex },
          ),
        );
      }, timeoutMs);
      timer.unref();
      this.pending.set(callId, { engineIndex, method, resolve, reject, timer });
    });
    return { callId, outcome };
  }

  /** A reply arrived: settle its call (a stray reply is counted and dropped). */
  settle(reply: UtilityReply): void {
    const p = this.pending.get(reply.callId);
    if (p === undefined) {
      this.stray += 1;
      return;
    }
    this.pending.delete(reply.callId);
    clearTimeout(p.timer);
    p.resolve(reply.failure === null ? { ok: true, result: reply.result } : { ok: false, failure: reply.failure });
  }

  /** The call `callId` could not be sent: end it with `err`. */
  abandon(callId: number, err: Error): void {
    const p = this.pending.get(callId);
    if (p === undefined) return;
    this.pending.delete(callId);
    clearTimeout(p.timer);
    p.reject(err);
  }

  /** Rank `engineIndex` is gone: every call to it fails with `err`. */
  failRank(engineIndex: number, err: Error): void {
    for (const [id, p] of this.pending) if (p.engineIndex === engineIndex) this.abandon(id, err);
  }

  /** The client closed: every call fails with `err`. */
  failAll(err: Error): void {
    for (const id of [...this.pending.keys()]) this.abandon(id, err);
  }
}
