/**
 * The access log (issue #13 part 3): one info line per finished generation request, with its id, group, rank,
 * status, token counts, TTFT, duration and finish reason; errors as one warn line; nothing twice.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { test } from 'node:test';
import { pino } from 'pino';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { FakeBackend } from './fake-backend.js';
import { listenApp, makeApp } from './helpers.js';

/** A pino logger that keeps every line as an object. */
function recordingPino(): { logger: pino.Logger; lines: Array<Record<string, unknown>>; raw: string[] } {
  const lines: Array<Record<string, unknown>> = [];
  const raw: string[] = [];
  const logger = pino(
    { level: 'info' },
    {
      write: (line: string) => {
        raw.push(line);
        lines.push(JSON.parse(line) as Record<string, unknown>);
      },
    },
  );
  return { logger, lines, raw };
}

test('one "request finished" line per request: non-streaming, streaming and n > 1', async () => {
  const backend = new FakeBackend({ ranks: [0, 1] });
  backend.onSubmit = (s) => {
    s.stream.cachedTokens = 16;
    s.stream.pushAll([9707, 11, 1879], 'length');
  };
  const { logger, lines, raw } = recordingPino();
  const { app } = await makeApp({ backend, logger });
  try {
    const plain = await app.inject({
      method: 'POST',
      url: '/v1/completions',
      payload: { prompt: 'hello there', max_tokens: 3 },
    });
    assert.equal(plain.statusCode, 200);
    const streamed = await app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { 'x-data-parallel-rank': '1' },
      payload: { messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, stream: true },
    });
    assert.equal(streamed.statusCode, 200);
    const fan = await app.inject({
      method: 'POST',
      url: '/v1/completions',
      payload: { prompt: 'hello there', max_tokens: 3, n: 2 },
    });
    assert.equal(fan.statusCode, 200);

    const finished = lines.filter((l) => l.msg === 'request finished');
    assert.equal(finished.length, 3, JSON.stringify(lines.map((l) => l.msg)));
    const [a, b, c] = finished;
    assert.equal(a!.level, 30, 'info');
    assert.equal(a!.responseId, plain.json().id);
    assert.equal(`cmpl-${String(a!.requestId)}`, plain.json().id, 'without X-Request-Id the log id is the response id');
    assert.equal(a!.endpoint, '/v1/completions');
    assert.equal(a!.group, 'tokenspeed-0');
    assert.equal(a!.rank, 0);
    assert.equal(a!.status, 200);
    assert.equal(a!.promptTokens, 2);
    assert.equal(a!.completionTokens, 3);
    assert.equal(a!.cachedTokens, 16);
    assert.equal(a!.finishReason, 'length');
    assert.equal(typeof a!.ttftMs, 'number');
    assert.ok((a!.durationMs as number) >= (a!.ttftMs as number), 'duration covers TTFT');
    assert.equal(b!.endpoint, '/v1/chat/completions');
    assert.equal(b!.rank, 1, 'the pinned rank');
    assert.equal(b!.stream, true);
    assert.deepEqual(c!.rank, [0, 0]);
    assert.equal(c!.n, 2);
    assert.deepEqual(c!.finishReason, ['length', 'length']);
    assert.equal(c!.completionTokens, 6);
    // No line carries a key twice (JSON.parse keeps the last; the raw text shows both).
    for (const line of raw.filter((r) => r.includes('"request finished"'))) {
      for (const key of Object.keys(JSON.parse(line) as object)) {
        assert.equal(line.split(`"${key}":`).length - 1, 1, `${key} once in ${line}`);
      }
    }
  } finally {
    await app.close();
  }
});

