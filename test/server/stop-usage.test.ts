/**
 * generation.ts (`ChoiceGeneration`) with a stop string matched inside a multi-token engine row: TokenSpeed sends a non-streaming request's
 * tokens in rows of up to 50 (engine-wire.md, `stream` false), so the tokens after the match arrive in the same row.
 * The usage and the logprobs must count only the tokens up to the one that completed the match, as the streamed
 * response (one token per row) does, and as vLLM reports it: found with simulated TokenSpeed ranks, where the same
 * request reported 50 completion tokens non-streamed and 8 streamed, for the same text.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ChoiceGeneration, type GenerationEvent, type TextDetokenizer } from '../../src/server/generation.js';
import type { BackendStream } from '../../src/server/backend.js';
import type { EngineOutput } from '../../src/protocols/types.js';
import { StopStringMatcher } from '../../src/tokenizer/stop-matcher.js';

/** Token id i is the i-th character of `ALPHABET`. */
const ALPHABET = 'abcdefghijklmnopqrstuvwxyz';
const detokenizer = (): TextDetokenizer => ({ push: (ids) => ids.map((i) => ALPHABET[i]).join(''), finish: () => '' });

function fakeStream(
  rows: Array<Pick<EngineOutput, 'newTokenIds' | 'finishReason'>>,
): BackendStream & { cancelled: boolean } {
  let completion = 0;
  const outputs: EngineOutput[] = rows.map((r) => {
    completion += r.newTokenIds.length;
    return {
      requestId: 'r',
      newTokenIds: r.newTokenIds,
      finishReason: r.finishReason,
      logprobs: r.newTokenIds.map(() => -1),
      promptTokens: 3,
      completionTokens: completion,
      cachedTokens: 0,
    };
  });
  const s = {
    requestId: 'r',
    engineIndex: 0,
    cancelled: false,
    cancel() {
      s.cancelled = true;
    },
    async *[Symbol.asyncIterator]() {
      yield* outputs;
    },
  };
  return s as unknown as BackendStream & { cancelled: boolean };
}

async function run(
  rows: Array<Pick<EngineOutput, 'newTokenIds' | 'finishReason'>>,
  stops: string[],
  minTokens = 0,
): Promise<{ text: string; logprobs: number; finish: Extract<GenerationEvent, { type: 'finish' }> }> {
  let text = '';
  let logprobs = 0;
  const generation = new ChoiceGeneration({
    requestId: 'r',
    detokenizer: detokenizer(),
    stopTokenIds: new Set(),
    promptTokens: 3,
    stopMatcher: new StopStringMatcher(stops),
    logprobs: true,
    minTokens,
  });
  for await (const out of fakeStream(rows)) {
    const ev = generation.take(out);
    if (ev === null) continue;
    text += ev.text;
    logprobs += ev.logprobs.length;
    if (ev.type === 'finish') return { text, logprobs, finish: ev };
  }
  throw new Error('no finish');
}

const ids = (s: string) => [...s].map((c) => ALPHABET.indexOf(c));

test(
  'a stop string matched inside a row: usage and logprobs end at the token that completed it, like the streamed response',
  { timeout: 10_000 },
  async () => {
    // 'abcxyzdef...': the stop 'xyz' completes at token 6.
    const text = 'abcxyzdefghij';
    for (const rows of [
      [{ newTokenIds: ids(text), finishReason: null }], // one row of 13 (non-streaming TokenSpeed), the request then aborted
      [{ newTokenIds: ids(text), finishReason: 'length' as const }], // the row that also ends the request
      [...text].map((c) => ({ newTokenIds: ids(c), finishReason: null })), // one token per row (streaming)
    ]) {
      const { text: got, finish, logprobs } = await run(rows, ['xyz']);
      assert.equal(got, 'abc');
      assert.equal(finish.finishReason, 'stop');
      assert.equal(finish.usage.completion_tokens, 6, `rows of ${rows[0]!.newTokenIds.length}`);
      assert.equal(logprobs, 6, 'one logprob per counted token');
    }
    // With min_tokens the stop cannot end inside the first 7 tokens' text: the next 'xyz' completes at token 12.
    const { text: got, finish } = await run([{ newTokenIds: ids('abcxyzdxyzkxyzq'), finishReason: null }], ['xyz'], 8);
    assert.equal(got, 'abcxyzd');
    assert.equal(finish.usage.completion_tokens, 10);
  },
);
