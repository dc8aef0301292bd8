/**
 * The client matrix of issue #11, shared by one e2e file per engine family (each starts one gateway): LangChain JS
 * (`bindTools` → `tool_calls`, `withStructuredOutput` → a parsed object), the Vercel AI SDK (`generateText` with a
 * tool round trip, `generateObject` schema-valid; the default `openai()` provider through `/v1/responses`, streaming
 * and not, with a tool round trip that sends earlier items back by reference), and the openai SDK (streamed tool-call
 * deltas, `responses.create` events). The simulated ranks call tools declared in the prompt (the tools the user names)
 * and quote tool results back ("According to the tool, …"), so every round trip is checked end to end.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ChatOpenAI } from '@langchain/openai';
import { tool as lcTool } from '@langchain/core/tools';
import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateObject, generateText, stepCountIs, streamText, tool } from 'ai';
import OpenAI from 'openai';
import { z } from 'zod';

/** The weather tool every scenario offers (zod for the AI SDK and LangChain, JSON schema for the openai SDK). */
const cityInput = z.object({ city: z.string().describe('City name') });
const WEATHER_JSON_SCHEMA = {
  type: 'object',
  properties: { city: { type: 'string' } },
  required: ['city'],
  additionalProperties: false,
};

/** A recipe object: a nested schema with enums, arrays and bounds, as apps ask for. */
const Recipe = z.object({
  name: z.string(),
  servings: z.number().int().min(1).max(12),
  difficulty: z.enum(['easy', 'medium', 'hard']),
  ingredients: z.array(z.object({ item: z.string(), grams: z.number().min(0) })).min(1),
  vegetarian: z.boolean(),
});

