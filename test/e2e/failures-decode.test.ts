/**
 * End to end, undecodable engine output (issue #3 part 4; dp-routing.md 6, SMG PR #2175; gateway.md 15.3): raw
 * frames that neither wire can decode (`GARBAGE`, none of them the ENGINE_CORE_DEAD sentinel) are pushed into a
 * group's output socket by a ZeroMQ PUSH connected to its ipc endpoint, where they arrive like a rank's output.
 * (d) Three consecutive undecodable messages fail a lockstep vLLM group as a unit (no frame names a rank: group
 *     scope, issue #8 part 1): every in-flight request ends with a terminal error, every rank is marked dead (they
 *     come back by dialing in again), the group is reported unable to serve and the TokenSpeed group keeps serving.
 * (e) A single undecodable message is logged, counted (`model_gateway_decode_errors_total`) and skipped in both
 *     engine families while real requests keep streaming; requests submitted after it complete, so decodable output
 *     followed it and reset the consecutive count: two more later do not fail the group either.
 *
 * Determinism: the ranks step every ~40 ms, so a burst of three frames sent back to back is normally read without a
 * rank's batch in between; should one slip in (the PULL fair-queues its peers), the burst is repeated (bounded),
 * which still tests "3 in a row". The skip test proves decodable output followed the skipped message by requests
 * submitted after it completing, not by timing.
 *
 * In-process only (not in `npm run test:e2e:workers`): it injects undecodable frames into a group's output socket and
 * checks the engine client's decode-error and failure counters and lockstep flag directly, through FailureScenario
 * (failures.test.ts).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startGateway, type RunningGroup } from '../../src/gateway.js';
import {
  FailureScenario,
  FrameInjector,
  GARBAGE,
  LONG,
  MODEL,
  SHORT,
  SIM_ARGS,
  TEST_TIMEOUT,
  captureLogs,
  inFlight,
  ms,
  sendCompletion,
  workerCounter,
  type SentRequest,
} from './failure-helpers.js';
import { waitUntil } from './spread-helpers.js';

/** Bursts of 3 garbage messages tried before giving up (each normally fails the group at once). */
const MAX_BURSTS = 10;

test('(d) 3 consecutive undecodable outputs fail a lockstep vLLM group; the TokenSpeed group keeps serving', TEST_TIMEOUT, async (t) => {
  const s = await FailureScenario.start({
    failing: { engine: 'vllm', sim: 2, lockstep: true, simArgs: [...SIM_ARGS] },
    healthy: { engine: 'tokenspeed', sim: 1, simArgs: [...SIM_ARGS] },
  });
  t.after(() => s.close());
  assert.equal(s.failing.client.lockstep, true);
  const load = await s.placeLoad();

  const injector = FrameInjector.connect(s.failing.endpoints.output);
  t.after(() => injector.close());
  const inducedAt = performance.now();
  let bursts = 0;
  let sent = 0;
  while (s.failing.client.canServe() && bursts < MAX_BURSTS) {
    bursts++;
    for (const frames of GARBAGE) await injector.send(frames);
    sent += GARBAGE.length;
    await waitUntil(
      () => !s.failing.client.canServe() || s.failing.client.stats.decodeErrors >= sent,
      'the garbage burst was read',
      () => s.failing.client.stats,
    );
  }
  const report = await s.awaitGroupFailure(load, inducedAt, /3 consecutive undecodable engine output messages/);
  assert.equal(s.failedEvent!.kind, 'decode');
  // Garbage still queued when the group failed is read and counted too, so at least 3 and at most `sent`.
  const counted = s.failing.client.stats.decodeErrors;
  assert.ok(counted >= 3 && counted <= sent, `decode errors counted: ${counted} of ${sent} sent`);
  await s.assertFailedGroupReported(['decode-errors']);
  assert.equal(await workerCounter(s.gateway.url, 'model_gateway_decode_errors_total', s.failing.worker), counted);
  assert.equal(await workerCounter(s.gateway.url, 'model_gateway_decode_errors_total', s.healthy.worker), 0);
  t.diagnostic(`(d) 3 undecodable outputs (${bursts} burst(s) of 3 sent, ${counted} counted): group failed ${ms(report.failedAt - inducedAt)} after the first garbage frame was sent`);
  for (const line of report.lines) t.diagnostic(`(d)   ${line}`);
  await s.assertServesAndDrains(report.survivors, 'all');
});

