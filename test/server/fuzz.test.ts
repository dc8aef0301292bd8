/**
 * A seeded, bounded fuzz of the HTTP API (issue #10 "Done when"): mutated JSON bodies and header sets against
 * /v1/chat/completions, /v1/completions, /tokenize, /detokenize and /v1/responses, through fastify's `inject` (2 100 cases: the
 * whole app, parsing to response) and over raw HTTP/1.1 sockets (300 byte-level mutations of the request text: the
 * Node HTTP parser too). Every answer must be a non-5xx status with an OpenAI-style error body when it is an error,
 * within a hang guard; afterwards no engine stream is left unfinished and the app still serves.
 *
 * Deterministic: one seeded PRNG (test/helpers/prng.ts) drives every choice; the fake engine answers every request
 * the same way. A failure message names the case number and the seed to replay it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { hangGuard } from '../helpers/async.js';
import { prng } from '../helpers/prng.js';
import { listenApp, rawExchange, type AppFixture } from './helpers.js';

const SEED = 0x10f022;
const KEY = 'sk-fuzz';
const INJECT_CASES = 2_100;
const RAW_CASES = 300;

type Rand = () => number;
const int = (r: Rand, n: number): number => Math.floor(r() * n);
const pick = <T>(r: Rand, xs: readonly T[]): T => xs[int(r, xs.length)]!;

/** Field names worth hitting: every known parameter of the routes, some SDK extras, and a few odd ones. */
const FIELDS = [
  'model',
  'messages',
  'prompt',
  'max_tokens',
  'max_completion_tokens',
  'min_tokens',
  'temperature',
  'top_p',
  'top_k',
  'min_p',
  'presence_penalty',
  'frequency_penalty',
  'repetition_penalty',
  'seed',
  'n',
  'stream',
  'stream_options',
  'stop',
  'stop_token_ids',
  'ignore_eos',
  'skip_special_tokens',
  'user',
  'logit_bias',
  'include_stop_str_in_output',
  'response_format',
  'spaces_between_special_tokens',
  'prompt_logprobs',
  'logprobs',
  'top_logprobs',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'add_generation_prompt',
  'continue_final_message',
  'functions',
  'function_call',
  'reasoning_effort',
  'chat_template_kwargs',
  'modalities',
  'audio',
  'web_search_options',
  'echo',
  'suffix',
  'best_of',
  'add_special_tokens',
  'tokens',
  'store',
  'metadata',
  'service_tier',
  'prediction',
  'input',
  'instructions',
  'max_output_tokens',
  'previous_response_id',
  'text',
  'include',
  'structured_outputs',
  '__proto__',
  'constructor',
  '',
  'x'.repeat(300),
  'ü',
  'role',
  'content',
];

const STRINGS = [
  '',
  'Hi',
  ' ',
  '\u0000',
  '\ud800',
  '\udfff\ud800',
  '😀'.repeat(50),
  'a'.repeat(5_000),
  '<|im_start|>',
  '<|endoftext|>',
  '{"a":1}',
  '\n\n\n',
  'auto',
  'none',
  'text',
  'function',
  'user',
  'assistant',
  'system',
  'tool',
  'json_object',
  '-1',
  '1e309',
  'NaN',
];
const NUMBERS = [
  0,
  1,
  -1,
  2,
  3,
  0.5,
  -0.5,
  1e308,
  -1e308,
  2 ** 53,
  2 ** 53 + 2,
  -(2 ** 31),
  151_643,
  151_936,
  10_000_000,
  1e-320,
  127,
  128,
  1 << 30,
  4096,
];

/** Stands for 5 000 nested arrays until the body is serialized. */
const DEEP_MARKER = '\u0001deep\u0001';
const DEEP_TEXT = '['.repeat(5000) + ']'.repeat(5000);

