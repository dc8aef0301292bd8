/**
 * The dashboard in a real headless Chromium (Debian's chromium, issue #13 part 2):
 * - over a real gateway with four simulated ranks under streaming load: every rank gets a row, the numbers change
 *   while the load runs (dispatch counts, in-flight, TTFT/ITL percentiles) and in-flight returns to 0 after it;
 *   a screenshot is taken under load (the charts, the event list and docs/dashboard.png: history.test.ts);
 * - behind an API key (the check issue #10 adds, emulated by a front that requires `Authorization: Bearer` on /v1/):
 *   the page asks for the key, sends it as a Bearer header once typed, and never puts it in a URL.
 */
import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { pino } from 'pino';
import type { FastifyInstance } from 'fastify';
import type { Page } from 'playwright-core';
import { startGateway, type RunningGateway } from '../../src/gateway/index.js';
import { rankState } from '../server/fake-backend.js';
import { makeApp } from '../server/helpers.js';
import { launchChromium, streamingLoad, type Browser } from './browser.js';

/** An element of the page, as the callbacks below read it. */
interface PageElement {
  readonly textContent: string | null;
  getAttribute(name: string): string | null;
  querySelector(selectors: string): PageElement | null;
  querySelectorAll(selectors: string): ArrayLike<PageElement> & Iterable<PageElement>;
}
/**
 * The page's `document`, as the callbacks handed to `page.evaluate` / `page.waitForFunction` use it: they run inside
 * Chromium. Declared here instead of through TypeScript's DOM library, which would add ~1.9 MB of browser types to the
 * type check of every file (tsconfig.json `lib`, issue 27).
 */
declare const document: {
  readonly body: { readonly dataset: Readonly<Record<string, string | undefined>> };
  querySelector(selectors: string): PageElement | null;
  querySelectorAll(selectors: string): ArrayLike<PageElement> & Iterable<PageElement>;
  getElementById(id: string): PageElement | null;
};

let browser: Browser;
before(async () => {
  browser = await launchChromium();
});
after(() => browser?.close());

/** Every rank row's cells as text: `group|rank` → field → text. */
async function rows(page: Page): Promise<Record<string, Record<string, string>>> {
  return page.evaluate(() => {
    const out: Record<string, Record<string, string>> = {};
    for (const tr of document.querySelectorAll('tr[data-rank]')) {
      const cells: Record<string, string> = {};
      for (const td of tr.querySelectorAll('td[data-field]'))
        cells[td.getAttribute('data-field')!] = td.textContent ?? '';
      out[`${tr.getAttribute('data-group')}|${tr.getAttribute('data-rank')}`] = cells;
    }
    return out;
  });
}

/**
 * Close a listening app at once. The browser context outlives each page and keeps its connections, including ones it
 * opened ahead of need that never carry a request: those are not idle to Node, so `close()` alone would wait for them
 * until the server's headers timeout (a minute).
 */
async function closeApp(app: FastifyInstance): Promise<void> {
  app.server.closeAllConnections();
  await app.close();
}

