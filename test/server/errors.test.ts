/**
 * Error answers of the OpenAI routes (gateway.md sections 8, 9.2, 11.3 and 12; engine-wire.md 4.6): OpenAI-style
 * 400 bodies naming the parameter, 404 for an unknown model, 413, 503 for a dead engine at submit, mid-stream error
 * events followed by [DONE], and engine aborts surfaced as errors.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import {
  ENGINE_CLIENT_ERROR_KINDS,
  EngineClientError,
  type EngineClientErrorKind,
} from '../../src/engine-client/errors.js';
import { ENGINE_ERROR_STATUS, toApiError } from '../../src/server/errors.js';
import type { FakeBackend } from './fake-backend.js';
import { choicesOf, countingTokenizer, makeApp, parseSse } from './helpers.js';

const USER = [{ role: 'user', content: 'Hi' }];

describe('error answers', () => {
  let app: FastifyInstance;
  let backend: FakeBackend;

  before(async () => {
    ({ app, backend } = await makeApp({ bodyLimitBytes: 64 * 1024 }));
    backend.maxModelLen = 64;
    backend.onSubmit = (s) => s.stream.pushAll([9707, 0], 'stop');
  });
  after(() => app.close());

  const post = (url: string, payload: unknown, headers: Record<string, string> = {}) =>
    app.inject({
      method: 'POST',
      url,
      payload: payload as string,
      headers: { 'content-type': 'application/json', ...headers },
    });

  /** Assert an OpenAI error body with this status, param and a message matching `message`. */
  function assertError(
    res: {
      statusCode: number;
      json(): { error: { code: unknown; message: string; param: string | null; type: string } };
      body: string;
    },
    status: number,
    param: string | null,
    message?: RegExp,
  ): void {
    assert.equal(res.statusCode, status, res.body);
    const body = res.json();
    assert.deepEqual(Object.keys(body), ['error']);
    assert.deepEqual(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type']);
    assert.equal(typeof body.error.message, 'string');
    assert.equal(body.error.param, param, body.error.message);
    if (message) assert.match(body.error.message, message);
    if (status === 400) assert.equal(body.error.type, 'invalid_request_error');
  }

  test('malformed JSON → 400 invalid_request_error', async () => {
    const res = await post('/v1/chat/completions', '{"messages": [');
    assertError(res, 400, null, /JSON/);
    const empty = await post('/v1/completions', '');
    assertError(empty, 400, null);
  });

  test('schema errors name the parameter', async () => {
    assertError(await post('/v1/chat/completions', {}), 400, 'messages', /required/);
    assertError(await post('/v1/chat/completions', { messages: [] }), 400, 'messages');
    const typed = await post('/v1/chat/completions', { messages: USER, temperature: 'hot' });
    assertError(typed, 400, 'temperature', /number/);
    assert.equal(typed.json().error.code, 'invalid_parameter', "our code, not fastify's FST_ERR_VALIDATION");
    const text = await app.inject({
      method: 'POST',
      url: '/v1/completions',
      payload: 'hello',
      headers: { 'content-type': 'text/plain' },
    });
    assertError(text, 400, null, /JSON object/);
    assertError(await post('/v1/chat/completions', { messages: USER, max_tokens: 1.5 }), 400, 'max_tokens', /integer/);
    assertError(
      await post('/v1/chat/completions', { messages: [{ role: 'wizard', content: 'x' }] }),
      400,
      'messages[0].role',
    );
    assertError(
      await post('/v1/chat/completions', { messages: [{ role: 'user', content: 5 }] }),
      400,
      'messages[0].content',
    );
    assertError(await post('/v1/completions', { prompt: [1.5] }), 400, 'prompt');
    assertError(await post('/v1/completions', { prompt: 'x', stream: 'yes' }), 400, 'stream', /boolean/);
  });

  test('unknown nested parameters are refused (unknown top-level ones are ignored: request-tolerance.test.ts)', async () => {
    assertError(
      await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'x', extra: 1 }] }),
      400,
      'messages[0].extra',
    );
  });

  test('parameters not served yet → 400 naming them (unless their value is a no-op)', async () => {
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ['/v1/chat/completions', { logprobs: true, top_logprobs: 2 }, 'top_logprobs'],
      ['/v1/chat/completions', { logprobs: 1 }, 'logprobs'],
      ['/v1/chat/completions', { top_logprobs: 3 }, 'top_logprobs'],
      ['/v1/chat/completions', { logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
      ['/v1/chat/completions', { response_format: { type: 'xml' } }, 'response_format.type'],
      [
        '/v1/chat/completions',
        { structured_outputs: { json_object: true, disable_any_whitespace: true } },
        'structured_outputs',
      ],
      ['/v1/chat/completions', { guided_regex: 'a+', guided_choice: ['a'] }, 'guided_choice'],
      ['/v1/chat/completions', { logit_bias: { '-5': 1 } }, 'logit_bias'],
      ['/v1/chat/completions', { logit_bias: { '5': 'x' } }, 'logit_bias'],
      ['/v1/completions', { logprobs: 2 }, 'logprobs'],
      ['/v1/completions', { logprobs: 6 }, 'logprobs'],
      ['/v1/completions', { echo: true, logprobs: 1 }, 'echo'],
      ['/v1/completions', { best_of: 2 }, 'best_of'],
      ['/v1/completions', { suffix: 'tail' }, 'suffix'],
    ];
    for (const [url, extra, param] of cases) {
      const base = url === '/v1/completions' ? { prompt: 'x' } : { messages: USER };
      assertError(await post(url, { ...base, ...extra }), 400, param, new RegExp(param));
    }
    assertError(await post('/v1/completions', { prompt: ['a', 'b'] }), 400, 'prompt', /batched/);
    assertError(
      await post('/v1/chat/completions', {
        messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }],
      }),
      400,
      'messages[0].content[0].type',
    );
  });

  test('range checks (engine-wire.md 4.6) → 400 naming the parameter', async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ temperature: -0.1 }, 'temperature'],
      [{ top_p: 0 }, 'top_p'],
      [{ top_p: 1.5 }, 'top_p'],
      [{ top_k: 128 }, 'top_k'],
      [{ top_k: -2 }, 'top_k'],
      [{ min_p: 1.1 }, 'min_p'],
      [{ presence_penalty: 2.5 }, 'presence_penalty'],
      [{ frequency_penalty: -3 }, 'frequency_penalty'],
      [{ repetition_penalty: 2.1 }, 'repetition_penalty'],
      [{ seed: -1 }, 'seed'],
      [{ stop_token_ids: [-1] }, 'stop_token_ids'],
      [{ stop_token_ids: [10_000_000] }, 'stop_token_ids'],
      [{ max_tokens: 0 }, 'max_tokens'],
      [{ max_completion_tokens: -5, max_tokens: 5 }, 'max_completion_tokens'],
      [{ min_tokens: 10, max_tokens: 5 }, 'min_tokens'],
    ];
    for (const [extra, param] of cases) {
      assertError(await post('/v1/chat/completions', { messages: USER, ...extra }), 400, param);
    }
    assertError(await post('/v1/completions', { prompt: [999_999_999] }), 400, 'prompt');
  });

  test('admission against the usable context (max_model_len 64 less the 2 TokenSpeed reserves) → 400 before any send', async () => {
    // engine-wire.md 4.4: TokenSpeed clamps max_new_tokens to (max_model_len − 1) − prompt_len − 1, so with
    // max_model_len 64 prompt + completion is at most 62 and a prompt of 62 tokens or more gets nothing.
    const before = backend.submissions.length;
    assertError(await post('/v1/completions', { prompt: '' }), 400, 'prompt', /empty/);
    assertError(await post('/v1/completions', { prompt: [] }), 400, 'prompt', /empty/);
    const ids = (n: number) => Array.from({ length: n }, (_, i) => i + 1);
    const limitMsg = /maximum context length is 62 tokens \(max_model_len 64 less 2 the engine reserves\)/;
    for (const n of [64, 63, 62]) {
      const res = await post('/v1/completions', { prompt: ids(n) });
      assertError(res, 400, 'prompt', limitMsg);
      assert.match(res.json().error.message, new RegExp(`resulted in ${n} tokens, which leaves no room`));
      assert.equal(res.json().error.code, 'context_length_exceeded');
    }
    assertError(await post('/v1/completions', { prompt: ids(63), max_tokens: 1 }), 400, 'prompt', limitMsg);
    const res = await post('/v1/completions', { prompt: ids(61), max_tokens: 3 });
    assertError(res, 400, 'max_tokens', limitMsg);
    assert.match(res.json().error.message, /you requested 64 tokens \(61 in the prompt, 3 in the completion\)/);
    assert.equal(res.json().error.code, 'context_length_exceeded');
    assertError(
      await post('/v1/completions', { prompt: ids(60), max_tokens: 3 }),
      400,
      'max_tokens',
      /requested 63 tokens/,
    );
    assert.equal(backend.submissions.length, before, 'nothing was submitted');
    // Exactly filling the usable context is accepted; the default limit is the remaining usable context.
    const fits = await post('/v1/completions', { prompt: ids(60), max_tokens: 2 });
    assert.equal(fits.statusCode, 200, fits.body);
    assert.equal(backend.submissions.at(-1)!.request.sampling.maxNewTokens, 2);
    const dflt = await post('/v1/completions', { prompt: ids(60) });
    assert.equal(dflt.statusCode, 200, dflt.body);
    assert.equal(backend.submissions.at(-1)!.request.sampling.maxNewTokens, 2);
    const last = await post('/v1/completions', { prompt: ids(61) });
    assert.equal(last.statusCode, 200, last.body);
    assert.equal(backend.submissions.at(-1)!.request.sampling.maxNewTokens, 1);
    // /v1/models still reports the handshake's max_model_len.
    const models = await app.inject({ method: 'GET', url: '/v1/models' });
    assert.equal(models.json().data[0].max_model_len, 64);
  });

  test('unknown model → 404; stream_options without stream → 400; unknown route → 404 body', async () => {
    const res = await post('/v1/chat/completions', { model: 'other', messages: USER }, { 'x-request-id': 'abc-1' });
    assertError(res, 404, 'model', /other/);
    assert.equal(res.headers['x-request-id'], 'abc-1', 'the client id is echoed on errors too');
    assert.equal(res.json().error.type, 'not_found_error');
    assertError(
      await post('/v1/chat/completions', { messages: USER, stream_options: { include_usage: true } }),
      400,
      'stream_options',
    );
    const nf = await app.inject({ method: 'GET', url: '/v1/nothing' });
    assertError(nf, 404, null);
  });

  test('a body above the limit → 413 with a clear message', async () => {
    const res = await post('/v1/completions', JSON.stringify({ prompt: 'x'.repeat(70 * 1024) }));
    assertError(res, 413, null, /larger than the gateway's limit of 65536 bytes/);
  });

  test('engine dead at submit → 503; client closed → 503; unexpected error → 500', async () => {
    try {
      backend.submitError = new EngineClientError('engine-dead', 'ENGINE_CORE_DEAD received');
      const res = await post('/v1/chat/completions', { messages: USER });
      assertError(res, 503, null, /ENGINE_CORE_DEAD/);
      assert.equal(res.json().error.type, 'service_unavailable_error');
      assert.equal(res.json().error.code, 'engine_dead', "snake_case, like the gateway's own engine_dead refusal");
      const streaming = await post('/v1/chat/completions', { messages: USER, stream: true });
      assertError(streaming, 503, null);
      backend.submitError = new EngineClientError('client-closed', 'shutting down');
      assertError(await post('/v1/completions', { prompt: 'x' }), 503, null, /shutting down/);
      backend.submitError = new Error('boom');
      assertError(await post('/v1/completions', { prompt: 'x' }), 500, null, /boom/);
    } finally {
      backend.submitError = null;
    }
  });

  test('error mid-stream → an SSE error event, then [DONE]; non-streaming → 503 body', async () => {
    backend.onSubmit = (s) => {
      s.stream.push([9707]);
      s.stream.fail(new EngineClientError('engine-dead', 'engine core dead'));
    };
    try {
      const res = await post('/v1/chat/completions', { messages: USER, stream: true });
      assert.equal(res.statusCode, 200);
      const { events, doneCount } = parseSse(res.body);
      assert.equal(doneCount, 1);
      const last = events.at(-1)! as { error?: { message: string; type: string; code: unknown } };
      assert.ok(last.error, 'last event is an error');
      assert.match(last.error.message, /engine core dead/);
      assert.equal(last.error.type, 'service_unavailable_error');
      for (const ev of events.slice(0, -1)) assert.equal(choicesOf(ev)[0]!.finish_reason, null);
      assertError(await post('/v1/chat/completions', { messages: USER }), 503, null, /engine core dead/);
    } finally {
      backend.onSubmit = (s) => s.stream.pushAll([9707, 0], 'stop');
    }
  });

  test('a terminal abort the gateway did not cause, a terminal error, and a stream without an end are errors', async () => {
    const scripts: Array<[string, (s: import('./fake-backend.js').Submission) => void, number, RegExp]> = [
      ['abort', (s) => s.stream.push([], 'abort'), 500, /aborted/],
      ['error', (s) => s.stream.pushAll([9707], 'error'), 500, /with an error/],
      [
        'closed',
        (s) => {
          s.stream.push([9707]);
          s.stream.end();
        },
        503,
        /without a finish reason/,
      ],
    ];
    try {
      for (const [name, script, status, message] of scripts) {
        backend.onSubmit = script;
        const plain = await post('/v1/completions', { prompt: 'x' });
        assertError(plain, status, null, message);
        const streamed = await post('/v1/completions', { prompt: 'x', stream: true });
        const { events, doneCount } = parseSse(streamed.body);
        assert.equal(doneCount, 1, name);
        const last = events.at(-1) as { error?: { message: string } };
        assert.ok(last.error, `${name}: last event is an error`);
        assert.match(last.error.message, message);
        assert.ok(
          !events.some(
            (e) =>
              Array.isArray(e.choices) &&
              (e.choices as Array<{ finish_reason: string | null }>).some((c) => c.finish_reason !== null),
          ),
          `${name}: no finish`,
        );
      }
    } finally {
      backend.onSubmit = (s) => s.stream.pushAll([9707, 0], 'stop');
    }
  });
});

