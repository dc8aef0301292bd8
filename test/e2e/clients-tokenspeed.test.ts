/**
 * End to end: the client matrix (client-scenarios.ts) against one gateway over two simulated TokenSpeed ranks
 * (time scale 0): LangChain JS, the Vercel AI SDK (openai-compatible and the default openai() provider), the openai
 * SDK. TokenSpeed carries the constraints as `json_schema` / `regex` (engine-wire.md 4.4).
 */
import { after, before, describe } from 'node:test';
import { startTestGateway, type TestGateway } from '../helpers/test-gateway.js';
import { clientScenarios } from './client-scenarios.js';

const MODEL = 'sim-qwen3';

describe('real clients against simulated TokenSpeed ranks', () => {
  let gateway: TestGateway;
  before(async () => {
    gateway = await startTestGateway({ modelId: MODEL, engine: 'tokenspeed', sim: 2 });
  });
  after(() => gateway?.close());
  clientScenarios(() => gateway, MODEL, { reasoning: false });
});
