/**
 * Large prompts are tokenized off the event loop (issue 9 item 3; tokenizer.ts `encodeOffLoop`,
 * offloaded-encoder.ts): the ids equal the main thread's `encode`, and the loop keeps running timers while a large
 * text is tokenized; a small text is tokenized at once, without a promise.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GatewayTokenizer, OFF_LOOP_ENCODE_MIN_CHARS } from '../../src/tokenizer/tokenizer.js';

const SENTENCE = 'The river runs past the old mill 🌊, and the weather turns as the evening comes. ';

test('a large prompt is tokenized on a worker thread while the event loop keeps ticking; the ids are the same', { timeout: 120_000 }, async () => {
  const tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  const small = tokenizer.encodeOffLoop('Hello there', { addSpecialTokens: true });
  assert.ok(Array.isArray(small), 'a small text is tokenized synchronously');
  assert.deepEqual(small, tokenizer.encode('Hello there', { addSpecialTokens: true }));

  // ~100k tokens: about a quarter of a second or more of tokenizer work, were it done on this thread.
  const big = SENTENCE.repeat(Math.ceil(400_000 / SENTENCE.length));
  assert.ok(big.length >= OFF_LOOP_ENCODE_MIN_CHARS);
  let ticks = 0;
  const timer = setInterval(() => ticks++, 1);
  const started = tokenizer.encodeOffLoop(big);
  assert.ok(started instanceof Promise, 'a large text is handed to the worker');
  assert.equal(ticks, 0);
  const ids = await started;
  clearInterval(timer);
  assert.ok(ticks >= 2, `timers kept firing while the worker tokenized (${ticks} ticks)`);
  assert.deepEqual(ids, tokenizer.encode(big));
  // A second large text reuses the worker (it is loaded once) and gives the same ids too.
  const again = await tokenizer.encodeOffLoop(big.slice(7));
  assert.deepEqual(again, tokenizer.encode(big.slice(7)));
});
