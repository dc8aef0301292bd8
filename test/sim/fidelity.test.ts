/**
 * Simulator fidelity for the routing benchmark (issue #5 part 2): KV-limit preemption (vLLM-style recompute),
 * heterogeneous ranks (`slowdown`), and the time scale leaving every decision unchanged (src/sim/virtual-run.ts).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SimScheduler, type SchedulerConfig, type SimRequest, type SimRow } from '../../src/sim/scheduler.js';
import {
  runVirtual,
  type VirtualArrival,
  type VirtualRound,
  type VirtualRunResult,
} from '../../src/sim/virtual-run.js';
import { scriptedRequest } from './helpers.js';

const EOS = 999;

/**
 * Prompts differ per rid (a per-rid offset), so no two requests share a prefix-cache block; token ids 100, 101, ...
 * (never EOS).
 */
function req(rid: string, promptLen: number, maxNewTokens: number): SimRequest {
  const offset = 1000 * [...rid].reduce((h, c) => (h * 31 + c.charCodeAt(0)) % 9973, 7);
  return scriptedRequest(
    rid,
    Array.from({ length: promptLen }, (_, i) => offset + i + 1),
    maxNewTokens,
    100,
  );
}

function config(over: Partial<SchedulerConfig> = {}): SchedulerConfig {
  return {
    engineIndex: 0,
    maxRunning: 8,
    kvTotalPages: 100,
    maxModelLen: 4096,
    eosTokenIds: [EOS],
    stepTime: { baseMs: 4, perPrefillTokenMs: 0.25, perDecodeTokenMs: 0.5 },
    ...over,
  };
}

/** Every generated token per rid, in order. */
function streams(rounds: readonly { rows: readonly SimRow[] }[]): Map<string, number[]> {
  const out = new Map<string, number[]>();
  for (const r of rounds) for (const row of r.rows) out.set(row.rid, [...(out.get(row.rid) ?? []), ...row.outputIds]);
  return out;
}

test('preemption: the newest running requests go back to the head of the waiting queue, pages freed, counted', () => {
  // 3 pages; a, b, c have 15-token prompts: 1 page each at admission, 2 pages once they hold 17 tokens.
  const s = new SimScheduler(config({ kvTotalPages: 3 }));
  for (const rid of ['a', 'b', 'c']) s.add(req(rid, 15, 4));
  const p1 = s.plan();
  assert.equal(p1.plannedCount, 3);
  assert.equal(p1.retracted, 0);
  s.commit();
  // Round 2: a must grow by a page → c (newest) is preempted; b must grow and is now the newest → preempts itself.
  const p2 = s.plan();
  assert.equal(p2.retracted, 2);
  assert.equal(p2.plannedCount, 1);
  assert.deepEqual(
    p2.tail,
    { numRunning: 3, numWaiting: 2, kvActivePages: 2, kvTotalPages: 3 },
    'TokenSpeed tail: running counts waiting too',
  );
  assert.deepEqual(
    {
      running: s.state().running,
      waiting: s.state().waiting,
      activePages: s.state().activePages,
      preemptions: s.state().preemptions,
    },
    { running: 1, waiting: 2, activePages: 2, preemptions: 2 },
  );
  assert.equal(p2.prefillTokens, 0, 'no admission in a round that preempted');
  const b2 = s.commit();
  assert.deepEqual(
    b2?.rows.map((r) => r.rid),
    ['a'],
  );
  // Drain: b re-admitted before c (head of the queue = b), each recomputes prompt + generated.
  const order: string[] = [];
  const all: { rows: SimRow[] }[] = [{ rows: b2?.rows ?? [] }];
  for (let i = 0; i < 100 && s.hasWork(); i++) {
    const p = s.plan();
    const b = s.commit();
    all.push({ rows: b?.rows ?? [] });
    for (const row of b?.rows ?? []) if (row.prefillTokens === 16 && !order.includes(row.rid)) order.push(row.rid);
    assert.ok(p.tail.kvActivePages <= 3);
  }
  assert.equal(s.hasWork(), false);
  assert.deepEqual(order, ['b', 'c'], 'b (preempted first, at the head) recomputes 15 + 1 tokens before c');
  const st = streams(all);
  // Round 1's tokens (100 each) were not collected; every request still ends with exactly 4 tokens, none repeated.
  assert.deepEqual(st.get('a'), [101, 102, 103]);
  assert.deepEqual(st.get('b'), [101, 102, 103]);
  assert.deepEqual(st.get('c'), [101, 102, 103]);
  const finals = all.flatMap((r) => r.rows).filter((r) => r.finishedReason !== '');
  assert.deepEqual(finals.map((r) => [r.rid, r.finishedReason, r.completionTokens]).sort(), [
    ['a', 'length', 4],
    ['b', 'length', 4],
    ['c', 'length', 4],
  ]);
  assert.equal(s.state().activePages, 0);
  assert.ok(s.state().preemptions >= 2);
});

test('preemption under vLLM rules: num_running and num_waiting are the queues after preemption', () => {
  const s = new SimScheduler(config({ kvTotalPages: 3, finishRules: 'vllm' }));
  for (const rid of ['a', 'b', 'c']) s.add(req(rid, 15, 4));
  s.plan();
  s.commit();
  s.plan();
  assert.deepEqual([s.state().running, s.state().waiting, s.state().preemptions], [1, 2, 2]);
});

