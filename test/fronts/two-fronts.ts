/**
 * Test set-up shared by the router-service tests: a `RouterService` bound on a fresh socket path with two fronts'
 * channels connected to it (front ids 1 and 2). `close()` closes the channels, the service and the directory.
 */
import assert from 'node:assert/strict';
import type { Logger } from 'pino';
import { DEFAULT_SAMPLING, type GenerateRequest } from '../../src/protocols/types.js';
import { FrontChannel } from '../../src/fronts/front/front-channel.js';
import { ResponsesStore } from '../../src/server/responses/store.js';
import { RouterService, type RouterServiceOptions } from '../../src/fronts/router/router-service.js';
import { freshDir } from '../helpers/async.js';

/** What {@link openTwoFronts} returns. */
export interface TwoFronts {
  service: RouterService;
  address: string;
  a: FrontChannel;
  b: FrontChannel;
  close(): Promise<void>;
}

/** Binds `new RouterService(options)` in a fresh directory (`prefix`) and connects fronts 1 and 2. */
export async function openTwoFronts(prefix: string, options: RouterServiceOptions, log: Logger): Promise<TwoFronts> {
  const dir = await freshDir(prefix);
  const service = new RouterService(options);
  const address = `${dir.dir}/fronts.sock`;
  await service.bind(address);
  const a = await FrontChannel.connect(address, 1, service.frontToken, log);
  const b = await FrontChannel.connect(address, 2, service.frontToken, log);
  return {
    service,
    address,
    a,
    b,
    async close() {
      a.close();
      b.close();
      service.close();
      await dir.cleanup();
    },
  };
}

/** A streamed request `requestId` of 3 prompt tokens and `maxNewTokens`. */
export function streamedRequest(requestId: string, maxNewTokens: number): GenerateRequest {
  return {
    requestId,
    promptTokenIds: [1, 2, 3],
    sampling: { ...DEFAULT_SAMPLING, maxNewTokens },
    stream: true,
    returnLogprob: false,
  };
}

/** Resolves once `cond()` holds (polled every 5 ms); fails the test naming `what` after `timeoutMs`. */
export async function until(cond: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * Router options over one fake group `backend` with no cap, no snapshot ticks and no refused-sends clock in a test's
 * time (a lane ends only by its bytes), for the tests of a front that stops reading.
 */
export function unhurriedOptions(backend: unknown, logger: Logger): RouterServiceOptions {
  return {
    groups: [{ worker: 'ipc:///fake', name: 'fake', engine: 'tokenspeed', backend: backend as never }],
    store: new ResponsesStore(),
    maxConcurrentRequests: 0,
    logger,
    snapshotIntervalMs: 600_000,
    sendTimeoutMs: 600_000,
  };
}
