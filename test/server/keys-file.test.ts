import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KeysFileError, parseKeysFile } from '../../src/server/keys-file.js';
import { keyTenant, TenantDirectory } from '../../src/server/tenant.js';

const FILE = JSON.stringify({
  tenants: {
    search: { keys: ['sk-search'], priority: 'standard', max_priority: 'critical' },
    batch: { keys: ['sk-batch-1', 'sk-batch-2'], priority: 'sheddable', requests_per_minute: 60 },
    metered: { keys: ['sk-metered'], requests_per_minute: 10, tokens_per_minute: 50_000 },
  },
});

test('a keys file: each key names its tenant with its bands; defaults standard, the ceiling its priority', () => {
  const f = parseKeysFile(FILE, 'k.json');
  assert.equal(f.tenants, 3);
  assert.deepEqual(f.byKey.get('sk-search'), {
    name: 'search',
    priority: 'standard',
    maxPriority: 'critical',
    budget: null,
  });
  assert.deepEqual(f.byKey.get('sk-batch-2'), {
    name: 'batch',
    priority: 'sheddable',
    maxPriority: 'sheddable',
    budget: { requestsPerMinute: 60, tokensPerMinute: null },
  });
  assert.deepEqual(f.byKey.get('sk-metered')?.budget, { requestsPerMinute: 10, tokensPerMinute: 50_000 });
  assert.equal(f.byKey.get('sk-batch-1'), f.byKey.get('sk-batch-2'), 'one policy, so one budget, per tenant');
  const plain = parseKeysFile('{"tenants":{"t":{"keys":["k"]}}}', 'k.json').byKey.get('k');
  assert.deepEqual(plain, { name: 't', priority: 'standard', maxPriority: 'standard', budget: null });
});

test('a keys file that is wrong is refused naming the file and the field, never a key', () => {
  const bad: Array<[string, RegExp]> = [
    ['not json', /k\.json: not valid JSON/],
    ['{"tenants":{"a":{"keys":["sk-live-TOPSECRET987654",]}}}', /not valid JSON/],
    ['[]', /expected an object/],
    ['{"tenants":{},"extra":1}', /unknown field "extra"/],
    ['{"tenants":{"t":{"keys":["k"],"weight":2}}}', /tenant "t": unknown field "weight"/],
    ['{"tenants":{"t":{"keys":["k"],"priority":"urgent"}}}', /"priority" must be one of critical, standard, sheddable/],
    ['{"tenants":{"t":{"keys":["k"],"priority":"critical","max_priority":"standard"}}}', /is above its "max_priority"/],
    ['{"tenants":{"t":{"keys":[""]}}}', /"keys" must be a list of non-empty strings/],
    ['{"tenants":{"t":{"keys":["ok-key"," sk-spaced "]}}}', /"keys"\[1\] has characters a bearer token cannot carry/],
    ['{"tenants":{"t":{"keys":["sk-clé"]}}}', /"keys"\[0\] has characters/],
    ['{"tenants":{"t":{}}}', /"keys" must be a list/],
    ['{"tenants":{"t":{"keys":["k"],"requests_per_minute":0}}}', /"requests_per_minute" must be an integer ≥ 1/],
    ['{"tenants":{"t":{"keys":["k"],"tokens_per_minute":1.5}}}', /"tokens_per_minute" must be an integer ≥ 1/],
    ['{"tenants":{"t":{"keys":["k"],"tokens_per_minute":"100"}}}', /"tokens_per_minute" must be an integer ≥ 1/],
    ['{"tenants":{"has space":{"keys":["k"]}}}', /1-64 printable ASCII/],
    ['{"tenants":{"other":{"keys":["k"]}}}', /"other" is reserved/],
    [
      '{"tenants":{"a":{"keys":["sk-a-1"]},\n"a":{"keys":["sk-a-2"]}}}',
      /a name appears twice in one object \(line 2\)/,
    ],
    ['{"tenants":{"a":{"keys":["sk-a-1"],"priority":"standard","priority":"sheddable"}}}', /appears twice/],
    ['{"tenants":{"a":{"keys":["sk-a-1"]}},"tenants":{}}', /appears twice/],
    ['{"tenants":{"key:0123456789ab":{"keys":["k"]}}}', /"key:0123456789ab" is reserved/],
    ['{"tenants":{"a":{"keys":["sk-secret-dup"]},"b":{"keys":["sk-secret-dup"]}}}', /also a key of "a"/],
  ];
  for (const [text, message] of bad) {
    assert.throws(
      () => parseKeysFile(text, 'k.json'),
      (err: unknown) => err instanceof KeysFileError && message.test(err.message) && !err.message.includes('sk-'),
      text,
    );
  }
});

test('the directory: keys of the file and --api-key keys are accepted; reload takes a new file or keeps the old', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mgw-keys-'));
  try {
    const path = join(dir, 'keys.json');
    writeFileSync(path, FILE);
    const d = new TenantDirectory(['sk-plain'], path);
    assert.equal(d.keyed, true);
    for (const k of ['sk-plain', 'sk-search', 'sk-batch-1']) assert.equal(d.matches(k), true, k);
    assert.equal(d.matches('sk-other'), false);
    const auth = (k: string) => ({ authorization: `Bearer ${k}` });
    assert.equal(d.policyOf(auth('sk-search')).maxPriority, 'critical');
    assert.deepEqual(d.policyOf(auth('sk-plain')), {
      name: keyTenant('sk-plain'),
      priority: 'standard',
      maxPriority: 'standard',
      budget: null,
    });
    writeFileSync(path, JSON.stringify({ tenants: { search: { keys: ['sk-search-2'] } } }));
    assert.deepEqual(d.reload(), { tenants: 1, keys: 1 });
    assert.equal(d.matches('sk-search'), false, 'the old key is gone');
    assert.equal(d.matches('sk-search-2'), true);
    assert.equal(d.matches('sk-plain'), true, '--api-key keys stay');
    writeFileSync(path, '{ broken');
    assert.throws(() => d.reload(), KeysFileError);
    assert.equal(d.matches('sk-search-2'), true, 'a bad file: the keys in use stay');
    assert.equal(new TenantDirectory([], null).keyed, false);
    assert.throws(() => new TenantDirectory([], join(dir, 'missing.json')), /missing\.json: cannot read it/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