test('outstandingTokens: prefill still to compute plus output still to generate, over every registered request', () => {
  const s = new SimScheduler(config());
  s.add(req('a', 10, 5));
  s.add(req('b', 20, 3));
  assert.equal(s.outstandingTokens(), 10 + 5 + 20 + 3);
  s.plan();
  s.commit();
  assert.equal(s.outstandingTokens(), 4 + 2, 'prefilled, one token each generated');
  s.plan();
  s.commit();
  s.plan();
  s.commit();
  assert.equal(s.outstandingTokens(), 2, 'b finished after 3; a has 2 left');
});

/** A workload where arrivals interleave with rounds and the KV cache (12 pages) forces preemptions. */
function workload(): VirtualArrival[] {
  const spec: [number, number, number][] = [
    // [atMs (engine ms), prompt tokens, max new tokens]
    [0, 40, 30],
    [3, 20, 25],
    [7.5, 60, 12],
    [7.5, 5, 40],
    [19, 33, 20],
    [41.25, 70, 8],
    [90, 10, 10],
  ];
  return spec.map(([atMs, prompt, max], i) => ({ atMs, request: () => req(`r${i}`, prompt, max) }));
}

const withoutTimes = (r: VirtualRunResult) => ({
  rounds: r.rounds.map(({ startMs: _s, endMs: _e, ...rest }: VirtualRound) => rest),
  rejections: r.rejections.map((x) => x.rows),
  state: r.state,
});

test('time scale: identical token streams and per-round decisions at 1, 1/2, 1/8, 1/1024; only wall time scales', () => {
  const cfg = config({ kvTotalPages: 12, maxRunning: 4 });
  const base = runVirtual(cfg, workload(), { timeScale: 1 });
  assert.ok(base.state.preemptions > 0, 'the workload exercises preemption');
  assert.ok(
    base.rounds.some((r) => r.prefillTokens > 0 && r.decodeTokens > 0),
    'arrivals interleave with decoding',
  );
  assert.equal(streams(base.rounds).size, 7);
  for (const scale of [0.5, 0.125, 1 / 1024]) {
    const scaled = runVirtual(cfg, workload(), { timeScale: scale });
    assert.deepEqual(withoutTimes(scaled), withoutTimes(base), `decisions at timeScale ${scale}`);
    assert.deepEqual(
      scaled.rounds.map((r) => [r.startMs, r.endMs]),
      base.rounds.map((r) => [r.startMs * scale, r.endMs * scale]),
    );
    assert.equal(scaled.endMs, base.endMs * scale);
  }
});

test('time scale 0 is NOT result-preserving: every step takes no time, so each arrival finds the rank drained', () => {
  const cfg = config({ kvTotalPages: 12, maxRunning: 4 });
  const base = runVirtual(cfg, workload(), { timeScale: 1 });
  const zero = runVirtual(cfg, workload(), { timeScale: 0 });
  assert.notDeepEqual(withoutTimes(zero), withoutTimes(base));
  assert.equal(zero.endMs, 0);
});

test('slowdown: the same decisions for a burst, each step exactly X times longer', () => {
  const burst = (): VirtualArrival[] =>
    [0, 1, 2, 3].map((i) => ({ atMs: 0, request: () => req(`b${i}`, 30 + i, 6 + i) }));
  const normal = runVirtual(config(), burst());
  const slow = runVirtual(config({ slowdown: 2 }), burst());
  assert.deepEqual(withoutTimes(slow), withoutTimes(normal));
  assert.deepEqual(
    slow.rounds.map((r) => r.endMs - r.startMs),
    normal.rounds.map((r) => 2 * (r.endMs - r.startMs)),
  );
  assert.equal(slow.endMs, 2 * normal.endMs);
  const s = new SimScheduler(config({ slowdown: 2.5 }));
  s.add(req('x', 8, 1));
  assert.equal(s.plan().stepTimeMs, 2.5 * (4 + 0.25 * 8));
});

test('slowdown with spread arrivals: the slower rank batches differently and finishes later', () => {
  const normal = runVirtual(config({ kvTotalPages: 12, maxRunning: 4 }), workload());
  const slow = runVirtual(config({ kvTotalPages: 12, maxRunning: 4, slowdown: 3 }), workload());
  assert.ok(slow.endMs > normal.endMs);
  // More arrivals land within the slower rank's longer rounds, so its queue builds earlier: what a load-aware router sees.
  assert.equal(normal.rounds[1]?.tail.numWaiting, 0);
  assert.equal(slow.rounds[1]?.tail.numWaiting, 2);
  assert.ok(slow.rounds.some((r, i) => r.tail.numWaiting > (normal.rounds[i]?.tail.numWaiting ?? 0)));
  // Tokens are the same per request: only the batching differs.
  assert.deepEqual(streams(slow.rounds), streams(normal.rounds));
});

test('slowdown and runVirtual options are validated', () => {
  for (const bad of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
    assert.throws(() => new SimScheduler(config({ slowdown: bad })), /SchedulerConfig\.slowdown/);
  }
  assert.throws(() => runVirtual(config(), [], { timeScale: -1 }), /timeScale/);
  assert.throws(() => runVirtual(config(), [{ atMs: Number.NaN, request: () => req('a', 1, 1) }]), /arrival time/);
  assert.deepEqual(runVirtual(config(), []).rounds, []);
});
