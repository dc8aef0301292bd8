import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GatewayMetrics, MAX_TENANT_LABELS, OTHER_TENANT } from '../../src/server/metrics.js';

test('per-tenant series stay bounded: past the first names, tenants count as other', async () => {
  const metrics = new GatewayMetrics({ modelId: 'm' });
  for (let i = 0; i < MAX_TENANT_LABELS + 5; i++)
    metrics.countTenant(`t${i}`, 200, { prompt: 2, completion: 3, cached: 0 });
  metrics.countTenant('t0', 429, null);
  const text = (await metrics.render()).body;
  const tenants = new Set(
    text
      .split('\n')
      .filter((l) => l.startsWith('model_gateway_tenant_requests_total{'))
      .map((l) => /tenant="([^"]*)"/.exec(l)![1]),
  );
  assert.equal(tenants.size, MAX_TENANT_LABELS + 1);
  assert.ok(tenants.has(OTHER_TENANT));
  const line = (name: string) => text.split('\n').find((l) => l.startsWith(name))!;
  assert.match(line(`model_gateway_tenant_requests_total{model="m",tenant="${OTHER_TENANT}",status="200"}`), / 5$/);
  assert.match(line('model_gateway_tenant_tokens_total{model="m",tenant="t0",kind="completion"}'), / 3$/);
  assert.match(line('model_gateway_tenant_requests_total{model="m",tenant="t0",status="429"}'), / 1$/);
  assert.ok(!text.includes('tenant="t0",kind="cached"'), 'no zero increments');
});

test('rejections count by reason and queue waits by tenant, under the same label bound', async () => {
  const metrics = new GatewayMetrics({ modelId: 'm' });
  metrics.countTenant('batch', 429, null, 'rate_limit_exceeded');
  metrics.countTenant('batch', 429, null, 'rate_limit_exceeded');
  metrics.countTenant('batch', 429, null, 'overloaded');
  metrics.countTenant('batch', 200, { prompt: 1, completion: 1, cached: 0 });
  metrics.observeQueueWait('batch', 0.002);
  metrics.observeQueueWait('batch', 3);
  for (let i = 0; i < MAX_TENANT_LABELS + 3; i++) metrics.observeQueueWait(`t${i}`, 0.5);
  const text = (await metrics.render()).body;
  const value = (series: string) => {
    const l = text.split('\n').find((x) => x.startsWith(`${series} `));
    assert.ok(l !== undefined, series);
    return Number(l.split(' ').at(-1));
  };
  assert.equal(
    value('model_gateway_tenant_rejections_total{model="m",tenant="batch",reason="rate_limit_exceeded"}'),
    2,
  );
  assert.equal(value('model_gateway_tenant_rejections_total{model="m",tenant="batch",reason="overloaded"}'), 1);
  assert.equal(value('model_gateway_tenant_queue_wait_seconds_count{model="m",tenant="batch"}'), 2);
  assert.equal(value('model_gateway_tenant_queue_wait_seconds_bucket{le="0.005",model="m",tenant="batch"}'), 1);
  assert.equal(value('model_gateway_tenant_queue_wait_seconds_bucket{le="5",model="m",tenant="batch"}'), 2);
  // batch took one of the label slots: t0..t98 have theirs, the rest are other.
  assert.equal(value(`model_gateway_tenant_queue_wait_seconds_count{model="m",tenant="${OTHER_TENANT}"}`), 4);
});
