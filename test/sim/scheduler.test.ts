import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  SimScheduler,
  clampMaxNewTokens,
  pagesFor,
  type SchedulerConfig,
  type SimBatch,
  type SimRequest,
  type SimRow,
  type TokenSource,
} from '../../src/sim/scheduler.js';

const EOS = 999;

/** Emits `script` in order, then 7 forever; records the allowStop flags it was asked with. */
function scripted(script: number[] = []): TokenSource & { asked: boolean[] } {
  let i = 0;
  const asked: boolean[] = [];
  return {
    asked,
    next: ({ allowStop }) => {
      asked.push(allowStop);
      const tokenId = i < script.length ? script[i] : 7;
      i += 1;
      return { tokenId, logprob: -0.25 };
    },
  };
}

function req(rid: string, over: Partial<SimRequest> = {}): SimRequest {
  return {
    rid,
    promptTokenIds: [1, 2, 3, 4],
    maxNewTokens: 10,
    minNewTokens: 0,
    stopTokenIds: null,
    ignoreEos: false,
    stream: true,
    streamInterval: null,
    returnLogprob: false,
    validationError: null,
    tokens: scripted(),
    ...over,
  };
}

function sched(over: Partial<SchedulerConfig> = {}): SimScheduler {
  return new SimScheduler({
    engineIndex: 3,
    maxRunning: 4,
    kvTotalPages: 100,
    maxModelLen: 4096,
    eosTokenIds: [EOS],
    stepTime: { baseMs: 5, perPrefillTokenMs: 0.5, perDecodeTokenMs: 1 },
    ...over,
  });
}

/** Runs one full round and returns every batch it emitted (admission first). */
function round(s: SimScheduler): SimBatch[] {
  const p = s.plan();
  const out: SimBatch[] = [];
  if (p.admission) out.push(p.admission);
  const b = s.commit();
  if (b) out.push(b);
  return out;
}

function rowsOf(batches: SimBatch[], rid: string): SimRow[] {
  return batches.flatMap((b) => b.rows.filter((r) => r.rid === rid));
}

/** Runs rounds until nothing is left (bounded), returns all batches. */
function drain(s: SimScheduler, maxRounds = 10_000): SimBatch[] {
  const all: SimBatch[] = [];
  for (let i = 0; i < maxRounds && s.hasWork(); i++) all.push(...round(s));
  assert.equal(s.hasWork(), false, 'scheduler did not drain');
  return all;
}

test('pagesFor and the max_new_tokens clamp (engine-wire.md 4.4)', () => {
  assert.equal(pagesFor(1), 1);
  assert.equal(pagesFor(16), 1);
  assert.equal(pagesFor(17), 2);
  assert.equal(clampMaxNewTokens(null, 100, 4096), 4096 - 1 - 100 - 1);
  assert.equal(clampMaxNewTokens(5000, 100, 4096), 3994);
  assert.equal(clampMaxNewTokens(10, 100, 4096), 10);
  assert.equal(clampMaxNewTokens(null, 1, 2 ** 31), 2 ** 30);
});

test('constructor rejects bad configuration with a message naming the field', () => {
  assert.throws(() => sched({ maxRunning: 0 }), /maxRunning/);
  assert.throws(() => sched({ kvTotalPages: 1.5 }), /kvTotalPages/);
  assert.throws(
    () => sched({ stepTime: { baseMs: -1, perPrefillTokenMs: 0, perDecodeTokenMs: 0 } }),
    /stepTime\.baseMs/,
  );
});