/** A random JSON value; `depth` bounds the nesting (a deep chain is one of the choices). */
function randomValue(r: Rand, depth = 0): unknown {
  const k = int(r, depth > 3 ? 6 : 10);
  switch (k) {
    case 0:
      return null;
    case 1:
      return r() < 0.5;
    case 2:
    case 3:
      return pick(r, NUMBERS);
    case 4:
    case 5:
      return pick(r, STRINGS);
    case 6:
      return Array.from({ length: int(r, 5) }, () => randomValue(r, depth + 1));
    case 7:
      return Object.fromEntries(Array.from({ length: int(r, 4) }, () => [pick(r, FIELDS), randomValue(r, depth + 1)]));
    case 8: {
      // A nesting chain, sometimes past the depth limit.
      // Sometimes 5 000 levels, spliced in as text after serializing (DEEP_MARKER): the test's own JSON.stringify
      // would overflow on it.
      if (r() < 0.1) return DEEP_MARKER;
      let v: unknown = pick(r, [1, 'x', null]);
      for (let i = int(r, 120); i > 0; i--) v = r() < 0.5 ? [v] : { a: v };
      return v;
    }
    default:
      return Array.from({ length: int(r, 3000) }, () => int(r, 200_000) - 100);
  }
}

const BASES: Record<string, () => Record<string, unknown>> = {
  '/v1/chat/completions': () => ({ messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 4 }),
  '/v1/completions': () => ({ prompt: 'Once upon a time', max_tokens: 4 }),
  '/tokenize': () => ({ prompt: 'Hello' }),
  '/detokenize': () => ({ tokens: [9707, 11] }),
  '/v1/responses': () => ({ input: 'Hello there', max_output_tokens: 4 }),
};
const TOKENIZE_CHAT = (): Record<string, unknown> => ({
  messages: [{ role: 'user', content: 'Hi' }],
  add_generation_prompt: true,
});

/** Mutate a JSON object in place a few times: delete, set, or replace a nested value. */
function mutateObject(r: Rand, body: Record<string, unknown>): void {
  for (let n = 1 + int(r, 3); n > 0; n--) {
    const op = int(r, 4);
    const keys = Object.keys(body);
    if (op === 0 && keys.length > 0) delete body[pick(r, keys)];
    else if (op === 1 || keys.length === 0) body[pick(r, FIELDS)] = randomValue(r);
    else {
      // Replace somewhere inside an existing value.
      const key = pick(r, keys);
      let holder: Record<string, unknown> | unknown[] = body;
      let slot: string | number = key;
      for (let d = int(r, 4); d > 0; d--) {
        const inner: unknown = (holder as Record<string, unknown>)[slot as string];
        if (Array.isArray(inner) && inner.length > 0) {
          holder = inner;
          slot = int(r, inner.length);
        } else if (inner !== null && typeof inner === 'object' && Object.keys(inner).length > 0) {
          holder = inner as Record<string, unknown>;
          slot = pick(r, Object.keys(inner));
        } else break;
      }
      (holder as Record<string | number, unknown>)[slot] = randomValue(r);
    }
  }
}

/** Mutate the JSON text: truncate, flip or insert characters, add garbage or a BOM, duplicate a key. */
function mutateText(r: Rand, text: string): string {
  switch (int(r, 7)) {
    case 0:
      return text.slice(0, int(r, text.length));
    case 1: {
      const i = int(r, text.length);
      return text.slice(0, i) + String.fromCharCode(int(r, 128)) + text.slice(i + 1);
    }
    case 2: {
      const i = int(r, text.length);
      return (
        text.slice(0, i) + pick(r, ['{', '}', '[', ']', ',', ':', '"', '\\', '\u0000', 'null', '1e999']) + text.slice(i)
      );
    }
    case 3:
      return `${text}${pick(r, ['x', ' ', '}', '\n{}'])}`;
    case 4:
      return `\ufeff${text}`;
    case 5:
      return text.replace('{', '{"stream":true,"stream":false,');
    default:
      return text.replace('{', '{"__proto__":{"polluted":1},');
  }
}

