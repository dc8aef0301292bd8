/**
 * Input limits, timeouts, the concurrency cap and error hygiene over real HTTP/1.1 sockets (issue #10 parts 3 and 4;
 * src/server/input-limits.ts, concurrency.ts, edge-options.ts, errors.ts `quoteValue`): deep nesting and oversized
 * lists are 400s naming the parameter (never 500), a body that trickles in gets 408 and a closed connection while a
 * long stream is never cut by that bound, the cap answers 429 with Retry-After, rejected values are quoted at most
 * 100 characters, expected errors log one line without a stack, and prompt text never reaches info-level logs.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { EngineClientError } from '../../src/engine-client/errors.js';
import {
  JsonContainerCounter,
  MAX_JSON_CONTAINERS,
  MAX_JSON_DEPTH,
  MAX_STOP_CHARS,
  MAX_STOP_STRINGS,
  MAX_TOOLS,
  findTooDeep,
  readBodyText,
} from '../../src/server/input-limits.js';
import { Readable } from 'node:stream';
import { quoteValue } from '../../src/server/errors.js';
import { hangGuard } from '../helpers/async.js';
import { captureLogs, type LogRecord } from '../helpers/logs.js';
import type { Submission } from './fake-backend.js';
import { listenApp, parseSse, rawExchange, type AppFixture } from './helpers.js';

const USER = [{ role: 'user', content: 'Hi' }];

/** POST `body` (a JSON text or a value) to `path` on `port` over fetch; resolves with status and parsed body. */
async function post(port: number, path: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return {
    status: res.status,
    headers: res.headers,
    text,
    json: () =>
      JSON.parse(text) as { error: { message: string; param: string | null; code: string | null; type: string } },
  };
}

