/**
 * The group kind (issue #14; src/engine-client/waves.ts): lockstep forced by the option, decided by the ready
 * responses' `data_parallel_size`, or — when a rank sent the short ready response without it — detected from the first
 * wave notification; and the no-hang guarantee before detection (one probe wake after the first submit, a wake at
 * detection when requests are in flight).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { RequestType, type EngineBatch, type WaveEvent } from '../../src/protocols/types.js';
import { WaveClock } from '../../src/engine-client/waves.js';
import { prng } from '../helpers/prng.js';
import { READY, batch, drain, makeEngines, req, row, setup, type SentFrame } from './fakes.js';

/** A wave notification batch from `rank` (engine-wire.md 5.8: an otherwise empty envelope). */
function waveBatch(rank: number, kind: WaveEvent['kind'], wave: number): EngineBatch {
  return { engineIndex: rank, outputs: [], finishedRequestIds: [], wave: { kind, wave } };
}

/** [type, engineIndex, decoded] of each frame. */
function frames(sent: readonly SentFrame[]): [string, number, unknown][] {
  const name = (t: number) => (t === RequestType.ADD ? 'ADD' : t === RequestType.START_DP_WAVE ? 'WAVE' : `?${t}`);
  return sent.map((f) => [
    name(f.type),
    f.engineIndex,
    f.type === RequestType.ADD ? (f.decoded as { rid: string }).rid : f.decoded,
  ]);
}

/** A pino logger writing parsed lines into `lines`. */
function capture(level = 'info'): { logger: pino.Logger; lines: Array<{ msg: string; level: number }> } {
  const lines: Array<{ msg: string; level: number }> = [];
  return { logger: pino({ level }, { write: (line: string) => void lines.push(JSON.parse(line)) }), lines };
}

test('WaveClock kind: from the option, else from data_parallel_size, else unknown until a wave notification', () => {
  const short = makeEngines(2, { dataParallelSize: null });
  const mixed = makeEngines(2);
  mixed[1] = { ...mixed[1], ready: { ...READY, dataParallelSize: null } };
  const cases: Array<[string, WaveClock, string, string | null]> = [
    ['all short: unknown', new WaveClock(short), 'unknown', null],
    ['one short, one says 1: unknown', new WaveClock(mixed), 'unknown', null],
    ['all say 1: dense', new WaveClock(makeEngines(2)), 'dense', 'ready-response'],
    ['one says 2: lockstep', new WaveClock(makeEngines(2, { dataParallelSize: 2 })), 'lockstep', 'ready-response'],
    ['forced lockstep over dp 1', new WaveClock(makeEngines(2), true), 'lockstep', 'option'],
    ['forced lockstep over short', new WaveClock(short, true), 'lockstep', 'option'],
    ['forced dense over dp 2', new WaveClock(makeEngines(2, { dataParallelSize: 2 }), false), 'dense', 'option'],
  ];
  for (const [what, clock, kind, source] of cases) {
    assert.equal(clock.kind, kind, what);
    assert.equal(clock.decidedBy, source, what);
    assert.equal(clock.lockstep, kind === 'lockstep', what);
    assert.equal(clock.value, kind === 'lockstep' ? 0 : null, what);
  }
});

test('WaveClock.submitWake: lockstep bumps every time, unknown only the first time (the probe), dense never', () => {
  const lockstep = new WaveClock(makeEngines(2), true);
  assert.deepEqual([lockstep.submitWake(), lockstep.submitWake(), lockstep.submitWake()], [1, 2, 3]);
  const dense = new WaveClock(makeEngines(2));
  assert.deepEqual([dense.submitWake(), dense.submitWake()], [null, null]);
  const unknown = new WaveClock(makeEngines(2, { dataParallelSize: null }));
  assert.deepEqual([unknown.submitWake(), unknown.submitWake(), unknown.submitWake()], [1, null, null]);
  assert.equal(unknown.bump(), null, 'no wake_group() while the kind is unknown');
  assert.equal(unknown.value, null);
});

