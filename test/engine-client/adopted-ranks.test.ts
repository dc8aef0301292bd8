/**
 * Ranks adopted after a gateway restart (issue 26 part 6; src/engine-client/foreign-requests.ts), through the engine
 * client over the fake link: an adopted rank joins like a handshaken one (ready, no stored load, empty in-flight set,
 * logged as adopted), serves requests, and the ids it still runs for the dead gateway are ABORTed once each (not
 * terminal ones, not again, not on a rank that joined through a handshake); a rank that re-handshakes is a new
 * process whose unknown rows are left alone.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MAX_FOREIGN_IDS, ForeignRequests } from '../../src/engine-client/foreign-requests.js';
import { captureLogs } from '../helpers/logs.js';
import { batch, drain, inFlight, load, makeEngines, req, row, setup, states } from './fakes.js';

test("an adopted rank serves at once and its rows for the dead gateway's requests are ABORTed once each", async () => {
  const { logger, records } = captureLogs('info');
  const { client, link } = setup(0, { dpSize: 2, logger });
  const [e0, e1] = makeEngines(2);
  link.join({ ...e0!, adopted: true });
  link.join(e1!); // a handshaken rank
  assert.deepEqual(states(client), ['ready', 'ready']);
  assert.deepEqual(inFlight(client), [0, 0]);
  assert.deepEqual(
    client.rankStates().map((s) => s.load),
    [null, null],
  );
  assert.ok(
    records.some((r) => r.msg === "DP rank 0 adopted from the previous gateway's handshake" && r['adopted'] === true),
  );
  assert.ok(records.some((r) => r.msg === 'DP rank 1 joined'));

  const own = await client.submit(req('own'), { dpRank: 0 });
  // The adopted rank still runs `old-a` and `old-b` for the dead gateway; `old-c` ends in this batch.
  await link.deliverBatch(batch(0, [row('old-a'), row('old-b'), row('own'), row('old-c', 'length')], load(3, 0, 0.2)));
  const foreign = () =>
    link
      .aborts()
      .filter((f) => (f.decoded as string[]).length > 0)
      .map((f) => [f.engineIndex, ...(f.decoded as string[])]);
  assert.deepEqual(foreign(), [[0, 'old-a', 'old-b']]);
  await link.deliverBatch(batch(0, [row('old-a'), row('old-b'), row('own', 'stop')]));
  assert.deepEqual(foreign(), [[0, 'old-a', 'old-b']], 'each foreign id is ABORTed once');
  assert.equal((await drain(own)).outputs.at(-1)?.finishReason, 'stop', "this gateway's own request is served");
  assert.equal(records.filter((r) => r.msg.includes('still runs requests of the previous gateway')).length, 1);

  // A handshaken rank's unknown rows (late rows after a cancel, dp-routing.md 2) are not ABORTed by this path.
  await link.deliverBatch(batch(1, [row('late-1')]));
  assert.deepEqual(foreign(), [[0, 'old-a', 'old-b']]);

  // Rank 0 re-handshakes (a new process): nothing of the dead gateway can run there any more.
  link.join(e0!);
  await link.deliverBatch(batch(0, [row('old-d')]));
  assert.deepEqual(foreign(), [[0, 'old-a', 'old-b']]);
  await client.close();
});

test('the ABORTed-id memory is bounded (oldest forgotten first) and forgets ranks', () => {
  const f = new ForeignRequests();
  assert.deepEqual(f.toAbort(0, ['x'], new Set()), { ids: [], first: false }, 'not adopted');
  f.adopt(0);
  assert.deepEqual(f.toAbort(0, ['x', 'y'], new Set(['y'])), { ids: ['x'], first: true });
  assert.deepEqual(f.toAbort(0, ['x'], new Set()), { ids: [], first: false });
  for (let i = 0; i < MAX_FOREIGN_IDS; i++) f.toAbort(0, [`id-${i}`], new Set());
  assert.deepEqual(f.toAbort(0, ['x'], new Set()).ids, ['x'], 'the oldest id was forgotten: ABORTed again (harmless)');
  f.forget(0);
  assert.equal(f.isAdopted(0), false);
  assert.deepEqual(f.toAbort(0, ['z'], new Set()).ids, []);
});
