/**
 * End to end: the real gateway (`startGateway`, or `serve --workers N` with GATEWAY_TEST_WORKERS=N) with two simulated
 * TokenSpeed ranks in child processes, driven by the official `openai` npm client: every scenario of
 * openai-sdk-scenarios.ts (the basics, the issue #4 parameters and the chat messages and tools), which
 * openai-sdk-vllm.test.ts runs against vLLM ranks; and startGateway's fail-fast start.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startTestGateway, testWorkers, type TestGateway } from '../helpers/test-gateway.js';
import { sdkBasics, sdkChat, sdkParameters } from './openai-sdk-scenarios.js';

const MODEL = 'sim-qwen3';

describe('openai SDK against a gateway over 2 simulated TokenSpeed ranks', () => {
  let gateway: TestGateway;
  before(async () => {
    gateway = await startTestGateway({ sim: 2, modelId: MODEL, simArgs: [] });
  });
  after(() => gateway?.close());
  sdkBasics(() => gateway, MODEL);
  sdkParameters(() => gateway, MODEL);
  sdkChat(() => gateway, MODEL);
});

// startGateway's own wait for the ranks (waitForRanks, the default); `serve` serves at once by design (503 `starting`
// until ranks join, serve-at-once.test.ts), with one process or N, so there is nothing to fail fast in a child.
const WAIT_FOR_RANKS_ONLY = testWorkers() > 1 ? 'startGateway waitForRanks only: serve serves at once' : false;

test(
  'startGateway fails fast (and cleans up) when a simulated rank dies before the handshake',
  { skip: WAIT_FOR_RANKS_ONLY },
  async () => {
    await assert.rejects(
      startTestGateway({ sim: 1, simArgs: ['--no-such-option'] }),
      /simulated rank 0 exited \(code 2/,
    );
  },
);
