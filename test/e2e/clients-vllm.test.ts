/**
 * End to end: the client matrix (client-scenarios.ts) against one gateway over two simulated vLLM EngineCore ranks
 * that think before answering (`--reasoning`, parsed with `--reasoning-parser qwen3`), time scale 0. vLLM carries the
 * constraints in `structured_outputs` (engine-wire.md 5.3).
 */
import { after, before, describe } from 'node:test';
import { startTestGateway, type TestGateway } from '../helpers/test-gateway.js';
import { clientScenarios } from './client-scenarios.js';

const MODEL = 'sim-qwen3';

describe('real clients against simulated vLLM ranks that reason', () => {
  let gateway: TestGateway;
  before(async () => {
    gateway = await startTestGateway({
      modelId: MODEL,
      engine: 'vllm',
      sim: 2,
      simArgs: ['--time-scale', '0', '--log-level', 'warn', '--reasoning'],
      reasoningParser: 'qwen3',
    });
  });
  after(() => gateway?.close());
  clientScenarios(() => gateway, MODEL, { reasoning: true });
});
