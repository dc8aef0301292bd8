/** The reasoning parsers (`qwen3`, `deepseek_r1`) on tags split at every position, and their start states. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { reasoningStartFor, ThinkTagParser, type ReasoningStart } from '../../src/server/parsers/reasoning.js';

function run(start: ReasoningStart, parts: readonly string[]): { reasoning: string; content: string } {
  const p = new ThinkTagParser(start);
  const out = { reasoning: '', content: '' };
  for (const part of parts) {
    const r = p.push(part);
    out.reasoning += r.reasoning;
    out.content += r.content;
  }
  const r = p.finish();
  out.reasoning += r.reasoning;
  out.content += r.content;
  return out;
}

function check(start: ReasoningStart, text: string, expected: { reasoning: string; content: string }): void {
  const all: string[][] = [[text], [...text]];
  for (let i = 1; i < text.length; i++) all.push([text.slice(0, i), text.slice(i)]);
  for (const parts of all) assert.deepEqual(run(start, parts), expected, JSON.stringify(parts.slice(0, 3)));
}

describe('think-tag parser', () => {
  test('qwen3: a generated <think> block is reasoning, the rest content', () => {
    check('detect', '<think>\nI should greet.\n</think>\n\nHello!', {
      reasoning: '\nI should greet.\n',
      content: '\n\nHello!',
    });
  });

  test('qwen3: a message without <think> is all content, even one mentioning the tags later', () => {
    check('detect', 'Hello, <think> is a tag and </think> closes it.', {
      reasoning: '',
      content: 'Hello, <think> is a tag and </think> closes it.',
    });
  });

  test('a prompt that opened the block: reasoning until </think>; an unclosed block is all reasoning', () => {
    check('reasoning', 'Let me think.</think>The answer is 4.', {
      reasoning: 'Let me think.',
      content: 'The answer is 4.',
    });
    check('reasoning', 'Still thinking when the limit hit', {
      reasoning: 'Still thinking when the limit hit',
      content: '',
    });
  });

  test('deepseek_r1: a <think> the model writes anyway is dropped', () => {
    check('reasoning', '<think>Hmm.</think>Yes.', { reasoning: 'Hmm.', content: 'Yes.' });
  });

  test('content start (enable_thinking false): everything is content', () => {
    check('content', '<think>x</think>y', { reasoning: '', content: '<think>x</think>y' });
  });

  test('start states from the prompt and enable_thinking', () => {
    assert.equal(reasoningStartFor('qwen3', '<|im_start|>assistant\n', undefined), 'detect');
    assert.equal(reasoningStartFor('qwen3', '<|im_start|>assistant\n', true), 'detect');
    assert.equal(reasoningStartFor('qwen3', '<|im_start|>assistant\n<think>\n\n</think>\n\n', undefined), 'content');
    assert.equal(reasoningStartFor('qwen3', '<|im_start|>assistant\n', false), 'content');
    assert.equal(reasoningStartFor('qwen3', '<|im_start|>assistant\n<think>\n', undefined), 'reasoning');
    assert.equal(reasoningStartFor('deepseek_r1', '<｜Assistant｜>', undefined), 'reasoning');
    assert.equal(reasoningStartFor('deepseek_r1', '<｜Assistant｜>', false), 'content');
  });
});