/** A header set: content type, authorization, and a few optional headers with random values. */
function mutateHeaders(r: Rand): Record<string, string> {
  const h: Record<string, string> = {};
  const ct =
    r() < 0.85
      ? pick(r, ['application/json', 'application/json; charset=utf-8', 'APPLICATION/JSON'])
      : pick(r, [
          'text/plain',
          'application/x-www-form-urlencoded',
          'application/json; charset=latin1',
          '',
          'multipart/form-data; boundary=x',
        ]);
  if (ct !== '') h['content-type'] = ct;
  const auth = int(r, 20);
  if (auth < 18) h.authorization = r() < 0.9 ? `Bearer ${KEY}` : pick(r, [`bearer ${KEY}`, `Bearer  ${KEY} `]);
  else if (auth === 18)
    h.authorization = pick(r, ['Bearer', 'Basic abc', `Bearer ${KEY}x`, `Bearer ${'k'.repeat(8000)}`]);
  if (r() < 0.3)
    h['x-data-parallel-rank'] = pick(r, ['0', '1', '2', '-1', '999999999999', 'abc', '', ' 1 ', '0x1', '1,1']);
  if (r() < 0.3) h['x-request-id'] = pick(r, ['abc', 'x'.repeat(4000), '', '1 2 3', 'ü']);
  if (r() < 0.1) h['content-encoding'] = pick(r, ['gzip', 'br', 'identity']);
  if (r() < 0.1) h.accept = pick(r, ['text/event-stream', '*/*', 'application/xml']);
  return h;
}

interface FuzzCase {
  method: string;
  url: string;
  headers: Record<string, string>;
  payload: string;
}

function makeCase(r: Rand): FuzzCase {
  const url = pick(r, [
    '/v1/chat/completions',
    '/v1/chat/completions',
    '/v1/completions',
    '/v1/completions',
    '/tokenize',
    '/detokenize',
    '/v1/responses',
  ]);
  const body = url === '/tokenize' && r() < 0.5 ? TOKENIZE_CHAT() : BASES[url]!();
  if (r() < 0.3) body.stream = true;
  if (r() < 0.85) mutateObject(r, body);
  let payload = JSON.stringify(body).split(JSON.stringify(DEEP_MARKER)).join(DEEP_TEXT);
  if (r() < 0.25) payload = mutateText(r, payload);
  const method = r() < 0.03 ? pick(r, ['GET', 'PUT', 'DELETE', 'OPTIONS', 'PATCH']) : 'POST';
  const path = r() < 0.03 ? `${url}${pick(r, ['?x=1', '/', '%00', '?verbose=1'])}` : url;
  return { method, url: path, headers: mutateHeaders(r), payload };
}

