/**
 * End to end (issue 26 part 2): simulated vLLM ranks sending each `EngineCoreOutput` layout (docs/wire/vllm-output.md)
 * behind a real gateway, over HTTP with the `openai` SDK. In every case the engine's prefix-cache hit
 * (`prefill_stats.num_cached_tokens`, at index 10 in the 13-field layout, 11 in the 16-field one) reaches
 * `usage.prompt_tokens_details.cached_tokens`, streamed and not, and the gateway logs the rank's layout once:
 * - 13 fields with the short ready response, as vLLM 9aaf83ef / 52a31cce send them: decided from the outputs' shape;
 * - 16 fields (SMG's layout), long ready response with a version naming no layout: decided from the shape;
 * - 13 fields, long ready response whose `vllm_version` names vLLM commit 52a31cce: decided from the ready response.
 * One gateway with one rank per case, time scale 0. In-process only (the log records and the decode-error counter are
 * the engine client's view).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type OpenAI from 'openai';
import { startGateway, type RunningGateway } from '../../src/gateway/index.js';
import { openaiClient } from '../helpers/gateway.js';
import { captureLogs, type LogRecord } from '../helpers/logs.js';

const MODEL = 'sim-qwen3';
/** A long fixed document: many full 16-token KV blocks, so a repeat of it is a prefix-cache hit. */
const DOC = Array.from(
  { length: 60 },
  (_, i) => `Line ${i}: the engine says how much of this prompt it had cached.`,
).join('\n');

type UsageWithDetails = OpenAI.CompletionUsage & { prompt_tokens_details?: { cached_tokens?: number } };
const cachedOf = (u: OpenAI.CompletionUsage | null | undefined): number | undefined =>
  (u as UsageWithDetails | null | undefined)?.prompt_tokens_details?.cached_tokens;

const CASES = [
  {
    name: '13 fields, short ready response (vLLM 9aaf83ef / 52a31cce)',
    simArgs: ['--ready-response', 'short'],
    layout: 13,
    decidedBy: 'shape',
  },
  { name: '16 fields (SMG), long ready response', simArgs: ['--output-layout', '16'], layout: 16, decidedBy: 'shape' },
  {
    name: '13 fields, vllm_version naming 52a31cce',
    simArgs: ['--vllm-version', '0.21.1.dev325+g52a31ccec.d20260527'],
    layout: 13,
    decidedBy: 'ready-response',
  },
] as const;

for (const c of CASES) {
  describe(`vLLM output layout: ${c.name}`, () => {
    let gateway: RunningGateway;
    let client: OpenAI;
    let records: LogRecord[];

    before(async () => {
      const logs = captureLogs('info');
      records = logs.records;
      gateway = await startGateway({
        port: 0,
        logger: logs.logger,
        modelId: MODEL,
        groups: [{ engine: 'vllm', sim: 1, simArgs: ['--time-scale', '0', '--log-level', 'warn', ...c.simArgs] }],
      });
      client = openaiClient(gateway);
    });
    after(() => gateway?.close());

    test(
      "the engine's cached tokens reach usage, streamed and not; the layout is decided and logged once",
      { timeout: 120_000 },
      async () => {
        const first = await client.completions.create({ model: MODEL, prompt: `${DOC}\nQuestion one?`, max_tokens: 4 });
        assert.equal(cachedOf(first.usage), 0, 'nothing cached yet');
        const promptTokens = first.usage!.prompt_tokens;
        assert.ok(promptTokens > 400, `a long prompt (${promptTokens} tokens)`);

        const again = await client.completions.create({ model: MODEL, prompt: `${DOC}\nQuestion two?`, max_tokens: 4 });
        const cached = cachedOf(again.usage);
        assert.ok(
          cached !== undefined && cached >= promptTokens - 40 && cached % 16 === 0,
          `the shared document hit, in whole blocks (${cached} of ${promptTokens})`,
        );

        const stream = await client.completions.create({
          model: MODEL,
          prompt: `${DOC}\nQuestion three?`,
          max_tokens: 4,
          stream: true,
          stream_options: { include_usage: true },
        });
        let usage: OpenAI.CompletionUsage | null = null;
        for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
        assert.equal(cachedOf(usage), cached, 'streamed: the same hit in the usage chunk');

        const group = gateway.groups[0]!;
        assert.equal(group.client.stats.decodeErrors, 0, 'every output message decoded');
        const decided = records.filter(
          (r) => typeof r.msg === 'string' && r.msg.includes('vLLM EngineCoreOutput in the'),
        );
        assert.equal(decided.length, 1, `one decision logged: ${JSON.stringify(decided)}`);
        assert.deepEqual(
          [decided[0]!.engineIndex, decided[0]!.outputLayout, decided[0]!.decidedBy],
          [0, c.layout, c.decidedBy],
        );
        assert.match(decided[0]!.msg, new RegExp(`^DP rank 0: vLLM EngineCoreOutput in the ${c.layout}-field layout`));
      },
    );
  });
}
