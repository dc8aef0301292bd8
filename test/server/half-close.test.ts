/**
 * Half-closed clients and the probes that tell them from vanished ones (src/server/disconnect.ts; issue #10 part 7),
 * over raw HTTP/1.1 sockets: a client that shuts its write side after sending its request gets the whole response
 * (streamed or not); a client that sends its request and then closes the socket completely is still detected as gone
 * and its engine request aborted, before the first token, streaming or not (test/server/disconnect.test.ts covers
 * the other phases).
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { hangGuard } from '../helpers/async.js';
import { listenApp, parseSse, type AppFixture } from './helpers.js';

function rawPost(body: unknown): string {
  const payload = JSON.stringify(body);
  return (
    `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`
  );
}

/** Send `text`, shut the write side (FIN), and collect everything until the server closes the connection. */
function sendAndHalfClose(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true }, () => {
      socket.write(text);
      socket.end();
    });
    let got = '';
    socket.on('data', (c: Buffer) => (got += c.toString('utf8')));
    socket.on('error', reject);
    socket.on('close', () => resolve(got));
  });
}

/** Strip interim `100 Continue` responses (the probes) and split the final response into status, head and body. */
function finalResponse(raw: string): { status: number; head: string; body: string; interim: number } {
  let rest = raw;
  let interim = 0;
  while (rest.startsWith('HTTP/1.1 100 Continue\r\n\r\n')) {
    rest = rest.slice('HTTP/1.1 100 Continue\r\n\r\n'.length);
    interim++;
  }
  const split = rest.indexOf('\r\n\r\n');
  return { status: Number(rest.split(' ')[1]), head: rest.slice(0, split), body: rest.slice(split + 4), interim };
}

/** Decode a chunked HTTP/1.1 body. */
function dechunk(body: string): string {
  let out = '';
  let rest = body;
  for (;;) {
    const eol = rest.indexOf('\r\n');
    const size = parseInt(rest.slice(0, eol), 16);
    if (!(size > 0)) return out;
    out += rest.slice(eol + 2, eol + 2 + size);
    rest = rest.slice(eol + 2 + size + 2);
  }
}

describe('half-closed clients', () => {
  let fx: AppFixture & { port: number };

  before(async () => {
    fx = await listenApp();
  });
  after(() => fx.app.close());

  test('non-streaming: the response arrives after the client shut its write side', async () => {
    // The engine answers a little later, so the FIN is processed while the request waits for its tokens.
    fx.backend.onSubmit = (s) => setTimeout(() => s.stream.pushAll([9707, 11, 0], 'stop'), 150);
    const raw = await hangGuard(sendAndHalfClose(fx.port, rawPost({ prompt: 'x' })), 10_000, 'the response');
    const res = finalResponse(raw);
    assert.equal(res.status, 200, raw.slice(0, 300));
    assert.ok(res.interim <= 4, `at most 4 probes, got ${res.interim}`);
    const body = JSON.parse(res.body) as { choices: Array<{ text: string; finish_reason: string }> };
    assert.equal(body.choices[0]!.finish_reason, 'stop');
    assert.equal(fx.backend.submissions.at(-1)!.stream.isCancelled, false, 'no ABORT');
  });

  test('streaming: every chunk and [DONE] arrive after the client shut its write side', async () => {
    fx.backend.onSubmit = (s) => setTimeout(() => s.stream.pushAll([9707, 11, 0], 'stop'), 150);
    const raw = await hangGuard(
      sendAndHalfClose(fx.port, rawPost({ prompt: 'x', stream: true })),
      10_000,
      'the stream',
    );
    const res = finalResponse(raw);
    assert.equal(res.status, 200);
    // The probes of a started stream are SSE comments, which SSE readers skip.
    const events =
      dechunk(res.body)
        .split('\n\n')
        .filter((r) => r !== '' && !r.startsWith(':'))
        .join('\n\n') + '\n\n';
    const { doneCount, events: parsed } = parseSse(events);
    assert.equal(doneCount, 1);
    assert.equal((parsed.at(-1)!.choices as Array<{ finish_reason: string }>)[0]!.finish_reason, 'stop');
    assert.equal(fx.backend.submissions.at(-1)!.stream.isCancelled, false, 'no ABORT');
  });

  test('a client that closes completely after sending is still detected and its request aborted', async () => {
    for (const stream of [false, true]) {
      fx.backend.onSubmit = null; // the engine never answers
      const submitted = fx.backend.nextSubmission();
      const socket = connect(fx.port, '127.0.0.1');
      socket.on('error', () => {});
      socket.write(rawPost({ prompt: 'x', stream }));
      const sub = await hangGuard(submitted, 10_000, 'the submit');
      socket.destroy(); // a FIN, like a half-close; the probe's reset tells them apart
      await hangGuard(sub.stream.cancelled, 10_000, `the ABORT (stream: ${stream})`);
      assert.equal(sub.stream.isCancelled, true);
    }
  });
});
