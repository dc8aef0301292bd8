/**
 * Stop strings (gateway.md 6) and n > 1 fan-out (gateway.md 10) through the routes over a fake backend: stop text
 * never leaks (streaming or not), the engine stream is cancelled (ABORT) on a match, held-back text is flushed,
 * include_stop_str_in_output; n sub-requests with ids `<id>-<i>` and seeds s + i, n choices with their own indexes
 * and finish reasons, summed usage, one error ends the response and aborts the others, a disconnect aborts all.
 */
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { before, describe, test } from 'node:test';
import { EngineClientError } from '../../src/engine-client/errors.js';
import type { Submission } from './fake-backend.js';
import { choicesOf, parseSse, streamedText, useApp } from './helpers.js';

const GUARD = { timeout: 10_000 };
const REPLY = 'Step one. ### Step two 停止 end 🎉 tail.';

describe('stop strings and n > 1 over the routes', () => {
  const fx = useApp();
  /** One id per output. */
  let replyIds: number[];

  before(async () => {
    replyIds = fx.tokenizer.encode(REPLY, { addSpecialTokens: false });
  });

  /** Script: every reply token as its own non-terminal output, then (optionally) a terminal `stop`. */
  const script = (terminal: boolean) => (s: Submission) => {
    for (const id of replyIds) s.stream.push([id]);
    if (terminal) s.stream.push([], 'length');
  };
  const post = (url: string, body: Record<string, unknown>) => fx.app.inject({ method: 'POST', url, payload: body });
  const chat = (body: Record<string, unknown>) =>
    post('/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], ...body });

  test(
    'a multi-token stop string ends the choice with stop, cancels the engine stream and never leaks',
    GUARD,
    async () => {
      fx.backend.onSubmit = script(false); // the engine never finishes: only the gateway's match can end the request
      for (const stream of [false, true]) {
        for (const stop of ['###', ['nothing', '###'], ['停止']]) {
          const res = await chat({ stop, stream });
          assert.equal(res.statusCode, 200, res.body);
          const sub = fx.backend.submissions.at(-1)!;
          assert.equal(sub.stream.isCancelled, true, 'the engine request is aborted on a match');
          const expected = REPLY.slice(0, REPLY.indexOf(Array.isArray(stop) ? stop.at(-1)! : stop));
          if (!stream) {
            const body = res.json();
            assert.equal(body.choices[0].message.content, expected);
            assert.equal(body.choices[0].finish_reason, 'stop');
            assert.ok(body.usage.completion_tokens > 0 && body.usage.completion_tokens <= replyIds.length);
            continue;
          }
          const { events, doneCount } = parseSse(res.body);
          assert.equal(doneCount, 1);
          assert.equal(streamedText(events), expected);
          for (const ev of events) {
            const c = choicesOf(ev)[0]!;
            const text = (c.delta as { content?: string }).content ?? '';
            const first = (Array.isArray(stop) ? stop.at(-1)! : stop)[0]!;
            assert.ok(!text.includes(first), `chunk leaked stop text: ${JSON.stringify(text)}`);
          }
          assert.equal(choicesOf(events.at(-1)!)[0]!.finish_reason, 'stop');
        }
      }
    },
  );

  test(
    'completions: include_stop_str_in_output keeps the stop string; an unmatched prefix is flushed',
    GUARD,
    async () => {
      fx.backend.onSubmit = script(false);
      for (const stream of [false, true]) {
        const res = await post('/v1/completions', {
          prompt: 'x',
          stop: '###',
          include_stop_str_in_output: true,
          stream,
        });
        const text = stream ? streamedText(parseSse(res.body).events) : res.json().choices[0].text;
        assert.equal(text, REPLY.slice(0, REPLY.indexOf('###') + 3));
      }
      fx.backend.onSubmit = script(true);
      for (const stream of [false, true]) {
        // 'tail.' is held back as a prefix of 'tail.!' until the engine finishes, then flushed.
        const res = await post('/v1/completions', { prompt: 'x', stop: ['tail.!'], stream });
        if (stream) {
          const { events } = parseSse(res.body);
          assert.equal(streamedText(events), REPLY);
          const last = choicesOf(events.at(-1)!)[0]!;
          assert.equal(last.finish_reason, 'length');
          assert.equal(last.text, 'tail.', 'the held-back text arrives with the terminal chunk');
        } else {
          assert.equal(res.json().choices[0].text, REPLY);
          assert.equal(res.json().choices[0].finish_reason, 'length');
        }
      }
    },
  );

  test(
    'a single-token stop string is also sent as a stop token id; its text still goes through the matcher',
    GUARD,
    async () => {
      const words = fx.tokenizer.encode('Alpha beta gamma', { addSpecialTokens: false });
      const stopId = words[1]!;
      const stopText = fx.tokenizer.decode([stopId]);
      assert.equal(
        fx.tokenizer.encode(stopText, { addSpecialTokens: false }).length,
        1,
        'the test needs a one-token stop string',
      );
      // The engine stops on the converted id and includes it in its output (gateway.md 6).
      fx.backend.onSubmit = (s) => s.stream.pushAll(words.slice(0, 2), 'stop');
      for (const include of [false, true]) {
        const res = await post('/v1/completions', {
          prompt: 'x',
          stop: [stopText, 'zq never-ever xyz'],
          stop_token_ids: [5],
          include_stop_str_in_output: include,
        });
        assert.equal(res.statusCode, 200, res.body);
        assert.deepEqual(fx.backend.submissions.at(-1)!.request.sampling.stopTokenIds, [5, stopId]);
        const c = res.json().choices[0];
        assert.equal(c.text, fx.tokenizer.decode([words[0]!]) + (include ? stopText : ''));
        assert.equal(c.finish_reason, 'stop');
      }
      // A multi-token stop string is not converted.
      await post('/v1/completions', { prompt: 'x', stop: ['Alpha beta gamma'] });
      assert.deepEqual(fx.backend.submissions.at(-1)!.request.sampling.stopTokenIds, []);
    },
  );

  test('bad stop values → 400 naming stop', async () => {
    for (const stop of ['', ['ok', ''], [1], { a: 1 }]) {
      const res = await chat({ stop });
      assert.equal(res.statusCode, 400, JSON.stringify(stop));
      assert.match(res.json().error.param, /^stop/);
    }
    assert.equal((await chat({ include_stop_str_in_output: 'yes' })).statusCode, 400);
  });

  test(
    'n = 3 non-streaming: sub-request ids and seeds, n choices with their own finish reasons, summed usage',
    GUARD,
    async () => {
      const lens = [2, 3, 4];
      fx.backend.onSubmit = (s) => {
        const i = Number(s.request.requestId.split('-').at(-1));
        s.stream.pushAll(replyIds.slice(0, lens[i]!), i === 1 ? 'length' : 'stop');
      };
      const before = fx.backend.submissions.length;
      const res = await chat({ n: 3, seed: 7, ignore_eos: true });
      assert.equal(res.statusCode, 200, res.body);
      const body = res.json();
      const subs = fx.backend.submissions.slice(before);
      assert.deepEqual(
        subs.map((s) => s.request.requestId),
        [0, 1, 2].map((i) => `${body.id}-${i}`),
      );
      assert.deepEqual(
        subs.map((s) => s.request.sampling.seed),
        [7, 8, 9],
      );
      assert.deepEqual(
        body.choices.map((c: { index: number }) => c.index),
        [0, 1, 2],
      );
      assert.deepEqual(
        body.choices.map((c: { finish_reason: string }) => c.finish_reason),
        ['stop', 'length', 'stop'],
      );
      body.choices.forEach((c: { message: { content: string } }, i: number) => {
        assert.equal(c.message.content, fx.tokenizer.decode(replyIds.slice(0, lens[i]!)));
      });
      assert.equal(body.usage.prompt_tokens, subs[0]!.request.promptTokenIds.length);
      assert.equal(body.usage.completion_tokens, 9);
      assert.equal(body.usage.total_tokens, body.usage.prompt_tokens + 9);
      // Without a seed the sub-requests carry none.
      await chat({ n: 2 });
      assert.deepEqual(
        fx.backend.submissions.slice(-2).map((s) => s.request.sampling.seed),
        [null, null],
      );
    },
  );

  test('n = 2 streaming: each index gets an opening and its own terminal chunk; one usage chunk', GUARD, async () => {
    fx.backend.onSubmit = (s) => {
      const i = Number(s.request.requestId.split('-').at(-1));
      s.stream.pushAll(replyIds.slice(0, 3 + i), 'stop');
    };
    const res = await chat({ n: 2, stream: true, stream_options: { include_usage: true } });
    const { events, doneCount } = parseSse(res.body);
    assert.equal(doneCount, 1);
    const usage = events.at(-1)!;
    assert.deepEqual(usage.choices, []);
    assert.equal((usage.usage as { completion_tokens: number }).completion_tokens, 7);
    for (const index of [0, 1]) {
      const mine = events
        .slice(0, -1)
        .map((e) => choicesOf(e)[0]!)
        .filter((c) => c.index === index);
      assert.deepEqual(mine[0]!.delta, { role: 'assistant', content: '' });
      const terminal = mine.filter((c) => c.finish_reason !== null);
      assert.equal(terminal.length, 1, `index ${index} has exactly one terminal chunk`);
      assert.equal(terminal[0]!.finish_reason, 'stop');
      assert.equal(mine.at(-1), terminal[0]);
      const text = mine.map((c) => (c.delta as { content?: string }).content ?? '').join('');
      assert.equal(text, fx.tokenizer.decode(replyIds.slice(0, 3 + index)));
    }
  });

  test('n: one failing sub-request ends the response with an error and aborts the others', GUARD, async () => {
    fx.backend.onSubmit = (s) => {
      if (s.request.requestId.endsWith('-1')) s.stream.fail(new EngineClientError('engine-dead', 'rank 1 died', {}));
      else s.stream.push([replyIds[0]!]); // never finishes
    };
    const before = fx.backend.submissions.length;
    const res = await chat({ n: 3 });
    assert.equal(res.statusCode, 503, res.body);
    const subs = fx.backend.submissions.slice(before);
    assert.equal(subs.length, 3);
    for (const i of [0, 2]) await subs[i]!.stream.cancelled;
    const streamed = await chat({ n: 3, stream: true });
    const { events, doneCount } = parseSse(streamed.body);
    assert.equal(doneCount, 1);
    assert.ok('error' in events.at(-1)!, 'the stream ends with an error event');
    for (const s of fx.backend.submissions.slice(-3)) if (!s.request.requestId.endsWith('-1')) await s.stream.cancelled;
  });

  test('n: a failed submit cancels the sub-requests already submitted', GUARD, async () => {
    fx.backend.onSubmit = null;
    let calls = 0;
    const original = fx.backend.submit.bind(fx.backend);
    fx.backend.submit = async (r, o) => {
      if (++calls === 2) throw new EngineClientError('engine-dead', 'no ranks', {});
      return original(r, o);
    };
    try {
      const before = fx.backend.submissions.length;
      const res = await chat({ n: 3 });
      assert.equal(res.statusCode, 503);
      const subs = fx.backend.submissions.slice(before);
      assert.equal(subs.length, 2);
      for (const s of subs) assert.equal(s.stream.isCancelled, true);
    } finally {
      fx.backend.submit = original;
    }
  });

  test('n out of range → 400 naming n', async () => {
    for (const n of [0, -1, 129]) {
      const res = await chat({ n });
      assert.equal(res.statusCode, 400);
      assert.equal(res.json().error.param, 'n');
    }
  });

  test('n = 4 streaming: a client disconnect aborts every sub-request', GUARD, async () => {
    await fx.app.listen({ port: 0, host: '127.0.0.1' });
    const port = (fx.app.server.address() as AddressInfo).port;
    const before = fx.backend.submissions.length;
    fx.backend.onSubmit = (s) => s.stream.push([replyIds[0]!]);
    const payload = JSON.stringify({ prompt: 'x', n: 4, stream: true });
    const req = httpRequest({
      host: '127.0.0.1',
      port,
      path: '/v1/completions',
      method: 'POST',
      agent: false,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
    });
    req.on('error', () => {});
    const gotData = new Promise<void>((resolve) => req.on('response', (res) => res.once('data', () => resolve())));
    req.end(payload);
    await gotData;
    req.destroy();
    const subs = fx.backend.submissions.slice(before);
    assert.equal(subs.length, 4);
    await Promise.all(subs.map((s) => s.stream.cancelled));
    fx.backend.onSubmit = null;
  });
});
