/**
 * The router keeps the counters of fronts that exited (front-metrics-memory.ts): a killed front's per-tenant counts
 * must not fall out of the summed /metrics (Prometheus would read a counter reset, and billing would lose them).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AggregatorRegistry, Counter, Gauge, Registry } from 'prom-client';
import { FrontMetricsMemory, type MetricsJson } from '../../src/fronts/router/front-metrics-memory.js';

/** One front's metrics: a tenant counter at `requests` and an in-flight gauge at `inFlight`. */
async function front(requests: number, inFlight: number): Promise<MetricsJson> {
  const registry = new Registry();
  const c = new Counter({ name: 'reqs_total', help: 'h', labelNames: ['tenant'], registers: [registry] });
  c.inc({ tenant: 'a' }, requests);
  new Gauge({ name: 'in_flight', help: 'h', registers: [registry] }).set(inFlight);
  return registry.getMetricsAsJSON();
}

async function summed(parts: MetricsJson[]): Promise<string> {
  return AggregatorRegistry.aggregate(parts).metrics();
}

test('an exited front keeps its counters in the sum, not its gauges; two exits add up', async () => {
  const memory = new FrontMetricsMemory();
  memory.remember(1, await front(5, 2));
  memory.remember(2, await front(7, 3));
  await memory.retire(1);
  const afterOne = await summed([await memory.retiredMetrics(), await front(7, 3)]);
  assert.match(afterOne, /reqs_total\{tenant="a"\} 12/, "front 1 exited: its 5 stay beside front 2's 7");
  assert.match(afterOne, /in_flight 3/, 'its in-flight gauge is gone');
  await memory.retire(2);
  await memory.retire(3); // never answered a scrape: nothing to keep
  const afterTwo = await summed([await memory.retiredMetrics()]);
  assert.match(afterTwo, /reqs_total\{tenant="a"\} 12/);
  assert.doesNotMatch(afterTwo, /in_flight/);
});