test('(e) a single undecodable output is logged, counted and skipped while real requests keep streaming (TokenSpeed and vLLM)', TEST_TIMEOUT, async (t) => {
  const { logger, records } = captureLogs('warn');
  const gateway = await startGateway({
    port: 0,
    logger,
    modelId: MODEL,
    groups: [
      { engine: 'tokenspeed', sim: 1, simArgs: [...SIM_ARGS] },
      { engine: 'vllm', sim: 1, simArgs: [...SIM_ARGS] },
    ],
  });
  const opened: SentRequest[] = [];
  const injectors: FrameInjector[] = [];
  t.after(async () => {
    for (const i of injectors) i.close();
    for (const r of opened) r.cancel();
    await Promise.all(opened.map((r) => r.done));
    await gateway.close();
  });
  const groups = gateway.groups as readonly RunningGroup[];

  // One long stream per group (each group has one rank; the second stream goes to the group that is still idle).
  for (let i = 0; i < 2; i++) {
    const r = sendCompletion(gateway.url, LONG, { stream: true, label: `stream #${i}` });
    opened.push(r);
    assert.equal(await r.headers, 200);
  }
  assert.deepEqual(groups.map(inFlight), [[1], [1]]);
  await waitUntil(() => opened.every((r) => (r.progress()?.text.length ?? 0) > 0), 'both streams are streaming');

  const errorsOf = (g: RunningGroup) => workerCounter(gateway.url, 'model_gateway_decode_errors_total', g.worker);
  for (const g of groups) assert.equal(await errorsOf(g), 0);

  // One garbage message into each group's output socket.
  const injectedAt = performance.now();
  for (const g of groups) {
    const injector = FrameInjector.connect(g.endpoints.output);
    injectors.push(injector);
    await injector.send(GARBAGE[0]!);
  }
  await waitUntil(() => groups.every((g) => g.client.stats.decodeErrors === 1), 'each group counted one decode error', () => groups.map((g) => g.client.stats));
  const countedAt = performance.now();
  const textAtSkip = opened.map((r) => r.progress()!.text.length);
  for (const g of groups) {
    assert.ok(g.client.canServe(), `${g.engine} group still serving after one undecodable message`);
    assert.deepEqual(g.client.stats.failures, {});
    assert.equal(await errorsOf(g), 1, `${g.engine}: model_gateway_decode_errors_total counts the skipped message`);
    const logged = records.filter((r) => r.msg === 'skipping an undecodable engine output message' && r['worker'] === g.worker);
    assert.equal(logged.length, 1, `${g.engine}: the skip is logged once at warn`);
    assert.equal(logged[0]!['consecutive'], 1);
  }

  // Short requests submitted now complete in each group (sent one at a time until both groups served one: the tie
  // between the groups goes to a rotating scan start): their outputs were decoded after the skipped message, so
  // decodable output followed it and reset the consecutive count.
  const before = groups.map((g) => g.client.rankStates()[0]!.dispatchedUnpinned);
  const servedSince = () => groups.map((g, i) => g.client.rankStates()[0]!.dispatchedUnpinned - before[i]!);
  for (let i = 0; i < 10 && servedSince().some((n) => n === 0); i++) {
    const short = sendCompletion(gateway.url, SHORT, { stream: true, label: `short #${i}` });
    opened.push(short);
    const o = await short.done;
    assert.ok(o.sse !== null && o.sse.done && o.sse.finishReason === 'length' && o.sse.error === null, JSON.stringify(o));
  }
  assert.ok(servedSince().every((n) => n > 0), `both groups served a request after the skipped message: ${servedSince()}`);
  await waitUntil(
    () => opened.slice(0, 2).every((r, i) => r.progress()!.text.length > textAtSkip[i]!),
    'both long streams kept streaming after the skipped message',
    () => opened.map((r) => r.progress()),
  );
  assert.ok(opened.slice(0, 2).every((r) => !r.ended() && r.progress()!.error === null), 'no long stream saw an error');
  t.diagnostic(`(e) one undecodable message per group: counted ${ms(countedAt - injectedAt)} after it was sent; the long streams kept streaming`);

  // So two more in a row stay below the limit of 3 (1 + 2 undecodable messages, decodable output in between).
  for (const [i] of groups.entries()) {
    for (const frames of GARBAGE.slice(1)) await injectors[i]!.send(frames);
  }
  await waitUntil(() => groups.every((g) => g.client.stats.decodeErrors === 3), 'each group counted three decode errors', () => groups.map((g) => g.client.stats));
  const textNow = opened.map((r) => r.progress()!.text.length);
  await waitUntil(() => opened.slice(0, 2).every((r, i) => r.progress()!.text.length > textNow[i]!), 'both long streams kept streaming');
  for (const g of groups) {
    assert.ok(g.client.canServe(), `${g.engine}: 1 + 2 undecodable messages with decodable output in between do not fail the group`);
    assert.equal(await errorsOf(g), 3);
  }

  // Both streams end by a client disconnect with their text intact; fresh requests still complete; nothing in flight.
  const longs = opened.slice(0, 2);
  for (const r of longs) r.cancel();
  for (const o of await Promise.all(longs.map((r) => r.done))) {
    assert.ok(o.cancelled && o.sse !== null && o.sse.error === null && o.sse.text.length > 0, JSON.stringify(o));
  }
  const fresh = [0, 1].map((i) => sendCompletion(gateway.url, SHORT, { stream: true, label: `fresh #${i}` }));
  opened.push(...fresh);
  for (const o of await Promise.all(fresh.map((r) => r.done))) {
    assert.ok(o.sse !== null && o.sse.done && o.sse.finishReason === 'length' && o.sse.error === null, JSON.stringify(o));
  }
  await waitUntil(() => groups.every((g) => inFlight(g).every((n) => n === 0) && g.client.registeredCount === 0), 'in-flight sets empty', () => groups.map(inFlight));
});