test('a mid-stream engine failure is one warn line; a refused request is one info line from the error handler', async () => {
  const backend = new FakeBackend({ ranks: [0] });
  backend.onSubmit = (s) => {
    s.stream.push([9707]);
    setTimeout(() => s.stream.fail(Object.assign(new Error('engine core dead'), { kind: 'engine-dead' })), 5);
  };
  const { logger, lines } = recordingPino();
  const { app } = await makeApp({ backend, logger });
  try {
    const res = await app.inject({
      method: 'POST',
      url: '/v1/completions',
      payload: { prompt: 'x', max_tokens: 5, stream: true },
    });
    assert.equal(res.statusCode, 200);
    assert.match(res.body, /"error"/);
    const failed = lines.filter((l) => l.msg === 'request failed');
    assert.equal(failed.length, 1);
    assert.equal(failed[0]!.level, 40, 'warn');
    assert.equal(failed[0]!.finishReason, 'error');
    assert.match(String(failed[0]!.error), /^mid-stream \(\d{3}\): .*engine core dead/);
    assert.equal(lines.filter((l) => l.msg === 'request finished').length, 0);

    const bad = await app.inject({ method: 'POST', url: '/v1/completions', payload: { prompt: 'x', top_p: 0 } });
    assert.equal(bad.statusCode, 400);
    const refused = lines.filter((l) => l.status === 400);
    assert.equal(refused.length, 1, 'one line for the refused request');
  } finally {
    await app.close();
  }
});

test('a stream the client leaves mid-way logs 499 with the tokens it had received', { timeout: 30_000 }, async () => {
  const backend = new FakeBackend({ ranks: [0] });
  backend.onSubmit = (s) => s.stream.push([9707, 11]); // two tokens, then the engine keeps the request running
  const { logger, lines } = recordingPino();
  const fx = await listenApp({ backend, logger });
  try {
    const payload = JSON.stringify({ prompt: 'x', max_tokens: 50, stream: true });
    const socket = connect(fx.port, '127.0.0.1');
    socket.on('error', () => {});
    let got = '';
    await new Promise<void>((resolve) => {
      socket.on('data', (c: Buffer) => {
        got += c.toString('utf8');
        if (got.includes('"text":"Hello,"')) resolve(); // both tokens, in the turn's one chunk
      });
      socket.write(
        `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${payload.length}\r\n\r\n${payload}`,
      );
    });
    socket.destroy();
    const deadline = Date.now() + 10_000;
    while (!lines.some((l) => l.msg === 'request finished') && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10));
    const line = lines.find((l) => l.msg === 'request finished');
    assert.ok(line, JSON.stringify(lines.map((l) => l.msg)));
    assert.equal(line.status, 499);
    assert.equal(line.finishReason, 'cancelled');
    assert.equal(line.completionTokens, 2);
  } finally {
    await fx.app.close();
  }
});

test('every line about a request names it: the client X-Request-Id (cut to 256 chars), else the minted id', async () => {
  const backend = new FakeBackend({ ranks: [0] });
  backend.onSubmit = (s) => s.stream.pushAll([9707, 11], 'length');
  const { logger, lines } = recordingPino();
  const { app } = await makeApp({ backend, logger });
  try {
    const res = await app.inject({
      method: 'POST',
      url: '/v1/completions',
      headers: { 'x-request-id': 'client-42' },
      payload: { prompt: 'x', max_tokens: 2 },
    });
    assert.equal(res.statusCode, 200);
    assert.equal(res.headers['x-request-id'], 'client-42');
    const line = lines.find((l) => l.msg === 'request finished')!;
    assert.equal(line.requestId, 'client-42');
    assert.match(String(line.responseId), /^cmpl-[0-9a-f]{32}$/, 'the response id is the gateway’s own');
    // A UTF-8 id (Node holds its bytes one char each) is logged as the text the client sent.
    const utf8 = Buffer.from('idé-日本', 'utf8').toString('latin1');
    await app.inject({ method: 'POST', url: '/v1/completions', headers: { 'x-request-id': utf8 }, payload: {} });
    assert.ok(
      lines.some((l) => l.requestId === 'idé-日本'),
      'the UTF-8 id as text',
    );
    const long = 'x'.repeat(300);
    await app.inject({ method: 'POST', url: '/v1/completions', headers: { 'x-request-id': long }, payload: {} });
    const refused = lines.find((l) => l.msg === 'request refused' && String(l.requestId).startsWith('xxx'))!;
    assert.equal(refused.requestId, `${'x'.repeat(256)}…`);
    // A cut that would split a surrogate pair keeps the pair out whole.
    const emoji = Buffer.from(`${'y'.repeat(255)}😀z`, 'utf8').toString('latin1');
    await app.inject({ method: 'POST', url: '/v1/completions', headers: { 'x-request-id': emoji }, payload: {} });
    const cutEmoji = lines.find((l) => l.msg === 'request refused' && String(l.requestId).startsWith('yyy'))!;
    assert.equal(cutEmoji.requestId, `${'y'.repeat(255)}…`);
  } finally {
    await app.close();
  }
});

