/**
 * A streamed chat choice with a reasoning parser sends no chunk that carries nothing: tokens the parser consumes
 * (`<think>`, `</think>`, the held-back text of a tool call) add no reasoning, content or tool-call delta, and vLLM's
 * `serving_chat.py` skips such a delta (`if delta_message is None: continue`) instead of sending
 * `"delta":{}` with `finish_reason: null`. Found by the streaming-path hostile tests (a `--reasoning` sim behind
 * `--reasoning-parser qwen3` sends three such chunks per answer; a Hermes tool call about a dozen).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { choicesOf, parseSse, useApp } from './helpers.js';

describe('no empty mid-stream deltas (reasoning parser)', () => {
  const fx = useApp({ output: { reasoningParser: 'qwen3' } });

  test(
    'one token per output: every non-final chunk carries role, reasoning_content or content',
    { timeout: 10_000 },
    async () => {
      const ids = fx.tokenizer.encode('<think>\nLet me see.\n</think>\n\nHello there.', { addSpecialTokens: false });
      fx.backend.onSubmit = (s) => ids.forEach((id, i) => s.stream.push([id], i === ids.length - 1 ? 'length' : null));
      const res = await fx.app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        payload: { messages: [{ role: 'user', content: 'x' }], stream: true },
      });
      const empty: string[] = [];
      for (const ev of parseSse(res.body).events) {
        for (const c of choicesOf(ev)) {
          if (c.finish_reason === null && Object.keys(c.delta as object).length === 0) empty.push(JSON.stringify(c));
        }
      }
      assert.deepEqual(empty, []);
    },
  );
});
