import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { Template } from '@huggingface/jinja';
import { ChatTemplateSet } from '../../src/tokenizer/chat-template.js';
import { ChatTemplateError } from '../../src/tokenizer/errors.js';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import type { ChatMessage } from '../../src/tokenizer/tokenizer.js';
import { makeTempDir, qwen3, removeTempDirs, sentencePieceFiles } from './fixtures.js';

after(removeTempDirs);

const conversation: ChatMessage[] = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Hi' },
  { role: 'assistant', content: 'Hello.' },
  { role: 'user', content: 'What is 2+2?' },
];

const HISTORY =
  '<|im_start|>system\nYou are terse.<|im_end|>\n' +
  '<|im_start|>user\nHi<|im_end|>\n' +
  '<|im_start|>assistant\nHello.<|im_end|>\n' +
  '<|im_start|>user\nWhat is 2+2?<|im_end|>\n';

function isTemplateError(kind: ChatTemplateError['kind'], message?: RegExp) {
  return (e: unknown) => {
    assert.ok(e instanceof ChatTemplateError, `expected ChatTemplateError, got ${String(e)}`);
    assert.equal(e.kind, kind);
    if (message) assert.match(e.message, message);
    return true;
  };
}

describe('Qwen3 chat template', () => {
  test('the shipped template is the Qwen3 one this suite expects', () => {
    const config = JSON.parse(readFileSync(join(GatewayTokenizer.defaultDir(), 'tokenizer_config.json'), 'utf8'));
    assert.equal(typeof config.chat_template, 'string');
    // The empty think block the template inserts when enable_thinking is false.
    assert.ok(config.chat_template.includes('enable_thinking is defined and enable_thinking is false'));
    assert.ok(config.chat_template.includes("'<think>\\n\\n</think>\\n\\n'"));
  });

  test('one user message', async () => {
    const tok = await qwen3();
    assert.equal(
      tok.applyChatTemplate([{ role: 'user', content: 'Hi' }]),
      '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  test('two turns with a system message, with and without the generation prompt', async () => {
    const tok = await qwen3();
    assert.equal(tok.applyChatTemplate(conversation), `${HISTORY}<|im_start|>assistant\n`);
    assert.equal(
      tok.applyChatTemplate(conversation, { addGenerationPrompt: true }),
      `${HISTORY}<|im_start|>assistant\n`,
    );
    assert.equal(tok.applyChatTemplate(conversation, { addGenerationPrompt: false }), HISTORY);
  });

  test('enable_thinking false inserts an empty think block; true changes nothing', async () => {
    const tok = await qwen3();
    assert.equal(
      tok.applyChatTemplate(conversation, { templateKwargs: { enable_thinking: false } }),
      `${HISTORY}<|im_start|>assistant\n<think>\n\n</think>\n\n`,
    );
    assert.equal(
      tok.applyChatTemplate(conversation, { templateKwargs: { enable_thinking: true } }),
      `${HISTORY}<|im_start|>assistant\n`,
    );
    // No generation prompt: no think block either.
    assert.equal(
      tok.applyChatTemplate(conversation, { addGenerationPrompt: false, templateKwargs: { enable_thinking: false } }),
      HISTORY,
    );
  });

  test('reasoning in an earlier assistant turn is dropped from the history', async () => {
    const tok = await qwen3();
    const messages: ChatMessage[] = [
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: '<think>\nGreet back.\n</think>\n\nHello.' },
      { role: 'user', content: 'Bye' },
    ];
    assert.equal(
      tok.applyChatTemplate(messages),
      '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  test('tools, a tool call with null content, and a tool result', async () => {
    const tok = await qwen3();
    const tools = [
      {
        type: 'function',
        function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
      },
    ];
    const messages: ChatMessage[] = [
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }],
      },
      { role: 'tool', content: '18C', tool_call_id: 'c1' },
    ];
    const prompt = tok.applyChatTemplate(messages, { tools });
    assert.ok(prompt.startsWith('<|im_start|>system\n# Tools\n'));
    assert.ok(
      prompt.includes(
        '<tools>\n{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}\n</tools>',
      ),
    );
    assert.ok(
      prompt.endsWith(
        '<|im_start|>user\nWeather in Paris?<|im_end|>\n' +
          '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n' +
          '<|im_start|>user\n<tool_response>\n18C\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
      ),
    );
  });

  test('the rendered prompt tokenizes with the chat special tokens', async () => {
    const tok = await qwen3();
    const ids = tok.encode(tok.applyChatTemplate([{ role: 'user', content: 'Hi' }]));
    assert.deepEqual(ids, [151644, 872, 198, 13048, 151645, 198, 151644, 77091, 198]);
  });

  test('reserved names in templateKwargs cannot override the explicit variables', async () => {
    const tok = await qwen3();
    const out = tok.applyChatTemplate([{ role: 'user', content: 'Hi' }], {
      templateKwargs: { add_generation_prompt: false, messages: [], raise_exception: 1, range: 2, True: 0 },
    });
    assert.equal(out, '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n');
  });

  test('messages that are not objects with a string role are rejected', async () => {
    const tok = await qwen3();
    assert.throws(
      () => tok.applyChatTemplate([{ content: 'x' } as unknown as ChatMessage]),
      isTemplateError('render', /messages\[0\]/),
    );
    assert.throws(() => tok.applyChatTemplate('hi' as unknown as ChatMessage[]), isTemplateError('render'));
  });
});