test('without a client X-Request-Id a generation request answers it with its response id, when it fails too', async () => {
  const backend = new FakeBackend({ ranks: [0] });
  const { logger, lines } = recordingPino();
  const { app } = await makeApp({ backend, logger });
  const post = (stream: boolean) =>
    app.inject({ method: 'POST', url: '/v1/completions', payload: { prompt: 'x', max_tokens: 2, stream } });
  try {
    // The engine fails the request after it was submitted (buffered and streamed), or refuses the submit.
    backend.onSubmit = (s) => s.stream.fail(new EngineClientError('engine-dead', 'engine core dead'));
    const failed = [await post(false), await post(true)];
    backend.onSubmit = null;
    backend.submitError = new EngineClientError('engine-dead', 'no rank alive');
    const refused = await post(false);
    backend.submitError = null;
    backend.onSubmit = (s) => s.stream.pushAll([9707, 11], 'length');
    const served = await post(false);
    assert.deepEqual(
      [...failed, refused, served].map((r) => r.statusCode),
      [503, 200, 503, 200],
    );
    for (const [i, res] of [...failed, refused, served].entries()) {
      const header = String(res.headers['x-request-id']);
      assert.match(header, /^cmpl-[0-9a-f]{32}$/, `answer ${i}`);
      // Its hex part is the requestId of the request's log lines; a record's line also names the header as responseId.
      const about = lines.filter((l) => `cmpl-${String(l.requestId)}` === header);
      assert.ok(about.length > 0, `answer ${i}: no log line about ${header}`);
      for (const l of about) if (l.responseId !== undefined) assert.equal(l.responseId, header);
    }
    // A request refused before it had a response id (invalid) answers none.
    const invalid = await app.inject({ method: 'POST', url: '/v1/completions', payload: { max_tokens: 'x' } });
    assert.equal(invalid.statusCode, 400);
    assert.equal(invalid.headers['x-request-id'], undefined);
  } finally {
    await app.close();
  }
});

test('404 and 405 are logged at info with method and path, at most 10 lines a second', async () => {
  const { logger, lines } = recordingPino();
  const { app } = await makeApp({ logger });
  try {
    assert.equal((await app.inject({ method: 'GET', url: '/v1/nowhere?q=1' })).statusCode, 404);
    assert.equal((await app.inject({ method: 'GET', url: '/v1/chat/completions' })).statusCode, 405);
    const notFound = lines.find((l) => l.msg === 'no route')!;
    assert.deepEqual(
      [notFound.level, notFound.status, notFound.method, notFound.path],
      [30, 404, 'GET', '/v1/nowhere'],
    );
    assert.equal(typeof notFound.requestId, 'string');
    const notAllowed = lines.find((l) => l.msg === 'method not allowed')!;
    assert.deepEqual([notAllowed.status, notAllowed.path], [405, '/v1/chat/completions']);
    for (let i = 0; i < 30; i++) await app.inject({ method: 'GET', url: `/scan/${i}` });
    const logged = lines.filter((l) => l.msg === 'no route' || l.msg === 'method not allowed').length;
    assert.ok(logged <= 20, `bounded: ${logged} lines for 32 refusals`);
    assert.ok(logged >= 10, `the first ten of a second are written: ${logged}`);
  } finally {
    await app.close();
  }
});
