import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ApiError } from '../../src/server/errors.js';
import { DEFAULT_TENANT, fairnessTenant, keyTenant, TenantDirectory } from '../../src/server/tenant.js';

/** The tenant name the gateway gives a request with `headers` when `apiKeys` are configured. */
const keyedTenant = (headers: Record<string, string>, apiKeys = ['sk-secret-1', 'key B']): string =>
  new TenantDirectory(apiKeys, null).policyOf(headers).name;

test('with API keys: the key names the tenant (a digest, stable, never the key); the fairness header is ignored', () => {
  const t = keyTenant('sk-secret-1');
  assert.match(t, /^key:[0-9a-f]{12}$/);
  assert.ok(!t.includes('secret'));
  assert.equal(keyTenant('sk-secret-1'), t);
  assert.notEqual(keyTenant('sk-secret-2'), t);
  const headers = { authorization: 'Bearer sk-secret-1', 'x-gateway-fairness-id': 'someone-else' };
  assert.equal(keyedTenant(headers), t);
  assert.equal(keyedTenant({ authorization: 'bearer  sk-secret-1 ' }), t, 'scheme case and spaces');
  assert.equal(keyedTenant({ authorization: 'Bearer key B' }), keyTenant('key B'), 'a key with a space');
  assert.notEqual(keyTenant('key B'), keyTenant('key D'));
});

test('without keys: the fairness header, else the default tenant; a bad id is a 400', () => {
  assert.equal(fairnessTenant({}), DEFAULT_TENANT);
  assert.equal(fairnessTenant({ 'x-gateway-fairness-id': ' team-a ' }), 'team-a');
  for (const bad of ['has space', 'x'.repeat(65), 'naïve']) {
    assert.throws(
      () => fairnessTenant({ 'x-gateway-fairness-id': bad }),
      (err: unknown) => err instanceof ApiError && err.statusCode === 400 && err.code === 'invalid_fairness_id',
      bad,
    );
  }
});