describe('input limits and error hygiene', () => {
  let fx: AppFixture & { port: number };
  let records: LogRecord[];

  before(async () => {
    const logs = captureLogs('debug');
    records = logs.records;
    fx = await listenApp({ logger: logs.logger });
    fx.backend.onSubmit = (s) => s.stream.pushAll([9707, 0], 'stop');
  });
  after(() => fx.app.close());

  test('5 000 levels of nesting in any parameter → 400 naming it, never 500', async () => {
    const deep = '['.repeat(5000) + ']'.repeat(5000);
    const cases: Array<[string, string, string]> = [
      [
        '/v1/chat/completions',
        `{"messages":[{"role":"user","content":"hi"}],"response_format":${deep}}`,
        'response_format',
      ],
      [
        '/v1/chat/completions',
        `{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"a":${deep}}}`,
        'chat_template_kwargs',
      ],
      [
        '/v1/chat/completions',
        `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"a":${deep}}}}]}`,
        'tools',
      ],
      ['/v1/completions', `{"prompt":"x","logprobs":${deep}}`, 'logprobs'],
      ['/v1/completions', `{"prompt":${deep}}`, 'prompt'],
      ['/v1/completions', `{"prompt":"x","unknown_field":${deep}}`, 'unknown_field'],
      ['/tokenize', `{"prompt":"x","chat_template_kwargs":${deep}}`, 'chat_template_kwargs'],
    ];
    for (const [path, body, param] of cases) {
      const res = await post(fx.port, path, body);
      assert.equal(res.status, 400, `${path} ${param}: ${res.text.slice(0, 200)}`);
      assert.equal(res.json().error.param, param);
      assert.equal(res.json().error.code, 'nesting_too_deep');
      assert.match(res.json().error.message, new RegExp(`deeper than ${MAX_JSON_DEPTH} levels`));
    }
    const top = await post(fx.port, '/v1/completions', deep);
    assert.equal(top.status, 400);
    assert.equal(top.json().error.param, null);
    // Exactly at the limit is fine (the body object is level 1).
    const atLimit = `{"prompt":"x","chat_template_kwargs":${'{"a":'.repeat(MAX_JSON_DEPTH - 1)}1${'}'.repeat(MAX_JSON_DEPTH - 1)}}`;
    assert.equal(findTooDeep(JSON.parse(atLimit), MAX_JSON_DEPTH), null);
    assert.equal((await post(fx.port, '/tokenize', atLimit)).status, 200);
    assert.deepEqual(findTooDeep(JSON.parse(atLimit.replace('"x"', '[[["x"]]]')), MAX_JSON_DEPTH), null);
    const over = `{"prompt":"x","chat_template_kwargs":${'{"a":'.repeat(MAX_JSON_DEPTH)}1${'}'.repeat(MAX_JSON_DEPTH)}}`;
    assert.deepEqual(findTooDeep(JSON.parse(over), MAX_JSON_DEPTH), { param: 'chat_template_kwargs' });
    assert.equal((await post(fx.port, '/tokenize', over)).status, 400);
  });

  test('lists whose cost grows with their size are capped with a 400 naming them', async () => {
    const tool = { type: 'function', function: { name: 'f' } };
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ stop: Array.from({ length: MAX_STOP_STRINGS + 1 }, (_, i) => `s${i}`) }, 'stop'],
      [{ stop: 'x'.repeat(MAX_STOP_CHARS + 1) }, 'stop'],
      [{ stop: ['ok', 'y'.repeat(MAX_STOP_CHARS + 1)] }, 'stop'],
      [{ stop_token_ids: Array.from({ length: 1025 }, (_, i) => i) }, 'stop_token_ids'],
      [{ logit_bias: Object.fromEntries(Array.from({ length: 1025 }, (_, i) => [String(i), 1])) }, 'logit_bias'],
      [{ tools: Array.from({ length: MAX_TOOLS + 1 }, () => tool) }, 'tools'],
    ];
    for (const [extra, param] of cases) {
      const res = await post(fx.port, '/v1/chat/completions', { messages: USER, ...extra });
      assert.equal(res.status, 400, `${param}: ${res.text.slice(0, 300)}`);
      assert.equal(res.json().error.param, param);
      assert.match(
        res.json().error.message,
        /(has more than \d+ entries|is longer than \d+ characters) \(the gateway's limit\)/,
      );
    }
    const fits = await post(fx.port, '/v1/chat/completions', {
      messages: USER,
      stop: Array.from({ length: MAX_STOP_STRINGS }, (_, i) => `s${i}`),
      tools: Array.from({ length: MAX_TOOLS }, () => tool),
    });
    assert.equal(fits.status, 200, fits.text.slice(0, 300));
  });

  test('a 7 MB rejected value is quoted with at most 100 characters, in the body and in the log', async () => {
    const secret = `SECRET-${'z'.repeat(7 * 1024 * 1024)}`;
    records.length = 0;
    for (const [path, body, param] of [
      ['/v1/chat/completions', { messages: USER, reasoning_effort: secret }, 'reasoning_effort'],
      ['/v1/chat/completions', { messages: USER, response_format: { type: secret } }, 'response_format.type'],
      ['/v1/chat/completions', { messages: USER, tool_choice: secret }, 'tool_choice'],
      ['/v1/completions', { prompt: 'x', logprobs: secret }, 'logprobs'],
      ['/v1/completions', { prompt: 'x', suffix: secret }, 'suffix'],
    ] as const) {
      const res = await post(fx.port, path, body);
      assert.equal(res.status, 400);
      assert.equal(res.json().error.param, param);
      assert.ok(res.text.length < 2000, `${param}: the body is ${res.text.length} bytes`);
      assert.match(res.json().error.message, /… \(\d+ bytes\)/);
    }
    const header = await post(
      fx.port,
      '/v1/completions',
      { prompt: 'x' },
      { 'x-data-parallel-rank': 'r'.repeat(10_000) },
    );
    assert.equal(header.status, 400);
    assert.ok(header.text.length < 1000);
    const logged = records.map((r) => JSON.stringify(r));
    assert.ok(
      logged.every((line) => line.length < 2000),
      'no long log line',
    );
    assert.ok(
      !logged.some((line) =>
        line.includes(
          'zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz',
        ),
      ),
    );
    assert.equal(quoteValue('short'), '"short"');
    assert.equal(quoteValue('x'.repeat(200)), `"${'x'.repeat(99)}… (202 bytes)`);
  });

  test('expected errors log one line without a stack; prompt and completion text never at info or above', async () => {
    records.length = 0;
    const marker = 'PROMPT-TEXT-MARKER';
    const bad = await post(fx.port, '/v1/chat/completions', {
      messages: [{ role: 'user', content: [{ type: marker, text: marker }] }],
    });
    assert.equal(bad.status, 400);
    assert.equal(bad.json().error.param, 'messages[0].content[0].type');
    const okRes = await post(fx.port, '/v1/chat/completions', {
      messages: [{ role: 'user', content: marker }],
      stream: true,
    });
    assert.equal(parseSse(okRes.text).doneCount, 1);
    fx.backend.submitError = new EngineClientError('engine-dead', 'ENGINE_CORE_DEAD received');
    try {
      assert.equal((await post(fx.port, '/v1/completions', { prompt: marker })).status, 503);
    } finally {
      fx.backend.submitError = null;
    }
    const atInfo = records.filter((r) => r.level >= 30);
    assert.ok(atInfo.length >= 2, JSON.stringify(records));
    for (const r of atInfo) {
      const line = JSON.stringify(r);
      assert.ok(!line.includes(marker), `request text at level ${r.level}: ${line}`);
      assert.ok(!('err' in r) && !line.includes('    at '), `a stack at level ${r.level}: ${line}`);
    }
    const refused = atInfo.find((r) => r.status === 400);
    assert.equal(refused?.level, 30);
    assert.equal(refused?.param, 'messages[0].content[0].type');
    const dead = atInfo.find((r) => r.status === 503);
    assert.equal(dead?.level, 40, 'a 503 is one warn line');
    assert.equal(atInfo.filter((r) => r.status === 503).length, 1);
  });
});

