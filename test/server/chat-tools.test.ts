/**
 * Chat requests with tools (issue 4 part 7), as vLLM's OpenAI server without a tool-call parser: `tools` rendered into
 * the prompt by the chat template (also with tool_choice "none"), assistant `tool_calls` with null content and `tool`
 * results passed to the template, `add_generation_prompt` / `continue_final_message`, text-part content, and the 400s
 * (tool_choice auto/required/named, malformed tools, deprecated functions/function_call). Every accepted request is
 * checked by the exact prompt token ids submitted to the fake backend against the tokenizer's own rendering.
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import type { ChatMessage } from '../../src/tokenizer/tokenizer.js';
import { useApp } from './helpers.js';

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Current weather of a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
  { type: 'function', function: { name: 'get_time' } },
];

const CALL = { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } };

describe('chat completions with tools', () => {
  const fx = useApp();
  let replyIds: number[];

  before(async () => {
    replyIds = fx.tokenizer.encode('Sunny.', { addSpecialTokens: false });
    fx.backend.onSubmit = (s) => s.stream.pushAll(replyIds, 'stop');
  });

  const post = (payload: Record<string, unknown>, url = '/v1/chat/completions') =>
    fx.app.inject({ method: 'POST', url, payload });

  /** POST the body, expect 200, and return the prompt token ids the fake engine received. */
  async function submittedPrompt(payload: Record<string, unknown>): Promise<number[]> {
    const before = fx.backend.submissions.length;
    const res = await post(payload);
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(fx.backend.submissions.length, before + 1);
    return fx.backend.submissions.at(-1)!.request.promptTokenIds;
  }

  const render = (messages: ChatMessage[], opts: { tools?: unknown[]; addGenerationPrompt?: boolean } = {}): number[] =>
    fx.tokenizer.encode(fx.tokenizer.applyChatTemplate(messages, opts), { addSpecialTokens: false });

  function assert400(
    res: { statusCode: number; json(): { error: { param: string | null; message: string } }; body: string },
    param: string,
    message?: RegExp,
  ): void {
    assert.equal(res.statusCode, 400, res.body);
    const err = res.json().error;
    assert.equal(err.param, param, err.message);
    if (message) assert.match(err.message, message);
  }

  test('tools are rendered into the prompt (absent tool_choice, and "none" as vLLM)', async () => {
    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather in Paris?' },
    ];
    const expected = render(messages, { tools: TOOLS });
    const text = fx.tokenizer.decode(expected, { skipSpecialTokens: false });
    assert.match(text, /<tools>\n\{"type": "function", "function": \{"name": "get_weather"/);
    assert.match(text, /"name": "get_time"/);
    assert.deepEqual(await submittedPrompt({ messages, tools: TOOLS }), expected);
    assert.deepEqual(await submittedPrompt({ messages, tools: TOOLS, tool_choice: 'none' }), expected);
    assert.deepEqual(
      await submittedPrompt({ messages, tools: TOOLS, tool_choice: null, parallel_tool_calls: false }),
      expected,
    );
    assert.notDeepEqual(await submittedPrompt({ messages }), expected, 'without tools the prompt differs');
    assert.deepEqual(await submittedPrompt({ messages }), render(messages));
    // The response is plain content: no tool-call parsing.
    const res = await post({ messages, tools: TOOLS });
    const choice = res.json().choices[0];
    assert.equal(choice.message.content, 'Sunny.');
    assert.equal(choice.finish_reason, 'stop');
  });

  test('/tokenize renders the same prompt as the chat route', async () => {
    const messages = [{ role: 'user', content: 'Weather in Paris?' }];
    const res = await post({ messages, tools: TOOLS }, '/tokenize');
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json().tokens, await submittedPrompt({ messages, tools: TOOLS }));
    assert400(await post({ prompt: 'x', tools: TOOLS }, '/tokenize'), 'tools');
  });

  test('multi-turn tool conversation: assistant tool_calls (null content) → tool result → assistant', async () => {
    const turn1 = [{ role: 'user', content: 'Weather in Paris?' }];
    assert.deepEqual(await submittedPrompt({ messages: turn1, tools: TOOLS }), render(turn1, { tools: TOOLS }));

    const turn2 = [
      ...turn1,
      { role: 'assistant', content: null, tool_calls: [CALL] },
      { role: 'tool', content: '18C and sunny', tool_call_id: 'call_1' },
    ];
    const expected2 = render(turn2 as ChatMessage[], { tools: TOOLS });
    const text2 = fx.tokenizer.decode(expected2, { skipSpecialTokens: false });
    assert.ok(
      text2.endsWith(
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n' +
          '<|im_start|>user\n<tool_response>\n18C and sunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
      ),
      text2,
    );
    assert.deepEqual(await submittedPrompt({ messages: turn2, tools: TOOLS }), expected2);

    const turn3 = [
      ...turn2,
      { role: 'assistant', content: 'It is 18C and sunny.' },
      { role: 'user', content: 'Thanks' },
    ];
    const expected3 = render(turn3 as ChatMessage[], { tools: TOOLS });
    assert.match(
      fx.tokenizer.decode(expected3, { skipSpecialTokens: false }),
      /It is 18C and sunny\.<\|im_end\|>\n<\|im_start\|>user\nThanks/,
    );
    assert.deepEqual(await submittedPrompt({ messages: turn3, tools: TOOLS }), expected3);
  });

  test('content as text parts equals the joined string', async () => {
    const parts = [
      { role: 'system', content: [{ type: 'text', text: 'Be brief.' }] },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Weather' },
          { type: 'text', text: 'in Paris?' },
        ],
      },
    ];
    const flat = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather\nin Paris?' },
    ];
    assert.deepEqual(await submittedPrompt({ messages: parts, tools: TOOLS }), render(flat, { tools: TOOLS }));
  });

  test('add_generation_prompt false, continue_final_message, chat_template_kwargs', async () => {
    const messages = [{ role: 'user', content: 'Hi' }];
    const noGen = await submittedPrompt({ messages, add_generation_prompt: false });
    assert.deepEqual(noGen, render(messages, { addGenerationPrompt: false }));
    assert.deepEqual(await submittedPrompt({ messages, add_generation_prompt: true }), render(messages));

    const partial = [...messages, { role: 'assistant', content: 'The answer is' }];
    const cont = await submittedPrompt({
      messages: partial,
      add_generation_prompt: false,
      continue_final_message: true,
    });
    const contText = fx.tokenizer.decode(cont, { skipSpecialTokens: false });
    assert.ok(contText.endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\nThe answer is'), contText);
    const full = fx.tokenizer.applyChatTemplate(partial, { addGenerationPrompt: false });
    assert.deepEqual(
      cont,
      fx.tokenizer.encode(full.slice(0, full.lastIndexOf('The answer is') + 'The answer is'.length), {
        addSpecialTokens: false,
      }),
    );

    // Trailing spacing the template keeps is kept (transformers' rule), so the model continues after the space.
    const spaced = [...messages, { role: 'assistant', content: 'The answer is ' }];
    const contSpaced = await submittedPrompt({
      messages: spaced,
      add_generation_prompt: false,
      continue_final_message: true,
    });
    assert.ok(fx.tokenizer.decode(contSpaced, { skipSpecialTokens: false }).endsWith('\n\nThe answer is '));

    const kw = { enable_thinking: false };
    const withKw = await submittedPrompt({ messages, tools: TOOLS, chat_template_kwargs: kw });
    assert.deepEqual(
      withKw,
      fx.tokenizer.encode(fx.tokenizer.applyChatTemplate(messages, { tools: TOOLS, templateKwargs: kw }), {
        addSpecialTokens: false,
      }),
    );
    assert.match(
      fx.tokenizer.decode(withKw, { skipSpecialTokens: false }),
      /<\|im_start\|>assistant\n<think>\n\n<\/think>\n\n$/,
    );
  });

  test('refusals → 400 naming the parameter, nothing submitted', async () => {
    const before = fx.backend.submissions.length;
    const messages = [{ role: 'user', content: 'Hi' }];
    assert400(await post({ messages, tool_choice: 'required' }), 'tool_choice', /needs 'tools'/);
    assert400(
      await post({ messages, tools: TOOLS, tool_choice: { type: 'function', function: { name: 'nope' } } }),
      'tool_choice',
      /not among the tools/,
    );
    assert400(
      await post({ messages, tools: TOOLS, tool_choice: 'sometimes' }),
      'tool_choice',
      /must be "none", "auto", "required"/,
    );
    assert400(
      await post({ messages, tools: TOOLS, tool_choice: 'required', response_format: { type: 'json_object' } }),
      'response_format',
      /cannot be combined with tool_choice/,
    );
    assert400(await post({ messages, tools: TOOLS, parallel_tool_calls: 'yes' }), 'parallel_tool_calls');
    assert400(await post({ messages, functions: [{ name: 'f' }] }), 'functions');
    assert400(await post({ messages, function_call: 'auto' }), 'function_call');
    assert400(
      await post({ messages, add_generation_prompt: true, continue_final_message: true }),
      'continue_final_message',
      /cannot both be true/,
    );
    assert400(await post({ messages, continue_final_message: true }), 'continue_final_message', /cannot both be true/);
    assert400(
      await post({
        messages: [...messages, { role: 'assistant', content: null, tool_calls: [CALL] }],
        add_generation_prompt: false,
        continue_final_message: true,
      }),
      'continue_final_message',
      /text to continue/,
    );
    // Malformed tools: the schema names the offending path (in `param`, or in the message under `param: 'tools'`).
    const bad: Array<[unknown, string]> = [
      [{ type: 'retrieval', function: { name: 'f' } }, 'tools[0].type'],
      [{ type: 'function' }, 'tools[0].function'],
      [{ type: 'function', function: { name: 5 } }, 'tools[0].function.name'],
      [{ type: 'function', function: { description: 'no name' } }, 'tools[0].function.name'],
      [{ type: 'function', function: { name: 'f', parameters: [] } }, 'tools[0].function.parameters'],
      [{ type: 'function', function: { name: 'f', parameters: 'x' } }, 'tools[0].function.parameters'],
      [{ type: 'function', function: { name: 'f' }, extra: 1 }, 'tools[0].extra'],
      ['f', 'tools[0]'],
    ];
    for (const [tool, path] of bad) {
      const res = await post({ messages, tools: [tool] });
      assert.equal(res.statusCode, 400, `${JSON.stringify(tool)}: ${res.body}`);
      const err = res.json().error;
      assert.ok(String(err.param).startsWith('tools'), res.body);
      assert.ok(
        err.param === path || String(err.message).includes(`'${path}'`),
        `${JSON.stringify(tool)} should name ${path}: ${res.body}`,
      );
    }
    assert400(await post({ messages, tools: { type: 'function' } }), 'tools');
    assert.equal(fx.backend.submissions.length, before, 'no refused request reached the engine');
  });
});

