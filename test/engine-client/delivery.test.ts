/**
 * Sliced delivery (issue 9, a responsive loop; src/engine-client/delivery-queue.ts): a batch's routing state is
 * applied in one synchronous step, its rows reach the push-mode listeners in slices with a turn of the event loop
 * between them, in order per request, with a bounded backlog, and a request cancelled or aborted between slices hears
 * nothing more. The slice budget runs on a fake clock that each delivered output advances by 1 ms, so how many
 * outputs fit in a slice is deterministic (no wall-clock assertion).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DeliveryQueue, type DeliveryTarget } from '../../src/engine-client/delivery-queue.js';
import type { RequestStream } from '../../src/engine-client/request-stream.js';
import type { EngineOutput } from '../../src/protocols/types.js';
import { batch, inFlight, req, row, setup, tick } from './fakes.js';

/** A fake clock in ms; every listened output costs 1 ms of it. */
function fakeClock(): { now: () => number; spend: (ms: number) => void } {
  let t = 0;
  return { now: () => t, spend: (ms) => void (t += ms) };
}

type LogEntry = string;

/** Listen to `stream`, logging `id:token`, `id:finish:<reason>` and `id:error`; each output spends 1 ms. */
function listenLogged(
  stream: RequestStream,
  log: LogEntry[],
  spend: (ms: number) => void,
  onOutput?: (o: EngineOutput) => void,
): void {
  stream.listen!({
    output: (o) => {
      spend(1);
      log.push(
        o.finishReason === null
          ? `${stream.requestId}:${o.newTokenIds.join(',')}`
          : `${stream.requestId}:finish:${o.finishReason}`,
      );
      onOutput?.(o);
    },
    error: () => log.push(`${stream.requestId}:error`),
  });
}

/** Record a `turn` in `log` on every macrotask turn until `stop()`. */
function markTurns(log: LogEntry[]): { stop: () => void } {
  let on = true;
  const mark = (): void => {
    if (!on) return;
    log.push('turn');
    setImmediate(mark);
  };
  setImmediate(mark);
  return { stop: () => void (on = false) };
}

/** Wait until `done()` holds, one macrotask at a time (at most `turns`). */
async function until(done: () => boolean, turns = 200): Promise<void> {
  for (let i = 0; i < turns && !done(); i++) await tick();
  assert.ok(done(), 'condition not reached');
}

test('a large batch reaches its listeners in slices with a turn between them, in order per request; routing state is applied at once', async () => {
  const clock = fakeClock();
  const { client, link } = setup(1, { delivery: { budgetMs: 4, checkEvery: 1, now: clock.now } });
  const ids = Array.from({ length: 10 }, (_, i) => `r${i}`);
  const log: LogEntry[] = [];
  const streams = await Promise.all(ids.map((id) => client.submit(req(id))));
  for (const s of streams) listenLogged(s, log, clock.spend);
  const turns = markTurns(log);
  // Two token batches and a terminal one, back to back: 30 outputs at 1 ms each, 4 ms per slice.
  await link.deliverBatch(
    batch(
      0,
      ids.map((id) => row(id, null, [1])),
    ),
  );
  await link.deliverBatch(
    batch(
      0,
      ids.map((id) => row(id, null, [2])),
    ),
  );
  await link.deliverBatch(
    batch(
      0,
      ids.map((id) => row(id, 'length', [3])),
    ),
  );
  // The routing state did not wait for the listeners: every request is released already.
  assert.deepEqual(inFlight(client), [0]);
  assert.equal(client.registeredCount, 0);
  await until(() => log.filter((e) => e.includes(':finish:')).length === ids.length);
  turns.stop();

  const outputs = log.filter((e) => e !== 'turn');
  assert.equal(outputs.length, 30);
  // Batch order overall (one FIFO), so per request: token 1, token 2, then its finish.
  assert.deepEqual(outputs, [
    ...ids.map((id) => `${id}:1`),
    ...ids.map((id) => `${id}:2`),
    ...ids.map((id) => `${id}:finish:length`),
  ]);
  // Slices of at most 4 outputs, each pair separated by at least one turn of the loop.
  const runs = log
    .join(' ')
    .split('turn')
    .map(
      (part) =>
        part
          .trim()
          .split(' ')
          .filter((e) => e !== '').length,
    )
    .filter((n) => n > 0);
  assert.ok(runs.length >= Math.ceil(30 / 4), `slices: ${runs.join(',')}`);
  assert.ok(
    runs.every((n) => n <= 4),
    `slices: ${runs.join(',')}`,
  );
  await client.close();
});

