/**
 * The simulated rank's own step clock (src/sim/engine.ts "Timing") and its per-request timelines: back-to-back rounds
 * are due one step after the previous one was **due**, so an event loop stalled by a busy host does not stretch the
 * engine's steps; a timeline records arrival, round begin and due times on that clock. Asserts on the rank's computed
 * clock, never on wall-clock speed.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { tokenspeedProtocol } from '../../src/protocols/tokenspeed/index.js';
import { DEFAULT_SAMPLING, RequestType } from '../../src/protocols/types.js';
import { GatewayTokenizer } from '../../src/tokenizer/tokenizer.js';
import { type LinkedRank, OutputReader, startLinkedRank } from './helpers.js';

const STEP_MS = 20;
let rank: LinkedRank;
let reader: OutputReader;

before(async () => {
  const tokenizer = await GatewayTokenizer.load(GatewayTokenizer.defaultDir());
  rank = await startLinkedRank(tokenizer, {
    engineIndex: 0,
    timeScale: 1,
    recordTimeline: true,
    stepTimeModel: { baseMs: STEP_MS, perPrefillTokenMs: 0, perDecodeTokenMs: 0 },
  });
  reader = new OutputReader(rank.link);
});
after(() => rank?.close());

test("a stalled event loop does not stretch the rank's steps: rounds stay one step apart on its clock", async () => {
  const l = rank.link;
  const req = {
    requestId: 'clock',
    promptTokenIds: [9707, 11, 1879],
    sampling: { ...DEFAULT_SAMPLING, maxNewTokens: 8, ignoreEos: true },
    stream: true,
    returnLogprob: false,
  };
  await l.send(l.engines[0].identity, RequestType.ADD, tokenspeedProtocol.encodeAdd(req));
  await reader.batch(); // the first token: the rank is stepping now
  const until = performance.now() + 6 * STEP_MS;
  while (performance.now() < until) {
    // Busy host: no timer can fire for about six steps.
  }
  await reader.untilFinished(['clock']);
  const tl = rank.engine.timeline('clock');
  assert.ok(tl, 'recorded');
  assert.equal(tl.rows.length, 8, 'one row per token (streaming)');
  assert.equal(
    tl.rows.reduce((n, r) => n + r.tokens, 0),
    8,
  );
  assert.ok(tl.arrivedMs <= tl.rows[0].beginMs, 'the first round began after the request arrived');
  for (let i = 0; i < tl.rows.length; i++) {
    assert.ok(
      Math.abs(tl.rows[i].dueMs - tl.rows[i].beginMs - STEP_MS) < 1e-6,
      `row ${i}: due one step after it began`,
    );
    if (i > 0)
      assert.ok(
        Math.abs(tl.rows[i].beginMs - tl.rows[i - 1].dueMs) < 1e-6,
        `row ${i}: began when the previous round was due`,
      );
  }
  rank.engine.clearTimelines();
  assert.equal(rank.engine.timeline('clock'), null);
});
