/**
 * End to end, `serve --workers 2 --api-keys-file` (issue 30 part 1): the primary alone reads the keys file and hands
 * its content to the fronts. A front that restarts while the file is gone gets the last good keys from the primary
 * (before, it read the file itself, failed three times and the gateway stopped), and a broken file at SIGHUP
 * changes nothing on either front. Nothing asserts a duration.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { MODEL, WorkersGateway, waitFor } from './workers-helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'mgw-e2e-workers-keys-'));
const file = join(dir, 'keys.json');
let g: WorkersGateway;

before(async () => {
  writeFileSync(file, JSON.stringify({ tenants: { team: { keys: ['sk-team-1'] } } }));
  g = await WorkersGateway.start(['--api-keys-file', file], 1);
});

after(async () => {
  await g?.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

const complete = (key: string) =>
  g.post('/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 2 }, { authorization: `Bearer ${key}` });

/** Four requests on fresh connections (they alternate between the fronts): every status. */
async function statuses(key: string): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < 4; i++) out.push((await complete(key)).status);
  return out;
}

test(
  'the file deleted, then broken, then a front killed: every front keeps the last good keys',
  { timeout: 90_000 },
  async () => {
    assert.deepEqual(await statuses('sk-team-1'), [200, 200, 200, 200]);
    rmSync(file);
    process.kill(g.gw.pid!, 'SIGHUP');
    await waitFor(async () => g.logged('keys file not reloaded').length === 1, 'the missing file logged once');
    writeFileSync(file, '{ "tenants": ');
    process.kill(g.gw.pid!, 'SIGHUP');
    await waitFor(async () => g.logged('keys file not reloaded').length === 2, 'the broken file logged');
    assert.deepEqual(await statuses('sk-team-1'), [200, 200, 200, 200], 'the keys in use stay');
    // The tenant's count as /metrics sums it now (this scrape is also the router's latest view of each front).
    const counted = () => g.metricSum('model_gateway_tenant_requests_total', 'tenant="team",status="200"');
    const before = await counted();
    assert.equal(before, 8);
    const [victim] = g.fronts();
    process.kill(victim!, 'SIGKILL');
    await waitFor(async () => g.fronts().length === 2 && !g.fronts().includes(victim!), 'a new front forked');
    await waitFor(async () => (await g.get('/ready')).status === 200, 'ready again');
    assert.deepEqual(await statuses('sk-team-1'), [200, 200, 200, 200], 'the new front has the keys too');
    // The killed front's counts stay in the sum (front-metrics-memory.ts): no counter falls.
    assert.equal(await counted(), before + 4);
    assert.deepEqual(await statuses('sk-other'), [401, 401, 401, 401]);
    assert.equal(g.gw.exitCode, null, 'the gateway runs on');
    // A good file again: both fronts take it.
    writeFileSync(file, JSON.stringify({ tenants: { team: { keys: ['sk-team-2'] } } }));
    process.kill(g.gw.pid!, 'SIGHUP');
    await waitFor(async () => (await statuses('sk-team-2')).every((s) => s === 200), 'the new key on every front');
    assert.deepEqual(await statuses('sk-team-1'), [401, 401, 401, 401]);
  },
);