test('running cap: only maxRunning requests decode, the rest wait in FIFO order', () => {
  const s = sched({ maxRunning: 2 });
  for (const rid of ['a', 'b', 'c', 'd']) assert.equal(s.add(req(rid, { maxNewTokens: 3 })), 'queued');
  const p = s.plan();
  assert.equal(p.plannedCount, 2);
  assert.equal(p.prefillTokens, 8);
  assert.equal(p.decodeTokens, 0);
  assert.equal(p.stepTimeMs, 5 + 0.5 * 8);
  assert.deepEqual(p.tail, { numRunning: 4, numWaiting: 2, kvActivePages: 2, kvTotalPages: 100 });
  const b = s.commit();
  assert.deepEqual(
    b?.rows.map((r) => r.rid),
    ['a', 'b'],
  );
  // round 2: a, b decode (no prefill)
  const p2 = s.plan();
  assert.equal(p2.decodeTokens, 2);
  assert.equal(p2.prefillTokens, 0);
  assert.equal(p2.stepTimeMs, 5 + 2);
  s.commit();
  // round 3: a and b finish with length (3 tokens)
  s.plan();
  const b3 = s.commit();
  assert.deepEqual(
    b3?.rows.map((r) => [r.rid, r.finishedReason]),
    [
      ['a', 'length'],
      ['b', 'length'],
    ],
  );
  // round 4: c and d are admitted, in order
  const p4 = s.plan();
  assert.equal(p4.plannedCount, 2);
  assert.deepEqual(
    s.commit()?.rows.map((r) => r.rid),
    ['c', 'd'],
  );
});

test('KV admission: the head waits until its pages are free and is never skipped', () => {
  // 4 pages of 16 tokens. 'big' needs ceil((40+1)/16) = 3 pages; 'small' would fit in 1 but queues behind 'big2'.
  const s = sched({ kvTotalPages: 4, maxRunning: 8 });
  // Distinct prompts: no prefix-cache block is shared.
  const prompt = (n: number, from: number): number[] => Array.from({ length: n }, (_, i) => i + from);
  s.add(req('big', { promptTokenIds: prompt(40, 10), maxNewTokens: 2 }));
  s.add(req('big2', { promptTokenIds: prompt(40, 100), maxNewTokens: 2 }));
  s.add(req('small', { promptTokenIds: prompt(1, 200), maxNewTokens: 2 }));
  const p = s.plan();
  assert.equal(p.plannedCount, 1, 'only big fits; big2 does not, and small may not jump the FIFO');
  assert.deepEqual(p.tail, { numRunning: 3, numWaiting: 2, kvActivePages: 3, kvTotalPages: 4 });
  s.commit();
  s.plan();
  const fin = s.commit();
  assert.deepEqual(
    fin?.rows.map((r) => [r.rid, r.finishedReason]),
    [['big', 'length']],
  );
  const p3 = s.plan();
  assert.equal(p3.plannedCount, 2, 'big2 (3 pages) and small (1 page) now fit');
  assert.equal(p3.tail.kvActivePages, 4);
  s.commit();
});

test('KV growth: a request that cannot grow retracts the newest running request to the head of the queue', () => {
  // 2 pages. a: prompt 15 → 1 page at admission, 2 pages from its 2nd token; b: prompt 15 → 1 page.
  const s = sched({ kvTotalPages: 2, maxRunning: 8 });
  const p15 = Array.from({ length: 15 }, (_, i) => i + 1);
  s.add(req('a', { promptTokenIds: p15, maxNewTokens: 10 }));
  s.add(req('b', { promptTokenIds: p15, maxNewTokens: 10 }));
  const p1 = s.plan();
  assert.equal(p1.plannedCount, 2);
  s.commit();
  const p2 = s.plan();
  assert.equal(p2.retracted, 1);
  assert.equal(p2.plannedCount, 1);
  assert.deepEqual(p2.tail, { numRunning: 2, numWaiting: 1, kvActivePages: 2, kvTotalPages: 2 });
  s.commit();
  const all = drain(s);
  const b = rowsOf(all, 'b');
  assert.equal(b.at(-1)?.finishedReason, 'length');
  assert.equal(b.at(-1)?.completionTokens, 10);
  assert.equal(
    b.reduce((n, r) => n + r.outputIds.length, 1),
    10,
    'b keeps its first token across the retraction',
  );
});

/** The rids in the order their terminal rows appeared. */
function finishOrder(batches: SimBatch[]): string[] {
  return batches.flatMap((b) => b.rows.filter((r) => r.finishedReason !== '').map((r) => r.rid));
}