describe('chat completions with tools and no tool-call parser (--tool-call-parser none)', () => {
  const fx = useApp({ output: { toolCallParser: 'none' } });
  const post = (payload: Record<string, unknown>) =>
    fx.app.inject({ method: 'POST', url: '/v1/chat/completions', payload });

  test('"auto" is refused as vLLM does without a parser; required and named still work (constrained decoding)', async () => {
    const messages = [{ role: 'user', content: 'Hi' }];
    const res = await post({ messages, tools: TOOLS, tool_choice: 'auto' });
    assert.equal(res.statusCode, 400, res.body);
    assert.equal(res.json().error.param, 'tool_choice');
    assert.match(res.json().error.message, /--enable-auto-tool-choice and --tool-call-parser/);
    fx.backend.onSubmit = (s) =>
      s.stream.pushAll(
        fx.tokenizer.encode('[{"name": "get_time", "parameters": {}}]', { addSpecialTokens: false }),
        'stop',
      );
    const ok = await post({ messages, tools: TOOLS, tool_choice: 'required' });
    assert.equal(ok.statusCode, 200, ok.body);
    assert.equal(ok.json().choices[0].message.tool_calls[0].function.name, 'get_time');
    // Absent tool_choice with tools and no parser: plain content, as before.
    const plain = await post({ messages, tools: TOOLS });
    assert.equal(plain.statusCode, 200, plain.body);
    assert.equal(plain.json().choices[0].message.tool_calls, undefined);
  });
});