describe('a text prompt too large for the context is refused before tokenizing (gateway.md 9.2)', () => {
  let app: FastifyInstance;
  let backend: FakeBackend;
  let encodeCalls: () => number;

  before(async () => {
    const counting = await countingTokenizer();
    encodeCalls = counting.encodeCalls;
    ({ app, backend } = await makeApp({ tokenizer: counting.tokenizer }));
    backend.maxModelLen = 64; // usable context 62 tokens
    backend.onSubmit = (s) => s.stream.pushAll([9707], 'stop');
  });
  after(() => app.close());

  const post = (url: string, payload: unknown) =>
    app.inject({ method: 'POST', url, payload: payload as string, headers: { 'content-type': 'application/json' } });

  test('completions: 7809 spaces (at least ceil(7809 / 128) = 62 tokens) → 400 without encode; 7808 are tokenized', async () => {
    const before = encodeCalls();
    const res = await post('/v1/completions', { prompt: ' '.repeat(7809) });
    assert.equal(res.statusCode, 400, res.body);
    const err = res.json().error;
    assert.equal(err.param, 'prompt');
    assert.equal(err.code, 'context_length_exceeded');
    assert.match(err.message, /maximum context length is 62 tokens.*at least 62 tokens \(bounded from its 7809 bytes/);
    assert.equal(encodeCalls(), before, 'the prompt was not tokenized');
    const batched = await post('/v1/completions', { prompt: [' '.repeat(7809)] });
    assert.equal(batched.statusCode, 400, batched.body);
    assert.equal(encodeCalls(), before, 'nor as an array of one string');

    // One byte less: the bound (61) leaves room, so the prompt is tokenized (61 tokens of 128 spaces) and served.
    const fits = await post('/v1/completions', { prompt: ' '.repeat(7808) });
    assert.equal(fits.statusCode, 200, fits.body);
    assert.equal(encodeCalls(), before + 1);
    assert.equal(backend.submissions.at(-1)!.request.promptTokenIds.length, 61);
    assert.equal(backend.submissions.at(-1)!.request.sampling.maxNewTokens, 1);
  });

  test('chat: the rendered template text is bounded before encode', async () => {
    const before = encodeCalls();
    const res = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'x'.repeat(8000) }] });
    assert.equal(res.statusCode, 400, res.body);
    assert.equal(res.json().error.param, 'messages');
    assert.equal(res.json().error.code, 'context_length_exceeded');
    assert.match(res.json().error.message, /your messages resulted in at least \d+ tokens/);
    assert.equal(encodeCalls(), before, 'the rendered prompt was not tokenized');
    const small = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }] });
    assert.equal(small.statusCode, 200, small.body);
    assert.equal(encodeCalls(), before + 1);
  });
});

