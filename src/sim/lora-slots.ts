/**
 * The LoRA adapters of one simulated vLLM rank (vLLM v1 `Scheduler.schedule()` and the worker's LoRA manager):
 * - a step runs requests of at most `maxLoras` distinct adapters (`--max-loras`): a waiting request whose adapter
 *   would be one more is skipped until a running adapter's last request leaves;
 * - the GPU holds `maxLoras` adapter slots, reused least recently used first: starting a request whose adapter is
 *   not in a slot loads it (counted in `loads`; the scheduler adds `perLoraLoadMs` to that step's time).
 * The adapter weights themselves are not modelled: any adapter id loads.
 */

/** LoRA slot bookkeeping of one rank (see the module comment). */
export class SimLoraSlots {
  /** Adapter id → running requests with it. */
  private readonly running = new Map<number, number>();
  /** Adapter ids in GPU slots, least recently started first. */
  private readonly resident: number[] = [];
  /** Adapter loads into a GPU slot since start. */
  loads = 0;

  /** `maxLoras`: slots and distinct running adapters, an integer ≥ 1. */
  constructor(private readonly maxLoras: number) {}

  /** Whether a request with adapter `id` may start now (its adapter runs already, or there is room for one more). */
  canRun(id: number): boolean {
    return this.running.has(id) || this.running.size < this.maxLoras;
  }

  /** A request with adapter `id` starts running. Returns true when the adapter had to be loaded into a slot. */
  start(id: number): boolean {
    this.running.set(id, (this.running.get(id) ?? 0) + 1);
    const at = this.resident.indexOf(id);
    if (at >= 0) {
      this.resident.splice(at, 1);
      this.resident.push(id);
      return false;
    }
    // Evict the least recently started adapter no running request uses (canRun keeps one free).
    if (this.resident.length >= this.maxLoras) {
      const victim = this.resident.findIndex((r) => !this.running.has(r));
      this.resident.splice(victim >= 0 ? victim : 0, 1);
    }
    this.resident.push(id);
    this.loads += 1;
    return true;
  }

  /** A request with adapter `id` stopped running (finished, aborted or preempted). */
  stop(id: number): void {
    const n = (this.running.get(id) ?? 0) - 1;
    if (n > 0) this.running.set(id, n);
    else this.running.delete(id);
  }

  /** Whether any request runs with an adapter now. */
  active(): boolean {
    return this.running.size > 0;
  }
}
