/**
 * End to end, `model-gateway serve --workers 2` with a front that cannot start (src/fronts/router/cluster.ts
 * `MAX_FAILED_STARTS`; src/cli.ts `serve`). The fault is injected by a module preloaded into the gateway and so into
 * its fronts (test/fixtures/front-fault.ts, driven by a file the test writes): a front that crashes at every start is
 * not forked forever (the gateway exits 1 naming it), and a SIGTERM while a front hangs at startup, before or after
 * the gateway started, is not held by it. A front that crashes after serving is still forked again: workers-faults.test.ts.
 * One simulated rank per gateway; nothing asserts a duration.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, test } from 'node:test';
import { MAX_FAILED_STARTS } from '../../src/fronts/router/cluster.js';
import { freshDir, hangGuard } from '../helpers/async.js';
import { alive } from '../helpers/processes.js';
import { entryPath } from '../helpers/entry.js';
import { WorkersGateway, waitFor, type LaunchOptions } from './workers-helpers.js';

const FIXTURE = pathToFileURL(entryPath(new URL('../fixtures/front-fault.ts', import.meta.url))).href;

let dir: { dir: string; cleanup: () => Promise<void> };
let faultFile: string;
let launch: LaunchOptions;
const gateways: WorkersGateway[] = [];
/** Every front pid seen, killed at the end if still alive (a hanging front outlives nothing it should). */
const frontPids = new Set<number>();

before(async () => {
  dir = await freshDir('mgw-front-fault-');
  faultFile = join(dir.dir, 'fault');
  launch = { nodeArgs: ['--import', FIXTURE], env: { MGW_TEST_FRONT_FAULT: faultFile } };
});

after(async () => {
  for (const g of gateways) g.cleanup();
  for (const pid of frontPids) if (alive(pid)) process.kill(pid, 'SIGKILL');
  await dir?.cleanup();
});

/** Note the gateway's fronts now (for the final cleanup) and return them. */
function fronts(g: WorkersGateway): number[] {
  const now = g.fronts();
  for (const pid of now) frontPids.add(pid);
  return now;
}

test(
  `a front that crashes at every start after the gateway served: not forked again after ${MAX_FAILED_STARTS} exits in a row, exit 1`,
  { timeout: 120_000 },
  async () => {
    writeFileSync(faultFile, 'none');
    const g = await WorkersGateway.start([], 1, launch);
    gateways.push(g);
    const [victim] = fronts(g);
    writeFileSync(faultFile, 'crash');
    process.kill(victim!, 'SIGKILL');
    // Before, the slot's listening once made every later start failure a restart: forked forever.
    const [code, signal] = await hangGuard(g.closed, 60_000, 'the gateway giving up on a front that cannot start');
    assert.deepEqual({ code, signal }, { code: 1, signal: null }, g.errors);
    assert.match(
      g.errors,
      new RegExp(
        `HTTP front \\d exited ${MAX_FAILED_STARTS} times in a row before listening \\(last: code 3\\); not forking it again: shutting down`,
      ),
    );
    // The SIGKILL and the first failed starts were forked again; the last one was not.
    assert.equal(g.logged('HTTP front exited: ').length, MAX_FAILED_STARTS, JSON.stringify(g.logged('HTTP front')));
    const gaveUp = g.logged('HTTP front ').filter((m) => m.level === 50);
    assert.equal(gaveUp.length, 1, JSON.stringify(gaveUp));
    assert.equal(gaveUp[0]!.code, 3);
  },
);

test(
  'SIGTERM while a front hangs at startup, before the gateway started: not held by it, exit 0, the front killed',
  { timeout: 120_000 },
  async () => {
    writeFileSync(faultFile, 'hang 1');
    const g = await WorkersGateway.launch([], 1, launch);
    gateways.push(g);
    // Front 0 serves; front 1 never listens, so the start never completes.
    await waitFor(
      async () => fronts(g).length === 2 && (await g.get('/ready')).status === 200,
      'front 0 serving, front 1 hanging',
      60_000,
    );
    const hanging = fronts(g);
    assert.equal(g.logged('model-gateway listening on ').length, 0, 'the start is not complete');
    g.gw.kill('SIGTERM');
    // Before, a signal during the start was held until every front listened: for ever.
    const [code, signal] = await hangGuard(g.closed, 30_000, 'the gateway exiting on SIGTERM');
    assert.deepEqual({ code, signal }, { code: 0, signal: null }, g.errors);
    assert.match(g.errors, /SIGTERM during startup: shutting down/);
    assert.equal(g.logged('start interrupted: ').length, 1);
    await waitFor(() => hanging.every((pid) => !alive(pid)), 'every front gone', 10_000);
  },
);

test(
  'SIGTERM while a re-forked front hangs at startup: it is killed at once instead of after the close timer, exit 0',
  { timeout: 120_000 },
  async () => {
    writeFileSync(faultFile, 'none');
    const g = await WorkersGateway.start([], 1, launch);
    gateways.push(g);
    const [victim, survivor] = fronts(g);
    writeFileSync(faultFile, 'hang');
    process.kill(victim!, 'SIGKILL');
    await waitFor(
      () => fronts(g).length === 2 && !g.fronts().includes(victim!),
      'a new front forked (hanging)',
      30_000,
    );
    const reforked = fronts(g).filter((pid) => pid !== survivor);
    g.gw.kill('SIGTERM');
    const [code, signal] = await hangGuard(g.closed, 30_000, 'the gateway exiting on SIGTERM');
    assert.deepEqual({ code, signal }, { code: 0, signal: null }, g.errors);
    // Before, it waited for the 5 s SIGKILL timer: a front still starting does not hear the close message.
    const killed = g.logged('HTTP fronts still starting killed at once');
    assert.equal(killed.length, 1, JSON.stringify(g.logs.slice(-10)));
    assert.deepEqual(killed[0]!.pids, reforked);
  },
);