test('WaveClock.observe: detection on an unknown group; a wake only when busy; dense groups ignore notices', () => {
  const idle = new WaveClock(makeEngines(2, { dataParallelSize: null }));
  idle.submitWake(); // probe: [1, nil]
  assert.equal(idle.observe({ kind: 'complete', wave: 1 }, false), 'updated', 'detected, nothing in flight: no wake');
  assert.deepEqual([idle.kind, idle.decidedBy, idle.value], ['lockstep', 'wave-notification', 2]);
  assert.equal(idle.submitWake(), 3, 'from now on every submit wakes');
  assert.equal(
    idle.observe({ kind: 'complete', wave: 3 }, true),
    'updated',
    'after detection, complete never wakes (13.3)',
  );

  const busy = new WaveClock(makeEngines(2, { dataParallelSize: null }));
  busy.submitWake();
  assert.equal(busy.observe({ kind: 'complete', wave: 1 }, true), 'wake', 'detected with requests in flight: wake');
  assert.equal(busy.bump(), 3);

  const started = new WaveClock(makeEngines(2, { dataParallelSize: null }));
  assert.equal(started.observe({ kind: 'start', wave: 4 }), 'wake', 'start(w) detects and wakes');
  assert.equal(started.value, 4);

  assert.equal(new WaveClock(makeEngines(2), false).observe({ kind: 'start', wave: 1 }, true), 'ignored');
  const dense = new WaveClock(makeEngines(2));
  assert.equal(
    dense.observe({ kind: 'complete', wave: 1 }, true),
    'ignored',
    'data_parallel_size 1 is authoritative (13.1)',
  );
  assert.equal(dense.kind, 'dense');
});

test('WaveClock.rebuild: clock back to 0 and a new probe; the option and a detected lockstep kind carry over', () => {
  const detected = new WaveClock(makeEngines(2, { dataParallelSize: null }));
  detected.submitWake();
  detected.observe({ kind: 'complete', wave: 5 });
  const r = detected.rebuild(makeEngines(2, { dataParallelSize: null }));
  assert.deepEqual([r.kind, r.decidedBy, r.value], ['lockstep', 'wave-notification', 0]);
  const forced = new WaveClock(makeEngines(2), false).rebuild(makeEngines(2, { dataParallelSize: 2 }));
  assert.deepEqual([forced.kind, forced.setting], ['dense', false]);
  const unknown = new WaveClock(makeEngines(2, { dataParallelSize: null }));
  unknown.submitWake();
  assert.equal(unknown.rebuild(makeEngines(2, { dataParallelSize: null })).submitWake(), 1, 'a fresh probe');
});

test('client, unknown group (short ready responses): the first submit wakes every rank once; later ones do not', async () => {
  const { logger, lines } = capture();
  const { client, link } = setup(makeEngines(2, { dataParallelSize: null }), { waves: true, logger });
  assert.deepEqual(client.groupKind, { kind: 'unknown', decidedBy: null });
  assert.equal(client.lockstep, false);
  const a = await client.submit(req('a'), { dpRank: 1 });
  const b = await client.submit(req('b'), { dpRank: 0 });
  assert.deepEqual(frames(link.sent), [
    ['ADD', 1, 'a'],
    ['WAVE', 0, [1, null]],
    ['WAVE', 1, [1, null]],
    ['ADD', 0, 'b'],
  ]);
  // The group turns out lockstep: rank 1 drained wave 1 while `b` waits on parked rank 0 → detected, and woken.
  await link.deliverBatch(batch(1, [row('a', 'stop')]));
  await link.deliverBatch(waveBatch(1, 'complete', 1));
  assert.deepEqual(client.groupKind, { kind: 'lockstep', decidedBy: 'wave-notification' });
  assert.deepEqual(
    frames(link.sent.slice(4)),
    [
      ['WAVE', 0, [3, null]],
      ['WAVE', 1, [3, null]],
    ],
    'clock max(1, 2) = 2, wake names 3',
  );
  assert.equal(
    lines.filter((l) => /lockstep group detected from a wave notification/.test(l.msg)).length,
    1,
    JSON.stringify(lines),
  );
  await client.submit(req('c'));
  assert.deepEqual(
    link
      .waves()
      .slice(4)
      .map((f) => f.decoded),
    [
      [4, null],
      [4, null],
    ],
    'every submit wakes now',
  );
  await link.deliverBatch(batch(0, [row('b', 'stop')]));
  assert.equal((await drain(a)).error, undefined);
  assert.equal((await drain(b)).error, undefined);
  await client.close();
});