test('scheduling policy priority: waiting requests are served by priority (lower first), then arrival', () => {
  const add = (s: SimScheduler) => {
    s.add(req('a', { maxNewTokens: 3 }));
    s.add(req('b', { maxNewTokens: 3, priority: 5 }));
    s.add(req('c', { maxNewTokens: 3, priority: -1 }));
    s.add(req('d', { maxNewTokens: 3, priority: 0 }));
  };
  const fcfs = sched({ maxRunning: 1 });
  add(fcfs);
  assert.deepEqual(finishOrder(drain(fcfs)), ['a', 'b', 'c', 'd'], 'FCFS ignores priority');
  const byPriority = sched({ maxRunning: 1, schedulingPolicy: 'priority' });
  add(byPriority);
  assert.deepEqual(finishOrder(drain(byPriority)), ['c', 'a', 'd', 'b']);
});

test('scheduling policy priority: a KV shortage preempts the least urgent running request, not the newest', () => {
  // 2 pages, prompts of 15 tokens: both run on a page each, then the first to grow needs the other's page.
  const p15 = Array.from({ length: 15 }, (_, i) => i + 1);
  const run = (policy: 'fcfs' | 'priority') => {
    const s = sched({ kvTotalPages: 2, maxRunning: 8, schedulingPolicy: policy });
    s.add(req('bulk', { promptTokenIds: p15, maxNewTokens: 6, priority: 5 }));
    s.add(req('urgent', { promptTokenIds: p15, maxNewTokens: 6, priority: 0 }));
    const all = drain(s);
    return { order: finishOrder(all), preemptions: s.state().preemptions };
  };
  assert.deepEqual(run('fcfs').order, ['bulk', 'urgent'], 'FCFS preempts the newest: urgent waits');
  const p = run('priority');
  assert.deepEqual(p.order, ['urgent', 'bulk'], 'priority preempts bulk, which then waits');
  assert.ok(p.preemptions >= 1);
});

test('scheduling policy: an unknown one is refused', () => {
  assert.throws(() => sched({ schedulingPolicy: 'lifo' as never }), /schedulingPolicy/);
});

test('stream cadence: stream=true gives a row every token; stream_interval k>1 emits at count mod k == 1', () => {
  const s = sched();
  s.add(req('s', { maxNewTokens: 5, stream: true }));
  s.add(req('k', { maxNewTokens: 7, stream: true, streamInterval: 3 }));
  const all = drain(s);
  assert.deepEqual(
    rowsOf(all, 's').map((r) => r.outputIds.length),
    [1, 1, 1, 1, 1],
  );
  assert.deepEqual(
    rowsOf(all, 'k').map((r) => r.completionTokens),
    [1, 4, 7],
  );
  assert.deepEqual(
    rowsOf(all, 'k').map((r) => r.outputIds.length),
    [1, 3, 3],
  );
});

test('stream cadence: stream=false gives the first token, then every 50, then the finish', () => {
  const s = sched();
  s.add(req('n', { maxNewTokens: 120, stream: false }));
  const rows = rowsOf(drain(s), 'n');
  assert.deepEqual(
    rows.map((r) => r.completionTokens),
    [1, 50, 100, 120],
  );
  assert.deepEqual(
    rows.map((r) => r.outputIds.length),
    [1, 49, 50, 20],
  );
  assert.deepEqual(
    rows.map((r) => r.finishedReason),
    ['', '', '', 'length'],
  );
});