describe('template selection and errors (synthetic tokenizers)', () => {
  test('bos/eos tokens are passed and raise_exception becomes a ChatTemplateError of kind raised', async () => {
    const tok = await GatewayTokenizer.load(await makeTempDir(sentencePieceFiles()));
    assert.equal(
      tok.applyChatTemplate([
        { role: 'user', content: 'Hi' },
        { role: 'assistant', content: 'Yo' },
      ]),
      '<s>[INST] Hi [/INST]Yo</s>',
    );
    assert.throws(
      () => tok.applyChatTemplate([{ role: 'tool', content: 'x' }]),
      (e: unknown) => {
        assert.ok(e instanceof ChatTemplateError);
        assert.equal(e.kind, 'raised');
        assert.equal(e.message, 'Unsupported role: tool');
        return true;
      },
    );
  });

  async function withTemplate(template: unknown, extra: Record<string, string | object> = {}) {
    const files = sentencePieceFiles();
    const config: Record<string, unknown> = { ...(files['tokenizer_config.json'] as object) };
    if (template === undefined) delete config.chat_template;
    else config.chat_template = template;
    return GatewayTokenizer.load(await makeTempDir({ ...files, 'tokenizer_config.json': config, ...extra }));
  }

  test('a template list picks tool_use when tools are given, default otherwise', async () => {
    const tok = await withTemplate([
      { name: 'default', template: 'D{{ messages|length }}' },
      { name: 'tool_use', template: 'T{{ tools|length }}' },
    ]);
    assert.equal(tok.applyChatTemplate([{ role: 'user', content: 'a' }]), 'D1');
    assert.equal(tok.applyChatTemplate([{ role: 'user', content: 'a' }], { tools: [{}, {}] }), 'T2');
    assert.equal(tok.applyChatTemplate([{ role: 'user', content: 'a' }], { tools: [] }), 'D1');
  });

  test('a template list without default is missing unless tool_use applies', async () => {
    const tok = await withTemplate([{ name: 'tool_use', template: 'T' }, { bad: true }]);
    assert.match(tok.warnings.join('\n'), /without string 'name' and 'template'/);
    assert.equal(tok.hasChatTemplate, true);
    assert.equal(tok.applyChatTemplate([{ role: 'user', content: 'a' }], { tools: [{}] }), 'T');
    assert.throws(
      () => tok.applyChatTemplate([{ role: 'user', content: 'a' }]),
      isTemplateError('missing', /none is 'default'/),
    );
  });

  test('no template anywhere is a missing error; chat_template.jinja and chat_template.json are fallbacks', async () => {
    const none = await withTemplate(undefined);
    assert.equal(none.hasChatTemplate, false);
    assert.throws(
      () => none.applyChatTemplate([{ role: 'user', content: 'a' }]),
      isTemplateError('missing', /no chat template/),
    );

    const jinja = await withTemplate(undefined, { 'chat_template.jinja': 'J{{ messages[0].content }}' });
    assert.equal(jinja.applyChatTemplate([{ role: 'user', content: 'a' }]), 'Ja');

    const json = await withTemplate(undefined, { 'chat_template.json': { chat_template: 'S{{ eos_token }}' } });
    assert.equal(json.applyChatTemplate([{ role: 'user', content: 'a' }]), 'S</s>');
  });

  test('a template that does not parse loads, then fails with kind parse', async () => {
    const tok = await withTemplate('{% if %}');
    assert.throws(
      () => tok.applyChatTemplate([{ role: 'user', content: 'a' }]),
      isTemplateError('parse', /failed to parse/),
    );
  });

  test('a runtime failure inside the template is kind render', async () => {
    const tok = await withTemplate('{{ messages[0].content.no_such_method() }}');
    assert.throws(
      () => tok.applyChatTemplate([{ role: 'user', content: 'a' }]),
      isTemplateError('render', /rendering failed/),
    );
  });

  test('raise_exception is also renamed inside macros and nested expressions', async () => {
    const tok = await withTemplate(
      "{% macro check(m) %}{% if m.role not in ['user'] %}{{ raise_exception('bad ' ~ m.role) }}{% endif %}{% endmacro %}" +
        '{% for m in messages %}{{ check(m) }}{{ m.content }}{% endfor %}',
    );
    assert.equal(tok.applyChatTemplate([{ role: 'user', content: 'ok' }]), 'ok');
    assert.throws(
      () => tok.applyChatTemplate([{ role: 'system', content: 'x' }]),
      isTemplateError('raised', /^bad system$/),
    );
  });
});

