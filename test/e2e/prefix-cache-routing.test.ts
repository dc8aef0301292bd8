/**
 * End to end (issue 12 parts 1-2): simulated ranks with prefix caches behind a gateway using the `cache_aware` DP
 * policy, over HTTP with the `openai` SDK, for both engine families. A repeated long prefix goes back to the rank
 * that cached it, and the hit shows up as `usage.prompt_tokens_details.cached_tokens` (TokenSpeed `cached_tokens`,
 * vLLM `prefill_stats.num_cached_tokens`), streaming and not. Two ranks per group, time scale 0.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type OpenAI from 'openai';
import { openaiClient } from '../helpers/gateway.js';
import { startTestGateway, type TestGateway } from '../helpers/test-gateway.js';

const MODEL = 'sim';
/** A long, fixed document: well over a thousand tokens, so dozens of full 16-token blocks. */
const DOC = Array.from(
  { length: 120 },
  (_, i) => `Paragraph ${i}: routing keeps a conversation where its cache is.`,
).join('\n');

type UsageWithDetails = OpenAI.CompletionUsage & { prompt_tokens_details?: { cached_tokens?: number } };
const cachedOf = (u: OpenAI.CompletionUsage | null | undefined): number | undefined =>
  (u as UsageWithDetails | null | undefined)?.prompt_tokens_details?.cached_tokens;

for (const engine of ['tokenspeed', 'vllm'] as const) {
  describe(`cache_aware routing and cached_tokens, simulated ${engine} ranks`, () => {
    let gateway: TestGateway;
    let client: OpenAI;

    before(async () => {
      gateway = await startTestGateway({ engine, sim: 2, dpPolicy: 'cache_aware' });
      client = openaiClient(gateway);
    });
    after(() => gateway?.close());

    test('a fresh prompt reports no cached tokens; the same prefix again hits the rank that cached it', async () => {
      const first = await client.completions.create({ model: MODEL, prompt: `${DOC}\nQuestion one?`, max_tokens: 4 });
      assert.equal(cachedOf(first.usage), 0, 'nothing cached yet');
      const promptTokens = first.usage!.prompt_tokens;
      assert.ok(promptTokens > 1000, `a long prompt (${promptTokens} tokens)`);

      const stream = await client.completions.create({
        model: MODEL,
        prompt: `${DOC}\nQuestion two?`,
        max_tokens: 4,
        stream: true,
        stream_options: { include_usage: true },
      });
      let usage: OpenAI.CompletionUsage | null = null;
      for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
      const cached = cachedOf(usage);
      assert.ok(
        cached !== undefined && cached >= promptTokens - 40 && cached % 16 === 0,
        `whole 16-token blocks of the shared document hit (${cached} of ${promptTokens})`,
      );

      const chat = await client.chat.completions.create({
        model: MODEL,
        messages: [{ role: 'user', content: 'Hi' }],
        max_tokens: 2,
      });
      assert.equal(cachedOf(chat.usage) !== undefined, true, 'chat usage carries prompt_tokens_details too');

      const unpinned = (await gateway.rankStates()).map((r) => r.dispatched_unpinned);
      assert.ok(
        unpinned.includes(2) || unpinned.includes(3),
        `both document requests went to one rank (${unpinned.join('/')})`,
      );
      const guards = (await gateway.metricsText())
        .split('\n')
        .filter((l) => l.startsWith('model_gateway_rank_sole_client_guard{'));
      assert.equal(guards.length, 2, guards.join('\n'));
      assert.ok(
        guards.every((l) => l.endsWith(' 0')),
        `the gateway is the ranks' only client: ${guards.join('\n')}`,
      );
    });
  });
}