test("a budget refusal is OpenAI's 429 rate_limit_exceeded with Retry-After and x-ratelimit headers", () => {
  const requests = toApiError(
    new EngineClientError('rate-limited', 'tenant "a" reached its budget', {
      retryAfterMs: 2_500,
      rateLimits: [10, 0, 6_000, 1000, 400, 36_000],
    }),
  );
  assert.equal(requests.statusCode, 429);
  assert.deepEqual(requests.toBody().error, {
    message: 'tenant "a" reached its budget',
    type: 'requests',
    param: null,
    code: 'rate_limit_exceeded',
  });
  assert.equal(requests.retryAfterSeconds, 3);
  assert.deepEqual(requests.headers, {
    'x-ratelimit-limit-requests': '10',
    'x-ratelimit-remaining-requests': '0',
    'x-ratelimit-reset-requests': '6s',
    'x-ratelimit-limit-tokens': '1000',
    'x-ratelimit-remaining-tokens': '400',
    'x-ratelimit-reset-tokens': '36s',
  });
  // The token limit refused it, and waiting cannot help (a prompt larger than the budget): no Retry-After.
  const tokens = toApiError(
    new EngineClientError('rate-limited', 'too big', { rateLimits: [-1, -1, -1, 100, 100, 0] }),
  );
  assert.equal(tokens.type, 'tokens');
  assert.equal(tokens.retryAfterSeconds, null);
  assert.deepEqual(Object.keys(tokens.headers!), [
    'x-ratelimit-limit-tokens',
    'x-ratelimit-remaining-tokens',
    'x-ratelimit-reset-tokens',
  ]);
});

