/**
 * Headless Chromium for the dashboard tests: Debian's `chromium` package (`apt-get install -y chromium`; .ci/run
 * installs it when missing) driven by playwright-core over CDP, with a fresh profile folder per launch.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

/** Where Debian's package puts the browser. */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/** A launched browser context and its cleanup (closes the browser, removes the profile folder). */
export interface Browser {
  context: BrowserContext;
  close(): Promise<void>;
}

/** Launch headless Chromium with a fresh `--user-data-dir`. Throws, naming the fix, when the browser is missing. */
export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium; .ci/run does it)`);
  }
  const profile = await mkdtemp(join(tmpdir(), 'mg-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1500, height: 480 },
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    timeout: 30_000,
  });
  return {
    context,
    async close() {
      await context.close().catch(() => {});
      await rm(profile, { recursive: true, force: true });
    },
  };
}

/** What a streaming load ended with: requests answered 200, and those a killed rank ended before their first byte. */
export interface LoadOutcome {
  readonly answered: number;
  readonly lostToDeath: number;
}

/**
 * Streamed completions (model `qwen3`) from `concurrency` clients until `stop` fires, each client at most `limit`
 * requests. Each must be answered 200 (a stream whose rank dies ends with an SSE error event after its first byte),
 * except, once `deathOf.killed` has fired, a request that was still waiting on the killed DP rank `deathOf.rank`: the
 * gateway answers it 503 with an OpenAI-style error naming that rank (docs/operations.md "One rank dies"), and it is
 * counted in `lostToDeath`.
 */
export function streamingLoad(
  url: string,
  concurrency: number,
  limit: number,
  stop: AbortSignal,
  deathOf?: { readonly rank: number; readonly killed: AbortSignal },
): Promise<LoadOutcome> {
  let lostToDeath = 0;
  const one = async (): Promise<number> => {
    let done = 0;
    while (!stop.aborted && done < limit) {
      const res = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'qwen3',
          prompt: 'Tell me about the ranks',
          max_tokens: 60 + (done % 5) * 30,
          stream: true,
        }),
      });
      const body = await res.text();
      if (res.status === 503 && deathOf?.killed.aborted === true) {
        const { error } = JSON.parse(body) as { error: { type: string; message: string } };
        assert.equal(error.type, 'service_unavailable_error', body);
        assert.match(error.message, new RegExp(`DP rank ${deathOf.rank}\\b`), body);
        lostToDeath++;
        continue;
      }
      assert.equal(res.status, 200, body);
      done++;
    }
    return done;
  };
  return Promise.all(Array.from({ length: concurrency }, one)).then((n) => ({
    answered: n.reduce((a, b) => a + b, 0),
    lostToDeath,
  }));
}