describe('dashboard over a gateway with four simulated ranks under load', { timeout: 120_000 }, () => {
  let gateway: RunningGateway;
  before(async () => {
    gateway = await startGateway({
      port: 0,
      sim: 4,
      // Few running slots and a small KV cache, so queues and KV usage show under a modest load.
      simArgs: ['--log-level', 'warn', '--max-running', '3', '--kv-pages', '64'],
      logger: pino({ level: 'silent' }),
      modelId: 'qwen3',
    });
  });
  after(() => gateway?.close());

  test('every rank has a row; the numbers move under load and in-flight returns to 0 after it', async () => {
    const page = await browser.context.newPage();
    await page.goto(`${gateway.url}/dashboard`);
    await page.waitForFunction(() => Number(document.body.dataset.updates ?? 0) >= 1, null, { timeout: 20_000 });
    const idle = await rows(page);
    assert.equal(Object.keys(idle).length, 4, 'one row per DP rank');
    assert.ok(
      Object.values(idle).every((r) => r.in_flight === '0' && r.dispatched === '0 (0)'),
      JSON.stringify(idle),
    );

    const stop = new AbortController();
    const load = streamingLoad(gateway.url, 20, 30, stop.signal);
    load.catch(() => {}); // awaited below; a failure must not surface as an unhandled rejection meanwhile
    try {
      // Under load: requests in flight, and every rank dispatched to with a measured TTFT and ITL.
      await page.waitForFunction(
        () => Number(document.querySelector('[data-total="in_flight"]')?.textContent) > 0,
        null,
        { timeout: 30_000 },
      );
      await page.waitForFunction(
        // No named inner functions here: tsx would wrap them in a helper the page does not have.
        () =>
          [...document.querySelectorAll('tr[data-rank]')].every(
            (tr) =>
              !(tr.querySelector('td[data-field="ttft"]')?.textContent ?? '–').startsWith('–') &&
              !(tr.querySelector('td[data-field="itl"]')?.textContent ?? '–').startsWith('–') &&
              tr.querySelector('td[data-field="dispatched"]')?.textContent !== '0 (0)',
          ),
        null,
        { timeout: 30_000 },
      );
      // The render count is read before the rows, so a render between the two cannot make the check below vacuous-false.
      const updatesBefore = Number(await page.evaluate(() => document.body.dataset.updates));
      const first = await rows(page);
      // The page keeps polling and the numbers change between two of its renders.
      await page.waitForFunction(
        (before) => {
          const now = [...document.querySelectorAll('tr[data-rank] td[data-field="dispatched"]')]
            .map((td) => td.textContent)
            .join();
          return now !== before;
        },
        Object.values(first)
          .map((r) => r.dispatched)
          .join(),
        { timeout: 30_000 },
      );
      assert.ok(
        Number(await page.evaluate(() => document.body.dataset.updates)) > updatesBefore,
        'the page kept polling',
      );
      // The KV bars and the header totals follow the engines' reports.
      await page.waitForFunction(() => document.querySelectorAll('.kv .fill').length === 4, null, { timeout: 30_000 });
      const shot = await page.screenshot({ fullPage: true });
      assert.deepEqual([...shot.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'a PNG');
      assert.ok(shot.length > 10_000, `screenshot of ${shot.length} bytes`);
    } finally {
      stop.abort();
    }
    const sent = (await load).answered;
    assert.ok(sent >= 20, `${sent} requests`);
    // Idle again: the in-flight sets empty, and the page shows it.
    await page.waitForFunction(
      () =>
        [...document.querySelectorAll('tr[data-rank] td[data-field="in_flight"]')].every(
          (td) => td.textContent === '0',
        ),
      null,
      { timeout: 30_000 },
    );
    const end = await rows(page);
    const dispatched = Object.values(end).reduce((sum, r) => sum + Number(r.dispatched!.split(' ')[0]), 0);
    assert.equal(dispatched, sent, 'the dispatch counts add up to the requests sent');
    await page.close();
  });
});

describe('dashboard behind an API key', { timeout: 60_000 }, () => {
  const KEY = 'sk-dashboard-test';
  const seen: Array<{ url: string; headers: IncomingHttpHeaders }> = [];
  let server: Server;
  let base: string;
  let close: () => Promise<void>;
  before(async () => {
    const { app, backend } = await makeApp();
    backend.rankStatesValue = [
      rankState(0, {
        inFlight: 3,
        load: { numRunning: 3, numWaiting: 1, kvCacheUsage: 0.4 },
        dispatchedPinned: 1,
        dispatchedUnpinned: 9,
        clampEvents: 0,
      }),
    ];
    // The key check of issue #10 (COORDINATION G): /v1/* needs `Authorization: Bearer <key>`; the page itself does not.
    server = createServer((req, res) => {
      seen.push({ url: req.url ?? '', headers: req.headers });
      if ((req.url ?? '').startsWith('/v1/') && req.headers.authorization !== `Bearer ${KEY}`) {
        res
          .writeHead(401, { 'content-type': 'application/json' })
          .end(JSON.stringify({ error: { message: 'invalid API key' } }));
        return;
      }
      void app.inject({ method: req.method as 'GET', url: req.url ?? '/', headers: req.headers }).then((r) => {
        res.writeHead(r.statusCode, r.headers as Record<string, string>).end(r.rawPayload);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const address = server.address();
    base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
    close = async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections(); // see `closeApp`
      await closed;
      await app.close();
    };
  });
  after(() => close?.());

  test('asks for the key, then sends it as a Bearer header (never in a URL) and shows the ranks', async () => {
    const page = await browser.context.newPage();
    await page.goto(`${base}/dashboard`);
    await page.waitForFunction(() => document.getElementById('status-text')?.textContent?.includes('401'), null, {
      timeout: 20_000,
    });
    assert.match((await page.textContent('#key-hint')) ?? '', /enter the API key/);
    await page.fill('#api-key', KEY);
    await page.click('#key-form button');
    await page.waitForFunction(() => Number(document.body.dataset.updates ?? 0) >= 1, null, { timeout: 20_000 });
    assert.equal(await page.locator('tr[data-rank]').count(), 1);
    const [row] = Object.values(await rows(page));
    assert.equal(row!.in_flight, '3');
    assert.equal(row!.num_waiting_reqs, '1');
    assert.equal(row!.dispatched, '10 (1)');
    assert.match(row!.kv_cache_usage!, /40\.0%/);
    assert.match((await page.textContent('#status-text')) ?? '', /live/);
    const api = seen.filter((s) => s.url.startsWith('/v1/gateway/ranks'));
    assert.ok(
      api.some((s) => s.headers.authorization === `Bearer ${KEY}`),
      'a Bearer header with the key',
    );
    assert.ok(
      seen.every((s) => !s.url.includes(KEY)),
      'the key never appears in a URL',
    );
    assert.ok(!page.url().includes(KEY), 'the key is not in the page URL');
    await page.close();
  });
});

describe("dashboard: flow control's queue per band and per tenant", { timeout: 60_000 }, () => {
  let base: string;
  let close: () => Promise<void>;
  before(async () => {
    const { app, backend } = await makeApp();
    backend.rankStatesValue = [rankState(0, { inFlight: 1 })];
    (backend.stats as { flowControl: unknown }).flowControl = {
      queuedByBand: [0, 3, 5],
      queuedByTenant: { 'team-a': 5, 'team-b': 3 },
      outcomes: { granted: 7, refused: 1, timed_out: 2, shed: 0, left: 4, unavailable: 0 },
    };
    base = await app.listen({ port: 0, host: '127.0.0.1' });
    close = () => closeApp(app);
  });
  after(() => close?.());

  test('each band and each waiting tenant has its count; the outcomes so far are shown', async () => {
    const page = await browser.context.newPage();
    await page.goto(`${base}/dashboard`);
    await page.waitForFunction(() => Number(document.body.dataset.updates ?? 0) >= 1, null, { timeout: 20_000 });
    const text = (selector: string) => page.textContent(selector);
    assert.equal(await text('[data-band="critical"]'), 'critical 0');
    assert.equal(await text('[data-band="standard"]'), 'standard 3');
    assert.equal(await text('[data-band="sheddable"]'), 'sheddable 5');
    assert.equal(await text('[data-tenant="team-a"]'), 'team-a 5');
    assert.equal(await text('[data-tenant="team-b"]'), 'team-b 3');
    assert.match((await text('.queue-ended')) ?? '', /granted 7 · timed out 2 · refused 1 · shed 0 · left 4/);
    await page.close();
  });
});