describe('request receive timeout and the concurrency cap', () => {
  let fx: AppFixture & { port: number };
  let held: Submission[] = [];

  before(async () => {
    fx = await listenApp({ edge: { requestTimeoutMs: 400, maxConcurrentRequests: 2 } });
  });
  after(() => fx.app.close());

  test('a body trickling in one byte at a time gets 408 and its connection closed', async () => {
    const payload = JSON.stringify({ prompt: 'x' });
    const res = await hangGuard(
      new Promise<{ head: string; closed: boolean }>((resolve) => {
        const socket = connect(fx.port, '127.0.0.1', () => {
          socket.write(
            `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${payload.length}\r\n\r\n`,
          );
          let i = 0;
          const timer = setInterval(() => {
            if (i < payload.length && !socket.destroyed) socket.write(payload[i++]!);
          }, 100);
          let got = '';
          socket.on('data', (c: Buffer) => (got += c.toString('utf8')));
          socket.on('error', () => {});
          socket.on('close', () => {
            clearInterval(timer);
            resolve({ head: got, closed: true });
          });
        });
      }),
      10_000,
      'the 408',
    );
    assert.match(res.head, /^HTTP\/1\.1 408 /);
    assert.match(res.head, /"code":"request_timeout"/);
    assert.equal(res.closed, true);
    assert.equal(fx.backend.submissions.length, 0);
  });

  test('a stream that outlives the request timeout is not cut', async () => {
    fx.backend.onSubmit = (s) => {
      let n = 0;
      const timer = setInterval(() => {
        n++;
        if (n < 8) s.stream.push([9707]);
        else {
          clearInterval(timer);
          s.stream.push([0], 'stop');
        }
      }, 100); // about 800 ms, twice the bound
    };
    const res = await post(fx.port, '/v1/completions', { prompt: 'x', stream: true });
    assert.equal(res.status, 200);
    const { events, doneCount } = parseSse(res.text);
    assert.equal(doneCount, 1);
    assert.equal((events.at(-1)!.choices as Array<{ finish_reason: string }>)[0]!.finish_reason, 'stop');
    fx.backend.onSubmit = null;
  });

  test('beyond the cap → 429 with Retry-After and an OpenAI body; a finished request frees its slot', async () => {
    held = [];
    fx.backend.onSubmit = (s) => held.push(s); // the engine answers nothing until released
    const first = [
      post(fx.port, '/v1/completions', { prompt: 'a' }),
      post(fx.port, '/v1/completions', { prompt: 'b', stream: true }),
    ];
    await hangGuard(
      (async () => {
        while (held.length < 2) await new Promise((r) => setTimeout(r, 10));
      })(),
      10_000,
      'two held requests',
    );
    const refused = await post(fx.port, '/v1/chat/completions', { messages: USER });
    assert.equal(refused.status, 429);
    assert.equal(refused.headers.get('retry-after'), '1');
    assert.equal(refused.json().error.code, 'rate_limit_exceeded');
    assert.equal(refused.json().error.type, 'requests');
    assert.match(refused.json().error.message, /at most 2/);
    // Not generation: /tokenize and /v1/models are not capped.
    assert.equal((await post(fx.port, '/tokenize', { prompt: 'x' })).status, 200);
    assert.equal((await fetch(`http://127.0.0.1:${fx.port}/v1/models`)).status, 200);
    for (const s of held) s.stream.pushAll([9707], 'stop');
    for (const r of await Promise.all(first)) assert.equal(r.status, 200);
    fx.backend.onSubmit = (s) => s.stream.pushAll([9707], 'stop');
    assert.equal((await post(fx.port, '/v1/chat/completions', { messages: USER })).status, 200);
    // A client that goes away frees its slot too.
    fx.backend.onSubmit = (s) => held.push(s);
    held = [];
    const raw =
      'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 14\r\n\r\n{"prompt":"x"}';
    const sockets = [connect(fx.port, '127.0.0.1'), connect(fx.port, '127.0.0.1')];
    for (const s of sockets) {
      s.on('error', () => {});
      s.write(raw);
    }
    await hangGuard(
      (async () => {
        while (held.length < 2) await new Promise((r) => setTimeout(r, 10));
      })(),
      10_000,
      'two raw requests',
    );
    assert.equal((await post(fx.port, '/v1/completions', { prompt: 'x' })).status, 429);
    for (const s of sockets) s.destroy();
    await hangGuard(Promise.all(held.map((s) => s.stream.cancelled)), 10_000, 'the cancels');
    fx.backend.onSubmit = (s) => s.stream.pushAll([9707], 'stop');
    assert.equal((await post(fx.port, '/v1/completions', { prompt: 'x' })).status, 200);
  });

  test('a plain raw exchange still works (nothing else changed at the socket level)', async () => {
    const res = await rawExchange(
      fx.port,
      'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
      'GET /health',
    );
    assert.equal(res.status, 200);
  });
});

