/**
 * The dashboard's event list (src/server/gateway-events.ts, issue 32 part 4): a bounded ring with growing ids, rank and
 * group events as they come, 429 refusals and engine failures counted in bursts of one window each, and the open
 * windows bounded too. A fake wall clock throughout.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GatewayEvents, MAX_BURST_CODES, MAX_OPEN_BURSTS, recordGroupEvents } from '../../src/server/gateway-events.js';
import { EngineClientError } from '../../src/engine-client/errors.js';
import { FakeBackend } from './fake-backend.js';

/** A book on a clock the test moves (`clock.t`, Unix ms). */
function book(opts: { capacity?: number; burstWindowMs?: number } = {}): {
  events: GatewayEvents;
  clock: { t: number };
} {
  const clock = { t: 1_700_000_000_000 };
  return { events: new GatewayEvents({ ...opts, now: () => clock.t }), clock };
}

test('rank and group events: ids grow by one, newest last, with group, DP rank, cause and wall-clock time', () => {
  const { events, clock } = book();
  events.rankJoined('vllm-0', 0, false);
  clock.t += 10;
  events.rankStalled('vllm-0', 1);
  clock.t += 10;
  events.rankDied('vllm-0', 1, 'peer-unreachable');
  events.rankJoined('vllm-0', 1, true);
  events.groupFailed('vllm-1', 'watchdog');
  const list = events.list();
  assert.deepEqual(
    list.map((e) => [e.id, e.kind, e.group, e.dp_rank, e.cause, e.count]),
    [
      [1, 'rank_joined', 'vllm-0', 0, null, 1],
      [2, 'rank_stalled', 'vllm-0', 1, null, 1],
      [3, 'rank_died', 'vllm-0', 1, 'peer-unreachable', 1],
      [4, 'rank_rejoined', 'vllm-0', 1, null, 1],
      [5, 'group_failed', 'vllm-1', null, 'watchdog', 1],
    ],
  );
  assert.equal(list[0]!.timestamp, 1_700_000_000);
  assert.equal(list[2]!.timestamp, 1_700_000_000.02);
  assert.equal(list[2]!.message, 'DP rank 1 died (peer-unreachable)');
  assert.equal(list[4]!.message, 'engine group failed as a unit (watchdog)');
  assert.notEqual(events.list(), events.list(), 'a copy each time');
  assert.match(events.source, /^[0-9a-f]{12}$/);
  assert.notEqual(new GatewayEvents().source, events.source, 'each list has its own source');
});

test('the ring keeps the newest `capacity` events; ids go on growing', () => {
  const { events } = book({ capacity: 3 });
  for (let i = 0; i < 7; i++) events.rankJoined('g', i, false);
  assert.deepEqual(
    events.list().map((e) => [e.id, e.dp_rank]),
    [
      [5, 4],
      [6, 5],
      [7, 6],
    ],
  );
  assert.throws(() => new GatewayEvents({ capacity: 0 }), RangeError);
  assert.throws(() => new GatewayEvents({ burstWindowMs: 0 }), RangeError);
});

test('429 refusals: one event per burst window, with the count and the codes, stamped with the window end', () => {
  const { events, clock } = book({ burstWindowMs: 1000 });
  const start = clock.t;
  for (let i = 0; i < 5; i++) {
    events.refused('rate_limit_exceeded');
    clock.t += 100;
  }
  events.refused('overloaded');
  assert.deepEqual(events.list(), [], 'the window is still open at 500 ms');
  clock.t = start + 1000;
  const [burst, ...rest] = events.list();
  assert.deepEqual(rest, []);
  assert.equal(burst!.kind, 'refused');
  assert.equal(burst!.count, 6);
  assert.equal(burst!.group, null);
  assert.equal(burst!.timestamp, (start + 1000) / 1000);
  assert.equal(burst!.message, '429 ×6 in 1 s (rate_limit_exceeded ×5, overloaded ×1)');
  // The next refusal opens a new window; an event recorded after its end comes after it.
  events.refused(null);
  clock.t += 1500;
  events.rankDied('g', 0, 'engine-core-dead');
  assert.deepEqual(
    events.list().map((e) => [e.id, e.kind, e.count, e.message]),
    [
      [1, 'refused', 6, '429 ×6 in 1 s (rate_limit_exceeded ×5, overloaded ×1)'],
      [2, 'refused', 1, '429 ×1 in 1 s (other ×1)'],
      [3, 'rank_died', 1, 'DP rank 0 died (engine-core-dead)'],
    ],
  );
});

