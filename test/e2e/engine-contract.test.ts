/**
 * End to end over real ZeroMQ, the engine output contract (issue 26 part 4) against simulated TokenSpeed ranks that
 * break it (src/sim/faults.ts): every rank runs each request 100 000 tokens past its max_new_tokens and sends token id
 * 151669 (one past Qwen3's vocabulary) as its 60th token.
 * - max_tokens 40: the client gets exactly 40 tokens (usage, logprobs) with finish `length`, streamed or not; an
 *   ABORT reaches the rank (its own `aborted` count, read through `--stats-dir`); the in-flight sets empty; the rank's
 *   `max-tokens-overrun` count moves.
 * - max_tokens 100: the 60th token fails the request as the engine's fault: HTTP 502 `engine_fault` naming the rank,
 *   or an SSE error event; an ABORT reaches the rank; its `invalid-token-id` count moves.
 * - rows for request ids the gateway never issued, pushed into the group's output socket: counted
 *   (`model_gateway_unknown_outputs_total`), one warn line for two bursts.
 * One gateway for the file, in-process or `serve --workers N` (GATEWAY_TEST_WORKERS; test/helpers/test-gateway.ts):
 * everything is read over HTTP, from the ranks' stats files and from the gateway's log.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { encodeSimBatch } from '../../src/sim/output.js';
import { statsFilePath } from '../../src/sim/main.js';
import { deriveEndpoints } from '../../src/transport/endpoints.js';
import { freshDir, waitFor } from '../helpers/async.js';
import type { LogRecord } from '../helpers/logs.js';
import { inFlightTotal, startTestGateway, type TestGateway } from '../helpers/test-gateway.js';
import { FrameInjector, captureLogs } from './failure-helpers.js';

const MODEL = 'sim-contract';
const TIMEOUT = { timeout: 60_000 };
const OUT_OF_VOCABULARY = 151_669;

let gateway: TestGateway;
let statsDir: string;
let cleanup: () => Promise<void> = async () => {};
const captured = captureLogs('warn');

before(async () => {
  ({ dir: statsDir, cleanup } = await freshDir('mgw-contract-'));
  gateway = await startTestGateway({
    logger: captured.logger,
    modelId: MODEL,
    engine: 'tokenspeed',
    sim: 2,
    // 0.1: a round every ~1 ms, so a request runs for many seconds past its limit unless the ABORT stops it.
    simArgs: [
      '--time-scale',
      '0.1',
      '--log-level',
      'warn',
      '--stats-dir',
      statsDir,
      '--fault-overrun-tokens',
      '100000',
      '--fault-token-id',
      String(OUT_OF_VOCABULARY),
      '--fault-token-at',
      '60',
    ],
  });
});

after(async () => {
  await gateway?.close();
  await cleanup();
});

/** The gateway's warn-and-above log records, in either mode. */
const logs = (): LogRecord[] => (gateway.workers > 1 ? gateway.logs : captured.records);

/** Requests rank `engineIndex` dropped on an ABORT (its stats file, written on SIGUSR2). */
function abortedOnRank(engineIndex: number): number {
  const rank = gateway.simRanks().find((r) => r.engineIndex === engineIndex);
  assert.ok(rank, `sim rank ${engineIndex} is running`);
  process.kill(rank.pid, 'SIGUSR2');
  try {
    return (JSON.parse(readFileSync(statsFilePath(statsDir, engineIndex), 'utf8')) as { aborted: number }).aborted;
  } catch {
    return -1; // not written yet (or being replaced)
  }
}

/** Wait until rank `engineIndex` reports at least `n` ABORTed requests. */
async function waitAborted(engineIndex: number, n: number): Promise<void> {
  await waitFor(() => abortedOnRank(engineIndex) >= n, `${n} ABORT(s) reached sim rank ${engineIndex}`, 20_000);
}

/** `model_gateway_rank_engine_errors_total` of `rank` and `kind`. */
const engineErrors = (rank: number, kind: string): Promise<number> =>
  gateway.metricSum('model_gateway_rank_engine_errors_total', `dp_rank="${rank}",kind="${kind}"`);

