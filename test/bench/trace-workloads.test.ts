/**
 * The Mooncake trace workloads of `bench:routing:kv-events` (bench/routing/trace-workloads.ts): the committed trace
 * is the published one (checked against ../shared/traces when that folder is present), a seed always gives the same
 * sample of whole multi-turn conversations, lengths and times are scaled as documented, equal trace blocks become
 * equal token runs (shared prefixes survive), and the variants carry their restart and second client.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gunzipSync } from 'node:zlib';
import { describe, test } from 'node:test';
import {
  loadMooncakeTrace,
  fitsContext,
  sampleConversations,
  toBenchRequests,
  traceWorkloads,
} from '../../bench/routing/trace-workloads.js';
import { hitRateCeiling } from '../../bench/routing/workloads.js';
import { sharedDirIfPresent } from '../helpers/vectors.js';

const trace = loadMooncakeTrace();
const COMMITTED = fileURLToPath(new URL('../../bench/traces/mooncake-conversation.jsonl.gz', import.meta.url));
const shared = sharedDirIfPresent();
const SHARED = shared === null ? null : join(shared, 'traces', 'mooncake-conversation.jsonl');

describe('Mooncake trace workloads', { timeout: 30_000 }, () => {
  const present = SHARED !== null && existsSync(SHARED);
  test('the committed trace is the published one', { skip: !present && 'no ../shared/traces' }, () => {
    assert.ok(gunzipSync(readFileSync(COMMITTED)).equals(readFileSync(SHARED!)));
  });

  test('12,031 requests, every prompt starting with the shared system block', () => {
    assert.equal(trace.length, 12_031);
    assert.ok(trace.every((r) => r.hashIds[0] === 0));
  });

  test('a seed is a fixed sample of whole multi-turn conversations, in arrival order', () => {
    const a = sampleConversations(trace, 200, 7);
    assert.deepEqual(a, sampleConversations(trace, 200, 7));
    assert.notDeepEqual(a, sampleConversations(trace, 200, 8));
    assert.equal(a.length, 200);
    assert.ok(a.every((r, i) => i === 0 || a[i - 1]!.timestamp <= r.timestamp));
    const turns = new Map<string, number>();
    for (const r of a) turns.set(r.hashIds.slice(0, 2).join(), (turns.get(r.hashIds.slice(0, 2).join()) ?? 0) + 1);
    assert.ok([...turns.values()].filter((n) => n >= 2).length >= turns.size / 2, 'mostly conversations with turns');
  });

  test('scaling: blocks to token runs, outputs ÷ divisor, the mean gap as asked', () => {
    const sample = sampleConversations(trace, 100, 3);
    const reqs = toBenchRequests(sample, { blockTokens: 64, outputDivisor: 16, gapMs: 12 }, 'x');
    const last = reqs.at(-1)!;
    assert.ok(Math.abs(last.atMs / (reqs.length - 1) - 12) < 1e-9, 'mean gap 12 ms');
    sample.forEach((r, i) => {
      const q = reqs[i]!;
      assert.equal(q.prefix!.length, r.hashIds.length);
      assert.ok(q.prefix!.slice(0, -1).every((s) => s.tokens === 64));
      assert.equal(q.outputTokens, Math.max(4, Math.round(r.outputLength / 16)));
    });
    // The same hash id at the same depth is the same segment: shared prefixes survive the scaling.
    const [a, b] = reqs.filter((q) => q.prefix!.length > 2);
    assert.deepEqual(a!.prefix![0], b!.prefix![0]);
  });

  test('the variants: a restart a third of the way in; first turns from a second client; a hit-rate ceiling', () => {
    const ws = traceWorkloads(trace, { requests: 200, seed: 11, ranks: 4, contextTokens: 8192, kvTotalPages: 2048 });
    assert.deepEqual(
      ws.map((w) => w.name),
      ['mooncake', 'kv_pressure', 'rank_restart', 'second_client_prefix'],
    );
    const restart = ws.find((w) => w.name === 'rank_restart')!;
    assert.equal(restart.restart?.rank, 0);
    assert.equal(restart.restart?.atMs, restart.main[66]!.atMs);
    const second = ws.find((w) => w.name === 'second_client_prefix')!;
    const foreign = second.main.filter((r) => r.foreignRank !== undefined);
    assert.ok(foreign.length > 0 && foreign.length < second.main.length);
    assert.ok(foreign.every((r) => r.foreignRank! >= 0 && r.foreignRank! < 4));
    const ceiling = hitRateCeiling(ws[0]!);
    assert.ok(ceiling > 0.3 && ceiling < 0.9, `mooncake's ceiling ${ceiling}`);
  });

  test('every turn fits the context at the larger scale: the longer ones are left out, not sent to be refused', () => {
    const big = { blockTokens: 128, outputDivisor: 16, gapMs: 24 };
    assert.ok(
      trace.some((r) => !fitsContext(r, big, 8192)),
      'the trace has turns too long for 8192 tokens',
    );
    for (const w of traceWorkloads(trace, {
      requests: 200,
      seed: 11,
      ranks: 4,
      contextTokens: 8192,
      kvTotalPages: 2048,
    })) {
      assert.equal(w.main.length, 200);
      for (const r of w.main) {
        const prompt = (r.prefix ?? []).reduce((s, g) => s + g.tokens, 0) + r.promptTokens;
        assert.ok(prompt + r.outputTokens <= 8192, `${w.name} ${r.id}: ${prompt} + ${r.outputTokens} tokens`);
      }
    }
  });
});
