/**
 * The routing benchmark's pure parts (issue 12 part 6): spreads over seeds, paired ratios, the tie rule, and the
 * shared-prefix workloads' structure (deterministic per seed, closed-loop turns, prefixes shared across requests).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { RunMetrics } from '../../bench/routing/stats.js';
import {
  formatSpread,
  losesOutsideSpread,
  pairedRatios,
  spreadOf,
  summarize,
  tiesOrBeats,
} from '../../bench/routing/summary.js';
import {
  FITS_WORKING_SET_TOKENS,
  RANK_KV_TOKENS,
  SHARED_WORKING_SET_TOKENS,
  buildWorkloads,
  hitRateCeiling,
  type BenchRequest,
  type Workload,
} from '../../bench/routing/workloads.js';

function run(ttftP50: number, prefixHitRate = 0.5): RunMetrics {
  return {
    ttftP50,
    ttftP99: 2 * ttftP50,
    itlP50: 1,
    itlP99: 2,
    throughput: 1000,
    tokenShare: [1],
    failures: 0,
    spanMs: 1,
    preemptions: 0,
    storedRunningAtStart: [null],
    prefixHitRate,
    selectionUs: 3,
    routingPrecision: Number.NaN,
  };
}

test('spreadOf: median (odd and even counts), min, max; non-finite samples ignored', () => {
  assert.deepEqual(spreadOf([3, 1, 2]), { median: 2, min: 1, max: 3 });
  assert.deepEqual(spreadOf([4, 1, 3, 2]), { median: 2.5, min: 1, max: 4 });
  assert.deepEqual(spreadOf([5, Number.NaN]), { median: 5, min: 5, max: 5 });
  assert.ok(Number.isNaN(spreadOf([]).median));
  assert.equal(formatSpread({ median: 1.234, min: 1, max: 2 }, 2, '×'), '1.23× [1.00–2.00]');
  assert.equal(formatSpread(spreadOf([]), 1), '-');
});

test('ratios are paired by seed, then summarised; the seeds must match', () => {
  const base = [run(10), run(20), run(40)];
  const cand = [run(5), run(20), run(10)];
  const r = pairedRatios(cand, base);
  assert.deepEqual(r.ttftP50, { median: 0.5, min: 0.25, max: 1 });
  assert.deepEqual(summarize(cand).ttftP50, { median: 10, min: 5, max: 20 });
  assert.throws(() => pairedRatios(cand, base.slice(1)), RangeError);
});

test("tiesOrBeats: the median against the reference's worst run, for either direction", () => {
  const ref = { median: 10, min: 8, max: 12 };
  assert.equal(tiesOrBeats({ median: 12, min: 11, max: 30 }, ref), true);
  assert.equal(tiesOrBeats({ median: 12.1, min: 5, max: 13 }, ref), false);
  assert.equal(tiesOrBeats({ median: 8, min: 1, max: 9 }, ref, true), true);
  assert.equal(tiesOrBeats({ median: 7.9, min: 7, max: 20 }, ref, true), false);
  assert.equal(losesOutsideSpread({ median: 14, min: 12.5, max: 15 }, ref), true, 'lower is better: entirely above');
  assert.equal(losesOutsideSpread({ median: 14, min: 12, max: 15 }, ref), false, 'touching ranges overlap');
  assert.equal(
    losesOutsideSpread({ median: 6, min: 5, max: 7.9 }, ref, true),
    true,
    'higher is better: entirely below',
  );
});

test('shared-prefix workloads: deterministic per seed, prefixes shared, turns chained in order', () => {
  const a = buildWorkloads({ requests: 60, seed: 7 });
  assert.deepEqual(a, buildWorkloads({ requests: 60, seed: 7 }), 'a pure function of the seed');
  assert.notDeepEqual(a, buildWorkloads({ requests: 60, seed: 8 }));
  const byName = new Map(a.map((w) => [w.name, w]));
  const prefixed = [
    'multi_turn',
    'multi_turn_shared_system',
    'shared_prompt',
    'shared_prompt_zipf',
    'shared_prompt_fits',
    'rag',
  ];
  for (const name of prefixed) assert.equal(byName.get(name)?.main.length, 60, name);

  for (const [name, systems] of [
    ['multi_turn', 8],
    ['multi_turn_shared_system', 1],
  ] as const) {
    const turns = byName.get(name)!.main;
    const ids = new Set(turns.map((t) => t.id));
    for (const t of turns) {
      if (t.follows) {
        assert.ok(ids.has(t.follows.previous), `${t.id} follows a turn of the workload`);
        assert.equal(t.prefix, undefined, 'a follow-up starts with the previous prompt and answer');
      } else {
        assert.equal(t.prefix?.length, 1, 'a first turn starts with a system prompt');
      }
    }
    const seen = new Set(turns.flatMap((t) => (t.prefix ?? []).map((p) => p.seed)));
    assert.ok(
      seen.size <= systems && (systems === 1 ? seen.size === 1 : seen.size > 1),
      `${name}: ${seen.size} system prompts`,
    );
  }
  const appTokens = byName
    .get('multi_turn')!
    .main.flatMap((t) => t.prefix ?? [])
    .map((p) => p.tokens);
  assert.ok(Math.max(...appTokens) <= 192, 'multi_turn: short app prompts, so the hits come from the history');

  const shared = byName.get('shared_prompt')!.main;
  const prompts = new Map<number, number>();
  for (const r of shared) prompts.set(r.prefix![0].seed, (prompts.get(r.prefix![0].seed) ?? 0) + 1);
  assert.ok(prompts.size > 1 && prompts.size <= 12, 'a few long system prompts');
  assert.ok(
    [...prompts.values()].some((n) => n > 1),
    'each shared by many users',
  );
  const rag = byName.get('rag')!.main;
  assert.ok(
    rag.every((r) => r.prefix?.length === 2 && r.prefix[0].seed === rag[0].prefix![0].seed),
    'instruction, then a document',
  );
});

test("the sizing rule: favourable shared sets are about twice one rank's KV cache, the fitting one half of it", () => {
  // With many requests every prompt appears: the distinct shared tokens are the working set.
  const byName = new Map(buildWorkloads({ requests: 2000, seed: 11 }).map((w) => [w.name, w]));
  const sharedTokens = (name: string): number => {
    const segments = new Map<number, number>();
    for (const r of byName.get(name)!.main) for (const p of r.prefix ?? []) segments.set(p.seed, p.tokens);
    return [...segments.values()].reduce((x, y) => x + y, 0);
  };
  for (const name of ['shared_prompt', 'shared_prompt_zipf', 'rag']) {
    const ratio = sharedTokens(name) / SHARED_WORKING_SET_TOKENS;
    assert.ok(
      ratio > 0.8 && ratio < 1.25,
      `${name}: ${sharedTokens(name)} shared tokens, ${ratio.toFixed(2)} of the rule`,
    );
    assert.ok(
      sharedTokens(name) > RANK_KV_TOKENS && sharedTokens(name) < 4 * RANK_KV_TOKENS,
      'more than one rank holds, less than the group',
    );
  }
  assert.ok(
    sharedTokens('shared_prompt_fits') <= FITS_WORKING_SET_TOKENS,
    `fits: ${sharedTokens('shared_prompt_fits')}`,
  );
});

test('hitRateCeiling: a follow-up shares its whole previous turn, a prefix the longest run some earlier request had; full blocks, one token computed', () => {
  const sys = { seed: 1, tokens: 100 };
  const doc = { seed: 2, tokens: 64 };
  const w = (main: BenchRequest[], setup: BenchRequest[] = []): Workload => ({
    name: 't',
    description: '',
    setup,
    main,
  });
  const r = (id: string, over: Partial<BenchRequest>): BenchRequest => ({
    id,
    atMs: 0,
    promptTokens: 20,
    outputTokens: 30,
    seed: 9,
    ...over,
  });
  // a: 100 + 20 = 120 prompt, nothing before it. b: same system prompt → 6 blocks (96 tokens) of its 120.
  // c: follows a → before = 120 + 30 = 150 → 9 blocks (144) of its 170.
  const main = [
    r('a', { prefix: [sys] }),
    r('b', { prefix: [sys] }),
    r('c', { follows: { previous: 'a', thinkMs: 0 } }),
  ];
  assert.equal(hitRateCeiling(w(main)), (0 + 96 + 144) / (120 + 120 + 170));
  // [sys, doc] after [sys]: only sys is shared; a second [sys, doc] shares both (164 → 10 blocks of its 184).
  const nested = [r('a', { prefix: [sys] }), r('b', { prefix: [sys, doc] }), r('c', { prefix: [sys, doc] })];
  assert.equal(hitRateCeiling(w(nested)), (0 + 96 + 160) / (120 + 184 + 184));
  // A prompt that is all shared still computes its last token: 16 × 4 = 64-token prompts hit 3 blocks at most.
  const whole = [r('a', { prefix: [doc], promptTokens: 0 }), r('b', { prefix: [doc], promptTokens: 0 })];
  assert.equal(hitRateCeiling(w(whole)), 48 / 128);
  // Setup requests seed the prefixes but are not counted; foreign ones neither.
  assert.equal(
    hitRateCeiling(
      w([r('b', { prefix: [sys] }), r('f', { prefix: [sys], foreignRank: 1 })], [r('s', { prefix: [sys] })]),
    ),
    96 / 120,
  );
  assert.ok(Number.isNaN(hitRateCeiling(w([]))));
  // The benchmark's own workloads: nothing shared without prefixes; the targets' ceilings stay below 100%.
  const built = new Map(buildWorkloads({ requests: 60, seed: 3 }).map((x) => [x.name, hitRateCeiling(x)]));
  assert.equal(built.get('uniform'), 0);
  for (const name of ['multi_turn', 'shared_prompt', 'rag'])
    assert.ok(built.get(name)! > 0.5 && built.get(name)! < 1, `${name}: ${built.get(name)}`);
});