test('engine failures: engine codes only, one burst per group and DP rank', () => {
  const { events, clock } = book();
  events.engineFailed('vllm-0', 2, 'engine_dead');
  events.engineFailed('vllm-0', 2, 'engine_dead');
  events.engineFailed('vllm-0', 2, 'engine_fault');
  events.engineFailed('vllm-0', 3, 'engine_dead');
  events.engineFailed('vllm-0', null, 'decode');
  events.engineFailed('vllm-0', 2, 'invalid_request'); // not the engine's
  events.engineFailed('vllm-0', 2, 'unavailable'); // a refusal: no rank could take it
  clock.t += 1000;
  assert.deepEqual(
    events.list().map((e) => [e.kind, e.group, e.dp_rank, e.count, e.message]),
    [
      [
        'engine_errors',
        'vllm-0',
        2,
        3,
        '3 requests failed by the engine on DP rank 2 in 1 s (engine_dead ×2, engine_fault ×1)',
      ],
      ['engine_errors', 'vllm-0', 3, 1, '1 request failed by the engine on DP rank 3 in 1 s (engine_dead ×1)'],
      ['engine_errors', 'vllm-0', null, 1, '1 request failed by the engine in 1 s (decode ×1)'],
    ],
  );
});

test('bounded: open windows past MAX_OPEN_BURSTS share one without group or rank; codes past MAX_BURST_CODES are other', () => {
  const { events, clock } = book();
  for (let i = 0; i < MAX_OPEN_BURSTS + 10; i++) events.engineFailed(`g${i}`, 0, 'engine_dead');
  for (let i = 0; i < MAX_BURST_CODES + 5; i++) events.refused(`code_${i}`);
  clock.t += 1000;
  const list = events.list();
  const failures = list.filter((e) => e.kind === 'engine_errors');
  assert.equal(failures.length, MAX_OPEN_BURSTS + 1);
  const shared = failures.filter((e) => e.group === null);
  assert.equal(shared.length, 1);
  assert.equal(shared[0]!.count, 10, 'one window without group took the 10 past the bound');
  const refused = list.find((e) => e.kind === 'refused')!;
  assert.equal(refused.count, MAX_BURST_CODES + 5);
  assert.equal(refused.message.split(', ').length, MAX_BURST_CODES);
  assert.match(refused.message, /other ×6\)$/);
});

test("recordGroupEvents: a backend's joined, rank and failed events become the group's events", () => {
  const { events } = book();
  const backend = new FakeBackend({ ranks: [0, 1] });
  recordGroupEvents(events, { worker: 'ipc:///tmp/x', name: 'tokenspeed-0', engine: 'tokenspeed', backend });
  backend.emitJoined(1, false);
  backend.emitEvent('rank', 1, 'stalled', 'stall');
  backend.emitEvent('rank', 1, 'ready', null); // back: not an event of its own
  backend.emitEvent('rank', 1, 'dead', 'send-timeout');
  backend.emitEvent('rank', 1, 'joining', null);
  backend.emitJoined(1, true);
  backend.emitEvent('failed', new EngineClientError('engine-dead', 'no output'), 'watchdog');
  assert.deepEqual(
    events.list().map((e) => [e.kind, e.group, e.dp_rank, e.cause]),
    [
      ['rank_joined', 'tokenspeed-0', 1, null],
      ['rank_stalled', 'tokenspeed-0', 1, null],
      ['rank_died', 'tokenspeed-0', 1, 'send-timeout'],
      ['rank_rejoined', 'tokenspeed-0', 1, null],
      ['group_failed', 'tokenspeed-0', null, 'watchdog'],
    ],
  );
  assert.ok(
    events.list().every((e) => !e.message.includes('ipc://')),
    'no socket path',
  );
});