test('client, unknown group that is dense: one probe wake in its lifetime, wave-free afterwards', async () => {
  const { client, link } = setup(makeEngines(3, { dataParallelSize: null }), { waves: true });
  for (const id of ['a', 'b', 'c', 'd']) {
    const s = await client.submit(req(id));
    await link.deliverBatch(batch(link.rankOf(id), [row(id, 'stop')]));
    await drain(s);
  }
  assert.deepEqual(
    link.waves().map((f) => [f.engineIndex, f.decoded]),
    [
      [0, [1, null]],
      [1, [1, null]],
      [2, [1, null]],
    ],
  );
  assert.deepEqual(
    client.groupKind,
    { kind: 'unknown', decidedBy: null },
    'a dense engine never sends a wave notification',
  );
  await client.close();
});

test('client: lockstep forced by the option wakes on every submit; forced dense ignores notices and never wakes', async () => {
  const forced = setup(makeEngines(2), { waves: true, lockstep: true });
  assert.deepEqual(forced.client.groupKind, { kind: 'lockstep', decidedBy: 'option' });
  await forced.client.submit(req('a'));
  await forced.client.submit(req('b'));
  assert.deepEqual(
    forced.link.waves().map((f) => f.decoded),
    [
      [1, null],
      [1, null],
      [2, null],
      [2, null],
    ],
  );
  await forced.client.close();

  const { logger, lines } = capture('warn');
  const dense = setup(makeEngines(2, { dataParallelSize: 2 }), { waves: true, lockstep: false, logger });
  assert.deepEqual(dense.client.groupKind, { kind: 'dense', decidedBy: 'option' });
  await dense.client.submit(req('a'));
  await dense.link.deliverBatch(waveBatch(0, 'start', 3));
  assert.equal(dense.link.waves().length, 0);
  assert.equal(dense.client.waveClock, null);
  assert.equal(lines.filter((l) => /configured dense/.test(l.msg)).length, 1, JSON.stringify(lines));
  await dense.client.close();
});

test('no hang before detection: a model lockstep group that parks at random, with late notices, never strands a request', async () => {
  // The group model of engine-wire.md 5.12 (as in waves.test.ts), for a group of unknown kind: it starts parked at
  // wave 0; START(w) with w < wave is ignored (asserted never to happen); a parked group holds new requests; draining
  // parks it (wave + 1) and queues a wave_complete that reaches the client late. Invariant: whenever the group is
  // parked with requests in flight, a notice is still on its way (delivering it detects the kind and wakes).
  const rand = prng(14);
  for (let round = 0; round < 20; round++) {
    const { client, link } = setup(makeEngines(2, { dataParallelSize: null }), { waves: true });
    const group = { wave: 0, running: false };
    const held = new Set<string>();
    const notices: number[] = [];
    link.sendHook = (f) => {
      if (f.type !== RequestType.START_DP_WAVE) return;
      const [w] = f.decoded as [number, null];
      assert.ok(w >= group.wave, `START_DP_WAVE [${w}, nil] is below the ranks' wave ${group.wave}`);
      if (!group.running) {
        group.wave = w;
        group.running = true;
      }
    };
    const check = (what: string) => {
      if (!group.running && held.size > 0)
        assert.ok(
          notices.length > 0,
          `round ${round}, ${what}: parked with ${held.size} request(s) and no notice coming`,
        );
    };
    let n = 0;
    for (let step = 0; step < 60; step++) {
      const r = rand();
      if (r < 0.4) {
        const id = `q${n++}`;
        await client.submit(req(id));
        held.add(id);
        check(`after submit ${id}`);
      } else if (r < 0.65 && group.running) {
        for (const id of held) await link.deliverBatch(batch(link.rankOf(id), [row(id, 'stop')]));
        held.clear();
        group.running = false;
        group.wave += 1;
        notices.push(group.wave - 1);
      } else if (notices.length > 0) {
        const [w] = notices.splice(Math.floor(rand() * notices.length), 1);
        await link.deliverBatch(waveBatch(Math.floor(rand() * 2), 'complete', w));
        check(`after notice ${w}`);
      }
    }
    while (notices.length > 0) await link.deliverBatch(waveBatch(0, 'complete', notices.shift()!));
    if (held.size > 0) assert.equal(group.running, true, `round ${round}: requests left on a parked group`);
    if (n > 0) assert.equal(client.lockstep, true, 'the first wave detected the kind');
    await client.close();
  }
});
