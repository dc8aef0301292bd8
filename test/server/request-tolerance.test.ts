/**
 * vLLM-style request tolerance (src/server/unknown-fields.ts; issue #10 part 5; coordination note H): unknown
 * top-level fields are ignored — never reaching the engine request — and logged with vLLM's wording, at warn once per
 * field name and at debug on every request; fields the gateway knows but cannot honour keep their 400.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { IGNORED_FIELDS_MESSAGE, WarnedFieldNames, stripUnknownFields } from '../../src/server/unknown-fields.js';
import { captureLogs, type LogRecord } from '../helpers/logs.js';
import { listenApp, type AppFixture } from './helpers.js';

const USER = [{ role: 'user', content: 'Hi' }];

/** Fields the openai SDK, LangChain and the Vercel AI SDK may send that change nothing for this gateway. */
const HARMLESS: Record<string, unknown> = {
  store: false,
  metadata: { session: 'abc' },
  service_tier: 'auto',
  prediction: { type: 'content', content: 'Hello' },
  prompt_cache_key: 'k1',
  safety_identifier: 'user-1',
  verbosity: 'medium',
  frobnicate: 1,
};

describe('unknown top-level fields', () => {
  let fx: AppFixture & { port: number };
  let records: LogRecord[];

  before(async () => {
    const logs = captureLogs('debug');
    records = logs.records;
    fx = await listenApp({ logger: logs.logger });
    fx.backend.onSubmit = (s) => s.stream.pushAll([9707, 0], 'stop');
  });
  after(() => fx.app.close());

  const post = async (path: string, body: Record<string, unknown>) => {
    const res = await fetch(`http://127.0.0.1:${fx.port}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- a parsed JSON body, read field by field by the assertions
    return { status: res.status, body: (await res.json()) as Record<string, any> };
  };

  test('are ignored on every route: the answer and the engine request are those without them', async () => {
    for (const [path, base] of [
      ['/v1/chat/completions', { messages: USER, max_tokens: 4, seed: 3 }],
      ['/v1/completions', { prompt: 'x', max_tokens: 4, seed: 3 }],
    ] as const) {
      const plain = await post(path, base);
      const plainRequest = fx.backend.submissions.at(-1)!.request;
      const extra = await post(path, { ...base, ...HARMLESS, modalities: ['text'] });
      assert.equal(extra.status, 200, JSON.stringify(extra.body));
      const extraRequest = fx.backend.submissions.at(-1)!.request;
      assert.deepEqual(
        { ...extraRequest, requestId: '' },
        { ...plainRequest, requestId: '' },
        `${path}: the same engine request`,
      );
      assert.deepEqual(extra.body.choices, plain.body.choices);
    }
    const tok = await post('/tokenize', { prompt: 'Hello', ...HARMLESS });
    assert.equal(tok.status, 200);
    assert.equal((await post('/detokenize', { tokens: [9707], extra: true })).status, 200);
  });

  test('are logged with vLLM wording: warn once per field name, debug on every request', async () => {
    records.length = 0;
    await post('/v1/completions', { prompt: 'x', only_here_a: 1, only_here_b: 2 });
    await post('/v1/completions', { prompt: 'x', only_here_a: 1 });
    await post('/v1/chat/completions', { messages: USER, only_here_a: 1, only_here_c: 3 });
    const warns = records.filter((r) => r.level === 40 && r.msg.startsWith(IGNORED_FIELDS_MESSAGE));
    assert.deepEqual(
      warns.map((r) => r.ignoredFields),
      [['only_here_a', 'only_here_b'], ['only_here_c']],
    );
    assert.match(
      warns[0]!.msg,
      /^The following fields were present in the request but ignored: only_here_a, only_here_b/,
    );
    const debugs = records.filter((r) => r.level === 20 && r.msg.startsWith(IGNORED_FIELDS_MESSAGE));
    assert.equal(debugs.length, 3, 'one debug line per request');
  });

  test('a huge field name is logged cut to 100 characters', async () => {
    records.length = 0;
    const name = 'n'.repeat(50_000);
    assert.equal((await post('/v1/completions', { prompt: 'x', [name]: 1 })).status, 200);
    const warn = records.find((r) => r.level === 40 && r.msg.startsWith(IGNORED_FIELDS_MESSAGE));
    assert.ok(warn);
    assert.ok(warn.msg.length < 400, warn.msg.slice(0, 200));
    assert.match(warn.msg, /… \(50000 bytes\)/);
  });

  test('known fields that would change the output keep their 400, also next to ignored ones', async () => {
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ['/v1/chat/completions', { modalities: ['text', 'audio'] }, 'modalities'],
      ['/v1/chat/completions', { audio: { voice: 'alloy', format: 'wav' } }, 'audio'],
      ['/v1/chat/completions', { web_search_options: {} }, 'web_search_options'],
      ['/v1/chat/completions', { n: 1000 }, 'n'],
      ['/v1/chat/completions', { logprobs: true, top_logprobs: 5 }, 'top_logprobs'],
      ['/v1/completions', { echo: true, logprobs: 1 }, 'echo'],
      ['/v1/completions', { logprobs: 3 }, 'logprobs'],
      ['/v1/completions', { best_of: 3 }, 'best_of'],
      // vLLM extensions that change the output are refused by name, never dropped as unknown (issue 31 part 4); the
      // served ones refuse bad values by name (and bad_words on this TokenSpeed group).
      ['/v1/completions', { bad_words: ['x'] }, 'bad_words'],
      ['/v1/chat/completions', { return_token_ids: 'yes' }, 'return_token_ids'],
      ['/v1/chat/completions', { chat_template: '{{ messages }}' }, 'chat_template'],
      ['/v1/completions', { priority: -5 }, 'priority'],
      ['/v1/chat/completions', { thinking_token_budget: -1 }, 'thinking_token_budget'],
      ['/v1/completions', { truncate_prompt_tokens: 0 }, 'truncate_prompt_tokens'],
    ];
    for (const [path, extra, param] of cases) {
      const base = path === '/v1/completions' ? { prompt: 'x' } : { messages: USER };
      const res = await post(path, { ...base, store: true, ...extra });
      assert.equal(res.status, 400, `${param}: ${JSON.stringify(res.body)}`);
      assert.equal(res.body.error.param, param);
    }
  });

  test('their no-op values pass: priority 0, empty bad_words, return_token_ids false', async () => {
    const res = await post('/v1/completions', {
      prompt: 'x',
      priority: 0,
      bad_words: [],
      return_token_ids: false,
      allowed_token_ids: null,
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
  });

  test('nested unknown fields are still refused by name', async () => {
    const res = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'x', extra: 1 }] });
    assert.equal(res.status, 400);
    assert.equal(res.body.error.param, 'messages[0].extra');
    const opts = await post('/v1/chat/completions', {
      messages: USER,
      stream: true,
      stream_options: { include_usage: true, other: 1 },
    });
    assert.equal(opts.status, 400);
    assert.equal(opts.body.error.param, 'stream_options.other');
  });
});

test('stripUnknownFields and WarnedFieldNames', () => {
  const body: Record<string, unknown> = { a: 1, b: 2, c: 3 };
  assert.deepEqual(stripUnknownFields(body, new Set(['b'])), ['a', 'c']);
  assert.deepEqual(body, { b: 2 });
  const warned = new WarnedFieldNames(2);
  assert.deepEqual(warned.firstSeen(['x', 'y', 'x']), ['x', 'y']);
  assert.equal(warned.full, true);
  assert.deepEqual(warned.firstSeen(['z', 'x']), [], 'past the cap nothing new is remembered');
});