test('finish checks: stop token included; EOS stops; length wins over a stop token on the last allowed token', () => {
  const s = sched();
  s.add(req('stop', { stopTokenIds: [42], tokens: scripted([5, 6, 42, 8]) }));
  s.add(req('eos', { tokens: scripted([5, EOS, 8]) }));
  s.add(req('both', { maxNewTokens: 3, stopTokenIds: [42], tokens: scripted([5, 6, 42]) }));
  s.add(req('ignore', { maxNewTokens: 4, ignoreEos: true, stopTokenIds: [42], tokens: scripted([EOS, 42, 5, 6]) }));
  const all = drain(s);
  const last = (rid: string): SimRow | undefined => rowsOf(all, rid).at(-1);
  assert.equal(last('stop')?.finishedReason, 'stop');
  assert.deepEqual(
    rowsOf(all, 'stop').flatMap((r) => r.outputIds),
    [5, 6, 42],
  );
  assert.equal(last('eos')?.finishedReason, 'stop');
  assert.deepEqual(
    rowsOf(all, 'eos').flatMap((r) => r.outputIds),
    [5, EOS],
  );
  assert.equal(last('both')?.finishedReason, 'length');
  assert.equal(last('ignore')?.finishedReason, 'length');
  assert.deepEqual(
    rowsOf(all, 'ignore').flatMap((r) => r.outputIds),
    [EOS, 42, 5, 6],
  );
  // every request appears in exactly one terminal row
  for (const rid of ['stop', 'eos', 'both', 'ignore']) {
    assert.equal(rowsOf(all, rid).filter((r) => r.finishedReason !== '').length, 1, rid);
  }
});

test('min_new_tokens and ignore_eos tell the token source not to stop', () => {
  const s = sched();
  const t1 = scripted();
  const t2 = scripted();
  s.add(req('min', { maxNewTokens: 4, minNewTokens: 2, tokens: t1 }));
  s.add(req('ign', { maxNewTokens: 2, ignoreEos: true, tokens: t2 }));
  drain(s);
  assert.deepEqual(t1.asked, [false, false, true, true]);
  assert.deepEqual(t2.asked, [false, false]);
  // a stop token drawn before min_new_tokens does not end the request (TokenSpeed masks it)
  const s2 = sched();
  s2.add(req('masked', { maxNewTokens: 10, minNewTokens: 2, stopTokenIds: [42], tokens: scripted([42, 42, 42, 5]) }));
  const rows = rowsOf(drain(s2), 'masked');
  assert.deepEqual(
    rows.flatMap((r) => r.outputIds),
    [42, 42, 42],
  );
  assert.equal(rows.at(-1)?.finishedReason, 'stop');
});

test('max_new_tokens nil is clamped to the context', () => {
  const s = sched({ maxModelLen: 20 });
  s.add(req('nil', { maxNewTokens: null, promptTokenIds: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] }));
  const rows = rowsOf(drain(s), 'nil');
  assert.equal(rows.at(-1)?.finishedReason, 'length');
  assert.equal(rows.at(-1)?.completionTokens, 20 - 1 - 10 - 1);
});

test('client abort is silent, frees pages at once, and also drops a request planned in the open round', () => {
  const s = sched({ maxRunning: 1 });
  s.add(req('a', { maxNewTokens: 100 }));
  s.add(req('b', { maxNewTokens: 2 }));
  round(s);
  s.plan();
  assert.equal(s.abort(['a']), 1);
  assert.equal(s.state().activePages, 0);
  assert.equal(s.commit(), null, 'the aborted request produces nothing, and nothing else was planned');
  const rest = drain(s);
  assert.equal(rowsOf(rest, 'a').length, 0);
  assert.equal(rowsOf(rest, 'b').at(-1)?.finishedReason, 'length');
  // a waiting request can be aborted too
  const s2 = sched({ maxRunning: 1 });
  s2.add(req('x'));
  s2.add(req('y'));
  assert.equal(s2.abort(['y']), 1);
  assert.equal(s2.state().registered, 1);
  assert.equal(rowsOf(drain(s2), 'y').length, 0);
});

test('an abort that arrives before its request is remembered and applied on arrival (silently)', () => {
  const s = sched();
  assert.equal(s.abort(['early'], 1000), 0);
  assert.equal(s.state().pendingAborts, 1);
  assert.equal(s.add(req('early'), 2000), 'aborted');
  assert.equal(s.state().pendingAborts, 0);
  assert.equal(s.hasWork(), false);
  // remembered aborts are swept after the TTL
  const t = sched({ pendingAbortTtlMs: 500 });
  t.abort(['late'], 0);
  assert.equal(t.add(req('late'), 10_000), 'queued');
});