/** Byte-level damage to a whole raw request: the request line, the headers, the framing. */
function rawRequest(r: Rand, c: FuzzCase): string {
  const headers = { ...c.headers, host: 'x', connection: 'close' } as Record<string, string>;
  let body = c.payload;
  let framing = `content-length: ${Buffer.byteLength(body)}\r\n`;
  switch (int(r, 8)) {
    case 0:
      framing = 'transfer-encoding: chunked\r\n';
      body = `${Buffer.byteLength(body).toString(16)}\r\n${body}\r\n0\r\n\r\n`;
      break;
    case 1:
      framing = `content-length: ${Buffer.byteLength(body)}\r\ncontent-length: ${Buffer.byteLength(body) + 1}\r\n`;
      break;
    case 2:
      framing = 'transfer-encoding: chunked\r\n';
      body = `zz\r\n${body}\r\n0\r\n\r\n`;
      break;
    case 3:
      headers[pick(r, ['x bad', 'x\u0001', ''])] = 'v';
      break;
    case 4:
      headers['x-long'] = 'v'.repeat(int(r, 20_000));
      break;
    default:
      break;
  }
  const version = pick(r, ['HTTP/1.1', 'HTTP/1.1', 'HTTP/1.0', 'HTTP/2.0', 'HTTP/1.1 x']);
  const head = `${c.method} ${c.url} ${version}\r\n${Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}`)
    .join('\r\n')}\r\n${framing}\r\n`;
  return head + body;
}

function assertAnswer(status: number, body: string, what: string): void {
  assert.ok(
    Number.isInteger(status) && status >= 200 && status < 500,
    `${what}: status ${status}: ${body.slice(0, 300)}`,
  );
  if (status >= 400 && status !== 405 && body.trim().startsWith('{')) {
    const parsed = JSON.parse(body) as { error?: { message?: unknown; type?: unknown } };
    assert.equal(typeof parsed.error?.message, 'string', `${what}: not an OpenAI error body: ${body.slice(0, 300)}`);
  }
}

describe(`fuzz (seed ${SEED})`, { timeout: 180_000 }, () => {
  let fx: AppFixture & { port: number };

  before(async () => {
    fx = await listenApp({ edge: { apiKeys: [KEY] } });
    fx.backend.onSubmit = (s) => s.stream.pushAll([9707, 11, 0], 'stop');
  });
  after(() => fx.app.close());

  test(`${INJECT_CASES} mutated bodies and header sets through inject: never a 5xx, never a hang`, async () => {
    const r = prng(SEED);
    const statuses = new Map<number, number>();
    let unsendable = 0;
    for (let i = 0; i < INJECT_CASES; i++) {
      const c = makeCase(r);
      const what = `inject case ${i} (seed ${SEED}) ${c.method} ${c.url} ${c.payload.slice(0, 120)}`;
      let res;
      try {
        res = await hangGuard(
          fx.app.inject({ method: c.method as 'POST', url: c.url, headers: c.headers, payload: c.payload }),
          10_000,
          what,
        );
      } catch (err) {
        // light-my-request refuses header values Node's HTTP client would refuse too (e.g. invalid characters).
        if (err instanceof TypeError && /header/i.test(err.message)) {
          unsendable++;
          continue;
        }
        throw err;
      }
      statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
      assertAnswer(res.statusCode, res.body, what);
      if (res.statusCode === 200 && res.headers['content-type']?.toString().startsWith('text/event-stream')) {
        // Chat and completions streams end with [DONE]; a Responses-API stream with its terminal event instead.
        const ended = c.url.startsWith('/v1/responses')
          ? /event: response\.(completed|incomplete|failed)\ndata: [^\n]*\n\n$/.test(res.body)
          : res.body.endsWith('data: [DONE]\n\n');
        assert.ok(ended, `${what}: stream without its terminal record`);
      }
    }
    process.stdout.write(
      `# fuzz inject: ${INJECT_CASES} cases, statuses ${JSON.stringify(Object.fromEntries([...statuses].sort((a, b) => a[0] - b[0])))}, unsendable ${unsendable}\n`,
    );
    assert.ok((statuses.get(200) ?? 0) > INJECT_CASES / 20, 'a fair share of the cases is served, not all refused');
    assert.ok(unsendable < INJECT_CASES / 10);
  });

  test(`${RAW_CASES} byte-level mutated requests over raw sockets: never a 5xx, every connection answered and closed`, async () => {
    const r = prng(SEED + 1);
    const statuses = new Map<number, number>();
    for (let i = 0; i < RAW_CASES; i++) {
      const c = makeCase(r);
      const text = rawRequest(r, c);
      const what = `raw case ${i} (seed ${SEED + 1}) ${JSON.stringify(text.slice(0, 160))}`;
      const res = await rawExchange(fx.port, text, what, 10_000);
      // A connection closed without any answer is fine only when the server refused to parse a framing it cannot
      // trust; anything that got an answer must be a non-5xx.
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      if (Number.isNaN(res.status)) continue;
      assertAnswer(res.status, res.body.replace(/^[0-9a-f]+\r\n/, ''), what);
    }
    process.stdout.write(
      `# fuzz raw: ${RAW_CASES} cases, statuses ${JSON.stringify(Object.fromEntries([...statuses].sort((a, b) => a[0] - b[0])))}\n`,
    );
    assert.ok((statuses.get(NaN) ?? 0) < RAW_CASES / 10, 'almost every connection got an answer');
  });

  test('afterwards: every engine stream finished or was cancelled, and the app still serves', async () => {
    for (const s of fx.backend.submissions) {
      assert.ok(s.stream.isDone, `stream ${s.request.requestId} left open`);
    }
    const res = await fetch(`http://127.0.0.1:${fx.port}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3 }),
    });
    assert.equal(res.status, 200);
  });
});