interface ChatOutcome {
  status: number;
  /** Non-streamed: the JSON body. Streamed: null. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- a parsed JSON body, read field by field by the assertions
  json: any;
  /** Streamed: every data record but [DONE], parsed. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed JSON records, as `json`
  events: any[];
  done: boolean;
}

/** POST a chat completion pinned to `rank` with logprobs, read to the end. */
async function chat(rank: number, maxTokens: number, stream: boolean): Promise<ChatOutcome> {
  const res = await fetch(`${gateway.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-data-parallel-rank': String(rank) },
    body: JSON.stringify({
      model: MODEL,
      messages: [{ role: 'user', content: 'Tell me a long story.' }],
      max_tokens: maxTokens,
      ignore_eos: true,
      logprobs: true,
      stream,
      ...(stream ? { stream_options: { include_usage: true } } : {}),
    }),
  });
  const text = await res.text();
  if (!stream || !(res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
    return { status: res.status, json: JSON.parse(text), events: [], done: false };
  }
  const data = text
    .split('\n\n')
    .filter((r) => r.startsWith('data: '))
    .map((r) => r.slice(6));
  return {
    status: res.status,
    json: null,
    events: data.filter((d) => d !== '[DONE]').map((d) => JSON.parse(d)),
    done: data.includes('[DONE]'),
  };
}

test(
  'an engine that runs past max_tokens: the client gets exactly max_tokens, finish length; the rest is ABORTed on the rank',
  TIMEOUT,
  async () => {
    const abortedBefore = abortedOnRank(1);
    const plain = await chat(1, 40, false);
    assert.equal(plain.status, 200, JSON.stringify(plain.json));
    const choice = plain.json.choices[0];
    assert.equal(choice.finish_reason, 'length');
    assert.equal(plain.json.usage.completion_tokens, 40);
    assert.equal(choice.logprobs.content.length, 40, 'one logprob per token the client got');

    const streamed = await chat(1, 40, true);
    assert.equal(streamed.status, 200);
    assert.ok(streamed.done, 'the stream ends with [DONE]');
    assert.ok(!streamed.events.some((e) => e.error), 'no error event');
    const choices = streamed.events.flatMap((e) => e.choices ?? []);
    assert.equal(
      choices
        .filter((c) => c.finish_reason !== null)
        .map((c) => c.finish_reason)
        .join(),
      'length',
    );
    assert.equal(
      choices.reduce((n, c) => n + (c.logprobs?.content?.length ?? 0), 0),
      40,
    );
    assert.equal(streamed.events.at(-1).usage.completion_tokens, 40);

    await waitAborted(1, Math.max(0, abortedBefore) + 2);
    assert.equal(await engineErrors(1, 'max-tokens-overrun'), 2);
    assert.equal(await engineErrors(0, 'max-tokens-overrun'), 0);
    await waitFor(async () => (await inFlightTotal(gateway)) === 0, 'in-flight sets empty', 20_000);
    assert.equal(logs().filter((r) => /past max_tokens 40/.test(r.msg)).length, 2, 'one warn line per request');
  },
);

test(
  'a token id outside the vocabulary: 502 engine_fault naming the rank (an error event when streamed), ABORT, counted',
  TIMEOUT,
  async () => {
    const abortedBefore = abortedOnRank(0);
    const plain = await chat(0, 100, false);
    assert.equal(plain.status, 502, JSON.stringify(plain.json));
    assert.equal(plain.json.error.code, 'engine_fault');
    assert.equal(plain.json.error.type, 'server_error');
    assert.match(
      plain.json.error.message,
      /DP rank 0 sent token id 151669 for request \S+, which is not a token id of the gateway's tokenizer/,
    );

    const streamed = await chat(0, 100, true);
    assert.equal(streamed.status, 200);
    assert.ok(streamed.done);
    const last = streamed.events.at(-1);
    assert.equal(last.error?.code, 'engine_fault', JSON.stringify(last));
    assert.match(last.error.message, /DP rank 0 sent token id 151669/);
    const finishes = streamed.events.flatMap((e) => e.choices ?? []).filter((c) => c.finish_reason !== null);
    assert.equal(finishes.length, 0, 'no finish reason before the error');

    await waitAborted(0, Math.max(0, abortedBefore) + 2);
    assert.equal(await engineErrors(0, 'invalid-token-id'), 2);
    await waitFor(async () => (await inFlightTotal(gateway)) === 0, 'in-flight sets empty', 20_000);
  },
);

test('rows for request ids the gateway never issued: counted, logged once for two bursts', TIMEOUT, async () => {
  const [group] = await gateway.groups();
  const injector = FrameInjector.connect(deriveEndpoints(group!.worker).output);
  try {
    const burst = (tag: string) =>
      encodeSimBatch({
        engineIndex: 0,
        rows: Array.from({ length: 10 }, (_, i) => ({
          rid: `rogue-${tag}-${i}`,
          outputIds: [9707],
          finishedReason: '' as const,
          promptTokens: 3,
          completionTokens: 1,
          cachedTokens: 0,
          logprobVals: [],
          logprobIdx: [],
          stopReason: null,
          prefillTokens: null,
        })),
        // kv_total_pages 0: no load report, so the rank's stored load is left alone.
        tail: { numRunning: 0, numWaiting: 0, kvActivePages: 0, kvTotalPages: 0 },
      });
    const before = await gateway.metricSum('model_gateway_unknown_outputs_total');
    await injector.send([burst('a')]);
    await waitFor(
      async () => (await gateway.metricSum('model_gateway_unknown_outputs_total')) === before + 10,
      'the first burst was counted',
      20_000,
    );
    await injector.send([burst('b')]);
    await waitFor(
      async () => (await gateway.metricSum('model_gateway_unknown_outputs_total')) === before + 20,
      'the second burst was counted',
      20_000,
    );
    const lines = () => logs().filter((r) => /never issued/.test(r.msg));
    await waitFor(() => lines().length >= 1, 'the warn line reached the log', 20_000);
    assert.equal(lines().length, 1, 'one line for both bursts (at most one per 10 s)');
    assert.equal(lines()[0]!['unknownRows'], 10);
    assert.match(String(lines()[0]!['sampleRequestId']), /^rogue-a-\d$/);
  } finally {
    injector.close();
  }
  // The ranks serve on.
  const ok = await chat(0, 5, false);
  assert.equal(ok.status, 200);
  assert.equal(ok.json.usage.completion_tokens, 5);
});
