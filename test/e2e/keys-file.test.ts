/**
 * End to end (issue 30 part 1): `--api-keys-file` names tenants with their keys and priority bands, and SIGHUP reads it
 * again without a restart. In one process the harness calls `reloadKeys()`; with `--workers 2` it sends the child
 * gateway a real SIGHUP: the primary reads the file and hands its content to every front (each front checks keys itself).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { waitFor } from '../helpers/async.js';
import { startTestGateway, type TestGateway } from '../helpers/test-gateway.js';

describe('the keys file: tenants, their bands, reload on SIGHUP', { timeout: 60_000 }, () => {
  let gw: TestGateway;
  const dir = mkdtempSync(join(tmpdir(), 'mgw-e2e-keys-'));
  const file = join(dir, 'keys.json');
  const write = (tenants: Record<string, unknown>) => writeFileSync(file, JSON.stringify({ tenants }));

  before(async () => {
    write({
      search: { keys: ['sk-search-1'], priority: 'standard', max_priority: 'critical' },
      batch: { keys: ['sk-batch-1'], priority: 'sheddable' },
      metered: { keys: ['sk-metered-1', 'sk-metered-2'], requests_per_minute: 4, tokens_per_minute: 1_000_000 },
    });
    gw = await startTestGateway({ sim: 1, edge: { apiKeysFile: file } });
  });
  after(async () => {
    await gw?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const complete = (key: string, band?: string, extra: Record<string, unknown> = {}) =>
    fetch(`${gw.url}/v1/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: `Bearer ${key}`,
        ...(band !== undefined ? { 'x-gateway-inference-objective': band } : {}),
      },
      body: JSON.stringify({ model: 'sim', prompt: 'hi', max_tokens: 2, ...extra }),
    });

  test('budgets: x-ratelimit headers on every answer; past the limit a 429 rate_limit_exceeded', async () => {
    // Four requests per minute for the tenant, whichever of its keys (and, with --workers, whichever front).
    const answers = [
      await complete('sk-metered-1'),
      await complete('sk-metered-2', undefined, { stream: true }),
      await complete('sk-metered-1', undefined, { n: 2 }),
      await complete('sk-metered-2'),
    ];
    for (const r of answers) {
      assert.equal(r.status, 200);
      await r.text();
      assert.equal(r.headers.get('x-ratelimit-limit-requests'), '4');
      assert.equal(r.headers.get('x-ratelimit-limit-tokens'), '1000000');
      assert.match(r.headers.get('x-ratelimit-reset-requests')!, /^\d+(\.\d+)?s$/);
    }
    assert.deepEqual(
      answers.map((r) => r.headers.get('x-ratelimit-remaining-requests')),
      ['3', '2', '1', '0'],
      'n = 2 is one request',
    );
    const refused = await complete('sk-metered-1');
    assert.equal(refused.status, 429);
    const body = (await refused.json()) as { error: { type: string; code: string; message: string } };
    assert.equal(body.error.code, 'rate_limit_exceeded');
    assert.equal(body.error.type, 'requests');
    assert.match(body.error.message, /tenant "metered" reached its budget of 4 requests per minute/);
    assert.equal(refused.headers.get('x-ratelimit-remaining-requests'), '0');
    const retryAfter = Number(refused.headers.get('retry-after'));
    assert.ok(retryAfter >= 1 && retryAfter <= 15, `Retry-After ${retryAfter}: one request back every 15 s`);
    // Past the budget, n > 1 is refused as a whole: none of its sub-requests reaches a rank.
    const dispatched = async () => {
      const res = await fetch(`${gw.url}/v1/gateway/ranks`, { headers: { authorization: 'Bearer sk-batch-1' } });
      const view = (await res.json()) as { groups: Array<{ ranks: Array<{ dispatched_unpinned: number }> }> };
      return view.groups[0]!.ranks.reduce((n, r) => n + r.dispatched_unpinned, 0);
    };
    const before = await dispatched();
    assert.equal((await complete('sk-metered-2', undefined, { n: 5 })).status, 429);
    assert.equal((await complete('sk-batch-1')).status, 200, 'another tenant is not limited');
    await waitFor(async () => (await dispatched()) === before + 1, "only the other tenant's request was dispatched");
    await waitFor(
      async () => (await gw.metricSum('model_gateway_tenant_requests_total', 'tenant="metered",status="429"')) === 2,
      'both refusals counted for their tenant',
    );
  });

  test('each key names its tenant: its ceiling allows critical or not; other keys get 401', async () => {
    assert.equal((await complete('sk-search-1', 'critical')).status, 200);
    const batch = await complete('sk-batch-1', 'standard');
    assert.equal(batch.status, 403, 'batch may not rise above sheddable');
    assert.equal((await complete('sk-batch-1')).status, 200, 'its default band');
    assert.equal((await complete('sk-nobody')).status, 401);
    await waitFor(
      async () =>
        (await gw.metricSum('model_gateway_tenant_requests_total', 'tenant="batch",status="403"')) === 1 &&
        (await gw.metricSum('model_gateway_tenant_requests_total', 'tenant="search",status="200"')) === 1,
      'the requests counted for their tenants',
    );
  });

  test('SIGHUP reads the file again: new keys work, removed keys stop, a broken file changes nothing', async () => {
    write({ search: { keys: ['sk-search-2'], max_priority: 'critical' } });
    gw.hangup();
    // With --workers every front reloads on its own message: wait until the new key works on every connection.
    await waitFor(async () => (await complete('sk-search-2', 'critical')).status === 200, 'the new key is accepted');
    await waitFor(async () => (await complete('sk-search-1')).status === 401, 'the removed key is refused');
    await waitFor(async () => (await complete('sk-batch-1')).status === 401, 'a removed tenant is refused');
    writeFileSync(file, '{ not json');
    gw.hangup();
    for (let i = 0; i < 5; i++) assert.equal((await complete('sk-search-2')).status, 200, 'the keys in use stay');
  });
});
