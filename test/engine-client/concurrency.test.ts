/**
 * dp-routing.md section 12.3 rule 7 (SMG `selection_and_release_race_without_deadlocking`, in event-loop form):
 * many concurrent submit / read / cancel / abort / finish sequences with `setImmediate` yields between the public
 * calls. Nothing may hang, every in-flight set must be empty at the end, and at every observation point each
 * registered request holds exactly one slot (no negative, leaked or double-released counts).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RequestType } from '../../src/protocols/types.js';
import type { EngineClient } from '../../src/engine-client/client.js';
import type { RequestStream } from '../../src/engine-client/request-stream.js';
import { prng } from '../helpers/prng.js';
import { batch, drain, inFlight, load, req, row, setup, tick, type FakeLink } from './fakes.js';

function checkInvariant(client: EngineClient): void {
  const counts = inFlight(client);
  for (const c of counts) assert.ok(Number.isInteger(c) && c >= 0, `bad count ${c}`);
  const total = counts.reduce((a, b) => a + b, 0);
  assert.equal(total, client.registeredCount, `in-flight ${counts.join('/')} vs ${client.registeredCount} registered`);
}

/** A fake engine group: tracks what each rank runs (ADD in, ABORT out) and emits batches on demand. */
class FakeEngines {
  readonly running: Set<string>[];
  readonly abortedLate: string[][];
  constructor(
    private readonly link: FakeLink,
    private readonly rand: () => number,
  ) {
    this.running = link.engines.map(() => new Set());
    this.abortedLate = link.engines.map(() => []);
    link.sendHook = async (f) => {
      if (this.rand() < 0.3) await tick(); // sends complete in a later turn sometimes
      const rank = f.engineIndex;
      if (f.type === RequestType.ADD) this.running[rank].add((f.decoded as { rid: string }).rid);
      if (f.type === RequestType.ABORT) {
        for (const id of f.decoded as string[]) {
          if (this.running[rank].delete(id)) this.abortedLate[rank].push(id);
        }
      }
    };
  }

  /** One batch per rank: a row for every running request (some terminal), late rows for aborted ids, a load. */
  async step(client: EngineClient): Promise<void> {
    for (let rank = 0; rank < this.running.length; rank++) {
      const rows = [];
      for (const id of [...this.running[rank]]) {
        const terminal = this.rand() < 0.25;
        rows.push(row(id, terminal ? (this.rand() < 0.9 ? 'stop' : 'abort') : null));
        if (terminal) this.running[rank].delete(id);
      }
      for (const id of this.abortedLate[rank].splice(0)) if (this.rand() < 0.5) rows.push(row(id));
      const withLoad = this.rand() < 0.7;
      // Sampled before this batch's finishes commit (engine-wire.md 4.9): they still count. Part of it as waiting
      // (vLLM-style disjoint counts). What a sole client's engine reports, so the sole-client guard stays off.
      const holding = this.running[rank].size + rows.filter((r) => r.finishReason !== null).length;
      const waiting = Math.floor(this.rand() * (holding + 1));
      const report = withLoad ? load(holding - waiting, waiting, this.rand()) : undefined;
      await this.link.deliverBatch(batch(rank, rows, report));
      checkInvariant(client);
      if (this.rand() < 0.5) await tick();
    }
  }
}