describe('render scopes (globals and special tokens in a parent scope made once)', () => {
  const specialTokens = { bos_token: '<s>', eos_token: '</s>' };
  /** What the library's own `Template.render` gives for the variables the old per-render object held. */
  const libraryRender = (source: string, vars: Record<string, unknown>) => new Template(source).render(vars);
  const ours = (source: string, templateKwargs?: Record<string, unknown>, tools?: unknown[]) =>
    ChatTemplateSet.fromSources(
      { config: { chat_template: source }, jinjaFile: null, jsonFile: null },
      'test',
      () => {},
    ).render({
      messages: [{ role: 'user', content: 'hi' }],
      addGenerationPrompt: true,
      specialTokens,
      ...(templateKwargs !== undefined ? { templateKwargs } : {}),
      ...(tools !== undefined ? { tools } : {}),
    });
  const cases: Array<[string, Record<string, unknown> | undefined]> = [
    [
      '{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}{% endfor %}{{ eos_token }}{{ add_generation_prompt }}',
      undefined,
    ],
    ['{{ bos_token }}|{{ enable_thinking }}|{{ eos_token }}', { bos_token: 'B', enable_thinking: false }],
    ['{% set bos_token = "X" %}{{ bos_token }}{{ eos_token }}{{ true }}{{ none is none }}{{ True }}', undefined],
    [
      '{% for i in range(3) %}{{ i }}{% endfor %}{{ unk_token is defined }}{{ tools is defined }}',
      { x: [1, { y: 2 }] },
    ],
    [
      '{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}{{ x.y }}',
      { x: { y: 'z' } },
    ],
  ];
  test('renders as the library’s Template.render with the same variables', () => {
    for (const [source, kwargs] of cases) {
      const vars: Record<string, unknown> = {
        ...specialTokens,
        ...(kwargs ?? {}),
        messages: [{ role: 'user', content: 'hi' }],
        add_generation_prompt: true,
      };
      assert.equal(ours(source, kwargs), libraryRender(source, vars), source);
    }
    assert.equal(ours('{{ tools | length }}', undefined, [{ a: 1 }, { b: 2 }]), '2');
  });
  test('a render’s own declarations stay its own: the next render sees the special tokens again', () => {
    assert.equal(ours('{{ bos_token }}', { bos_token: 'K' }), 'K');
    assert.equal(ours('{% set eos_token = "Y" %}{{ eos_token }}'), 'Y');
    assert.equal(ours('{{ bos_token }}{{ eos_token }}'), '<s></s>');
  });
  test('a kwarg the library declares itself (namespace) fails the render as before', () => {
    assert.throws(() => ours('{{ 1 }}', { namespace: 1 }), isTemplateError('render', /already declared: namespace/));
    assert.throws(() => libraryRender('{{ 1 }}', { namespace: 1 }), /already declared: namespace/);
  });
});
