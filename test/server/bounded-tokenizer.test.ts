/**
 * Bounded client work over real HTTP/1.1 sockets (issue 26 part 5; tokenizer/off-loop.ts, prompt.ts,
 * routes/tokenize.ts, input-limits.ts `MAX_MESSAGES`): the off-loop tokenizer queue refuses past its bound with a
 * 429 (OpenAI-style body, Retry-After); a client that leaves while its prompt waits in the queue is dropped (its job
 * never runs, nothing reaches the engine, counted as a 499) and one that leaves while its job runs has the result
 * thrown away; large `/tokenize`, `/detokenize` and long chats take the off-loop path with the results of the
 * main-thread one; too many messages are a 400 naming the limit. The queue's counters are read from /metrics.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { MAX_MESSAGES } from '../../src/server/input-limits.js';
import {
  OFF_LOOP_DECODE_MIN_IDS,
  OFF_LOOP_ENCODE_MIN_CHARS,
  OFF_LOOP_RENDER_MIN_MESSAGES,
} from '../../src/tokenizer/off-loop.js';
import { conclusive, waitFor } from '../helpers/async.js';
import { openRequest, type OpenRequest } from '../helpers/net.js';
import { FakeBackend } from './fake-backend.js';
import { listenApp, MODEL_ID, type AppFixture } from './helpers.js';

const SENTENCE = 'The river runs past the old mill, and the weather turns as the evening comes. ';
const text = (chars: number) => SENTENCE.repeat(Math.ceil(chars / SENTENCE.length)).slice(0, chars);
/**
 * A prompt that keeps the worker busy (6 M characters: one to a few seconds of tokenizer work). No step assumes it
 * outlasts anything: each check runs in a round that first sees the blocker running and is repeated when the blocker
 * turns out to have finished before the round was over (`conclusive`).
 */
const BLOCKER = text(6_000_000);
/** The queue's character bound in these tests: the blocker fits an idle queue; 600k characters more do not. */
const QUEUE_CHARS = 6_500_000;

type Fixture = AppFixture & { port: number };