async function runScenario(seed: number, ranks: number, workers: number, perWorker: number): Promise<void> {
  const rand = prng(seed);
  const { client, link } = setup(ranks);
  const engines = new FakeEngines(link, rand);
  let next = 0;
  let finishedNormally = 0;
  let cancelled = 0;

  async function oneRequest(): Promise<void> {
    const id = `req-${next++}`;
    const roll = rand();
    const ac = rand() < 0.3 ? new AbortController() : undefined;
    const dpRank = rand() < 0.2 ? Math.floor(rand() * ranks) : undefined;
    const stream: RequestStream = await client.submit(req(id), { dpRank, signal: ac?.signal }).catch((e) => {
      // Only the signal path may reject here (it fired while the ADD was queued).
      assert.equal((e as Error).name, 'AbortError');
      return null as unknown as RequestStream;
    });
    if (!stream) return;
    checkInvariant(client);
    if (rand() < 0.5) await tick();
    if (roll < 0.35) {
      const r = await drain(stream);
      assert.equal(r.error, undefined);
      assert.notEqual(r.outputs.at(-1)?.finishReason ?? null, null);
      finishedNormally++;
    } else if (roll < 0.5) {
      for await (const _ of stream) break; // consumer leaves after one output (or at the end)
      cancelled++;
    } else if (roll < 0.65) {
      stream.cancel();
      if (rand() < 0.5) await tick();
      stream.cancel();
      cancelled++;
    } else if (roll < 0.8) {
      await client.abort(id);
      if (rand() < 0.5) stream.cancel();
      const r = await drain(stream);
      if (r.error) assert.equal((r.error as { kind?: string }).kind, 'stream-closed');
      cancelled++;
    } else if (ac) {
      await tick();
      ac.abort();
      ac.abort();
      cancelled++;
      assert.equal((await drain(stream)).error, undefined);
    } else {
      await drain(stream);
      finishedNormally++;
    }
    checkInvariant(client);
  }

  let active = workers;
  const workerTasks = Array.from({ length: workers }, async () => {
    try {
      for (let i = 0; i < perWorker; i++) {
        await oneRequest();
        if (rand() < 0.5) await tick();
      }
    } finally {
      active--;
    }
  });
  const engineTask = (async () => {
    while (active > 0) {
      await engines.step(client);
      await tick();
    }
  })();

  let guard: ReturnType<typeof setTimeout> | undefined;
  const hang = new Promise<never>((_, reject) => {
    guard = setTimeout(() => reject(new Error(`seed ${seed}: scenario hung`)), 30_000);
  });
  try {
    await Promise.race([Promise.all([...workerTasks, engineTask]), hang]);
  } finally {
    clearTimeout(guard);
  }

  assert.equal(client.registeredCount, 0);
  assert.deepEqual(
    inFlight(client),
    link.engines.map(() => 0),
    'every in-flight set is empty at the end',
  );
  assert.equal(finishedNormally + cancelled <= workers * perWorker, true);
  assert.ok(finishedNormally > 0 && cancelled > 0, 'both paths were exercised');
  // Every ABORT went to the rank that received the request's ADD, and never more than one per request.
  const addRank = new Map(link.adds().map((f) => [(f.decoded as { rid: string }).rid, f.engineIndex]));
  const abortedIds = new Set<string>();
  for (const f of link.aborts()) {
    const [id] = f.decoded as string[];
    assert.equal(f.engineIndex, addRank.get(id), `ABORT for ${id} went to the wrong rank`);
    assert.ok(!abortedIds.has(id), `two ABORTs for ${id}`);
    abortedIds.add(id);
  }
  assert.equal(client.stats.abortsSent, abortedIds.size);
  assert.equal(client.isAlive(), true);
  // Idle recovery (14.14 target 2): one more (stale) batch per rank and every stored queue count is 0.
  for (let rank = 0; rank < ranks; rank++) await link.deliverBatch(batch(rank, [], load(1, 1, 0.5)));
  for (const s of client.rankStates()) assert.equal(s.soleClientGuard, false, 'a sole client never engages the guard');
  for (const s of client.rankStates()) {
    if (s.load) assert.deepEqual([s.load.numRunning, s.load.numWaiting], [0, 0]);
  }
  await client.close();
}

test('concurrent submit/cancel/abort/finish sequences with yields leave every in-flight set empty (12.3 rule 7)', async () => {
  for (const [seed, ranks] of [
    [1, 4],
    [2, 2],
    [3, 3],
    [4, 8],
  ] as const) {
    await runScenario(seed, ranks, 8, 40);
  }
});
