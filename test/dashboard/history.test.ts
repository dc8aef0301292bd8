/**
 * The dashboard's history (issue 32 part 4) in a real headless Chromium, over a real gateway with four simulated
 * ranks under streaming load: one process, or `serve --workers N` with GATEWAY_TEST_WORKERS=N
 * (test/helpers/test-gateway.ts; every read goes through the page or HTTP). The five charts are uPlot's, fed with
 * points, and their lines are drawn on their canvases. A simulated rank SIGKILLed during the test shows in the event
 * list (newest first) as a `rank_died` event naming its cause, its row turns dead with that cause, and its group's
 * badge turns `degraded`. The page's same-origin CSP is never violated (uPlot is served by the gateway).
 *
 * With WRITE_DASHBOARD_PNG=1 (`npm run docs:dashboard`) the page is given ~10 s more of history before the kill and
 * after it, and its screenshot becomes docs/dashboard.png.
 */
import assert from 'node:assert/strict';
import { copyFile, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Page } from 'playwright-core';
import { startTestGateway, type TestGateway } from '../helpers/test-gateway.js';
import { launchChromium, streamingLoad, type Browser } from './browser.js';

/** An element of the page, as the callbacks below read it (they run inside Chromium). */
interface PageElement {
  readonly textContent: string | null;
  readonly className: string;
  readonly dataset: Readonly<Record<string, string | undefined>>;
  querySelector(selectors: string): PageElement | null;
  querySelectorAll(selectors: string): ArrayLike<PageElement> & Iterable<PageElement>;
}
/** A chart's canvas, as the pixel check reads it. */
interface PageCanvas {
  readonly width: number;
  readonly height: number;
  getContext(kind: '2d'): { getImageData(x: number, y: number, w: number, h: number): { data: ArrayLike<number> } };
}
/**
 * The page's `document` in the callbacks handed to `page.evaluate` / `page.waitForFunction` (declared here instead of
 * through TypeScript's DOM library, as dashboard.test.ts says why).
 */
declare const document: {
  readonly body: { readonly dataset: Readonly<Record<string, string | undefined>> };
  querySelector(selectors: string): (PageElement & PageCanvas) | null;
  querySelectorAll(selectors: string): ArrayLike<PageElement> & Iterable<PageElement>;
};

const SCREENSHOT_TARGET = new URL('../../docs/dashboard.png', import.meta.url);
const WRITE_PNG = process.env.WRITE_DASHBOARD_PNG === '1';

/** How a rank can be found dead (rank-liveness.ts `DeathCause`). */
const DEATH_CAUSES = [
  'engine-core-dead',
  'peer-unreachable',
  'send-timeout',
  'rank-silent',
  'replaced',
  'group-failure',
  'handshake-timeout',
];

/** Resolves once the page rendered `n` more answers (it polls every 500 ms): history for the screenshot. */
async function morePolls(page: Page, n: number): Promise<void> {
  const now = Number(await page.evaluate(() => document.body.dataset.updates));
  await page.waitForFunction((target) => Number(document.body.dataset.updates) >= target, now + n, { timeout: 60_000 });
}

/** Write the page's screenshot to docs/dashboard.png (through a temporary file: never a half-written PNG there). */
async function writeScreenshot(page: Page): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'mg-shot-'));
  try {
    await page.screenshot({ path: join(dir, 'dashboard.png'), fullPage: true });
    await copyFile(join(dir, 'dashboard.png'), SCREENSHOT_TARGET);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** The charts are fed with points and drawn: five uPlot canvases, the tokens/s line's colour on its canvas. */
async function assertChartsDrawn(page: Page): Promise<void> {
  await page.waitForFunction(
    () =>
      Number(document.querySelector('#chart-tokens .plot')?.dataset.last) > 0 &&
      [...document.querySelectorAll('.chart .plot')].every((p) => Number(p.dataset.points) >= 2),
    null,
    { timeout: 30_000 },
  );
  assert.equal(await page.locator('#history .uplot').count(), 5, 'five uPlot charts');
  assert.equal(await page.locator('#history .uplot canvas').count(), 5, 'each on its canvas');
  const linePixels = await page.evaluate(() => {
    const canvas = document.querySelector('#chart-tokens canvas')!;
    const { data } = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height);
    let n = 0;
    // #4c8dff, give or take the line's anti-aliasing.
    for (let i = 0; i < data.length; i += 4)
      if (Math.abs(data[i]! - 0x4c) < 40 && Math.abs(data[i + 1]! - 0x8d) < 40 && data[i + 2]! > 200) n++;
    return n;
  });
  assert.ok(linePixels > 20, `${linePixels} pixels of the tokens/s line`);
}