test('duplicate rids are refused without output', () => {
  const s = sched();
  assert.equal(s.add(req('d')), 'queued');
  assert.equal(s.add(req('d')), 'duplicate');
  assert.equal(s.state().registered, 1);
});

test('validation abort: one terminal row at admission, carrying the PREVIOUS round tail, never counted as running', () => {
  const s = sched();
  // before any round ran, the tail is all zeros (no snapshot)
  assert.equal(s.add(req('bad0', { validationError: 'top_p must be in (0, 1]' })), 'rejected');
  const first = round(s);
  assert.equal(first.length, 1);
  assert.deepEqual(first[0].rows, [
    {
      rid: 'bad0',
      outputIds: [],
      finishedReason: 'abort',
      promptTokens: 4,
      completionTokens: 0,
      cachedTokens: 0,
      logprobVals: [],
      logprobIdx: [],
      stopReason: null,
      prefillTokens: null,
    },
  ]);
  assert.deepEqual(first[0].tail, { numRunning: 0, numWaiting: 0, kvActivePages: 0, kvTotalPages: 0 });
  assert.equal(first[0].engineIndex, 3);

  s.add(req('ok1', { maxNewTokens: 50 }));
  s.add(req('ok2', { maxNewTokens: 50 }));
  const r1 = round(s);
  const prevTail = r1[0].tail;
  assert.deepEqual(prevTail, { numRunning: 2, numWaiting: 0, kvActivePages: 2, kvTotalPages: 100 });
  s.add(req('ok3', { maxNewTokens: 50 }));
  s.add(req('bad', { validationError: 'logprobs must be nil or 0' }));
  const r2 = round(s);
  assert.equal(r2.length, 2, 'admission batch + the round batch');
  assert.deepEqual(
    r2[0].rows.map((r) => [r.rid, r.finishedReason]),
    [['bad', 'abort']],
  );
  assert.deepEqual(r2[0].tail, prevTail, 'the admission row carries the previous round tail');
  assert.deepEqual(
    r2[1].tail,
    { numRunning: 3, numWaiting: 0, kvActivePages: 3, kvTotalPages: 100 },
    'bad is not counted',
  );
  assert.equal(rowsOf(drain(s), 'bad').length, 0, 'exactly one row for the rejected request');
});

test('capacity rejections: empty prompt, prompt beyond the context, prompt beyond the KV cache', () => {
  const s = sched({ maxModelLen: 128, kvTotalPages: 3 });
  assert.equal(s.add(req('empty', { promptTokenIds: [] })), 'rejected');
  assert.equal(s.add(req('long', { promptTokenIds: Array.from({ length: 127 }, () => 1) })), 'rejected');
  assert.equal(s.add(req('kv', { promptTokenIds: Array.from({ length: 48 }, () => 1), maxNewTokens: 1 })), 'rejected');
  assert.equal(s.add(req('fits', { promptTokenIds: Array.from({ length: 47 }, () => 1), maxNewTokens: 1 })), 'queued');
  const all = drain(s);
  for (const rid of ['empty', 'long', 'kv'])
    assert.deepEqual(
      rowsOf(all, rid).map((r) => r.finishedReason),
      ['abort'],
      rid,
    );
  assert.deepEqual(
    rowsOf(all, 'fits').map((r) => r.finishedReason),
    ['length'],
  );
});

test('a lone request that outgrows the whole KV cache is finished by the engine with an abort row', () => {
  // 3 pages = 48 tokens: prompt 1 + 47 generated fill them; the 48th token would need a 4th page.
  const s = sched({ kvTotalPages: 3, maxModelLen: 4096 });
  s.add(req('big', { promptTokenIds: [1], maxNewTokens: 100, stream: false }));
  const all = drain(s);
  const rows = rowsOf(all, 'big');
  assert.equal(rows.at(-1)?.finishedReason, 'abort');
  assert.equal(rows.at(-1)?.completionTokens, 47);
  assert.equal(
    rows.reduce((n, r) => n + r.outputIds.length, 0),
    47,
    'every generated token was delivered',
  );
  assert.equal(rows.filter((r) => r.finishedReason !== '').length, 1);
});