/** POST `body` to `path`; resolves with status, headers and text. */
async function post(port: number, path: string, body: unknown) {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** A series' value in the app's /metrics (0 when absent). */
async function metric(fx: Fixture, series: string): Promise<number> {
  const body = (await fx.app.inject({ method: 'GET', url: '/metrics' })).body;
  const line = body.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}
const jobs = (outcome: string) => `model_gateway_tokenizer_jobs_total{model="${MODEL_ID}",outcome="${outcome}"}`;
const QUEUED = `model_gateway_tokenizer_queue_jobs{model="${MODEL_ID}"}`;

describe('the off-loop tokenizer queue over HTTP', () => {
  let fx: Fixture;
  before(async () => {
    fx = await listenApp({
      backend: new FakeBackend({ maxModelLen: 10_000_000 }),
      edge: { tokenizerQueueChars: QUEUE_CHARS, tokenizeBodyLimitBytes: 8 * 1024 * 1024 },
    });
    fx.backend.onSubmit = (s) => s.stream.pushAll([9707, 0], 'stop');
  });
  after(() => fx.app.close());

  const value = (series: string) => metric(fx, series);
  const url = () => `http://127.0.0.1:${fx.port}`;
  const RESTARTS = `model_gateway_tokenizer_worker_restarts_total{model="${MODEL_ID}"}`;
  const CANCELLED =
    'model_gateway_requests_total{model="test-model",endpoint="/v1/completions",status="499",finish_reason="cancelled"}';

  /** A blocker running on the worker, or null when it finished before it was seen running. */
  async function runningBlocker(): Promise<OpenRequest | null> {
    // The blockers of earlier rounds are let go once the server sees their clients leave.
    await waitFor(async () => (await value(QUEUED)) === 0, 'the queue is empty');
    const started = await value(jobs('started'));
    const blocker = openRequest(url(), '/tokenize', { prompt: BLOCKER });
    await waitFor(
      async () => blocker.answered() || ((await value(jobs('started'))) === started + 1 && (await value(QUEUED)) === 1),
      'the blocker runs',
    );
    if (!blocker.answered()) return blocker;
    assert.equal(await blocker.done, 200);
    return null;
  }

  test(
    'behind a running job, a large prompt that does not fit gets 429 with Retry-After, whichever route; small requests are served',
    { timeout: 120_000 },
    async () => {
      await conclusive('429 past the bound', async () => {
        const blocker = await runningBlocker();
        if (blocker === null) return false;
        const refusedBefore = await value(jobs('refused'));
        const probes = [];
        for (const [path, body] of [
          ['/v1/chat/completions', { messages: [{ role: 'user', content: text(600_000) }] }],
          ['/tokenize', { prompt: text(600_000) }],
          ['/detokenize', { tokens: new Array(600_000 / 4).fill(9707) }],
        ] as const) {
          probes.push({ path, res: await post(fx.port, path, body) });
        }
        // Small requests never queue: served while the worker is busy.
        const small = await post(fx.port, '/v1/completions', { prompt: 'Hello', max_tokens: 1 });
        const stillRunning = !blocker.answered();
        blocker.leave();
        if (probes.some((p) => p.res.status !== 429)) {
          // A probe only gets in once the blocker is done: then the round says nothing.
          assert.equal(
            stillRunning ? null : await blocker.done,
            200,
            `a probe got in while the blocker ran: ${JSON.stringify(probes.map((p) => p.res.status))}`,
          );
          return false;
        }
        for (const { path, res } of probes) {
          assert.equal(res.headers.get('retry-after'), '1', path);
          const err = (
            JSON.parse(res.text) as { error: { type: string; code: string; message: string; param: unknown } }
          ).error;
          assert.equal(err.type, 'requests');
          assert.equal(err.code, 'tokenizer_queue_full');
          assert.equal(err.param, null);
          assert.match(err.message, new RegExp(`at most 256 jobs and ${QUEUE_CHARS} characters; this job has \\d+\\)`));
        }
        assert.equal(await value(jobs('refused')), refusedBefore + 3);
        assert.equal(small.status, 200, small.text);
        return true;
      });
    },
  );

  test(
    'a client that leaves while its prompt waits is dropped: never run, nothing submitted, counted as a 499',
    { timeout: 120_000 },
    async () => {
      await conclusive('a waiting job dropped', async () => {
        const blocker = await runningBlocker();
        if (blocker === null) return false;
        const [run, dropped, discarded, cancelled] = await Promise.all([
          value(jobs('run')),
          value(jobs('dropped')),
          value(jobs('discarded')),
          value(CANCELLED),
        ]);
        const submitted = fx.backend.submissions.length;
        const waiting = openRequest(url(), '/v1/completions', {
          prompt: text(OFF_LOOP_ENCODE_MIN_CHARS + 10),
          max_tokens: 1,
        });
        await waitFor(
          async () => blocker.answered() || (await value(QUEUED)) === 2,
          'the completion waits in the queue',
        );
        waiting.leave();
        await waitFor(
          async () =>
            (await value(jobs('dropped'))) > dropped ||
            (await value(jobs('discarded'))) > discarded ||
            (await value(jobs('run'))) > run,
          'the waiting job is dropped, or ran',
        );
        blocker.leave();
        assert.equal(await waiting.done, null, 'no answer for a client that left');
        // It ran (the blocker had finished): the round says nothing.
        if ((await value(jobs('run'))) > run) return false;
        assert.equal(await value(jobs('dropped')), dropped + 1);
        assert.equal(fx.backend.submissions.length, submitted, 'nothing reached the engine');
        await waitFor(async () => (await value(CANCELLED)) === cancelled + 1, 'the request is counted as a 499');
        return true;
      });
    },
  );

  test(
    'a client that leaves while its large job runs: no answer, the result is not waited for, the worker is ended',
    { timeout: 120_000 },
    async () => {
      await conclusive('a running job abandoned', async () => {
        const blocker = await runningBlocker();
        if (blocker === null) return false;
        const [discarded, restarts] = await Promise.all([value(jobs('discarded')), value(RESTARTS)]);
        blocker.leave();
        const status = await blocker.done;
        if (status !== null) return false;
        await waitFor(async () => (await value(QUEUED)) === 0, 'the job is let go');
        if ((await value(jobs('discarded'))) === discarded) return false; // it finished as the client left
        // A job that large ends its worker rather than running on for seconds for nobody.
        assert.equal(await value(RESTARTS), restarts + 1);
        assert.equal(await value(QUEUED), 0);
        // The next job gets a new worker.
        const after = await post(fx.port, '/tokenize', { prompt: text(OFF_LOOP_ENCODE_MIN_CHARS * 2) });
        assert.equal(after.status, 200, after.text.slice(0, 400));
        return true;
      });
    },
  );
});

describe('large /tokenize, /detokenize and long chats take the off-loop path', () => {
  let fx: Fixture;
  before(async () => {
    fx = await listenApp({ backend: new FakeBackend({ maxModelLen: 10_000_000 }) });
    fx.backend.onSubmit = (s) => s.stream.pushAll([9707, 0], 'stop');
  });
  after(() => fx.app.close());

  test('/tokenize of a large prompt: the same answer, from the worker', { timeout: 120_000 }, async () => {
    const prompt = text(OFF_LOOP_ENCODE_MIN_CHARS * 2) + ' 世界 🎉';
    const res = await post(fx.port, '/tokenize', { model: MODEL_ID, prompt });
    assert.equal(res.status, 200, res.text.slice(0, 300));
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
    const tokens = fx.tokenizer.encode(prompt, { addSpecialTokens: true });
    assert.deepEqual(JSON.parse(res.text), {
      count: tokens.length,
      max_model_len: 10_000_000,
      tokens,
      token_strs: null,
    });
    assert.equal(await metric(fx, jobs('run')), 1);
    // Below the threshold: answered on the loop, no job.
    const small = await post(fx.port, '/tokenize', { prompt: 'Hello' });
    assert.deepEqual(JSON.parse(small.text).tokens, fx.tokenizer.encode('Hello', { addSpecialTokens: true }));
    assert.equal(await metric(fx, jobs('run')), 1);
  });

  test(
    'a large prompt longer than the context: the 400 with its count, decided on the worker',
    { timeout: 120_000 },
    async () => {
      const before = await metric(fx, jobs('run'));
      fx.backend.maxModelLen = 4096;
      try {
        const prompt = text(OFF_LOOP_ENCODE_MIN_CHARS * 2);
        const res = await post(fx.port, '/v1/completions', { prompt, max_tokens: 1 });
        assert.equal(res.status, 400, res.text.slice(0, 300));
        const err = JSON.parse(res.text).error;
        assert.equal(err.code, 'context_length_exceeded');
        assert.equal(err.param, 'prompt');
        assert.match(
          err.message,
          new RegExp(
            `your prompt resulted in ${fx.tokenizer.encode(prompt, { addSpecialTokens: true }).length} tokens`,
          ),
        );
        assert.equal(await metric(fx, jobs('run')), before + 1);
        assert.equal(fx.backend.submissions.length, 0);
      } finally {
        fx.backend.maxModelLen = 10_000_000;
      }
    },
  );

  test(
    '/detokenize of many ids: the same text, from the worker; a bad id is still a 400 naming tokens',
    { timeout: 120_000 },
    async () => {
      const before = await metric(fx, jobs('run'));
      const ids = fx.tokenizer.encode(text(OFF_LOOP_DECODE_MIN_IDS * 6) + ' <|im_end|> 世界 🎉');
      assert.ok(ids.length >= OFF_LOOP_DECODE_MIN_IDS);
      const res = await post(fx.port, '/detokenize', { tokens: ids });
      assert.equal(res.status, 200, res.text.slice(0, 300));
      assert.deepEqual(JSON.parse(res.text), { prompt: fx.tokenizer.decode(ids, { skipSpecialTokens: false }) });
      assert.equal(await metric(fx, jobs('run')), before + 1);
      const bad = await post(fx.port, '/detokenize', { tokens: [...ids, fx.tokenizer.vocabSize] });
      assert.equal(bad.status, 400, bad.text.slice(0, 300));
      const err = JSON.parse(bad.text).error;
      assert.equal(err.param, 'tokens');
      assert.match(err.message, new RegExp(`at index ${ids.length}`));
    },
  );

  test(
    'a long chat is rendered on the worker: the engine gets the tokens of the main-thread rendering',
    { timeout: 120_000 },
    async () => {
      const messages = Array.from({ length: OFF_LOOP_RENDER_MIN_MESSAGES + 3 }, (_, i) => ({
        role: i % 2 === 0 ? 'user' : 'assistant',
        content: `turn ${i}`,
      }));
      const before = await metric(fx, jobs('run'));
      const res = await post(fx.port, '/v1/chat/completions', { messages, max_tokens: 1 });
      assert.equal(res.status, 200, res.text.slice(0, 300));
      const expected = fx.tokenizer.encode(fx.tokenizer.applyChatTemplate(messages, { addGenerationPrompt: true }));
      assert.deepEqual(fx.backend.submissions.at(-1)!.request.promptTokenIds, expected);
      assert.ok((await metric(fx, jobs('run'))) >= before + 1, 'the render ran on the worker');
      // /tokenize with the same messages, and continue_final_message cutting the worker's rendering.
      const tok = await post(fx.port, '/tokenize', {
        messages,
        add_generation_prompt: false,
        continue_final_message: true,
      });
      assert.equal(tok.status, 200, tok.text.slice(0, 300));
      const rendered = fx.tokenizer.applyChatTemplate(messages, { addGenerationPrompt: false });
      const cut = rendered.slice(0, rendered.lastIndexOf(messages.at(-1)!.content) + messages.at(-1)!.content.length);
      assert.deepEqual(JSON.parse(tok.text).tokens, fx.tokenizer.encode(cut));
      // A message the template cannot take is the same 400 as on the main thread.
      const bad = await post(fx.port, '/v1/chat/completions', {
        messages: [...messages, { role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }],
      });
      assert.equal(bad.status, 400);
    },
  );

  test(
    `more than MAX_MESSAGES (${MAX_MESSAGES}) messages is a 400 naming the limit, before any work`,
    { timeout: 120_000 },
    async () => {
      const before = await metric(fx, jobs('run'));
      const many = Array.from({ length: MAX_MESSAGES + 1 }, () => ({ role: 'user', content: 'hi' }));
      for (const [path, body, param] of [
        ['/v1/chat/completions', { messages: many }, 'messages'],
        ['/tokenize', { messages: many }, 'messages'],
        ['/v1/responses', { input: many.map((m) => ({ type: 'message', ...m })) }, 'input'],
      ] as const) {
        const res = await post(fx.port, path, body);
        assert.equal(res.status, 400, `${path}: ${res.text.slice(0, 300)}`);
        const err = JSON.parse(res.text).error;
        assert.equal(err.param, param, path);
        assert.equal(err.message, `'${param}' has more than ${MAX_MESSAGES} entries (the gateway's limit)`);
      }
      assert.equal(await metric(fx, jobs('run')), before, 'nothing was rendered');
      // Exactly at the limit is served.
      const atLimit = await post(fx.port, '/tokenize', { messages: many.slice(1) });
      assert.equal(atLimit.status, 200, atLimit.text.slice(0, 300));
    },
  );
});