test('a request cancelled between slices hears nothing more; one aborted gets only its stream-closed error', async () => {
  const clock = fakeClock();
  const { client, link } = setup(1, { delivery: { budgetMs: 4, checkEvery: 1, now: clock.now } });
  const ids = ['a', 'b', 'c', 'd', 'e', 'f', 'x', 'y'];
  const log: LogEntry[] = [];
  const streams = new Map<string, RequestStream>();
  for (const id of ids) streams.set(id, await client.submit(req(id)));
  let acted = false;
  for (const [id, s] of streams) {
    listenLogged(s, log, clock.spend, () => {
      if (id !== 'a' || acted) return;
      acted = true;
      // Inside the first slice: x and y still have rows queued behind it.
      streams.get('x')!.cancel(); // a client disconnect (GenerationRun.fail → cancel)
      void client.abort('y'); // an explicit abort
    });
  }
  const turns = markTurns(log);
  await link.deliverBatch(
    batch(
      0,
      ids.map((id) => row(id, null, [1])),
    ),
  );
  await until(() => acted);
  // The engine finishes the others (x and y were ABORTed while their first rows were still queued).
  const rest = ids.filter((id) => id !== 'x' && id !== 'y');
  await link.deliverBatch(
    batch(
      0,
      rest.map((id) => row(id, 'stop', [2])),
    ),
  );
  await until(() => log.filter((e) => e.includes(':finish:')).length === rest.length);
  for (let i = 0; i < 3; i++) await tick();
  turns.stop();

  const of = (id: string) => log.filter((e) => e.startsWith(`${id}:`));
  assert.deepEqual(of('x'), [], 'cancelled: nothing after the cancel');
  assert.deepEqual(of('y'), ['y:error'], 'aborted: its terminal error, none of its queued outputs');
  for (const id of ['a', 'b', 'c', 'd', 'e', 'f']) assert.deepEqual(of(id), [`${id}:1`, `${id}:finish:stop`]);
  // Both were retired with an ABORT to their rank; nothing leaked.
  assert.deepEqual(
    link
      .aborts()
      .map((f) => f.decoded)
      .sort(),
    [['x'], ['y']],
  );
  assert.deepEqual(inFlight(client), [0]);
  assert.ok(log.indexOf('turn') < log.indexOf('f:1'), 'the batch took more than one slice');
  await client.close();
});

test('the dispatcher stops reading engine output while the backlog is at its bound', async () => {
  const clock = fakeClock();
  const slices: Array<() => void> = [];
  const { client, link } = setup(1, {
    delivery: { budgetMs: 4, checkEvery: 1, maxPending: 4, now: clock.now, defer: (run) => slices.push(run) },
  });
  const ids = Array.from({ length: 12 }, (_, i) => `q${i}`);
  const log: LogEntry[] = [];
  for (const id of ids) listenLogged(await client.submit(req(id)), log, clock.spend);
  let firstRead = false;
  let secondRead = false;
  void link
    .deliverBatch(
      batch(
        0,
        ids.map((id) => row(id, null, [1])),
      ),
    )
    .then(() => (firstRead = true));
  void link
    .deliverBatch(
      batch(
        0,
        ids.map((id) => row(id, 'length', [2])),
      ),
    )
    .then(() => (secondRead = true));
  await tick();
  // Routed, nothing handed yet: the first slice is a turn of its own. 12 queued ≥ 4: the next message is not taken.
  assert.equal(log.length, 0);
  assert.equal(slices.length, 1);
  slices.shift()!(); // 4 handed, 8 queued
  await tick();
  assert.equal(log.length, 4);
  assert.equal(firstRead, false);
  assert.equal(client.registeredCount, 12, 'the terminal batch has not been read');
  slices.shift()!(); // 4 queued: still at the bound
  await tick();
  assert.equal(firstRead, false);
  slices.shift()!(); // empty: the dispatcher reads on
  await tick();
  assert.equal(firstRead, true);
  assert.equal(client.registeredCount, 0);
  while (slices.length > 0) {
    slices.shift()!();
    await tick();
  }
  assert.equal(secondRead, true);
  assert.deepEqual(log, [...ids.map((id) => `${id}:1`), ...ids.map((id) => `${id}:finish:length`)]);
  await client.close();
});

test('DeliveryQueue: FIFO across targets, one clock read per checkEvery hand-offs, references dropped once handed', () => {
  let t = 0;
  let reads = 0;
  const deferred: Array<() => void> = [];
  const soon: Array<() => void> = [];
  const q = new DeliveryQueue({
    budgetMs: 3,
    checkEvery: 2,
    now: () => (reads++, t),
    defer: (r) => deferred.push(r),
    soon: (r) => soon.push(r),
  });
  const got: string[] = [];
  const target = (name: string): DeliveryTarget => ({
    handQueued: (v) => {
      t += 1;
      got.push(`${name}:${v instanceof Error ? 'error' : (v as EngineOutput).newTokenIds[0]}`);
    },
  });
  const a = target('a');
  const b = target('b');
  const out = (n: number) => ({ newTokenIds: [n] }) as unknown as EngineOutput;
  for (let i = 0; i < 4; i++) {
    q.push(a, out(i));
    q.push(b, out(i));
  }
  q.push(b, new Error('end'));
  assert.equal(q.pending, 9);
  assert.equal(soon.length, 1, 'one first slice scheduled');
  assert.equal(q.whenBelowLimit(), null);
  soon.shift()!();
  // Checked after 2 and 4 hand-offs (elapsed 2, then 4 ≥ 3): a slice of 4, the rest deferred.
  assert.deepEqual(got, ['a:0', 'b:0', 'a:1', 'b:1']);
  assert.equal(reads, 3);
  assert.equal(q.pending, 5);
  deferred.shift()!();
  deferred.shift()!();
  assert.deepEqual(got.slice(4), ['a:2', 'b:2', 'a:3', 'b:3', 'b:error']);
  assert.equal(q.pending, 0);
  assert.equal(deferred.length, 0);
  assert.equal(q.slices, 3);
  q.push(a, out(9));
  assert.equal(soon.length, 1, 'an idle queue schedules a new first slice');
  assert.throws(() => new DeliveryQueue({ budgetMs: 0 }), RangeError);
  assert.throws(() => new DeliveryQueue({ checkEvery: 0 }), RangeError);
  assert.throws(() => new DeliveryQueue({ maxPending: 1.5 }), RangeError);
});
