/**
 * End to end (issue 29): simulated ranks publishing KV-cache events in their engine's format (PUB + replay ROUTER,
 * src/sim/kv-events.ts) behind a gateway whose `cache_aware` policy routes on them (src/gateway/kv-events.ts). For both
 * engines: the group's `kvEventsConfig` subscribes every rank; a repeated long prefix goes back to the rank that
 * announced it; the predicted cache hit equals the engine's `cached_tokens` (routing precision 1 in /metrics). For
 * vLLM, a group with no configuration subscribes from the ready response's `kv_events_config` (newer vLLM). Each
 * file run takes its own consecutive ports (`freePortRange`).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type OpenAI from 'openai';
import { waitFor } from '../helpers/async.js';
import { openaiClient } from '../helpers/gateway.js';
import { freePortRange } from '../helpers/net.js';
import { DEFAULT_SIM_ARGS, startTestGateway, type TestGateway } from '../helpers/test-gateway.js';

const MODEL = 'sim';
const DOC = Array.from({ length: 80 }, (_, i) => `Paragraph ${i}: the engine says what its cache holds.`).join('\n');

type UsageWithDetails = OpenAI.CompletionUsage & { prompt_tokens_details?: { cached_tokens?: number } };
const cachedOf = (u: OpenAI.CompletionUsage | null | undefined): number =>
  (u as UsageWithDetails | null | undefined)?.prompt_tokens_details?.cached_tokens ?? -1;

async function kvConfig(ranks: number): Promise<Record<string, unknown>> {
  const events = await freePortRange(ranks);
  const replay = await freePortRange(ranks);
  return {
    enable_kv_cache_events: true,
    endpoint: `tcp://*:${events}`,
    replay_endpoint: `tcp://*:${replay}`,
    topic: 'kv-events',
  };
}

/** Send the document with `n` different questions; returns each answer's cached tokens and the ranks' dispatches. */
async function conversation(gw: TestGateway, client: OpenAI, n: number): Promise<{ cached: number[]; prompt: number }> {
  const first = await client.completions.create({ model: MODEL, prompt: `${DOC}\nQuestion 0?`, max_tokens: 2 });
  assert.equal(cachedOf(first.usage), 0, 'nothing cached yet');
  // The rank announces the document's blocks when it schedules them: wait for the batch before the next turns.
  await waitFor(async () => (await gw.metricSum('model_gateway_kv_event_batches_total')) >= 1, 'a KV-event batch');
  const cached: number[] = [];
  for (let i = 1; i <= n; i++) {
    const r = await client.completions.create({ model: MODEL, prompt: `${DOC}\nQuestion ${i}?`, max_tokens: 2 });
    cached.push(cachedOf(r.usage));
  }
  return { cached, prompt: first.usage!.prompt_tokens };
}

for (const engine of ['tokenspeed', 'vllm'] as const) {
  describe(`KV events from simulated ${engine} ranks steer cache_aware`, { timeout: 60_000 }, () => {
    let gateway: TestGateway;
    let client: OpenAI;

    before(async () => {
      gateway = await startTestGateway({
        engine,
        sim: 2,
        dpPolicy: 'cache_aware',
        kvEventsConfig: await kvConfig(2),
      });
      client = openaiClient(gateway);
    });
    after(() => gateway?.close());

    test('the prefix goes back to the rank that announced it; predictions match cached_tokens', async () => {
      const { cached, prompt } = await conversation(gateway, client, 3);
      for (const c of cached) assert.ok(c >= prompt - 40 && c % 16 === 0, `a whole-block hit (${c} of ${prompt})`);
      const unpinned = (await gateway.rankStates()).map((r) => r.dispatched_unpinned);
      assert.ok(unpinned.includes(4), `every turn on one rank (${unpinned.join('/')})`);
      const predicted = await gateway.metricSum('model_gateway_routing_predicted_cached_tokens_total');
      const confirmed = await gateway.metricSum('model_gateway_routing_confirmed_cached_tokens_total');
      const reported = await gateway.metricSum('model_gateway_routing_reported_cached_tokens_total');
      assert.equal(
        predicted,
        cached.reduce((a, b) => a + b, 0),
        'each turn predicted exactly its hit',
      );
      assert.equal(confirmed, predicted, 'routing precision 1');
      assert.equal(reported, predicted);
      assert.equal(await gateway.metricSum('model_gateway_kv_event_unsure_total'), 0, 'no stream was lost');
      assert.equal(await gateway.metricSum('model_gateway_kv_event_frames_dropped_total'), 0);
      assert.ok(
        (await gateway.metricSum('model_gateway_kv_event_replays_total', 'outcome="requested"')) >= 2,
        'each subscriber asked its rank for what it published before the subscription took effect',
      );
      assert.equal(await gateway.metricSum('model_gateway_kv_event_replays_total', 'outcome="failed"'), 0);
    });
  });
}

describe('KV events from the ready response (newer vLLM reports its config there)', { timeout: 60_000 }, () => {
  let gateway: TestGateway;
  let client: OpenAI;

  before(async () => {
    const config = await kvConfig(2);
    gateway = await startTestGateway({
      engine: 'vllm',
      sim: 2,
      dpPolicy: 'cache_aware',
      simArgs: [...DEFAULT_SIM_ARGS, `--kv-events-config=${JSON.stringify(config)}`],
    });
    client = openaiClient(gateway);
  });
  after(() => gateway?.close());

  test('without a group configuration the gateway subscribes from kv_events_config', async () => {
    const { cached, prompt } = await conversation(gateway, client, 2);
    for (const c of cached) assert.ok(c >= prompt - 40, `a hit (${c} of ${prompt})`);
    assert.ok((await gateway.metricSum('model_gateway_kv_event_batches_total')) >= 1);
    const predicted = await gateway.metricSum('model_gateway_routing_predicted_cached_tokens_total');
    assert.equal(await gateway.metricSum('model_gateway_routing_confirmed_cached_tokens_total'), predicted);
  });
});
