/**
 * `add_special_tokens` (vLLM's request field, issue 31 part 4) reaches the tokenizer: completions add the tokenizer's
 * specials by default and not when asked; the flag is what the prompt encoder is called with.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { completionPromptTokens, type PromptTokenizer } from '../../src/server/prompt.js';

/** A tokenizer that records the flag of every prompt it encodes and marks added specials with id 0. */
function recording(): { tokenizer: PromptTokenizer; flags: boolean[] } {
  const flags: boolean[] = [];
  const tokenizer = {
    encodePrompt: (text: string, opts: { addSpecialTokens: boolean }) => {
      flags.push(opts.addSpecialTokens);
      return [...(opts.addSpecialTokens ? [0] : []), ...[...text].map((c) => c.charCodeAt(0))];
    },
    tokenizer: { vocabSize: 1000 },
  } as unknown as PromptTokenizer;
  return { tokenizer, flags };
}

const limits = { maxModelLen: 100, contextTokenLimit: 100, promptParam: 'prompt' as const };

test('completions: specials by default, none with add_special_tokens false; token-id prompts untouched', () => {
  const { tokenizer, flags } = recording();
  assert.deepEqual(completionPromptTokens(tokenizer, 'ab', limits), [0, 97, 98]);
  assert.deepEqual(completionPromptTokens(tokenizer, ['ab'], limits, undefined, false), [97, 98]);
  assert.deepEqual(completionPromptTokens(tokenizer, 'ab', limits, undefined, true), [0, 97, 98]);
  assert.deepEqual(completionPromptTokens(tokenizer, [5, 6], limits, undefined, false), [5, 6]);
  assert.deepEqual(flags, [true, false, true]);
});
