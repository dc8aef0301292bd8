/**
 * The HTTP side of the engine output contract (issue 26 part 4) over a fake backend:
 * - the engine client's `engine-fault` (a token id outside the vocabulary) is a 502 naming the rank, code
 *   `engine_fault`, never a 500; streamed, the stream ends with an error event carrying it;
 * - a backend that does not check token ids (the detokenizer meets the bad id): still a 502 naming the rank, and the
 *   engine stream is cancelled (ABORT) when the engine had not ended it; a bad ranked-candidate id likewise;
 * - the contract's counters reach /metrics: `model_gateway_rank_engine_errors_total{kind}`,
 *   `model_gateway_unknown_outputs_total`.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { FakeBackend, rankState, type Submission } from './fake-backend.js';
import { MODEL_ID, WORKER, makeApp, parseSse } from './helpers.js';

const USER = [{ role: 'user', content: 'Hi' }];
/** Qwen3's vocabulary ends at 151668. */
const OUT_OF_VOCABULARY = 151_669;

describe('engine output that breaks the contract', () => {
  let app: FastifyInstance;
  let backend: FakeBackend;
  let script: (s: Submission) => void = () => {};

  before(async () => {
    // A vLLM group: top logprobs (ranked candidates) are vLLM's.
    backend = new FakeBackend();
    ({ app } = await makeApp({ groups: [{ worker: WORKER, name: 'vllm-0', engine: 'vllm', backend }] }));
    backend.onSubmit = (s) => script(s);
  });
  after(() => app.close());

  const post = (url: string, payload: unknown) =>
    app.inject({ method: 'POST', url, payload: payload as string, headers: { 'content-type': 'application/json' } });

  /** The non-streamed answer must be a 502 engine_fault naming DP rank `rank`; the streamed one must end in that error. */
  async function assertEngineFault(
    url: string,
    body: Record<string, unknown>,
    rank: number,
    message: RegExp,
  ): Promise<void> {
    const plain = await post(url, body);
    assert.equal(plain.statusCode, 502, plain.body);
    const error = plain.json().error;
    assert.equal(error.code, 'engine_fault');
    assert.equal(error.type, 'server_error');
    assert.match(error.message, new RegExp(`DP rank ${rank}`));
    assert.match(error.message, message);
    assert.doesNotMatch(error.message, /internal error/);
    const streamed = await post(url, { ...body, stream: true });
    assert.equal(streamed.statusCode, 200);
    const { events, doneCount } = parseSse(streamed.body);
    assert.equal(doneCount, 1);
    const last = events.at(-1) as { error?: { message: string; code: string; type: string } };
    assert.ok(last.error, 'the stream ends with an error event');
    assert.equal(last.error.code, 'engine_fault');
    assert.match(last.error.message, new RegExp(`DP rank ${rank}`));
    assert.match(last.error.message, message);
  }

  test("the engine client's engine-fault → 502 naming the rank (plain and streamed)", async () => {
    script = (s) => {
      s.stream.push([9707]);
      s.stream.fail(
        new EngineClientError(
          'engine-fault',
          `DP rank ${s.stream.engineIndex} sent token id ${OUT_OF_VOCABULARY} for request ${s.request.requestId}, which is not a token id`,
          { dpRank: 1 },
        ),
      );
    };
    await assertEngineFault('/v1/chat/completions', { messages: USER }, 0, /sent token id 151669/);
    await assertEngineFault('/v1/completions', { prompt: 'x' }, 0, /sent token id 151669/);
  });

  test('a bad token id the detokenizer meets (a backend that does not check) → 502 naming the rank; the engine stream is cancelled', async () => {
    const streams: Submission['stream'][] = [];
    script = (s) => {
      streams.push(s.stream);
      s.stream.push([9707]);
      s.stream.push([11, OUT_OF_VOCABULARY]);
    };
    await assertEngineFault(
      '/v1/chat/completions',
      { messages: USER },
      0,
      /token id 151669 at index 1 is not in the vocabulary/,
    );
    assert.equal(streams.length, 2);
    for (const s of streams) assert.ok(s.isCancelled, 'the unfinished engine request is aborted');
    // Terminal: nothing left to abort.
    streams.length = 0;
    script = (s) => {
      streams.push(s.stream);
      s.stream.push([OUT_OF_VOCABULARY], 'stop');
    };
    await assertEngineFault('/v1/completions', { prompt: 'x' }, 0, /token id 151669/);
    for (const s of streams) assert.ok(!s.isCancelled);
  });

  test('a ranked candidate outside the vocabulary → 502 naming the rank, not a 500', async () => {
    script = (s) =>
      s.stream.push(
        [9707],
        'stop',
        [-0.1],
        [
          [
            { id: 9707, logprob: -0.1 },
            { id: OUT_OF_VOCABULARY, logprob: -2 },
          ],
        ],
      );
    const res = await post('/v1/chat/completions', { messages: USER, logprobs: true, top_logprobs: 2 });
    assert.equal(res.statusCode, 502, res.body);
    assert.match(res.json().error.message, /DP rank 0 .*token id 151669/);
  });
});

test('/metrics: the rank engine-error counts by kind and the unknown-output count', async () => {
  const backend = new FakeBackend({ ranks: [0, 1] });
  backend.rankStatesValue = [
    rankState(0, { engineErrors: { 'max-tokens-overrun': 3, 'invalid-token-id': 1 } }),
    rankState(1, { engineErrors: {} }),
  ];
  backend.stats.unknownOutputs = 7;
  const { app } = await makeApp({ backend });
  try {
    const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    const lines = text.split('\n');
    const w = `model="${MODEL_ID}",group="tokenspeed-0"`;
    for (const line of [
      `model_gateway_rank_engine_errors_total{${w},dp_rank="0",kind="max-tokens-overrun"} 3`,
      `model_gateway_rank_engine_errors_total{${w},dp_rank="0",kind="invalid-token-id"} 1`,
      `model_gateway_unknown_outputs_total{${w}} 7`,
    ]) {
      assert.ok(lines.includes(line), `missing line: ${line}\n${text}`);
    }
    assert.ok(
      !text.includes(`model_gateway_rank_engine_errors_total{${w},dp_rank="1"`),
      'no series for a rank without errors',
    );
  } finally {
    await app.close();
  }
});
