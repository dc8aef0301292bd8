/**
 * `reasoning_effort` (chat) and `reasoning.effort` (Responses) served as vLLM serves them (src/server/reasoning-effort.ts):
 * the chat template gets `reasoning_effort`, and `enable_thinking` = effort ≠ none unless the request set it; with
 * Qwen3's template `none` renders the closed empty think block (thinking off) and the reasoning parser starts in the
 * content; an unknown level is a 400 naming the field.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseReasoningEffort, templateKwargsWithEffort } from '../../src/server/reasoning-effort.js';
import { ApiError } from '../../src/server/errors.js';
import { useApp } from './helpers.js';

test("templateKwargsWithEffort adds the effort and the thinking switch, the request's own switch winning", () => {
  assert.equal(templateKwargsWithEffort(undefined, null), undefined);
  assert.deepEqual(templateKwargsWithEffort(undefined, 'none'), { reasoning_effort: 'none', enable_thinking: false });
  assert.deepEqual(templateKwargsWithEffort({ x: 1 }, 'high'), {
    x: 1,
    reasoning_effort: 'high',
    enable_thinking: true,
  });
  assert.deepEqual(templateKwargsWithEffort({ enable_thinking: true }, 'none'), {
    enable_thinking: true,
    reasoning_effort: 'none',
  });
  assert.equal(parseReasoningEffort('max', 'p'), 'max');
  assert.throws(
    () => parseReasoningEffort('extreme', 'reasoning_effort'),
    (e: unknown) => e instanceof ApiError && e.statusCode === 400 && e.param === 'reasoning_effort',
  );
});

describe('reasoning effort over the routes (Qwen3 template, qwen3 reasoning parser)', () => {
  const fx = useApp({ output: { reasoningParser: 'qwen3' } });
  const lastPrompt = () =>
    fx.tokenizer.decode(fx.backend.submissions.at(-1)!.request.promptTokenIds, { skipSpecialTokens: false });
  const answer = (text: string) => {
    fx.backend.onSubmit = (s) => s.stream.pushAll(fx.tokenizer.encode(text, { addSpecialTokens: false }), 'stop');
  };
  const chat = (extra: Record<string, unknown>) =>
    fx.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      payload: { messages: [{ role: 'user', content: 'Hi' }], ...extra },
    });

  test('chat: none closes thinking in the prompt, so the answer is content; high leaves it open', async () => {
    answer('Plain answer.');
    const off = await chat({ reasoning_effort: 'none' });
    assert.equal(off.statusCode, 200, off.body);
    assert.match(lastPrompt(), /<\|im_start\|>assistant\n<think>\n\n<\/think>\n\n$/);
    assert.equal(off.json().choices[0].message.content, 'Plain answer.');
    assert.equal(off.json().choices[0].message.reasoning_content ?? null, null);
    answer('<think>\nhmm\n</think>\n\nDone.');
    const on = await chat({ reasoning_effort: 'high' });
    assert.equal(on.statusCode, 200, on.body);
    assert.match(lastPrompt(), /<\|im_start\|>assistant\n$/);
    assert.equal(on.json().choices[0].message.reasoning_content, '\nhmm\n');
    // The request's own switch wins over the effort.
    await chat({ reasoning_effort: 'none', chat_template_kwargs: { enable_thinking: true } });
    assert.match(lastPrompt(), /<\|im_start\|>assistant\n$/);
    const bad = await chat({ reasoning_effort: 'ultra' });
    assert.equal(bad.statusCode, 400);
    assert.equal(bad.json().error.param, 'reasoning_effort');
  });

  test('Responses: reasoning.effort maps the same way and is echoed with the summary mode', async () => {
    answer('Plain.');
    const res = await fx.app.inject({
      method: 'POST',
      url: '/v1/responses',
      payload: { input: 'Hi', reasoning: { effort: 'none', summary: 'auto' } },
    });
    assert.equal(res.statusCode, 200, res.body);
    assert.match(lastPrompt(), /<think>\n\n<\/think>\n\n$/);
    assert.deepEqual(res.json().reasoning, { effort: 'none', summary: 'auto' });
    const bad = await fx.app.inject({
      method: 'POST',
      url: '/v1/responses',
      payload: { input: 'Hi', reasoning: { summary: 'verbose' } },
    });
    assert.equal(bad.statusCode, 400);
    assert.equal(bad.json().error.param, 'reasoning.summary');
  });
});