test('KV contention: the newest request is retracted, re-admitted later, and every request completes', () => {
  const s = sched({ kvTotalPages: 4, maxRunning: 4 });
  for (const rid of ['p', 'q', 'r']) s.add(req(rid, { promptTokenIds: [1, 2], maxNewTokens: 30, stream: false }));
  const all = drain(s);
  for (const rid of ['p', 'q', 'r']) {
    const rows = rowsOf(all, rid);
    assert.equal(rows.at(-1)?.finishedReason, 'length', rid);
    assert.equal(
      rows.reduce((n, r) => n + r.outputIds.length, 0),
      30,
      rid,
    );
  }
  assert.ok(all.every((b) => b.tail.kvActivePages <= 4));
});

test('SNAPSHOT TIMING (engine-wire.md 4.9): the batch carrying a terminal row still counts that request', () => {
  const s = sched({ maxRunning: 1 });
  s.add(req('last', { maxNewTokens: 2, promptTokenIds: Array.from({ length: 20 }, () => 1) }));
  s.add(req('queued', { maxNewTokens: 1 }));
  round(s);
  const fin = round(s);
  assert.equal(fin.length, 1);
  const terminal = fin[0].rows.find((r) => r.rid === 'last');
  assert.equal(terminal?.finishedReason, 'length');
  assert.deepEqual(
    fin[0].tail,
    { numRunning: 2, numWaiting: 1, kvActivePages: 2, kvTotalPages: 100 },
    'last is counted (and its 2 pages) although this very batch finishes it; num_running includes the waiting one',
  );
  // internally the release already happened; it becomes visible in the next round's tail
  assert.equal(s.state().registered, 1);
  const next = round(s);
  assert.deepEqual(next[0].tail, { numRunning: 1, numWaiting: 0, kvActivePages: 1, kvTotalPages: 100 });
  assert.equal(next[0].rows[0].finishedReason, 'length');
  // the rank is now idle: no further batch, so the last tail the gateway saw still counts 'queued' (the reason for the clamp)
  assert.equal(s.hasWork(), false);
  const idle = s.plan();
  assert.equal(idle.plannedCount, 0);
  assert.equal(idle.stepTimeMs, 0);
  assert.equal(s.commit(), null);
  assert.deepEqual(s.currentTail(), next[0].tail);
});

test('logprob columns are parallel to output_ids when requested and empty otherwise', () => {
  const s = sched();
  s.add(req('lp', { returnLogprob: true, maxNewTokens: 2, stream: false, tokens: scripted([11, 12]) }));
  s.add(req('nolp', { maxNewTokens: 2 }));
  const all = drain(s);
  const lp = rowsOf(all, 'lp');
  assert.deepEqual(
    lp.map((r) => r.outputIds),
    [[11], [12]],
  );
  assert.deepEqual(
    lp.map((r) => r.logprobIdx),
    [[11], [12]],
  );
  assert.deepEqual(
    lp.map((r) => r.logprobVals),
    [[-0.25], [-0.25]],
  );
  assert.ok(rowsOf(all, 'nolp').every((r) => r.logprobVals.length === 0 && r.logprobIdx.length === 0));
});

test('never an empty batch, and plan() twice without commit() throws', () => {
  const s = sched();
  s.add(req('n', { maxNewTokens: 120, stream: false }));
  const all = drain(s);
  assert.ok(all.every((b) => b.rows.length > 0));
  assert.ok(all.length < 120, 'non-streaming rows are coalesced');
  s.add(req('m'));
  s.plan();
  assert.throws(() => s.plan(), /not committed/);
});

test('deterministic: two identical runs give identical batches', () => {
  const run = (): SimBatch[] => {
    const s = sched({ maxRunning: 3, kvTotalPages: 6 });
    for (let i = 0; i < 8; i++) {
      s.add(
        req(`r${i}`, {
          maxNewTokens: 5 + i * 7,
          promptTokenIds: Array.from({ length: 3 + i * 5 }, () => i),
          stream: i % 2 === 0,
        }),
      );
    }
    return drain(s);
  };
  assert.deepEqual(run(), run());
});

