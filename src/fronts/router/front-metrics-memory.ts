/**
 * The counters of HTTP fronts that exited, kept in the router's `/metrics` (issue 30: per-tenant counters must stay
 * exact enough to bill). Each scrape asks every live front for its metrics; a front that exits takes its counts with
 * it, so the summed counters would fall, which Prometheus reads as a counter reset. The router keeps each front's
 * latest answer and, when the front exits, folds its counters and histograms (not its gauges: those describe the
 * present) into one retired set that every later scrape adds. What the front counted after its last scrape is lost.
 * Memory: one answer per live front and one merged set, bounded by the metrics' label sets.
 */
import { AggregatorRegistry } from 'prom-client';

/** One registry's metrics as JSON (`Registry.getMetricsAsJSON`), what the cluster protocol carries. */
export type MetricsJson = Awaited<
  ReturnType<AggregatorRegistry<'text/plain; version=0.0.4; charset=utf-8'>['getMetricsAsJSON']>
>;

/** Metric types whose values only grow: kept after their front exits. */
const CUMULATIVE = new Set(['counter', 'histogram']);

/** See the module comment. */
export class FrontMetricsMemory {
  private readonly latest = new Map<number, MetricsJson>();
  private retired: MetricsJson = [];
  /** Folds run one after another (each awaits the aggregator). */
  private folding: Promise<void> = Promise.resolve();

  /** Front `id` answered a scrape with `metrics`. */
  remember(id: number, metrics: MetricsJson): void {
    if (metrics.length > 0) this.latest.set(id, metrics);
  }

  /** Front `id` exited: its latest counters and histograms join the retired set. Resolves once folded. */
  retire(id: number): Promise<void> {
    const last = this.latest.get(id);
    this.latest.delete(id);
    if (last === undefined) return this.folding;
    const kept = last.filter((m) => CUMULATIVE.has(String(m.type)));
    this.folding = this.folding.then(async () => {
      this.retired = await AggregatorRegistry.aggregate([this.retired, kept]).getMetricsAsJSON();
    });
    return this.folding;
  }

  /** The retired set as of now (after any fold in progress). */
  async retiredMetrics(): Promise<MetricsJson> {
    await this.folding;
    return this.retired;
  }
}
