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