/**
 * SIGKILL DP rank 2's simulated rank (firing `killed` first); its death shows in the event list with its cause, and its
 * row turns dead.
 */
async function assertDeathShown(page: Page, gateway: TestGateway, killed: AbortController): Promise<void> {
  const victim = gateway.simRanks().find((r) => r.engineIndex === 2);
  assert.ok(victim !== undefined, 'the simulated rank of DP rank 2 runs');
  // From here a request whose ADD was on its way to DP rank 2 may be answered 503 naming it (streamingLoad).
  killed.abort();
  process.kill(victim.pid, 'SIGKILL');
  await page.waitForFunction(
    () => document.querySelector('li.event[data-kind="rank_died"][data-rank="2"]') !== null,
    null,
    { timeout: 60_000 },
  );
  const list = await page.evaluate(() =>
    [...document.querySelectorAll('li.event')].map((li) => ({
      id: Number(li.dataset.id),
      kind: li.dataset.kind,
      rank: li.dataset.rank,
      cause: li.dataset.cause,
      text: li.textContent ?? '',
    })),
  );
  const died = list.find((e) => e.kind === 'rank_died' && e.rank === '2')!;
  assert.ok(DEATH_CAUSES.includes(died.cause ?? ''), JSON.stringify(died));
  assert.match(died.text, new RegExp(`DP rank 2 died \\(${died.cause}\\)`));
  const ids = list.map((e) => e.id);
  assert.deepEqual(
    ids,
    [...ids].sort((a, b) => b - a),
    'newest first',
  );
  assert.ok(
    list.filter((e) => e.kind === 'rank_joined').every((e) => e.id < died.id),
    'the death comes after every join',
  );
  // Its row turns dead with the cause; the group is degraded (one rank not ready).
  await page.waitForFunction(() => document.querySelector('tr[data-rank="2"]')?.className === 'rank-dead', null, {
    timeout: 30_000,
  });
  assert.equal(await page.textContent('tr[data-rank="2"] td[data-field="state"]'), `dead${died.cause}`);
  assert.equal(await page.getAttribute('tr[data-rank="2"] .cause', 'data-cause'), died.cause);
  await page.waitForFunction(
    () => document.querySelector('section.group h2 .badge')?.textContent === 'degraded',
    null,
    {
      timeout: 30_000,
    },
  );
  assert.equal(await page.locator('tr[data-rank].rank-ready').count(), 3);
}

describe('dashboard history: uPlot charts and the event list', { timeout: 180_000 }, () => {
  let browser: Browser;
  let gateway: TestGateway;
  before(async () => {
    browser = await launchChromium();
    // Real step times, few running slots and a small KV cache: in-flight, queues and KV usage show under the load.
    gateway = await startTestGateway({
      modelId: 'qwen3',
      sim: 4,
      simArgs: ['--log-level', 'warn', '--max-running', '3', '--kv-pages', '64'],
    });
  });
  after(async () => {
    await gateway?.close();
    await browser?.close();
  });

  test(
    'under load the charts are drawn with data; a SIGKILLed rank dies on the page with its cause',
    { timeout: 150_000 },
    async () => {
      const page = await browser.context.newPage();
      const cspViolations: string[] = [];
      page.on('console', (m) => {
        if (/Content Security Policy/i.test(m.text())) cspViolations.push(m.text());
      });
      await page.goto(`${gateway.url}/dashboard`);
      await page.waitForFunction(() => document.querySelectorAll('tr[data-rank].rank-ready').length === 4, null, {
        timeout: 30_000,
      });
      const stop = new AbortController();
      const killed = new AbortController();
      const load = streamingLoad(gateway.url, 16, Infinity, stop.signal, { rank: 2, killed: killed.signal });
      load.catch(() => {}); // awaited below; a failure must not surface as an unhandled rejection meanwhile
      try {
        await assertChartsDrawn(page);
        if (WRITE_PNG) await morePolls(page, 20);
        await assertDeathShown(page, gateway, killed);
        if (WRITE_PNG) {
          await morePolls(page, 20);
          await writeScreenshot(page);
        }
      } finally {
        stop.abort();
      }
      // A request lost to the death was answered 503 naming DP rank 2 (streamingLoad checks it); the rest were served.
      assert.ok((await load).answered > 0, 'requests were answered');
      assert.deepEqual(cspViolations, []);
      await page.close();
    },
  );

  test('the committed screenshot is a PNG', async () => {
    const png = await readFile(SCREENSHOT_TARGET);
    assert.deepEqual([...png.subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47]);
  });
});