test('vLLM rules: EOS only when the request names it, EOS before stop ids before length, stop_reason = the stop id', () => {
  const s = sched({ finishRules: 'vllm' });
  // The request names no EOS: the model's EOS is just a token, and the source is told not to emit it.
  const noEos = scripted([5, EOS, 6]);
  s.add(req('no-eos', { maxNewTokens: 3, tokens: noEos }));
  // EOS named by _eos_token_id: an EOS finish with no stop reason.
  s.add(req('eos', { maxNewTokens: 5, eosTokenIds: [EOS], tokens: scripted([5, EOS]) }));
  // A stop id on the last allowed token: vLLM says stop (TokenSpeed would say length).
  s.add(req('stop', { maxNewTokens: 2, stopTokenIds: [42], tokens: scripted([5, 42]) }));
  // ignore_eos is not consulted under vLLM rules (the gateway already left EOS out of the map).
  s.add(req('ign', { maxNewTokens: 5, ignoreEos: true, eosTokenIds: [EOS], tokens: scripted([EOS]) }));
  const all = drain(s);
  const last = (rid: string) => rowsOf(all, rid).at(-1);
  assert.deepEqual(
    rowsOf(all, 'no-eos').flatMap((r) => r.outputIds),
    [5, EOS, 6],
  );
  assert.deepEqual([last('no-eos')?.finishedReason, last('no-eos')?.stopReason], ['length', null]);
  assert.ok(
    noEos.asked.every((a) => !a),
    'EOS would not end the request: the source may not emit it',
  );
  assert.deepEqual([last('eos')?.finishedReason, last('eos')?.stopReason], ['stop', null]);
  assert.deepEqual([last('stop')?.finishedReason, last('stop')?.stopReason], ['stop', 42]);
  assert.deepEqual([last('ign')?.finishedReason, last('ign')?.outputIds], ['stop', [EOS]]);
});

test('vLLM rules: the limit is min(max_tokens, max_model_len − prompt); TokenSpeed rules keep the 4.4 clamp', () => {
  const v = sched({ finishRules: 'vllm', maxModelLen: 10 });
  v.add(req('v', { maxNewTokens: 100, promptTokenIds: [1, 2, 3, 4] }));
  assert.equal(rowsOf(drain(v), 'v').flatMap((r) => r.outputIds).length, 6);
  const t = sched({ maxModelLen: 10 });
  t.add(req('t', { maxNewTokens: 100, promptTokenIds: [1, 2, 3, 4] }));
  assert.equal(rowsOf(drain(t), 't').flatMap((r) => r.outputIds).length, 4);
  assert.throws(() => sched({ finishRules: 'sglang' as never }), /finishRules/);
});

test('prefillTokens marks the first row after each prefill; stopReason is also filled under TokenSpeed rules', () => {
  const s = sched();
  s.add(req('a', { maxNewTokens: 3, stopTokenIds: [42], tokens: scripted([5, 42]) }));
  const rows = rowsOf(drain(s), 'a');
  assert.deepEqual(
    rows.map((r) => r.prefillTokens),
    [4, null],
  );
  assert.deepEqual(
    rows.map((r) => r.stopReason),
    [null, 42],
  );
});

test('takeRejections() hands out pending rejection rows at once, with the last tail', () => {
  const s = sched();
  assert.equal(s.takeRejections(), null);
  s.add(req('bad', { validationError: 'no' }));
  const b = s.takeRejections();
  assert.deepEqual(
    b?.rows.map((r) => [r.rid, r.finishedReason]),
    [['bad', 'abort']],
  );
  assert.equal(s.hasWork(), false);
  assert.equal(s.plan().admission, null, 'not sent twice');
  s.add(req('ok'));
  assert.equal(s.has('ok'), true);
  assert.equal(s.has('bad'), false);
});