describe('bodies that arrive in pieces (input-limits.ts readBodyText)', () => {
  let fx: AppFixture & { port: number };
  before(async () => {
    // /tokenize's own limit (1 MiB by default) raised to the app's, whose behaviour is under test here.
    fx = await listenApp({ bodyLimitBytes: 2 * 1024 * 1024, edge: { tokenizeBodyLimitBytes: 2 * 1024 * 1024 } });
  });
  after(() => fx.app.close());

  /** A raw chunked POST of `body` to /tokenize, in HTTP chunks of `size` bytes (multi-byte characters split across them). */
  const chunked = (body: Buffer, size: number) => {
    const parts: Buffer[] = [
      Buffer.from(
        'POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n',
      ),
    ];
    for (let at = 0; at < body.length; at += size) {
      const piece = body.subarray(at, at + size);
      parts.push(Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n'));
    }
    parts.push(Buffer.from('0\r\n\r\n'));
    return rawExchange(fx.port, Buffer.concat(parts), 'chunked /tokenize');
  };

  test('a body of many chunks decodes as one: characters split across chunks, the same tokens', async () => {
    const prompt = '世界 🎉 café — '.repeat(3000);
    // 4099-byte chunks: every multi-byte character has a chance to straddle a boundary.
    const res = await chunked(Buffer.from(JSON.stringify({ prompt })), 4099);
    assert.equal(res.status, 200, res.body.slice(0, 300));
    assert.deepEqual(JSON.parse(res.body).tokens, fx.tokenizer.encode(prompt, { addSpecialTokens: true }));
  });

  test('past the body limit while it arrives (no Content-Length) → 413, and a declared size over it before reading', async () => {
    const big = Buffer.from(JSON.stringify({ prompt: 'x'.repeat(2 * 1024 * 1024) }));
    const res = await chunked(big, 64 * 1024);
    assert.equal(res.status, 413, res.body.slice(0, 300));
    assert.match(JSON.parse(res.body).error.message, /larger than the gateway's limit of 2097152 bytes/);
    const declared = await rawExchange(
      fx.port,
      `POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${3 * 1024 * 1024}\r\nConnection: close\r\n\r\n{}`,
      'declared too large',
    );
    assert.equal(declared.status, 413);
  });
});

test('readBodyText: chunks decoded as one; a body whose client is gone by its end is not decoded (499)', async () => {
  const bytes = Buffer.from(JSON.stringify({ prompt: '世界 🎉 '.repeat(100) }));
  const read = (gone: boolean, contentLength?: string) =>
    new Promise<{ err: (Error & { statusCode?: number }) | null; text?: string }>((resolve) => {
      const chunks = Array.from({ length: Math.ceil(bytes.length / 7) }, (_, i) => bytes.subarray(i * 7, i * 7 + 7));
      readBodyText(
        Readable.from(chunks),
        contentLength ?? String(bytes.length),
        1 << 20,
        () => gone,
        (err, text) => resolve({ err, text }),
      );
    });
  assert.equal((await read(false)).text, bytes.toString('utf8'));
  const gone = await read(true);
  assert.equal(gone.err?.statusCode, 499);
  assert.equal(gone.text, undefined);
  assert.equal((await read(false, String(bytes.length + 1))).err?.statusCode, 400, 'a Content-Length mismatch');
});

test('JsonContainerCounter: objects and arrays outside strings, across chunk boundaries, escapes included', () => {
  const text = JSON.stringify({ a: [{ b: '{[not these]}' }, [1, 2]], c: 'quote \\" { [ inside', d: { e: [] } });
  const bytes = Buffer.from(text);
  for (const size of [1, 2, 3, 7, bytes.length]) {
    const counter = new JsonContainerCounter();
    for (let at = 0; at < bytes.length; at += size) counter.feed(bytes.subarray(at, at + size));
    assert.equal(counter.count, 6, `chunks of ${size}: the body, a, its object, [1, 2], d and e`);
  }
});

test('readBodyText: a body of more than the allowed objects and arrays is refused with 413 as it arrives, never decoded', async () => {
  const body = Buffer.from(
    JSON.stringify({ messages: Array.from({ length: 2000 }, () => ({ role: 'user', content: 'hi' })) }),
  );
  const read = (max: number) =>
    new Promise<{ err: (Error & { statusCode?: number }) | null; text?: string }>((resolve) => {
      const chunks = Array.from({ length: Math.ceil(body.length / 4096) }, (_, i) =>
        body.subarray(i * 4096, i * 4096 + 4096),
      );
      readBodyText(
        Readable.from(chunks),
        String(body.length),
        1 << 20,
        () => false,
        (err, text) => resolve({ err, text }),
        undefined,
        max,
      );
    });
  const refused = await read(1000);
  assert.equal(refused.err?.statusCode, 413);
  assert.match(refused.err!.message, /more than 1000 JSON objects and arrays/);
  assert.equal(refused.text, undefined);
  assert.equal(
    (await read(2002)).text,
    body.toString('utf8'),
    '2002 = the body, its list and 2000 messages: within the limit',
  );
  assert.equal(MAX_JSON_CONTAINERS, 65_536);
});
