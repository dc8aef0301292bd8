/**
 * End to end, undecodable engine output (issue #3 part 4; dp-routing.md 6, SMG PR #2175; gateway.md 15.3; issue 26
 * part 3): frames that neither wire can decode arrive like a rank's output.
 * (d) From a rogue peer (a ZeroMQ PUSH connected to a lockstep vLLM group's output socket, `GARBAGE` in bursts of
 *     three): counted and skipped; the group's ranks keep streaming, so nobody is blamed and nothing fails (SMG fails
 *     the whole group after three in a row, and so did this gateway before issue 26: every rank was marked dead for
 *     good). From a broken rank (a simulated rank told to push only undecodable bytes, as one whose wire version the
 *     gateway does not speak would): once it held requests and sent nothing decodable for 3 s while the garbage came,
 *     its requests end with a 502 decode error naming it and it leaves rotation; its healthy sibling keeps serving.
 * (e) A single undecodable message is logged, counted (`model_gateway_decode_errors_total`) and skipped in both
 *     engine families while real requests keep streaming; requests submitted after it complete.
 *
 * In-process only (not in `npm run test:e2e:workers`): it injects undecodable frames into a group's output socket and
 * checks the engine client's decode-error and failure counters directly. Nothing asserts a duration.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startGateway, type RunningGroup } from '../../src/gateway/index.js';
import { spawnSimRanks } from '../../src/sim/spawn.js';
import { freshDir } from '../helpers/async.js';
import { freePort } from '../helpers/net.js';
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
  groupCounter,
  type SentRequest,
} from './failure-helpers.js';
import { waitUntil } from './spread-helpers.js';

test(
  "(d) rogue undecodable frames in a lockstep vLLM group's output: counted and skipped, its ranks keep serving; nothing fails",
  TEST_TIMEOUT,
  async (t) => {
    const s = await FailureScenario.start({
      failing: { engine: 'vllm', sim: 2, lockstep: true, simArgs: [...SIM_ARGS] },
      healthy: { engine: 'tokenspeed', sim: 1, simArgs: [...SIM_ARGS] },
    });
    t.after(() => s.close());
    assert.equal(s.failing.client.lockstep, true);
    const load = await s.placeLoad();

    const injector = FrameInjector.connect(s.failing.endpoints.output);
    t.after(() => injector.close());
    const sent = 5 * GARBAGE.length;
    for (let burst = 0; burst < 5; burst++) for (const frames of GARBAGE) await injector.send(frames);
    await waitUntil(
      () => s.failing.client.stats.decodeErrors >= sent,
      'every garbage frame is read',
      () => s.failing.client.stats,
    );
    assert.equal(s.failing.client.stats.decodeErrors, sent);
    assert.equal(await groupCounter(s.gateway.url, 'model_gateway_decode_errors_total', s.failing.name), sent);
    assert.equal(await groupCounter(s.gateway.url, 'model_gateway_decode_errors_total', s.healthy.name), 0);
    assert.ok(s.failing.client.canServe(), 'the group still serves');
    assert.deepEqual(s.failing.client.stats.failures, {});
    assert.equal(s.failing.client.stats.decodeSuspects, 0, 'the ranks kept streaming: no rank is blamed');
    assert.deepEqual(
      s.failing.client.rankStates().map((r) => r.state),
      ['ready', 'ready'],
    );
    load.nonStreaming.cancel();
    await load.nonStreaming.done;
    await s.assertServesAndDrains(load.streams, []);
  },
);

test(
  '(d2) a rank whose every output is undecodable is blamed alone: its requests end with a 502 naming it; its sibling serves',
  TEST_TIMEOUT,
  async (t) => {
    const dir = await freshDir('mgw-decode-');
    const { logger } = captureLogs('warn');
    const handshake = `tcp://127.0.0.1:${await freePort()}`;
    const gateway = await startGateway({
      port: 0,
      logger,
      modelId: MODEL,
      waitForRanks: false,
      rankStallTimeoutMs: 120_000,
      groups: [{ engine: 'tokenspeed', engineUrl: `ipc://${dir.dir}/w`, handshake, dpSize: 2 }],
    });
    const healthy = await spawnSimRanks({
      handshakeAddress: handshake,
      count: 1,
      firstEngineIndex: 0,
      extraArgs: [...SIM_ARGS],
    });
    const broken = await spawnSimRanks({
      handshakeAddress: handshake,
      count: 1,
      firstEngineIndex: 1,
      extraArgs: [...SIM_ARGS, '--fault-undecodable-output'],
    });
    t.after(async () => {
      await gateway.close();
      await Promise.all([healthy.stop(), broken.stop()]);
      await dir.cleanup();
    });
    const client = gateway.groups[0]!.client;
    await client.whenAllJoined();

    const onBroken = sendCompletion(gateway.url, LONG, { stream: true, dpRank: 1, label: 'on the broken rank' });
    const onHealthy = sendCompletion(gateway.url, LONG, { stream: true, dpRank: 0, label: 'on the healthy rank' });
    assert.equal(await onBroken.headers, 200);
    assert.equal(await onHealthy.headers, 200);
    t.after(() => onHealthy.cancel());
    const o = await onBroken.done;
    assert.ok(
      o.sse !== null && o.sse.error !== null,
      `the broken rank's stream ends with an error event: ${JSON.stringify(o)}`,
    );
    assert.equal(o.sse.error.code, 'decode');
    assert.match(o.sse.error.message, /DP rank 1 sent no decodable output for \d+ ms while holding 1 request/);
    assert.deepEqual(
      client.rankStates().map((r) => r.state),
      ['ready', 'stalled'],
    );
    assert.equal(client.stats.decodeSuspects, 1);
    assert.deepEqual(client.stats.failures, {}, 'no group failure');
    const nonStream = sendCompletion(gateway.url, SHORT, {
      stream: false,
      dpRank: 1,
      label: 'pinned to the stalled rank',
    });
    assert.equal((await nonStream.done).status, 503, 'the stalled rank takes nothing');
    const fresh = sendCompletion(gateway.url, SHORT, { stream: true, label: 'unpinned' });
    const f = await fresh.done;
    assert.ok(
      f.sse !== null && f.sse.done && f.sse.finishReason === 'length' && f.sse.error === null,
      `the healthy rank serves: ${JSON.stringify(f)}`,
    );
    assert.equal(onHealthy.ended(), false, "the healthy rank's stream is untouched");
    assert.equal(onHealthy.progress()?.error ?? null, null);
  },
);

test(
  '(e) a single undecodable output is logged, counted and skipped while real requests keep streaming (TokenSpeed and vLLM)',
  TEST_TIMEOUT,
  async (t) => {
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

    const errorsOf = (g: RunningGroup) => groupCounter(gateway.url, 'model_gateway_decode_errors_total', g.name);
    for (const g of groups) assert.equal(await errorsOf(g), 0);

    // One garbage message into each group's output socket.
    const injectedAt = performance.now();
    for (const g of groups) {
      const injector = FrameInjector.connect(g.endpoints.output);
      injectors.push(injector);
      await injector.send(GARBAGE[0]!);
    }
    await waitUntil(
      () => groups.every((g) => g.client.stats.decodeErrors === 1),
      'each group counted one decode error',
      () => groups.map((g) => g.client.stats),
    );
    const countedAt = performance.now();
    const textAtSkip = opened.map((r) => r.progress()!.text.length);
    for (const g of groups) {
      assert.ok(g.client.canServe(), `${g.engine} group still serving after one undecodable message`);
      assert.deepEqual(g.client.stats.failures, {});
      assert.equal(await errorsOf(g), 1, `${g.engine}: model_gateway_decode_errors_total counts the skipped message`);
      const logged = records.filter(
        (r) => String(r.msg).startsWith('skipping an undecodable engine output message') && r['worker'] === g.worker,
      );
      assert.equal(logged.length, 1, `${g.engine}: the skip is logged once at warn`);
      assert.equal(logged[0]!['skipped'], 1);
    }

    // Short requests submitted now complete in each group (sent one at a time until both groups served one: the tie
    // between the groups goes to a rotating scan start): their outputs were decoded after the skipped message.
    const before = groups.map((g) => g.client.rankStates()[0]!.dispatchedUnpinned);
    const servedSince = () => groups.map((g, i) => g.client.rankStates()[0]!.dispatchedUnpinned - before[i]!);
    for (let i = 0; i < 10 && servedSince().some((n) => n === 0); i++) {
      const short = sendCompletion(gateway.url, SHORT, { stream: true, label: `short #${i}` });
      opened.push(short);
      const o = await short.done;
      assert.ok(
        o.sse !== null && o.sse.done && o.sse.finishReason === 'length' && o.sse.error === null,
        JSON.stringify(o),
      );
    }
    assert.ok(
      servedSince().every((n) => n > 0),
      `both groups served a request after the skipped message: ${servedSince()}`,
    );
    await waitUntil(
      () => opened.slice(0, 2).every((r, i) => r.progress()!.text.length > textAtSkip[i]!),
      'both long streams kept streaming after the skipped message',
      () => opened.map((r) => r.progress()),
    );
    assert.ok(
      opened.slice(0, 2).every((r) => !r.ended() && r.progress()!.error === null),
      'no long stream saw an error',
    );
    t.diagnostic(
      `(e) one undecodable message per group: counted ${ms(countedAt - injectedAt)} after it was sent; the long streams kept streaming`,
    );

    // Two more: still only counted (the ranks keep streaming, so none is blamed).
    for (const [i] of groups.entries()) {
      for (const frames of GARBAGE.slice(1)) await injectors[i]!.send(frames);
    }
    await waitUntil(
      () => groups.every((g) => g.client.stats.decodeErrors === 3),
      'each group counted three decode errors',
      () => groups.map((g) => g.client.stats),
    );
    const textNow = opened.map((r) => r.progress()!.text.length);
    await waitUntil(
      () => opened.slice(0, 2).every((r, i) => r.progress()!.text.length > textNow[i]!),
      'both long streams kept streaming',
    );
    for (const g of groups) {
      assert.ok(g.client.canServe(), `${g.engine}: undecodable messages while the ranks stream do not fail the group`);
      assert.equal(g.client.stats.decodeSuspects, 0);
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
      assert.ok(
        o.sse !== null && o.sse.done && o.sse.finishReason === 'length' && o.sse.error === null,
        JSON.stringify(o),
      );
    }
    await waitUntil(
      () => groups.every((g) => inFlight(g).every((n) => n === 0) && g.client.registeredCount === 0),
      'in-flight sets empty',
      () => groups.map(inFlight),
    );
  },
);