test('every engine-client error kind has its status; only EngineClientErrors are read by kind', () => {
  assert.deepEqual(Object.keys(ENGINE_ERROR_STATUS).sort(), [...ENGINE_CLIENT_ERROR_KINDS].sort());
  for (const kind of ENGINE_CLIENT_ERROR_KINDS) {
    if (kind === 'rate-limited') continue; // the tenant's budget, not the engine's: its own test below
    const api = toApiError(new EngineClientError(kind, 'what happened', { dpRank: 1 }));
    assert.equal(api.statusCode, ENGINE_ERROR_STATUS[kind], kind);
    assert.equal(api.code, kind.replaceAll('-', '_'));
    assert.equal(api.message, `engine ${kind}: what happened`);
    assert.equal(api.retryAfterSeconds !== null, kind === 'unavailable' || kind === 'overloaded', kind);
  }
  assert.deepEqual(
    [
      'engine-dead',
      'rank-stalled',
      'unavailable',
      'engine-fault',
      'decode',
      'invalid-dp-rank',
      'encode',
      'overloaded',
    ].map((k) => ENGINE_ERROR_STATUS[k as EngineClientErrorKind]),
    [503, 503, 503, 502, 502, 400, 500, 429],
  );
  // Something that only looks like one (a name and a kind) is the gateway's own fault, not a routed status.
  const lookalike = Object.assign(new Error('x'), { name: 'EngineClientError', kind: 'invalid-dp-rank' });
  assert.equal(toApiError(lookalike).statusCode, 500);
});