/** Register the scenarios in the calling `describe`; `gateway()` returns the started gateway (read inside tests). */
export function clientScenarios(gateway: () => { url: string }, model: string, opts: { reasoning: boolean }): void {
  const baseURL = () => `${gateway().url}/v1`;

  test('LangChain: bindTools returns tool_calls; withStructuredOutput returns a parsed object; streamed tool chunks', async () => {
    const llm = new ChatOpenAI({ model, apiKey: 'unused', configuration: { baseURL: baseURL() }, maxRetries: 0 });
    const weather = lcTool(async ({ city }) => `Sunny in ${city}`, {
      name: 'get_weather',
      description: 'Current weather',
      schema: cityInput,
    });
    const ai = await llm.bindTools([weather]).invoke('What is the weather in Paris? Use get_weather.');
    assert.equal(ai.tool_calls?.length, 1, JSON.stringify(ai));
    assert.equal(ai.tool_calls![0]!.name, 'get_weather');
    assert.equal(typeof ai.tool_calls![0]!.args.city, 'string');
    assert.ok(!String(ai.content).includes('<tool_call>'), 'no markup in content');
    let chunks = 0;
    let merged: Awaited<ReturnType<typeof ai.concat>> | null = null;
    for await (const chunk of await llm.bindTools([weather]).stream('Weather in Rome? Use get_weather.')) {
      chunks++;
      merged = merged === null ? chunk : merged.concat(chunk);
    }
    assert.ok(chunks > 1);
    assert.equal(merged!.tool_calls?.[0]?.name, 'get_weather', JSON.stringify(merged));
    const recipe = await llm.withStructuredOutput(Recipe, { name: 'recipe' }).invoke('Give me a soup recipe.');
    assert.ok(Recipe.safeParse(recipe).success, JSON.stringify(recipe));
  });

  test('AI SDK (openai-compatible): generateText runs a tool round trip; generateObject returns a schema-valid object', async () => {
    const provider = createOpenAICompatible({
      name: 'sim',
      baseURL: baseURL(),
      apiKey: 'unused',
      supportsStructuredOutputs: true,
    });
    let executed = 0;
    const result = await generateText({
      model: provider(model),
      tools: {
        get_weather: tool({
          description: 'Current weather of a city',
          inputSchema: cityInput,
          execute: async ({ city }) => {
            executed++;
            return { city, forecast: 'rain, 9 degrees' };
          },
        }),
      },
      stopWhen: stepCountIs(3),
      prompt: 'What is the weather in Oslo? Use get_weather.',
      maxRetries: 0,
    });
    assert.equal(executed, 1);
    assert.equal(result.steps[0]!.toolCalls[0]!.toolName, 'get_weather');
    assert.equal(result.steps[0]!.finishReason, 'tool-calls');
    assert.match(result.text, /According to the tool, .*rain, 9 degrees/, result.text);
    if (opts.reasoning) assert.ok((result.reasoningText ?? '').length > 0, 'reasoning_content surfaces as reasoning');
    const { object } = await generateObject({
      model: provider(model),
      schema: Recipe,
      prompt: 'A pancake recipe.',
      maxRetries: 0,
    });
    assert.ok(Recipe.safeParse(object).success, JSON.stringify(object));
    // Without structured outputs the provider asks for a JSON object (no schema): still a parsed object.
    const plain = createOpenAICompatible({ name: 'sim', baseURL: baseURL(), apiKey: 'unused' });
    const any = await generateObject({ model: plain(model), output: 'no-schema', prompt: 'Any JSON.', maxRetries: 0 });
    assert.equal(typeof any.object, 'object');
  });

  test('AI SDK default openai() provider: /v1/responses non-streaming and streaming, with a tool round trip', async () => {
    const openai = createOpenAI({ baseURL: baseURL(), apiKey: 'unused' });
    const hello = await generateText({
      model: openai(model),
      prompt: 'Say hello.',
      maxOutputTokens: 60,
      maxRetries: 0,
    });
    assert.ok(hello.text.trim().length > 0);
    assert.ok(!hello.text.includes('<think>'));
    assert.ok(hello.usage.outputTokens! > 0);
    const stream = streamText({ model: openai(model), prompt: 'Tell me a story.', maxOutputTokens: 40, maxRetries: 0 });
    let text = '';
    for await (const part of stream.textStream) text += part;
    assert.ok(text.trim().length > 0);
    assert.equal(text, await stream.text);
    const weather = tool({
      description: 'Current weather',
      inputSchema: cityInput,
      execute: async ({ city }) => `hail in ${city}`,
    });
    const looped = await generateText({
      model: openai(model),
      tools: { get_weather: weather },
      stopWhen: stepCountIs(3),
      prompt: 'Weather in Bergen? Use get_weather.',
      maxRetries: 0,
    });
    assert.equal(looped.steps[0]!.toolCalls[0]!.toolName, 'get_weather');
    assert.match(looped.text, /According to the tool, .*hail in/, looped.text);
    const streamedLoop = streamText({
      model: openai(model),
      tools: { get_weather: weather },
      stopWhen: stepCountIs(3),
      prompt: 'Weather in Lund? Use get_weather.',
      maxRetries: 0,
    });
    assert.match(await streamedLoop.text, /According to the tool, .*hail in/);
  });

  test('openai SDK: streamed tool-call deltas; responses.create streams the documented events', async () => {
    const client = new OpenAI({ baseURL: baseURL(), apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
    const stream = await client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'Weather in Paris? Use get_weather.' }],
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: WEATHER_JSON_SCHEMA } }],
      stream: true,
    });
    const deltas: OpenAI.Chat.Completions.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
    let finish: string | null = null;
    for await (const chunk of stream) {
      deltas.push(...(chunk.choices[0]?.delta.tool_calls ?? []));
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(finish, 'tool_calls');
    assert.match(deltas[0]!.id!, /^call_/);
    assert.equal(deltas[0]!.function!.name, 'get_weather');
    assert.equal(deltas.filter((d) => d.id !== undefined).length, 1, 'id and name once');
    assert.ok(deltas.length > 2, 'then argument fragments');
    assert.equal(typeof JSON.parse(deltas.map((d) => d.function?.arguments ?? '').join('')).city, 'string');

    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const ev of await client.responses.create({
      model,
      input: 'Hello!',
      max_output_tokens: 40,
      stream: true,
    }))
      events.push(ev);
    assert.equal(events[0]!.type, 'response.created');
    assert.ok(events.some((e) => e.type === 'response.output_item.added'));
    assert.ok(events.some((e) => e.type === 'response.output_text.delta'));
    assert.ok(events.some((e) => e.type === 'response.output_text.done'));
    const last = events.at(-1)!;
    assert.ok(last.type === 'response.completed' || last.type === 'response.incomplete', last.type);
    assert.deepEqual(
      events.map((e) => e.sequence_number),
      events.map((_, i) => i),
    );
    const response = await client.responses.create({ model, input: 'Hello again!', max_output_tokens: 40 });
    assert.ok(response.output_text.length > 0);
    assert.equal((await client.responses.retrieve(response.id)).id, response.id);
    assert.equal((await client.models.retrieve(model)).id, model);
  });
}
