/**
 * Issue #4 part 7 (chat) end to end through the official `openai` client against `startGateway` with simulated
 * TokenSpeed ranks: content as a string or a text-parts array (joined with "\n" as vLLM does), tools rendered into the chat template (visible as a
 * longer prompt), a tool-calling conversation (assistant `tool_calls` with null content, then a `tool` message),
 * `chat_template_kwargs` reaching the template, `max_completion_tokens`, and `tool_choice: "auto"` answered with the
 * parsed call (the hermes parser the Qwen3 template implies; issue #11).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { openaiClient } from '../helpers/gateway.js';
import { startTestGateway, type TestGateway } from '../helpers/test-gateway.js';

const WEATHER_TOOL: OpenAI.Chat.Completions.ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

describe('chat messages, tools and template options via the openai SDK', () => {
  let gateway: TestGateway;
  let client: OpenAI;

  before(async () => {
    gateway = await startTestGateway({ sim: 2 });
    client = openaiClient(gateway);
  });
  after(() => gateway?.close());

  /** Prompt tokens the gateway counted for `body` (max_tokens 1 keeps the answer short). */
  async function promptTokens(body: Record<string, unknown>): Promise<number> {
    const res = await client.chat.completions.create({
      model: 'sim',
      max_tokens: 1,
      ...body,
    } as unknown as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming);
    assert.equal(res.choices.length, 1);
    return res.usage!.prompt_tokens;
  }

  test('a text-parts array means the same as its parts joined with a newline (as vLLM joins them)', async () => {
    const asString = await promptTokens({ messages: [{ role: 'user', content: 'Hello\nthere' }] });
    const asParts = await promptTokens({
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Hello' },
            { type: 'text', text: 'there' },
          ],
        },
      ],
    });
    assert.equal(asParts, asString);
  });

  test('tools are rendered into the prompt (tool_choice absent or "none")', async () => {
    const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
    const without = await promptTokens({ messages });
    const withTools = await promptTokens({ messages, tools: [WEATHER_TOOL] });
    const withNone = await promptTokens({ messages, tools: [WEATHER_TOOL], tool_choice: 'none' });
    assert.ok(withTools > without + 20, `tools add the tool schema to the prompt (${without} → ${withTools} tokens)`);
    assert.equal(withNone, withTools);
  });

  test('a tool-calling conversation: assistant tool_calls, then the tool result, then an answer', async () => {
    const res = await client.chat.completions.create({
      model: 'sim',
      max_completion_tokens: 8,
      tools: [WEATHER_TOOL],
      messages: [
        { role: 'system', content: 'You can call tools.' },
        { role: 'user', content: 'What is the weather in Paris?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_1', content: '{"temperature_c": 18}' },
      ],
    });
    const c = res.choices[0]!;
    assert.ok((c.message.content ?? '').length > 0);
    assert.ok(c.finish_reason === 'stop' || c.finish_reason === 'length');
    assert.ok(res.usage!.completion_tokens <= 8, 'max_completion_tokens honoured');
    const shorter = await promptTokens({
      tools: [WEATHER_TOOL],
      messages: [
        { role: 'system', content: 'You can call tools.' },
        { role: 'user', content: 'What is the weather in Paris?' },
      ],
    });
    assert.ok(res.usage!.prompt_tokens > shorter, 'the tool call and its result are part of the prompt');
  });

  test('chat_template_kwargs reach the template (Qwen3 enable_thinking: false adds an empty think block)', async () => {
    const messages = [{ role: 'user', content: 'Hi' }];
    const plain = await promptTokens({ messages });
    const noThinking = await promptTokens({ messages, chat_template_kwargs: { enable_thinking: false } });
    assert.ok(noThinking > plain, `${plain} → ${noThinking}`);
  });

  test('tool_choice "auto" returns the call the rank writes (hermes parser read off the Qwen3 template)', async () => {
    const res = await client.chat.completions.create({
      model: 'sim',
      messages: [{ role: 'user', content: 'Weather?' }],
      tools: [WEATHER_TOOL],
      tool_choice: 'auto',
    });
    const choice = res.choices[0]!;
    assert.equal(choice.finish_reason, 'tool_calls');
    const call = choice.message.tool_calls![0]!;
    assert.ok(call.type === 'function' && call.function.name === 'get_weather', JSON.stringify(call));
    assert.equal(typeof JSON.parse(call.function.arguments).city, 'string');
    assert.equal(choice.message.content, null);
  });
});
